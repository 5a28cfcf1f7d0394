//! [`ShardedBucket`]'s saved state: a `SHARDED` frame with the global quota and the tokens the
//! whole bucket holds at the anchor (tokens leased to shards counted as spent), as a fraction
//! `held / scale`. Only that total travels, so any shard count restores it.

use super::format::{kind, Cursor, Limiter, Payload};
use super::single::SingleFrame;
use super::RestoreError;
use crate::clock::Clock;
use crate::quota::Quota;
use crate::sharded::ShardedBucket;
use std::io::{self, Read, Write};
use std::time::SystemTime;

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<C: Clock> ShardedBucket<C> {
    /// Writes the tokens the whole bucket holds (feature `persist`), anchored to the wall clock
    /// ([`SystemTime::now`]); see [`Bucket::save`](crate::Bucket::save) and
    /// [`crate::persist`]. Tokens leased to shards count as spent (their leases lapse with the
    /// process). Decisions go on meanwhile: the save is one load of the central word.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(8).unwrap();
    /// let bucket = ShardedBucket::with_clock(q, 4, ManualClock::new());
    /// bucket.try_acquire(6).unwrap();
    /// let mut file = Vec::new();
    /// bucket.save(&mut file).unwrap();
    /// let restarted = ShardedBucket::with_clock(q, 2, ManualClock::new());
    /// restarted.restore(&file[..]).unwrap();
    /// assert!(restarted.available() <= 3); // 2, plus what the (tiny) downtime refilled
    /// ```
    pub fn save<W: Write>(&self, w: W) -> io::Result<()> {
        self.save_with(w, SystemTime::now)
    }

    /// [`save`](ShardedBucket::save) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// ```
    pub fn save_at<W: Write>(&self, w: W, wall: SystemTime) -> io::Result<()> {
        self.save_with(w, || wall)
    }

    /// Restores a state written by [`save`](ShardedBucket::save) (feature `persist`): the
    /// tokens held then, plus what the downtime ([`SystemTime::now`]) refills at the saved
    /// rate, capped at the saved burst and at this bucket's. The central word keeps the smaller
    /// of what it holds and that: a restore never adds tokens (restore into a bucket just
    /// built, which has leased nothing). On error nothing changes; the suggested recovery is
    /// [`drain`](ShardedBucket::drain).
    ///
    /// ```
    /// use tollgate::{persist::RestoreError, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// assert!(matches!(bucket.restore(&b""[..]), Err(RestoreError::Truncated)));
    /// assert_eq!(bucket.available(), 8);
    /// ```
    pub fn restore<R: Read>(&self, r: R) -> Result<(), RestoreError> {
        self.restore_with(r, SystemTime::now)
    }

    /// [`restore`](ShardedBucket::restore) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(8).unwrap();
    /// let bucket = ShardedBucket::with_clock(q, 4, ManualClock::new());
    /// bucket.try_acquire(8).unwrap();
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// let restarted = ShardedBucket::with_clock(q, 4, ManualClock::new());
    /// restarted.restore_at(&file[..], SystemTime::UNIX_EPOCH + Duration::from_millis(500)).unwrap();
    /// assert_eq!(restarted.available(), 4);
    /// ```
    pub fn restore_at<R: Read>(&self, r: R, wall: SystemTime) -> Result<(), RestoreError> {
        self.restore_with(r, || wall)
    }

    /// Empties the central word now (feature `persist`): what a process that cannot restore
    /// its state should do instead of starting full (tokens already leased to shards stay
    /// theirs). It refills from here at the quota's rate.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// bucket.drain();
    /// assert_eq!(bucket.available(), 0);
    /// ```
    pub fn drain(&self) {
        self.limit_held(self.clock().now(), 0);
    }
}

impl<C: Clock> SingleFrame for ShardedBucket<C> {
    const LIMITER: Limiter = Limiter::Sharded;
    const KIND: u8 = kind::SHARDED;
    /// The saved quota, and the tokens held as `held / scale`.
    type Saved = (Quota, u128, u64);

    fn payload(&self) -> Payload {
        let (held, scale, _) = self.held_units(self.clock().now());
        let mut p = Payload::default();
        p.quota(&self.quota()).u128(held).u64(scale);
        p
    }

    fn decode(mut c: Cursor<'_>) -> Result<Self::Saved, RestoreError> {
        let v = (c.quota()?, c.u128()?, c.u64()?);
        c.end()?;
        if v.2 == 0 {
            return Err(RestoreError::Corrupt("a zero unit scale"));
        }
        Ok(v)
    }

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
    }
}
