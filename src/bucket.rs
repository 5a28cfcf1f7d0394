//! [`Bucket`]: one `AtomicU64` and the compare-and-swap loop that applies [`crate::gcra`].
//!
//! # Contention on many cores
//!
//! One word is one cache line, and every admission on any core writes it: each CAS first pulls
//! the line exclusive into its core (tens of nanoseconds on one socket, 100–300 ns across
//! sockets), and a CAS that lost a race retries. A single hot `Bucket` therefore tops out at the
//! rate one cache line can move between cores — tens of millions of admissions per second on a
//! socket, fewer across sockets — and more cores do not raise it. Refusals only read the word,
//! so a flood that is mostly refused scales with the cores. One global limit on many cores is
//! what `ShardedBucket` is for (`src/sharded.rs`); per-tenant limits on `KeyedLimiter` contend
//! only per key.

use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::quota::{Quota, Scaled, QUOTA_WORDS, SCALED_WORDS};
use crate::slots::{EpochSlots, Writer};
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
    /// First, and the word last: with an 8-byte clock (the default,
    /// [`ManualClock`](crate::ManualClock)) the clock, the slot versions and the first slot's
    /// decision words lie at least 64 bytes before the word, so they never share a cache line
    /// with it, however the bucket is aligned. The word is the one line that cores contend for;
    /// a decision reads the clock before it has the word, and with the clock in the word's line
    /// every decision on a contended bucket first waited for that line (measured: two threads
    /// on one bucket). The second slot's words may share the word's line (only after an odd
    /// number of reconfigurations).
    clock: C,
    /// Two quota slots (`Quota::to_raw`); the word's parity selects the active one. A
    /// reconfiguration writes the idle slot, then flips the parity with one CAS (see
    /// `src/slots.rs`).
    slots: EpochSlots<QUOTA_WORDS>,
    /// The whole bucket state.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..1 | the [`gcra`] state: theoretical arrival time, shifted by one burst | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full ("never used") |
    /// | 0 | quota epoch parity: which of `slots` holds the quota for this state | — | 0, 1 |
    ///
    /// Orderings: loads and the retry loop's failed CASes are `Acquire`, pairing with the
    /// `AcqRel` CAS in [`Bucket::set_quota`] that flips the parity, so a thread that sees a
    /// parity also sees the quota slot written before it (the first attempt's failed CAS too: the
    /// retry loop starts from the word it found). A successful
    /// decision CAS is `Acquire`: it publishes nothing but the word itself (single-location
    /// coherence orders all decisions, and the release sequence of the last reconfiguration
    /// runs through it), but it must see the slot version of the era it committed in, which it
    /// checks after the CAS (see `Bucket::update_from`). A read-only result is validated by
    /// loading the word again after the slot read.
    state: AtomicU64,
}

