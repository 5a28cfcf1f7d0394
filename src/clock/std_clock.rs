use crate::clock::{Clock, Timer, WakeRegistration};
use core::task::Waker;
use core::time::Duration;
use std::time::Instant;

/// `std::time::Instant`, measured from the moment the clock was created.
///
/// ```
/// use tollgate::{Clock, StdClock};
/// let c = StdClock::new();
/// assert!(c.now() < 60_000_000_000);
/// ```
#[derive(Clone, Copy, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    ///
    /// ```
    /// let _ = tollgate::StdClock::new();
    /// ```
    pub fn new() -> StdClock {
        StdClock {
            origin: Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> StdClock {
        StdClock::new()
    }
}

impl Clock for StdClock {
    fn now(&self) -> u64 {
        crate::clock::saturating_nanos(Instant::now().saturating_duration_since(self.origin))
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

impl Timer for StdClock {
    /// The shared timer thread, cancellable ([`WakeRegistration::timer`]).
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration::timer(duration, waker)
    }
}
