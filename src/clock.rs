//! Clocks ([`Clock`]: monotonic nanoseconds) and waiting on them ([`Timer`]).

mod manual;
pub use manual::ManualClock;

mod alarm;
#[cfg(feature = "std")]
mod queue;
mod registration;
#[cfg(feature = "std")]
mod timer;
pub(crate) use alarm::Alarm;
pub use registration::WakeRegistration;

#[cfg(feature = "std")]
mod std_clock;
#[cfg(feature = "std")]
pub use std_clock::StdClock;

#[cfg(all(feature = "std", not(tollgate_loom)))]
mod coarse;
#[cfg(all(feature = "std", not(tollgate_loom)))]
pub use coarse::CoarseClock;

#[cfg(feature = "quanta")]
mod quanta_clock;
#[cfg(feature = "quanta")]
pub use quanta_clock::QuantaClock;

use core::task::Waker;
use core::time::Duration;

/// A monotonic source of time in nanoseconds since the clock's own origin; waiting on it is
/// [`Timer`]'s. A reading earlier than one a limiter already acted on (TSCs out of step across
/// cores) only refuses more, never admits more.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// clock.sleep(Duration::from_millis(3)); // a manual clock advances itself instead of sleeping
/// assert_eq!(clock.now(), 3_000_000);
/// ```
pub trait Clock {
    /// Nanoseconds since the clock's origin.
    fn now(&self) -> u64;

    /// Waits for `duration` on this clock. The default spins (it works everywhere, `no_std`
    /// included); the std clocks sleep the thread, [`ManualClock`] advances itself.
    fn sleep(&self, duration: Duration) {
        let until = self.now().saturating_add(saturating_nanos(duration));
        while self.now() < until {
            crate::sync::spin_loop();
        }
    }
}

/// The wake-up machinery of a [`Clock`], which only the waiting code needs: blocking waits
/// ([`Bucket::acquire`](crate::Bucket::acquire), ...) sleep until an instant, async ones
/// ([`Bucket::until_ready`](crate::Bucket::until_ready), ...) register a wake-up. Every method
/// has a default that works on any clock (the shared timer thread with `std`):
///
/// ```
/// use tollgate::{Bucket, Clock, ManualClock, Quota, Timer};
/// struct Ticks(ManualClock);
/// impl Clock for Ticks {
///     fn now(&self) -> u64 {
///         self.0.now()
///     }
/// }
/// impl Timer for Ticks {}
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), Ticks(ManualClock::new()));
/// bucket.try_acquire(1).unwrap();
/// assert!(bucket.try_acquire_for(1, std::time::Duration::ZERO).is_err());
/// ```
pub trait Timer: Clock {
    /// Waits until the instant `at` on this clock (the scale of [`Clock::now`]). An instant, not
    /// a duration: one computed from an earlier reading would wake a caller that stalled since
    /// then late (and move an advancing [`ManualClock`] too far). The default reads the clock
    /// right before [`Clock::sleep`]ing the rest; [`ManualClock`] moves to `at` (never back),
    /// or, frozen, waits for a test to move it there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Timer};
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(2));
    /// clock.sleep_until(5_000_000);
    /// assert_eq!(clock.now(), 5_000_000);
    /// clock.sleep_until(1_000_000); // already past: returns at once
    /// assert_eq!(clock.now(), 5_000_000);
    /// ```
    fn sleep_until(&self, at: u64) {
        let now = self.now();
        if now < at {
            self.sleep(Duration::from_nanos(at - now));
        }
    }

    /// Has `waker` woken once `duration` has passed on this clock, without blocking (the hook
    /// behind the default [`Timer::register_wake`]); an early wake-up is harmless (the future
    /// registers again). The default, with `std`, queues it on tollgate's shared timer thread;
    /// without `std` it wakes at once (a busy wait). [`ManualClock`] advances itself, then wakes
    /// — **moving the time of every limiter sharing it** — or, frozen, waits for the test.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::task::{Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Timer};
    ///
    /// struct Flag(AtomicBool);
    /// impl Wake for Flag {
    ///     fn wake(self: Arc<Self>) {
    ///         self.0.store(true, Ordering::SeqCst);
    ///     }
    /// }
    /// let flag = Arc::new(Flag(AtomicBool::new(false)));
    /// let clock = ManualClock::new();
    /// clock.wake_after(Duration::from_millis(5), &Waker::from(flag.clone()));
    /// assert_eq!(clock.now(), 5_000_000);
    /// assert!(flag.0.load(Ordering::SeqCst));
    /// ```
    fn wake_after(&self, duration: Duration, waker: &Waker) {
        #[cfg(feature = "std")]
        timer::wake_after(duration, waker);
        #[cfg(not(feature = "std"))]
        {
            let _ = duration;
            waker.wake_by_ref();
        }
    }

    /// [`Timer::wake_after`] returning the registration, which cancels the wake-up when dropped
    /// (where the clock can) and says whether it has fired: a waiting future holds one, so the
    /// clock's queue is bounded by the live futures, not by their polls. The default forwards to
    /// [`Timer::wake_after`] ([`WakeRegistration::forward`]: not cancellable); the std clocks,
    /// and any clock on `std::time::Instant`, return the cancellable [`WakeRegistration::timer`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::task::{Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Timer};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let clock = ManualClock::new();
    /// let registration = clock.register_wake(Duration::from_millis(5), &Waker::from(Arc::new(Nop)));
    /// assert!(registration.is_fired()); // an auto-advancing manual clock wakes at once
    /// assert_eq!(clock.now(), 5_000_000);
    /// ```
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration::forward(waker, |w| self.wake_after(duration, w))
    }

    /// [`Timer::register_wake`] for the instant `at` (why an instant: [`Timer::sleep_until`]).
    /// The default reads the clock right before registering the rest.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::task::{Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Timer};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let clock = ManualClock::new_frozen();
    /// let registration = clock.register_wake_at(100, &Waker::from(Arc::new(Nop)));
    /// clock.advance(Duration::from_nanos(100));
    /// assert!(registration.is_fired());
    /// ```
    fn register_wake_at(&self, at: u64, waker: &Waker) -> WakeRegistration {
        self.register_wake(Duration::from_nanos(at.saturating_sub(self.now())), waker)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration)
    }
}

impl<C: Timer + ?Sized> Timer for &C {
    fn sleep_until(&self, at: u64) {
        (**self).sleep_until(at)
    }
    fn wake_after(&self, duration: Duration, waker: &Waker) {
        (**self).wake_after(duration, waker)
    }
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        (**self).register_wake(duration, waker)
    }
    fn register_wake_at(&self, at: u64, waker: &Waker) -> WakeRegistration {
        (**self).register_wake_at(at, waker)
    }
}

/// The clock `Bucket::new` and friends use: [`QuantaClock`] with the `quanta` feature (default),
/// else [`StdClock`] with `std`, else [`ManualClock`].
#[cfg(feature = "quanta")]
pub type DefaultClock = QuantaClock;
/// The clock `Bucket::new` and friends use: [`StdClock`] (`std` without `quanta`).
#[cfg(all(feature = "std", not(feature = "quanta")))]
pub type DefaultClock = StdClock;
/// Without `std`, only a default type parameter: pass your clock to `Bucket::with_clock`.
#[cfg(not(feature = "std"))]
pub type DefaultClock = ManualClock;

/// Converts a duration to whole nanoseconds, saturating at `u64::MAX`.
#[inline]
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
