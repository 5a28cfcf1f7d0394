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
    ///
    /// Read on its own, after a decision, this may already be a quota set since (a
    /// [`Bucket::set_quota`](crate::Bucket::set_quota) in between): to describe a decision, use
    /// [`decide_snapshots_limits`](Limiter::decide_snapshots_limits).
    fn limits(&self, key: &Self::Key) -> Option<Limits>;

    /// [`decide_snapshots`](Limiter::decide_snapshots), with the quotas the decision and its
    /// snapshots were made under: the snapshots never describe one quota while the limits name
    /// another, so each snapshot's `remaining` is at most its quota's burst, whatever
    /// reconfiguration races the decision. `None`: the limiter has no quotas
    /// ([`Smooth`](crate::Smooth)), or they could not be tied to the decision (below).
    ///
    /// Every tollgate limiter reads them with the decision, from the same state: a [`Bucket`]'s
    /// quota comes from the slot its decision's compare-and-swap was validated against. The
    /// default, for limiters written elsewhere, reads [`limits`](Limiter::limits) before and
    /// after the decision and reports them only if both reads agree (two reconfigurations that
    /// come back to the first read's quotas go unseen); a limiter whose quotas change at run
    /// time should implement it to tie them to the decision exactly.
    ///
    /// [`Bucket`]: crate::Bucket
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Limiter, ManualClock, Quota, Snapshot};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// let (verdict, snaps, limits) = bucket.decide_snapshots_limits(&(), 4);
    /// bucket.set_quota(Quota::per_second(2).unwrap()); // after the decision: not reported
    /// assert!(verdict.is_ok());
    /// assert_eq!(snaps.tightest().1, Snapshot::new(6, Duration::from_millis(400)));
    /// assert_eq!(limits.unwrap().quotas(), &[Quota::per_second(10).unwrap()]);
    /// ```
    fn decide_snapshots_limits(
        &self,
        key: &Self::Key,
        cost: u64,
    ) -> (Result<(), Refusal>, Snapshots, Option<Limits>) {
        let before = self.limits(key);
        let (verdict, snapshots) = self.decide_snapshots(key, cost);
        (verdict, snapshots, agreed(before, self.limits(key)))
    }

    /// [`decide_or_snapshots`](Limiter::decide_or_snapshots), with the quotas the refusal and
    /// its snapshots were made under, as
    /// [`decide_snapshots_limits`](Limiter::decide_snapshots_limits) gives them. Every tollgate
    /// limiter reads them only on refusal; the default reads [`limits`](Limiter::limits) before
    /// and after a refusal.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, Denied, Limiter, ManualClock, Quota, Snapshot};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// assert!(bucket.decide_or_snapshots_limits(&(), 10).is_ok());
    /// let (refusal, snaps, limits) = bucket.decide_or_snapshots_limits(&(), 1).unwrap_err();
    /// assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_millis(100)));
    /// assert_eq!(snaps.tightest().1, Snapshot::new(0, Duration::from_secs(1)));
    /// assert_eq!(limits.unwrap().quotas(), &[Quota::per_second(10).unwrap()]);
    /// ```
    // The snapshots and limits are a refusal's payload, built only on that path.
    #[allow(clippy::result_large_err, clippy::type_complexity)]
    fn decide_or_snapshots_limits(
        &self,
        key: &Self::Key,
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots, Option<Limits>)> {
        let before = self.limits(key);
        self.decide_or_snapshots(key, cost)
            .map_err(|(refusal, snapshots)| (refusal, snapshots, agreed(before, self.limits(key))))
    }

    /// The most quotas a decision of this limiter holds to (a keyed table: of any policy).
    fn max_quotas(&self) -> usize {
        1
    }
}

/// The limits read before and after a decision if they agree: a reconfiguration between them
/// could have been in force at the decision or not, so neither read describes it for sure.
fn agreed(before: Option<Limits>, after: Option<Limits>) -> Option<Limits> {
    before.filter(|b| after.as_ref() == Some(b))
}

