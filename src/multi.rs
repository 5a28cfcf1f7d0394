//! [`MultiBucket`]: one to four quotas that must all hold, decided and debited in one atomic
//! step. Split as the bucket is: [`decide`] decides, [`store`] holds the states.

/// `$body` on the policy's store, `$rates` and `$s` bound to its decision words and states
/// (the body is compiled once per size); `$judge`, if named, is the size's decision function.
macro_rules! on_store {
    ($self:expr, |$rates:pat_param, $s:ident| $body:expr) => {
        match &$self.store {
            $crate::multi::Store::Pair($rates, $s) => $body,
            $crate::multi::Store::Wide($rates, $s) => $body,
        }
    };
    ($self:expr, |$rates:pat_param, $s:ident, $judge:ident| $body:expr) => {
        match &$self.store {
            $crate::multi::Store::Pair($rates, $s) => {
                let $judge = $crate::gcra::all::decide_pair;
                $body
            }
            $crate::multi::Store::Wide($rates, $s) => {
                let $judge = $crate::gcra::all::decide::<4>;
                $body
            }
        }
    };
}

#[cfg(feature = "persist")]
mod persist;
pub(crate) mod snapshots;
mod store;
mod wait;

pub use self::snapshots::Snapshots;
pub use self::wait::MultiReservation;
pub use crate::refusal::Refusal;

use self::store::{Pair, Wide};
use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::gcra::all::{self as decide, pad, Rates};
use crate::limiter::Limiter;
use crate::limits::{Limits, MAX_LIMITS};
use crate::snapshot::Snapshot;
use core::fmt;

/// One to four [`Quota`](crate::Quota)s ("10 per second **and** 10,000 per day") enforced
/// together: admitted only if **every** quota holds the cost at one clock reading, and then
/// every quota is debited in one atomic step. A refusal writes nothing.
///
/// * **Exact.** Each quota is decided as a [`Bucket`](crate::Bucket) decides it;
///   [`Denied::RetryAfter`] is the exact smallest wait after which every quota holds the cost,
///   [`Denied::ExceedsBurst`] means the cost exceeds the smallest burst; cost 0 writes nothing.
/// * **Every quota keeps its own window bound** `burst_i + rate_i·Δ`, under any interleaving and
///   with stale or stepped-back readings, as a `Bucket` does (`docs/guarantees.md`).
/// * **One or two quotas are lock-free**: one CAS of `portable-atomic`'s `AtomicU128`
///   (`cmpxchg16b` on x86_64, found at run time unless built with `-C
///   target-feature=+cmpxchg16b`; `CASP` on AArch64; elsewhere a short critical section).
/// * **Three and four quotas** use four words under a sequence lock: refusals only read;
///   admissions take a short writer lock and are **not lock-free** (no 256-bit CAS exists).
///
/// The limits are fixed for the policy's life.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
/// let clock = ManualClock::new();
/// let per_second = Quota::per_second(10).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let policy = MultiBucket::with_clock(Limits::new([per_second, per_minute]).unwrap(), clock.clone());
/// assert_eq!(policy.try_acquire(10), Ok(()));
/// assert_eq!(policy.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(policy.try_acquire(10), Ok(()));
/// clock.advance(Duration::from_secs(1));
/// // The second is full again, but the minute holds two thirds of a token: 1 s more.
/// assert_eq!(policy.try_acquire(1), Err(Denied::RetryAfter(Duration::from_secs(1))));
/// assert_eq!(policy.available(), 0);
/// ```
#[repr(C)]
pub struct MultiBucket<C = DefaultClock> {
    /// First: the clock and the decision words stay off the (cache-padded) state line.
    clock: C,
    limits: Limits,
    store: Store,
}

/// The states and the padded decision words, by the policy's size (not boxed: no pointer
/// chase per decision).
#[allow(clippy::large_enum_variant)]
enum Store {
    /// One or two quotas: one 128-bit word.
    Pair(Rates<2>, Pair),
    /// Three or four quotas: four words under a sequence lock.
    Wide(Rates<4>, Wide),
}

