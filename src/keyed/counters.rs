//! [`KeyedCounters`] and the per-thread counter shards they sum.

use super::{KeyedLimiter, KeyedPolicy};
use crate::sync::{thread_slot, AtomicU64, Ordering};
use alloc::boxed::Box;
use crossbeam_utils::CachePadded;

/// A snapshot of a [`KeyedLimiter`]'s counters: `admitted` includes `admitted_untracked`,
/// `refused` includes `refused_table_full`.
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
    /// Requests for a new key admitted untracked because the table was full
    /// ([`KeyedLimiterBuilder::fail_open`](crate::KeyedLimiterBuilder::fail_open), or shadow mode).
    pub admitted_untracked: u64,
    /// Buckets evicted (each was full, so forgetting it changed no verdict).
    pub evicted: u64,
}

/// One counter shard, on its own line: owned by one thread or shared ([`CounterShards::count`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) admitted: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) refused_table_full: AtomicU64,
    pub(crate) admitted_untracked: AtomicU64,
    pub(crate) evicted: AtomicU64,
}

/// The most counter shards of each half, whatever the core count.
const MAX_SHARDS: usize = 1024;

/// A keyed table's counters, split by thread.
pub(crate) struct CounterShards {
    shards: Box<[CachePadded<Counters>]>,
}

impl CounterShards {
    /// Four owned shards per core (a power of two), then as many shared ones.
    pub(crate) fn new() -> CounterShards {
        let owned = crate::sharded::shards_per_core()
            .saturating_mul(4)
            .next_power_of_two()
            .min(MAX_SHARDS);
        CounterShards {
            shards: (0..2 * owned).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Adds `n` to the calling thread's count `which`, exact once the call returns. The first
    /// half of the shards is owned: the thread whose slot is `i` is shard `i`'s only writer (a
    /// slot passes on only after its owner exits, through a mutex that orders the owner's last
    /// store before the next owner's first load), so it counts with a relaxed load and store.
    /// Threads with later slots share the second half with `fetch_add`.
    #[inline]
    pub(crate) fn count(&self, which: impl FnOnce(&Counters) -> &AtomicU64, n: u64) {
        let owned = self.shards.len() / 2;
        let slot = thread_slot();
        if slot < owned {
            let c = which(&self.shards[slot]);
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            which(&self.shards[owned + (slot & (owned - 1))]).fetch_add(n, Ordering::Relaxed);
        }
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiter<K, P, C> {
    /// The counters, summed over the shards ([`KeyedCounters`]): each decision counts once, as
    /// what the caller got (admitted, in shadow mode), exact once the calls have returned.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, ManualClock::new());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.counters().admitted, 1);
    /// ```
    pub fn counters(&self) -> KeyedCounters {
        let mut c = KeyedCounters::default();
        for s in self.shards.shards.iter() {
            c.admitted += s.admitted.load(Ordering::Relaxed);
            c.refused += s.refused.load(Ordering::Relaxed);
            c.refused_table_full += s.refused_table_full.load(Ordering::Relaxed);
            c.admitted_untracked += s.admitted_untracked.load(Ordering::Relaxed);
            c.evicted += s.evicted.load(Ordering::Relaxed);
        }
        c
    }
}
