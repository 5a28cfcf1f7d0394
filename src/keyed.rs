//! [`KeyedLimiter`]: one exact bucket per key in a table of bounded size.
//!
//! # On many cores
//!
//! A lookup reads the flat table (its lines stay shared in every core's cache) and writes only
//! the key's 16-byte slot, so decisions for distinct keys scale with the cores (up to false
//! sharing between the four slots of one 64-byte line); only threads hitting the *same* key
//! contend, on that key's word — the one write any exact per-key limit must make. (The slots
//! are 128-bit atomics: their loads are plain loads on x86_64 with AVX and AArch64 with LSE2;
//! elsewhere `portable-atomic` loads them with a `lock cmpxchg16b`, a `CASP` or a
//! load/store-exclusive pair, which writes the line, so lookups of the keys sharing a line
//! contend as writers do.) Each decision
//! also counts on a cache-padded counter shard, so threads count on lines of their own: the
//! first threads to use the crate (the next power of two of 4 × cores of them: 256 on 64 cores,
//! at most 1,024) each own a shard and count with a plain load and store, no locked
//! instruction (a thread's slot is its own until the thread exits, and is then handed to a later
//! thread, so such a shard has one writer at a time and the first shards stay in use when
//! threads come and go); threads beyond those share the same number of other shards, by slot,
//! with a relaxed `fetch_add`. Insertions take the
//! index's mutex, so a burst of *new* keys is serialized, each for bounded work (see "Cost of
//! an insertion" on [`KeyedLimiter`]); a flood of refused new keys reads only the `len` and
//! `next_full_at` words of `Table`, without the mutex, so it scales.

mod index;
#[cfg(feature = "persist")]
mod persist;

use crate::clock::{Clock, DefaultClock};
use crate::error::{ConfigError, Denied};
use crate::gcra;
use crate::quota::Quota;
use crate::snapshot::Snapshot;
use crate::sync::{thread_slot, AtomicU64, Ordering};
use crate::wait::Alarm;
use alloc::boxed::Box;
use core::borrow::Borrow;
use core::fmt;
use core::future::Future;
use core::hash::{BuildHasher, Hash};
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use crossbeam_utils::CachePadded;
use index::{fingerprint, Index};
use std::collections::HashMap;

/// The most counter shards, whatever the core count.
const MAX_SHARDS: usize = 1024;

/// The largest `max_keys` honoured (larger values are clamped): the table is allocated up front,
/// 16 bytes × 1.5 × the next power of two of 2 × `max_keys`, so this caps it at 3 GiB.
const MAX_KEYS: usize = 1 << 26;

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
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
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

/// One counter shard, on its own line: either owned by one thread (the only writer: a count is a
/// relaxed load and store) or shared by the threads mapped to it (a relaxed `fetch_add`); see
/// [`KeyedLimiter::count`].
#[derive(Default)]
struct Counters {
    admitted: AtomicU64,
    refused: AtomicU64,
    refused_table_full: AtomicU64,
    admitted_untracked: AtomicU64,
    evicted: AtomicU64,
}

