//! [`Limiter`]: every limiter's decision in one shape, for code written once for all of them.

use crate::error::Denied;
use crate::limits::Limits;
use crate::multi::snapshots::Snapshots;
use crate::refusal::Refusal;

/// A rate limiter, whatever its kind: [`Bucket`](crate::Bucket),
/// [`ShardedBucket`](crate::ShardedBucket), [`MultiBucket`](crate::MultiBucket),
/// [`Smooth`](crate::Smooth) (the key is `()`) and `KeyedLimiter` (a limit per key). A refusal
/// names the quota that decided it ([`Refusal::quota_index`], 0 for a single quota) and the
/// snapshots list every quota's, in order. Each decision is the limiter's own `try_acquire`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, Denied, Limiter, Limits, ManualClock, MultiBucket, Quota};
///
/// /// Admits `cost` on any limiter of one global limit, reporting the tightest quota's
/// /// tokens left on refusal.
/// fn admit<L: Limiter<Key = ()>>(limiter: &L, cost: u64) -> Result<(), (Denied, u64)> {
///     limiter
///         .decide_or_snapshots(&(), cost)
///         .map_err(|(refusal, snaps)| (refusal.denied(), snaps.tightest().1.remaining()))
/// }
/// let q = Quota::per_second(10).unwrap();
/// let bucket = Bucket::with_clock(q, ManualClock::new());
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let policy = MultiBucket::with_clock(Limits::new([q, per_minute]).unwrap(), ManualClock::new());
/// assert_eq!(admit(&bucket, 10), Ok(()));
/// assert_eq!(admit(&bucket, 1), Err((Denied::RetryAfter(Duration::from_millis(100)), 0)));
/// assert_eq!(admit(&policy, 10), Ok(()));
/// assert_eq!(Limiter::limits(&policy, &()).unwrap().quotas().len(), 2);
/// ```
pub trait Limiter {
    /// `()` for the limiters of one global limit, the key type of a keyed one.
    type Key: ?Sized;

    /// Takes `cost` tokens for `key` from every quota if all of them hold them now; a refusal
    /// changes nothing. For [`Smooth`](crate::Smooth), whose `try_acquire` keeps Guava's
    /// signature: `try_acquire(cost, Duration::ZERO)`, with the wait a refusal asks for.
    fn decide(&self, key: &Self::Key, cost: u64) -> Result<(), Refusal>;

    /// [`decide`](Limiter::decide), with every quota's snapshot at the decision's clock
    /// reading on refusal only: an admission costs what `decide` costs.
    // The snapshots are a refusal's payload, built only on that path.
    #[allow(clippy::result_large_err)]
    fn decide_or_snapshots(&self, key: &Self::Key, cost: u64) -> Result<(), (Refusal, Snapshots)>;

    /// [`decide`](Limiter::decide), with every quota's snapshot at the decision's clock
    /// reading whatever the verdict (for `RateLimit` headers on admitted responses too).
    fn decide_snapshots(&self, key: &Self::Key, cost: u64) -> (Result<(), Refusal>, Snapshots);

    /// The quotas `key` is decided under, in order (`None`: [`Smooth`](crate::Smooth)).
    fn limits(&self, key: &Self::Key) -> Option<Limits>;

    /// The most quotas a decision of this limiter holds to (a keyed table: of any policy).
    fn max_quotas(&self) -> usize {
        1
    }
}

/// A single quota's refusal, as a policy's: decided by quota 0.
#[inline]
pub(crate) fn one(denied: Denied) -> Refusal {
    Refusal::new(denied, 0)
}

/// Implements [`Limiter`] for a limiter of one quota from its `try_acquire`,
/// `try_acquire_or_snapshot`, `acquire_snapshot` (whatever the verdict) and `quota`.
macro_rules! one_quota_limiter {
    (impl[$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> crate::limiter::Limiter for $ty {
            type Key = ();

            #[inline]
            fn decide(&self, _: &(), cost: u64) -> Result<(), crate::refusal::Refusal> {
                self.try_acquire(cost).map_err(crate::limiter::one)
            }

            fn decide_or_snapshots(
                &self,
                _: &(),
                cost: u64,
            ) -> Result<(), (crate::refusal::Refusal, crate::multi::Snapshots)> {
                self.try_acquire_or_snapshot(cost).map_err(|(denied, snapshot)| {
                    (crate::limiter::one(denied), crate::multi::Snapshots::one(snapshot))
                })
            }

            fn decide_snapshots(
                &self,
                _: &(),
                cost: u64,
            ) -> (Result<(), crate::refusal::Refusal>, crate::multi::Snapshots) {
                let (verdict, snapshot) = self.acquire_snapshot(cost);
                (
                    verdict.map_err(crate::limiter::one),
                    crate::multi::Snapshots::one(snapshot),
                )
            }

            fn limits(&self, _: &()) -> Option<crate::limits::Limits> {
                Some(crate::limits::Limits::from(self.quota()))
            }
        }
    };
}
pub(crate) use one_quota_limiter;
