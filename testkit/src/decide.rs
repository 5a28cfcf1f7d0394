//! [`Snapshotting`]: any limiter's decision with its tightest snapshot whatever the verdict,
//! through `tollgate::Limiter` (what the limiters' `try_acquire_snapshot` returned).

use tollgate::{Denied, Limiter, Snapshot};

/// The decision and the tightest quota's snapshot at its reading, whatever the verdict.
pub trait Snapshotting: Limiter {
    /// [`Limiter::decide_snapshots`], the refusal as a `Denied` and the tightest snapshot.
    fn decide_snapshot(&self, key: &Self::Key, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let (verdict, snapshots) = self.decide_snapshots(key, cost);
        (verdict.map_err(Denied::from), snapshots.tightest().1)
    }
}

impl<L: Limiter + ?Sized> Snapshotting for L {}
