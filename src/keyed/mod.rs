//! [`KeyedLimiter`]: one exact bucket per key in a table of bounded size.

mod index;

use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::quota::Quota;
use crate::sync::{thread_slot, AtomicU64, Ordering};
use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;
use crossbeam_utils::CachePadded;
use index::{Index, Mutex, DEAD};
use std::collections::HashMap;

/// The most counter shards, whatever the core count.
const MAX_SHARDS: usize = 1024;

/// A snapshot of a [`KeyedLimiter`]'s counters (sums over its shards).
///
/// `admitted` includes `admitted_untracked`; `refused` includes `refused_table_full`.
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
/// let limiter = KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 10, ManualClock::new());
/// limiter.try_acquire(&"a", 1).unwrap();
/// assert!(limiter.try_acquire(&"a", 1).is_err());
/// let c = limiter.counters();
/// assert_eq!((c.admitted, c.refused, c.refused_table_full), (1, 1, 0));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyedCounters {
    /// Requests admitted (tracked or not).
    pub admitted: u64,
    /// Requests refused, for any reason.
    pub refused: u64,
    /// Requests for a new key refused because the table was full and no bucket was full.
    pub refused_table_full: u64,
    /// Requests for a new key admitted without tracking because the table was full
    /// ([`KeyedLimiterBuilder::fail_open`]).
    pub admitted_untracked: u64,
    /// Buckets evicted (each was full, so forgetting it changed no verdict).
    pub evicted: u64,
}

/// One counter shard: written only by the threads mapped to it (by default fewer than one per
/// shard), each count a relaxed `fetch_add` on this shard's own line.
#[derive(Default)]
struct Counters {
    admitted: AtomicU64,
    refused: AtomicU64,
    refused_table_full: AtomicU64,
    admitted_untracked: AtomicU64,
    evicted: AtomicU64,
}

/// The table-wide words, touched only when a key is inserted or evicted, never on a lookup.
struct Table {
    /// Live entries plus insertions in progress; never above `max_keys`.
    len: AtomicU64,
    /// A lower bound on the first instant at which any tracked bucket is full. Admissions only
    /// push a bucket's instant later, so the bound stays valid without being touched by them.
    next_full_at: AtomicU64,
    /// The minimum over insertions made while a sweep runs, folded in when it ends.
    pending_full_at: AtomicU64,
}

/// How an insertion attempt ended.
enum Insert {
    Done,
    Retry,
    TableFull(core::time::Duration),
    Refused(Denied),
}

/// A rate limiter with one exact token bucket per key (tenant, API key, client address) and a
/// hard bound on the number of keys it tracks.
///
/// * **Exact.** Each key's state is one `u64` word driven by [`crate::gcra`], so its verdicts
///   equal those of one [`Bucket`](crate::Bucket) per key.
/// * **Bounded.** [`len`](KeyedLimiter::len) never exceeds `max_keys`, however many distinct keys
///   arrive. Only *full* buckets are evicted — a full bucket is indistinguishable from a key never
///   seen, so eviction never changes a verdict — lazily, by the insertion that needs room, with
///   no background thread ([`sweep`](KeyedLimiter::sweep) runs one by hand).
/// * **Under a flood.** When the table is full and no bucket is full, a new key is refused with
///   `RetryAfter(d)`, `0 < d ≤` the time one whole burst takes to refill (the first instant a
///   tracked bucket will be full), or — with [`KeyedLimiterBuilder::fail_open`] — admitted
///   untracked. Such refusals cost O(1): they read one word.
/// * **Lock-free lookups.** Deciding for a tracked key reads the index without locks and writes
///   only that key's word (plus a counter on the calling thread's own cache-padded shard).
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
pub struct KeyedLimiter<K, C = DefaultClock> {
    index: Index<K, foldhash::fast::RandomState>,
    quota: Quota,
    overrides: HashMap<K, Quota>,
    max_keys: u64,
    fail_open: bool,
    table: CachePadded<Table>,
    /// Serializes sweeps; never taken by a lookup.
    sweep_lock: Mutex<()>,
    shards: Box<[CachePadded<Counters>]>,
    clock: C,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("len", &self.table.len.load(Ordering::Relaxed))
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish()
    }
}

