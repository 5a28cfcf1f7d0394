//! [`ShardedBucket`]'s saved state (feature `persist`): a `SHARDED` frame with the global quota
//! and the tokens the whole bucket holds at the anchor (tokens leased to shards counted as
//! spent), as a fraction `held / scale`. Only that total travels, so any shard count restores
//! it.

use super::ShardedBucket;
use crate::clock::Clock;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, sealed, RestoreError};
use crate::quota::Quota;

inherent_persist!(impl[C: Clock] ShardedBucket<C>);

impl<C: Clock> sealed::OneFrame for ShardedBucket<C> {
    const LIMITER: Limiter = Limiter::Sharded;
    const KIND: u8 = kind::SHARDED;
    /// The saved quota, and the tokens held as `held / scale`.
    type Saved = (Quota, u128, u64);

    /// One load of the central word: decisions go on meanwhile.
    fn payload(&self) -> Payload {
        let (held, scale, _) = self.held_units(self.clock().now());
        let mut p = Payload::default();
        p.quota(&self.quota()).u128(held).u64(scale);
        p
    }

    fn decode(&self, c: &mut Cursor<'_>) -> Result<Self::Saved, RestoreError> {
        let v = (c.quota()?, c.u128()?, c.u64()?);
        if v.2 == 0 {
            return Err(RestoreError::Corrupt("a zero unit scale"));
        }
        Ok(v)
    }

    /// The tokens held then, plus what the downtime refills at the saved rate, capped at the
    /// saved burst and at this bucket's; the central word keeps the smaller of what it holds
    /// and that, and every shard's lease is emptied (a bucket in use may hold leases).
    fn apply(&self, (old, held, scale): Self::Saved, down: u64) {
        let now = self.clock().now();
        let (_, target, cap) = self.held_units(now);
        let target = u128::from(target);
        // In this bucket's unit, each term rounded down: what was held (at most the saved
        // burst), plus the downtime's refill at the saved rate; capped at both bursts.
        let old_burst = u128::from(old.burst()) * target;
        let held = held.min(u128::from(old.burst()) * u128::from(scale));
        let refill = u128::from(old.earned_floor(down)) * target / u128::from(old.scale());
        let tokens = (held.saturating_mul(target) / u128::from(scale))
            .saturating_add(refill)
            .min(old_burst)
            .min(cap);
        self.limit_held(now, tokens);
        // The saved total counts leased tokens as spent: a lease this bucket took before the
        // restore would pay on top of it.
        self.empty_leases();
    }
}
