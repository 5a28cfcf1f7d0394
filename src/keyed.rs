//! [`KeyedLimiter`]: one exact bucket per key in a table of bounded size.
//!
//! On many cores a lookup reads the flat table (its lines stay shared in every core's cache)
//! and writes only the key's slot, so only threads on the same key contend (where 128-bit loads
//! are `portable-atomic` CASes, keys sharing a line do too); counts go to per-thread shards.

mod builder;
mod counters;
mod decide;
pub(crate) mod index;
mod limits;
#[cfg(any(feature = "metrics", feature = "tracing"))]
pub(crate) mod named;
#[cfg(feature = "persist")]
pub(crate) mod persist;
mod policy;
mod records;
pub(crate) mod table;
mod until_key_ready;

pub use builder::{KeyedLimiterBuilder, KeyedMultiLimiterBuilder};
pub(crate) use counters::CounterShards;
pub use counters::KeyedCounters;
pub use limits::KeyedMultiLimiter;
pub use policy::KeyedPolicy;
use table::{Insert, Table};
pub use until_key_ready::{MultiUntilKeyReady, UntilKeyReady};

use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::limiter::Limiter;
use crate::quota::Quota;
use crate::snapshot::Snapshot;
use crate::sync::Ordering;
use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;
use crossbeam_utils::CachePadded;
use index::{fingerprint, Index};
use std::collections::HashMap;

/// The largest `max_keys` honoured (larger values are clamped): the table is allocated up front,
/// 16 bytes × 1.5 × the next power of two of 2 × `max_keys`, so this caps it at 3 GiB.
const MAX_KEYS: usize = 1 << 26;

/// A rate limiter with one exact token bucket per key (tenant, API key, client address) and a
/// hard bound on the number of keys it tracks.
///
/// What each key carries is the policy `P`: a [`Quota`] (the default; the key's state is one
/// word inline in the table's slot) or [`Limits`](crate::Limits), one to four quotas that must
/// all hold ([`KeyedMultiLimiter`], a record per key). Everything below holds for both; with
/// `Limits` "full" means every quota full, and a key decides as a
/// [`MultiBucket`](crate::MultiBucket) does.
///
/// * **Exact.** Each key's verdicts equal those of one [`Bucket`](crate::Bucket) per key.
/// * **Bounded.** [`len`](KeyedLimiter::len) never exceeds `max_keys`. Only *full* buckets are
///   evicted (from its eviction reading on, a full bucket is indistinguishable from a key never
///   seen), lazily, by the insertions that need room; [`sweep`](KeyedLimiter::sweep) runs one.
/// * **Under a flood.** When the table is full and no bucket is full, a new key is refused in
///   O(1) with `RetryAfter(d)`, `0 < d ≤` one whole burst's refill (until a tracked bucket is
///   full; `Duration::MAX` if none will be within the [`HORIZON`](crate::HORIZON)), or
///   admitted untracked with [`KeyedLimiterBuilder::fail_open`].
/// * **Lock-free lookups.** Deciding for a tracked key writes only that key's slot (and the
///   thread's counter shard). Insertions and evictions take one mutex for bounded work, never
///   O(`max_keys`); the sweep is incremental, so a full table can refuse a new key a bounded
///   number of times while a full bucket it has not reached exists
///   ([docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#cost-of-an-insertion)).
///
/// # Guarantees, by clock
///
/// * **Monotone readings** (one thread, or readings that follow their decisions' order): every
///   verdict, `RetryAfter` and [`available`](KeyedLimiter::available) of a tracked or
///   never-refused key equals that of one exact `Bucket` per key.
/// * **Stale readings and clocks that step back**: no interleaving over-admits. Each key's
///   admissions, each at its decision's reading, stay within `burst + rate·Δ` in every window
///   `Δ`, through evictions, re-insertions, sweeps and table growth: a key the table does not
///   track starts *full as of the latest eviction reading* (its own quota's), which for an
///   older reading holds what a bucket full at the eviction held then. So after a clock steps
///   far back, new keys are refused until it is within one burst's refill of that reading.
/// * **`fail_open`** admissions (untracked, the table full) are outside every bound.
///
/// # Keys are identified by a 64-bit fingerprint
///
/// The table stores no keys: a slot is 16 bytes, the key's *fingerprint* (foldhash's fast
/// hasher, all its seeds drawn from one random 64-bit seed per limiter, its low bit set: 63
/// bits of hash) and its state, allocated up front (48 to 96 bytes per unit of `max_keys`,
/// clamped to 2^26). No per-key allocation or key copies — and one trade: **two keys with equal fingerprints share
/// one bucket**, stricter for both. With `n` tracked keys the chance of any collision is about
/// `n² / 2^64` (5 × 10⁻⁸ at a million keys); the seed is secret, so collisions cannot be aimed.
/// A key's slot also mixes in a per-process secret that is never saved, so a state file (which
/// holds the seed) cannot aim keys at one stretch of the table. Overrides
/// ([`KeyedLimiterBuilder::override_quota`]) are found by fingerprint too: a key colliding with
/// an override key runs under that key's quota, which may be looser (the same odds, per
/// override).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let limiter = KeyedLimiter::with_clock(Quota::per_second(2).unwrap(), 1000, clock.clone());
/// assert_eq!(limiter.try_acquire(&"alice", 2), Ok(()));
/// assert_eq!(limiter.try_acquire(&"alice", 1), Err(Denied::RetryAfter(Duration::from_millis(500))));
/// assert_eq!(limiter.try_acquire(&"bob", 1), Ok(()));
/// assert_eq!(limiter.len(), 2);
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct KeyedLimiter<K, P: KeyedPolicy = Quota, C = DefaultClock> {
    index: Index,
    hasher: index::Hasher,
    /// The hasher's per-limiter seed (its shared seed is derived from it), kept so that a saved
    /// table can be found again by a restored limiter.
    #[cfg_attr(not(feature = "persist"), allow(dead_code))]
    seed: u64,
    rule: P::Rule,
    overrides: HashMap<u64, P::Rule>,
    /// What the index's words name, if they are not the keys' states (`Limits`' records).
    store: P::Store,
    max_keys: u64,
    fail_open: bool,
    table: CachePadded<Table>,
    shards: CounterShards,
    clock: C,
    /// Metrics and tracing (see `keyed/named.rs`).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    observe: crate::observe::KeyedObserver,
    _keys: core::marker::PhantomData<fn(&K)>,
}

