//! What the layer records about its decisions, and shadow mode: the layer's one hook
//! ([`Observe::admit`]) decides whether a decision lets the request through.

use tollgate::Denied;

/// A layer's name (feature `metrics`) and shadow flag, shared by its services and futures.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observe {
    /// Admit every request; record what would have been refused.
    pub(crate) shadow: bool,
    /// The layer's handles, resolved once when it was named.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<tollgate::metrics::DecisionMetrics>,
}

impl Observe {
    /// Records `verdict` and says whether the request goes on to the inner service: an
    /// admission, or any refusal in shadow mode. A refusal in shadow mode wrote nothing in the
    /// backend (no tollgate limiter writes on a refusal), so turning shadow off later enforces
    /// from the state an enforcing layer would have reached.
    #[inline]
    pub(crate) fn admit(&self, verdict: &Result<(), Denied>) -> bool {
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.metrics {
            if self.shadow {
                metrics.record_shadow(verdict);
            } else {
                metrics.record(verdict);
            }
        }
        verdict.is_ok() || self.shadow
    }
}