/// A single quota's refusal, as a policy's: decided by quota 0.
#[inline]
pub(crate) fn one(denied: Denied) -> Refusal {
    Refusal::new(denied, 0)
}

/// Implements [`Limiter`] for a limiter of one quota from its `try_acquire`,
/// `try_acquire_or_snapshot`, `acquire_snapshot` (whatever the verdict), `quota`, and
/// `acquire_snapshot_quota` / `acquire_or_snapshot_quota` (the last two with the quota the
/// decision was made under).
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

            fn decide_snapshots_limits(
                &self,
                _: &(),
                cost: u64,
            ) -> (
                Result<(), crate::refusal::Refusal>,
                crate::multi::Snapshots,
                Option<crate::limits::Limits>,
            ) {
                let (verdict, snapshot, quota) = self.acquire_snapshot_quota(cost);
                (
                    verdict.map_err(crate::limiter::one),
                    crate::multi::Snapshots::one(snapshot),
                    Some(crate::limits::Limits::from(quota)),
                )
            }

            fn decide_or_snapshots_limits(
                &self,
                _: &(),
                cost: u64,
            ) -> Result<
                (),
                (crate::refusal::Refusal, crate::multi::Snapshots, Option<crate::limits::Limits>),
            > {
                self.acquire_or_snapshot_quota(cost).map_err(|(denied, snapshot, quota)| {
                    (
                        crate::limiter::one(denied),
                        crate::multi::Snapshots::one(snapshot),
                        Some(crate::limits::Limits::from(quota)),
                    )
                })
            }
        }
    };
}
pub(crate) use one_quota_limiter;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Bucket, ManualClock, Quota};
    use core::cell::Cell;

    /// A limiter written elsewhere, on the trait's defaults: a bucket whose quota is replaced
    /// right after a decision when `next` is set.
    struct Outside {
        bucket: Bucket<ManualClock>,
        next: Cell<Option<Quota>>,
    }

    impl Outside {
        fn then<R>(&self, r: R) -> R {
            if let Some(q) = self.next.take() {
                self.bucket.set_quota(q);
            }
            r
        }
    }

    impl Limiter for Outside {
        type Key = ();
        fn decide(&self, k: &(), cost: u64) -> Result<(), Refusal> {
            self.then(self.bucket.decide(k, cost))
        }
        fn decide_or_snapshots(&self, k: &(), cost: u64) -> Result<(), (Refusal, Snapshots)> {
            self.then(self.bucket.decide_or_snapshots(k, cost))
        }
        fn decide_snapshots(&self, k: &(), cost: u64) -> (Result<(), Refusal>, Snapshots) {
            self.then(self.bucket.decide_snapshots(k, cost))
        }
        fn limits(&self, k: &()) -> Option<Limits> {
            self.bucket.limits(k)
        }
    }

    /// The defaults report limits only when the reads around the decision agree: a
    /// reconfiguration in between leaves them unknown rather than paired with the wrong snapshot.
    #[test]
    fn the_defaults_report_no_limits_a_reconfiguration_straddles() {
        let (fast, slow) = (
            Quota::per_second(100).unwrap(),
            Quota::per_second(10).unwrap(),
        );
        let limiter = Outside {
            bucket: Bucket::with_clock(fast, ManualClock::new()),
            next: Cell::new(None),
        };
        let (_, _, limits) = limiter.decide_snapshots_limits(&(), 20);
        assert_eq!(limits, Some(Limits::from(fast)));
        limiter.next.set(Some(slow));
        let (verdict, snaps, limits) = limiter.decide_snapshots_limits(&(), 20);
        assert_eq!(
            (verdict, snaps.tightest().1.remaining(), limits),
            (Ok(()), 60, None)
        );
        let (_, _, limits) = limiter.decide_or_snapshots_limits(&(), 11).unwrap_err();
        assert_eq!(limits, Some(Limits::from(slow)));
        limiter.next.set(Some(fast));
        let (_, snaps, limits) = limiter.decide_or_snapshots_limits(&(), 11).unwrap_err();
        assert_eq!((snaps.tightest().1.remaining(), limits), (10, None));
    }
}
