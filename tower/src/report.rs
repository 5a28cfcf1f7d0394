//! [`PolicyReport`]: every quota of a policy as one decision left it, for the headers that list
//! them and for metrics that name the quota that refused.

use tollgate::{Quota, Snapshot, Snapshots};

/// The most quotas a policy holds (as `tollgate::Limits`).
const MAX_QUOTAS: usize = 4;

/// Every quota of a policy (one to four, as `tollgate::Limits`) with its snapshot right after
/// one decision, and the index of the quota that refused, if one did.
///
/// The layer writes one `RateLimit-Policy` item per quota and describes the
/// [`tightest`](PolicyReport::tightest) quota in `RateLimit`. Backends over a policy
/// (`tollgate::MultiBucket`, yours) carry it in [`Decision::policy`](crate::Decision::policy);
/// see [`Decision::with_policy`](crate::Decision::with_policy).
///
/// The snapshots are the core's [`Snapshots`]: from the decision's own clock reading and
/// states, never a second reading.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, Snapshot, Snapshots};
/// use tollgate_tower::PolicyReport;
/// let per_second = Quota::per_second(5).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let snaps = Snapshots::new(&[
///     Snapshot::new(0, Duration::from_secs(1)),
///     Snapshot::new(15, Duration::from_secs(15)),
/// ]).unwrap();
/// let report = PolicyReport::new(&[per_second, per_minute], snaps, Some(0)).unwrap();
/// assert_eq!(report.quotas(), &[per_second, per_minute]);
/// assert_eq!(report.refused(), Some(0)); // the per-second quota fired
/// assert_eq!(report.tightest().0, 0);
/// // Lengths that disagree, or a refusing index past the end: no report.
/// assert!(PolicyReport::new(&[per_second], snaps, None).is_none());
/// assert!(PolicyReport::new(&[per_second, per_minute], snaps, Some(2)).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyReport {
    /// `quotas[..snapshots.len()]` are the policy's; the rest repeat `quotas[0]`, so that the
    /// derived equality compares only what a report holds.
    quotas: [Quota; MAX_QUOTAS],
    snapshots: Snapshots,
    refused: Option<usize>,
}

impl PolicyReport {
    /// A report of `quotas` (in the policy's order), their `snapshots` (one per quota, in the
    /// same order) and the index of the quota that refused (`None` for an admission). `None`
    /// if the lengths differ or `refused` is not an index of `quotas`.
    pub fn new(
        quotas: &[Quota],
        snapshots: Snapshots,
        refused: Option<usize>,
    ) -> Option<PolicyReport> {
        let len = snapshots.len();
        if quotas.len() != len || refused.is_some_and(|i| i >= len) {
            return None;
        }
        let mut all = [quotas[0]; MAX_QUOTAS];
        all[..len].copy_from_slice(quotas);
        Some(PolicyReport {
            quotas: all,
            snapshots,
            refused,
        })
    }

    /// The quotas, in the policy's order.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let q = Quota::per_second(5).unwrap();
    /// let s = Snapshots::new(&[Snapshot::new(5, Duration::ZERO)]).unwrap();
    /// assert_eq!(PolicyReport::new(&[q], s, None).unwrap().quotas(), &[q]);
    /// ```
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas[..self.snapshots.len()]
    }

    /// One snapshot per quota, in the policy's order.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let q = Quota::per_second(5).unwrap();
    /// let one = Snapshot::new(5, Duration::ZERO);
    /// let s = Snapshots::new(&[one]).unwrap();
    /// assert_eq!(PolicyReport::new(&[q], s, None).unwrap().snapshots(), &[one]);
    /// ```
    pub fn snapshots(&self) -> &[Snapshot] {
        self.snapshots.as_slice()
    }

    /// How many quotas (1 to 4).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let q = Quota::per_second(5).unwrap();
    /// let one = Snapshot::new(5, Duration::ZERO);
    /// let s = Snapshots::new(&[one, one]).unwrap();
    /// assert_eq!(PolicyReport::new(&[q, q], s, None).unwrap().len(), 2);
    /// ```
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.snapshots.len()
    }

    /// The index of the quota that refused (the one that waits longest, or for
    /// `Denied::ExceedsBurst` the one with the smallest burst, as `tollgate::Refusal` says);
    /// `None` for an admission.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let q = Quota::per_second(5).unwrap();
    /// let one = Snapshot::new(0, Duration::from_secs(1));
    /// let s = Snapshots::new(&[one, one]).unwrap();
    /// assert_eq!(PolicyReport::new(&[q, q], s, Some(1)).unwrap().refused(), Some(1));
    /// ```
    pub fn refused(&self) -> Option<usize> {
        self.refused
    }

    /// The tightest quota — the fewest remaining tokens, ties broken by the one full last, then
    /// by the first index (`Snapshots::tightest`) — with its index and snapshot: the one
    /// `RateLimit` describes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let (a, b) = (Quota::per_second(2).unwrap(), Quota::new(2, Duration::from_secs(60), 2).unwrap());
    /// let snaps = Snapshots::new(&[
    ///     Snapshot::new(1, Duration::from_millis(500)),
    ///     Snapshot::new(1, Duration::from_secs(30)),
    /// ]).unwrap();
    /// let report = PolicyReport::new(&[a, b], snaps, None).unwrap();
    /// assert_eq!(report.tightest(), (1, b, Snapshot::new(1, Duration::from_secs(30))));
    /// ```
    pub fn tightest(&self) -> (usize, Quota, Snapshot) {
        let (i, snapshot) = self.snapshots.tightest();
        (i, self.quotas[i], snapshot)
    }
}
