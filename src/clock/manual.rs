#[cfg(feature = "std")]
use super::queue::{wake_all, QueueHandle, SharedQueue};
use crate::clock::{saturating_nanos, Clock, Timer, WakeRegistration};
use crate::sync::{AtomicU64, Ordering};
use alloc::sync::Arc;
use core::fmt;
use core::task::Waker;
use core::time::Duration;

/// A clock that moves only when told to, for tests. Clones share one time, so a test can hand a
/// clone to a limiter and move it from outside. Arithmetic saturates: it never wraps or panics.
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
///
/// # Waiting
///
/// **A waiting call moves the shared time.** On a clock made by [`ManualClock::new`], a
/// blocking wait ([`Bucket::acquire`](crate::Bucket::acquire)) and an async one
/// ([`Bucket::until_ready`](crate::Bucket::until_ready)) *advance the clock* by the wait and
/// return (or wake) at once, for every limiter sharing the clock.
///
/// To keep time under the test's control, use [`ManualClock::new_frozen`]: time then moves only
/// through [`ManualClock::advance`] and [`ManualClock::set`], which wake the waiters they pass.
#[derive(Clone)]
pub struct ManualClock {
    /// One pointer, so a bucket on a manual clock is as small as on the default clock.
    shared: Arc<Shared>,
}

/// What clones of one clock share.
struct Shared {
    nanos: AtomicU64,
    /// Frozen clocks only: the wakers, by deadline, woken by `advance` and `set`.
    #[cfg(feature = "std")]
    waiters: Option<Arc<SharedQueue<u64>>>,
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
            shared: Arc::new(Shared {
                nanos: AtomicU64::new(0),
                #[cfg(feature = "std")]
                waiters: None,
            }),
        }
    }

    /// A clock at time 0 that **never moves by itself**: only [`ManualClock::advance`] and
    /// [`ManualClock::set`] move it, waking the waiters whose deadline they reach. An async wait
    /// queues its waker until then (a dropped [`WakeRegistration`] leaves the queue at once); a
    /// blocking one parks the thread until another thread moves the clock that far.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Clock, ManualClock, Quota};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut cx = Context::from_waker(&waker);
    /// let clock = ManualClock::new_frozen();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    /// bucket.try_acquire(10).unwrap();
    /// let mut fut = pin!(bucket.until_ready(1));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    /// assert_eq!(clock.now(), 0); // waiting did not move the time
    /// clock.advance(Duration::from_millis(99));
    /// assert_eq!(clock.pending_wakes(), 1);
    /// clock.advance(Duration::from_millis(1)); // reaches the deadline: the waker is woken
    /// assert_eq!(clock.pending_wakes(), 0);
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::from_millis(100))));
    /// ```
    #[cfg(feature = "std")]
    pub fn new_frozen() -> ManualClock {
        ManualClock {
            shared: Arc::new(Shared {
                nanos: AtomicU64::new(0),
                waiters: Some(Arc::new(SharedQueue::new())),
            }),
        }
    }

    /// Whether this clock was made by [`ManualClock::new_frozen`].
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// assert!(!ManualClock::new().is_frozen());
    /// assert!(ManualClock::new_frozen().is_frozen());
    /// ```
    pub fn is_frozen(&self) -> bool {
        #[cfg(feature = "std")]
        return self.shared.waiters.is_some();
        #[cfg(not(feature = "std"))]
        false
    }

    /// The wakers a frozen clock holds (not yet woken or cancelled); 0 for an advancing clock.
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
    /// clock.wake_after(Duration::from_secs(1), &Waker::from(Arc::new(Nop)));
    /// assert_eq!(clock.pending_wakes(), 1);
    /// clock.set(Duration::from_secs(1));
    /// assert_eq!(clock.pending_wakes(), 0);
    /// ```
    pub fn pending_wakes(&self) -> usize {
        #[cfg(feature = "std")]
        return self.shared.waiters.as_ref().map_or(0, |w| w.lock().len());
        #[cfg(not(feature = "std"))]
        0
    }

    /// Moves the clock forward by `by` (saturating), waking a frozen clock's waiters it reaches.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.advance(Duration::MAX);
    /// assert_eq!(c.now(), u64::MAX);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        let nanos = &self.shared.nanos;
        // Never fails: the closure always returns `Some`.
        let _ = nanos.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            Some(t.saturating_add(by))
        });
        self.wake_due();
    }

    /// Sets the time since the origin, even backwards (saturating); wakes the waiters it reaches.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    /// let c = ManualClock::new();
    /// c.set(Duration::from_millis(5));
    /// assert_eq!(c.now(), 5_000_000);
    /// ```
    pub fn set(&self, since_origin: Duration) {
        self.shared
            .nanos
            .store(saturating_nanos(since_origin), Ordering::Release);
        self.wake_due();
    }

    /// Frozen clocks: wakes the waiters due now. The time is read under the waiters' lock, as a
    /// registration reads it, so a waiter is woken here or sees the new time: none is lost.
    fn wake_due(&self) {
        #[cfg(feature = "std")]
        if let Some(waiters) = &self.shared.waiters {
            let due = waiters.lock().take_due(self.now());
            wake_all(due);
        }
    }

    /// Frozen clocks: queues `waker` for the instant `at(now)`, `now` read under the waiters'
    /// lock (so no `advance` or `set` falls in between), or wakes it at once if that instant is
    /// not in the future. `None` on a clock that advances itself.
    #[cfg(feature = "std")]
    fn queue_wake_with(
        &self,
        waker: &Waker,
        at: impl FnOnce(u64) -> u64,
    ) -> Option<WakeRegistration> {
        let waiters = self.shared.waiters.as_ref()?;
        let mut queue = waiters.lock();
        let now = self.now();
        let at = at(now);
        if at <= now {
            drop(queue);
            waker.wake_by_ref();
            return Some(WakeRegistration::fired());
        }
        let key = Some(queue.insert(at, waker));
        Some(WakeRegistration::from_manual(QueueHandle::new(
            waiters.clone(),
            key,
        )))
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .field("frozen", &self.is_frozen())
            .field("pending_wakes", &self.pending_wakes())
            .finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.shared.nanos.load(Ordering::Acquire)
    }

    /// Advances the clock by `duration`; a frozen clock blocks until another thread moves it.
    fn sleep(&self, duration: Duration) {
        #[cfg(feature = "std")]
        if self.is_frozen() {
            self.sleep_until(self.now().saturating_add(saturating_nanos(duration)));
            return;
        }
        self.advance(duration);
    }
}

