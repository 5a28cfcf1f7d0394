//! `cas-coarse`: [`tollgate::Bucket`] on a [`tollgate::CoarseClock`] over the cell's clock.

use super::{Kind, RateLimiter, Setup, Strategy};
use std::time::Duration;
use tollgate::{Bucket, CoarseClock, Denied, Quota};

/// How often the coarse clock's upkeep thread refreshes the cached reading.
const REFRESH: Duration = Duration::from_millis(1);

/// `cas-coarse`: [`tollgate::Bucket`] on a [`CoarseClock`] — a cached reading refreshed by an
/// upkeep thread, so a decision costs one load instead of a TSC read. Decisions are exact at
/// the cached reading, which lags the cell's clock by up to the refresh interval plus the
/// thread's wake-up latency (it only ever refuses more).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{CoarseClock, ManualClock, Quota};
/// use tollgate_bench::{strategies::CasCoarse, RateLimiter};
/// let clock = CoarseClock::with_source(ManualClock::new(), Duration::from_millis(1)).unwrap();
/// let m = CasCoarse::new(Quota::per_second(2).unwrap(), clock);
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct CasCoarse(Bucket<CoarseClock>);

impl CasCoarse {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::CoarseClock::new(Duration::from_millis(1)).unwrap();
    /// let m = tollgate_bench::strategies::CasCoarse::new(tollgate::Quota::per_second(1).unwrap(), clock);
    /// # let _ = m;
    /// ```
    pub fn new(quota: Quota, clock: CoarseClock) -> CasCoarse {
        CasCoarse(Bucket::with_clock(quota, clock))
    }
}

impl RateLimiter for CasCoarse {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "cas-coarse"
    }
}

/// The `cas-coarse` strategy: a fresh coarse clock (and upkeep thread) per cell, over the cell's
/// clock, so the bound is measured on the clock it lags.
pub(super) fn cas_coarse() -> Strategy {
    Strategy::new("cas-coarse", Kind::Tollgate, |s: &Setup| {
        let clock = CoarseClock::with_source(s.clock, REFRESH)
            .map_err(|e| format!("cas-coarse: no upkeep thread: {e}"))?;
        Ok(Box::new(CasCoarse::new(s.quota, clock)) as Box<dyn RateLimiter>)
    })
    .with_description("tollgate::Bucket on a CoarseClock (cached reading, 1 ms refresh)")
}
