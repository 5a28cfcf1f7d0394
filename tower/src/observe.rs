//! What the layer records about its decisions, and shadow mode: the layer's one hook
//! ([`Observe::admit`]) decides whether a decision lets the request through.

use crate::Decision;

/// A layer's name (feature `metrics`) and shadow flag, shared by its services and futures.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observe {
    /// Admit every request; record what would have been refused.
    pub(crate) shadow: bool,
    /// The layer's handles, resolved once when it was named.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<tollgate::metrics::DecisionMetrics>,
    /// The layer's name and, resolved at the first refusal by a policy of several quotas (a
    /// single-quota backend never registers them), the per-quota refusal counters.
    #[cfg(feature = "metrics")]
    pub(crate) by_quota: Option<ByQuota>,
}

/// `tollgate_policy_refusals_total{limiter, quota}`: which quota of a policy refused.
///
/// A series exists only for a quota some refusing policy has: each counter is resolved the
/// first time a policy that holds its quota refuses, so a policy of two quotas shows
/// `quota="0"` and `quota="1"`, never a `quota="2"` or `"3"` that would read as quotas the
/// policy does not have (a keyed table's policies may differ in length: the longest that
/// refused sets how many).
#[cfg(feature = "metrics")]
#[derive(Clone, Debug)]
pub(crate) struct ByQuota {
    name: metrics::SharedString,
    counters: [std::sync::OnceLock<metrics::Counter>; 4],
}

#[cfg(feature = "metrics")]
impl ByQuota {
    pub(crate) fn new(name: metrics::SharedString) -> ByQuota {
        ByQuota {
            name,
            counters: Default::default(),
        }
    }

    /// The counter of quota `index` (0 to 3), resolved on first use.
    fn counter(&self, index: usize) -> &metrics::Counter {
        const LABELS: [&str; 4] = ["0", "1", "2", "3"];
        self.counters[index].get_or_init(|| {
            metrics::counter!(
                tollgate::metrics::POLICY_REFUSALS,
                "limiter" => self.name.clone(),
                "quota" => LABELS[index]
            )
        })
    }

    #[cold]
    fn refused(&self, decision: &Decision) {
        let Some(report) = decision.policy.as_ref() else {
            return;
        };
        let Some(index) = report.refused() else {
            return;
        };
        // Every quota of the policy gets its series (at 0 until it refuses), none beyond it.
        let len = report.len().min(self.counters.len());
        for i in 0..len {
            self.counter(i);
        }
        self.counter(index.min(len - 1)).increment(1);
    }
}

impl Observe {
    /// Records `verdict` and says whether the request goes on to the inner service: an
    /// admission, or any refusal in shadow mode. A refusal in shadow mode wrote nothing in the
    /// backend (no tollgate limiter writes on a refusal), so turning shadow off later enforces
    /// from the state an enforcing layer would have reached.
    /// An enforced refusal by a policy also counts against the quota that refused.
    #[inline]
    pub(crate) fn admit(&self, decision: &Decision) -> bool {
        let verdict = &decision.verdict;
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.metrics {
            if self.shadow {
                metrics.record_shadow(verdict);
            } else {
                metrics.record(verdict);
                if let (Err(_), Some(by_quota)) = (verdict, &self.by_quota) {
                    by_quota.refused(decision);
                }
            }
        }
        verdict.is_ok() || self.shadow
    }
}
