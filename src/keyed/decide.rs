//! The per-key decision: the policy's lock-free fast path in line (`policy.rs`, `limits.rs`),
//! counted and observed here; a miss or a lost race out of line, ending in the insert path.

use super::{Insert, KeyedLimiter, KeyedPolicy};
use crate::clock::Clock;
use core::borrow::Borrow;
use core::hash::Hash;

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiter<K, P, C> {
    #[inline]
    pub(super) fn acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), P::Refusal>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The key itself is only hashed: the table stores fingerprints (see the type's docs).
        let fp = self.fingerprint(key);
        self.acquire_fp(fp, self.rule_of(fp), cost, || self.clock.now())
    }

    /// The decision for fingerprint `fp`, reading the clock (`now()`) only if it must,
    /// counted and observed (in shadow mode every refusal is recorded, then admitted).
    #[inline]
    pub(super) fn acquire_fp(
        &self,
        fp: u64,
        rule: &P::Rule,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), P::Refusal> {
        let result = if cost > P::min_burst(rule) {
            Err(P::exceeds(rule))
        } else if cost == 0 {
            Ok(())
        } else {
            P::decide(self, fp, rule, cost, now)
        };
        #[cfg(feature = "metrics")]
        let result = P::observe(&self.observe, result);
        match result {
            Ok(()) => self.shards.count(|c| &c.admitted, 1),
            Err(_) => self.shards.count(|c| &c.refused, 1),
        }
        result
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiter<K, P, C> {
    /// The decision after the fast path missed or lost a race: the policy's retries on the
    /// key's tracked state until one lands, or the insert path (under the mutex) when the key
    /// is not tracked. `epoch` is the rebuild epoch read before the fast path's probe.
    #[cold]
    #[inline(never)]
    pub(super) fn decide_slow(
        &self,
        fp: u64,
        rule: &P::Rule,
        cost: u64,
        now: u64,
        mut epoch: u64,
    ) -> Result<(), P::Refusal> {
        loop {
            if let Some(result) = P::decide_tracked(self, fp, rule, cost, now, &mut epoch) {
                return result;
            }
            match self.insert(fp, now, rule, cost, epoch) {
                Insert::Done => return Ok(()),
                Insert::Retry => epoch = self.index.rebuild_epoch(),
                Insert::Refused(refusal) => return Err(refusal),
                Insert::TableFull(wait) => {
                    #[cfg(any(feature = "metrics", feature = "tracing"))]
                    self.observe.table_full(self.fail_open);
                    // Shadow mode admits the caller untracked (and counts that); the metrics
                    // record the refusal enforcement would have made.
                    #[cfg(feature = "metrics")]
                    let untracked = self.fail_open || self.observe.is_shadow();
                    #[cfg(not(feature = "metrics"))]
                    let untracked = self.fail_open;
                    if untracked {
                        self.shards.count(|c| &c.admitted_untracked, 1);
                    } else {
                        self.shards.count(|c| &c.refused_table_full, 1);
                    }
                    return self.fail_open.then_some(()).ok_or(P::table_full(wait));
                }
            }
        }
    }
}
