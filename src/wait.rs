//! Waiting: blocking and async acquire, and reservations that can be cancelled.
//!
//! Everything here is built on one primitive, [`gcra::reserve`]: take the tokens now, possibly
//! ahead of the refill, and learn the instant at which they are due. The reservation pushes the
//! bucket's theoretical arrival time forward, so the next caller queues behind it — callers are
//! served in the order their compare-and-swap succeeded, each at the earliest instant the quota
//! allows.
//!
//! The calls, what each waits for and what a refusal consumes: the
//! [guide](crate::guide#refuse-wait-or-reserve). Sleeping goes through the bucket's clock,
//! outside any critical section: the decision is one CAS, then the thread sleeps.
//!
//! A reconfiguration since a reservation makes its cancellation give back nothing
//! ([`Reservation::cancel`]).

use crate::bucket::Bucket;
use crate::clock::{saturating_nanos, Clock, Timer};
use crate::error::Denied;
use crate::gcra;
use crate::quota::Quota;
use core::time::Duration;

/// What a reservation needs to remember, decided inside the CAS closure (which may rerun, so it
/// only returns this value and has no side effects).
mod reservation;
mod until_ready;
pub use reservation::Reservation;
pub use until_ready::UntilReady;

#[derive(Clone, Copy)]
struct Ticket {
    /// The state right before this reservation: what a cancellation restores.
    before: u64,
    /// The state right after this reservation (what [`gcra::cancel`] calls `after`).
    after: u64,
    /// The instant (clock nanoseconds) at which the tokens are due.
    due: u64,
    /// The word's quota-epoch bit when the reservation was made.
    epoch: u64,
    /// That epoch's slot generation, read after the word: any reconfiguration since changes
    /// the epoch bit or this.
    generation: u32,
    /// The quota in force when the reservation was made.
    quota: Quota,
}

impl<C: Clock> Bucket<C> {
    /// Waits until `cost` tokens are admitted, then takes them. Returns the time it waited:
    /// the delay it was scheduled for when it joined the queue (zero if the tokens were there;
    /// a real clock's sleep may overshoot it by the OS's timer slack).
    ///
    /// The tokens are reserved first ([`Bucket::reserve`]), then the thread sleeps through
    /// [`Clock::sleep`]; a [`ManualClock`](crate::ManualClock) advances itself instead.
    ///
    /// Errors: [`Denied::ExceedsBurst`] when `cost > burst`, nothing consumed (`RetryAfter` only
    /// for a queue reaching past the [`HORIZON`](crate::HORIZON)). Cost 0 returns `Ok(0)` at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Clock, Denied, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), clock.clone());
    /// assert_eq!(bucket.acquire(2), Ok(Duration::ZERO));
    /// assert_eq!(bucket.acquire(2), Ok(Duration::from_millis(200)));
    /// assert_eq!(clock.now(), 200_000_000); // the manual clock slept
    /// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
    /// assert_eq!(bucket.acquire(3), Err(Denied::ExceedsBurst));
    /// ```
    pub fn acquire(&self, cost: u64) -> Result<Duration, Denied>
    where
        C: Timer,
    {
        self.try_acquire_for(cost, Duration::MAX)
    }

