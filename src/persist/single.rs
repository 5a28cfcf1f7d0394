//! The save and restore of a limiter whose state is one frame (`Bucket`, `ShardedBucket`,
//! `Smooth`, `MultiBucket`): the header, the anchor, the end frame and the two reading orders,
//! written once. Each limiter says what its frame holds and how a restore applies it.

use super::format::{kind, Cursor, FrameReader, FrameWriter, Limiter, Payload};
use super::{downtime, wall_ns, RestoreError};
use std::io::{self, Read, Write};
use std::time::SystemTime;

pub(crate) trait SingleFrame {
    /// The limiter type named in the header.
    const LIMITER: Limiter;
    /// The kind of its one frame.
    const KIND: u8;
    /// What a restore reads from the frame.
    type Saved;

    /// Reads the limiter's clock, then its state, and encodes the frame's payload.
    fn payload(&self) -> Payload;

    /// Decodes and checks a whole payload, [`Cursor::end`] included.
    fn decode(c: Cursor<'_>) -> Result<Self::Saved, RestoreError>;

    /// Checks `saved` against this limiter, after the end frame and before the wall clock.
    fn check(&self, _saved: &Self::Saved) -> Result<(), RestoreError> {
        Ok(())
    }

    /// Applies `saved` after `down` nanoseconds of downtime, at a reading of the limiter's
    /// clock taken now.
    fn apply(&self, saved: Self::Saved, down: u64);

    /// The clock (in [`SingleFrame::payload`]), then the wall clock: the anchor's wall time is
    /// no earlier than the instant the state is measured at, so a restore refills no more than
    /// the downtime.
    fn save_with<W: Write>(&self, w: W, wall: impl FnOnce() -> SystemTime) -> io::Result<()> {
        let p = self.payload();
        let wall = wall_ns(wall())?;
        let mut fw = FrameWriter::start(w, Self::LIMITER, wall)?;
        fw.frame(Self::KIND, &p.0)?;
        fw.finish().map(drop)
    }

    /// The wall clock, then the limiter's clock (in [`SingleFrame::apply`]): the downtime ends
    /// no later than the reading the state is rebuilt at. On error nothing changes.
    fn restore_with<R: Read>(
        &self,
        r: R,
        wall: impl FnOnce() -> SystemTime,
    ) -> Result<(), RestoreError> {
        let mut fr = FrameReader::open(r, Self::LIMITER)?;
        let saved = Self::decode(fr.expect(Self::KIND)?)?;
        fr.expect(kind::END)?;
        self.check(&saved)?;
        let down = downtime(fr.wall_ns(), wall())?;
        self.apply(saved, down);
        Ok(())
    }
}