impl<K, P: KeyedPolicy, C: fmt::Debug> fmt::Debug for KeyedLimiter<K, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(P::NAME)
            .field("policy", P::policy(&self.rule))
            .field("max_keys", &self.max_keys)
            .field("len", &self.table.len.load(Ordering::Relaxed))
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy> KeyedLimiter<K, P> {
    /// A limiter on the [`DefaultClock`] tracking at most `max_keys` keys, each with `policy`.
    /// With `max_keys == 0` every request is refused with `RetryAfter(Duration::MAX)`
    /// ([`KeyedLimiter::builder`] rejects 0 instead).
    ///
    /// ```
    /// let limiter = tollgate::KeyedLimiter::new(tollgate::Quota::per_second(5).unwrap(), 100);
    /// assert!(limiter.try_acquire(&"10.0.0.1".to_string(), 1).is_ok());
    /// ```
    pub fn new(policy: P, max_keys: usize) -> Self {
        KeyedLimiter::with_clock(policy, max_keys, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiter<K, P, C> {
    /// A limiter on `clock` tracking at most `max_keys` keys (clamped to 2^26), each with
    /// `policy`; the table (and for [`Limits`](crate::Limits) one record per key) is allocated
    /// here.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 100, ManualClock::new());
    /// assert_eq!(limiter.try_acquire(&42u64, 5), Ok(()));
    /// assert!(limiter.try_acquire(&42u64, 1).is_err());
    /// ```
    pub fn with_clock(policy: P, max_keys: usize, clock: C) -> Self {
        KeyedLimiter::from_parts(policy, max_keys, clock, HashMap::new(), false, None)
    }

    /// The limiter, with the fingerprint seed given (a restore's) or drawn at random.
    fn from_parts(
        policy: P,
        max_keys: usize,
        clock: C,
        overrides: HashMap<K, P>,
        fail_open: bool,
        seed: Option<u64>,
    ) -> Self {
        let max_keys = max_keys.min(MAX_KEYS);
        let (seed, hasher) = index::seeded_hasher(seed);
        let rule = policy.rule();
        let overrides: HashMap<u64, P::Rule> = overrides
            .into_iter()
            .map(|(k, p)| (fingerprint(hasher.hash_one(&k)), p.rule()))
            .collect();
        let rules = || overrides.values().chain([&rule]);
        let quotas = rules().map(|r| P::quotas(r).len()).max().unwrap_or(1);
        // The longest refill of a whole burst of any quota of any policy: the cap of a
        // full-table wait.
        let cap = rules()
            .flat_map(|r| P::quotas(r))
            .map(|q| q.refill_time(q.burst()))
            .max()
            .unwrap_or(core::time::Duration::MAX);
        KeyedLimiter {
            index: Index::new(max_keys),
            hasher,
            seed,
            store: P::store(max_keys, quotas),
            rule,
            overrides,
            max_keys: u64::try_from(max_keys).unwrap_or(u64::MAX),
            fail_open,
            table: CachePadded::new(Table::new(cap)),
            shards: CounterShards::new(),
            clock,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observe: crate::observe::KeyedObserver::new(None, max_keys as u64, false),
            _keys: core::marker::PhantomData,
        }
    }

    /// Takes `cost` tokens from `key`'s bucket (every quota of its policy) if it holds them now;
    /// a new key is tracked once admitted, and cost 0 is admitted and tracks nothing.
    /// `Err(RetryAfter(d))`: the bucket is short (`d` as for a [`Bucket`](crate::Bucket); with
    /// several quotas, until all hold `cost`), or the key is new and the table is full ("Under
    /// a flood" above). `Err(ExceedsBurst)`: `cost` is above the key's (smallest) burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 1, clock.clone());
    /// assert_eq!(limiter.try_acquire(&1, 10), Ok(()));
    /// assert_eq!(limiter.try_acquire(&2, 1), Err(Denied::RetryAfter(Duration::from_secs(1)))); // table full
    /// clock.advance(Duration::from_secs(1)); // key 1 is full again: it can be evicted
    /// assert_eq!(limiter.try_acquire(&2, 1), Ok(()));
    /// assert_eq!(limiter.try_acquire(&2, 11), Err(Denied::ExceedsBurst));
    /// ```
    #[inline]
    pub fn try_acquire(&self, key: &K, cost: u64) -> Result<(), Denied> {
        self.acquire(key, cost).map_err(Into::into)
    }

    /// [`try_acquire`](KeyedLimiter::try_acquire) with a borrowed form of the key (`&str` for
    /// `String` keys, `&[u8]` for `Vec<u8>`): never an allocation.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, Quota, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 10, ManualClock::new());
    /// assert!(limiter.try_acquire_by("tenant-1", 1).is_ok());
    /// assert!(limiter.try_acquire(&"tenant-1".to_string(), 1).is_err());
    /// ```
    #[inline]
    pub fn try_acquire_by<Q>(&self, key: &Q, cost: u64) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, cost).map_err(Into::into)
    }

    /// The decision and the key's tightest snapshot, whatever the verdict.
    #[deprecated(note = "use `Limiter::decide_snapshots(&limiter, &key, cost)`, or \
                         `try_acquire_or_snapshot` for the snapshot on refusal")]
    pub fn try_acquire_snapshot<Q>(&self, key: &Q, cost: u64) -> (Result<(), Denied>, Snapshot)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decide_then(key, cost, |v, snap| {
            (v.map_err(Into::into), P::snapshots(snap()).tightest().1)
        })
    }

    /// [`try_acquire_by`](KeyedLimiter::try_acquire_by), with the key's bucket on refusal only
    /// (for `RateLimit` headers): its whole tokens and the time until it is full at the
    /// decision's reading (with several quotas, the tightest one's: fewest tokens, ties to the
    /// one full last). The state is read once more at that reading, so it may include other
    /// threads' decisions on the key; a new key refused for a full table reports 0 tokens, full
    /// after the wait. Whatever the verdict, and every quota's: [`Limiter::decide_snapshots`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota, Snapshot};
    /// let limiter: KeyedLimiter<&str, Quota, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.try_acquire_or_snapshot(&"k", 10), Ok(()));
    /// assert_eq!(
    ///     limiter.try_acquire_or_snapshot(&"k", 1),
    ///     Err((Denied::RetryAfter(Duration::from_millis(100)), Snapshot::new(0, Duration::from_secs(1))))
    /// );
    /// ```
    pub fn try_acquire_or_snapshot<Q>(&self, key: &Q, cost: u64) -> Result<(), (Denied, Snapshot)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decide_then(key, cost, |v, snap| {
            v.map_err(|r| (r.into(), P::snapshots(snap()).tightest().1))
        })
    }

    /// The decision at one clock reading, handed to `then` with the key's snapshot at that
    /// reading, read only if `then` asks.
    fn decide_then<Q, R>(
        &self,
        key: &Q,
        cost: u64,
        then: impl FnOnce(Result<(), P::Refusal>, &dyn Fn() -> P::Snap) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        let rule = self.rule_of(fp);
        let now = self.clock.now();
        let verdict = self.acquire_fp(fp, rule, cost, || now);
        then(verdict, &|| self.snap_after(fp, rule, now, cost, verdict))
    }

    /// The key's snapshot at `now` after a decision of `cost` on it that gave `verdict`.
    fn snap_after(
        &self,
        fp: u64,
        rule: &P::Rule,
        now: u64,
        cost: u64,
        verdict: Result<(), P::Refusal>,
    ) -> P::Snap {
        let start = || self.start_state(rule);
        match (self.tracked(fp, rule), verdict.map_err(Into::into)) {
            (Some(state), _) => P::snapshot(rule, &state, now),
            // A new key refused because the table is full (where it would start admits the
            // cost): untracked, nothing until the wait. One refused by where it starts (the
            // floor after evictions, a drain) is that bucket.
            (None, Err(Denied::RetryAfter(wait)))
                if P::decide_state(rule, &start(), now, cost).is_ok() =>
            {
                P::snapshot_untracked(rule, wait)
            }
            (None, _) => P::snapshot(rule, &start(), now),
        }
    }

    /// Whole tokens `key`'s bucket holds now, in every quota (its smallest burst if the key is
    /// not tracked).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// limiter.try_acquire(&"k", 2).unwrap();
    /// assert_eq!(limiter.available(&"k"), 3);
    /// assert_eq!(limiter.available(&"other"), 5);
    /// ```
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        let rule = self.rule_of(fp);
        let now = self.clock.now();
        let state = self
            .tracked(fp, rule)
            .unwrap_or_else(|| self.start_state(rule));
        P::available(rule, &state, now)
    }

    /// The number of tracked keys (insertions in progress included); never above
    /// [`max_keys`](KeyedLimiter::max_keys).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        usize::try_from(self.table.len.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Whether the index is migrating its entries to a region of twice the size (only for the
    /// loom models, which check that they reach one).
    #[cfg(tollgate_loom)]
    #[doc(hidden)]
    pub fn is_migrating(&self) -> bool {
        self.index.migrating()
    }

    /// Whether no key is tracked.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, Quota, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert!(limiter.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on [`len`](KeyedLimiter::len): `max_keys` as given (clamped to 2^26).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, Quota, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.max_keys(), 10);
    /// ```
    pub fn max_keys(&self) -> usize {
        usize::try_from(self.max_keys).unwrap_or(usize::MAX)
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use tollgate::{Clock, KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, Quota, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiter<K, P, C> {
    /// The state a key not in the table starts from: full as of the latest eviction reading
    /// ("Guarantees, by clock" on the type; `Table::evicted_at`).
    #[inline]
    fn start_state(&self, rule: &P::Rule) -> P::State {
        P::start(rule, self.table.evicted_at.load(Ordering::SeqCst))
    }

    /// The rule of the key with fingerprint `fp`: its override's, or the default (by reference:
    /// the hot path never copies it).
    #[inline]
    fn rule_of(&self, fp: u64) -> &P::Rule {
        if self.overrides.is_empty() {
            &self.rule
        } else {
            self.overrides.get(&fp).unwrap_or(&self.rule)
        }
    }

    /// The state of the tracked key `fp` (a consistent read), looked up again if its record
    /// was handed to another key meanwhile.
    fn tracked(&self, fp: u64, rule: &P::Rule) -> Option<P::State> {
        loop {
            if let Some(state) = P::saved(self, fp, self.index.load(fp)?, rule) {
                return Some(state);
            }
        }
    }

    /// The most quotas a policy of this limiter holds (the default's or an override's).
    fn most_quotas(&self) -> usize {
        let rules = self.overrides.values().chain([&self.rule]);
        rules.map(|r| P::quotas(r).len()).max().unwrap_or(1)
    }

    /// The key's fingerprint: its seeded 64-bit hash, odd (never 0, the index's empty slot).
    #[inline]
    fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        fingerprint(self.hasher.hash_one(key))
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> Limiter for KeyedLimiter<K, P, C> {
    type Key = K;

    #[inline]
    fn decide(&self, key: &K, cost: u64) -> Result<(), crate::Refusal> {
        self.acquire(key, cost).map_err(P::refusal)
    }
    fn decide_or_snapshots(
        &self,
        key: &K,
        cost: u64,
    ) -> Result<(), (crate::Refusal, crate::Snapshots)> {
        self.decide_then(key, cost, |v, snap| v.map_err(|r| (r, snap())))
            .map_err(|(r, snap)| (P::refusal(r), P::snapshots(snap)))
    }
    fn decide_snapshots(
        &self,
        key: &K,
        cost: u64,
    ) -> (Result<(), crate::Refusal>, crate::Snapshots) {
        self.decide_then(key, cost, |v, snap| {
            (v.map_err(P::refusal), P::snapshots(snap()))
        })
    }
    fn limits(&self, key: &K) -> Option<crate::Limits> {
        Some(
            P::policy(self.rule_of(self.fingerprint(key)))
                .clone()
                .into(),
        )
    }
    // Each key's policy (its override or the default) is fixed when the table is built: the
    // one its every decision is made under.
    fn decide_snapshots_limits(
        &self,
        key: &K,
        cost: u64,
    ) -> (
        Result<(), crate::Refusal>,
        crate::Snapshots,
        Option<crate::Limits>,
    ) {
        let (verdict, snaps) = self.decide_snapshots(key, cost);
        (verdict, snaps, self.limits(key))
    }
    fn decide_or_snapshots_limits(
        &self,
        key: &K,
        cost: u64,
    ) -> Result<(), (crate::Refusal, crate::Snapshots, Option<crate::Limits>)> {
        self.decide_or_snapshots(key, cost)
            .map_err(|(refusal, snaps)| (refusal, snaps, self.limits(key)))
    }
    fn max_quotas(&self) -> usize {
        self.most_quotas()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, Quota, C> {
    /// The quota of `key`: its override, or the default.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let q = Quota::per_second(5).unwrap();
    /// let limiter = KeyedLimiter::<u8, Quota, _>::with_clock(q, 10, ManualClock::new());
    /// assert_eq!(limiter.quota_for(&1), q);
    /// ```
    #[inline]
    pub fn quota_for<Q>(&self, key: &Q) -> Quota
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.overrides.is_empty() {
            self.rule
        } else {
            *self.rule_of(self.fingerprint(key))
        }
    }

    /// The default quota.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let q = Quota::per_second(5).unwrap();
    /// assert_eq!(KeyedLimiter::<u8, Quota, _>::with_clock(q, 10, ManualClock::new()).quota(), q);
    /// ```
    pub fn quota(&self) -> Quota {
        self.rule
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::ManualClock;

    /// 10,000 keys in a table for 2^20 stop inserting mid-migration (the region doubles from
    /// 16,384 to 32,768 slots at 8,192 keys, and each insertion drains 4 old slots): lookups
    /// finish it (at most 1.5 × 16,384 / 4 = 6,144 of them), and the admissions stay exact.
    #[test]
    fn lookups_finish_a_migration_that_insertions_left() {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 1 << 20, clock);
        for k in 0..10_000u64 {
            limiter.try_acquire(&k, 1).unwrap();
        }
        assert!(limiter.index.migrating());
        // Decisions only (no insertion), one per key, until the migration is over.
        let mut calls = 0u64;
        while limiter.index.migrating() {
            assert!(
                calls < 10_000,
                "lookups must drain the old region within one pass"
            );
            limiter.try_acquire(&calls, 1).unwrap();
            calls += 1;
        }
        assert!(calls <= 6_144, "{calls} lookups to finish the migration");
        for k in 0..10_000u64 {
            assert_eq!(
                limiter.available(&k),
                if k < calls { 8 } else { 9 },
                "key {k}"
            );
        }
        assert_eq!(limiter.len(), 10_000);
    }
}
