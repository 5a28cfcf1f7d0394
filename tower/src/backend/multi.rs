//! [`Backend`] for policies of several quotas: [`MultiBucket`] (one policy for everything), and
//! the policy report of a Redis policy's decision.
//!
//! A policy decides every quota at one clock reading and debits all or none, so a request the
//! second quota refuses spends nothing from the first (two stacked layers would spend it). The
//! decision carries a [`PolicyReport`]: one `RateLimit-Policy` item per quota, `RateLimit` for
//! the tightest, `Retry-After` the slowest wait (the policy's `Denied::RetryAfter` already is).

use core::future::Ready;

use tollgate::{Clock, Denied, Limits, MultiBucket, Refusal, Snapshots};

use super::{Backend, Check, Decision};
use crate::report::PolicyReport;

/// The decision of a policy over `limits` with its snapshots, from one decision.
pub(crate) fn policy_decision(
    limits: &Limits,
    verdict: Result<(), Refusal>,
    snapshots: Snapshots,
) -> Decision {
    let refused = verdict.err().map(|r| r.quota_index());
    let verdict = verdict.map_err(Denied::from);
    match PolicyReport::new(limits.quotas(), snapshots, refused) {
        Some(report) => Decision::with_policy(verdict, report),
        // Unreachable for the core's policies (one snapshot per quota, the refusing index
        // among them); a verdict without headers rather than a panic.
        None => Decision::new(verdict, None, None),
    }
}

/// One policy for everything: the key is ignored.
///
/// As for [`Bucket`](tollgate::Bucket): `try_acquire_snapshots` when admitted responses carry
/// headers, else `try_acquire_or_snapshots` (the snapshots only on refusal, from the refusal's
/// own reading).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
/// use tollgate_tower::{Backend, Check};
/// let per_minute = Quota::new(3, Duration::from_secs(60), 3).unwrap();
/// let limits = Limits::new([Quota::per_second(2).unwrap(), per_minute]).unwrap();
/// let policy = MultiBucket::with_clock(limits, ManualClock::new());
/// for _ in 0..2 {
///     assert!(matches!(Backend::<()>::check(&policy, (), 1, false), Check::Ready(d) if d.verdict.is_ok()));
/// }
/// let Check::Ready(refused) = Backend::<()>::check(&policy, (), 2, false) else { unreachable!() };
/// // The second holds 0 tokens (500 ms for one, 1 s for two), the minute 1 (20 s for one more).
/// assert_eq!(refused.verdict, Err(Denied::RetryAfter(Duration::from_secs(20))));
/// let report = refused.policy.unwrap();
/// assert_eq!(report.refused(), Some(1)); // the minute waits longest
/// assert_eq!(refused.quota, Some(Quota::per_second(2).unwrap())); // the tightest: 0 left
/// ```
impl<K, C: Clock> Backend<K> for MultiBucket<C> {
    type Future = Ready<Decision>;

    #[inline]
    fn check(&self, _key: K, cost: u64, report: bool) -> Check<Self::Future> {
        Check::Ready(if report {
            let (verdict, snapshots) = self.try_acquire_snapshots(cost);
            policy_decision(self.limits(), verdict, snapshots)
        } else {
            // No headers on admitted responses: an admission computes no snapshot.
            match self.try_acquire_or_snapshots(cost) {
                Ok(()) => Decision::new(Ok(()), None, None),
                Err((refusal, snapshots)) => {
                    policy_decision(self.limits(), Err(refusal), snapshots)
                }
            }
        })
    }
}

/// The decision of a Redis limiter's `outcome` for `key`: with a policy report when the key is
/// under a policy of several quotas and a bucket answered (Redis says which quota is the
/// tightest, by its quota, and nothing of the others' snapshots or of which one refused).
#[cfg(feature = "redis")]
pub(crate) fn redis_decision(
    limiter: &tollgate_redis::RedisLimiter,
    key: &str,
    outcome: tollgate_redis::Outcome,
) -> Decision {
    let decision = Decision::new(outcome.verdict, outcome.snapshot, outcome.quota);
    let (Some(snapshot), Some(quota)) = (outcome.snapshot, outcome.quota) else {
        return decision;
    };
    let limits = limiter.limits_for(key);
    let quotas = limits.quotas();
    let report = quotas
        .iter()
        .position(|q| *q == quota)
        .filter(|_| quotas.len() > 1)
        .and_then(|tightest| PolicyReport::tightest_only(quotas, tightest, snapshot, None));
    Decision {
        policy: report,
        ..decision
    }
}
