//! [`MultiBucket`]'s saved state (feature `persist`): a `MULTI` frame with the number of quotas
//! and, for each, its quota and the units it lacks from full at the anchor (the `BUCKET`
//! payload, repeated).

use super::{MultiBucket, Store};
use crate::clock::Clock;
use crate::limits::MAX_LIMITS;
use crate::persist::format::{kind, Cursor, Limiter, Payload};
use crate::persist::single::SingleFrame;
use crate::persist::{lack, restored_state, RestoreError};
use crate::quota::Quota;
use std::io::{self, Read, Write};
use std::time::SystemTime;

impl<C: Clock> MultiBucket<C> {
    /// The states of every quota, read in one atomic step.
    fn states(&self) -> [u64; MAX_LIMITS] {
        let mut out = [0; MAX_LIMITS];
        match &self.store {
            Store::Pair(_, pair) => out[..2].copy_from_slice(&pair.load()),
            Store::Wide(_, wide) => out = wide.load(),
        }
        out
    }

    /// Raises each quota's state to at least `to[i]`, in one atomic step.
    fn raise(&self, to: &[u64; MAX_LIMITS]) {
        fn max_each<const N: usize>(cur: [u64; N], to: &[u64; MAX_LIMITS]) -> Option<[u64; N]> {
            let mut next = cur;
            for (n, &t) in next.iter_mut().zip(to) {
                *n = (*n).max(t);
            }
            (next != cur).then_some(next)
        }
        match &self.store {
            Store::Pair(_, pair) => pair.update(|cur| (max_each(cur, to), ())),
            Store::Wide(_, wide) => wide.update(|cur| (max_each(cur, to), ())),
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<C: Clock> MultiBucket<C> {
    /// Writes every quota's state (feature `persist`), read in one atomic step and anchored to
    /// the wall clock ([`SystemTime::now`]); see [`Bucket::save`](crate::Bucket::save) and
    /// [`crate::persist`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([
    ///     Quota::per_second(10).unwrap(),
    ///     Quota::new(100, Duration::from_secs(60), 100).unwrap(),
    /// ]).unwrap();
    /// let bucket = MultiBucket::with_clock(limits.clone(), ManualClock::new());
    /// bucket.try_acquire(10).unwrap();
    /// let mut file = Vec::new();
    /// bucket.save(&mut file).unwrap();
    /// let restarted = MultiBucket::with_clock(limits, ManualClock::new());
    /// restarted.restore(&file[..]).unwrap();
    /// assert!(restarted.available() <= 1);
    /// ```
    pub fn save<W: Write>(&self, w: W) -> io::Result<()> {
        self.save_with(w, SystemTime::now)
    }

    /// [`save`](MultiBucket::save) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let bucket = MultiBucket::with_clock(Limits::from(Quota::per_second(1).unwrap()), ManualClock::new());
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// ```
    pub fn save_at<W: Write>(&self, w: W, wall: SystemTime) -> io::Result<()> {
        self.save_with(w, || wall)
    }

    /// Restores a state written by [`save`](MultiBucket::save) (feature `persist`): each
    /// quota's, refilled over the downtime ([`SystemTime::now`]), converted by position to this
    /// bucket's quota as [`Bucket::set_quota`](crate::Bucket::set_quota) converts. Each quota
    /// keeps the stricter of its state and the restored one (never more tokens). A state saved
    /// with another number of quotas is refused ([`RestoreError::LimitsChanged`]): which saved
    /// quota became which is not known. On error nothing changes; the suggested recovery is a
    /// drained bucket ([`MultiBucket::with_initial_tokens`] with zeros).
    ///
    /// ```
    /// use tollgate::{persist::RestoreError, Limits, ManualClock, MultiBucket, Quota};
    /// let bucket = MultiBucket::with_clock(Limits::from(Quota::per_second(1).unwrap()), ManualClock::new());
    /// assert!(matches!(bucket.restore(&b"TOLLGATE"[..]), Err(RestoreError::Truncated)));
    /// ```
    pub fn restore<R: Read>(&self, r: R) -> Result<(), RestoreError> {
        self.restore_with(r, SystemTime::now)
    }

    /// [`restore`](MultiBucket::restore) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::from(Quota::per_second(10).unwrap());
    /// let bucket = MultiBucket::with_clock(limits.clone(), ManualClock::new());
    /// bucket.try_acquire(10).unwrap();
    /// let mut file = Vec::new();
    /// bucket.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// let restarted = MultiBucket::with_clock(limits, ManualClock::new());
    /// restarted.restore_at(&file[..], SystemTime::UNIX_EPOCH + Duration::from_millis(300)).unwrap();
    /// assert_eq!(restarted.available(), 3);
    /// ```
    pub fn restore_at<R: Read>(&self, r: R, wall: SystemTime) -> Result<(), RestoreError> {
        self.restore_with(r, || wall)
    }
}

impl<C: Clock> SingleFrame for MultiBucket<C> {
    const LIMITER: Limiter = Limiter::Multi;
    const KIND: u8 = kind::MULTI;
    /// Each saved quota and its lack from full, by position, and how many there are.
    type Saved = ([(Option<Quota>, u64); MAX_LIMITS], usize);

    fn payload(&self) -> Payload {
        let now = self.clock().now();
        let states = self.states();
        let quotas = self.limits().quotas();
        let mut p = Payload::default();
        p.u8(quotas.len() as u8);
        for (q, &s) in quotas.iter().zip(&states) {
            p.quota(q).u64(lack(s, now, q));
        }
        p
    }

    fn decode(mut c: Cursor<'_>) -> Result<Self::Saved, RestoreError> {
        let mut saved: [(Option<Quota>, u64); MAX_LIMITS] = [(None, 0); MAX_LIMITS];
        let n = usize::from(c.u8()?);
        if n == 0 || n > MAX_LIMITS {
            return Err(RestoreError::Corrupt("an invalid number of quotas"));
        }
        for s in &mut saved[..n] {
            *s = (Some(c.quota()?), c.u64()?);
        }
        c.end()?;
        Ok((saved, n))
    }

    fn check(&self, &(_, n): &Self::Saved) -> Result<(), RestoreError> {
        let restoring = self.limits().quotas().len();
        if n != restoring {
            return Err(RestoreError::LimitsChanged {
                saved: n,
                restoring,
            });
        }
        Ok(())
    }

    fn apply(&self, (saved, _): Self::Saved, down: u64) {
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
