//! tollgate's own limiters as strategies: [`tollgate::Bucket`] (`cas`),
//! [`tollgate::ShardedBucket`] (`sharded`) and [`tollgate::KeyedLimiter`] (`keyed`; the runner
//! checks keyed strategies' bounds per key, see [`RateLimiter::is_keyed`]).

use super::{Kind, RateLimiter, Setup, Strategy};
use tollgate::{Bucket, Clock, DefaultClock, Denied, KeyedLimiter, ShardedBucket};

/// `cas`: [`tollgate::Bucket`] itself — one `AtomicU64`, a CAS loop retried at once.
///
/// ```
/// use tollgate::{Bucket, ManualClock, Quota};
/// use tollgate_bench::{strategies::Cas, RateLimiter};
/// let m = Cas::new(Bucket::with_clock(Quota::per_second(2).unwrap(), ManualClock::new()));
/// assert!(m.try_acquire(2).is_ok());
/// assert!(m.try_acquire(1).is_err());
/// ```
#[derive(Debug)]
pub struct Cas<C = DefaultClock>(Bucket<C>);

impl<C: Clock> Cas<C> {
    /// Wraps a bucket.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let m = tollgate_bench::strategies::Cas::new(Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new()));
    /// # let _ = m;
    /// ```
    pub fn new(bucket: Bucket<C>) -> Cas<C> {
        Cas(bucket)
    }
}

impl<C: Clock + Send + Sync> RateLimiter for Cas<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "cas"
    }
}

struct Keyed(KeyedLimiter<u64, tollgate::Quota, DefaultClock>);
impl RateLimiter for Keyed {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(&0, cost)
    }
    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(&key, cost)
    }
    fn is_keyed(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "keyed"
    }
}

struct Sharded(ShardedBucket<DefaultClock>);
impl RateLimiter for Sharded {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "sharded"
    }
    fn counts_shared_writes(&self) -> bool {
        true
    }
}

/// The `cas` strategy.
pub(super) fn cas() -> Strategy {
    Strategy::new("cas", Kind::Tollgate, |s: &Setup| {
        Ok(Box::new(Cas::new(Bucket::with_clock(s.quota, s.clock))) as Box<dyn RateLimiter>)
    })
    .with_description("tollgate::Bucket: lock-free CAS loop on one AtomicU64")
}

/// The `sharded` strategy: one shard per core.
pub(super) fn sharded() -> Strategy {
    Strategy::new("sharded", Kind::Tollgate, |s: &Setup| {
        let shards = ShardedBucket::<DefaultClock>::default_shards();
        Ok(
            Box::new(Sharded(ShardedBucket::with_clock(s.quota, shards, s.clock)))
                as Box<dyn RateLimiter>,
        )
    })
    .with_description(
        "tollgate::ShardedBucket: a central word and a lease per cache-padded shard, one per core",
    )
}

/// The `keyed` strategy.
pub(super) fn keyed() -> Strategy {
    Strategy::new("keyed", Kind::Tollgate, |s: &Setup| {
        // Room for every key: the table never fills, so no refusal is due to capacity.
        let max_keys = usize::try_from(s.keys).map_err(|_| "too many keys")?;
        Ok(
            Box::new(Keyed(KeyedLimiter::with_clock(s.quota, max_keys, s.clock)))
                as Box<dyn RateLimiter>,
        )
    })
    .with_description("tollgate::KeyedLimiter<u64>: one bucket per key (--keys)")
}
