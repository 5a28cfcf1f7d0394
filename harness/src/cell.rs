//! [`CellResult`]: the measurements of one cell.
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

use crate::{Kind, Regime};

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
