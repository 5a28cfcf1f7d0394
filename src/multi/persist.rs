//! [`MultiBucket`]'s saved state (feature `persist`): a `MULTI` frame with the number of quotas
//! and, for each, its record (the quota and the units it lacks from full at the anchor).

use super::MultiBucket;
use crate::clock::Clock;
use crate::gcra::all::pad;
use crate::limits::MAX_LIMITS;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, lack, restored_state, sealed, RestoreError};
use crate::quota::Quota;

inherent_persist!(impl[C: Clock] MultiBucket<C>);

/// Each saved quota and its lack from full, by position, and how many there are.
type Saved = ([(Option<Quota>, u64); MAX_LIMITS], usize);

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
        let mut saved: [(Option<Quota>, u64); MAX_LIMITS] = [(None, 0); MAX_LIMITS];
        let n = usize::from(c.u8()?);
        if n == 0 || n > MAX_LIMITS {
            return Err(RestoreError::Corrupt("an invalid number of quotas"));
        }
        for s in &mut saved[..n] {
            let (q, lack) = c.record()?;
            *s = (Some(q), lack);
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

    /// Each quota's state refilled over the downtime, converted by position, if stricter.
    fn apply(&self, (saved, _): Saved, down: u64) {
        let now = self.clock().now();
        let mut to = [0u64; MAX_LIMITS];
        for ((t, (old, missing)), new) in to.iter_mut().zip(&saved).zip(self.limits().quotas()) {
            if let Some(old) = old {
                *t = restored_state(*missing, down, now, old, new);
            }
        }
        self.raise(&to);
    }
}
