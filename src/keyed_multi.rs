//! [`KeyedMultiLimiter`]: a policy of one to four quotas per key ([`Limits`]: "10 per second
//! and 10,000 per day per API key") in a table of bounded size.
//!
//! # Storage
//!
//! A key's quotas do not fit one 128-bit word with its 64-bit fingerprint (each state takes 63
//! bits), so the table has two parts:
//!
//! * **The index** — [`KeyedLimiter`](crate::KeyedLimiter)'s own: a flat table of 16-byte
//!   slots `fingerprint << 64 | handle`, the same lock-free probe, incremental migration,
//!   bounded sweep steps and `max_keys` bound. Here a slot's word names the key's record and
//!   never changes while the key is tracked.
//! * **The records** — one per unit of `max_keys`, allocated up front: a sequence word, the
//!   owner's fingerprint and the quotas' states (32 bytes for up to two quotas, 64 for three or
//!   four; line-aligned).
//!   Writers are serialized by the sequence word; reads are optimistic.
//!
//! A decision probes the index (lock-free), reads the record consistently, decides every quota
//! at one clock reading ([`crate::gcra`]'s arithmetic, as [`MultiBucket`](crate::MultiBucket)),
//! and commits an admission by one compare-and-swap of the sequence word from the value it
//! read, then the stores. **Not lock-free per key**: an admission holds its key's record for
//! the stores (no clock read, no allocation, nothing that can panic), so a writer preempted
//! there delays the decisions on *its own key* only; other keys, and refusals that find the
//! record unlocked, are unaffected. Refusals write nothing.
//!
//! **No ABA.** A record is handed to another key only after its eviction, which takes the
//! record's lock and steps its sequence word; a decision commits only if the word is still the
//! one it read together with the owner, so it never debits a key that replaced the one it
//! looked up, nor a freed record (it looks the key up again). See `docs/guarantees.md`.

mod builder;
#[cfg(feature = "persist")]
mod persist;
mod policy;
mod records;
mod table;
mod until_key_ready;

pub use builder::KeyedMultiLimiterBuilder;
pub use until_key_ready::MultiUntilKeyReady;

use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::keyed::index::{fingerprint, seeded_hasher, Index};
use crate::keyed::table::Table;
use crate::keyed::{CounterShards, KeyedCounters};
use crate::limits::{Limits, MAX_LIMITS};
use crate::multi::Snapshots;
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;
use crate::sync::{Backoff, Mutex, Ordering};
use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use crossbeam_utils::CachePadded;
use policy::{Kind, Policy};
use records::{Attempt, Records};
use std::collections::HashMap;
use table::{Free, Insert};

/// The largest `max_keys` honoured (larger values are clamped), as for `KeyedLimiter`.
const MAX_KEYS: usize = 1 << 26;

