//! [`Backend`]: the one small trait between the layer and a limiter, and its impls for every
//! tollgate limiter, written once over [`tollgate::Limiter`] (the policy report of several
//! quotas in `multi.rs` here).

mod multi;

use core::future::{Future, Ready};
use core::hash::Hash;

use tollgate::{
    Bucket, Clock, Denied, KeyedLimiter, KeyedPolicy, Limiter, Limits, MultiBucket, Quota, Refusal,
    ShardedBucket, Smooth, Snapshot, Snapshots,
};

use crate::report::PolicyReport;

/// One rate-limit decision and what the response headers need to know about it, all from the
/// same decision (no second clock read).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, Snapshot};
/// use tollgate_tower::Decision;
/// let d = Decision::new(Ok(()), Some(Snapshot::new(4, Duration::from_secs(1))), Quota::per_second(5).ok());
/// assert!(d.verdict.is_ok());
/// ```
///
/// A decision over a policy of several quotas also carries every quota in
/// [`policy`](Decision::policy) (build it with [`Decision::with_policy`]); `snapshot` and
/// `quota` then describe the tightest quota, so code that reads only them stays right.
///
/// The struct is `#[non_exhaustive]`: build it with [`Decision::new`] or
/// [`Decision::with_policy`], match it with `..`, so that later fields break no outside code.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Admitted, or why not.
    pub verdict: Result<(), Denied>,
    /// The bucket right after the decision (`None` when the backend cannot tell, e.g. a Redis
    /// limiter that failed open or closed without an answer): feeds `RateLimit` / `X-RateLimit-*`.
    pub snapshot: Option<Snapshot>,
    /// The quota the decision was made under (`None` if unknown): feeds `RateLimit-Policy`.
    /// For a policy of several quotas, the tightest one (the one `snapshot` describes). The
    /// in-process backends read it with the decision, never after it: `snapshot` is always a
    /// snapshot of this quota (so `remaining <= burst`), even when a reconfiguration races the
    /// decision. A backend of your own should keep that pairing: see
    /// [`RateLimitHeaders`](crate::RateLimitHeaders).
    pub quota: Option<Quota>,
    /// Every quota of a policy, their snapshots when the store reports them, and the one that
    /// refused (`None` for a single limit, or when the backend cannot tell): one
    /// `RateLimit-Policy` item per quota.
    pub policy: Option<PolicyReport>,
}

impl Decision {
    /// A decision from its parts.
    ///
    /// ```
    /// use tollgate::Denied;
    /// use tollgate_tower::Decision;
    /// let d = Decision::new(Err(Denied::ExceedsBurst), None, None);
    /// assert_eq!(d.snapshot, None);
    /// ```
    pub const fn new(
        verdict: Result<(), Denied>,
        snapshot: Option<Snapshot>,
        quota: Option<Quota>,
    ) -> Decision {
        Decision {
            verdict,
            snapshot,
            quota,
            policy: None,
        }
    }

    /// A decision over a policy of several quotas: `snapshot` and `quota` are the
    /// [`tightest`](PolicyReport::tightest) quota's, `policy` the whole report.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Limiter, Limits, ManualClock, MultiBucket, Quota};
    /// use tollgate_tower::{Decision, PolicyReport};
    /// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
    /// let limits = Limits::new([Quota::per_second(5).unwrap(), per_minute]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// let (verdict, snaps) = policy.decide_snapshots(&(), 6);
    /// let refused = verdict.err().map(|r| r.quota_index());
    /// let report = PolicyReport::new(policy.limits().quotas(), snaps, refused).unwrap();
    /// let d = Decision::with_policy(verdict.map_err(Denied::from), report);
    /// assert_eq!(d.verdict, Err(Denied::ExceedsBurst));
    /// assert_eq!(d.policy.unwrap().refused(), Some(0)); // burst 5 < 6
    /// assert_eq!(d.quota, Some(Quota::per_second(5).unwrap())); // 5 left, the minute 20
    /// ```
    pub fn with_policy(verdict: Result<(), Denied>, policy: PolicyReport) -> Decision {
        let (_, quota, snapshot) = policy.tightest();
        Decision {
            verdict,
            snapshot: Some(snapshot),
            quota: Some(quota),
            policy: Some(policy),
        }
    }
}

