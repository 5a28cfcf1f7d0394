//! Running cells: one strategy × thread count × regime, timed, sampled and checked against the
//! bound.
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
//! # Measures
//! * `ops`: operations completed by all threads; `seconds`: wall time from the start signal to
//!   the last thread joining.
//! * `ops_per_sec = ops / seconds`; `ns_per_op = seconds × threads / ops` (the mean time one
//!   thread spends per operation, comparable to the percentiles).
//! * `p50_ns`, `p99_ns`, `p999_ns`: every 64th operation of each thread is timed with the cell's
//!   clock (which adds one clock read, ~10–25 ns, to each sample) into an HDR histogram
//!   (3 significant digits).
//! * `admitted`: tokens admitted (admitted ops × cost, plus the drain of the deny regime).
//! * `bound`: `burst + ⌈rate × elapsed⌉` where `elapsed` runs from the cell clock's reading just
//!   before the limiter is built (its life cannot start earlier) to its reading after every
//!   thread has joined. Keyed strategies: that bound per key, times the keys touched.
//!   `admitted > bound` is a correctness failure.
//! * `fairness`: min/max operations per thread (1 = every thread did the same work).
//!
//! Every operation goes through `&dyn RateLimiter` (one indirect call, the same for all).

use crate::limiter::{Kind, RateLimiter, Setup, Strategy};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tollgate::{Clock, DefaultClock, Quota};

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
    /// assert!(spec.checked_quota().unwrap_err().contains("exceeds the burst"));
    /// ```
    pub fn checked_quota(&self) -> Result<Quota, String> {
        let quota = self.quota().map_err(|e| {
            format!(
                "regime {}: rate {} /s with burst {}: {e}",
                self.regime.name(),
                self.rate,
                self.burst
            )
        })?;
        if self.cost > self.burst {
            return Err(format!(
                "regime {}: --cost {} exceeds the burst {}; every request would be refused (raise --burst or lower --cost)",
                self.regime.name(),
                self.cost,
                self.burst
            ));
        }
        if self.threads == 0 || self.keys == 0 {
            return Err("threads and keys must be at least 1".to_owned());
        }
        Ok(quota)
    }
}

/// The measurements of one cell (see the [module docs](self) for each field's definition).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
/// let r = run_cell(&strategies::by_name("cas").unwrap(), &CellSpec::new(1, Regime::Deny, Duration::from_millis(5))).unwrap();
/// assert!(r.admitted <= r.bound && !r.over_bound());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CellResult {
    /// Strategy name.
    pub strategy: String,
    /// Tollgate's, a peer's or a custom strategy.
    pub kind: Kind,
    /// Threads.
    pub threads: usize,
    /// Regime.
    pub regime: Regime,
    /// Keys drawn from (1 for unkeyed strategies).
    pub keys: u64,
    /// Operations completed.
    pub ops: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Throughput, all threads together.
    pub ops_per_sec: f64,
    /// Mean nanoseconds per operation seen by one thread.
    pub ns_per_op: f64,
    /// Median sampled latency.
    pub p50_ns: u64,
    /// 99th percentile sampled latency.
    pub p99_ns: u64,
    /// 99.9th percentile sampled latency.
    pub p999_ns: u64,
    /// Tokens admitted.
    pub admitted: u64,
    /// The most tokens an exact limiter may admit in this cell.
    pub bound: u64,
    /// Fewest / most operations per thread.
    pub fairness: f64,
    /// Throughput relative to `std-mutex` at the same threads and regime, when it ran.
    pub vs_std_mutex: Option<f64>,
}

impl CellResult {
    /// Whether the strategy admitted more than an exact limiter can.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
    /// let r = run_cell(&strategies::always_admit(), &CellSpec::new(1, Regime::Deny, Duration::from_millis(5))).unwrap();
    /// assert!(r.over_bound());
    /// ```
    pub fn over_bound(&self) -> bool {
        self.admitted > self.bound
    }
}

/// splitmix64: a small, seedable generator for the keys (quality matters little here).
#[inline]
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct ThreadOut {
    ops: u64,
    admitted_ops: u64,
    hist: Histogram<u64>,
    touched: Vec<bool>,
}

/// Runs batches of 64 operations, the first of each timed, until `stop` (at least one batch).
#[inline]
fn drive(
    stop: &AtomicBool,
    clock: &DefaultClock,
    hist: &mut Histogram<u64>,
    mut op: impl FnMut() -> bool,
) -> (u64, u64) {
    let (mut ops, mut admitted) = (0u64, 0u64);
    // At least one batch, even if the stop signal came before this thread got a core.
    loop {
        let t0 = clock.now();
        let ok = op();
        let t1 = clock.now();
        hist.saturating_record(t1.saturating_sub(t0));
        admitted += u64::from(ok);
        for _ in 0..63 {
            admitted += u64::from(op());
        }
        ops += 64;
        if stop.load(Ordering::Relaxed) {
            return (ops, admitted);
        }
    }
}

