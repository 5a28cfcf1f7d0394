//! [`Bucket`]'s saved state (feature `persist`): one `BUCKET` frame, its record (the quota and
//! the units the bucket lacks from full at the save's anchor).

use super::Bucket;
use crate::clock::Clock;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::{inherent_persist, lack, restored_state, sealed, RestoreError};
use crate::quota::Quota;

inherent_persist!(impl[C: Clock] Bucket<C>);

impl<C: Clock> sealed::OneFrame for Bucket<C> {
    const LIMITER: Limiter = Limiter::Bucket;
    const KIND: u8 = kind::BUCKET;
    type Saved = (Quota, u64);

    fn payload(&self) -> Payload {
        let now = self.clock().now();
        let (state, quota) = self.update(|s, q| (None, (s, *q)));
        let mut p = Payload::default();
        p.record(&quota, lack(state, now, &quota));
        p
    }

    fn decode(&self, c: &mut Cursor<'_>) -> Result<(Quota, u64), RestoreError> {
        c.record()
    }

    fn apply(&self, (old, saved_lack): (Quota, u64), down: u64) {
        let now = self.clock().now();
        self.update(|state, quota| {
            let restored = restored_state(saved_lack, down, now, &old, quota);
            // The stricter state: a later theoretical arrival time holds fewer tokens.
            (Some(restored).filter(|&r| r > state), ())
        });
    }
}
