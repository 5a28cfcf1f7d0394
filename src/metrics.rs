//! Metrics through the [`metrics`] facade (feature `metrics`): what each named limiter decided,
//! the waits it handed out, and how full a keyed table is.
//!
//! A limiter records once it has a name: [`Metered`] wraps any [`Limiter`](crate::Limiter);
//! [`KeyedLimiterBuilder::name`](crate::KeyedLimiterBuilder::name) names a keyed table (its
//! gauges too). tollgate-tower and tollgate-redis record the same series through
//! [`DecisionMetrics`].
//!
//! | series | kind | labels | what |
//! |---|---|---|---|
//! | `tollgate_decisions_total` | counter | `limiter`, `outcome` | one per decision: `admitted`, `refused`, `exceeds_burst`, `shadow_refused` |
//! | `tollgate_retry_after_seconds` | histogram | `limiter` | the wait each `refused` (or `shadow_refused` with a wait) caller was handed, but for "never" (below) |
//! | `tollgate_keys` | gauge | `limiter` | keys a keyed table tracks now |
//! | `tollgate_keys_capacity` | gauge | `limiter` | the most keys it tracks (`max_keys`) |
//! | `tollgate_evictions_total` | counter | `limiter` | full buckets evicted |
//! | `tollgate_table_full_total` | counter | `limiter`, `action` | new keys met a full table: `refused` or `admitted_untracked` (fail open) |
//! | `tollgate_policy_refusals_total` | counter | `limiter`, `quota` | a policy of several quotas: the refusals each quota decided (`quota` is its index) |
//!
//! Labels are names you give and fixed words, never a request's key: clients create no series.
//!
//! **"Never".** A refusal that no wait admits (`RetryAfter(Duration::MAX)`), or any wait beyond
//! the [`HORIZON`](crate::HORIZON), is counted but adds no histogram sample: its 1.8·10^19 s
//! would absorb every later wait in the exporter's `f64` sum. Such refusals are the `refused`
//! count less the histogram's. In shadow mode the difference also holds the would-be
//! `exceeds_burst` refusals (counted `shadow_refused`, with no wait to sample).
//!
//! **Cost.** Every handle is resolved once, when the limiter is named, from the recorder
//! installed *then* (install it first). A decision is then one counter increment, a virtual
//! call, with no lookup, allocation or lock; a refusal adds one histogram sample.
//!
//! **Shadow mode** ([`Metered::shadow`], [`KeyedLimiterBuilder::shadow`](crate::KeyedLimiterBuilder::shadow)):
//! the limiter decides and records as it would, but every decision returns `Ok`; what it would
//! have refused is counted `shadow_refused`, with its wait. A refusal writes no state, so
//! turning shadow off enforces from the state an enforcing limiter would have had. The series
//! that say *why* (`tollgate_table_full_total{action = "refused"}`,
//! `tollgate_policy_refusals_total`) count what enforcement would have done, with no shadow
//! label: alert on `outcome = "refused"` to tell real refusals from shadow ones.

use core::time::Duration;

use metrics::{Counter, Histogram, SharedString};

use crate::{Denied, Refusal};

mod metered;
mod policy;

pub use metered::Metered;
pub use policy::{PolicyMetrics, POLICY_REFUSALS};

/// The decisions counter: labels `limiter` and `outcome` ([`Outcome::as_str`]).
pub const DECISIONS: &str = "tollgate_decisions_total";
/// The histogram of the waits handed to refused callers, in seconds: label `limiter`. Waits
/// beyond the [`HORIZON`](crate::HORIZON) ("never") add no sample (see [the module](self)).
pub const RETRY_AFTER: &str = "tollgate_retry_after_seconds";
/// The keys a keyed table tracks (gauge): label `limiter`.
pub const KEYS: &str = "tollgate_keys";
/// The most keys a keyed table tracks (gauge): label `limiter`.
pub const KEYS_CAPACITY: &str = "tollgate_keys_capacity";
/// Full buckets a keyed table evicted (counter): label `limiter`.
pub const EVICTIONS: &str = "tollgate_evictions_total";
/// New keys that met a full keyed table (counter): labels `limiter` and `action`.
pub const TABLE_FULL: &str = "tollgate_table_full_total";

/// What a decision came to: the `outcome` label of [`DECISIONS`].
///
/// ```
/// use tollgate::metrics::Outcome;
/// assert_eq!(Outcome::ShadowRefused.as_str(), "shadow_refused");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted.
    Admitted,
    /// Refused with a wait ([`Denied::RetryAfter`]).
    Refused,
    /// Refused: the cost exceeds the burst ([`Denied::ExceedsBurst`]).
    ExceedsBurst,
    /// Would have been refused (either kind), admitted in shadow mode.
    ShadowRefused,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 4] = [
        Outcome::Admitted,
        Outcome::Refused,
        Outcome::ExceedsBurst,
        Outcome::ShadowRefused,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Refused => "refused",
            Outcome::ExceedsBurst => "exceeds_burst",
            Outcome::ShadowRefused => "shadow_refused",
        }
    }
}

/// The handles one named limiter records its decisions with: a counter per [`Outcome`] and the
/// [`RETRY_AFTER`] histogram, resolved once from the recorder installed when this is built.
/// The building block of [`Metered`] and the other crates' metrics; use it to record your own
/// limiter's decisions under the same series.
///
/// ```
/// use std::time::Duration;
/// use tollgate::metrics::DecisionMetrics;
/// use tollgate::Denied;
/// let metrics = DecisionMetrics::new("api");
/// metrics.record(&Ok(()));
/// metrics.record(&Err(Denied::RetryAfter(Duration::from_millis(250))));
/// // In shadow mode a refusal is counted `shadow_refused` and admitted.
/// assert_eq!(metrics.decide(true, Err(Denied::ExceedsBurst)), Ok(()));
/// ```
#[derive(Debug, Clone)]
pub struct DecisionMetrics {
    /// A counter per [`Outcome`], in [`Outcome::ALL`]'s order.
    outcomes: [Counter; 4],
    retry_after: Histogram,
}

