//! The per-key decision: a lock-free probe and one CAS on the key's slot in line; a miss or a
//! lost race out of line, ending in the insert path.

use super::{Insert, KeyedLimiter};
use crate::clock::Clock;
use crate::error::Denied;
use crate::gcra;
use crate::quota::Quota;
use core::borrow::Borrow;
use core::hash::Hash;

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, C> {
    #[inline]
    pub(super) fn acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), Denied>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The key itself is only hashed: the table stores fingerprints (see the type's docs).
        let fp = self.fingerprint(key);
        self.acquire_fp(fp, self.quota_of(fp), cost, || self.clock.now())
    }

    /// The decision for fingerprint `fp`, reading the clock (`now()`) only if it must.
    #[inline]
    pub(super) fn acquire_fp(
        &self,
        fp: u64,
        quota: &Quota,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Denied> {
        let result = if cost > quota.burst() {
            Err(Denied::ExceedsBurst)
        } else if cost == 0 {
            Ok(())
        } else {
            self.decide(fp, cost, quota, now)
        };
        #[cfg(feature = "metrics")]
        let result = self.observe.decided(result);
        match result {
            Ok(()) => self.count(|c| &c.admitted, 1),
            Err(_) => self.count(|c| &c.refused, 1),
        }
        result
    }

    /// The decision for a tracked key: one lock-free probe, the clock read (`now()`) while the
    /// slot's line arrives, and at most one CAS, in line; a miss (a new key, an entry being
    /// moved) or a lost race goes to [`decide_slow`](KeyedLimiter::decide_slow), out of line.
    #[inline]
    pub(super) fn decide(
        &self,
        fp: u64,
        cost: u64,
        quota: &Quota,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Denied> {
        // Read before the probe: the insert path trusts a miss only if no entry moved around it.
        let epoch = self.index.rebuild_epoch();
        let hit = self.index.lookup(fp);
        // After the slot's load is issued: a word older than the reading is fine (the CAS
        // fails on any change, and a refusal from an older, more lenient state stands).
        let now = now();
        if let Some(hit) = &hit {
            match gcra::try_acquire_scaled(hit.state(), now, quota.scaled(), cost) {
                Ok(Some(next)) => {
                    if hit.commit(next) {
                        return Ok(());
                    }
                }
                Ok(None) => return Ok(()),
                Err(denied) => return Err(denied),
            }
        }
        self.decide_slow(fp, cost, quota, now, epoch)
    }

    /// [`decide`](KeyedLimiter::decide) after a miss or a lost race: CASes on the key's slot
    /// until one lands, or the insert path (under the mutex) when the probe misses.
    #[cold]
    #[inline(never)]
    pub(super) fn decide_slow(
        &self,
        fp: u64,
        cost: u64,
        quota: &Quota,
        now: u64,
        mut epoch: u64,
    ) -> Result<(), Denied> {
        loop {
            // The hit path again: a lock-free probe and CASes on the key's own slot.
            if let Some(result) = self.index.apply(fp, |s| {
                gcra::try_acquire_scaled(s, now, quota.scaled(), cost)
            }) {
                if self.index.migrating() {
                    // Every lookup during a migration comes here (`Index::lookup`): each takes
                    // one step, so the migration ends within a bounded number of calls.
                    self.help_migrate();
                }
                return result;
            }
            match self.insert(fp, now, quota, cost, epoch) {
                Insert::Done => return Ok(()),
                Insert::Retry => epoch = self.index.rebuild_epoch(),
                Insert::Refused(denied) => return Err(denied),
                Insert::TableFull(wait) => {
                    #[cfg(any(feature = "metrics", feature = "tracing"))]
                    self.observe.table_full(self.fail_open);
                    // In shadow mode the caller is admitted untracked whatever the verdict,
                    // and the counters count what callers got (a review's finding,
                    // 2026-12-04: a shadow table counted `refused_table_full` with `refused`
                    // 0); the metrics record the refusal enforcement would have made.
                    #[cfg(feature = "metrics")]
                    let untracked = self.fail_open || self.observe.is_shadow();
                    #[cfg(not(feature = "metrics"))]
                    let untracked = self.fail_open;
                    if untracked {
                        self.count(|c| &c.admitted_untracked, 1);
                    } else {
                        self.count(|c| &c.refused_table_full, 1);
                    }
                    return if self.fail_open {
                        Ok(())
                    } else {
                        Err(Denied::RetryAfter(wait))
                    };
                }
            }
        }
    }
}
