use crate::clock::{nanos, Clock};
use crate::sync::{AtomicU64, Ordering};
use alloc::sync::Arc;
use core::task::Waker;
use core::time::Duration;

/// A clock that moves only when told to. Clones share one time, so a test can hand a clone to
/// a bucket and move it from outside. Arithmetic saturates: it never wraps or panics.
///
/// [`Clock::sleep`] advances it by the requested time and returns at once, which makes every
/// waiting path deterministic in tests.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// let other = clock.clone();
/// other.advance(Duration::from_secs(2));
/// assert_eq!(clock.now(), 2_000_000_000);
/// clock.set(Duration::from_secs(1)); // may move backwards
/// assert_eq!(other.now(), 1_000_000_000);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time 0.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new().now(), 0);
    /// ```
    pub fn new() -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` ns).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.advance(Duration::MAX);
    /// assert_eq!(c.now(), u64::MAX);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        // `fetch_update` with a closure that always returns `Some` cannot fail.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the time since the origin; it may move backwards (saturating at `u64::MAX` ns).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.set(Duration::from_millis(5));
    /// assert_eq!(c.now(), 5_000_000);
    /// ```
    pub fn set(&self, since_origin: Duration) {
        self.nanos.store(nanos(since_origin), Ordering::Release);
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }

    /// Advances the clock by `duration`, then wakes `waker`: async waits are as deterministic
    /// as blocking ones.
    fn wake_after(&self, duration: Duration, waker: &Waker) {
        self.advance(duration);
        waker.wake_by_ref();
    }
}