impl<C: fmt::Debug> fmt::Debug for MultiBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.limits.quotas().len();
        let states = on_store!(self, |_, s| pad::<MAX_LIMITS>(&s.load()));
        f.debug_struct("MultiBucket")
            .field("limits", &self.limits)
            .field("states", &&states[..len])
            .field("clock", &self.clock)
            .finish()
    }
}

/// Only with a real clock (feature `std`), as [`Bucket::new`](crate::Bucket::new).
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
impl MultiBucket<DefaultClock> {
    /// A policy whose quotas all start full, on the [`DefaultClock`] (feature `std`).
    ///
    /// ```
    /// use tollgate::{Limits, MultiBucket, Quota};
    /// let policy = MultiBucket::new(Limits::from(Quota::per_second(100).unwrap()));
    /// assert!(policy.try_acquire(1).is_ok());
    /// # let _ = tollgate::ManualClock::new();
    /// ```
    pub fn new(limits: Limits) -> MultiBucket<DefaultClock> {
        MultiBucket::with_clock(limits, DefaultClock::default())
    }
}

impl<C: Clock> MultiBucket<C> {
    /// A policy whose quotas all start full, on `clock`.
    ///
    /// ```
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(5).unwrap(), Quota::per_second(3).unwrap()]).unwrap();
    /// assert_eq!(MultiBucket::with_clock(limits, ManualClock::new()).available(), 3);
    /// ```
    pub fn with_clock(limits: Limits, clock: C) -> MultiBucket<C> {
        MultiBucket::from_states(limits, &[gcra::FULL; MAX_LIMITS], clock)
    }

    /// A policy whose quota `i` starts with `tokens[i]` tokens, the rest full. Errors:
    /// [`ConfigError::InitialAboveBurst`], [`ConfigError::TooManyQuotas`] for extra entries.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ConfigError, Limits, ManualClock, MultiBucket, Quota};
    /// let per_day = Quota::new(10_000, Duration::from_secs(86_400), 10_000).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_day]).unwrap();
    /// let policy = MultiBucket::with_initial_tokens(limits.clone(), &[2], ManualClock::new()).unwrap();
    /// assert_eq!(policy.available(), 2); // the second starts with 2, the day full
    /// let too_many = MultiBucket::with_initial_tokens(limits.clone(), &[1, 1, 1], ManualClock::new());
    /// assert_eq!(too_many.unwrap_err(), ConfigError::TooManyQuotas);
    /// let above = MultiBucket::with_initial_tokens(limits, &[11], ManualClock::new());
    /// assert_eq!(above.unwrap_err(), ConfigError::InitialAboveBurst);
    /// ```
    pub fn with_initial_tokens(
        limits: Limits,
        tokens: &[u64],
        clock: C,
    ) -> Result<MultiBucket<C>, ConfigError> {
        let quotas = limits.quotas();
        if tokens.len() > quotas.len() {
            return Err(ConfigError::TooManyQuotas);
        }
        let now = clock.now();
        let mut states = [gcra::FULL; MAX_LIMITS];
        for (i, &t) in tokens.iter().enumerate() {
            states[i] = gcra::with_tokens(now, &quotas[i], t)?;
        }
        Ok(MultiBucket::from_states(limits, &states, clock))
    }

    fn from_states(limits: Limits, states: &[u64; MAX_LIMITS], clock: C) -> MultiBucket<C> {
        let states = &states[..limits.quotas().len()];
        let store = if states.len() <= 2 {
            Store::Pair(Rates::new(&limits), Pair::new(pad(states)))
        } else {
            Store::Wide(Rates::new(&limits), Wide::new(pad(states)))
        };
        MultiBucket {
            clock,
            limits,
            store,
        }
    }

    /// Takes `cost` tokens from every quota if every quota holds them now; refusals as
    /// [`Bucket::try_acquire`](crate::Bucket::try_acquire)'s, over the policy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(2).unwrap().with_burst(20).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// assert_eq!(policy.try_acquire(10), Ok(()));
    /// // 100 ms for the first quota, 0 for the second (10 of 20 left): 100 ms.
    /// assert_eq!(policy.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(100))));
    /// assert_eq!(policy.try_acquire(11), Err(Denied::ExceedsBurst));
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        // Each store's own path, returning `Denied` in registers (no quota index to carry).
        match &self.store {
            Store::Pair(rates, pair) => self.try_acquire_pair(rates, pair, cost),
            Store::Wide(rates, wide) => self.try_acquire_wide(rates, wide, cost),
        }
    }

    /// [`try_acquire`](MultiBucket::try_acquire) for one or two quotas.
    #[inline(never)]
    fn try_acquire_pair(&self, rates: &Rates<2>, pair: &Pair, cost: u64) -> Result<(), Denied> {
        if cost == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        pair.update(|states| {
            let (next, verdict) = split(decide::decide_pair(states, now, rates, cost));
            (next, verdict.map_err(Denied::from))
        })
    }

    /// [`try_acquire`](MultiBucket::try_acquire) for three or four quotas.
    #[inline(never)]
    fn try_acquire_wide(&self, rates: &Rates<4>, wide: &Wide, cost: u64) -> Result<(), Denied> {
        if cost == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        wide.update(|states| {
            let (next, verdict) = split(decide::decide(states, now, rates, cost));
            (next, verdict.map_err(Denied::from))
        })
    }

    /// [`try_acquire`](MultiBucket::try_acquire), with the tightest quota's [`Snapshot`]
    /// ([`Snapshots::tightest`]) on refusal only; every quota's, and the quota that refused:
    /// [`Limiter::decide_or_snapshots`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota, Snapshot};
    /// let per_minute = Quota::new(3, Duration::from_secs(60), 3).unwrap();
    /// let limits = Limits::new([Quota::per_second(2).unwrap(), per_minute]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// assert_eq!(policy.try_acquire_or_snapshot(2), Ok(()));
    /// let (denied, tightest) = policy.try_acquire_or_snapshot(1).unwrap_err();
    /// assert_eq!(denied, Denied::RetryAfter(Duration::from_millis(500)));
    /// assert_eq!(tightest, Snapshot::new(0, Duration::from_secs(1)));
    /// ```
    pub fn try_acquire_or_snapshot(&self, cost: u64) -> Result<(), (Denied, Snapshot)> {
        Limiter::decide_or_snapshots(self, &(), cost)
            .map_err(|(refusal, snaps)| (refusal.denied(), snaps.tightest().1))
    }

    /// [`Limiter::decide`]: the decision naming the quota that refused.
    #[deprecated(note = "use `Limiter::decide(&policy, &(), cost)`")]
    pub fn try_acquire_detailed(&self, cost: u64) -> Result<(), Refusal> {
        Limiter::decide(self, &(), cost)
    }

    /// The decision with the tightest quota's snapshot whatever the verdict.
    #[deprecated(note = "use `Limiter::decide_snapshots(&policy, &(), cost)` (every quota's)")]
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let (verdict, snapshots) = Limiter::decide_snapshots(self, &(), cost);
        (verdict.map_err(Denied::from), snapshots.tightest().1)
    }

    /// [`Limiter::decide_snapshots`]: the decision with every quota's snapshot.
    #[deprecated(note = "use `Limiter::decide_snapshots(&policy, &(), cost)`")]
    pub fn try_acquire_snapshots(&self, cost: u64) -> (Result<(), Refusal>, Snapshots) {
        Limiter::decide_snapshots(self, &(), cost)
    }

    /// [`Limiter::decide_or_snapshots`]: every quota's snapshot on refusal only.
    #[deprecated(note = "use `Limiter::decide_or_snapshots(&policy, &(), cost)`")]
    #[allow(clippy::result_large_err)]
    pub fn try_acquire_or_snapshots(&self, cost: u64) -> Result<(), (Refusal, Snapshots)> {
        Limiter::decide_or_snapshots(self, &(), cost)
    }

    /// The verdict [`Limiter::decide`] would give now, taking nothing (for chains).
    pub(crate) fn check_now(&self, cost: u64) -> Result<(), Refusal> {
        let now = self.clock.now();
        on_store!(self, |rates, s, judge| judge(s.load(), now, rates, cost)
            .map(drop))
    }

    /// Whole tokens that every quota holds now (0 while any is in debt).
    ///
    /// ```
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(4).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// policy.try_acquire(3).unwrap();
    /// assert_eq!(policy.available(), 1);
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.clock.now();
        on_store!(self, |rates, s| decide::available(s.load(), now, rates))
    }

    /// Empties every quota now (each the stricter of its state and an empty one): what a process
    /// that cannot restore its state should do instead of starting full.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// policy.drain();
    /// assert_eq!(policy.available(), 0);
    /// assert_eq!(policy.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(200))));
    /// ```
    pub fn drain(&self) {
        let now = self.clock.now();
        let quotas = self.limits.quotas();
        let mut to = [0u64; MAX_LIMITS];
        for (t, q) in to.iter_mut().zip(quotas) {
            *t = q.earned_ceil(now) + q.burst_units();
        }
        self.raise(&to);
    }

    /// Every slot of the store in one atomic step, the padding included (one quota: the pair
    /// word's second slot; three: the fourth word; then repeated to four), for the loom models,
    /// which check that a padding slot stays a copy of the last quota's. Exists only when built
    /// with `--cfg tollgate_loom`; not part of the API.
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn slots(&self) -> [u64; MAX_LIMITS] {
        on_store!(self, |_, s| pad(&s.load()))
    }

    /// Raises each quota's state to at least `to[i]`, in one atomic step; the padding slots (from
    /// the policy's length on) as the last quota, so that each stays a copy of the slot it
    /// repeats, as the decisions keep it.
    fn raise(&self, to: &[u64; MAX_LIMITS]) {
        fn max_each<const N: usize>(cur: [u64; N], to: &[u64; MAX_LIMITS]) -> Option<[u64; N]> {
            let mut next = cur;
            for (n, &t) in next.iter_mut().zip(to) {
                *n = (*n).max(t);
            }
            (next != cur).then_some(next)
        }
        let to = pad(&to[..self.limits.quotas().len()]);
        on_store!(self, |_, s| s.update(|cur| (max_each(cur, &to), ())))
    }

    /// The policy.
    ///
    /// ```
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::from(Quota::per_second(10).unwrap());
    /// assert_eq!(MultiBucket::with_clock(limits.clone(), ManualClock::new()).limits(), &limits);
    /// ```
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The policy's clock.
    ///
    /// ```
    /// use tollgate::{Clock, Limits, ManualClock, MultiBucket, Quota};
    /// let policy = MultiBucket::with_clock(Limits::from(Quota::per_second(1).unwrap()), ManualClock::new());
    /// assert_eq!(policy.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// The decisions naming the quota that refused ([`Refusal`]), and every quota's snapshot as
