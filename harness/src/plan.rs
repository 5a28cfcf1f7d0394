//! The plan of a comparison — [`Regime`]s, [`CellSpec`]s, [`Plan`] — and its validation.
//! Pure data: nothing here runs, builds a strategy or prints.
//!
//! # Regimes (exact definitions)
//! The quota is `rate` tokens per second with capacity `burst` (per key for keyed strategies).
//!
//! | regime | default rate (tokens/s) | default burst | starts | what it measures |
//! |---|---|---|---|---|
//! | `allow` | 1 000 000 000 | 1 000 000 000 | full | the write path: every op admitted (no host offers 1e9 ops/s to one limiter) |
//! | `deny` | 1 | 1 000 | drained (the runner takes the whole burst of every key first) | the refusal path: one admission per second per key, every other op refused |
//! | `mixed` | 10 000 000 | 10 000 (1 ms of rate) | full | both paths: 10 M tokens/s is around the offered load of one contended word on a 2–4 core host, so a fair share of ops is admitted and the rest refused |
//!
//! `--rate` and `--burst` replace the rate and the burst in every selected regime (the regime
//! then only decides whether the bucket starts full or drained).
//!
//! # Rounds
//! Each cell's duration is split into [`Plan::rounds`] rounds; in round `r` the strategies of
//! one threads × regime run one after the other in the order [`round_order`] gives (rotated by
//! one per round), each on a fresh limiter for [`Plan::round_duration`]. See [`crate::cell`]
//! for how the rounds are combined.

use crate::Error;
use std::time::Duration;
use tollgate::Quota;

/// The traffic a cell applies; see the [module docs](self) for the exact definitions.
///
/// ```
/// use tollgate_bench::Regime;
/// assert_eq!(Regime::Deny.name(), "deny");
/// assert!(Regime::Deny.starts_drained());
/// assert_eq!((Regime::Mixed.default_rate(), Regime::Mixed.default_burst()), (10_000_000, 10_000));
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Regime {
    /// Rate and burst far above the offered load: everything is admitted.
    Allow,
    /// The bucket starts drained and refills slowly: nearly everything is refused.
    Deny,
    /// A rate around the offered load: both paths run.
    Mixed,
}

impl Regime {
    /// All regimes, in table order.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::Regime::ALL.len(), 3);
    /// ```
    pub const ALL: [Regime; 3] = [Regime::Allow, Regime::Deny, Regime::Mixed];

    /// The name used on the command line and in every output.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::Regime::Allow.name(), "allow");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Regime::Allow => "allow",
            Regime::Deny => "deny",
            Regime::Mixed => "mixed",
        }
    }

    /// Tokens per second unless `--rate` says otherwise.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::Regime::Deny.default_rate(), 1);
    /// ```
    pub fn default_rate(self) -> u64 {
        match self {
            Regime::Allow => 1_000_000_000,
            Regime::Deny => 1,
            Regime::Mixed => 10_000_000,
        }
    }

    /// The capacity unless `--burst` says otherwise.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::Regime::Allow.default_burst(), 1_000_000_000);
    /// ```
    pub fn default_burst(self) -> u64 {
        match self {
            Regime::Allow => 1_000_000_000,
            Regime::Deny => 1_000,
            Regime::Mixed => 10_000,
        }
    }

    /// Whether the runner drains the bucket (every key's) before timing.
    ///
    /// ```
    /// assert!(!tollgate_bench::Regime::Allow.starts_drained());
    /// ```
    pub fn starts_drained(self) -> bool {
        self == Regime::Deny
    }
}

/// One cell: how many threads, which regime and quota, for how long.
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{CellSpec, Regime};
/// let spec = CellSpec::new(2, Regime::Mixed, Duration::from_millis(10));
/// assert_eq!((spec.rate, spec.burst, spec.cost, spec.keys), (10_000_000, 10_000, 1, 1000));
/// assert_eq!(spec.quota().unwrap().burst(), 10_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSpec {
    /// Threads hammering the limiter.
    pub threads: usize,
    /// The traffic.
    pub regime: Regime,
    /// Distinct keys keyed strategies draw from (uniformly, per operation).
    pub keys: u64,
    /// Tokens per operation.
    pub cost: u64,
    /// Tokens per second.
    pub rate: u64,
    /// Capacity in tokens.
    pub burst: u64,
    /// How long the threads run.
    pub duration: Duration,
    /// Seed of the per-thread key generators.
    pub seed: u64,
}

