//! Waiting (blocking, async, reservations), built on [`gcra::reserve`]: take the tokens now and
//! learn when they are due, queued in the order of the CASes; one CAS, then sleep on the clock.
//! The calls compared: the [guide](crate::guide#refuse-wait-or-reserve).

use crate::bucket::Bucket;
use crate::clock::{saturating_nanos, Clock, Timer};
use crate::error::Denied;
use crate::gcra;
use crate::quota::Quota;
use core::time::Duration;

mod reservation;
mod until_ready;
pub use reservation::Reservation;
pub use until_ready::UntilReady;

/// What a reservation remembers, decided inside the CAS closure.
#[derive(Clone, Copy)]
struct Ticket {
    /// The state right before this reservation: what a cancellation restores.
    before: u64,
    after: u64,
    /// The instant (clock nanoseconds) at which the tokens are due.
    due: u64,
    /// The word's quota-epoch bit when the reservation was made.
    epoch: u64,
    /// That epoch's slot generation: any reconfiguration since changes the bit or this.
    generation: u32,
    /// The quota in force when the reservation was made.
    quota: Quota,
}

impl<C: Timer> Bucket<C> {
    /// Reserves `cost` tokens ([`Bucket::reserve`]), then sleeps on the clock until they are due
    /// (a [`ManualClock`](crate::ManualClock) advances itself); returns the scheduled wait.
    /// Errors, nothing consumed: [`Denied::ExceedsBurst`] when `cost > burst` (`RetryAfter` only
    /// for a queue past the [`HORIZON`](crate::HORIZON)). Cost 0 returns `Ok(0)` at once.
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
    pub fn acquire(&self, cost: u64) -> Result<Duration, Denied> {
        self.try_acquire_for(cost, Duration::MAX)
    }

    /// [`Bucket::acquire`] only if the wait is at most `timeout`, else `Err(RetryAfter(wait))`
    /// and **nothing is consumed** (decided inside one CAS). `timeout` zero decides as
    /// [`Bucket::try_acquire`], `Duration::MAX` as [`Bucket::acquire`].
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
    pub fn try_acquire_for(&self, cost: u64, timeout: Duration) -> Result<Duration, Denied> {
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
        Ok(sleep_until(self.clock(), now, due))
    }
}

impl<C: Clock> Bucket<C> {
    /// Takes `cost` tokens now, possibly ahead of the refill; later callers queue behind it. The
    /// [`Reservation`] says how long to wait. Errors: as `acquire`'s; cost 0 takes nothing.
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

    /// A reservation only if the bucket holds `cost` now, decided in one CAS as
    /// [`try_acquire`](Bucket::try_acquire) decides (for [`GiveBack`](crate::GiveBack)).
    pub(crate) fn try_reserve_now(&self, cost: u64) -> Result<Reservation<'_, C>, Denied> {
        let now = self.clock().now();
        self.ticketed(cost, |state, quota| {
            let next = gcra::try_acquire(state, now, quota, cost)?;
            Ok((next.unwrap_or(state), now))
        })
    }

    fn reserve_at(&self, now: u64, cost: u64) -> Result<Reservation<'_, C>, Denied> {
        self.ticketed(cost, |state, quota| match cost {
            0 => Ok((state, now)),
            _ => gcra::reserve(state, now, quota, cost),
        })
    }

    /// A reservation by `take(state, quota)`, which gives the state after it and the due
    /// instant, in one CAS (that writes nothing if the state is unchanged).
    fn ticketed(
        &self,
        cost: u64,
        take: impl Fn(u64, &Quota) -> Result<(u64, u64), Denied>,
    ) -> Result<Reservation<'_, C>, Denied> {
        let ticket = self.update_with_epoch(|before, epoch, quota| match take(before, quota) {
            Ok((after, due)) => {
                let (generation, quota) = (self.quota_generation(epoch), *quota);
                let ticket = Ticket {
                    before,
                    after,
                    due,
                    epoch,
                    generation,
                    quota,
                };
                ((after != before).then_some(after), Ok(ticket))
            }
            Err(denied) => (None, Err(denied)),
        })?;
        Ok(Reservation {
            bucket: self,
            cost,
            ticket,
        })
    }
}

