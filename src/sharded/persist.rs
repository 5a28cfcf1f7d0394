//! [`ShardedBucket`]'s saved state (feature `persist`): a `SHARDED` frame with the global quota
//! and the tokens the whole bucket holds at the anchor (tokens leased to shards counted as
//! spent), as a fraction `held / scale`, followed, only where the central word stands beyond
//! empty there, by what it owes (`owed`, same unit; `held` is then 0). Only that total
//! travels, so any shard count restores it. A file without `owed` owes nothing.

use super::ShardedBucket;
use crate::clock::Clock;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, sealed, RestoreError};
use crate::quota::Quota;

inherent_persist!(impl[C: Clock] ShardedBucket<C>);

impl<C: Clock> sealed::OneFrame for ShardedBucket<C> {
    const LIMITER: Limiter = Limiter::Sharded;
    const KIND: u8 = kind::SHARDED;
    /// The saved quota, the tokens held and owed as `held / scale` and `owed / scale`.
    type Saved = (Quota, u128, u64, u128);

    /// One load of the central word: decisions go on meanwhile. A debt (near leases taken
    /// ahead of the clock, or a reading behind the word's latest decision) travels as `owed`.
    fn payload(&self) -> Payload {
        let (held, owed, scale, _) = self.held_and_owed(self.clock().now());
        let mut p = Payload::default();
        p.quota(&self.quota()).u128(held).u64(scale);
        if owed > 0 {
            p.u128(owed);
        }
        p
    }

    fn decode(&self, c: &mut Cursor<'_>) -> Result<Self::Saved, RestoreError> {
        let (quota, held, scale) = (c.quota()?, c.u128()?, c.u64()?);
        if scale == 0 {
            return Err(RestoreError::Corrupt("a zero unit scale"));
        }
        let owed = if c.remaining() > 0 { c.u128()? } else { 0 };
        if held > 0 && owed > 0 {
            return Err(RestoreError::Corrupt("tokens both held and owed"));
        }
        Ok((quota, held, scale, owed))
    }

    /// The tokens held then, plus what the downtime refills at the saved rate, less what was
    /// owed, capped at the saved burst and at this bucket's; the central word keeps the smaller
    /// of what it holds and that, or owes what the refill left unpaid; and every shard's lease
    /// is emptied (a bucket in use may hold leases).
    fn apply(&self, (old, held, scale, owed): Self::Saved, down: u64) {
        let now = self.clock().now();
        let (_, target, cap) = self.held_units(now);
        let target = u128::from(target);
        let scale = u128::from(scale);
        // In this bucket's unit: what was held (at most the saved burst) and the downtime's
        // refill at the saved rate rounded down, what was owed rounded up.
        let old_burst = u128::from(old.burst()) * target;
        let held = held.min(u128::from(old.burst()) * scale);
        let refill = u128::from(old.earned_floor(down)) * target / u128::from(old.scale());
        let owed = owed.saturating_mul(target).div_ceil(scale);
        let tokens = (held.saturating_mul(target) / scale).saturating_add(refill);
        if owed > tokens {
            self.owe(now, owed - tokens);
        } else {
            self.limit_held(now, (tokens - owed).min(old_burst).min(cap));
        }
        // The saved total counts leased tokens as spent: a lease this bucket took before the
        // restore would pay on top of it.
        self.empty_leases();
    }
}
