//! [`KeyedPolicy`]: what each key of a [`KeyedLimiter`] carries, and where its state lives: for
//! a [`Quota`] the word beside its fingerprint in the index's slot, decided with one CAS of the
//! slot (this file); for `Limits` a record the word names (`limits.rs`). The limiter's shell is
//! written once against the sealed half of this trait.

use super::index::{Locked, Step};
use super::KeyedLimiter;
use crate::error::Denied;
use crate::gcra;
use crate::limits::Limits;
use crate::multi::Snapshots;
use crate::quota::Quota;
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;
use core::fmt;
use core::time::Duration;

/// What each key of a [`KeyedLimiter`] carries: one [`Quota`] (`KeyedLimiter<K>`, its state
/// inline in the table's slot) or one to four quotas that must all hold ([`Limits`],
/// `KeyedMultiLimiter<K>`, a record per key). Sealed: implemented by those two only.
///
/// ```
/// use tollgate::{KeyedLimiter, Limits, ManualClock, Quota};
/// let q = Quota::per_second(5).unwrap();
/// let one: KeyedLimiter<u32, Quota, _> = KeyedLimiter::with_clock(q, 10, ManualClock::new());
/// let all: KeyedLimiter<u32, Limits, _> = KeyedLimiter::with_clock(Limits::from(q), 10, ManualClock::new());
/// assert_eq!(one.try_acquire(&1, 5), all.try_acquire(&1, 5));
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub trait KeyedPolicy: sealed::Sealed + Clone + fmt::Debug + Sized + 'static {}

impl KeyedPolicy for Quota {}
impl KeyedPolicy for crate::limits::Limits {}

pub(crate) mod sealed {
    use super::*;

    /// The per-policy half of the keyed limiter (public in a private module: no other crate
    /// implements [`KeyedPolicy`] or calls these).
    pub trait Sealed: Into<Limits> {
        /// The policy ready for the hot path (its decision words).
        type Rule: fmt::Debug;
        /// Storage beside the index (`()` when the slot's word is the whole state).
        type Store;
        /// One key's state.
        type State: Copy;
        /// What a refusal names: a [`Denied`], or a policy's refusal with its quota.
        type Refusal: Copy + fmt::Debug + Into<Denied>;
        /// A key's snapshot: one quota's, or every quota's.
        type Snap;

        /// The name the limiter's `Debug` shows.
        const NAME: &'static str;
        /// Whether a rule may hold several quotas (refusals then name theirs).
        const SEVERAL: bool;

        /// The rule of `self`.
        fn rule(self) -> Self::Rule;
        /// The policy a rule was made from.
        fn policy(rule: &Self::Rule) -> &Self;
        /// The quotas of a rule, in order.
        fn quotas(rule: &Self::Rule) -> &[Quota];
        /// The storage for `max_keys` keys whose policies hold up to `quotas` quotas.
        fn store(max_keys: usize, quotas: usize) -> Self::Store;

        /// The smallest burst: a larger cost is refused before the clock is read.
        fn min_burst(rule: &Self::Rule) -> u64;
        /// The refusal of a cost above the smallest burst.
        fn exceeds(rule: &Self::Rule) -> Self::Refusal;
        /// The refusal of a new key for want of room, with `wait`.
        fn table_full(wait: Duration) -> Self::Refusal;
        /// Records a decision with the limiter's observer; returns what the caller gets
        /// (`Ok` in shadow mode).
        #[cfg(feature = "metrics")]
        fn observe(
            observer: &crate::observe::KeyedObserver,
            verdict: Result<(), Self::Refusal>,
        ) -> Result<(), Self::Refusal>;

