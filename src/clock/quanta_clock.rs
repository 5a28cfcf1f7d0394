use crate::clock::Clock;
use core::time::Duration;

/// `quanta`'s calibrated TSC clock (falls back to the OS monotonic clock where the TSC is not
/// reliable), measured from the moment the clock was created. Eight bytes.
///
/// TSCs are not always in step across cores, so a reading can be slightly earlier than one
/// another core took: buckets tolerate that (see [`Clock`]).
///
/// ```
/// use tollgate::{Clock, QuantaClock};
/// let c = QuantaClock::new();
/// assert!(c.now() < 60_000_000_000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QuantaClock {
    origin: quanta::Instant,
}

impl QuantaClock {
    /// A clock whose origin is now.
    ///
    /// ```
    /// let _ = tollgate::QuantaClock::new();
    /// ```
    pub fn new() -> QuantaClock {
        QuantaClock {
            origin: quanta::Instant::now(),
        }
    }
}

impl Default for QuantaClock {
    fn default() -> QuantaClock {
        QuantaClock::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        crate::clock::nanos(quanta::Instant::now().saturating_duration_since(self.origin))
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}
