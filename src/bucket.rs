//! [`Bucket`]: one `AtomicU64` and the compare-and-swap loop that applies [`crate::gcra`].

use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::quota::Quota;
use crate::slots::EpochSlots;
use crate::snapshot::Snapshot;
use crate::sync::{spin_loop, AtomicU64, Ordering};
use core::fmt;

/// An exact, lock-free token bucket: the whole state is one `AtomicU64`.
///
/// Every decision reads the clock once, then applies the pure function in [`crate::gcra`] to the
/// word in a compare-and-swap loop, so refill and debit can never race. A refusal writes
/// nothing. No lock, no allocation, no syscall but the clock read. Two cache lines.
///
/// This timeline (capacity 3, 2 tokens/s) holds exactly:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, Denied, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let bucket = Bucket::with_clock(Quota::new(2, Duration::from_secs(1), 3).unwrap(), clock.clone());
/// let ms = Duration::from_millis;
/// assert_eq!(bucket.try_acquire(2), Ok(()));
/// assert_eq!(bucket.try_acquire(2), Err(Denied::RetryAfter(ms(500))));
/// clock.set(ms(250));
/// assert_eq!(bucket.try_acquire(1), Ok(()));
/// clock.set(ms(500));
/// assert_eq!(bucket.try_acquire(2), Err(Denied::RetryAfter(ms(500))));
/// assert_eq!(bucket.available(), 1);
/// clock.set(ms(1000));
/// assert_eq!(bucket.try_acquire(2), Ok(()));
/// clock.set(ms(5000));
/// assert_eq!(bucket.try_acquire(3), Ok(()));
/// assert_eq!(bucket.available(), 0);
/// ```
///
/// On targets without native 64-bit atomics (e.g. `thumbv7m-none-eabi`) the word comes from
/// `portable-atomic`'s fallback, and the bucket is then **not** lock-free.
#[repr(C)]
pub struct Bucket<C = DefaultClock> {
    /// The whole bucket state.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..1 | the [`gcra`] state: theoretical arrival time, shifted by one burst | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full ("never used") |
    /// | 0 | quota epoch parity: which of `slots` holds the quota for this state | — | 0, 1 |
    ///
    /// Orderings: loads and failed CASes are `Acquire`, pairing with the `AcqRel` CAS in
    /// [`Bucket::set_quota`] that flips the parity, so a thread that sees a parity also sees the
    /// quota slot written before it. A successful decision CAS is `Relaxed`: it publishes nothing
    /// but the word itself (single-location coherence orders all decisions), and the release
    /// sequence of the last reconfiguration runs through it.
    state: AtomicU64,
    /// Two quota slots (`Quota::to_raw`); the word's parity selects the active one. A
    /// reconfiguration writes the idle slot, then flips the parity with one CAS (see
    /// `src/slots.rs`).
    slots: EpochSlots,
    clock: C,
}

impl<C: fmt::Debug> fmt::Debug for Bucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.state.load(Ordering::Acquire);
        f.debug_struct("Bucket")
            .field("state", &(w >> 1))
            .field("epoch", &(w & 1))
            .field("clock", &self.clock)
            .finish()
    }
}

/// Only with a real clock (feature `std`): without it [`DefaultClock`] is [`ManualClock`](crate::ManualClock),
/// which never moves on its own, so a bucket built on it would never refill. Without `std`,
/// pass your platform's clock to [`Bucket::with_clock`].
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl Bucket<DefaultClock> {
    /// A full bucket on the [`DefaultClock`] (feature `std`).
    ///
    /// ```
    /// let bucket = tollgate::Bucket::new(tollgate::Quota::per_second(100).unwrap());
    /// assert!(bucket.try_acquire(1).is_ok());
    /// ```
    pub fn new(quota: Quota) -> Bucket<DefaultClock> {
        Bucket::with_clock(quota, DefaultClock::default())
    }
}

impl<C: Clock> Bucket<C> {
    /// A full bucket on `clock`.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(5).unwrap(), ManualClock::new());
    /// assert_eq!(bucket.available(), 5);
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Bucket<C> {
        Bucket::from_state(quota, gcra::FULL, clock)
    }

    /// A bucket that starts with `tokens` (0 ..= burst), so that a fragile downstream does not
    /// see a cold-start burst. Errors with [`ConfigError::InitialAboveBurst`] above the burst.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_initial_tokens(Quota::per_second(5).unwrap(), 0, ManualClock::new()).unwrap();
    /// assert_eq!(bucket.available(), 0);
    /// assert!(Bucket::with_initial_tokens(Quota::per_second(5).unwrap(), 6, ManualClock::new()).is_err());
    /// ```
    pub fn with_initial_tokens(
        quota: Quota,
        tokens: u64,
        clock: C,
    ) -> Result<Bucket<C>, ConfigError> {
        let state = gcra::with_tokens(clock.now(), &quota, tokens)?;
        Ok(Bucket::from_state(quota, state, clock))
    }

    fn from_state(quota: Quota, state: u64, clock: C) -> Bucket<C> {
        Bucket {
            state: AtomicU64::new(state << 1),
            slots: EpochSlots::new(quota.to_raw()),
            clock,
        }
    }