/// A rate limiter whose keys each carry a policy of one to four quotas that must **all** hold,
/// with a hard bound on the number of keys it tracks.
///
/// * **Per key, exactly a [`MultiBucket`](crate::MultiBucket).** Admitted iff every quota holds
///   `cost` at the one clock reading, then every quota is debited in one step; a refusal
///   writes nothing; `cost == 0` is admitted and tracks nothing. [`Denied::ExceedsBurst`] iff
///   `cost` exceeds the key's smallest burst, else `RetryAfter` of the slowest quota's exact
///   wait. Each quota's own window bound holds under any interleaving and stale reading.
/// * **Bounded, as [`KeyedLimiter`](crate::KeyedLimiter).** [`len`](Self::len) never exceeds
///   `max_keys`. Only keys whose quotas are *all* full are evicted (indistinguishable from a
///   key never seen), lazily by insertions that need room, or by [`sweep`](Self::sweep). A key
///   not tracked starts with every quota full as of the latest eviction reading. When the table
///   is full and no key is, a new key is refused with `RetryAfter(d)`, `0 < d ≤` the longest
///   refill of a whole burst of any quota of any policy (default or override), or admitted
///   untracked with
///   [`KeyedMultiLimiterBuilder::fail_open`] (outside every bound).
/// * **Keys by fingerprint.** As in `KeyedLimiter`: a seeded 64-bit hash, no keys stored; two
///   keys with equal fingerprints share one record (stricter, never looser), and a key that
///   collides with an override key runs under that key's policy, which may be looser than its
///   own (about `n / 2^64` odds per override at `n` keys; the seed is secret).
/// * **Memory.** The index's 48 to 96 bytes per unit of `max_keys`, plus one record per unit:
///   32 bytes if every policy it holds has one or two quotas, 64 if one has three or four (a
///   record never straddles two cache lines), all up front.
/// * **Locking.** Lookups are lock-free; an admission is one compare-and-swap of the key's
///   record's sequence word, then its stores: writers of one key are serialized, and one
///   preempted there delays only its own key (not lock-free per key; `docs/guarantees.md`,
///   "Per-key policies: the records").
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let per_second = Quota::per_second(10).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let limiter = KeyedMultiLimiter::with_clock(Limits::new([per_second, per_minute]).unwrap(), 1000, clock.clone());
/// assert_eq!(limiter.try_acquire(&"alice", 10), Ok(()));
/// assert_eq!(limiter.try_acquire(&"alice", 1), Err(Denied::RetryAfter(Duration::from_millis(100))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(limiter.try_acquire(&"alice", 10), Ok(()));
/// // 20 per minute spent: the minute is the slowest quota now.
/// assert_eq!(limiter.try_acquire(&"alice", 1), Err(Denied::RetryAfter(Duration::from_secs(2))));
/// assert_eq!(limiter.try_acquire(&"bob", 10), Ok(()));
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct KeyedMultiLimiter<K, C = DefaultClock> {
    index: Index,
    records: Records,
    hasher: foldhash::quality::SeedableRandomState,
    /// The hasher's per-limiter seed, kept so that a saved table can be found again by a
    /// restored limiter.
    #[cfg_attr(not(feature = "persist"), allow(dead_code))]
    seed: u64,
    policy: Policy,
    /// Override policies by fingerprint.
    overrides: HashMap<u64, Policy>,
    max_keys: u64,
    fail_open: bool,
    table: CachePadded<Table>,
    free: Mutex<Free>,
    /// The counters, split by thread ([`counters`](Self::counters)).
    shards: CounterShards,
    clock: C,
    /// Metrics and tracing, as `KeyedLimiter`'s (see `keyed/named.rs`).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    observe: crate::observe::KeyedObserver,
    _keys: core::marker::PhantomData<fn(&K)>,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedMultiLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedMultiLimiter")
            .field("limits", &self.policy.limits)
            .field("max_keys", &self.max_keys)
            .field("len", &self.table.len.load(Ordering::Relaxed))
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<K: Hash + Eq + Clone> KeyedMultiLimiter<K> {
    /// A limiter on the [`DefaultClock`] tracking at most `max_keys` keys, each with `limits`.
    /// With `max_keys == 0` nothing is tracked and every new key is refused as "table full",
    /// with `RetryAfter(Duration::MAX)`: never ([`KeyedMultiLimiter::builder`] rejects 0
    /// instead).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, Quota};
    /// let limiter = KeyedMultiLimiter::new(Limits::from(Quota::per_second(5).unwrap()), 100);
    /// assert!(limiter.try_acquire(&"10.0.0.1".to_string(), 1).is_ok());
    /// ```
    pub fn new(limits: Limits, max_keys: usize) -> Self {
        KeyedMultiLimiter::with_clock(limits, max_keys, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiter<K, C> {
    /// A limiter on `clock` tracking at most `max_keys` keys (clamped to 2^26), each with
    /// `limits`; the index and the records are allocated here.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::from(Quota::per_second(5).unwrap());
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 100, ManualClock::new());
    /// assert_eq!(limiter.try_acquire(&42u64, 5), Ok(()));
    /// assert!(limiter.try_acquire(&42u64, 1).is_err());
    /// ```
    pub fn with_clock(limits: Limits, max_keys: usize, clock: C) -> Self {
        KeyedMultiLimiter::from_parts(limits, max_keys, clock, HashMap::new(), false, None)
    }

    /// The limiter, with the fingerprint seed given (a restore's) or drawn at random.
    fn from_parts(
        limits: Limits,
        max_keys: usize,
        clock: C,
        overrides: HashMap<K, Limits>,
        fail_open: bool,
        seed: Option<u64>,
    ) -> Self {
        let max_keys = max_keys.min(MAX_KEYS);
        let (seed, hasher) = seeded_hasher(seed);
        let quotas = overrides
            .values()
            .map(|l| l.quotas().len())
            .chain([limits.quotas().len()])
            .max()
            .unwrap_or(MAX_LIMITS);
        let overrides: HashMap<u64, Policy> = overrides
            .into_iter()
            .map(|(k, l)| (fingerprint(hasher.hash_one(&k)), Policy::new(l)))
            .collect();
        let policy = Policy::new(limits);
        let cap = overrides
            .values()
            .chain([&policy])
            .map(|p| p.slowest_refill)
            .max()
            .unwrap_or(core::time::Duration::MAX);
        KeyedMultiLimiter {
            index: Index::new(max_keys),
            records: Records::new(max_keys, quotas),
            hasher,
            seed,
            policy,
            overrides,
            max_keys: u64::try_from(max_keys).unwrap_or(u64::MAX),
            fail_open,
            table: CachePadded::new(Table::new(cap)),
            free: Mutex::new(Free::default()),
            shards: CounterShards::new(),
            clock,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observe: crate::observe::KeyedObserver::new(None, max_keys as u64, false),
            _keys: core::marker::PhantomData,
        }
    }

    /// Takes `cost` tokens from every quota of `key`'s policy if all of them hold it now.
    ///
    /// `Err(ExceedsBurst)`: `cost` is above the key's smallest burst. `Err(RetryAfter(d))`:
    /// some quota is short, `d` the exact wait after which all hold `cost`; or the key is new
    /// and the table is full with no full key (see the type's docs).
    ///
    /// ```
    /// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
    /// assert_eq!(limiter.try_acquire(&1, 6), Err(Denied::ExceedsBurst));
    /// assert_eq!(limiter.try_acquire(&1, 5), Ok(()));
    /// ```
    #[inline]
    pub fn try_acquire(&self, key: &K, cost: u64) -> Result<(), Denied> {
        self.acquire(key, cost).map_err(Denied::from)
    }

    /// [`try_acquire`](Self::try_acquire) with a borrowed form of the key (`&str` for `String`
    /// keys): never an allocation.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter: KeyedMultiLimiter<String, _> =
    ///     KeyedMultiLimiter::with_clock(Limits::from(Quota::per_second(1).unwrap()), 10, ManualClock::new());
    /// assert!(limiter.try_acquire_by("tenant-1", 1).is_ok());
    /// assert!(limiter.try_acquire(&"tenant-1".to_string(), 1).is_err());
    /// ```
    #[inline]
    pub fn try_acquire_by<Q>(&self, key: &Q, cost: u64) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, cost).map_err(Denied::from)
    }

    /// [`try_acquire_by`](Self::try_acquire_by), naming the quota that refused (its index in
    /// the key's [`Limits`]) for headers and metrics. A new key refused because the table is
    /// full names quota 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_minute]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
    /// limiter.try_acquire(&"k", 10).unwrap();
    /// let refusal = limiter.try_acquire_detailed(&"k", 1).unwrap_err();
    /// assert_eq!((refusal.quota_index(), refusal.denied()), (0, Denied::RetryAfter(Duration::from_millis(100))));
    /// ```
    #[inline]
    pub fn try_acquire_detailed<Q>(&self, key: &Q, cost: u64) -> Result<(), Refusal>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, cost)
    }

    /// [`try_acquire_by`](Self::try_acquire_by), also returning the snapshot of the key's
    /// tightest quota (fewest whole tokens left; ties: the one full last) at the decision's
    /// reading — the one a `RateLimit` header describes. See
    /// [`try_acquire_snapshots`](Self::try_acquire_snapshots).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota, Snapshot};
    /// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_minute]).unwrap();
    /// let limiter: KeyedMultiLimiter<&str, _> = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
    /// let (verdict, snapshot) = limiter.try_acquire_snapshot(&"k", 4);
    /// assert_eq!((verdict, snapshot), (Ok(()), Snapshot::new(6, Duration::from_millis(400))));
    /// ```
    pub fn try_acquire_snapshot<Q>(&self, key: &Q, cost: u64) -> (Result<(), Denied>, Snapshot)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (verdict, snapshots) = self.try_acquire_snapshots(key, cost);
        (verdict.map_err(Denied::from), snapshots.tightest().1)
    }

    /// [`try_acquire_detailed`](Self::try_acquire_detailed), also returning every quota's
    /// snapshot at the decision's reading (for a `RateLimit-Policy` header listing them all).
    /// The record is read once more after the decision, at the same reading, so under
    /// concurrency it may include other decisions on the key. A new key refused because the
    /// table is full reports 0 tokens in every quota, full after the wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota, Snapshot};
    /// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_minute]).unwrap();
    /// let limiter: KeyedMultiLimiter<&str, _> = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
    /// let (verdict, snaps) = limiter.try_acquire_snapshots(&"k", 4);
    /// assert_eq!(verdict, Ok(()));
    /// assert_eq!(snaps.as_slice(), &[
    ///     Snapshot::new(6, Duration::from_millis(400)),
    ///     Snapshot::new(16, Duration::from_secs(12)),
    /// ]);
    /// ```
    pub fn try_acquire_snapshots<Q>(&self, key: &Q, cost: u64) -> (Result<(), Refusal>, Snapshots)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        let policy = self.policy_of(fp);
        let now = self.clock.now();
        let verdict = self.acquire_fp(fp, policy, cost, || now);
        let snapshots = self.snapshots_after(fp, policy, now, cost, verdict);
        (verdict, snapshots)
    }

    /// [`try_acquire_detailed`](Self::try_acquire_detailed), with every quota's snapshot (as
    /// [`try_acquire_snapshots`](Self::try_acquire_snapshots) reports them) only on refusal:
    /// an admission costs what `try_acquire_detailed` costs.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let limiter: KeyedMultiLimiter<&str, _> = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
    /// assert_eq!(limiter.try_acquire_or_snapshots(&"k", 5), Ok(()));
    /// let (refusal, snaps) = limiter.try_acquire_or_snapshots(&"k", 1).unwrap_err();
    /// assert_eq!(refusal.quota_index(), 1);
    /// assert_eq!(snaps.as_slice()[0].remaining(), 5);
    /// ```
    // The same shape as `MultiBucket::try_acquire_or_snapshots`: the snapshots are a refusal's
    // payload, built only on that path.
    #[allow(clippy::result_large_err)]
    pub fn try_acquire_or_snapshots<Q>(
        &self,
        key: &Q,
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        let policy = self.policy_of(fp);
        let now = self.clock.now();
        self.acquire_fp(fp, policy, cost, || now)
            .map_err(|refusal| {
                (
                    refusal,
                    self.snapshots_after(fp, policy, now, cost, Err(refusal)),
                )
            })
    }

    /// Whole tokens every quota of `key`'s policy holds now (the smallest burst if the key is
    /// not tracked).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 10, ManualClock::new());
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
        let policy = self.policy_of(fp);
        let now = self.clock.now();
        let states = self
            .states_of(fp, policy)
            .unwrap_or_else(|| self.start_states(policy));
        policy.available(&states[..policy.len], now)
    }

    /// The policy of `key`: its override, or the default.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::from(Quota::per_second(5).unwrap());
    /// let limiter = KeyedMultiLimiter::<u8, _>::with_clock(limits.clone(), 10, ManualClock::new());
    /// assert_eq!(limiter.limits_for(&1), &limits);
    /// ```
    pub fn limits_for<Q>(&self, key: &Q) -> &Limits
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        &self.policy_of(self.fingerprint(key)).limits
    }

    /// The default policy.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::from(Quota::per_second(5).unwrap());
    /// assert_eq!(KeyedMultiLimiter::<u8, _>::with_clock(limits.clone(), 10, ManualClock::new()).limits(), &limits);
    /// ```
    pub fn limits(&self) -> &Limits {
        &self.policy.limits
    }

    /// The number of tracked keys (insertions in progress included); never above
    /// [`max_keys`](Self::max_keys).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::with_clock(Limits::from(Quota::per_second(5).unwrap()), 10, ManualClock::new());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        usize::try_from(self.table.len.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// The counters, summed over their per-thread shards, as
    /// [`KeyedLimiter::counters`](crate::KeyedLimiter::counters): every decision counts once as
    /// admitted or refused (whichever quota refused); `refused_table_full` and
    /// `admitted_untracked` count new keys that met a full table; `evicted` the keys evicted.
    /// In shadow mode (`KeyedMultiLimiterBuilder::shadow`, feature `metrics`) a decision counts as what the caller
    /// got: admitted. Each count is exact once the calls that made it have returned.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limits = Limits::new([Quota::per_second(2).unwrap(), Quota::new(3, Duration::from_secs(60), 3).unwrap()]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 1, clock.clone());
    /// limiter.try_acquire(&"a", 2).unwrap();
    /// assert!(limiter.try_acquire(&"a", 1).is_err()); // 2 per second spent
    /// assert!(limiter.try_acquire(&"b", 1).is_err()); // the table is full
    /// let c = limiter.counters();
    /// assert_eq!((c.admitted, c.refused, c.refused_table_full, c.evicted), (1, 2, 1, 0));
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert_eq!(limiter.counters().evicted, 1);
    /// ```
    pub fn counters(&self) -> KeyedCounters {
        self.shards.sum()
    }

    /// Whether no key is tracked.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::<u8, _>::with_clock(Limits::from(Quota::per_second(5).unwrap()), 10, ManualClock::new());
    /// assert!(limiter.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on [`len`](Self::len): `max_keys` as given (clamped to 2^26).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::<u8, _>::with_clock(Limits::from(Quota::per_second(5).unwrap()), 10, ManualClock::new());
    /// assert_eq!(limiter.max_keys(), 10);
    /// ```
    pub fn max_keys(&self) -> usize {
        usize::try_from(self.max_keys).unwrap_or(usize::MAX)
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use tollgate::{Clock, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::<u8, _>::with_clock(Limits::from(Quota::per_second(5).unwrap()), 10, ManualClock::new());
    /// assert_eq!(limiter.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), Refusal>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        self.acquire_fp(fp, self.policy_of(fp), cost, || self.clock.now())
    }

    /// The decision for fingerprint `fp`, reading the clock only if it must, counted and
    /// observed (in shadow mode every refusal is recorded, then admitted).
    #[inline]
    fn acquire_fp(
        &self,
        fp: u64,
        policy: &Policy,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Refusal> {
        let result = if cost > policy.min_burst {
            Err(policy.exceeds())
        } else if cost == 0 {
            Ok(())
        } else {
            self.decide_fp(fp, policy, cost, now)
        };
        #[cfg(feature = "metrics")]
        let result = self.observe.decided_policy(result);
        match result {
            Ok(()) => self.shards.count(|c| &c.admitted, 1),
            Err(_) => self.shards.count(|c| &c.refused, 1),
        }
        result
    }

    /// The decision for `0 < cost <=` the smallest burst: one lock-free probe and one attempt
    /// on the record in line; a miss, a busy record or a stale one out of line.
    #[inline]
    fn decide_fp(
        &self,
        fp: u64,
        policy: &Policy,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Refusal> {
        // Read before the probe: the insert path trusts a miss only if no entry moved around it.
        let epoch = self.index.rebuild_epoch();
        let hit = self.index.lookup(fp);
        let now = now();
        if let Some(hit) = hit {
            if let Attempt::Done(result) = self.attempt(hit.state() as usize, fp, policy, now, cost)
            {
                return result;
            }
        }
        self.decide_slow(fp, policy, cost, now, epoch)
    }

    /// One attempt on record `h`.
    #[inline(always)]
    fn attempt(
        &self,
        h: usize,
        fp: u64,
        policy: &Policy,
        now: u64,
        cost: u64,
    ) -> Attempt<Result<(), Refusal>> {
        let len = policy.len;
        match &policy.kind {
            // `0 < cost <=` the smallest burst: checked by `acquire_fp`.
            Kind::Two(r) => self.records.try_decide::<2>(h, fp, len, |s| {
                crate::gcra::all::decide_pair_within(s, now, r, cost).map(Some)
            }),
            Kind::Four(r) => self
                .records
                .try_decide::<4>(h, fp, len, |s| crate::gcra::all::decide(s, now, r, cost)),
        }
    }

    /// After a miss, a busy or a stale record: look the key up again (under the mutex if the
    /// probe may have missed it while entries moved) and retry, or take the insert path.
    #[cold]
    #[inline(never)]
    fn decide_slow(
        &self,
        fp: u64,
        policy: &Policy,
        cost: u64,
        now: u64,
        mut epoch: u64,
    ) -> Result<(), Refusal> {
        let mut backoff = Backoff::default();
        loop {
            if let Some(h) = self.index.load(fp) {
                if self.index.migrating() {
                    if let Some(mut locked) = self.index.try_lock() {
                        locked.help_migrate();
                    }
                }
                match self.attempt(h as usize, fp, policy, now, cost) {
                    Attempt::Done(result) => return result,
                    Attempt::Busy | Attempt::Stale => {
                        backoff.snooze();
                        epoch = self.index.rebuild_epoch();
                        continue;
                    }
                }
            }
            match self.insert(fp, now, policy, cost, epoch) {
                Insert::Done => return Ok(()),
                Insert::Retry => epoch = self.index.rebuild_epoch(),
                Insert::Refused(refusal) => return Err(refusal),
                Insert::TableFull(wait) => {
                    #[cfg(any(feature = "metrics", feature = "tracing"))]
                    self.observe.table_full(self.fail_open);
                    // In shadow mode the caller is admitted untracked whatever the verdict,
                    // and the counters count what callers got (a review's finding,
                    // 2026-12-04: a shadow table counted `refused_table_full` with `refused`
                    // 0); the metrics record the refusal enforcement would have made.
                    #[cfg(feature = "metrics")]
                    let untracked = self.fail_open || self.observe.is_shadow();
                    #[cfg(not(feature = "metrics"))]
                    let untracked = self.fail_open;
                    if untracked {
                        self.shards.count(|c| &c.admitted_untracked, 1);
                    } else {
                        self.shards.count(|c| &c.refused_table_full, 1);
                    }
                    return if self.fail_open {
                        Ok(())
                    } else {
                        Err(Refusal::new(Denied::RetryAfter(wait), 0))
                    };
                }
            }
        }
    }

    /// Every quota's snapshot of the key `fp` at `now`, after a decision that gave `verdict`.
    fn snapshots_after(
        &self,
        fp: u64,
        policy: &Policy,
        now: u64,
        cost: u64,
        verdict: Result<(), Refusal>,
    ) -> Snapshots {
        let start = || self.start_states(policy);
        match (self.states_of(fp, policy), verdict.map_err(|r| r.denied())) {
            (Some(states), _) => policy.snapshots(&states[..policy.len], now),
            // A new key refused because the table is full (where it would start admits the
            // cost): untracked, nothing until the wait. One refused by where it starts (the
            // floor after evictions, a drain) is that record, as `KeyedLimiter` answers since
            // 2026-12-04 (a review's finding).
            (None, Err(Denied::RetryAfter(wait))) if policy.decide(&start(), now, cost).is_ok() => {
                Snapshots::from_padded([Snapshot::new(0, wait); MAX_LIMITS], policy.len)
            }
            (None, _) => policy.snapshots(&start()[..policy.len], now),
        }
    }

    /// The states of the key `fp`, if tracked (a consistent read of its record).
    fn states_of(&self, fp: u64, policy: &Policy) -> Option<[u64; MAX_LIMITS]> {
        let mut backoff = Backoff::default();
        loop {
            let h = self.index.load(fp)? as usize;
            match self.records.read::<MAX_LIMITS>(h, policy.len) {
                Some((_, owner, states)) if owner == fp => return Some(states),
                _ => backoff.snooze(),
            }
        }
    }

    /// Where a key not in the table starts: every quota full as of the latest eviction.
    fn start_states(&self, policy: &Policy) -> [u64; MAX_LIMITS] {
        policy.start(self.table.evicted_at.load(Ordering::SeqCst))
    }

    /// The policy of fingerprint `fp`.
    #[inline]
    fn policy_of(&self, fp: u64) -> &Policy {
        if self.overrides.is_empty() {
            &self.policy
        } else {
            self.overrides.get(&fp).unwrap_or(&self.policy)
        }
    }

    #[inline]
    fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        fingerprint(self.hasher.hash_one(key))
    }
}