/// What every thread of a cell shares.
#[derive(Clone, Copy)]
struct Shared<'a> {
    limiter: &'a dyn RateLimiter,
    cost: u64,
    keys: u64,
    clock: &'a DefaultClock,
    go: &'a AtomicBool,
    stop: &'a AtomicBool,
}

fn worker(sh: Shared<'_>, mut out: ThreadOut, mut rng: u64) -> ThreadOut {
    let Shared {
        limiter,
        cost,
        keys,
        clock,
        go,
        stop,
    } = sh;
    while !go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let (ops, admitted) = if limiter.is_keyed() {
        let touched = &mut out.touched;
        drive(stop, clock, &mut out.hist, || {
            let key = splitmix(&mut rng) % keys;
            touched[key as usize] = true;
            limiter.try_acquire_key(key, cost).is_ok()
        })
    } else {
        drive(stop, clock, &mut out.hist, || {
            limiter.try_acquire(cost).is_ok()
        })
    };
    out.ops = ops;
    out.admitted_ops = admitted;
    out
}

/// Runs one cell: builds a fresh limiter on a fresh clock, drains it for the deny regime,
/// runs `spec.threads` threads for `spec.duration`, and measures.
///
/// Errors (as a message) when the quota is invalid, the cost exceeds the burst, the strategy
/// cannot be built with this setup, or a thread cannot be spawned. Over-admission is *not* an
/// error here: it is reported by [`CellResult::over_bound`].
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
/// let spec = CellSpec::new(2, Regime::Mixed, Duration::from_millis(10));
/// let r = run_cell(&strategies::by_name("std-mutex").unwrap(), &spec).unwrap();
/// assert_eq!((r.threads, r.regime, r.keys), (2, Regime::Mixed, 1));
/// assert!(r.ops > 0 && r.admitted <= r.bound);
/// ```
pub fn run_cell(strategy: &Strategy, spec: &CellSpec) -> Result<CellResult, String> {
    let quota = spec.checked_quota()?;
    let key_slots = usize::try_from(spec.keys).map_err(|_| "too many keys".to_owned())?;
    let clock = DefaultClock::default();
    // Clocks may share an origin (tollgate's `QuantaClock` is process-wide): the limiter's life
    // starts now, before it is built, so measuring from here keeps the bound an upper bound.
    let start_ns = clock.now();
    let setup = Setup {
        quota,
        keys: spec.keys,
        clock,
    };
    let limiter = strategy
        .build(&setup)
        .map_err(|e| format!("strategy {}: {e}", strategy.name()))?;
    let limiter: &dyn RateLimiter = &*limiter;
    let keyed = limiter.is_keyed();
    let keys = if keyed { spec.keys } else { 1 };

    let mut touched = vec![false; if keyed { key_slots } else { 1 }];
    let mut admitted = 0u128;
    if spec.regime.starts_drained() {
        for key in 0..keys {
            let r = if keyed {
                limiter.try_acquire_key(key, spec.burst)
            } else {
                limiter.try_acquire(spec.burst)
            };
            if r.is_ok() {
                admitted += u128::from(spec.burst);
            }
            touched[key as usize] = true;
        }
    }

    let mut outs = Vec::with_capacity(spec.threads);
    for _ in 0..spec.threads {
        outs.push(ThreadOut {
            ops: 0,
            admitted_ops: 0,
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .map_err(|e| format!("histogram: {e}"))?,
            touched: if keyed {
                vec![false; key_slots]
            } else {
                Vec::new()
            },
        });
    }

    let go = AtomicBool::new(false);
    let stop = crossbeam_utils::CachePadded::new(AtomicBool::new(false));
    let (outs, seconds) = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(spec.threads);
        let mut failed = None;
        for (i, out) in outs.into_iter().enumerate() {
            let mut rng = spec.seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
            splitmix(&mut rng);
            let shared = Shared {
                limiter,
                cost: spec.cost,
                keys,
                clock: &clock,
                go: &go,
                stop: &stop,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{i}"))
                .spawn_scoped(scope, move || worker(shared, out, rng));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    failed = Some(format!("cannot spawn thread {i}: {e}"));
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        go.store(true, Ordering::Release);
        let start = Instant::now();
        if failed.is_none() {
            std::thread::sleep(spec.duration);
        }
        stop.store(true, Ordering::Relaxed);
        let mut outs = Vec::with_capacity(handles.len());
        for h in handles {
            match h.join() {
                Ok(out) => outs.push(out),
                Err(_) => failed = Some("a benchmark thread panicked".to_owned()),
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        match failed {
            Some(e) => Err(e),
            None => Ok((outs, seconds)),
        }
    })?;
    let end_ns = clock.now();

    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let (mut ops, mut min_ops, mut max_ops) = (0u64, u64::MAX, 0u64);
    for out in &outs {
        ops += out.ops;
        min_ops = min_ops.min(out.ops);
        max_ops = max_ops.max(out.ops);
        admitted += u128::from(out.admitted_ops) * u128::from(spec.cost);
        hist.add(&out.hist)
            .map_err(|e| format!("histogram: {e:?}"))?;
        for (t, &o) in touched.iter_mut().zip(&out.touched) {
            *t |= o;
        }
    }
    if !keyed {
        touched[0] = true;
    }
    let touched_keys = touched.iter().filter(|&&t| t).count() as u128;
    let elapsed_ns = end_ns.saturating_sub(start_ns);
    let refill = (u128::from(spec.rate) * u128::from(elapsed_ns)).div_ceil(1_000_000_000);
    let bound = touched_keys * (u128::from(spec.burst) + refill);
    let threads = outs.len().max(1);
    Ok(CellResult {
        strategy: strategy.name().to_owned(),
        kind: strategy.kind(),
        threads: spec.threads,
        regime: spec.regime,
        keys,
        ops,
        seconds,
        ops_per_sec: ops as f64 / seconds,
        ns_per_op: if ops == 0 {
            f64::INFINITY
        } else {
            seconds * 1e9 * threads as f64 / ops as f64
        },
        p50_ns: hist.value_at_quantile(0.5),
        p99_ns: hist.value_at_quantile(0.99),
        p999_ns: hist.value_at_quantile(0.999),
        admitted: u64::try_from(admitted).unwrap_or(u64::MAX),
        bound: u64::try_from(bound).unwrap_or(u64::MAX),
        fairness: if max_ops == 0 {
            1.0
        } else {
            min_ops as f64 / max_ops as f64
        },
        vs_std_mutex: None,
    })
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
    /// Per cell.
    pub duration: Duration,
    /// Seed of the key generators.
    pub seed: u64,
}

impl Plan {
    /// A plan with cost 1, 1000 keys, the regimes' default quotas and seed 0.
    ///
    /// ```
    /// let plan = tollgate_bench::Plan::new(vec![1], tollgate_bench::Regime::ALL.to_vec(), std::time::Duration::from_millis(5));
    /// assert_eq!(plan.cells().len(), 3);
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
            seed: 0,
        }
    }

    /// The per-cell duration when none is given: 1 s, shortened so that all `cells` together
    /// measure for at most 100 s (so that the default run, with setup, ends within about two
    /// minutes), and never below 10 ms.
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

    /// Checks, without running anything, that every cell's quota is valid, that the cost fits
    /// the burst and that every strategy can be built for every regime.
    ///
    /// ```
    /// use tollgate_bench::{strategies, Plan, Regime};
    /// let mut plan = Plan::new(vec![1], vec![Regime::Deny], std::time::Duration::from_millis(5));
    /// plan.cost = 5000;
    /// let err = plan.validate(&strategies::builtins()).unwrap_err();
    /// assert!(err.contains("exceeds the burst"), "{err}");
    /// ```
    pub fn validate(&self, strategies: &[Strategy]) -> Result<(), String> {
        if self.threads.is_empty() || self.regimes.is_empty() || strategies.is_empty() {
            return Err("nothing to run: no threads, regimes or strategies".to_owned());
        }
        for spec in self.cells().iter().filter(|c| c.threads == self.threads[0]) {
            let quota = spec.checked_quota()?;
            let setup = Setup {
                quota,
                keys: spec.keys,
                clock: DefaultClock::default(),
            };
            for s in strategies {
                s.build(&setup).map_err(|e| {
                    format!(
                        "strategy {} in regime {}: {e}",
                        s.name(),
                        spec.regime.name()
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// Runs every cell of `plan` for every strategy (regime, then threads, then strategy), calling
/// `progress(done, total, label)` before each cell, and fills in the ratio to `std-mutex`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{compare, strategies, Plan, Regime};
/// let s = vec![strategies::by_name("std-mutex").unwrap(), strategies::by_name("cas").unwrap()];
/// let plan = Plan::new(vec![1], vec![Regime::Allow], Duration::from_millis(5));
/// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
/// assert_eq!(report.cells.len(), 2);
/// assert_eq!(report.cells[0].vs_std_mutex, Some(1.0));
/// assert!(report.violations().is_empty());
/// ```
pub fn compare(
    strategies: &[Strategy],
    plan: &Plan,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<crate::report::Report, String> {
    plan.validate(strategies)?;
    let specs = plan.cells();
    let total = specs.len() * strategies.len();
    let mut cells = Vec::with_capacity(total);
    for spec in &specs {
        for s in strategies {
            let label = format!(
                "{} · {} thread{} · {}",
                s.name(),
                spec.threads,
                if spec.threads == 1 { "" } else { "s" },
                spec.regime.name()
            );
            progress(cells.len(), total, &label);
            cells.push(run_cell(s, spec)?);
        }
    }
    progress(cells.len(), total, "done");
    let baseline: Vec<(usize, Regime, f64)> = cells
        .iter()
        .filter(|c| c.strategy == "std-mutex")
        .map(|c| (c.threads, c.regime, c.ops_per_sec))
        .collect();
    for c in &mut cells {
        c.vs_std_mutex = baseline
            .iter()
            .find(|b| b.0 == c.threads && b.1 == c.regime)
            .map(|b| c.ops_per_sec / b.2);
    }
    Ok(crate::report::Report {
        cells,
        duration: plan.duration,
        cost: plan.cost,
        seed: plan.seed,
    })
}