/// the decision left it ([`Snapshots`]), for a `RateLimit-Policy` header.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, Limiter, Limits, ManualClock, MultiBucket, Quota, Snapshot};
/// let per_day = Quota::new(3, Duration::from_secs(86_400), 3).unwrap();
/// let limits = Limits::new([Quota::per_second(10).unwrap(), per_day]).unwrap();
/// let policy = MultiBucket::with_clock(limits, ManualClock::new());
/// assert_eq!(policy.try_acquire(3), Ok(()));
/// let refusal = policy.decide(&(), 1).unwrap_err();
/// assert_eq!(refusal.quota_index(), 1); // the daily quota fired
/// assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_secs(28_800)));
/// let (_, snaps) = policy.decide_snapshots(&(), 0);
/// assert_eq!(snaps.as_slice()[1], Snapshot::new(0, Duration::from_secs(86_400)));
/// ```
impl<C: Clock> Limiter for MultiBucket<C> {
    type Key = ();

    #[inline]
    fn decide(&self, _: &(), cost: u64) -> Result<(), Refusal> {
        if cost == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        on_store!(self, |rates, s, judge| s
            .update(|st| split(judge(st, now, rates, cost))))
    }
    fn decide_or_snapshots(&self, _: &(), cost: u64) -> Result<(), (Refusal, Snapshots)> {
        if cost == 0 {
            return Ok(());
        }
        let (now, len) = (self.clock.now(), self.limits.quotas().len());
        on_store!(self, |rates, s, judge| s.update(|st| {
            let (next, verdict) = split(judge(st, now, rates, cost));
            let snaps = || Snapshots::from_padded(decide::snapshots(st, now, rates), len);
            (next, verdict.map_err(|refusal| (refusal, snaps())))
        }))
    }
    fn decide_snapshots(&self, _: &(), cost: u64) -> (Result<(), Refusal>, Snapshots) {
        let (now, len) = (self.clock.now(), self.limits.quotas().len());
        on_store!(self, |rates, s, judge| s.update(|st| {
            let (next, verdict) = split(judge(st, now, rates, cost));
            let snaps = decide::snapshots(next.unwrap_or(st), now, rates);
            (next, (verdict, Snapshots::from_padded(snaps, len)))
        }))
    }
    fn limits(&self, _: &()) -> Option<Limits> {
        Some(self.limits.clone())
    }
    // The limits are fixed at construction: those of every decision.
    fn decide_snapshots_limits(
        &self,
        key: &(),
        cost: u64,
    ) -> (Result<(), Refusal>, Snapshots, Option<Limits>) {
        let (verdict, snaps) = self.decide_snapshots(key, cost);
        (verdict, snaps, Some(self.limits.clone()))
    }
    #[inline]
    fn decide_or_snapshots_limits(
        &self,
        key: &(),
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots, Option<Limits>)> {
        self.decide_or_snapshots(key, cost)
            .map_err(|(refusal, snaps)| (refusal, snaps, Some(self.limits.clone())))
    }
    fn max_quotas(&self) -> usize {
        self.limits.quotas().len()
    }
}

