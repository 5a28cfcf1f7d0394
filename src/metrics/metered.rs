//! [`Metered`]: a named limiter that records its decisions, optionally in shadow mode.

use metrics::SharedString;

use super::DecisionMetrics;
use crate::{Bucket, Clock, Denied, ShardedBucket, Snapshot};

/// A [`Bucket`] or [`ShardedBucket`] with a name: every `try_acquire*` decision is recorded
/// under `tollgate_decisions_total{limiter = name}` (see [the module](crate::metrics)), and in
/// [shadow mode](Metered::shadow) every decision is admitted after being recorded.
///
/// Only the methods of `Metered` record: reach the limiter itself with
/// [`get_ref`](Metered::get_ref) for reads (`available`, `quota`) or reconfiguration. The
/// waiting paths (`acquire`, `reserve`, `until_ready`) are not metered.
///
/// ```
/// use std::time::Duration;
/// use tollgate::metrics::Metered;
/// use tollgate::{Bucket, Denied, ManualClock, Quota};
///
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
/// let api = Metered::new("api", bucket);
/// assert_eq!(api.try_acquire(1), Ok(()));
/// assert_eq!(api.try_acquire(1), Err(Denied::RetryAfter(Duration::from_secs(1))));
///
/// // Shadow mode: the same decision, recorded as `shadow_refused`, and admitted.
/// let api = api.shadow(true);
/// assert_eq!(api.try_acquire(1), Ok(()));
/// assert_eq!(api.get_ref().available(), 0); // the refusal wrote nothing
/// ```
#[derive(Debug)]
pub struct Metered<L> {
    limiter: L,
    metrics: DecisionMetrics,
    shadow: bool,
}

impl<L> Metered<L> {
    /// `limiter`, recording under the name `name` (resolved now, from the installed recorder).
    pub fn new(name: impl Into<SharedString>, limiter: L) -> Metered<L> {
        Metered {
            limiter,
            metrics: DecisionMetrics::new(name),
            shadow: false,
        }
    }

    /// Shadow mode on or off: on, each decision is made and recorded as usual and then admitted
    /// (`shadow_refused` for what would have been refused, with its wait).
    pub fn shadow(self, on: bool) -> Metered<L> {
        Metered { shadow: on, ..self }
    }

    /// Whether shadow mode is on.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The limiter.
    pub fn get_ref(&self) -> &L {
        &self.limiter
    }

    /// The limiter, without its name.
    pub fn into_inner(self) -> L {
        self.limiter
    }

    /// The handles decisions are recorded with.
    pub fn metrics(&self) -> &DecisionMetrics {
        &self.metrics
    }
}

macro_rules! metered {
    ($limiter:ident) => {
        impl<C: Clock> Metered<$limiter<C>> {
            /// The limiter's `try_acquire`, recorded (and admitted in shadow mode).
            #[inline]
            pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
                self.metrics
                    .decide(self.shadow, self.limiter.try_acquire(cost))
            }

            /// The limiter's `try_acquire_snapshot`, recorded (the verdict admitted in shadow
            /// mode; the snapshot is the decision's, a refusal's in that case).
            #[inline]
            pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
                let (verdict, snapshot) = self.limiter.try_acquire_snapshot(cost);
                (self.metrics.decide(self.shadow, verdict), snapshot)
            }
        }
    };
}

metered!(Bucket);
metered!(ShardedBucket);
