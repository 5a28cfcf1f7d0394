//! [`CellResult`]: the measurements of one cell, and [`Round`]: one of the rounds it was
//! measured in.
//!
//! # Rounds
//! [`crate::compare()`] measures each cell in [`Plan::rounds`](crate::Plan::rounds) rounds: in
//! every round each strategy of the same threads × regime runs once, for the cell's duration
//! divided by the rounds, on a fresh limiter, in an order rotated by one from round to round.
//! A burst of load from elsewhere on the host then hits one round of every strategy alike
//! rather than all of one strategy's time. [`crate::run_cell`] is one round.
//!
//! # Measures
//! * `ops`: operations completed by all threads, all rounds together; `seconds`: wall time from
//!   the start signal to the last thread joining, summed over the rounds.
//! * `ops_per_sec`: the **median round's** operations / wall seconds (of an even number of
//!   rounds, the lower of the two middle ones); `ops_per_sec_min`, `ops_per_sec_max`: the
//!   slowest and the fastest round's, the spread.
//! * `ns_per_op = seconds × threads / ops` of the median round (the mean time one thread spends
//!   per operation, comparable to the percentiles); `fairness`: the median round's fewest /
//!   most operations per thread (1 = every thread did the same work).
//! * `p50_ns`, `p99_ns`, `p999_ns`: every 64th operation of each thread is timed with the cell's
//!   clock (which adds one clock read, ~10–25 ns, to each sample) into an HDR histogram
//!   (3 significant digits), merged over every thread of every round.
//! * `admitted`: tokens admitted (admitted ops × cost, plus the drain of the deny regime), summed
//!   over the rounds.
//! * `bound`: the sum of the rounds' bounds. A round's bound is `burst + ⌈rate × elapsed⌉` where
//!   `elapsed` runs from the round clock's reading just before its limiter is built (its life
//!   cannot start earlier) to its reading after every thread has joined (for a policy of several
//!   quotas, [`RateLimiter::extra_quotas`](crate::RateLimiter::extra_quotas), the tightest of
//!   the quotas' bounds). Keyed strategies: that bound per key, times the keys that admitted at
//!   least once (for an exact limiter, every key drawn).
//!   A round with `admitted > bound` is a correctness failure ([`CellResult::over_bound`]); every
//!   round is checked against its own bound, so the sums never hide one round over its bound.
//! * Keyed strategies are also checked **per key**: every thread counts its admissions per key
//!   (a plain array of its own, no atomics, the same cost for every keyed strategy), the counts
//!   are added up after the join, and a round in which any key admitted more than its own bound
//!   is a correctness failure too, even when the sum over the keys stays within the sum of
//!   their bounds. [`Round::busiest_key`] is the key that admitted the most in the round.
//! * `admitted_per_thread_min`, `admitted_per_thread_max`: the median round's fewest and most
//!   operations admitted by one thread (a starved thread is a starved request).
//! * `central_cas_per_admission`, `shared_writes_per_refusal` (the sharded bucket only, `null`
//!   for the others): what scales with cores, counted by the bucket itself
//!   (`tollgate::counters`), all rounds together — compare-and-swap attempts on its central word
//!   per admission, and writes to cache lines that more than one core writes (the central
//!   word's line, the read-mostly line, another shard's lease) per refusal; and
//!   `advances_per_refusal`, the near leases taken by refusals (each writes the central line
//!   twice: its hand-out count and its CAS), to tell those writes from the rest.

use crate::{CellSpec, Error, Kind, Regime, Strategy};
use hdrhistogram::Histogram;

/// A keyed strategy's key that admitted the most tokens in a round, against its own bound
/// (every key has the same bound: `burst + ⌈rate × elapsed⌉`, the tightest of a policy's
/// quotas).
///
/// ```
/// use tollgate_bench::cell::BusiestKey;
/// let k = BusiestKey { key: 3, admitted: 12, bound: 11 };
/// assert!(k.over_bound());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BusiestKey {
    /// The key (`0..keys`; of several with the same count, the lowest).
    pub key: u64,
    /// Tokens this key admitted in the round (its admitted operations × cost, plus its share of
    /// the deny regime's drain).
    pub admitted: u64,
    /// The most tokens an exact limiter may admit on one key in this round.
    pub bound: u64,
}

impl BusiestKey {
    /// Whether this key admitted more than its own bound.
    ///
    /// ```
    /// use tollgate_bench::cell::BusiestKey;
    /// assert!(!BusiestKey { key: 0, admitted: 11, bound: 11 }.over_bound());
    /// ```
    pub fn over_bound(&self) -> bool {
        self.admitted > self.bound
    }
}