/// Builds a [`KeyedLimiter`] with per-key quotas or the fail-open policy.
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
/// let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap(), 1000, ManualClock::new())
///     .quota_for("premium".to_string(), Quota::per_second(1000).unwrap())
///     .fail_open(true)
///     .build()
///     .unwrap();
/// assert_eq!(limiter.try_acquire_by("premium", 500), Ok(()));
/// assert!(limiter.try_acquire_by("basic", 500).is_err());
/// ```
pub struct KeyedLimiterBuilder<K, C = DefaultClock> {
    quota: Quota,
    max_keys: usize,
    overrides: HashMap<K, Quota>,
    fail_open: bool,
    clock: C,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiterBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiterBuilder<K, C> {
    /// Gives `key` its own quota (a premium tenant) instead of the default one. The override is
    /// found by the key's hash at every decision, so overrides cost one more hash lookup per call;
    /// without any, nothing is looked up.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 10, ManualClock::new())
    ///     .quota_for(7u32, Quota::per_second(5).unwrap())
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.quota_for(&7), Quota::per_second(5).unwrap());
    /// assert_eq!(limiter.quota_for(&8), Quota::per_second(1).unwrap());
    /// ```
    pub fn quota_for(mut self, key: K, quota: Quota) -> Self {
        self.overrides.insert(key, quota);
        self
    }

