//! [`PolicyMetrics`]: a policy of several quotas records which quota refused.

use alloc::boxed::Box;

use metrics::{Counter, SharedString};

use super::DecisionMetrics;
use crate::Denied;

/// The refusals of a policy of several quotas, by the quota that decided them: labels
/// `limiter` and `quota` (the quota's index, `"0"` for the first, in the policy's order).
pub const POLICY_REFUSALS: &str = "tollgate_policy_refusals_total";

/// The label values of [`POLICY_REFUSALS`]' `quota`.
const QUOTA_LABELS: [&str; 4] = ["0", "1", "2", "3"];

/// [`DecisionMetrics`] for a policy of up to four quotas, plus a refusal counter per quota
/// ([`POLICY_REFUSALS`]): "which limit fired".
///
/// ```
/// use std::time::Duration;
/// use tollgate::metrics::PolicyMetrics;
/// use tollgate::Denied;
/// let metrics = PolicyMetrics::new("api", 2);
/// metrics.record(&Ok(()), 0);
/// // The per-minute quota (index 1) refused.
/// metrics.record(&Err(Denied::RetryAfter(Duration::from_secs(30))), 1);
/// assert_eq!(metrics.decide(true, Err(Denied::ExceedsBurst), 0), Ok(()));
/// ```
#[derive(Debug, Clone)]
pub struct PolicyMetrics {
    decisions: DecisionMetrics,
    by_quota: Box<[Counter]>,
}

impl PolicyMetrics {
    /// The handles for the policy `limiter` of `quotas` quotas (clamped to 1..=4).
    pub fn new(limiter: impl Into<SharedString>, quotas: usize) -> PolicyMetrics {
        let limiter: SharedString = limiter.into();
        let by_quota = QUOTA_LABELS[..quotas.clamp(1, QUOTA_LABELS.len())]
            .iter()
            .map(
                |q| metrics::counter!(POLICY_REFUSALS, "limiter" => limiter.clone(), "quota" => *q),
            )
            .collect();
        PolicyMetrics {
            decisions: DecisionMetrics::new(limiter),
            by_quota,
        }
    }

    /// Records an enforced decision, a refusal also against quota `quota_index` (or the last).
    #[inline]
    pub fn record(&self, verdict: &Result<(), Denied>, quota_index: usize) {
        self.decisions.record(verdict);
        self.refused_by(verdict, quota_index);
    }

    /// [`DecisionMetrics::decide`], a refusal also against quota `quota_index`.
    #[inline]
    pub fn decide(
        &self,
        shadow: bool,
        verdict: Result<(), Denied>,
        quota_index: usize,
    ) -> Result<(), Denied> {
        self.refused_by(&verdict, quota_index);
        self.decisions.decide(shadow, verdict)
    }

    /// The decision handles.
    pub fn decisions(&self) -> &DecisionMetrics {
        &self.decisions
    }

    #[inline]
    fn refused_by(&self, verdict: &Result<(), Denied>, quota_index: usize) {
        if verdict.is_err() {
            let last = self.by_quota.len() - 1;
            self.by_quota[quota_index.min(last)].increment(1);
        }
    }
}