        /// Where a key not in the table starts: every quota full as of `evicted_at`.
        fn start(rule: &Self::Rule, evicted_at: u64) -> Self::State;
        /// The decision on `state` alone: the state to write (`None`: nothing) or a refusal.
        fn decide_state(
            rule: &Self::Rule,
            state: &Self::State,
            now: u64,
            cost: u64,
        ) -> Result<Option<Self::State>, Self::Refusal>;
        /// The first instant at which every quota is full (`u64::MAX`: never).
        fn full_at(rule: &Self::Rule, state: &Self::State) -> u64;
        /// Whole tokens every quota holds at `now`.
        fn available(rule: &Self::Rule, state: &Self::State, now: u64) -> u64;
        /// The key's snapshot at `now`.
        fn snapshot(rule: &Self::Rule, state: &Self::State, now: u64) -> Self::Snap;
        /// The snapshot of a new key refused for want of room: nothing until `wait`.
        fn snapshot_untracked(rule: &Self::Rule, wait: Duration) -> Self::Snap;
        /// A refusal as a policy's (quota 0 for a single quota).
        fn refusal(refusal: Self::Refusal) -> Refusal;
        /// A key's snapshot as a policy's (one for a single quota).
        fn snapshots(snap: Self::Snap) -> Snapshots;
        /// The state's quotas, one word each (for a save).
        fn words(state: &Self::State) -> &[u64];
        /// The state of one word per quota (a restore's; `len` of the rule's quotas).
        fn from_words(words: &[u64]) -> Self::State;

        /// The decision for a key with `0 < cost <=` its smallest burst: the lock-free fast
        /// path in line, ending in the limiter's slow path out of line.
        fn decide<K, C: crate::clock::Clock>(
            limiter: &KeyedLimiter<K, Self, C>,
            fp: u64,
            rule: &Self::Rule,
            cost: u64,
            now: impl FnOnce() -> u64,
        ) -> Result<(), Self::Refusal>
        where
            Self: KeyedPolicy;
        /// The decision on a tracked key after the fast path failed, helping a migration along:
        /// `None` if the key is not tracked (the insert path decides); `epoch` is the rebuild
        /// epoch read before the last probe.
        fn decide_tracked<K, C>(
            limiter: &KeyedLimiter<K, Self, C>,
            fp: u64,
            rule: &Self::Rule,
            cost: u64,
            now: u64,
            epoch: &mut u64,
        ) -> Option<Result<(), Self::Refusal>>
        where
            Self: KeyedPolicy;
        /// The state behind the word `word` read from key `fp`'s slot (by a lookup or a save's
        /// walk), if it still is that key's (a consistent read).
        fn saved<K, C>(
            limiter: &KeyedLimiter<K, Self, C>,
            fp: u64,
            word: u64,
            rule: &Self::Rule,
        ) -> Option<Self::State>
        where
            Self: KeyedPolicy;
        /// Tracks the new key `fp` in `state`, first full at `full_at` (under the index's
        /// mutex, with room for it); `false` if no storage is left.
        fn place<K, C>(
            limiter: &KeyedLimiter<K, Self, C>,
            locked: &mut Locked<'_>,
            fp: u64,
            rule: &Self::Rule,
            state: &Self::State,
            full_at: u64,
        ) -> bool
        where
            Self: KeyedPolicy;
        /// Keeps the stricter of the tracked key's state and `state` in each quota (a
        /// restore's key met twice), under the index's mutex.
        fn merge<K, C>(
            limiter: &KeyedLimiter<K, Self, C>,
            fp: u64,
            rule: &Self::Rule,
            state: &Self::State,
        ) where
            Self: KeyedPolicy;
        /// One bounded step of the index's sweep at `now`, evicting the keys full then; raises
        /// the table's eviction floor to `now` before each eviction.
        fn sweep_step<K, C>(
            limiter: &KeyedLimiter<K, Self, C>,
            locked: &mut Locked<'_>,
            now: u64,
        ) -> Step
        where
            Self: KeyedPolicy;
    }
}

impl sealed::Sealed for Quota {
    type Rule = Quota;
    type Store = ();
    type State = u64;
    type Refusal = Denied;
    type Snap = Snapshot;

    const NAME: &'static str = "KeyedLimiter";
    const SEVERAL: bool = false;

    fn rule(self) -> Quota {
        self
    }
    fn policy(rule: &Quota) -> &Quota {
        rule
    }
    fn quotas(rule: &Quota) -> &[Quota] {
        core::slice::from_ref(rule)
    }
    fn store(_: usize, _: usize) {}

    #[inline(always)]
    fn min_burst(rule: &Quota) -> u64 {
        rule.burst()
    }
    fn exceeds(_: &Quota) -> Denied {
        Denied::ExceedsBurst
    }
    fn table_full(wait: Duration) -> Denied {
        Denied::RetryAfter(wait)
    }
    #[cfg(feature = "metrics")]
    #[inline(always)]
    fn observe(
        observer: &crate::observe::KeyedObserver,
        verdict: Result<(), Denied>,
    ) -> Result<(), Denied> {
        observer.decided(verdict)
    }

