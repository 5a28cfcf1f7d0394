use crate::clock::{Clock, WakeRegistration};
use core::task::Waker;
use core::time::Duration;
use std::sync::OnceLock;

/// The process-wide calibrated `quanta` clock and its raw reading at first use (the origin).
/// Immutable once initialized; shared so that a `QuantaClock` costs no bytes in a bucket.
static SOURCE: OnceLock<(quanta::Clock, u64)> = OnceLock::new();

fn source() -> &'static (quanta::Clock, u64) {
    SOURCE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        (clock, origin)
    })
}

/// `quanta`'s calibrated TSC clock (it falls back to the OS monotonic clock where the TSC is not
/// reliable). Its origin is the first use of any `QuantaClock` in the process, so all of them
/// agree, and it is one pointer to that process-wide calibrated source.
///
/// TSCs are not always in step across cores: a reading below the origin reads as 0, and one
/// slightly earlier than another core's is tolerated by the buckets (see [`Clock`]).
///
/// ```
/// use tollgate::{Clock, QuantaClock};
/// let c = QuantaClock::new();
/// assert!(c.now() < 60_000_000_000_000);
/// ```
#[derive(Clone, Copy)]
#[cfg_attr(docsrs, doc(cfg(feature = "quanta")))]
pub struct QuantaClock {
    source: &'static (quanta::Clock, u64),
}

impl core::fmt::Debug for QuantaClock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QuantaClock")
            .field("now", &self.now())
            .finish()
    }
}

impl Default for QuantaClock {
    fn default() -> QuantaClock {
        QuantaClock::new()
    }
}

impl QuantaClock {
    /// A handle to the process-wide clock (calibrated on first use, which can take a few ms).
    ///
    /// ```
    /// let _ = tollgate::QuantaClock::new();
    /// ```
    pub fn new() -> QuantaClock {
        QuantaClock { source: source() }
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        let (clock, origin) = self.source;
        clock.delta_as_nanos(*origin, clock.raw())
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    /// The shared timer thread, cancellable ([`WakeRegistration::timer`]).
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration::timer(duration, waker)
    }
}