/// A decision in the form the store's loops take: the states to write and the verdict.
#[inline(always)]
fn split<S>(decided: Result<Option<S>, Refusal>) -> (Option<S>, Result<(), Refusal>) {
    match decided {
        Ok(next) => (next, Ok(())),
        Err(refusal) => (None, Err(refusal)),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Limiter, Limits, ManualClock, MultiBucket, Quota};
    use core::time::Duration;

    /// `decide_or_snapshots` equals `decide_snapshots` on refusals and in the verdict, for one to
    /// four quotas (the pair word and the sequence lock), two policies driven alike.
    #[test]
    fn agrees_with_decide_snapshots() {
        let quotas = [
            Quota::per_second(3).unwrap(),
            Quota::new(5, Duration::from_secs(60), 5).unwrap(),
            Quota::new(7, Duration::from_secs(3600), 6).unwrap(),
            Quota::new(2, Duration::from_millis(300), 2).unwrap(),
        ];
        for n in 1..=4 {
            let limits = Limits::new(quotas[..n].iter().copied()).unwrap();
            let (ca, cb) = (ManualClock::new(), ManualClock::new());
            let a = MultiBucket::with_clock(limits.clone(), ca.clone());
            let b = MultiBucket::with_clock(limits, cb.clone());
            for step in 0..200u64 {
                let cost = step % 4;
                let (verdict, snaps) = a.decide_snapshots(&(), cost);
                match (verdict, b.decide_or_snapshots(&(), cost)) {
                    (Ok(()), Ok(())) => {}
                    (Err(r1), Err((r2, s2))) => assert_eq!((r1, snaps), (r2, s2), "step {step}"),
                    other => panic!("step {step}: {other:?}"),
                }
                let dt = Duration::from_millis(step * 37 % 700);
                ca.advance(dt);
                cb.advance(dt);
            }
        }
    }
}
