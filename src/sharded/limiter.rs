//! What [`ShardedBucket`] offers every limiter's way: the [`Limiter`](crate::Limiter) trait and
//! `drain`.

use super::ShardedBucket;
use crate::clock::Clock;
use crate::error::Denied;
use crate::quota::Quota;
use crate::snapshot::Snapshot;

crate::limiter::one_quota_limiter!(impl[C: Clock] ShardedBucket<C>);

impl<C: Clock> ShardedBucket<C> {
    /// The decision and the bucket at its reading, read once more after it.
    pub(crate) fn acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        self.try_acquire_snapshot(cost)
    }

    /// [`ShardedBucket::acquire_snapshot`] with the quota: fixed at construction, so the one
    /// every decision is made under.
    pub(crate) fn acquire_snapshot_quota(
        &self,
        cost: u64,
    ) -> (Result<(), Denied>, Snapshot, Quota) {
        let (verdict, snapshot) = self.try_acquire_snapshot(cost);
        (verdict, snapshot, self.quota())
    }

    /// `try_acquire_or_snapshot` with the (fixed) quota on refusal.
    pub(crate) fn acquire_or_snapshot_quota(
        &self,
        cost: u64,
    ) -> Result<(), (Denied, Snapshot, Quota)> {
        self.try_acquire_or_snapshot(cost)
            .map_err(|(denied, snapshot)| (denied, snapshot, self.quota()))
    }

    /// Empties the bucket now, the central word and every shard's lease (what the leases held
    /// counts as [stranded](ShardedBucket::stranded_tokens)): what a process that cannot
    /// restore its state should do instead of starting full. It refills from here at the
    /// quota's rate.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// bucket.drain();
    /// assert_eq!(bucket.available(), 0);
    /// ```
    pub fn drain(&self) {
        self.limit_held(self.clock().now(), 0);
        self.empty_leases();
    }
}