impl CellSpec {
    /// A cell with the regime's default quota, cost 1, 1000 keys and seed 0.
    ///
    /// ```
    /// use tollgate_bench::{CellSpec, Regime};
    /// let spec = CellSpec::new(1, Regime::Allow, std::time::Duration::from_millis(5));
    /// assert_eq!(spec.rate, 1_000_000_000);
    /// ```
    pub fn new(threads: usize, regime: Regime, duration: Duration) -> CellSpec {
        CellSpec {
            threads,
            regime,
            keys: 1000,
            cost: 1,
            rate: regime.default_rate(),
            burst: regime.default_burst(),
            duration,
            seed: 0,
        }
    }

    /// The quota: `rate` tokens per second, capacity `burst`.
    ///
    /// ```
    /// use tollgate_bench::{CellSpec, Regime};
    /// let mut spec = CellSpec::new(1, Regime::Allow, std::time::Duration::from_millis(5));
    /// spec.burst = 0;
    /// assert!(spec.quota().is_err());
    /// ```
    pub fn quota(&self) -> Result<Quota, tollgate::ConfigError> {
        Quota::new(self.rate, Duration::from_secs(1), self.burst)
    }

    /// The cell's quota, once the spec is known to be runnable: a valid quota, a cost within
    /// the burst, at least one thread and one key. The error says which option to change.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{CellSpec, Regime};
    /// let mut spec = CellSpec::new(1, Regime::Deny, Duration::from_millis(5));
    /// assert!(spec.checked_quota().is_ok());
    /// spec.cost = spec.burst + 1;
    /// assert!(spec.checked_quota().unwrap_err().to_string().contains("exceeds the burst"));
    /// ```
    pub fn checked_quota(&self) -> Result<Quota, Error> {
        let quota = self.quota().map_err(|e| {
            Error::Plan(format!(
                "regime {}: rate {} /s with burst {}: {e}",
                self.regime.name(),
                self.rate,
                self.burst
            ))
        })?;
        if self.cost > self.burst {
            return Err(Error::Plan(format!(
                "regime {}: --cost {} exceeds the burst {}; every request would be refused (raise --burst or lower --cost)",
                self.regime.name(),
                self.cost,
                self.burst
            )));
        }
        if self.threads == 0 || self.keys == 0 {
            return Err(Error::Plan(
                "threads and keys must be at least 1".to_owned(),
            ));
        }
        Ok(quota)
    }
}

/// What a comparison runs: every strategy at every thread count on every regime.
///
/// ```
/// use tollgate_bench::{Plan, Regime};
/// let plan = Plan::new(vec![1, 2], vec![Regime::Allow], std::time::Duration::from_millis(5));
/// assert_eq!(plan.cells().len(), 2);
/// assert_eq!(Plan::default_duration(81), std::time::Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Thread counts, ascending.
    pub threads: Vec<usize>,
    /// Regimes, in table order.
    pub regimes: Vec<Regime>,
    /// Keys for keyed strategies.
    pub keys: u64,
    /// Tokens per operation.
    pub cost: u64,
    /// Overrides every regime's rate.
    pub rate: Option<u64>,
    /// Overrides every regime's burst.
    pub burst: Option<u64>,
    /// Per cell, all rounds together.
    pub duration: Duration,
    /// Rounds each cell's duration is split into ([`Plan::DEFAULT_ROUNDS`] unless set).
    pub rounds: usize,
    /// Seed of the key generators.
    pub seed: u64,
}

impl Plan {
    /// The rounds a cell is measured in unless told otherwise: odd, so that the median is
    /// one round's measurement, and enough that one disturbed round is outvoted.
    pub const DEFAULT_ROUNDS: usize = 5;

    /// The shortest round [`Plan::validate`] accepts (the shortest `--duration`).
    pub const MIN_ROUND: Duration = Duration::from_micros(1);

    /// A plan with cost 1, 1000 keys, the regimes' default quotas, [`Plan::DEFAULT_ROUNDS`]
    /// rounds and seed 0.
    ///
    /// ```
    /// let plan = tollgate_bench::Plan::new(vec![1], tollgate_bench::Regime::ALL.to_vec(), std::time::Duration::from_millis(5));
    /// assert_eq!(plan.cells().len(), 3);
    /// assert_eq!(plan.rounds, tollgate_bench::Plan::DEFAULT_ROUNDS);
    /// ```
    pub fn new(threads: Vec<usize>, regimes: Vec<Regime>, duration: Duration) -> Plan {
        Plan {
            threads,
            regimes,
            keys: 1000,
            cost: 1,
            rate: None,
            burst: None,
            duration,
            rounds: Plan::DEFAULT_ROUNDS,
            seed: 0,
        }
    }

