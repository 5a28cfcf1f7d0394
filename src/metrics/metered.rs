//! [`Metered`]: any limiter with a name, recording its decisions, optionally in shadow mode.

use metrics::SharedString;

use super::{DecisionMetrics, Handles};
use crate::{Denied, Limiter, Limits, Refusal, Snapshot, Snapshots};

/// Any [`Limiter`] with a name, whose every decision is recorded under
/// `tollgate_decisions_total{limiter = name}` (see [the module](crate::metrics)), and for a
/// limiter of several quotas each refusal also by the quota that refused. In
/// [shadow mode](Metered::shadow) every decision is admitted after being recorded. A keyed
/// table's gauges come from naming it with its builder's `name` instead.
///
/// Only the decisions made through `Metered` record (its `try_acquire`,
/// `try_acquire_or_snapshot` and the [`Limiter`] methods), not the waiting paths; reach the
/// limiter itself with [`get_ref`](Metered::get_ref).
///
/// ```
/// use std::time::Duration;
/// use tollgate::metrics::Metered;
/// use tollgate::{Bucket, Denied, KeyedLimiter, Limiter, ManualClock, Quota};
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
///
/// // Any limiter: a keyed table through the `Limiter` trait.
/// let tenants = KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
/// let tenants = Metered::new("tenants", tenants);
/// assert!(tenants.decide(&"acme", 1).is_ok());
/// assert!(tenants.decide(&"acme", 1).is_err());
/// ```
#[derive(Debug)]
pub struct Metered<L> {
    limiter: L,
    handles: Handles,
    shadow: bool,
}

impl<L: Limiter> Metered<L> {
    /// `limiter`, recording under the name `name` (resolved now, from the installed recorder).
    pub fn new(name: impl Into<SharedString>, limiter: L) -> Metered<L> {
        let quotas = limiter.max_quotas();
        Metered {
            handles: Handles::new(name, if quotas > 1 { quotas } else { 0 }),
            limiter,
            shadow: false,
        }
    }

    /// Records `verdict`; returns what the caller gets (`Ok` in shadow mode).
    #[inline]
    fn record(&self, verdict: Result<(), Refusal>) -> Result<(), Refusal> {
        self.handles.decide(self.shadow, verdict)
    }
}

impl<L> Metered<L> {
    /// Shadow mode on or off: on, each decision is made and recorded, then admitted.
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
        self.handles.decisions()
    }
}

impl<L: Limiter<Key = ()>> Metered<L> {
    /// The limiter's `try_acquire`, recorded (and admitted in shadow mode).
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.decide(&(), cost).map_err(Denied::from)
    }

    /// The limiter's `try_acquire_or_snapshot`, recorded (admitted in shadow mode).
    #[inline]
    pub fn try_acquire_or_snapshot(&self, cost: u64) -> Result<(), (Denied, Snapshot)> {
        self.decide_or_snapshots(&(), cost)
            .map_err(|(refusal, snaps)| (refusal.denied(), snaps.tightest().1))
    }

    /// The decision and the tightest snapshot, whatever the verdict, recorded.
    #[deprecated(note = "use `Limiter::decide_snapshots(&metered, &(), cost)`, or \
                         `try_acquire_or_snapshot` for the snapshot on refusal")]
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let (verdict, snapshots) = self.decide_snapshots(&(), cost);
        (verdict.map_err(Denied::from), snapshots.tightest().1)
    }
}

/// The limiter's decisions, recorded (and admitted in shadow mode).
impl<L: Limiter> Limiter for Metered<L> {
    type Key = L::Key;

    #[inline]
    fn decide(&self, key: &L::Key, cost: u64) -> Result<(), Refusal> {
        self.record(self.limiter.decide(key, cost))
    }

    fn decide_or_snapshots(&self, key: &L::Key, cost: u64) -> Result<(), (Refusal, Snapshots)> {
        match self.limiter.decide_or_snapshots(key, cost) {
            // An admission is recorded as one, and stays one.
            Ok(()) => {
                let _ = self.record(Ok(()));
                Ok(())
            }
            Err((refusal, snaps)) => self.record(Err(refusal)).map_err(|r| (r, snaps)),
        }
    }

    fn decide_snapshots(&self, key: &L::Key, cost: u64) -> (Result<(), Refusal>, Snapshots) {
        let (verdict, snaps) = self.limiter.decide_snapshots(key, cost);
        (self.record(verdict), snaps)
    }

    fn limits(&self, key: &L::Key) -> Option<Limits> {
        self.limiter.limits(key)
    }

    fn decide_snapshots_limits(
        &self,
        key: &L::Key,
        cost: u64,
    ) -> (Result<(), Refusal>, Snapshots, Option<Limits>) {
        let (verdict, snaps, limits) = self.limiter.decide_snapshots_limits(key, cost);
        (self.record(verdict), snaps, limits)
    }

    fn decide_or_snapshots_limits(
        &self,
        key: &L::Key,
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots, Option<Limits>)> {
        match self.limiter.decide_or_snapshots_limits(key, cost) {
            // An admission is recorded as one, and stays one.
            Ok(()) => {
                let _ = self.record(Ok(()));
                Ok(())
            }
            Err((refusal, snaps, limits)) => {
                self.record(Err(refusal)).map_err(|r| (r, snaps, limits))
            }
        }
    }

    fn max_quotas(&self) -> usize {
        self.limiter.max_quotas()
    }
}