/// A decision now (in-process limiters), or a future that yields it (a remote limiter).
///
/// The layer calls the inner service straight from `call` for [`Check::Ready`]; only
/// [`Check::Pending`] holds the request (and a clone of the inner service) until the decision.
#[derive(Debug)]
// `Ready` is the in-process hot path: boxing its decision would allocate on every request (the
// layer matches it in place instead).
#[allow(clippy::large_enum_variant)]
pub enum Check<F> {
    /// The decision is made.
    Ready(Decision),
    /// The decision comes from this future.
    Pending(F),
}

/// A limiter the layer can ask: "may a request with key `key` and cost `cost` pass?".
///
/// Implemented for every tollgate limiter through [`tollgate::Limiter`]: [`Bucket`],
/// [`ShardedBucket`], [`MultiBucket`] (a policy of several quotas, all or nothing) and
/// [`Smooth`] (one global limit: any key type, the key is ignored; Guava's "pay later", so a
/// request of any cost is admitted when it is free, see [`Cost`](crate::Cost)), [`KeyedLimiter<K>`]
/// (one limit, or one policy, per key of type `K`), a `tollgate::metrics::Metered` one of
/// those of one global limit (feature `metrics`), and, with the `redis` feature,
/// `tollgate_redis::RedisLimiter` (keys that implement `Display`). Implement it to plug in
/// your own limiter.
///
/// `report` says whether an *admitted* request's [`Decision`] must carry the quota (the layer
/// sends headers on admitted responses); a refusal always carries what the backend knows. The
/// verdict, the snapshots and the quotas always come from one decision (one clock reading, and
/// the quotas it was made under, whatever reconfiguration races it): the in-process limiters
/// use [`Limiter::decide_snapshots_limits`] when admitted responses carry headers, else
/// [`Limiter::decide_or_snapshots_limits`] (snapshots and quotas only on refusal). A policy of
/// several quotas reports each one ([`Decision::policy`]), `Retry-After` the slowest wait.
///
/// ```
/// use std::future::Ready;
/// use tollgate::{Bucket, ManualClock, Quota};
/// use tollgate_tower::{Backend, Check, Decision};
///
/// /// Admits everything, reports nothing.
/// struct Open;
/// impl<K> Backend<K> for Open {
///     type Future = Ready<Decision>;
///     fn check(&self, _key: K, _cost: u64, _report: bool) -> Check<Self::Future> {
///         Check::Ready(Decision::new(Ok(()), None, None))
///     }
/// }
///
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
/// let Check::Ready(first) = Backend::<()>::check(&bucket, (), 1, false) else { unreachable!() };
/// assert_eq!((first.verdict, first.quota), (Ok(()), None)); // no headers wanted: no quota read
/// let Check::Ready(second) = Backend::<()>::check(&bucket, (), 1, false) else { unreachable!() };
/// assert!(second.verdict.is_err());
/// assert_eq!(second.snapshot.map(|s| s.remaining()), Some(0)); // from the same decision
/// assert_eq!(second.quota, Some(Quota::per_second(1).unwrap())); // refusals always report
/// assert!(matches!(Open.check("any", 1, true), Check::Ready(d) if d.verdict.is_ok()));
/// ```
pub trait Backend<K> {
    /// The future of an asynchronous decision (`Ready<Decision>` for in-process limiters, which
    /// never return [`Check::Pending`]).
    type Future: Future<Output = Decision>;

    /// Decides for one request. Must not block.
    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future>;
}

/// The decision of an in-process limiter for `key`, with its snapshots and quotas (all of
/// them for a policy of several) as `report` asks. The quotas come with the decision
/// ([`Limiter::decide_snapshots_limits`]), never from a later read: a reconfiguration racing
/// the decision cannot pair its snapshots with another quota.
#[inline]
fn decide<L: Limiter + ?Sized>(limiter: &L, key: &L::Key, cost: u64, report: bool) -> Decision {
    if report {
        let (verdict, snapshots, limits) = limiter.decide_snapshots_limits(key, cost);
        reported(verdict, snapshots, limits)
    } else {
        // No headers on admitted responses: an admission computes no snapshot.
        match limiter.decide_or_snapshots_limits(key, cost) {
            Ok(()) => Decision::new(Ok(()), None, None),
            Err((refusal, snapshots, limits)) => reported(Err(refusal), snapshots, limits),
        }
    }
}