    #[inline]
    fn start(rule: &Quota, evicted_at: u64) -> u64 {
        rule.earned_floor(evicted_at)
    }
    fn decide_state(rule: &Quota, state: &u64, now: u64, cost: u64) -> Result<Option<u64>, Denied> {
        gcra::try_acquire(*state, now, rule, cost)
    }
    fn full_at(rule: &Quota, state: &u64) -> u64 {
        gcra::full_at(*state, rule)
    }
    fn available(rule: &Quota, state: &u64, now: u64) -> u64 {
        gcra::available(*state, now, rule)
    }
    fn snapshot(rule: &Quota, state: &u64, now: u64) -> Snapshot {
        gcra::snapshot(*state, now, rule)
    }
    fn snapshot_untracked(_: &Quota, wait: Duration) -> Snapshot {
        Snapshot::new(0, wait)
    }
    fn refusal(denied: Denied) -> Refusal {
        crate::limiter::one(denied)
    }
    fn snapshots(snap: Snapshot) -> Snapshots {
        Snapshots::one(snap)
    }
    fn words(state: &u64) -> &[u64] {
        core::slice::from_ref(state)
    }
    fn from_words(words: &[u64]) -> u64 {
        words[0]
    }

    /// One lock-free probe, the clock read while the slot's line arrives, and at most one CAS,
    /// in line; a miss or a lost race goes to the slow path, out of line.
    #[inline]
    fn decide<K, C: crate::clock::Clock>(
        limiter: &KeyedLimiter<K, Quota, C>,
        fp: u64,
        quota: &Quota,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Denied> {
        // Read before the probe: the insert path trusts a miss only if no entry moved around it.
        let epoch = limiter.index.rebuild_epoch();
        let hit = limiter.index.lookup(fp);
        // After the slot's load is issued: a word older than the reading is fine (the CAS fails
        // on any change; a refusal from an older, more lenient state stands).
        let now = now();
        if let Some(hit) = &hit {
            match gcra::try_acquire_scaled(hit.state(), now, quota.scaled(), cost) {
                Ok(Some(next)) => {
                    if hit.commit(next) {
                        return Ok(());
                    }
                }
                Ok(None) => return Ok(()),
                Err(denied) => return Err(denied),
            }
        }
        limiter.decide_slow(fp, quota, cost, now, epoch)
    }

    fn decide_tracked<K, C>(
        limiter: &KeyedLimiter<K, Quota, C>,
        fp: u64,
        quota: &Quota,
        cost: u64,
        now: u64,
        _: &mut u64,
    ) -> Option<Result<(), Denied>> {
        // The hit path again: a lock-free probe and CASes on the key's own slot.
        let result = limiter.index.apply(fp, |s| {
            gcra::try_acquire_scaled(s, now, quota.scaled(), cost)
        })?;
        if limiter.index.migrating() {
            // Every lookup during a migration comes here: each takes one step.
            limiter.help_migrate();
        }
        Some(result)
    }

    fn saved<K, C>(_: &KeyedLimiter<K, Quota, C>, _: u64, state: u64, _: &Quota) -> Option<u64> {
        Some(state)
    }

    fn place<K, C>(
        _: &KeyedLimiter<K, Quota, C>,
        locked: &mut Locked<'_>,
        fp: u64,
        _: &Quota,
        state: &u64,
        full_at: u64,
    ) -> bool {
        locked.insert(fp, *state, full_at);
        true
    }

    fn merge<K, C>(limiter: &KeyedLimiter<K, Quota, C>, fp: u64, _: &Quota, &state: &u64) {
        // A later state is the stricter one.
        limiter
            .index
            .apply(fp, |s| Ok::<_, ()>((state > s).then_some(state)));
    }

    fn sweep_step<K, C>(
        limiter: &KeyedLimiter<K, Quota, C>,
        locked: &mut Locked<'_>,
        now: u64,
    ) -> Step {
        let evicted_at = &limiter.table.evicted_at;
        locked.sweep_step(
            now,
            |fp, s| gcra::full_at(s, limiter.rule_of(fp)),
            // Raised before the eviction's CAS: whoever misses the key afterwards starts it
            // from a state at least as strict as the evicted one (see `Table::evicted_at`).
            || {
                evicted_at.fetch_max(now, crate::sync::Ordering::SeqCst);
            },
        )
    }
}