    /// Like [`Bucket::acquire`], but only if the wait is at most `timeout`; otherwise
    /// `Err(RetryAfter(wait))` and **nothing is consumed**. The decision — reserve if due within
    /// `timeout` — is taken inside one CAS, so a concurrent caller can never make this one
    /// consume and then give up.
    ///
    /// `timeout` zero behaves like [`Bucket::try_acquire`] (same verdict, same `RetryAfter`);
    /// `Duration::MAX` like [`Bucket::acquire`]. Cost 0 returns `Ok(0)` at once; `cost > burst`
    /// is [`Denied::ExceedsBurst`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Clock, Denied, ManualClock, Quota};
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), clock.clone());
    /// assert_eq!(bucket.try_acquire_for(2, ms(100)), Ok(Duration::ZERO));
    /// assert_eq!(bucket.try_acquire_for(2, ms(100)), Err(Denied::RetryAfter(ms(200))));
    /// assert_eq!(bucket.try_acquire_for(1, ms(100)), Ok(ms(100)));
    /// assert_eq!(clock.now(), 100_000_000);
    /// ```
    pub fn try_acquire_for(&self, cost: u64, timeout: Duration) -> Result<Duration, Denied>
    where
        C: Timer,
    {
        if cost == 0 {
            return Ok(Duration::ZERO);
        }
        let now = self.clock().now();
        let limit = saturating_nanos(timeout);
        let due = self.update(
            |state, quota| match gcra::reserve(state, now, quota, cost) {
                Ok((next, due)) => {
                    let wait = due.saturating_sub(now);
                    if wait <= limit {
                        (Some(next), Ok(due))
                    } else {
                        (None, Err(Denied::RetryAfter(Duration::from_nanos(wait))))
                    }
                }
                Err(denied) => (None, Err(denied)),
            },
        )?;
        Ok(self.sleep_until(now, due))
    }

    /// Takes `cost` tokens now, possibly ahead of the refill, and never blocks: the returned
    /// [`Reservation`] says how long to wait ([`Reservation::delay`]) before acting, and can
    /// give the tokens back ([`Reservation::cancel`]). Later callers queue behind it.
    /// Dropping the reservation keeps the tokens taken.
    ///
    /// Errors: as [`Bucket::acquire`]'s. Cost 0 gives a reservation that is due at once and
    /// takes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), clock.clone());
    /// assert_eq!(bucket.reserve(2).unwrap().delay(), Duration::ZERO);
    /// assert_eq!(bucket.reserve(2).unwrap().delay(), Duration::from_millis(200));
    /// clock.advance(Duration::from_millis(300));
    /// assert_eq!(bucket.reserve(2).unwrap().delay(), Duration::from_millis(100));
    /// ```
    pub fn reserve(&self, cost: u64) -> Result<Reservation<'_, C>, Denied> {
        let now = self.clock().now();
        self.reserve_at(now, cost)
    }

    /// A reservation only if the bucket holds `cost` now, decided in one CAS: the tokens are
    /// taken as [`try_acquire`](Bucket::try_acquire) takes them, or nothing is written and the
    /// refusal is `try_acquire`'s (for [`GiveBack`](crate::GiveBack), as
    /// `MultiBucket::try_reserve_now` is for a policy). Not a reservation cancelled when it is
    /// not due: another reservation, or the clock passing its due instant, between the two
    /// would make that cancel give nothing back, and a refused take would keep its tokens.
    pub(crate) fn try_reserve_now(&self, cost: u64) -> Result<Reservation<'_, C>, Denied> {
        let now = self.clock().now();
        let ticket = self.update_with_epoch(|state, epoch, quota| {
            let after = match gcra::try_acquire(state, now, quota, cost) {
                Ok(next) => next.unwrap_or(state),
                Err(denied) => return (None, Err(denied)),
            };
            let ticket = Ticket {
                before: state,
                after,
                due: now,
                epoch,
                generation: self.quota_generation(epoch),
                quota: *quota,
            };
            ((after != state).then_some(after), Ok(ticket))
        })?;
        Ok(Reservation {
            bucket: self,
            cost,
            ticket,
        })
    }

    fn reserve_at(&self, now: u64, cost: u64) -> Result<Reservation<'_, C>, Denied> {
        let ticket = self.update_with_epoch(|state, epoch, quota| {
            let quota = *quota;
            let generation = self.quota_generation(epoch);
            if cost == 0 {
                let ticket = Ticket {
                    before: state,
                    after: state,
                    due: now,
                    epoch,
                    generation,
                    quota,
                };
                return (None, Ok(ticket));
            }
            match gcra::reserve(state, now, &quota, cost) {
                Ok((after, due)) => (
                    Some(after),
                    Ok(Ticket {
                        before: state,
                        after,
                        due,
                        epoch,
                        generation,
                        quota,
                    }),
                ),
                Err(denied) => (None, Err(denied)),
            }
        })?;
        Ok(Reservation {
            bucket: self,
            cost,
            ticket,
        })
    }

    /// Sleeps on the bucket's clock until `due`; returns the scheduled wait `due − now`.
    /// Loops because a clock's `sleep` may follow another time source than its `now`.
    fn sleep_until(&self, now: u64, due: u64) -> Duration
    where
        C: Timer,
    {
        // A fresh reading, not `now`: a thread that stalled since would oversleep by as much.
        let mut t = self.clock().now();
        while t < due {
            self.clock().sleep_until(due);
            t = self.clock().now();
        }
        Duration::from_nanos(due.saturating_sub(now))
    }

    /// The async counterpart of [`Bucket::acquire`]: a future that reserves `cost` tokens when
    /// first polled and resolves to `Ok(time waited)` once they are due, or at once to
    /// `Err(ExceedsBurst)` when `cost > burst` (`RetryAfter` only for a queue reaching past the
    /// [`HORIZON`](crate::HORIZON), as [`acquire`](Bucket::acquire)).
    ///
    /// Any executor: the wake-up comes from the clock ([`Timer::register_wake`]). It is
    /// **cancel-safe**: dropping it before it completes cancels its reservation
    /// ([`Reservation::cancel`]'s rule); a future never polled has reserved nothing.
    ///
    /// With a [`ManualClock`](crate::ManualClock) it completes on its first poll, the clock
    /// advanced by the wait:
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
    ///
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), clock.clone());
    /// bucket.try_acquire(2).unwrap();
    /// let mut fut = pin!(bucket.until_ready(1));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::from_millis(100))));
    /// assert_eq!(clock.now(), 100_000_000);
    /// ```
    pub fn until_ready(&self, cost: u64) -> UntilReady<'_, C>
    where
        C: Timer,
    {
        UntilReady::new(self, cost, 0)
    }

    /// [`Bucket::until_ready`] that, once the tokens are due, waits a further pseudo-random
    /// `0 ..= max_jitter`, derived deterministically from `seed` (SplitMix64; no RNG, no
    /// global state). Pass something that differs between callers — a request id, a
    /// connection's port — to spread a herd of callers that became ready at the same instant
    /// (for example a full burst admitted at once after an idle period) over `max_jitter`.
    ///
    /// The jitter only delays the caller: the tokens are taken when the future is first polled,
    /// exactly as without jitter, so it never changes what the bucket admits. The future
    /// resolves to the whole wait, jitter included.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{Bucket, ManualClock, Quota};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut cx = Context::from_waker(&waker);
    ///
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// let max = Duration::from_millis(50);
    /// let mut fut = pin!(bucket.until_ready_with_jitter(1, max, 7));
    /// let Poll::Ready(Ok(waited)) = fut.as_mut().poll(&mut cx) else { panic!() };
    /// assert!(waited <= max); // the bucket had the token: only the jitter was waited
    /// ```
    pub fn until_ready_with_jitter(
        &self,
        cost: u64,
        max_jitter: Duration,
        seed: u64,
    ) -> UntilReady<'_, C>
    where
        C: Timer,
    {
        let max = saturating_nanos(max_jitter);
        let r = splitmix64(seed);
        let jitter = match max.checked_add(1) {
            Some(m) => r % m,
            None => r,
        };
        UntilReady::new(self, cost, jitter)
    }
}

/// SplitMix64's output function: a bijective, well-mixed hash of the seed.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