impl Timer for ManualClock {
    /// Frozen, parks until a test moves the time to `at`; otherwise moves it to `at` if earlier.
    fn sleep_until(&self, at: u64) {
        #[cfg(feature = "std")]
        if self.is_frozen() {
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            while self.now() < at {
                // The instant: another thread may move the clock after the check.
                let registration = self.register_wake_at(at, &waker);
                if !registration.is_fired() {
                    std::thread::park();
                }
            }
            return;
        }
        let _ = self.shared.nanos.fetch_max(at, Ordering::AcqRel);
        self.wake_due();
    }

    /// Advances the clock by `duration`, then wakes `waker`; a frozen clock queues it.
    fn wake_after(&self, duration: Duration, waker: &Waker) {
        self.register_wake(duration, waker).detach();
    }

    /// Fired at once on an advancing clock, cancellable on a frozen one.
    fn register_wake(&self, duration: Duration, waker: &Waker) -> WakeRegistration {
        #[cfg(feature = "std")]
        if let Some(registration) =
            self.queue_wake_with(waker, |now| now.saturating_add(saturating_nanos(duration)))
        {
            return registration;
        }
        self.advance(duration);
        waker.wake_by_ref();
        WakeRegistration::fired()
    }

    /// [`Timer::register_wake_at`]: a frozen clock queues the instant `at` itself, so a caller
    /// that read the clock before another thread moved it is still woken exactly at `at`; an
    /// advancing clock advances to `at` (if not past it), then wakes.
    fn register_wake_at(&self, at: u64, waker: &Waker) -> WakeRegistration {
        #[cfg(feature = "std")]
        if let Some(registration) = self.queue_wake_with(waker, |_| at) {
            return registration;
        }
        // One `fetch_max`, as in `sleep_until`: a reading and then an `advance` by the rest
        // would let two callers that read the same time both add it, leaving the clock past `at`.
        let _ = self.shared.nanos.fetch_max(at, Ordering::AcqRel);
        waker.wake_by_ref();
        WakeRegistration::fired()
    }
}

/// Unparks a thread blocked in a frozen clock's `sleep`.
#[cfg(feature = "std")]
struct Unpark(std::thread::Thread);

#[cfg(feature = "std")]
impl alloc::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}