/// What a round's threads counted of the sharded bucket's writes to shared cache lines
/// (`tollgate::counters`), all threads together.
///
/// ```
/// use tollgate_bench::cell::Counters;
/// let c = Counters { admissions: 80, refusals: 20, central_cas: 10, refusing_writes: 2, advances: 1 };
/// assert_eq!(c.decisions(), 100);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Decisions admitted.
    pub admissions: u64,
    /// Decisions refused.
    pub refusals: u64,
    /// Compare-and-swap attempts on the central word.
    pub central_cas: u64,
    /// Writes to shared lines by decisions that refused.
    pub refusing_writes: u64,
    /// Near leases taken by refusals (advances), each a write of the central line.
    pub advances: u64,
}

impl Counters {
    /// Decisions counted.
    pub fn decisions(&self) -> u64 {
        self.admissions + self.refusals
    }

    /// Adds one thread's counts and decisions (`ops`, of which `admitted` admitted).
    pub(crate) fn add(&mut self, c: &tollgate::counters::Counts, ops: u64, admitted: u64) {
        self.admissions += admitted;
        self.refusals += ops - admitted;
        self.central_cas += c.central_cas;
        self.refusing_writes += c.refusing_writes;
        self.advances += c.advances;
    }

    fn merge(&mut self, c: &Counters) {
        self.admissions += c.admissions;
        self.refusals += c.refusals;
        self.central_cas += c.central_cas;
        self.refusing_writes += c.refusing_writes;
        self.advances += c.advances;
    }
}

/// One round of a cell: the strategy ran once, on a fresh limiter, for the round's duration.
///
/// ```
/// use tollgate_bench::cell::Round;
/// let r = Round { index: 0, position: 1, ops: 64, seconds: 0.5, ops_per_sec: 128.0, admitted: 64, bound: 65, thread_admitted_min: 64, thread_admitted_max: 64, counters: None, busiest_key: None };
/// assert!(!r.over_bound());
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Round {
    /// Which round (0 = the first).
    pub index: usize,
    /// Where this strategy ran within the round (0 = first).
    pub position: usize,
    /// Operations completed by all threads.
    pub ops: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Throughput, all threads together.
    pub ops_per_sec: f64,
    /// Tokens admitted (for keyed strategies, summed over the keys).
    pub admitted: u64,
    /// The most tokens an exact limiter may admit in this round (for keyed strategies, the
    /// per-key bound summed over the keys that admitted at least once).
    pub bound: u64,
    /// The fewest operations one thread had admitted.
    pub thread_admitted_min: u64,
    /// The most operations one thread had admitted.
    pub thread_admitted_max: u64,
    /// The sharded bucket's shared-line writes (`None` for other strategies, and left out of
    /// the JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// Keyed strategies: the key that admitted the most, checked against its own bound;
    /// `None` for unkeyed strategies (and left out of the JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest_key: Option<BusiestKey>,
}

impl Round {
    /// Whether the strategy admitted more in this round than an exact limiter can: more than
    /// the round's bound, or, for a keyed strategy, more than one key's own bound on some key.
    ///
    /// ```
    /// use tollgate_bench::cell::{BusiestKey, Round};
    /// let r = Round { index: 2, position: 0, ops: 64, seconds: 0.5, ops_per_sec: 128.0, admitted: 64, bound: 11, thread_admitted_min: 64, thread_admitted_max: 64, counters: None, busiest_key: None };
    /// assert!(r.over_bound());
    /// // Within the sum of the per-key bounds, but one key over its own bound.
    /// let key = BusiestKey { key: 0, admitted: 10, bound: 2 };
    /// let r = Round { admitted: 25, bound: 32, busiest_key: Some(key), ..r };
    /// assert!(r.over_bound());
    /// ```
    pub fn over_bound(&self) -> bool {
        self.admitted > self.bound || self.key_over_bound().is_some()
    }

    /// The key that admitted more than its own bound in this round, if any (keyed strategies).
    ///
    /// ```
    /// use tollgate_bench::cell::{BusiestKey, Round};
    /// let key = BusiestKey { key: 7, admitted: 10, bound: 2 };
    /// let r = Round { index: 0, position: 0, ops: 64, seconds: 0.5, ops_per_sec: 128.0, admitted: 25, bound: 32, thread_admitted_min: 25, thread_admitted_max: 25, counters: None, busiest_key: Some(key) };
    /// assert_eq!(r.key_over_bound().map(|k| k.key), Some(7));
    /// ```
    pub fn key_over_bound(&self) -> Option<&BusiestKey> {
        self.busiest_key.as_ref().filter(|k| k.over_bound())
    }
}