    /// When the table is full and no bucket can be evicted: `false` (the default) refuses a new
    /// key with `RetryAfter`; `true` admits it without tracking it. Both are counted.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 1, ManualClock::new())
    ///     .fail_open(true)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&1, 1), Ok(()));
    /// assert_eq!(limiter.try_acquire(&2, 1), Ok(())); // untracked
    /// assert_eq!(limiter.counters().admitted_untracked, 1);
    /// ```
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// The limiter. Errors with [`ConfigError::ZeroCapacity`] when `max_keys` is 0.
    ///
    /// ```
    /// use tollgate::{ConfigError, KeyedLimiter, ManualClock, Quota};
    /// let b = KeyedLimiter::<u64, _>::builder(Quota::per_second(1).unwrap(), 0, ManualClock::new());
    /// assert_eq!(b.build().unwrap_err(), ConfigError::ZeroCapacity);
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(KeyedLimiter::from_parts(
            self.quota,
            self.max_keys,
            self.clock,
            self.overrides,
            self.fail_open,
        ))
    }
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A limiter on the [`DefaultClock`] tracking at most `max_keys` keys, each with `quota`.
    /// With `max_keys == 0` nothing is tracked and every request is refused as "table full"
    /// ([`KeyedLimiter::builder`] rejects 0 instead).
    ///
    /// ```
    /// let limiter = tollgate::KeyedLimiter::new(tollgate::Quota::per_second(5).unwrap(), 100);
    /// assert!(limiter.try_acquire(&"10.0.0.1".to_string(), 1).is_ok());
    /// ```
    pub fn new(quota: Quota, max_keys: usize) -> Self {
        KeyedLimiter::with_clock(quota, max_keys, DefaultClock::default())
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, C> {
    /// A limiter on `clock` tracking at most `max_keys` keys, each with `quota`.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 100, ManualClock::new());
    /// assert_eq!(limiter.try_acquire(&42u64, 5), Ok(()));
    /// assert!(limiter.try_acquire(&42u64, 1).is_err());
    /// ```
    pub fn with_clock(quota: Quota, max_keys: usize, clock: C) -> Self {
        KeyedLimiter::from_parts(quota, max_keys, clock, HashMap::new(), false)
    }

    /// A builder: per-key quotas ([`quota_for`](KeyedLimiterBuilder::quota_for)) and the
    /// fail-open policy ([`fail_open`](KeyedLimiterBuilder::fail_open)).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _> =
    ///     KeyedLimiter::builder(Quota::per_second(5).unwrap(), 100, ManualClock::new()).build().unwrap();
    /// assert!(limiter.is_empty());
    /// ```
    pub fn builder(quota: Quota, max_keys: usize, clock: C) -> KeyedLimiterBuilder<K, C> {
        KeyedLimiterBuilder {
            quota,
            max_keys,
            overrides: HashMap::new(),
            fail_open: false,
            clock,
        }
    }

    fn from_parts(
        quota: Quota,
        max_keys: usize,
        clock: C,
        overrides: HashMap<K, Quota>,
        fail_open: bool,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = cores.saturating_mul(4).next_power_of_two().min(MAX_SHARDS);
        KeyedLimiter {
            index: Index::new(foldhash::fast::RandomState::default()),
            quota,
            overrides,
            max_keys: u64::try_from(max_keys).unwrap_or(u64::MAX),
            fail_open,
            table: CachePadded::new(Table {
                len: AtomicU64::new(0),
                next_full_at: AtomicU64::new(u64::MAX),
                pending_full_at: AtomicU64::new(u64::MAX),
            }),
            sweep_lock: Mutex::new(()),
            shards: (0..shards).map(|_| CachePadded::default()).collect(),
            clock,
        }
    }

    /// Takes `cost` tokens from `key`'s bucket if it holds them now.
    ///
    /// `Err(RetryAfter(d))`: the key's bucket is short (`d` exactly as for a
    /// [`Bucket`](crate::Bucket)), or the key is new and the table is full with no full bucket
    /// (`0 < d ≤` one burst's refill time; see [`KeyedLimiterBuilder::fail_open`]).
    /// `Err(ExceedsBurst)`: `cost` is above the key's burst. A new key is tracked only once it is
    /// admitted; cost 0 is always admitted and tracks nothing.
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
        self.acquire(key, cost, || key.clone())
    }

    /// [`try_acquire`](KeyedLimiter::try_acquire) with a borrowed form of the key (`&str` for
    /// `String` keys, `&[u8]` for `Vec<u8>`): no allocation unless the key is new.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 10, ManualClock::new());
    /// assert!(limiter.try_acquire_by("tenant-1", 1).is_ok());
    /// assert!(limiter.try_acquire(&"tenant-1".to_string(), 1).is_err());
    /// ```
    #[inline]
    pub fn try_acquire_by<Q>(&self, key: &Q, cost: u64) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.acquire(key, cost, || key.to_owned())
    }

    /// Whole tokens `key`'s bucket holds now (its burst if the key is not tracked).
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
        let quota = self.quota_for(key);
        let now = self.clock.now();
        self.index.with(key, |w| {
            let s = w.map_or(gcra::FULL, |w| w.load(Ordering::Relaxed));
            if s & DEAD != 0 {
                quota.burst()
            } else {
                gcra::available(s, now, &quota)
            }
        })
    }

    /// The quota of `key`: its override, or the default.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let q = Quota::per_second(5).unwrap();
    /// let limiter = KeyedLimiter::<u8, _>::with_clock(q, 10, ManualClock::new());
    /// assert_eq!(limiter.quota_for(&1), q);
    /// ```
    #[inline]
    pub fn quota_for<Q>(&self, key: &Q) -> Quota
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.overrides.is_empty() {
            self.quota
        } else {
            self.overrides.get(key).copied().unwrap_or(self.quota)
        }
    }

    /// The default quota.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let q = Quota::per_second(5).unwrap();
    /// assert_eq!(KeyedLimiter::<u8, _>::with_clock(q, 10, ManualClock::new()).quota(), q);
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
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

    /// Whether no key is tracked.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert!(limiter.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on [`len`](KeyedLimiter::len).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.max_keys(), 10);
    /// ```
    pub fn max_keys(&self) -> usize {
        usize::try_from(self.max_keys).unwrap_or(usize::MAX)
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use tollgate::{Clock, KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u32, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The counters, summed over the shards. Each is exact once concurrent calls have returned.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.counters().admitted, 1);
    /// ```
    pub fn counters(&self) -> KeyedCounters {
        let mut c = KeyedCounters::default();
        for s in self.shards.iter() {
            c.admitted += s.admitted.load(Ordering::Relaxed);
            c.refused += s.refused.load(Ordering::Relaxed);
            c.refused_table_full += s.refused_table_full.load(Ordering::Relaxed);
            c.admitted_untracked += s.admitted_untracked.load(Ordering::Relaxed);
            c.evicted += s.evicted.load(Ordering::Relaxed);
        }
        c
    }

    /// Evicts every bucket that is full now and returns how many. Never needed for the bound
    /// (insertions evict lazily); it only returns memory early, e.g. from a periodic task.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, clock.clone());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.sweep(), 0);
    /// clock.advance(Duration::from_millis(200));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert!(limiter.is_empty());
    /// ```
    pub fn sweep(&self) -> usize {
        let _guard = self.sweep_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sweep_locked(self.clock.now())
    }

    #[inline]
    fn counters_here(&self) -> &Counters {
        &self.shards[thread_slot() & (self.shards.len() - 1)]
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u64, owned: impl Fn() -> K) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let quota = self.quota_for(key);
        let result = if cost > quota.burst() {
            Err(Denied::ExceedsBurst)
        } else if cost == 0 {
            Ok(())
        } else {
            self.decide(key, cost, &quota, &owned)
        };
        let counters = self.counters_here();
        match result {
            Ok(()) => counters.admitted.fetch_add(1, Ordering::Relaxed),
            Err(_) => counters.refused.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    fn decide<Q>(
        &self,
        key: &Q,
        cost: u64,
        quota: &Quota,
        owned: &impl Fn() -> K,
    ) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        loop {
            // The hit path: a lock-free lookup and CASes on the key's own word.
            if let Some(result) = self
                .index
                .with(key, |w| w.and_then(|w| apply(w, now, quota, cost)))
            {
                return result;
            }
            match self.insert(key, owned, now, quota, cost) {
                Insert::Done => return Ok(()),
                Insert::Retry => continue,
                Insert::Refused(denied) => return Err(denied),
                Insert::TableFull(wait) => {
                    let counters = self.counters_here();
                    return if self.fail_open {
                        counters.admitted_untracked.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    } else {
                        counters.refused_table_full.fetch_add(1, Ordering::Relaxed);
                        Err(Denied::RetryAfter(wait))
                    };
                }
            }
        }
    }

    /// Inserts a new key already debited by `cost`, if the length budget allows.
    #[cold]
    fn insert<Q>(
        &self,
        key: &Q,
        owned: &impl Fn() -> K,
        now: u64,
        quota: &Quota,
        cost: u64,
    ) -> Insert
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let state = match gcra::try_acquire(gcra::FULL, now, quota, cost) {
            Ok(Some(state)) => state,
            Ok(None) => return Insert::Done,
            Err(denied) => return Insert::Refused(denied),
        };
        if !self.reserve(now) {
            return Insert::TableFull(self.table_full_wait(now));
        }
        match self.index.try_insert(owned(), state) {
            Ok(()) => {
                let at = gcra::full_at(state, quota);
                // Pending first: a sweep that overwrites `next_full_at` folds it in afterwards.
                self.table.pending_full_at.fetch_min(at, Ordering::SeqCst);
                self.table.next_full_at.fetch_min(at, Ordering::SeqCst);
                Insert::Done
            }
            Err(dead) => {
                // Someone else inserted it (retry on its word), or a dead entry awaits removal.
                self.table.len.fetch_sub(1, Ordering::Relaxed);
                if dead {
                    self.index.remove_dead(key);
                }
                Insert::Retry
            }
        }
    }

    /// Takes one unit of the length budget, sweeping full buckets out if that makes room.
    fn reserve(&self, now: u64) -> bool {
        for _ in 0..4 {
            if self.try_reserve() {
                return true;
            }
            // O(1) refusal under a flood: no bucket can be full before this instant.
            if self.table.next_full_at.load(Ordering::SeqCst) > now {
                return false;
            }
            let _guard = self.sweep_lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.try_reserve() {
                return true;
            }
            if self.table.next_full_at.load(Ordering::SeqCst) <= now {
                self.sweep_locked(now);
            }
        }
        self.try_reserve()
    }

    fn try_reserve(&self) -> bool {
        let max = self.max_keys;
        self.table
            .len
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// The wait until a tracked bucket is full, within `[1 ns, refill time of one burst]`.
    fn table_full_wait(&self, now: u64) -> core::time::Duration {
        let cap = self.quota.refill_time(self.quota.burst());
        let at = self.table.next_full_at.load(Ordering::SeqCst);
        core::time::Duration::from_nanos(at.saturating_sub(now).max(1)).min(cap)
    }

    /// Evicts the full buckets and recomputes `next_full_at`. Called with `sweep_lock` held.
    fn sweep_locked(&self, now: u64) -> usize {
        self.table.pending_full_at.store(u64::MAX, Ordering::SeqCst);
        let mut next = u64::MAX;
        let mut evicted = 0;
        self.index.for_each(|key, word| {
            let quota = self.quota_for(key);
            let mut s = word.load(Ordering::Relaxed);
            while s & DEAD == 0 {
                if !gcra::is_full(s, now, &quota) {
                    next = next.min(gcra::full_at(s, &quota));
                    break;
                }
                // A racing admission either lands first (the CAS fails and the bucket is no
                // longer full) or sees the dead bit and re-inserts the key as new.
                match word.compare_exchange(s, DEAD, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        evicted += 1;
                        self.table.len.fetch_sub(1, Ordering::Relaxed);
                        self.index.remove_dead(key);
                        break;
                    }
                    Err(actual) => s = actual,
                }
            }
        });
        self.table.next_full_at.store(next, Ordering::SeqCst);
        let pending = self.table.pending_full_at.swap(u64::MAX, Ordering::SeqCst);
        self.table.next_full_at.fetch_min(pending, Ordering::SeqCst);
        if evicted > 0 {
            self.counters_here()
                .evicted
                .fetch_add(evicted, Ordering::Relaxed);
        }
        usize::try_from(evicted).unwrap_or(usize::MAX)
    }
}

/// Decides on a live word with CASes; `None` if the word is dead (evicted: re-insert the key).
#[inline]
fn apply(word: &AtomicU64, now: u64, quota: &Quota, cost: u64) -> Option<Result<(), Denied>> {
    let mut s = word.load(Ordering::Relaxed);
    loop {
        if s & DEAD != 0 {
            return None;
        }
        match gcra::try_acquire(s, now, quota, cost) {
            Ok(Some(next)) => {
                match word.compare_exchange_weak(s, next, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => return Some(Ok(())),
                    Err(actual) => s = actual,
                }
            }
            Ok(None) => return Some(Ok(())),
            Err(denied) => return Some(Err(denied)),
        }
    }
}