/// The table-wide words, written only under the index's mutex (when a key is inserted or
/// evicted), never on a lookup; read without it for the O(1) refusal under a flood.
struct Table {
    /// Live entries; never above `max_keys`.
    len: AtomicU64,
    /// A lower bound on the first instant at which any tracked bucket is full. Admissions only
    /// push a bucket's instant later, so the bound stays valid without being touched by them.
    next_full_at: AtomicU64,
    /// The latest clock reading at which a bucket was evicted (0: none yet); only grows. An
    /// evicted state `s` was full at its eviction reading, `s <= earned_floor(evicted_at)`, so a
    /// key inserted from `earned_floor(evicted_at)` (its own quota's) starts from a state no more
    /// lenient than any bucket the table forgot: the key's state never decreases, whatever
    /// reading the inserting decision holds (see [`KeyedLimiter::start_state`]).
    evicted_at: AtomicU64,
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
///   arrive. Only *full* buckets are evicted — at the evicting reading and after it, a full
///   bucket is indistinguishable from a key never seen, so eviction changes no verdict — lazily,
///   by the insertions that need room, with no background thread
///   ([`sweep`](KeyedLimiter::sweep) runs one by hand).
/// * **Under a flood.** When the table is full and no bucket is full, a new key is refused with
///   `RetryAfter(d)`, `0 < d ≤` the time one whole burst takes to refill (the first instant a
///   tracked bucket will be full; `Duration::MAX` if none will be within the 100-year
///   horizon), or — with [`KeyedLimiterBuilder::fail_open`] — admitted untracked. Such
///   refusals cost O(1): they read one word.
/// * **Lock-free lookups.** Deciding for a tracked key reads the index without locks and writes
///   only that key's slot (plus a counter on the calling thread's own cache-padded shard).
///   Inserting and evicting take one mutex, for a bounded amount of work (below).
///
/// # Guarantees, by clock
///
/// * **Monotone readings** (one thread, or threads whose readings follow their decisions'
///   order): every verdict, `RetryAfter` and [`available`](KeyedLimiter::available) of a
///   tracked or never-refused key equals that of one exact [`Bucket`](crate::Bucket) per key.
/// * **Stale readings and clocks that step back** (a thread preempted between its clock reading
///   and its decision; unsynchronised TSCs): no interleaving over-admits. Each key's admissions,
///   each at the reading its decision used, stay within `burst + rate·Δ` in every window `Δ`,
///   through evictions, re-insertions, sweeps and table growth. A key's state never moves back:
///   a key the table does not track starts *full as of the latest eviction reading* (its own
///   quota's), which is exactly full for any reading at or after it, and for an older reading
///   holds what a bucket full at that eviction reading holds then — the table cannot tell an
///   evicted key from a new one, so a new key seen at such a reading is treated as strictly.
///   After a clock steps far back, new keys are therefore refused until the clock is within
///   one burst's refill time of the latest eviction reading, as one bucket that saw that
///   reading would refuse.
/// * **`fail_open`** is opt-in leniency: requests admitted untracked because the table was full
///   are outside every bound (any number of them, for any key, while the table stays full).
///
/// # Cost of an insertion
///
/// A new key takes the mutex and does bounded work: a re-probe, at most one sweep step when the
/// table is full (at most 1,024 slots examined or entries moved and at most 16 evictions of full
/// buckets, each shifting the rest of its chain back, expected O(1)), and, while the table's
/// active region is doubling, one migration step that moves at most 4 entries from the old
/// region to the new one. The active region grows with the live keys (kept between about ¼ and
/// ½ full, from 64 slots up to the whole table), so a table built for many keys but holding few
/// stays small and in cache; it grows by such steps, never by a rebuild. While it doubles,
/// lookups of tracked keys take a slower path that probes both regions and, if the mutex is
/// free (never waiting for it), takes one such step too, so a doubling ends within a bounded
/// number of calls (`3/8` of the old region's slots) whether or not new keys keep arriving. Nothing is ever
/// O(`max_keys`) under the mutex. The trade: the sweep is incremental, so when the table is
/// full a new key can be refused (`RetryAfter` of at least 1 ns) while a full bucket the
/// current pass has not reached yet exists: for at most `⌈active slots / 1024⌉` consecutive
/// refusals (`active slots ≤ 4 × max_keys`), each of which moves the pass on by 1,024 slots —
/// plus, if the table filled while its region was still doubling, the steps that finish
/// draining the old region first (at least 512 of its slots each, evicting full buckets there
/// too). Tables of up to 512 keys examine every slot at each insertion that evicts nothing
/// (after at most one step that finishes a doubling), so they refuse only when no bucket is
/// full.
///
/// # Keys are identified by a 64-bit fingerprint
///
/// The table stores no keys: each slot is 16 bytes, a 64-bit *fingerprint* of the key (foldhash's
/// quality hasher, with a 64-bit seed drawn at random per limiter) and the bucket's state, allocated up front for
/// `max_keys` at a load factor of at most ½, plus half as much again so that the active region
/// can double without a rebuild (48 to 96 bytes per unit of `max_keys` above 32, 32 to 64 up
/// to 32, where one region is all there is; 50.3 bytes at 1,000,000; `max_keys` above 2^26
/// is clamped to 2^26). This is what makes the table small
/// and its lookups cheap — no per-key allocation, no key copies, no epoch-based reclamation —
/// and its one trade: **two distinct keys with equal fingerprints share
/// one bucket**. A shared bucket is stricter for both keys, never looser
/// (together they get one key's budget). With `n` tracked keys the chance that any two collide
/// is about `n² / 2^65`: about 3 × 10⁻⁸ at a million keys. The seed is secret and per limiter,
/// so collisions cannot be aimed at a key from outside. Override quotas
/// ([`KeyedLimiterBuilder::quota_for`]) are also found by fingerprint.
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
pub struct KeyedLimiter<K, C = DefaultClock> {
    index: Index,
    hasher: foldhash::quality::SeedableRandomState,
    /// The hasher's per-limiter seed (its shared seed is foldhash's fixed one), kept so that a
    /// saved table can be found again by a restored limiter.
    #[cfg_attr(not(feature = "persist"), allow(dead_code))]
    seed: u64,
    quota: Quota,
    /// Override quotas by fingerprint.
    overrides: HashMap<u64, Quota>,
    max_keys: u64,
    fail_open: bool,
    table: CachePadded<Table>,
    shards: Box<[CachePadded<Counters>]>,
    clock: C,
    _keys: core::marker::PhantomData<fn(&K)>,
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
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
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
        self.build_seeded(None)
    }

