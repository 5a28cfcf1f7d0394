//! [`MultiBucket`]'s saved state (feature `persist`): a `MULTI` frame with the number of quotas
//! and, for each, its record (the quota and the units it lacks from full at the anchor).

use super::MultiBucket;
use crate::clock::Clock;
use crate::gcra::all::pad;
use crate::limits::MAX_LIMITS;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, lack, restored_states, sealed, RestoreError};
use crate::quota::Quota;

inherent_persist!(impl[C: Clock] MultiBucket<C>);

/// Each saved quota and its lack from full, in the saved order, and how many there are.
type Saved = ([(Quota, u64); MAX_LIMITS], usize);

impl<C: Clock> sealed::OneFrame for MultiBucket<C> {
    const LIMITER: Limiter = Limiter::Multi;
    const KIND: u8 = kind::MULTI;
    type Saved = Saved;

    /// Every quota's state, read in one atomic step.
    fn payload(&self) -> Payload {
        let now = self.clock().now();
        let states: [u64; MAX_LIMITS] = on_store!(self, |_, s| pad(&s.load()));
        let quotas = self.limits().quotas();
        let mut p = Payload::default();
        p.u8(quotas.len() as u8);
        for (q, &s) in quotas.iter().zip(&states) {
            p.record(q, lack(s, now, q));
        }
        p
    }

    /// Another number of quotas is [`RestoreError::LimitsChanged`] (which became which?).
    fn decode(&self, c: &mut Cursor<'_>) -> Result<Saved, RestoreError> {
        let n = usize::from(c.u8()?);
        if n == 0 || n > MAX_LIMITS {
            return Err(RestoreError::Corrupt("an invalid number of quotas"));
        }
        // Slots past `n` repeat the first record, unread.
        let mut saved = [c.record()?; MAX_LIMITS];
        for s in &mut saved[1..n] {
            *s = c.record()?;
        }
        let restoring = self.limits().quotas().len();
        if n != restoring {
            return Err(RestoreError::LimitsChanged {
                saved: n,
                restoring,
            });
        }
        Ok((saved, n))
    }

    /// Each quota's state refilled over the downtime, paired with the saved quotas by value,
    /// then by period ([`restored_states`]), if stricter.
    fn apply(&self, (saved, n): Saved, down: u64) {
        let now = self.clock().now();
        let mut to = [0u64; MAX_LIMITS];
        restored_states(&saved[..n], down, now, self.limits().quotas(), &mut to);
        self.raise(&to);
    }
}
