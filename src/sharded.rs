//! [`ShardedBucket`]: one global quota spread over cache-padded per-core sub-buckets.

use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::gcra;
use crate::quota::{Quota, HORIZON_NS};
use crate::snapshot::Snapshot;
use crate::sync::{thread_slot, AtomicU64, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use crossbeam_utils::CachePadded;

/// The most shards a [`ShardedBucket`] uses, whatever is asked for.
const MAX_SHARDS: usize = 1024;

/// One sub-bucket: an exact token bucket with its share of the rate and of the burst.
struct Shard {
    /// The [`gcra`] state of this sub-bucket.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..0 | the [`gcra`] state (theoretical arrival time, shifted by one burst) | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full |
    ///
    /// Every access is `Relaxed`: each shard is an independent bucket whose bound (burst +
    /// rate·Δ) follows from the coherence order of this one word; no other memory is published
    /// through it. The global bounds are sums of the per-shard bounds.
    state: AtomicU64,
    /// This shard's quota: rate `tokens / (n × per)`, burst `⌊burst / n⌋` or one more.
    quota: Quota,
}

/// A token bucket for one global limit hit by many cores at once: the quota is split exactly over
/// cache-padded sub-buckets (by default one per core), so threads on different cores debit
/// different cache lines.
///
/// * **Exact split.** Shard `i` gets the rate `tokens / (n·per)` (the shard rates sum to the
///   global rate exactly) and the burst `⌊burst/n⌋`, the first `burst mod n` shards one more (the
///   shard bursts sum to the global burst exactly). Each shard is an exact [`gcra`] bucket, so in
///   any window Δ the total admitted never exceeds `burst + rate·Δ`.
/// * **No stranded tokens.** A thread debits its own shard (one CAS). When that shard cannot pay,
///   the thread *borrows*: it sums the balances of all shards (read-only), and if they cover the
///   cost it takes partial amounts — fractions of a token included — from as many shards as
///   needed, or gives everything back if a race left too little (all or nothing). So one thread
///   alone still gets the whole burst and the whole rate, and on a frozen clock exactly `burst`
///   tokens come out in total, whatever the number of threads.
/// * Threads map to shards through a thread-local index assigned round-robin: no syscall per call.
/// * **Refill to full.** When the shard count does not divide the burst, the shards with one token
///   less fill up first and then stop earning, so an emptied bucket is full again after
///   `⌈burst/n⌉·n / rate` instead of `burst / rate` (at most `n / burst` longer). The window bound
///   and the long-run rate are unaffected.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
/// let clock = ManualClock::new();
/// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock.clone());
/// assert_eq!(bucket.try_acquire(8), Ok(())); // the whole burst, borrowed across the 4 shards
/// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(bucket.available(), 8);
/// ```
///
/// Borrowing is the slow path: it reads every shard's line and may write several. A bucket whose
/// threads keep their own shards supplied (many threads, or costs well below `burst / shards`)
/// rarely borrows; one hot thread on a drained bucket borrows on every call.
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub struct ShardedBucket<C = DefaultClock> {
    shards: Box<[CachePadded<Shard>]>,
    quota: Quota,
    clock: C,
}

impl<C: fmt::Debug> fmt::Debug for ShardedBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedBucket")
            .field("quota", &self.quota)
            .field("shards", &self.shards.len())
            .field("clock", &self.clock)
            .finish()
    }
}

/// The shard quotas for `n` shards, or `None` if `n` shards cannot split `quota` exactly with one
/// unit for all (a period times `n` beyond `u64` nanoseconds, or a rate so close to the 63-bit
/// range that the two shard bursts get different units).
fn split(quota: &Quota, n: usize) -> Option<Vec<Quota>> {
    if n <= 1 {
        return Some(alloc::vec![*quota]);
    }
    let n64 = n as u64;
    let per_ns = u64::try_from(quota.per().as_nanos()).ok()?;
    let period = Duration::from_nanos(per_ns.checked_mul(n64)?);
    let (lo, rem) = (quota.burst() / n64, quota.burst() % n64);
    if lo == 0 {
        return None;
    }
    let low = Quota::new(quota.tokens(), period, lo).ok()?;
    let hi = if rem > 0 {
        let hi = Quota::new(quota.tokens(), period, lo + 1).ok()?;
        if hi.scale() != low.scale() {
            return None;
        }
        hi
    } else {
        low
    };
    Some((0..n64).map(|i| if i < rem { hi } else { low }).collect())
}

impl ShardedBucket<DefaultClock> {
    /// A full sharded bucket on the [`DefaultClock`], with one shard per core
    /// (`std::thread::available_parallelism`).
    ///
    /// ```
    /// let bucket = tollgate::ShardedBucket::new(tollgate::Quota::per_second(100).unwrap());
    /// assert_eq!(bucket.try_acquire(100), Ok(()));
    /// ```
    pub fn new(quota: Quota) -> ShardedBucket<DefaultClock> {
        ShardedBucket::with_clock(quota, default_shards(), DefaultClock::default())
    }