    /// How long each strategy runs in one round: the cell's duration divided by the rounds
    /// (rounded down to whole nanoseconds; the whole duration when `rounds` is 0, which
    /// [`Plan::validate`] refuses).
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut plan = tollgate_bench::Plan::new(vec![1], vec![], Duration::from_secs(1));
    /// plan.rounds = 4;
    /// assert_eq!(plan.round_duration(), Duration::from_millis(250));
    /// ```
    pub fn round_duration(&self) -> Duration {
        match u32::try_from(self.rounds) {
            Ok(0) => self.duration,
            Ok(n) => self.duration / n,
            Err(_) => Duration::ZERO,
        }
    }

    /// The per-cell duration (all rounds together) when none is given: 1 s, shortened so that
    /// all `cells` together measure for at most 100 s (so that the default run, with setup, ends
    /// within about two minutes), and never below 10 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::Plan;
    /// assert_eq!(Plan::default_duration(200), Duration::from_millis(500));
    /// assert_eq!(Plan::default_duration(100_000), Duration::from_millis(10));
    /// ```
    pub fn default_duration(cells: usize) -> Duration {
        let budget = Duration::from_secs(100);
        let per = budget / u32::try_from(cells.max(1)).unwrap_or(u32::MAX);
        per.clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// The cells of one strategy, in run order: regime, then threads.
    ///
    /// ```
    /// use tollgate_bench::{Plan, Regime};
    /// let mut plan = Plan::new(vec![1, 4], vec![Regime::Deny], std::time::Duration::from_millis(5));
    /// plan.rate = Some(50);
    /// let cells = plan.cells();
    /// assert_eq!((cells[1].threads, cells[1].rate, cells[1].burst), (4, 50, 1000));
    /// ```
    pub fn cells(&self) -> Vec<CellSpec> {
        let mut cells = Vec::new();
        for &regime in &self.regimes {
            for &threads in &self.threads {
                cells.push(CellSpec {
                    threads,
                    regime,
                    keys: self.keys,
                    cost: self.cost,
                    rate: self.rate.unwrap_or(regime.default_rate()),
                    burst: self.burst.unwrap_or(regime.default_burst()),
                    duration: self.duration,
                    seed: self.seed,
                });
            }
        }
        cells
    }

    /// Checks, without running or building anything, that there is something to run, that
    /// every cell's quota is valid, that the cost fits the burst and that a round lasts at
    /// least [`Plan::MIN_ROUND`]. [`crate::compare()`] also
    /// builds every strategy once per regime before running ([`crate::compare::check`]).
    ///
    /// ```
    /// use tollgate_bench::{Plan, Regime};
    /// let mut plan = Plan::new(vec![1], vec![Regime::Deny], std::time::Duration::from_millis(5));
    /// assert!(plan.validate().is_ok());
    /// plan.cost = 5000;
    /// let err = plan.validate().unwrap_err();
    /// assert!(err.to_string().contains("exceeds the burst"), "{err}");
    /// plan.cost = 1;
    /// plan.rounds = 10_000;
    /// assert!(plan.validate().unwrap_err().to_string().contains("--rounds"));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        if self.threads.is_empty() || self.regimes.is_empty() {
            return Err(Error::Plan(
                "nothing to run: no threads or regimes".to_owned(),
            ));
        }
        if self.rounds == 0 {
            return Err(Error::Plan("--rounds must be at least 1".to_owned()));
        }
        if self.round_duration() < Plan::MIN_ROUND {
            return Err(Error::Plan(format!(
                "--duration {:?} split into --rounds {} leaves {:?} per round, under {:?}: lengthen --duration or lower --rounds",
                self.duration,
                self.rounds,
                self.round_duration(),
                Plan::MIN_ROUND
            )));
        }
        for spec in self.first_cells() {
            spec.checked_quota()?;
        }
        Ok(())
    }

    /// One cell per regime (at the first thread count): what a quota depends on.
    pub(crate) fn first_cells(&self) -> impl Iterator<Item = CellSpec> + '_ {
        let first = self.threads.first().copied();
        self.cells()
            .into_iter()
            .filter(move |c| Some(c.threads) == first)
    }
}

/// The order the strategies of one threads × regime run in, in round `round` (indices into the
/// strategy list): the list rotated left by `round`, so that across as many rounds as there are
/// strategies each one runs first once and last once.
///
/// ```
/// use tollgate_bench::plan::round_order;
/// assert_eq!(round_order(3, 0), [0, 1, 2]);
/// assert_eq!(round_order(3, 1), [1, 2, 0]);
/// assert_eq!(round_order(3, 5), [2, 0, 1]);
/// assert!(round_order(0, 4).is_empty());
/// ```
pub fn round_order(strategies: usize, round: usize) -> Vec<usize> {
    (0..strategies)
        .map(|i| (i + round % strategies.max(1)) % strategies)
        .collect()
}
