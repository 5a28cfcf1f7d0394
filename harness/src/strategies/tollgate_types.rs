//! tollgate's own limiters as strategies: [`tollgate::Bucket`] (`cas`),
//! [`tollgate::ShardedBucket`] (`sharded`) and [`tollgate::KeyedLimiter`] (`keyed`; the runner
//! checks keyed strategies' bounds per key, see [`RateLimiter::is_keyed`]); and [`Tollgate`],
//! any tollgate limiter as a strategy through [`tollgate::Limiter`] (the policies' ones in
//! `multi.rs` too).

use super::{Kind, RateLimiter, Setup, Strategy};
use tollgate::{Bucket, Clock, DefaultClock, Denied, KeyedLimiter, Limiter, Quota, ShardedBucket};

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

/// The `sharded` strategy's limiter: [`ShardedBucket::try_acquire`] called directly, as
/// [`Cas`] calls [`Bucket::try_acquire`] (not through [`Limiter::decide`], whose [`Refusal`]
/// would add a conversion to every refusal that `cas` does not pay).
///
/// [`Refusal`]: tollgate::Refusal
#[derive(Debug)]
pub struct Sharded<C = DefaultClock>(ShardedBucket<C>);

impl<C: Clock> Sharded<C> {
    /// Wraps a sharded bucket.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let b = ShardedBucket::with_clock(Quota::per_second(1).unwrap(), 2, ManualClock::new());
    /// let m = tollgate_bench::strategies::Sharded::new(b);
    /// # let _ = m;
    /// ```
    pub fn new(bucket: ShardedBucket<C>) -> Sharded<C> {
        Sharded(bucket)
    }
}

impl<C: Clock + Send + Sync> RateLimiter for Sharded<C> {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.0.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "sharded"
    }
    /// The runner reports its writes to shared lines.
    fn counts_shared_writes(&self) -> bool {
        true
    }
}

/// The key a strategy hands its limiter: none for one global limit, the drawn key for a keyed
/// one.
pub(super) trait DrawnKey {
    /// Whether the runner draws a key per operation and checks each key's bound.
    const KEYED: bool;
    /// The key for the drawn `key`.
    fn of(key: u64) -> Self;
}

impl DrawnKey for () {
    const KEYED: bool = false;
    fn of(_: u64) {}
}

impl DrawnKey for u64 {
    const KEYED: bool = true;
    fn of(key: u64) -> u64 {
        key
    }
}

/// Any tollgate limiter as a strategy: each operation is one [`Limiter::decide`], for the drawn
/// key if it is keyed; every quota after its first is checked as an extra bound
/// ([`RateLimiter::extra_quotas`]).
pub(super) struct Tollgate<L> {
    pub(super) limiter: L,
    pub(super) name: &'static str,
}

impl<L> RateLimiter for Tollgate<L>
where
    L: Limiter + Send + Sync,
    L::Key: DrawnKey + Sized,
{
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.try_acquire_key(0, cost)
    }
    #[inline]
    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        self.limiter
            .decide(&L::Key::of(key), cost)
            .map_err(Denied::from)
    }
    fn is_keyed(&self) -> bool {
        L::Key::KEYED
    }
    fn name(&self) -> &str {
        self.name
    }
    fn extra_quotas(&self) -> Vec<Quota> {
        let limits = self.limiter.limits(&L::Key::of(0));
        limits.map_or_else(Vec::new, |l| l.quotas()[1..].to_vec())
    }
}

/// A strategy of `limiter`, named `name`.
pub(super) fn tollgate<L>(limiter: L, name: &'static str) -> Box<dyn RateLimiter>
where
    L: Limiter + Send + Sync + 'static,
    L::Key: DrawnKey + Sized,
{
    Box::new(Tollgate { limiter, name })
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
        Ok(Box::new(Sharded::new(ShardedBucket::with_clock(
            s.quota, shards, s.clock,
        ))) as Box<dyn RateLimiter>)
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
        let table: KeyedLimiter<u64, Quota, DefaultClock> =
            KeyedLimiter::with_clock(s.quota, max_keys, s.clock);
        Ok(tollgate(table, "keyed"))
    })
    .with_description("tollgate::KeyedLimiter<u64>: one bucket per key (--keys)")
}