impl<C: Timer> Bucket<C> {
    /// The async [`Bucket::acquire`] for any executor: reserves when first polled, resolves once
    /// due; the clock wakes it ([`Timer::register_wake`]). **Cancel-safe**: dropping it cancels
    /// the reservation. A clock that steps back stretches it no more than `acquire`, and one
    /// lagging reading never resolves it early (the rule: [`UntilReady`]). On a
    /// [`ManualClock`](crate::ManualClock) the first poll completes it:
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
    pub fn until_ready(&self, cost: u64) -> UntilReady<'_, C> {
        UntilReady::new(self, cost, 0)
    }

    /// [`Bucket::until_ready`], then a pseudo-random extra wait in `0 ..= max_jitter` from `seed`
    /// (SplitMix64; e.g. a request id) to spread a herd. It never changes what the bucket
    /// admits; the future resolves to the whole wait.
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
    ) -> UntilReady<'_, C> {
        let r = splitmix64(seed);
        let jitter = saturating_nanos(max_jitter)
            .checked_add(1)
            .map_or(r, |m| r % m);
        UntilReady::new(self, cost, jitter)
    }
}

/// Sleeps on `clock` until `due`, the instant a decision at reading `now` scheduled, and
/// returns the scheduled wait `due − now`.
///
/// To the instant, so that a caller stalled since `now` sleeps only what is left; in a loop of
/// fresh readings, since a clock may sleep on another time source than its `now`. Each reading
/// goes through a [`Deadline`], whose rule for a clock that steps back (or one reading that
/// lags) is the contract of every wait, async ones included.
pub(crate) fn sleep_until<C: Timer>(clock: &C, now: u64, due: u64) -> Duration {
    let mut deadline = Deadline::new(now, due);
    while let Some(target) = deadline.wake_at(clock.now()) {
        clock.sleep_until(target);
    }
    Duration::from_nanos(due.saturating_sub(now))
}

/// What a wait for `due` (an instant scheduled at reading `now`) waits for, reading after
/// reading: the one copy of the rule that [`sleep_until`] and the futures
/// ([`UntilReady`]) follow.
///
/// A reading behind the one before it (a clock that stepped back: a TSC read on another core,
/// `ManualClock::set`) moves the target back by the step, but only while the clock stays
/// behind the furthest reading this wait has seen: a reading at or past it ends the wait only
/// at `due`. So the waiter never goes ahead at a reading that is the latest it has seen and
/// before its due instant (a lagging reading between exact ones does not cut the wait short,
/// which would admit its tokens early), and on a clock that stepped back and stays there the
/// wait lasts the wait decided if the step is at least that wait, and less than twice the
/// wait otherwise (the clock must come back past its furthest reading, a step's worth, first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    /// The instant scheduled.
    due: u64,
    /// The latest reading (the scheduling one before any other).
    last: u64,
    /// The furthest reading seen (the scheduling one included).
    furthest: u64,
    /// The instant to wait for now: `due`, less the steps back since the furthest reading.
    target: u64,
}

impl Deadline {
    /// A wait for `due`, scheduled at reading `now`.
    pub(crate) fn new(now: u64, due: u64) -> Deadline {
        Deadline {
            due,
            last: now,
            furthest: now,
            target: due,
        }
    }

    /// Takes a fresh reading `t`: `None` once the wait is over, else the instant to sleep (or
    /// register a wake-up) until before reading again.
    pub(crate) fn wake_at(&mut self, t: u64) -> Option<u64> {
        if t < self.last {
            // `target − last` is the time left; `target > last` but for the first reading
            // (`due ≤ now`: nothing left), where saturating keeps it nothing.
            self.target = self.target.saturating_sub(self.last - t);
        }
        if t >= self.furthest {
            // Nothing read so far is ahead of `t`: only the due instant ends the wait.
            self.furthest = t;
            self.target = self.due;
        }
        self.last = t;
        (t < self.target).then_some(self.target)
    }

    /// The instant scheduled.
    pub(crate) fn due(&self) -> u64 {
        self.due
    }

    /// The instant the wait waits for now (`due`, or earlier after a step back).
    pub(crate) fn target(&self) -> u64 {
        self.target
    }
}

/// SplitMix64's output function: a bijective, well-mixed hash of the seed.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
