//! [`Bucket`]: one `AtomicU64` and the compare-and-swap loop that applies [`crate::gcra`]. Every
//! admission writes that word: for one limit on many cores, `ShardedBucket` scales further.

#[cfg(feature = "persist")]
mod persist;

crate::limiter::one_quota_limiter!(impl[C: Clock] Bucket<C>);

use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::quota::{Quota, Scaled, QUOTA_WORDS, SCALED_WORDS};
use crate::slots::{EpochSlots, Writer};
use crate::snapshot::Snapshot;
use crate::sync::{spin_loop, AtomicU64, Backoff, Ordering};
use core::fmt;

/// An exact, lock-free token bucket: the whole state is one `AtomicU64`.
///
/// Each decision reads the clock once and applies [`crate::gcra`] to the word in one
/// compare-and-swap: refill and debit never race, a refusal writes nothing, nothing locks.
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
    /// First, and the word last: the clock, the slot versions and the first slot's decision
    /// words end at least 64 bytes before the word, off its contended cache line.
    clock: C,
    /// Two quota slots (`Quota::to_raw`), selected by the word's parity (`src/slots.rs`).
    slots: EpochSlots<QUOTA_WORDS>,
    /// The whole bucket state.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..1 | the [`gcra`] state: theoretical arrival time, shifted by one burst | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full ("never used") |
    /// | 0 | quota epoch parity: which of `slots` holds the quota for this state | — | 0, 1 |
    ///
    /// Orderings: loads and failed CASes are `Acquire`, pairing with the `AcqRel` parity flip in
    /// [`Bucket::set_quota`], so a parity seen implies its slot seen. A successful decision CAS
    /// is `Acquire`: it publishes only the word, but must see the slot version of its era,
    /// checked after the CAS (`Bucket::update_from`).
    state: AtomicU64,
}