impl DecisionMetrics {
    /// The handles for the limiter named `limiter` (the `limiter` label).
    pub fn new(limiter: impl Into<SharedString>) -> DecisionMetrics {
        let limiter: SharedString = limiter.into();
        DecisionMetrics {
            outcomes: Outcome::ALL.map(|o| metrics::counter!(DECISIONS, "limiter" => limiter.clone(), "outcome" => o.as_str())),
            retry_after: metrics::histogram!(RETRY_AFTER, "limiter" => limiter),
        }
    }

    /// Counts one decision `outcome`; for a refusal with a wait, also records `wait` (ignored
    /// otherwise) in the histogram, unless it is beyond the [`HORIZON`](crate::HORIZON) (see
    /// [the module](self)).
    #[inline]
    pub fn count(&self, outcome: Outcome, wait: Option<Duration>) {
        self.outcomes[outcome as usize].increment(1);
        if let (Outcome::Refused | Outcome::ShadowRefused, Some(wait)) = (outcome, wait) {
            if wait <= crate::HORIZON {
                self.retry_after.record(wait.as_secs_f64());
            }
        }
    }

    /// Records an enforced decision: `admitted`, `refused` (and its wait), or `exceeds_burst`.
    #[inline]
    pub fn record(&self, verdict: &Result<(), Denied>) {
        match verdict {
            Ok(()) => self.count(Outcome::Admitted, None),
            Err(Denied::RetryAfter(wait)) => self.count(Outcome::Refused, Some(*wait)),
            Err(Denied::ExceedsBurst) => self.count(Outcome::ExceedsBurst, None),
        }
    }

    /// Records a decision made in shadow mode: `admitted`, or `shadow_refused` (and its wait).
    #[inline]
    pub fn record_shadow(&self, verdict: &Result<(), Denied>) {
        match verdict {
            Ok(()) => self.count(Outcome::Admitted, None),
            Err(Denied::RetryAfter(wait)) => self.count(Outcome::ShadowRefused, Some(*wait)),
            Err(Denied::ExceedsBurst) => self.count(Outcome::ShadowRefused, None),
        }
    }

    /// [`record`](DecisionMetrics::record)s `verdict` and returns it, or in shadow mode
    /// [`record_shadow`](DecisionMetrics::record_shadow)s it and returns `Ok(())`.
    #[inline]
    pub fn decide(&self, shadow: bool, verdict: Result<(), Denied>) -> Result<(), Denied> {
        if shadow {
            self.record_shadow(&verdict);
            Ok(())
        } else {
            self.record(&verdict);
            verdict
        }
    }
}

/// A named limiter's decision handles: one quota's, or (`quotas > 0`) a policy's, which also
/// count each refusal by the quota that decided it.
#[derive(Debug)]
pub(crate) enum Handles {
    One(DecisionMetrics),
    Policy(PolicyMetrics),
}

impl Handles {
    pub(crate) fn new(name: impl Into<SharedString>, quotas: usize) -> Handles {
        if quotas == 0 {
            Handles::One(DecisionMetrics::new(name))
        } else {
            Handles::Policy(PolicyMetrics::new(name, quotas))
        }
    }

    /// Records `verdict`; returns what the caller gets (`Ok` in shadow mode).
    #[inline]
    pub(crate) fn decide(&self, shadow: bool, verdict: Result<(), Refusal>) -> Result<(), Refusal> {
        let denied = verdict.map_err(|r| r.denied());
        let given = match self {
            Handles::One(d) => d.decide(shadow, denied),
            Handles::Policy(p) => {
                p.decide(shadow, denied, verdict.err().map_or(0, |r| r.quota_index()))
            }
        };
        given.or(verdict)
    }

    pub(crate) fn decisions(&self) -> &DecisionMetrics {
        match self {
            Handles::One(d) => d,
            Handles::Policy(p) => p.decisions(),
        }
    }
}

/// A keyed table's gauges and table counters, resolved once like [`DecisionMetrics`].
#[cfg(feature = "keyed")]
#[derive(Debug)]
pub(crate) struct TableMetrics {
    /// Set under the table's mutex.
    pub(crate) keys: metrics::Gauge,
    pub(crate) evictions: Counter,
    /// New keys that met a full table: refused, admitted untracked (indexed by `admitted`).
    pub(crate) full: [Counter; 2],
}

#[cfg(feature = "keyed")]
impl TableMetrics {
    /// The handles for `limiter`; sets the capacity gauge to `capacity` once.
    pub(crate) fn new(limiter: SharedString, capacity: u64) -> TableMetrics {
        metrics::gauge!(KEYS_CAPACITY, "limiter" => limiter.clone()).set(capacity as f64);
        let full = |action: &'static str| metrics::counter!(TABLE_FULL, "limiter" => limiter.clone(), "action" => action);
        TableMetrics {
            keys: metrics::gauge!(KEYS, "limiter" => limiter.clone()),
            evictions: metrics::counter!(EVICTIONS, "limiter" => limiter.clone()),
            full: [full("refused"), full("admitted_untracked")],
        }
    }
}