/// The measurements of one cell (see the [module docs](self) for each field's definition).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
/// let r = run_cell(&strategies::by_name("cas").unwrap(), &CellSpec::new(1, Regime::Deny, Duration::from_millis(5))).unwrap();
/// assert!(r.admitted <= r.bound && !r.over_bound());
/// assert_eq!(r.rounds.len(), 1);
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
    /// Operations completed, all rounds.
    pub ops: u64,
    /// Wall-clock seconds, all rounds.
    pub seconds: f64,
    /// Throughput, all threads together, of the median round.
    pub ops_per_sec: f64,
    /// The slowest round's throughput.
    pub ops_per_sec_min: f64,
    /// The fastest round's throughput.
    pub ops_per_sec_max: f64,
    /// Mean nanoseconds per operation seen by one thread, in the median round.
    pub ns_per_op: f64,
    /// Median sampled latency.
    pub p50_ns: u64,
    /// 99th percentile sampled latency.
    pub p99_ns: u64,
    /// 99.9th percentile sampled latency.
    pub p999_ns: u64,
    /// Tokens admitted, all rounds.
    pub admitted: u64,
    /// The sum of the rounds' bounds.
    pub bound: u64,
    /// Fewest / most operations per thread, in the median round.
    pub fairness: f64,
    /// The fewest operations one thread had admitted, in the median round.
    pub admitted_per_thread_min: u64,
    /// The most operations one thread had admitted, in the median round.
    pub admitted_per_thread_max: u64,
    /// Central-word compare-and-swap attempts per admission, all rounds (the sharded bucket
    /// only).
    pub central_cas_per_admission: Option<f64>,
    /// Writes to shared cache lines per refusal, all rounds (the sharded bucket only).
    pub shared_writes_per_refusal: Option<f64>,
    /// Near leases taken by refusals (advances) per refusal, all rounds (the sharded bucket
    /// only): the shared-line writes above that are a lease's hand-out, not the refusal's own.
    pub advances_per_refusal: Option<f64>,
    /// Every round, in the order they ran.
    pub rounds: Vec<Round>,
}

impl CellResult {
    /// Whether the strategy admitted more than an exact limiter can, in any round (or in all
    /// of them together).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
    /// let r = run_cell(&strategies::always_admit(), &CellSpec::new(1, Regime::Deny, Duration::from_millis(5))).unwrap();
    /// assert!(r.over_bound());
    /// ```
    pub fn over_bound(&self) -> bool {
        self.admitted > self.bound || self.rounds.iter().any(Round::over_bound)
    }

    /// The first round over its bound, if any: what a violation message quotes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
    /// let r = run_cell(&strategies::always_admit(), &CellSpec::new(1, Regime::Deny, Duration::from_millis(5))).unwrap();
    /// assert_eq!(r.first_round_over_bound().map(|r| r.index), Some(0));
    /// ```
    pub fn first_round_over_bound(&self) -> Option<&Round> {
        self.rounds.iter().find(|r| r.over_bound())
    }
}

/// What the runner measured in one round, before the rounds of a cell are combined.
#[derive(Debug)]
pub(crate) struct Measured {
    pub(crate) round: Round,
    /// Keys drawn from (1 for unkeyed strategies).
    pub(crate) keys: u64,
    pub(crate) ns_per_op: f64,
    pub(crate) fairness: f64,
    pub(crate) hist: Histogram<u64>,
}

/// An empty latency histogram: 1 ns to 1 hour, 3 significant digits (every round's and every
/// thread's, so that they merge).
pub(crate) fn new_histogram() -> Result<Histogram<u64>, Error> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| Error::Histogram(e.to_string()))
}

/// The round whose throughput is the median (of an even count, the lower middle one), as an
/// index into `rounds`; `None` when there is none.
pub(crate) fn median_index(rounds: &[Measured]) -> Option<usize> {
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&a, &b| {
        rounds[a]
            .round
            .ops_per_sec
            .total_cmp(&rounds[b].round.ops_per_sec)
    });
    order.get(rounds.len().checked_sub(1)? / 2).copied()
}