/// The decision path on word `$w` (loaded `Acquire` after the clock): `$body` returns the state
/// to write (`None`: nothing) and the result, maybe several times. An inlined first attempt,
/// then [`Bucket::retry`]; a macro, since a closure shared by both would not be inlined.
macro_rules! decide {
    ($b:expr, $w:expr, |$state:ident, $scaled:ident| $body:expr) => {{
        let (bucket, w) = ($b, $w);
        let first = match bucket.hot_scaled(w) {
            Some((scaled, version)) => {
                let ($state, $scaled) = (w >> 1, &scaled);
                let (next, result) = $body;
                bucket.commit(w, version, next).map(|()| result)
            }
            // The slot is being rewritten: the loop waits it out.
            None => Err(w),
        };
        match first {
            Ok(result) => result,
            Err(w) => bucket.retry(w, |$state, $scaled: &Scaled| $body),
        }
    }};
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

/// Only with feature `std`: otherwise pass your platform's clock to [`Bucket::with_clock`].
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

    /// A bucket that starts with `tokens` (0 ..= burst, else [`ConfigError::InitialAboveBurst`]),
    /// against a cold-start burst.
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

    /// Takes `cost` tokens if the bucket holds them now. `Err(RetryAfter(d))`: the smallest
    /// whole nanoseconds after which it is admitted if nothing else consumes;
    /// `Err(ExceedsBurst)`: `cost > burst`. A refusal, or cost 0, changes nothing.
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
        // The clock first, the word right after: the shortest window for a racing write.
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        decide!(self, w, |state, scaled| acquire(state, now, scaled, cost))
    }

    /// The decision and the bucket as it left it, whatever the verdict.
    #[deprecated(note = "use `Limiter::decide_snapshots(&bucket, &(), cost)`, or \
                         `try_acquire_or_snapshot` for the snapshot on refusal")]
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        self.acquire_snapshot(cost)
    }

    /// The decision and the bucket as it left it (`Limiter::decide_snapshots`).
    pub(crate) fn acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        decide!(self, w, |state, scaled| {
            let (next, verdict) = acquire(state, now, scaled, cost);
            let snapshot = gcra::snapshot_scaled(next.unwrap_or(state), now, scaled);
            (next, (verdict, snapshot))
        })
    }

    /// [`Bucket::acquire_snapshot`] with the quota it was decided under: the whole slot read
    /// with the decision and validated with it (`Bucket::update_from`), so a `set_quota` racing
    /// the decision gives its old quota with the old state or its new with the new, never the
    /// snapshot of one with the other (`Limiter::decide_snapshots_limits`).
    pub(crate) fn acquire_snapshot_quota(
        &self,
        cost: u64,
    ) -> (Result<(), Denied>, Snapshot, Quota) {
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        self.update_from(w, |state, _, quota| {
            let (next, verdict) = acquire(state, now, quota.scaled(), cost);
            let snapshot = gcra::snapshot_scaled(next.unwrap_or(state), now, quota.scaled());
            (next, (verdict, snapshot, *quota))
        })
    }

    /// [`Bucket::acquire_snapshot_quota`] with the snapshot and quota on refusal only. An
    /// admission costs what `try_acquire` costs; a refusal, which wrote nothing, is decided again
    /// at the same reading on the whole quota slot, like a decision whose CAS lost (so it may
    /// admit after all, if a reconfiguration came in between).
    pub(crate) fn acquire_or_snapshot_quota(
        &self,
        cost: u64,
    ) -> Result<(), (Denied, Snapshot, Quota)> {
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        if decide!(self, w, |state, scaled| acquire(state, now, scaled, cost)).is_ok() {
            return Ok(());
        }
        self.refused_with_quota(now, cost)
    }

    /// The decision of `cost` at `now` on the whole quota slot, with the snapshot and quota of
    /// a refusal: the slow half of [`Bucket::acquire_or_snapshot_quota`].
    #[cold]
    #[inline(never)]
    fn refused_with_quota(&self, now: u64, cost: u64) -> Result<(), (Denied, Snapshot, Quota)> {
        let w = self.state.load(Ordering::Acquire);
        self.update_from(w, |state, _, quota| {
            let (next, verdict) = acquire(state, now, quota.scaled(), cost);
            (
                next,
                verdict.map_err(|d| (d, gcra::snapshot_scaled(state, now, quota.scaled()), *quota)),
            )
        })
    }

    /// [`try_acquire`](Bucket::try_acquire), with a [`Snapshot`] of the bucket on refusal only.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, ManualClock, Quota, Snapshot};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// assert_eq!(bucket.try_acquire_or_snapshot(10), Ok(()));
    /// assert_eq!(
    ///     bucket.try_acquire_or_snapshot(1),
    ///     Err((Denied::RetryAfter(Duration::from_millis(100)), Snapshot::new(0, Duration::from_secs(1))))
    /// );
    /// ```
    pub fn try_acquire_or_snapshot(&self, cost: u64) -> Result<(), (Denied, Snapshot)> {
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        decide!(self, w, |state, scaled| {
            let (next, verdict) = acquire(state, now, scaled, cost);
            (
                next,
                verdict.map_err(|d| (d, gcra::snapshot_scaled(state, now, scaled))),
            )
        })
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
        let w = self.state.load(Ordering::Acquire);
        decide!(self, w, |state, scaled| (
            None,
            gcra::available_scaled(state, now, scaled)
        ))
    }

    /// Empties the bucket now (the stricter of its state and an empty one): what a process that
    /// cannot restore its state should do instead of starting full.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// bucket.drain();
    /// assert_eq!(bucket.available(), 0);
    /// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
    /// ```
    pub fn drain(&self) {
        let now = self.clock.now();
        self.update(|state, quota| {
            let empty = quota.earned_ceil(now) + quota.burst_units();
            (Some(empty).filter(|&e| e > state), ())
        });
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

    /// Replaces the quota atomically: the balance carries over, capped at the new burst, a debt
    /// keeping its due instant ([`gcra::rescale`]). Callers see the old quota with the old state
    /// or the new with the new (`docs/guarantees.md`, "Reconfiguration"), and never wait.
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

    /// The generation of quota slot `epoch` (read inside an `update_with_epoch` closure), for
    /// reservations that must notice any reconfiguration since.
    pub(crate) fn quota_generation(&self, epoch: u64) -> u32 {
        self.slots.generation(epoch)
    }

    /// Excludes reconfigurations until the guard is dropped, so none slips in between a
    /// cancellation's check and its CAS. Never read the clock while holding it.
    pub(crate) fn exclude_reconfiguration(&self) -> Writer<'_, QUOTA_WORDS> {
        // Reading 0: leaves the last reconfiguration's reading as it was.
        self.slots.lock(0)
    }

    /// The hot words of the slot that `w` names, and its version; `None` while it is rewritten.
    #[inline(always)]
    fn hot_scaled(&self, w: u64) -> Option<(Scaled, u32)> {
        let (raw, version) = self.slots.read_prefix::<SCALED_WORDS>(w)?;
        Some((Scaled::from_raw(raw), version))
    }

    /// How every attempt on word `w` and slot `version` ends: one CAS to `next`, then the slot
    /// check; or, for a read-only result (`None`), the word and the slot version unchanged.
    /// `Err(word)` (lost or revoked) carries the word to retry from.
    #[inline(always)]
    fn commit(&self, w: u64, version: u32, next: Option<u64>) -> Result<(), u64> {
        match next {
            None => match self.state.load(Ordering::Acquire) {
                again if again == w && self.slots.unchanged(w, version) => Ok(()),
                again => Err(again),
            },
            // The slot check after the CAS: `Bucket::update_from`.
            Some(next) => match self.state.compare_exchange_weak(
                w,
                (next << 1) | (w & 1),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) if self.slots.unchanged(w, version) => Ok(()),
                // Revoked (see `Bucket::update_from`): what the CAS wrote stays.
                Ok(_) => Err(self.state.load(Ordering::Acquire)),
                Err(actual) => Err(actual),
            },
        }
    }

    /// The CAS loop after a lost first attempt, from word `w`, with the same decision and clock
    /// reading: the first attempt repeated on each newer word, after a short spin
    /// ([`Backoff::spin`]) when a CAS is lost again: without it, two cores retrying at once
    /// mostly trade the line (the two-thread rows of `docs/benchmarks.md`). While the slot is
    /// being rewritten, it waits, then reloads the word.
    #[cold]
    #[inline(never)]
    fn retry<R>(&self, mut w: u64, mut f: impl FnMut(u64, &Scaled) -> (Option<u64>, R)) -> R {
        let mut backoff = Backoff::default();
        loop {
            let Some((scaled, version)) = self.hot_scaled(w) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let (next, result) = f(w >> 1, &scaled);
            match self.commit(w, version, next) {
                Ok(()) => return result,
                Err(actual) => {
                    w = actual;
                    backoff.spin();
                }
            }
        }
    }

    /// The CAS loop. `f(state, quota)` returns the state to write (`None`: write nothing) and
    /// the result; it may run several times, so it must not have side effects.
    #[inline(always)]
    pub(crate) fn update<R>(&self, mut f: impl FnMut(u64, &Quota) -> (Option<u64>, R)) -> R {
        self.update_with_epoch(|state, _, quota| f(state, quota))
    }

    /// [`Bucket::update`], with the word's quota-epoch bit: `f(state, epoch, quota)`.
    #[inline(always)]
    pub(crate) fn update_with_epoch<R>(
        &self,
        f: impl FnMut(u64, u64, &Quota) -> (Option<u64>, R),
    ) -> R {
        self.update_from(self.state.load(Ordering::Acquire), f)
    }

    /// [`Bucket::update_with_epoch`] starting from the word `w`, loaded by the caller with
    /// `Acquire` (possibly before its clock reading).
    ///
    /// Every result is validated against the word, never the slot alone. A read-only result:
    /// the word loaded again after the slot read is still `w` and the slot still holds the
    /// version read (two reconfigurations can rewrite the slot `w` names in between). A write:
    /// the CAS on `w` first, then the slot version — a check before the CAS cannot catch a word
    /// that two reconfigurations brought back to the same bits. A decision whose slot changed is
    /// **revoked** (run again); what its CAS wrote stays, which only withholds tokens. The proof:
    /// `docs/guarantees.md`, "A decision racing two reconfigurations".
    #[inline(always)]
    fn update_from<R>(
        &self,
        mut w: u64,
        mut f: impl FnMut(u64, u64, &Quota) -> (Option<u64>, R),
    ) -> R {
        loop {
            let Some((raw, version)) = self.slots.read_versioned(w & 1) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let (next, result) = f(w >> 1, w & 1, &Quota::from_raw(raw));
            // The reload is ordered after the slot read by the seqlock's acquire fence.
            match self.commit(w, version, next) {
                Ok(()) => return result,
                Err(actual) => w = actual,
            }
        }
    }
}

/// One `try_acquire` decision in the form the CAS paths take: the state to write and the verdict.
#[inline(always)]
fn acquire(state: u64, now: u64, scaled: &Scaled, cost: u64) -> (Option<u64>, Result<(), Denied>) {
    match gcra::try_acquire_scaled(state, now, scaled, cost) {
        Ok(next) => (next, Ok(())),
        Err(denied) => (None, Err(denied)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use core::mem::offset_of;

    /// What decisions read ends at least 64 bytes before the state word, so no cache line
    /// holds both, however the bucket is aligned.
    #[test]
    fn the_word_shares_no_line_with_what_decisions_read() {
        type B = Bucket<ManualClock>;
        let first_slot_decision_end = offset_of!(B, slots) + 2 * 4 + SCALED_WORDS * 8;
        assert!(offset_of!(B, clock) < first_slot_decision_end);
        assert!(offset_of!(B, state) >= first_slot_decision_end + 63);
    }
}