/// The decision path of bucket `$b` on word `$w` (loaded with `Acquire` after the caller's
/// clock reading), where `$body` (in `$state` and `$scaled: &Scaled`) is the decision: the state to
/// write (`None`: nothing) and the result. A straight-line first attempt on the hot quota
/// words — one CAS, or for a read-only result one validation ([`Bucket::commit`]) — and, if it
/// lost a race, the same attempt repeated out of line ([`Bucket::retry`]) from the word that
/// beat it.
/// `$body` may run several times: no side effects.
///
/// A macro, not a function taking a closure: the first attempt must be inlined into the caller,
/// and a closure called from both the first attempt and the loop is compiled out of line (a
/// call and six saved registers on every decision), so the body is expanded at both places.
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
        // The clock is read first and the word right after: the window between the load and
        // the CAS, in which another thread's write fails the CAS, is as short as it can be.
        let now = self.clock.now();
        let w = self.state.load(Ordering::Acquire);
        decide!(self, w, |state, scaled| acquire(state, now, scaled, cost))
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
        let w = self.state.load(Ordering::Acquire);
        let decide = |state, scaled: &Scaled| {
            let (next, verdict) = acquire(state, now, scaled, cost);
            let snapshot = gcra::snapshot_scaled(next.unwrap_or(state), now, scaled);
            (next, (verdict, snapshot))
        };
        decide!(self, w, |state, scaled| decide(state, scaled))
    }

    /// [`try_acquire`](Bucket::try_acquire), with a [`Snapshot`] only on refusal: the bucket as
    /// the refusal found it, from the same clock reading and word. An admission costs what
    /// `try_acquire` costs (no snapshot arithmetic), for callers that report the bucket only
    /// when they refuse (a 429 with `RateLimit` headers, none on admitted responses).
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
        let decide = |state, scaled: &Scaled| {
            let (next, verdict) = acquire(state, now, scaled, cost);
            let verdict =
                verdict.map_err(|denied| (denied, gcra::snapshot_scaled(state, now, scaled)));
            (next, verdict)
        };
        decide!(self, w, |state, scaled| decide(state, scaled))
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
    /// capped at the new burst, and a debt keeps its due instant (see [`gcra::rescale`]: a
    /// faster rate does not repay queued reservations early). The new quota is written to the
    /// idle slot first, then one CAS converts the state and flips the word's epoch bit, and a
    /// decision commits only by a CAS on the exact word (epoch bit included) it decided on, with
    /// the slot it read still in force, so a concurrent caller sees the old quota with the old
    /// state or the new quota with the new state.
    ///
    /// Decisions never wait for a reconfiguration; concurrent reconfigurations take turns.
    ///
    /// No gap remains for decisions racing reconfigurations: a decision checks the quota slot's
    /// version *after* its CAS, so even a word that two reconfigurations brought back to the
    /// bit-identical value (a full bucket converted twice at one reading is) cannot commit a
    /// decision made under another quota. Such a decision is revoked and made again under the
    /// quota in force; the state its CAS wrote stays, which only withholds tokens (see
    /// `docs/guarantees.md`).
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

    /// The generation of quota slot `epoch` (see `EpochSlots::generation`), for reservations
    /// that must notice any reconfiguration since they were made. Read it inside an
    /// [`update_with_epoch`](Bucket::update_with_epoch) closure, after the word was loaded.
    pub(crate) fn quota_generation(&self, epoch: u64) -> u32 {
        self.slots.generation(epoch)
    }

    /// Excludes reconfigurations ([`Bucket::set_quota`]) until the guard is dropped: a
    /// cancellation checks "no reconfiguration since the reservation" and writes under it, so
    /// none can slip in between its check and its CAS. Never read the clock while holding it.
    pub(crate) fn exclude_reconfiguration(&self) -> Writer<'_, QUOTA_WORDS> {
        // Reading 0: the guard converts nothing, and leaves the last reconfiguration's reading
        // (which the writer word keeps for the next one) as it was.
        self.slots.lock(0)
    }

    /// The hot words of the quota slot that word `w` names, and the slot's version: the first
    /// read of the decision path (see `EpochSlots::read_prefix`). `None` while the slot is being
    /// rewritten.
    #[inline(always)]
    fn hot_scaled(&self, w: u64) -> Option<(Scaled, u32)> {
        let (raw, version) = self.slots.read_prefix::<SCALED_WORDS>(w)?;
        Some((Scaled::from_raw(raw), version))
    }

    /// How every attempt on word `w` and slot `version` ends: one CAS to `next` followed by the
    /// slot check, or, for a read-only result (`None`), one validation (the word and the slot
    /// version unchanged); why in this order: [`Bucket::update_from`]. `Err(word)` when the
    /// attempt lost a race or was revoked, with the word to retry from: the one the failed CAS
    /// found (its failure ordering is `Acquire`, as a load's, so no second load is needed
    /// under contention), or the word loaded again.
    #[inline(always)]
    fn commit(&self, w: u64, version: u32, next: Option<u64>) -> Result<(), u64> {
        match next {
            None => match self.state.load(Ordering::Acquire) {
                again if again == w && self.slots.unchanged(w, version) => Ok(()),
                again => Err(again),
            },
            // The slot check comes after the CAS: see `Bucket::update_from` for why it must.
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

    /// The CAS loop after a lost first attempt (contention or a reconfiguration), from word
    /// `w`, with the same decision `f(state, rate)` and the same clock reading: the first
    /// attempt repeated on each newer word — the hot quota words read again (a few loads from a
    /// line no decision writes) and the result validated as the first attempt's
    /// ([`Bucket::commit`]) — so that a decision beaten by another thread's pays no more than
    /// its first attempt did. While the slot is being rewritten, it waits, then reloads the word.
    #[cold]
    #[inline(never)]
    fn retry<R>(&self, mut w: u64, mut f: impl FnMut(u64, &Scaled) -> (Option<u64>, R)) -> R {
        loop {
            let Some((scaled, version)) = self.hot_scaled(w) else {
                spin_loop();
                w = self.state.load(Ordering::Acquire);
                continue;
            };
            let (next, result) = f(w >> 1, &scaled);
            match self.commit(w, version, next) {
                Ok(()) => return result,
                Err(actual) => w = actual,
            }
        }
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
        f: impl FnMut(u64, u64, &Quota) -> (Option<u64>, R),
    ) -> R {
        self.update_from(self.state.load(Ordering::Acquire), f)
    }

    /// [`Bucket::update_with_epoch`] starting from the word `w`, loaded by the caller with
    /// `Acquire` (possibly before its clock reading).
    ///
    /// Every result is validated against the word, never against the slot alone: a write by
    /// the CAS on the exact word `w`; a read-only result (a refusal, `available`, `quota`) by
    /// loading the word again after the slot was read and checking that the word is still `w`
    /// and the slot still holds the version read (`EpochSlots::unchanged`), retrying otherwise.
    /// Between the first load and the slot read, two reconfigurations may complete (the first
    /// flips the epoch away, the second rewrites the slot `w` names and flips back): the slot
    /// then holds a quota that `w`'s state was never under, and the seqlock cannot tell, since
    /// that slot was written completely. The version check also covers the word coming back to
    /// the identical value after further reconfigurations.
    ///
    /// A write is validated the other way round: the CAS first, then the slot version. A check
    /// *before* the CAS leaves a window: a thread preempted between that check and its CAS
    /// while two reconfigurations complete and the word comes back to the bit-identical value
    /// (a full bucket does, when both convert at the same reading: exact quotas convert it to
    /// the reading itself) would commit a decision made in another quota's units, and no check
    /// before a CAS can close it. After the CAS it is closed: the successful CAS is `Acquire`,
    /// so it synchronizes with the `Release` flip of the era whose word it replaced, and the
    /// version load after it sees that era's slot version (`v_E`) or a later one. Slot `e` is
    /// only rewritten while the word names the other slot, so `v_E` is at least the version
    /// the decision read (`v`), and the load returns `v` only if `v_E == v`: the CAS committed
    /// in an era whose quota is the one the decision used.
    ///
    /// Otherwise the decision is **revoked**: not returned, run again on the current word.
    /// What its CAS wrote stays. That is safe whatever the quota: a decision's state is always
    /// above the one it replaced (`max(state, earned) + cost`), and a larger state is a later
    /// theoretical arrival time under any quota, so it only withholds tokens (a forward jump
    /// that later decisions absorb; the window bound holds for every trajectory with such
    /// jumps). (The one write that lowers a state, a cancellation, holds the reconfiguration
    /// lock, so it is never revoked.) Undoing it would not be safe: the load cannot tell an ABA before the CAS from
    /// reconfigurations after a legitimate CAS that happened to bring the word back again. A
    /// revoked decision therefore costs at most what its write holds back — the cost in the
    /// old quota's units, plus any refill the old quota had earned beyond the state, read in
    /// the new quota's units — and only in a race that needs two reconfigurations inside one
    /// CAS window and a bit-identical word. The version is a 32-bit counter stepping by 2 per
    /// rewrite: the argument needs fewer than 2^31 rewrites of one slot during one decision.
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
            // A read-only result: the word loaded again (ordered after the slot read by the
            // seqlock's acquire fence) and the version; a write: the CAS, then the version.
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

    /// The clock, the slot versions and the first slot's decision words end at least 64 bytes
    /// before the state word starts, so no cache line holds both, however the bucket is
    /// aligned (see the field docs of [`Bucket`]).
    #[test]
    fn the_word_shares_no_line_with_what_decisions_read() {
        type B = Bucket<ManualClock>;
        let first_slot_decision_end = offset_of!(B, slots) + 2 * 4 + SCALED_WORDS * 8;
        assert!(offset_of!(B, clock) < first_slot_decision_end);
        assert!(offset_of!(B, state) >= first_slot_decision_end + 63);
    }
}