impl CellResult {
    /// Combines the rounds of `strategy` on `spec` (see the [module docs](self)).
    pub(crate) fn from_rounds(
        strategy: &Strategy,
        spec: &CellSpec,
        rounds: Vec<Measured>,
    ) -> Result<CellResult, Error> {
        let median = median_index(&rounds)
            .ok_or_else(|| Error::Plan("a cell needs at least one round".to_owned()))?;
        let mut hist = new_histogram()?;
        let (mut ops, mut seconds, mut admitted, mut bound) = (0u64, 0f64, 0u64, 0u64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut counters: Option<Counters> = None;
        for m in &rounds {
            if let Some(c) = &m.round.counters {
                counters.get_or_insert_with(Counters::default).merge(c);
            }
            hist.add(&m.hist)
                .map_err(|e| Error::Histogram(format!("{e:?}")))?;
            ops = ops.saturating_add(m.round.ops);
            seconds += m.round.seconds;
            admitted = admitted.saturating_add(m.round.admitted);
            bound = bound.saturating_add(m.round.bound);
            min = min.min(m.round.ops_per_sec);
            max = max.max(m.round.ops_per_sec);
        }
        let mid = &rounds[median];
        Ok(CellResult {
            strategy: strategy.name().to_owned(),
            kind: strategy.kind(),
            threads: spec.threads,
            regime: spec.regime,
            keys: mid.keys,
            ops,
            seconds,
            ops_per_sec: mid.round.ops_per_sec,
            ops_per_sec_min: min,
            ops_per_sec_max: max,
            ns_per_op: mid.ns_per_op,
            p50_ns: hist.value_at_quantile(0.5),
            p99_ns: hist.value_at_quantile(0.99),
            p999_ns: hist.value_at_quantile(0.999),
            admitted,
            bound,
            fairness: mid.fairness,
            admitted_per_thread_min: mid.round.thread_admitted_min,
            admitted_per_thread_max: mid.round.thread_admitted_max,
            central_cas_per_admission: counters
                .map(|c| c.central_cas as f64 / c.admissions.max(1) as f64),
            shared_writes_per_refusal: counters
                .map(|c| c.refusing_writes as f64 / c.refusals.max(1) as f64),
            advances_per_refusal: counters.map(|c| c.advances as f64 / c.refusals.max(1) as f64),
            rounds: rounds.into_iter().map(|m| m.round).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(index: usize, ops_per_sec: f64, admitted: u64, bound: u64, ns: u64) -> Measured {
        let mut hist = new_histogram().unwrap();
        hist.record(ns).unwrap();
        Measured {
            round: Round {
                index,
                position: index % 2,
                ops: (ops_per_sec / 10.0) as u64,
                seconds: 0.1,
                ops_per_sec,
                admitted,
                bound,
                thread_admitted_min: 0,
                thread_admitted_max: 0,
                counters: None,
                busiest_key: None,
            },
            keys: 1,
            ns_per_op: 1e9 / ops_per_sec,
            fairness: ops_per_sec / 1e3,
            hist,
        }
    }

    fn strategy() -> Strategy {
        crate::strategies::always_admit()
    }

    fn spec() -> CellSpec {
        CellSpec::new(1, Regime::Mixed, std::time::Duration::from_millis(1))
    }

    #[test]
    fn the_median_round_is_reported_with_the_spread() {
        let rounds = [500.0, 100.0, 900.0, 300.0, 700.0]
            .iter()
            .enumerate()
            .map(|(i, &t)| measured(i, t, 10, 20, 10 * (i as u64 + 1)))
            .collect();
        let c = CellResult::from_rounds(&strategy(), &spec(), rounds).unwrap();
        assert_eq!(c.ops_per_sec, 500.0);
        assert_eq!((c.ops_per_sec_min, c.ops_per_sec_max), (100.0, 900.0));
        // ns/op and fairness come from the same (median) round.
        assert_eq!((c.ns_per_op, c.fairness), (1e9 / 500.0, 0.5));
        assert_eq!((c.ops, c.admitted, c.bound), (250, 50, 100));
        assert!((c.seconds - 0.5).abs() < 1e-9);
        // Latencies merged: one sample of 10, 20, ..., 50 ns.
        assert_eq!((c.p50_ns, c.p999_ns), (30, 50));
        assert_eq!(
            c.rounds.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(!c.over_bound());
    }

    #[test]
    fn of_an_even_count_the_lower_middle_round_is_the_median() {
        let rounds = [4.0, 1.0, 3.0, 2.0]
            .iter()
            .enumerate()
            .map(|(i, &t)| measured(i, t, 0, 1, 1))
            .collect::<Vec<_>>();
        assert_eq!(median_index(&rounds), Some(3));
        assert_eq!(median_index(&rounds[..1]), Some(0));
        assert_eq!(median_index(&[]), None);
        assert!(CellResult::from_rounds(&strategy(), &spec(), Vec::new()).is_err());
    }

    #[test]
    fn one_round_over_its_bound_fails_the_cell_even_when_the_sums_do_not() {
        let rounds = (0..5)
            .map(|i| measured(i, 100.0, if i == 2 { 12 } else { 0 }, 11, 1))
            .collect();
        let c = CellResult::from_rounds(&strategy(), &spec(), rounds).unwrap();
        assert!(c.admitted <= c.bound, "the sums hide it: {c:?}");
        assert!(c.over_bound());
        assert_eq!(c.first_round_over_bound().map(|r| r.index), Some(2));
        let report = crate::Report {
            cells: vec![c],
            duration: std::time::Duration::from_secs(1),
            rounds: 5,
            cost: 1,
            seed: 0,
        };
        assert_eq!(report.violations().len(), 1);
        let msg = &report.violation_messages()[0];
        assert!(
            msg.contains("admitted 12 tokens, more than the bound 11")
                && msg.ends_with("round 3 of 5"),
            "{msg}"
        );
    }
}
