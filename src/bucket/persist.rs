//! [`Bucket`]'s saved state (feature `persist`): one `BUCKET` frame, its record (the quota and
//! the units the bucket lacks from full at the save's anchor).

use super::Bucket;
use crate::clock::Clock;
use crate::persist::format::{kind, FrameReader, FrameWriter, Limiter, Payload};
use crate::persist::{inherent_persist, lack, one_frame, restored_state, sealed, RestoreError};
use crate::quota::Quota;
use std::io::{self, Read, Write};

inherent_persist!(impl[C: Clock] Bucket<C>);

impl<C: Clock> sealed::Frames for Bucket<C> {
    const LIMITER: Limiter = Limiter::Bucket;
    type Measured = Payload;
    type Read = (Quota, u64);

    fn measure(&self) -> Payload {
        let now = self.clock().now();
        let (state, quota) = self.update(|s, q| (None, (s, *q)));
        let mut p = Payload::default();
        p.record(&quota, lack(state, now, &quota));
        p
    }

    fn write(&self, p: Payload, fw: &mut FrameWriter<&mut dyn Write>) -> io::Result<()> {
        fw.frame(kind::BUCKET, &p.0)
    }

    fn read(&self, fr: &mut FrameReader<&mut dyn Read>) -> Result<(Quota, u64), RestoreError> {
        one_frame(fr, kind::BUCKET, |c| c.record())
    }

    fn apply(
        &self,
        (old, saved_lack): (Quota, u64),
        _: &mut FrameReader<&mut dyn Read>,
        down: u64,
    ) -> Result<(), RestoreError> {
        let now = self.clock().now();
        self.update(|state, quota| {
            let restored = restored_state(saved_lack, down, now, &old, quota);
            // The stricter state: a later theoretical arrival time holds fewer tokens.
            (Some(restored).filter(|&r| r > state), ())
        });
        Ok(())
    }
}
