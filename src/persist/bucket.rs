//! [`Bucket`]'s saved state: a `BUCKET` frame with the quota and the units the bucket lacks
//! from full at the save's anchor.

use super::format::{kind, Cursor, Limiter, Payload};
use super::single::SingleFrame;
use super::{lack, restored_state, RestoreError};
use crate::bucket::Bucket;
use crate::clock::Clock;
use crate::quota::Quota;
use std::io::{self, Read, Write};
use std::time::SystemTime;

/// One bucket as saved: its quota and its lack from full at the anchor.
pub(crate) struct Saved {
    pub(crate) quota: Quota,
    pub(crate) lack: u64,
}

impl Saved {
    pub(crate) fn write(&self, p: &mut Payload) {
        p.quota(&self.quota).u64(self.lack);
    }

    pub(crate) fn read(c: &mut Cursor<'_>) -> Result<Saved, RestoreError> {
        Ok(Saved {
            quota: c.quota()?,
            lack: c.u64()?,
        })
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<C: Clock> Bucket<C> {
    /// Writes the bucket's state to `w` (feature `persist`): its quota and the tokens it lacks
    /// from full, anchored to the wall clock ([`SystemTime::now`]) so that
    /// [`restore`](Bucket::restore) in another process refills exactly the downtime. Decisions
    /// go on meanwhile; the state saved is the one at the save's reading or a later one. See
    /// [`crate::persist`] for the format and the guarantees.
    ///
    /// Errors: only `w`'s, or a wall clock before 1970.
    ///
    /// ```
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// bucket.try_acquire(4).unwrap();
    /// let mut file = Vec::new();
    /// bucket.save(&mut file).unwrap();
    /// let restarted = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// restarted.restore(&file[..]).unwrap();
    /// assert!(restarted.available() <= 7); // 6, plus what the (tiny) downtime refilled
    /// ```
    pub fn save<W: Write>(&self, w: W) -> io::Result<()> {
        self.save_with(w, SystemTime::now)
    }

    /// [`save`](Bucket::save) with the wall-clock time given: what the save is anchored to.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// assert_eq!(&file[..8], b"TOLLGATE");
    /// ```
    pub fn save_at<W: Write>(&self, w: W, wall: SystemTime) -> io::Result<()> {
        self.save_with(w, || wall)
    }

    /// Restores a state written by [`save`](Bucket::save) (feature `persist`), refilled over
    /// the downtime measured on the wall clock ([`SystemTime::now`]), at most to the burst.
    /// A state saved under another quota is converted as [`set_quota`](Bucket::set_quota)
    /// converts (balance carried, capped at this quota's burst; a debt keeps its due instant).
    ///
    /// The bucket keeps the stricter of its own state and the restored one: a restore never
    /// adds tokens (restore into a freshly built bucket to take the saved state as it is).
    /// On error nothing changes; the suggested recovery is a drained bucket
    /// ([`Bucket::with_initial_tokens`] with 0), never a full one.
    ///
    /// ```
    /// use tollgate::{persist::RestoreError, Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// let mut file = Vec::new();
    /// bucket.save(&mut file).unwrap();
    /// file.truncate(file.len() - 1);
    /// assert!(matches!(bucket.restore(&file[..]), Err(RestoreError::Truncated)));
    /// ```
    pub fn restore<R: Read>(&self, r: R) -> Result<(), RestoreError> {
        self.restore_with(r, SystemTime::now)
    }

    /// [`restore`](Bucket::restore) with the wall-clock time given: the downtime is measured
    /// up to it.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let q = Quota::per_second(10).unwrap();
    /// let bucket = Bucket::with_clock(q, ManualClock::new());
    /// bucket.try_acquire(10).unwrap();
    /// let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, t).unwrap();
    /// // The wall clock stepped back across the restart: nothing refills.
    /// let restarted = Bucket::with_clock(q, ManualClock::new());
    /// restarted.restore_at(&file[..], t - Duration::from_secs(5)).unwrap();
    /// assert_eq!(restarted.available(), 0);
    /// ```
    pub fn restore_at<R: Read>(&self, r: R, wall: SystemTime) -> Result<(), RestoreError> {
        self.restore_with(r, || wall)
    }
}

impl<C: Clock> SingleFrame for Bucket<C> {
    const LIMITER: Limiter = Limiter::Bucket;
    const KIND: u8 = kind::BUCKET;
    type Saved = Saved;

    fn payload(&self) -> Payload {
        let now = self.clock().now();
        let (state, quota) = self.update(|s, q| (None, (s, *q)));
        let mut p = Payload::default();
        Saved {
            quota,
            lack: lack(state, now, &quota),
        }
        .write(&mut p);
        p
    }

    fn decode(mut c: Cursor<'_>) -> Result<Saved, RestoreError> {
        let saved = Saved::read(&mut c)?;
        c.end()?;
        Ok(saved)
    }

    fn apply(&self, saved: Saved, down: u64) {
        let now = self.clock().now();
        self.update(|state, quota| {
            let restored = restored_state(saved.lack, down, now, &saved.quota, quota);
            // The stricter state: a later theoretical arrival time holds fewer tokens.
            (Some(restored).filter(|&r| r > state), ())
        });
    }
}
