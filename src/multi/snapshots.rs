//! [`Snapshots`]: every quota of a policy as one decision left it.

use crate::gcra::all::tightest;
use crate::limits::MAX_LIMITS;
use crate::snapshot::Snapshot;

/// Every quota's [`Snapshot`] right after one decision, in the policy's order (a
/// `RateLimit-Policy` header); [`tightest`](Snapshots::tightest) is the `RateLimit` header's.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Limits, ManualClock, MultiBucket, Quota, Snapshot};
/// let per_second = Quota::per_second(10).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let policy = MultiBucket::with_clock(Limits::new([per_second, per_minute]).unwrap(), ManualClock::new());
/// let (verdict, snaps) = policy.decide_snapshots(&(), 4);
/// assert_eq!(verdict, Ok(()));
/// assert_eq!(snaps.as_slice(), &[
///     Snapshot::new(6, Duration::from_millis(400)),
///     Snapshot::new(16, Duration::from_secs(12)),
/// ]);
/// assert_eq!(snaps.tightest(), (0, Snapshot::new(6, Duration::from_millis(400))));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshots {
    all: [Snapshot; MAX_LIMITS],
    len: usize,
}

impl Snapshots {
    /// The snapshots of a policy's quotas, in order (for limiters stored elsewhere); `None` if
    /// empty or more than four.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Snapshot, Snapshots};
    /// let s = Snapshots::new(&[Snapshot::new(3, Duration::ZERO)]).unwrap();
    /// assert_eq!(s.len(), 1);
    /// assert!(Snapshots::new(&[]).is_none());
    /// ```
    pub fn new(snapshots: &[Snapshot]) -> Option<Snapshots> {
        if snapshots.is_empty() || snapshots.len() > MAX_LIMITS {
            return None;
        }
        let mut all = [snapshots[0]; MAX_LIMITS];
        all[..snapshots.len()].copy_from_slice(snapshots);
        Some(Snapshots {
            all,
            len: snapshots.len(),
        })
    }

    /// A single quota's snapshot.
    pub(crate) fn one(snapshot: Snapshot) -> Snapshots {
        Snapshots::from_padded([snapshot], 1)
    }

    /// From a padded array whose first `len` entries are the policy's.
    pub(crate) fn from_padded<const N: usize>(padded: [Snapshot; N], len: usize) -> Snapshots {
        let mut all = [padded[0]; MAX_LIMITS];
        all[..len].copy_from_slice(&padded[..len]);
        Snapshots { all, len }
    }

    /// One snapshot per quota, in the policy's order.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Snapshot, Snapshots};
    /// let one = Snapshot::new(3, Duration::ZERO);
    /// assert_eq!(Snapshots::new(&[one]).unwrap().as_slice(), &[one]);
    /// ```
    pub fn as_slice(&self) -> &[Snapshot] {
        &self.all[..self.len]
    }

    /// How many quotas (1 to 4).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Snapshot, Snapshots};
    /// let one = Snapshot::new(3, Duration::ZERO);
    /// assert_eq!(Snapshots::new(&[one, one]).unwrap().len(), 2);
    /// ```
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.len
    }

    /// The tightest quota's index and snapshot: the fewest remaining tokens, then the one full
    /// last, then the first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Snapshot, Snapshots};
    /// let a = Snapshot::new(3, Duration::from_secs(1));
    /// let b = Snapshot::new(3, Duration::from_secs(9));
    /// assert_eq!(Snapshots::new(&[a, b]).unwrap().tightest(), (1, b));
    /// ```
    pub fn tightest(&self) -> (usize, Snapshot) {
        let i = tightest(self.as_slice());
        (i, self.all[i])
    }
}