    /// The shard count [`ShardedBucket::new`] asks for: one per core
    /// (`std::thread::available_parallelism`, 1 when unknown).
    ///
    /// ```
    /// assert!(tollgate::ShardedBucket::default_shards() >= 1);
    /// ```
    pub fn default_shards() -> usize {
        default_shards()
    }
}

/// One shard per core: the crate's one default for how many ways to split shared state.
pub(crate) fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl<C: Clock> ShardedBucket<C> {
    /// A full sharded bucket with `shards` sub-buckets on `clock`.
    ///
    /// The number actually used ([`ShardedBucket::shards`]) is at most `shards`, at most the
    /// burst (every shard needs a burst of at least one token), at most 1024, and at least 1
    /// (`0` is read as 1); it is lowered further only for periods of centuries, where `shards ×
    /// per` would not fit 64-bit nanoseconds.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(3).unwrap();
    /// assert_eq!(ShardedBucket::with_clock(q, 8, ManualClock::new()).shards(), 3);
    /// assert_eq!(ShardedBucket::with_clock(q, 0, ManualClock::new()).shards(), 1);
    /// ```
    pub fn with_clock(quota: Quota, shards: usize, clock: C) -> ShardedBucket<C> {
        let max = usize::try_from(quota.burst()).unwrap_or(usize::MAX);
        let mut n = shards.clamp(1, MAX_SHARDS).min(max);
        let quotas = loop {
            if let Some(q) = split(&quota, n) {
                break q;
            }
            // n = 1 always splits: the shard quota is the global quota itself.
            n /= 2;
        };
        let shards = quotas
            .into_iter()
            .map(|quota| {
                CachePadded::new(Shard {
                    state: AtomicU64::new(gcra::FULL),
                    quota,
                })
            })
            .collect();
        ShardedBucket {
            shards,
            quota,
            clock,
        }
    }

    /// The number of sub-buckets.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(100).unwrap(), 8, ManualClock::new());
    /// assert_eq!(bucket.shards(), 8);
    /// ```
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The global quota.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(100).unwrap();
    /// assert_eq!(ShardedBucket::with_clock(q, 8, ManualClock::new()).quota(), q);
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The bucket's clock.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(1).unwrap(), 1, ManualClock::new());
    /// assert_eq!(bucket.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Takes `cost` tokens if the shards together hold them now.
    ///
    /// First one CAS on the calling thread's own shard; if that shard cannot pay, the cost is
    /// borrowed from the others (see the type's docs), all or nothing. `Err(RetryAfter(d))`: `d`
    /// is the smallest wait after which the shards together hold `cost` if nothing else consumes
    /// (for quotas that are not [exact](Quota::is_exact) it may be rounded up by one unit's
    /// time). `Err(ExceedsBurst)`: `cost` is above the global burst. Cost 0 is always admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire(3), Ok(()));
    /// assert_eq!(bucket.try_acquire(5), Ok(()));
    /// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
    /// assert_eq!(bucket.try_acquire(9), Err(Denied::ExceedsBurst));
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        if cost == 0 {
            return Ok(());
        }
        if cost > self.quota.burst() {
            return Err(Denied::ExceedsBurst);
        }
        self.acquire_at(self.clock.now(), cost)
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), also returning the pooled bucket at the
    /// decision's clock reading: the whole tokens the shards hold together after it, and the
    /// time until every shard is full. The shards are read once more after the decision (at the
    /// same reading, no second clock read), so under concurrency the snapshot may already
    /// include other threads' decisions.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket, Snapshot};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire_snapshot(2), (Ok(()), Snapshot::new(6, Duration::from_millis(500))));
    /// ```
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let now = self.clock.now();
        let verdict = if cost == 0 {
            Ok(())
        } else if cost > self.quota.burst() {
            Err(Denied::ExceedsBurst)
        } else {
            self.acquire_at(now, cost)
        };
        (verdict, self.snapshot_at(now))
    }

    /// The pooled bucket at `now` (read-only).
    fn snapshot_at(&self, now: u64) -> Snapshot {
        let mut units = 0u128;
        let mut full_at = now;
        for s in self.shards.iter() {
            let state = s.state.load(Ordering::Relaxed);
            units += u128::from(gcra::available_units(state, now, &s.quota));
            if !gcra::is_full(state, now, &s.quota) {
                full_at = full_at.max(gcra::full_at(state, &s.quota));
            }
        }
        let remaining =
            u64::try_from(units / u128::from(self.shards[0].quota.scale())).unwrap_or(u64::MAX);
        let until_full = match full_at {
            u64::MAX => Duration::MAX,
            at => Duration::from_nanos(at - now),
        };
        Snapshot::new(remaining, until_full)
    }

    /// The decision at `now` for `0 < cost <= burst`.
    #[inline]
    fn acquire_at(&self, now: u64, cost: u64) -> Result<(), Denied> {
        let home = self.home();
        let shard = &self.shards[home];
        if cost <= shard.quota.burst() {
            let mut state = shard.state.load(Ordering::Relaxed);
            while let Ok(Some(next)) = gcra::try_acquire(state, now, &shard.quota, cost) {
                match shard.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(()),
                    Err(actual) => state = actual,
                }
            }
        }
        self.borrow(home, now, cost)
    }

    /// Whole tokens the shards hold together now (fractions pooled across shards).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let clock = ManualClock::new();
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(4).unwrap(), 4, clock.clone());
    /// bucket.try_acquire(4).unwrap();
    /// clock.advance(Duration::from_millis(250)); // each shard has refilled a quarter token
    /// assert_eq!(bucket.available(), 1);
    /// assert_eq!(bucket.try_acquire(1), Ok(()));
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.clock.now();
        let units = self.units_at(now);
        u64::try_from(units / u128::from(self.shards[0].quota.scale())).unwrap_or(u64::MAX)
    }

    /// The calling thread's shard.
    #[inline]
    fn home(&self) -> usize {
        let n = self.shards.len();
        let slot = thread_slot();
        if n.is_power_of_two() {
            slot & (n - 1)
        } else {
            slot % n
        }
    }

    /// Units available in all shards together at `t` (read-only).
    fn units_at(&self, t: u64) -> u128 {
        self.shards
            .iter()
            .map(|s| {
                u128::from(gcra::available_units(
                    s.state.load(Ordering::Relaxed),
                    t,
                    &s.quota,
                ))
            })
            .sum()
    }

    /// The slow path: pool the shards, starting with `home`'s own remainder.
    #[cold]
    fn borrow(&self, home: usize, now: u64, cost: u64) -> Result<(), Denied> {
        // All shards share one unit (`split` guarantees it).
        let need = u128::from(cost) * u128::from(self.shards[0].quota.scale());
        if self.units_at(now) < need {
            return Err(Denied::RetryAfter(self.wait(now, need)));
        }
        let n = self.shards.len();
        let mut takes = Takes::default();
        let mut left = need;
        for k in 0..n {
            let j = (home + k) % n;
            let shard = &self.shards[j];
            let mut state = shard.state.load(Ordering::Relaxed);
            let max = u64::try_from(left).unwrap_or(u64::MAX);
            while let Some((next, taken)) = gcra::take_units(state, now, &shard.quota, max) {
                match shard.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        takes.push(Take {
                            shard: j,
                            after: next,
                            units: taken,
                        });
                        left -= u128::from(taken);
                        break;
                    }
                    Err(actual) => state = actual,
                }
            }
            if left == 0 {
                return Ok(());
            }
        }
        // A race left too little: give everything back (all or nothing).
        takes.for_each(|t| {
            let shard = &self.shards[t.shard];
            let mut state = shard.state.load(Ordering::Relaxed);
            while let Some(next) = gcra::give_back_units(state, t.after, t.units) {
                match shard.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(actual) => state = actual,
                }
            }
        });
        Err(Denied::RetryAfter(self.wait(now, need)))
    }

    /// The smallest wait after which the shards together hold `need` units, if nothing else
    /// consumes: `units_at` never decreases as time passes, so a binary search between `now` and
    /// the horizon finds the first instant it reaches `need` exactly (about 62 probes, each
    /// reading every shard once; this is the refusal path of a pooled borrow). Full shards earn
    /// nothing, which is why no closed form over the shard count works.
    fn wait(&self, now: u64, need: u128) -> Duration {
        let end = HORIZON_NS.max(now);
        if self.units_at(end) < need {
            return Duration::MAX;
        }
        // Invariant: units_at(hi) >= need; units_at(lo) < need, or lo == now.
        let (mut lo, mut hi) = (now, end);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.units_at(mid) >= need {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Duration::from_nanos((hi - now).max(1))
    }
}

/// A partial take to give back if the whole cost cannot be met.
#[derive(Clone, Copy, Default)]
struct Take {
    shard: usize,
    /// The shard's word right after the take.
    after: u64,
    units: u64,
}

/// The takes of one borrow: inline for up to 8 shards, spilled to the heap beyond.
#[derive(Default)]
struct Takes {
    inline: [Take; 8],
    len: usize,
    spill: Vec<Take>,
}

impl Takes {
    fn push(&mut self, t: Take) {
        if self.len < self.inline.len() {
            self.inline[self.len] = t;
            self.len += 1;
        } else {
            self.spill.push(t);
        }
    }

    fn for_each(&self, mut f: impl FnMut(&Take)) {
        self.inline[..self.len].iter().for_each(&mut f);
        self.spill.iter().for_each(f);
    }
}
