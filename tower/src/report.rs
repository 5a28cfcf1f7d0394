//! [`PolicyReport`]: every quota of a policy as one decision left it, for the headers that list
//! them and for metrics that name the quota that refused.

use tollgate::{Quota, Snapshot, Snapshots};

/// The most quotas a policy holds (as `tollgate::Limits`).
const MAX_QUOTAS: usize = 4;

/// Every quota of a policy (one to four, as `tollgate::Limits`) with its snapshot right after
/// one decision, and the index of the quota that refused, if one did. A store that reports only
/// the tightest quota's snapshot (a Redis policy) builds it with
/// [`tightest_only`](PolicyReport::tightest_only): the list of quotas is still complete.
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
/// assert_eq!(report.snapshots(), Some(snaps.as_slice()));
/// assert_eq!(report.refused(), Some(0)); // the per-second quota fired
/// assert_eq!(report.tightest().0, 0);
/// // Lengths that disagree, or a refusing index past the end: no report.
/// assert!(PolicyReport::new(&[per_second], snaps, None).is_none());
/// assert!(PolicyReport::new(&[per_second, per_minute], snaps, Some(2)).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyReport {
    /// `quotas[..len]` are the policy's; the rest repeat `quotas[0]`, so that the derived
    /// equality compares only what a report holds.
    quotas: [Quota; MAX_QUOTAS],
    len: usize,
    /// One per quota (`len` of them), when the store reports them.
    snapshots: Option<Snapshots>,
    /// The tightest quota's index and snapshot.
    tightest: (usize, Snapshot),
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
        if quotas.len() != snapshots.len() {
            return None;
        }
        let mut report = PolicyReport::tightest_only(quotas, 0, snapshots.as_slice()[0], refused)?;
        report.tightest = snapshots.tightest();
        report.snapshots = Some(snapshots);
        Some(report)
    }

    /// A report of `quotas` in which only the tightest quota's snapshot is known: quota
    /// `tightest` with `snapshot` (a store that answers with the tightest quota alone, such as
    /// a Redis policy). `None` if `quotas` is empty or holds more than four, or `tightest` or
    /// `refused` is not an index of `quotas`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot};
    /// use tollgate_tower::PolicyReport;
    /// let (a, b) = (Quota::per_second(5).unwrap(), Quota::new(20, Duration::from_secs(60), 20).unwrap());
    /// let snap = Snapshot::new(0, Duration::from_secs(3));
    /// let report = PolicyReport::tightest_only(&[a, b], 1, snap, None).unwrap();
    /// assert_eq!((report.tightest(), report.snapshots()), ((1, b, snap), None));
    /// assert!(PolicyReport::tightest_only(&[a, b], 2, snap, None).is_none());
    /// assert!(PolicyReport::tightest_only(&[], 0, snap, None).is_none());
    /// ```
    pub fn tightest_only(
        quotas: &[Quota],
        tightest: usize,
        snapshot: Snapshot,
        refused: Option<usize>,
    ) -> Option<PolicyReport> {
        let len = quotas.len();
        if len > MAX_QUOTAS || tightest >= len || refused.is_some_and(|i| i >= len) {
            return None;
        }
        let mut all = [quotas[0]; MAX_QUOTAS];
        all[..len].copy_from_slice(quotas);
        Some(PolicyReport {
            quotas: all,
            len,
            snapshots: None,
            tightest: (tightest, snapshot),
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
        &self.quotas[..self.len]
    }

    /// One snapshot per quota, in the policy's order (`None` for a
    /// [`tightest_only`](PolicyReport::tightest_only) report).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Snapshot, Snapshots};
    /// use tollgate_tower::PolicyReport;
    /// let q = Quota::per_second(5).unwrap();
    /// let one = Snapshot::new(5, Duration::ZERO);
    /// let s = Snapshots::new(&[one]).unwrap();
    /// assert_eq!(PolicyReport::new(&[q], s, None).unwrap().snapshots(), Some(&[one][..]));
    /// ```
    pub fn snapshots(&self) -> Option<&[Snapshot]> {
        self.snapshots.as_ref().map(Snapshots::as_slice)
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
        self.len
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
    /// by the first index (`Snapshots::tightest`; for a
    /// [`tightest_only`](PolicyReport::tightest_only) report, the one given) — with its index
    /// and snapshot: the one `RateLimit` describes.
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
        let (i, snapshot) = self.tightest;
        (i, self.quotas[i], snapshot)
    }
}
