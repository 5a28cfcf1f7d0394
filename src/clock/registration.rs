//! [`WakeRegistration`]: what [`Timer::register_wake`](crate::Timer::register_wake) returns.

use crate::sync::{AtomicU32, Ordering};
use alloc::sync::Arc;
use alloc::task::Wake;
use core::fmt;
use core::task::Waker;
#[cfg(feature = "std")]
use {
    super::queue::{QueueHandle, SharedQueue},
    super::timer::Timer,
    core::time::Duration,
    std::time::Instant,
};

/// One pending wake-up, registered with [`Timer::register_wake`](crate::Timer::register_wake):
/// the clock wakes the waker once, when the requested time has passed. **Dropping the
/// registration cancels the wake-up** where the clock can (the std clocks' timer thread, a
/// [`ManualClock::new_frozen`](crate::ManualClock::new_frozen) clock). A future keeps one while
/// it waits, and registers again only when the deadline or the waker changed or
/// [`WakeRegistration::is_fired`]: spurious polls add nothing to any queue.
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
/// let registration = clock.register_wake(Duration::from_millis(5), &Waker::from(Arc::new(Nop)));
/// assert_eq!(clock.pending_wakes(), 1);
/// assert!(!registration.is_fired());
/// drop(registration); // cancelled: the clock forgets the waker
/// assert_eq!(clock.pending_wakes(), 0);
/// ```
#[must_use = "dropping a registration cancels its wake-up"]
pub struct WakeRegistration {
    kind: Kind,
}

enum Kind {
    /// The waker was woken already (or there is nothing left to wait for).
    Fired,
    /// Handed to a fire-and-forget hook through a waker that records its firing.
    Forwarded(Arc<Flagged>),
    /// An entry in the shared timer thread's queue.
    #[cfg(feature = "std")]
    Timer(QueueHandle<&'static Timer, Instant>),
    /// An entry in a frozen manual clock's queue.
    #[cfg(feature = "std")]
    Manual(QueueHandle<Arc<SharedQueue<u64>>, u64>),
}

impl WakeRegistration {
    /// A registration whose wake-up has already been delivered.
    ///
    /// ```
    /// assert!(tollgate::WakeRegistration::fired().is_fired());
    /// ```
    pub fn fired() -> WakeRegistration {
        WakeRegistration { kind: Kind::Fired }
    }

    /// Registers through a fire-and-forget hook such as [`Timer::wake_after`](crate::Timer::wake_after):
    /// `hook` receives a waker that wakes `waker` and records that it did, so
    /// [`WakeRegistration::is_fired`] is exact. Dropping the registration cannot cancel the
    /// hook's wake-up, but with `std` lets the hook hold a small flag instead of the task.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::task::{Wake, Waker};
    /// use tollgate::WakeRegistration;
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let mut kept = None;
    /// let registration = WakeRegistration::forward(&Waker::from(Arc::new(Nop)), |w| kept = Some(w.clone()));
    /// assert!(!registration.is_fired());
    /// kept.unwrap().wake();
    /// assert!(registration.is_fired());
    /// ```
    pub fn forward(waker: &Waker, hook: impl FnOnce(&Waker)) -> WakeRegistration {
        let flagged = Arc::new(Flagged {
            fired: AtomicU32::new(0),
            #[cfg(feature = "std")]
            waker: std::sync::Mutex::new(Some(waker.clone())),
            #[cfg(not(feature = "std"))]
            waker: waker.clone(),
        });
        hook(&Waker::from(flagged.clone()));
        WakeRegistration {
            kind: Kind::Forwarded(flagged),
        }
    }

    /// Registers with tollgate's shared timer thread (on `std::time::Instant`, started on first
    /// use): what the std clocks return. Dropping it removes its entry at once. If the thread
    /// cannot be started, the call sleeps at most 10 ms (never longer than `duration`), then
    /// wakes the waker: the task re-polls at a bounded rate instead of spinning.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::task::{Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::WakeRegistration;
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let registration = WakeRegistration::timer(Duration::from_secs(60), &Waker::from(Arc::new(Nop)));
    /// assert!(!registration.is_fired());
    /// drop(registration); // the timer forgets it
    /// ```
    #[cfg(feature = "std")]
    pub fn timer(duration: Duration, waker: &Waker) -> WakeRegistration {
        WakeRegistration {
            kind: Kind::Timer(super::timer::TIMER.register(duration, waker)),
        }
    }

    #[cfg(feature = "std")]
    pub(crate) fn from_manual(handle: QueueHandle<Arc<SharedQueue<u64>>, u64>) -> WakeRegistration {
        WakeRegistration {
            kind: Kind::Manual(handle),
        }
    }

    /// Whether the wake-up has been delivered (or can no longer come): then register again.
    ///
    /// ```
    /// assert!(tollgate::WakeRegistration::fired().is_fired());
    /// ```
    pub fn is_fired(&self) -> bool {
        match &self.kind {
            Kind::Fired => true,
            Kind::Forwarded(f) => f.fired.load(Ordering::Acquire) != 0,
            #[cfg(feature = "std")]
            Kind::Timer(handle) => handle.is_fired(),
            #[cfg(feature = "std")]
            Kind::Manual(handle) => handle.is_fired(),
        }
    }

    /// Lets the wake-up come even though the registration is dropped: the fire-and-forget
    /// behaviour of [`Timer::wake_after`](crate::Timer::wake_after).
    pub(crate) fn detach(mut self) {
        // A forwarded registration's record is left as it is: the hook wakes the task.
        match core::mem::replace(&mut self.kind, Kind::Fired) {
            #[cfg(feature = "std")]
            Kind::Timer(handle) => handle.detach(),
            #[cfg(feature = "std")]
            Kind::Manual(handle) => handle.detach(),
            _ => {}
        }
    }

    /// The wake-ups queued in the shared timer thread: a probe for tests and measurements.
    #[cfg(feature = "std")]
    #[doc(hidden)]
    pub fn timer_queue_len() -> usize {
        super::timer::TIMER.len()
    }
}

// A forwarded registration takes the task's waker out of its record (see `Flagged`).
impl Drop for WakeRegistration {
    fn drop(&mut self) {
        #[cfg(feature = "std")]
        if let Kind::Forwarded(flagged) = &self.kind {
            // Taken under the lock, dropped outside it.
            let waker = crate::sync::ignore_poison(flagged.waker.lock()).take();
            drop(waker);
        }
    }
}

impl fmt::Debug for WakeRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.kind {
            Kind::Fired => "fired",
            Kind::Forwarded(_) => "forwarded",
            #[cfg(feature = "std")]
            Kind::Timer(_) => "timer",
            #[cfg(feature = "std")]
            Kind::Manual(_) => "manual",
        };
        f.debug_struct("WakeRegistration")
            .field("source", &source)
            .field("fired", &self.is_fired())
            .finish()
    }
}

/// The waker a fire-and-forget hook receives from [`WakeRegistration::forward`]. With `std` the
/// task's waker is behind a lock, so dropping the registration takes it out: the hook's entry
/// (up to an hour in the shared timer) does not keep a dropped future's task alive.
struct Flagged {
    fired: AtomicU32,
    #[cfg(feature = "std")]
    waker: std::sync::Mutex<Option<Waker>>,
    #[cfg(not(feature = "std"))]
    waker: Waker,
}

impl Wake for Flagged {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(1, Ordering::Release);
        #[cfg(feature = "std")]
        {
            // Cloned under the lock, woken outside it.
            let waker = crate::sync::ignore_poison(self.waker.lock()).clone();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        #[cfg(not(feature = "std"))]
        self.waker.wake_by_ref();
    }
}
