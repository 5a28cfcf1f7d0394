//! The decisions of policies of several quotas: a [`MultiBucket`](tollgate::MultiBucket) or a
//! keyed table's policies (the in-process backends, `backend.rs`), and a Redis policy's.
//!
//! A policy decides every quota at one clock reading and debits all or none, so a request the
//! second quota refuses spends nothing from the first (two stacked layers would spend it). The
//! decision carries a [`PolicyReport`]: one `RateLimit-Policy` item per quota, `RateLimit` for
//! the tightest, `Retry-After` the slowest wait (the policy's `Denied::RetryAfter` already is).

use tollgate::{Denied, Limits, Refusal, Snapshots};

use super::Decision;
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