/// A decision with what the headers need: the quota and snapshot of a single quota, the whole
/// policy report of several. `limits` are those the decision was made under (`None`: no quota,
/// or none tied to the decision: the snapshot alone, which the headers do not describe
/// without its quota).
fn reported(
    verdict: Result<(), Refusal>,
    snapshots: Snapshots,
    limits: Option<Limits>,
) -> Decision {
    match limits {
        Some(limits) if limits.quotas().len() > 1 => {
            multi::policy_decision(&limits, verdict, snapshots)
        }
        limits => Decision::new(
            verdict.map_err(Denied::from),
            Some(snapshots.tightest().1),
            limits.map(|l| l.quotas()[0]),
        ),
    }
}

/// The limiters of one global limit: the key is ignored.
macro_rules! global_backend {
    ($($limiter:ident),*) => {$(
        impl<K, C: Clock> Backend<K> for $limiter<C> {
            type Future = Ready<Decision>;

            #[inline]
            fn check(&self, _key: K, cost: u64, report: bool) -> Check<Self::Future> {
                Check::Ready(decide(self, &(), cost, report))
            }
        }
    )*};
}

global_backend!(Bucket, ShardedBucket, MultiBucket, Smooth);

/// One limit, or one policy of several quotas, per key.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
/// use tollgate_tower::{Backend, Check};
/// let per_minute = Quota::new(3, Duration::from_secs(60), 3).unwrap();
/// let limits = Limits::new([Quota::per_second(2).unwrap(), per_minute]).unwrap();
/// let per_key = KeyedMultiLimiter::with_clock(limits, 100, ManualClock::new());
/// for _ in 0..2 {
///     assert!(matches!(per_key.check("alice", 1, false), Check::Ready(d) if d.verdict.is_ok()));
/// }
/// let Check::Ready(refused) = per_key.check("alice", 2, false) else { unreachable!() };
/// assert_eq!(refused.verdict, Err(Denied::RetryAfter(Duration::from_secs(20))));
/// assert_eq!(refused.policy.unwrap().refused(), Some(1)); // the minute waits longest
/// assert!(matches!(per_key.check("bob", 2, true), Check::Ready(d) if d.verdict.is_ok()));
/// ```
impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> Backend<K> for KeyedLimiter<K, P, C> {
    type Future = Ready<Decision>;

    #[inline]
    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future> {
        Check::Ready(decide(self, &key, cost, report))
    }
}

/// A named limiter (tollgate's feature `metrics`): its decisions are recorded, and admitted in
/// shadow mode. A key of any type for a limiter of one global limit.
#[cfg(feature = "metrics")]
impl<K, L: Limiter<Key = ()>> Backend<K> for tollgate::metrics::Metered<L> {
    type Future = Ready<Decision>;

    #[inline]
    fn check(&self, _key: K, cost: u64, report: bool) -> Check<Self::Future> {
        Check::Ready(decide(self, &(), cost, report))
    }
}

impl<K, B: Backend<K> + ?Sized> Backend<K> for std::sync::Arc<B> {
    type Future = B::Future;

    #[inline]
    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future> {
        (**self).check(key, cost, report)
    }
}

/// `tollgate_redis::RedisLimiter` (feature `redis`): one limit per key shared by every server
/// on the same Redis. Keys are formatted with `Display` (`IpAddr`, `String`, [`Global`]
/// displays as `global`). The decision is asynchronous: the layer holds the request until Redis
/// (or the limiter's unavailability policy) answers. The headers report the quota of the bucket
/// that decided (the local fallback's share while Redis is unavailable); no snapshot and no
/// policy when no bucket decided (fail open or closed). A key under a policy of several quotas
/// (`RedisLimiterBuilder::limits`) lists every quota in `RateLimit-Policy`; Redis answers with
/// the tightest quota's snapshot alone, so the [`PolicyReport`] is
/// [`tightest_only`](PolicyReport::tightest_only) and names no refusing quota. The
/// feature needs Rust 1.88 (redis-rs).
///
/// [`Global`]: crate::Global
#[cfg(feature = "redis")]
impl<K: core::fmt::Display> Backend<K> for tollgate_redis::RedisLimiter {
    type Future = core::pin::Pin<Box<dyn Future<Output = Decision> + Send>>;

    fn check(&self, key: K, cost: u64, _report: bool) -> Check<Self::Future> {
        // One round trip either way: always ask for the snapshot.
        let limiter = self.clone();
        let key = key.to_string();
        Check::Pending(Box::pin(async move {
            // The quota of the bucket that decided: while Redis is unavailable, the local
            // fallback's share, whose burst is smaller than the Redis quota's.
            let o = limiter.try_acquire_outcome(&key, cost).await;
            multi::redis_decision(&limiter, &key, o)
        }))
    }
}

#[cfg(test)]
mod tests;