    /// Takes `cost` tokens if the bucket holds them now.
    ///
    /// `Err(RetryAfter(d))`: `d` is the smallest whole number of nanoseconds after which the same
    /// request is admitted if nothing else consumes. `Err(ExceedsBurst)`: `cost > burst`.
    /// A refusal changes nothing; cost 0 is always admitted and changes nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// assert_eq!(bucket.try_acquire(10), Ok(()));
    /// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
    /// ```
    #[inline(always)]
    pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        self.update(
            |state, quota| match gcra::try_acquire(state, now, quota, cost) {
                Ok(next) => (next, Ok(())),
                Err(denied) => (None, Err(denied)),
            },
        )
    }

    /// [`try_acquire`](Bucket::try_acquire), also returning the bucket as this decision left
    /// it: the tokens remaining and the time until full, from the same clock reading and the
    /// same state word (for `RateLimit` response headers).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, ManualClock, Quota, Snapshot};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// assert_eq!(bucket.try_acquire_snapshot(10), (Ok(()), Snapshot::new(0, Duration::from_secs(1))));
    /// assert_eq!(
    ///     bucket.try_acquire_snapshot(1),
    ///     (Err(Denied::RetryAfter(Duration::from_millis(100))), Snapshot::new(0, Duration::from_secs(1)))
    /// );
    /// ```
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let now = self.clock.now();
        self.update(
            |state, quota| match gcra::try_acquire(state, now, quota, cost) {
                Ok(next) => (
                    next,
                    (Ok(()), gcra::snapshot(next.unwrap_or(state), now, quota)),
                ),
                Err(denied) => (None, (Err(denied), gcra::snapshot(state, now, quota))),
            },
        )
    }

    /// Whole tokens available now.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// bucket.try_acquire(3).unwrap();
    /// assert_eq!(bucket.available(), 7);
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.clock.now();
        self.update(|state, quota| (None, gcra::available(state, now, quota)))
    }

    /// The quota in force.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let q = Quota::per_second(10).unwrap();
    /// assert_eq!(Bucket::with_clock(q, ManualClock::new()).quota(), q);
    /// ```
    pub fn quota(&self) -> Quota {
        self.update(|_, quota| (None, *quota))
    }

    /// The bucket's clock.
    ///
    /// ```
    /// use tollgate::{Bucket, Clock, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// assert_eq!(bucket.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Replaces the quota atomically. The balance at the switch, debt included, carries over,
    /// capped at the new burst. A concurrent caller sees either the old quota with the old state
    /// or the new quota with the new state, never a mix: the new quota is written to the idle
    /// slot first, then one CAS converts the state and flips the word's epoch bit, and a decision
    /// CAS only succeeds on the exact word (epoch bit included) it decided on.
    ///
    /// Decisions never wait for a reconfiguration; concurrent reconfigurations take turns.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// bucket.try_acquire(4).unwrap();
    /// bucket.set_quota(Quota::per_second(100).unwrap());
    /// assert_eq!(bucket.available(), 6);
    /// bucket.set_quota(Quota::per_second(2).unwrap());
    /// assert_eq!(bucket.available(), 2);
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        // Read before taking the writer flag: see `EpochSlots::lock`.
        let writer = self.slots.lock(self.clock.now());
        let mut cur = self.state.load(Ordering::Acquire);
        let old = Quota::from_raw(writer.get(cur & 1));
        if old == quota {
            return;
        }
        let idle = (cur & 1) ^ 1;
        writer.set(idle, quota.to_raw());
        let now = writer.now();
        loop {
            let next = gcra::rescale(cur >> 1, now, &old, &quota);
            match self.state.compare_exchange_weak(
                cur,
                (next << 1) | idle,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The quota selected by word `w`, or `None` if its slot is being rewritten (only possible
    /// when two reconfigurations completed since `w` was read; the caller reloads).
    #[inline(always)]
    fn quota_of(&self, w: u64) -> Option<Quota> {
        self.slots.read(w & 1).map(Quota::from_raw)
    }

    /// The CAS loop. `f(state, quota)` returns the state to write (`None`: write nothing) and
    /// the result; it may run several times, so it must not have side effects.
    #[inline(always)]
    pub(crate) fn update<R>(&self, mut f: impl FnMut(u64, &Quota) -> (Option<u64>, R)) -> R {
        self.update_with_epoch(|state, _, quota| f(state, quota))
    }

    /// [`Bucket::update`] for callers that must notice a reconfiguration later (reservations):
    /// `f(state, epoch, quota)` also receives the word's quota-epoch bit (0 or 1). The same
    /// rule holds: `f` may run several times and must not have side effects.
    #[inline(always)]
    pub(crate) fn update_with_epoch<R>(
        &self,
        mut f: impl FnMut(u64, u64, &Quota) -> (Option<u64>, R),
    ) -> R {
        let mut w = self.state.load(Ordering::Acquire);
        loop {
            let Some(quota) = self.quota_of(w) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let (next, result) = f(w >> 1, w & 1, &quota);
            let Some(next) = next else { return result };
            match self.state.compare_exchange_weak(
                w,
                (next << 1) | (w & 1),
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return result,
                Err(actual) => w = actual,
            }
        }
    }
}