    /// [`build`](KeyedLimiterBuilder::build) with the fingerprint seed given (a restore's) or
    /// drawn at random (`None`).
    fn build_seeded(self, seed: Option<u64>) -> Result<KeyedLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        Ok(KeyedLimiter::from_parts(
            self.quota,
            self.max_keys,
            self.clock,
            self.overrides,
            self.fail_open,
            seed,
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
    /// A limiter on `clock` tracking at most `max_keys` keys, each with `quota`. The table is
    /// allocated here, for `max_keys` (clamped to 2^26): 16 bytes × the next power of two of
    /// 2 × `max_keys`.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 100, ManualClock::new());
    /// assert_eq!(limiter.try_acquire(&42u64, 5), Ok(()));
    /// assert!(limiter.try_acquire(&42u64, 1).is_err());
    /// ```
    pub fn with_clock(quota: Quota, max_keys: usize, clock: C) -> Self {
        KeyedLimiter::from_parts(quota, max_keys, clock, HashMap::new(), false, None)
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
        seed: Option<u64>,
    ) -> Self {
        // Four lock stripes per default shard (per core), a power of two.
        let shards = crate::sharded::default_shards()
            .saturating_mul(4)
            .next_power_of_two()
            .min(MAX_SHARDS);
        let max_keys = max_keys.min(MAX_KEYS);
        // Random per limiter (64 bits from foldhash's randomly seeded state); fixed under loom,
        // whose models must replay the same slots (a restored limiter there too).
        #[cfg(not(tollgate_loom))]
        let (seed, hasher) = {
            let seed =
                seed.unwrap_or_else(|| foldhash::quality::RandomState::default().hash_one(0u8));
            let shared = foldhash::SharedSeed::global_fixed();
            (
                seed,
                foldhash::quality::SeedableRandomState::with_seed(seed, shared),
            )
        };
        #[cfg(tollgate_loom)]
        let (seed, hasher) = {
            let _ = seed;
            (0, foldhash::quality::SeedableRandomState::fixed())
        };
        let overrides = overrides
            .into_iter()
            .map(|(k, q)| (fingerprint(hasher.hash_one(&k)), q))
            .collect();
        KeyedLimiter {
            index: Index::new(max_keys),
            hasher,
            seed,
            quota,
            overrides,
            max_keys: u64::try_from(max_keys).unwrap_or(u64::MAX),
            fail_open,
            table: CachePadded::new(Table {
                len: AtomicU64::new(0),
                next_full_at: AtomicU64::new(u64::MAX),
                evicted_at: AtomicU64::new(0),
            }),
            // `shards` owned ones, then as many shared ones (see `count`).
            shards: (0..2 * shards).map(|_| CachePadded::default()).collect(),
            clock,
            _keys: core::marker::PhantomData,
        }
    }

    /// Takes `cost` tokens from `key`'s bucket if it holds them now.
    ///
    /// `Err(RetryAfter(d))`: the key's bucket is short (`d` exactly as for a
    /// [`Bucket`](crate::Bucket)), or the key is new and the table is full with no full bucket
    /// (`0 < d ≤` one burst's refill time, `Duration::MAX` if no tracked bucket is full again
    /// within the horizon; see [`KeyedLimiterBuilder::fail_open`]).
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
        self.acquire(key, cost)
    }

    /// [`try_acquire`](KeyedLimiter::try_acquire) with a borrowed form of the key (`&str` for
    /// `String` keys, `&[u8]` for `Vec<u8>`): never an allocation (the table stores the key's
    /// fingerprint, not the key).
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
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, cost)
    }

    /// [`try_acquire_by`](KeyedLimiter::try_acquire_by), also returning the key's bucket at the
    /// decision's clock reading: the whole tokens it holds after the decision and the time until
    /// it is full (for `RateLimit` response headers). The key's slot is read once more after the
    /// decision, at the same reading (no second clock read), so under concurrency the snapshot
    /// may include other threads' decisions on the same key. A new key refused because the table
    /// is full reports 0 tokens, full after the refusal's wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota, Snapshot};
    /// let limiter: KeyedLimiter<&str, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, ManualClock::new());
    /// assert_eq!(limiter.try_acquire_snapshot(&"k", 4), (Ok(()), Snapshot::new(6, Duration::from_millis(400))));
    /// ```
    pub fn try_acquire_snapshot<Q>(&self, key: &Q, cost: u64) -> (Result<(), Denied>, Snapshot)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = self.fingerprint(key);
        let quota = self.quota_of(fp);
        let now = self.clock.now();
        let verdict = self.acquire_fp(fp, quota, cost, || now);
        let snapshot = match verdict {
            Err(denied) => self.refusal_snapshot(fp, quota, now, denied),
            Ok(()) => gcra::snapshot(self.state_of(fp, quota), now, quota),
        };
        (verdict, snapshot)
    }

    /// [`try_acquire_by`](KeyedLimiter::try_acquire_by), with the key's [`Snapshot`] (as
    /// [`try_acquire_snapshot`](KeyedLimiter::try_acquire_snapshot) reports it) only on refusal:
    /// an admission costs what `try_acquire_by` costs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota, Snapshot};
    /// let limiter: KeyedLimiter<&str, _> =
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
        let fp = self.fingerprint(key);
        let quota = self.quota_of(fp);
        let now = self.clock.now();
        self.acquire_fp(fp, quota, cost, || now)
            .map_err(|denied| (denied, self.refusal_snapshot(fp, quota, now, denied)))
    }

    /// The key's bucket at `now` after a refusal (`denied`) of a decision on it.
    fn refusal_snapshot(&self, fp: u64, quota: &Quota, now: u64, denied: Denied) -> Snapshot {
        match (self.index.load(fp), denied) {
            (Some(state), _) => gcra::snapshot(state, now, quota),
            // A new key refused because the table is full: untracked, nothing until the wait.
            (None, Denied::RetryAfter(wait)) => Snapshot::new(0, wait),
            (None, _) => gcra::snapshot(self.start_state(quota), now, quota),
        }
    }

    /// Waits until `key`'s bucket admits `cost` tokens, then takes them (governor's
    /// `until_key_ready`): resolves to `Ok(time waited)` (from the first poll), or to the
    /// refusal that no wait cures — `Err(ExceedsBurst)` when `cost` is above the key's burst,
    /// `Err(RetryAfter(Duration::MAX))` when it would never be admitted.
    ///
    /// Each poll is one [`try_acquire`](KeyedLimiter::try_acquire) (counted as such); while it
    /// is refused the future holds one wake-up with the clock for the instant the refusal names
    /// ([`Clock::register_wake`], the same machinery as [`Bucket::until_ready`](crate::Bucket::until_ready)),
    /// replaced only when that instant or the task changes, dropped with the future. Unlike
    /// `Bucket::until_ready` it reserves nothing: dropping it gives nothing back, and waiting
    /// callers of one key are not queued — whoever tries first when tokens are there gets them.
    /// A new key refused because the table is full waits for the instant a bucket can be
    /// evicted, like any other refusal.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// struct Nop;
    /// impl Wake for Nop {
    ///     fn wake(self: Arc<Self>) {}
    /// }
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut cx = Context::from_waker(&waker);
    /// let clock = ManualClock::new_frozen(); // waiting does not move it
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, clock.clone());
    /// limiter.try_acquire(&"a", 10).unwrap();
    /// let mut fut = pin!(limiter.until_key_ready(&"a", 5));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    /// assert_eq!(clock.pending_wakes(), 1);
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::from_millis(500))));
    /// assert_eq!(limiter.available(&"a"), 0);
    /// ```
    pub fn until_key_ready<Q>(&self, key: &Q, cost: u64) -> UntilKeyReady<'_, K, C>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        UntilKeyReady {
            limiter: self,
            fp: self.fingerprint(key),
            cost,
            first: None,
            alarm: Alarm::default(),
            done: false,
        }
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
        let fp = self.fingerprint(key);
        let quota = self.quota_of(fp);
        let now = self.clock.now();
        gcra::available(self.state_of(fp, quota), now, quota)
    }

    /// The state of the key with fingerprint `fp`: its slot's, or where an untracked key starts.
    #[inline]
    fn state_of(&self, fp: u64, quota: &Quota) -> u64 {
        self.index
            .load(fp)
            .unwrap_or_else(|| self.start_state(quota))
    }

    /// The state a key not in the table starts from: full as of the latest eviction reading
    /// (`FULL` if nothing was ever evicted). For a reading at or after it this is exactly a full
    /// bucket; for an earlier (stale or stepped-back) reading it holds what a bucket full at the
    /// eviction reading holds then, so forgetting a bucket never hands a stale reading a
    /// fresher burst than the forgotten bucket had.
    #[inline]
    fn start_state(&self, quota: &Quota) -> u64 {
        quota.earned_floor(self.table.evicted_at.load(Ordering::SeqCst))
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
            *self.quota_of(self.fingerprint(key))
        }
    }

    /// The quota of the key with fingerprint `fp` (by reference: the hot path reads only its
    /// decision words, never copies it).
    #[inline]
    fn quota_of(&self, fp: u64) -> &Quota {
        if self.overrides.is_empty() {
            &self.quota
        } else {
            self.overrides.get(&fp).unwrap_or(&self.quota)
        }
    }

    /// The key's fingerprint: its seeded 64-bit hash (never 0 or 1, the index's markers).
    #[inline]
    fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        fingerprint(self.hasher.hash_one(key))
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
    /// let limiter = KeyedLimiter::<u32, _>::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// assert!(limiter.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on [`len`](KeyedLimiter::len): `max_keys` as given (clamped to 2^26).
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
    /// (insertions evict lazily); it only returns memory early, e.g. from a periodic task. It
    /// walks one whole pass over the active slots in bounded steps (first finishing a doubling
    /// of the table's region in progress, evicting the full buckets it drains), releasing the
    /// mutex between them, so concurrent insertions wait for one step at most. A full bucket
    /// that closing an eviction's gap moves back (perhaps into a slot the pass has examined) is
    /// evicted where it lands. The pass starts over in the new region if an insertion between
    /// two steps doubles the table, and one more is walked in the rare case that a step had to
    /// leave such a moved bucket (past its eviction budget, or 64 slots or more from the gap).
    ///
    /// "Now" is this sweep's clock reading. The sweep's position is shared: steps taken
    /// meanwhile by another `sweep` call, or by an insertion into a full table (which sweeps a
    /// step to make room), examine slots at their own readings, and a bucket that is not full
    /// yet at an earlier one is left for the next sweep.
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
        let now = self.clock.now();
        let (mut evicted, mut sweep) = (0u64, index::Sweep::default());
        // One bounded step per lock, so insertions wait for one step at most, never a pass.
        loop {
            let mut locked = self.index.lock();
            sweep.before(&locked);
            let step = self.sweep_step(&mut locked, now);
            evicted += step.evicted;
            if sweep.after(&locked, &step) {
                break;
            }
        }
        usize::try_from(evicted).unwrap_or(usize::MAX)
    }

    /// Adds `n` to the calling thread's count `which`. The first half of the shards is owned: the
    /// thread whose slot is `i` is the only one that writes shard `i` while it holds the slot (a
    /// slot passes to another thread only after its owner exits, through a mutex that orders the
    /// owner's last store before the next owner's first load), so it counts with a relaxed load
    /// and store, no locked instruction. Threads with later slots share the second half, by
    /// slot, with `fetch_add`.
    /// Either way a count is exact once the call that made it has returned.
    #[inline]
    fn count(&self, which: impl FnOnce(&Counters) -> &AtomicU64, n: u64) {
        let owned = self.shards.len() / 2;
        let slot = thread_slot();
        if slot < owned {
            let c = which(&self.shards[slot]);
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            which(&self.shards[owned + (slot & (owned - 1))]).fetch_add(n, Ordering::Relaxed);
        }
    }

    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The key itself is only hashed: the table stores fingerprints (see the type's docs).
        let fp = self.fingerprint(key);
        self.acquire_fp(fp, self.quota_of(fp), cost, || self.clock.now())
    }

    /// The decision for fingerprint `fp`, reading the clock (`now()`) only if it must.
    #[inline]
    fn acquire_fp(
        &self,
        fp: u64,
        quota: &Quota,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Denied> {
        let result = if cost > quota.burst() {
            Err(Denied::ExceedsBurst)
        } else if cost == 0 {
            Ok(())
        } else {
            self.decide(fp, cost, quota, now)
        };
        match result {
            Ok(()) => self.count(|c| &c.admitted, 1),
            Err(_) => self.count(|c| &c.refused, 1),
        }
        result
    }

    /// The decision for a tracked key: one lock-free probe, the clock read (`now()`) while the
    /// slot's line arrives, and at most one CAS, in line; a miss (a new key, an entry being
    /// moved) or a lost race goes to [`decide_slow`](KeyedLimiter::decide_slow), out of line.
    #[inline]
    fn decide(
        &self,
        fp: u64,
        cost: u64,
        quota: &Quota,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Denied> {
        // Read before the probe: the insert path trusts a miss only if no entry moved around it.
        let epoch = self.index.rebuild_epoch();
        let hit = self.index.lookup(fp);
        // After the slot's load is issued: a word older than the reading is fine (the CAS
        // fails on any change, and a refusal from an older, more lenient state stands).
        let now = now();
        if let Some(hit) = &hit {
            match gcra::try_acquire_in(hit.state(), now, quota.rate(), cost) {
                Ok(Some(next)) => {
                    if hit.commit(next) {
                        return Ok(());
                    }
                }
                Ok(None) => return Ok(()),
                Err(denied) => return Err(denied),
            }
        }
        self.decide_slow(fp, cost, quota, now, epoch)
    }

    /// [`decide`](KeyedLimiter::decide) after a miss or a lost race: CASes on the key's slot
    /// until one lands, or the insert path (under the mutex) when the probe misses.
    #[cold]
    #[inline(never)]
    fn decide_slow(
        &self,
        fp: u64,
        cost: u64,
        quota: &Quota,
        now: u64,
        mut epoch: u64,
    ) -> Result<(), Denied> {
        loop {
            // The hit path again: a lock-free probe and CASes on the key's own slot.
            if let Some(result) = self
                .index
                .apply(fp, |s| gcra::try_acquire_in(s, now, quota.rate(), cost))
            {
                if self.index.migrating() {
                    // Every lookup during a migration comes here (`Index::lookup`): each takes
                    // one step, so the migration ends within a bounded number of calls.
                    self.help_migrate();
                }
                return result;
            }
            match self.insert(fp, now, quota, cost, epoch) {
                Insert::Done => return Ok(()),
                Insert::Retry => epoch = self.index.rebuild_epoch(),
                Insert::Refused(denied) => return Err(denied),
                Insert::TableFull(wait) => {
                    return if self.fail_open {
                        self.count(|c| &c.admitted_untracked, 1);
                        Ok(())
                    } else {
                        self.count(|c| &c.refused_table_full, 1);
                        Err(Denied::RetryAfter(wait))
                    };
                }
            }
        }
    }

    /// Inserts a new key already debited by `cost`, if there is room (evicting full buckets to
    /// make it).
    #[cold]
    fn insert(&self, fp: u64, now: u64, quota: &Quota, cost: u64, epoch: u64) -> Insert {
        // O(1) refusal under a flood, without the mutex: the table is full and no bucket can be
        // full before `next_full_at`. `next_full_at` is read first: a sweep decrements `len`
        // before it stores a later `next_full_at`, so seeing the later bound implies seeing the
        // room the sweep made (the other order could pair a stale `len` with a fresh bound).
        // The miss that brought us here is only trusted if no entry moved around it (`epoch`
        // even and unchanged); otherwise the key may be tracked: ask under the mutex.
        // While a migration is in progress the refusal takes the mutex instead, so that its
        // sweep step drains the old region: a table that stays full still finishes it.
        if self.table.next_full_at.load(Ordering::SeqCst) > now
            && self.table.len.load(Ordering::SeqCst) >= self.max_keys
            && epoch % 2 == 0
            && self.index.rebuild_epoch() == epoch
            && !self.index.migrating()
        {
            return Insert::TableFull(self.table_full_wait(now));
        }
        let mut locked = self.index.lock();
        if locked.contains(fp) {
            // Inserted by another thread meanwhile (or moved): decide on its slot.
            return Insert::Retry;
        }
        if self.table.len.load(Ordering::SeqCst) >= self.max_keys {
            if self.table.next_full_at.load(Ordering::SeqCst) <= now || locked.migrating() {
                // One bounded step of the sweep (the whole pass on tables of at most
                // `STEP_WORK` active slots), which drains the old region first during a
                // migration; the pass goes on at the next insertion.
                self.sweep_step(&mut locked, now);
            }
            if self.table.len.load(Ordering::SeqCst) >= self.max_keys {
                return Insert::TableFull(self.table_full_wait(now));
            }
        }
        // The start state is read under the mutex, after any eviction that made this key miss
        // (evictions raise `evicted_at` under the same mutex, before their CAS).
        let state = match gcra::try_acquire(self.start_state(quota), now, quota, cost) {
            Ok(Some(state)) => state,
            Ok(None) => return Insert::Done,
            Err(denied) => return Insert::Refused(denied),
        };
        let full_at = gcra::full_at(state, quota);
        locked.insert(fp, state, full_at);
        self.table.len.fetch_add(1, Ordering::SeqCst);
        self.table.next_full_at.fetch_min(full_at, Ordering::SeqCst);
        Insert::Done
    }

    /// The wait until a tracked bucket is full, within `[1 ns, refill time of one burst]`, or
    /// `Duration::MAX` when none ever will be (every tracked bucket is full only past the
    /// horizon, where the clock is read as stopped).
    fn table_full_wait(&self, now: u64) -> core::time::Duration {
        let cap = self.quota.refill_time(self.quota.burst());
        let at = self.table.next_full_at.load(Ordering::SeqCst);
        // (An empty table, `max_keys` 0, keeps the one-burst answer.)
        if at == u64::MAX && self.table.len.load(Ordering::SeqCst) > 0 {
            return core::time::Duration::MAX;
        }
        core::time::Duration::from_nanos(at.saturating_sub(now).max(1)).min(cap)
    }

    /// One migration step, if the index's mutex is free: lookups of keys left in the old
    /// region drain it, so a migration ends even when no new key arrives (its lookups would
    /// otherwise probe two regions for good). Never waits for the mutex.
    #[cold]
    #[inline(never)]
    fn help_migrate(&self) {
        if let Some(mut locked) = self.index.try_lock() {
            locked.help_migrate();
        }
    }

    /// The first instant at which the bucket of `fp` in state `s` is full.
    fn full_at(&self, fp: u64, s: u64) -> u64 {
        gcra::full_at(s, self.quota_of(fp))
    }

    /// One bounded sweep step at reading `now`, with the index's mutex held: evicts the full
    /// buckets it meets; when it ends a pass, stores the pass's bound in `next_full_at`.
    fn sweep_step(&self, locked: &mut index::Locked<'_>, now: u64) -> index::Step {
        // Past the horizon the clock is read as stopped there, and `full_at` says `u64::MAX`
        // for "never full": compared with a reading of `u64::MAX` itself, that sentinel would
        // read as "full now" and evict a bucket that never refills (a fresh burst each time).
        let now = now.min(crate::quota::HORIZON_NS);
        let evicted_at = &self.table.evicted_at;
        let step = locked.sweep_step(
            now,
            |fp, s| self.full_at(fp, s),
            // Raised before the eviction's CAS: whoever misses the key afterwards starts it
            // from a state at least as strict as the evicted one (see `Table::evicted_at`).
            || {
                evicted_at.fetch_max(now, Ordering::SeqCst);
            },
        );
        // `len` first, then the bound: see the lock-free refusal in `insert`.
        self.table.len.fetch_sub(step.evicted, Ordering::SeqCst);
        if let Some(next) = step.pass_done {
            self.table.next_full_at.store(next, Ordering::SeqCst);
        }
        if step.evicted > 0 {
            self.count(|c| &c.evicted, step.evicted);
        }
        step
    }
}

/// The future returned by [`KeyedLimiter::until_key_ready`]: resolves to `Ok(time waited)` once
/// the key's bucket admitted the tokens, or to a refusal no wait cures. Polling it again after
/// it resolved gives `Ok(Duration::ZERO)` and takes nothing. It holds at most one wake-up with
/// the clock at a time; dropping it cancels that wake-up.
///
/// ```
/// use std::future::Future;
/// use std::pin::pin;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
///
/// struct Nop;
/// impl Wake for Nop {
///     fn wake(self: Arc<Self>) {}
/// }
/// let waker = Waker::from(Arc::new(Nop));
/// let limiter: KeyedLimiter<u32, _> =
///     KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 10, ManualClock::new());
/// let mut fut = pin!(limiter.until_key_ready(&7u32, 11));
/// let poll = fut.as_mut().poll(&mut Context::from_waker(&waker));
/// assert_eq!(poll, Poll::Ready(Err(Denied::ExceedsBurst)));
/// ```
#[must_use = "futures do nothing unless polled; an unpolled `UntilKeyReady` takes nothing"]
pub struct UntilKeyReady<'a, K, C: Clock> {
    limiter: &'a KeyedLimiter<K, C>,
    fp: u64,
    cost: u64,
    /// The reading of the first poll.
    first: Option<u64>,
    alarm: Alarm,
    done: bool,
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Future for UntilKeyReady<'_, K, C> {
    type Output = Result<Duration, Denied>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Ok(Duration::ZERO));
        }
        let limiter = this.limiter;
        let clock = &limiter.clock;
        let quota = limiter.quota_of(this.fp);
        loop {
            let now = clock.now();
            let first = *this.first.get_or_insert(now);
            let until = match limiter.acquire_fp(this.fp, quota, this.cost, || now) {
                Ok(()) => {
                    this.done = true;
                    this.alarm = Alarm::default();
                    return Poll::Ready(Ok(Duration::from_nanos(now.saturating_sub(first))));
                }
                Err(Denied::RetryAfter(wait)) if wait != Duration::MAX => {
                    now.saturating_add(crate::clock::nanos(wait))
                }
                Err(denied) => {
                    this.done = true;
                    this.alarm = Alarm::default();
                    return Poll::Ready(Err(denied));
                }
            };
            this.alarm.set(clock, until, cx);
            if clock.now() < until {
                return Poll::Pending;
            }
        }
    }
}

impl<K, C: Clock> fmt::Debug for UntilKeyReady<'_, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilKeyReady")
            .field("fingerprint", &self.fp)
            .field("cost", &self.cost)
            .field("first_ns", &self.first)
            .field("wake", &self.alarm)
            .field("done", &self.done)
            .finish()
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
