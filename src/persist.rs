//! Saving and restoring limiter state across restarts (feature `persist`).
//!
//! Every in-process limiter implements [`Persist`] (`save`, `restore`, and their `_at` forms
//! taking the wall-clock time, for tests), also as inherent methods that need no import. A
//! `KeyedLimiter`'s file holds its fingerprint seed: `KeyedLimiterBuilder::restore` builds the
//! limiter around it.
//!
//! * **Clock-independent.** A save stores each bucket's lack from full (a debt included) at a
//!   wall-clock instant ([`SystemTime`]); a restore gives back the lack minus what the downtime
//!   refills at the quota's rate: at most a burst, and for an exact quota exactly the bucket the
//!   old process would hold then. Both reading orders (the wall clock after the limiter's at a
//!   save, before it at a restore) err toward fewer tokens. A wall clock that stepped back
//!   refills nothing (more than [`FUTURE_TOLERANCE`]: [`RestoreError::FromTheFuture`]); one
//!   ahead cannot be told from a longer downtime, and refills at most a burst.
//! * **Another quota.** A state saved under another quota is carried over as
//!   [`Bucket::set_quota`](crate::Bucket::set_quota) carries it ([`gcra::rescale`]); a `Smooth`
//!   saved at another rate rescales its stored permits as `set_rate` does. A policy of several
//!   quotas (`MultiBucket`, `KeyedMultiLimiter`) pairs each restoring quota with an equal saved
//!   one, else the one of the same period (the only one of it left on each side), whatever
//!   their order; quotas left unpaired (several changed at once) each take the strictest state
//!   the saved ones left convert to. A keyed
//!   table's floor for untracked keys converts alike, each policy pair an untracked key may hold
//!   (saved and restoring default, overrides by fingerprint) taken at its strictest.
//! * **A restore only ever withholds.** Each bucket keeps the *stricter* of its state and the
//!   saved one, so restoring twice or an old file is harmless; restore into a limiter just built
//!   to take the saved state as it is. (`Smooth` keeps the later next free time, and the saved
//!   stored permits in a limiter just built, else the stricter; a file of the other mode,
//!   bursty or warming up, carries its next free time only.)
//! * **When a restore fails.** Truncated, corrupted, foreign, future-dated and
//!   unsupported-version input is a [`RestoreError`], never a panic, and leaves the limiter as
//!   it was (a keyed table may have taken part of the file, which only withholds). Then **start
//!   drained, never full** (every limiter's `drain`), and log why.
//!
//! # The format
//!
//! `"TOLLGATE"`, a 16-bit version ([`VERSION`]), then frames of at most 1 MiB, each with its
//! kind, length and CRC-32, then an end frame with the number of frames and the CRC-32 of the
//! whole file before it. Integers are little-endian. Saving and restoring stream through
//! [`std::io::Write`] and [`std::io::Read`], one frame in memory at a time (a keyed limiter's
//! restore also holds the file's per-key quota overrides, at most 2^24); wrap files in a
//! `BufWriter`/`BufReader`. A saved `KeyedLimiter` holds its fingerprint seed: keep the file as
//! private as the process's memory (anyone holding the seed can aim fingerprint collisions).
//! A restore reads up to its end frame and not a byte further, so several limiters' saves
//! written one after another to one stream restore from it in the same order (pass
//! `&mut reader`); where a file must hold one save and nothing else, check that the reader is
//! at its end afterwards.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use tollgate::{Bucket, ManualClock, Quota};
//! let q = Quota::per_second(10).unwrap();
//! let bucket = Bucket::with_clock(q, ManualClock::new());
//! bucket.try_acquire(10).unwrap();
//! let saved_at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
//! let mut file = Vec::new();
//! bucket.save_at(&mut file, saved_at).unwrap();
//!
//! // A new process, 300 ms later on the wall clock, with a clock of its own.
//! let restarted = Bucket::with_clock(q, ManualClock::new());
//! restarted.restore_at(&file[..], saved_at + Duration::from_millis(300)).unwrap();
//! assert_eq!(restarted.available(), 3);
//!
//! // Two saves in one stream, restored in order; nothing is left after the second.
//! let other = Bucket::with_clock(q, ManualClock::new());
//! let mut both = Vec::new();
//! bucket.save_at(&mut both, saved_at).unwrap();
//! other.save_at(&mut both, saved_at).unwrap();
//! let mut reader = &both[..];
//! let at = saved_at + Duration::from_millis(300);
//! Bucket::with_clock(q, ManualClock::new()).restore_at(&mut reader, at).unwrap();
//! let second = Bucket::with_clock(q, ManualClock::new());
//! second.restore_at(&mut reader, at).unwrap();
//! assert_eq!(second.available(), 10);
//! assert!(reader.is_empty());
//! ```

pub(crate) mod format;

use crate::gcra;
use crate::quota::{Quota, MAX_UNITS};
use core::fmt;
use core::time::Duration;
use format::{FrameReader, FrameWriter};
use std::io::{self, Read, Write};
use std::time::SystemTime;

/// The format version this build writes, and the only one it reads.
///
/// ```
/// assert_eq!(tollgate::persist::VERSION, 3);
/// ```
pub const VERSION: u16 = 3;

/// How far before the save's wall time a restore's may read, as a wall clock stepped back
/// (refilling nothing); beyond it: [`RestoreError::FromTheFuture`].
///
/// ```
/// assert_eq!(tollgate::persist::FUTURE_TOLERANCE.as_secs(), 600);
/// ```
pub const FUTURE_TOLERANCE: Duration = Duration::from_secs(600);

/// Why a saved state could not be restored. The limiter is left as it was, but for a keyed
/// table, which may have taken part of the file (which only withholds).
///
/// ```
/// use tollgate::{persist::RestoreError, Bucket, ManualClock, Quota};
/// let bucket = Bucket::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
/// assert!(matches!(bucket.restore(&b"not a state"[..]), Err(RestoreError::NotAState)));
/// assert!(matches!(bucket.restore(&b"TOLL"[..]), Err(RestoreError::Truncated)));
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum RestoreError {
    /// Reading failed (other than by ending early).
    Io(io::Error),
    /// The input ended before the end frame: a truncated or partly written file.
    Truncated,
    /// The input does not start with tollgate's magic number: not a saved state.
    NotAState,
    /// Saved by a format version this build does not read.
    UnsupportedVersion(u16),
    /// A checksum mismatch or a malformed frame: the file is damaged.
    Corrupt(&'static str),
    /// The file holds another limiter type.
    WrongLimiter {
        /// The type saved.
        saved: &'static str,
        /// The type restoring.
        restoring: &'static str,
    },
    /// Saved at a wall time later than the restore's by more than [`FUTURE_TOLERANCE`].
    FromTheFuture {
        /// How far ahead of the restore's wall clock the save is.
        ahead: Duration,
    },
    /// The limiter to restore into is misconfigured (a `KeyedLimiter` builder's error).
    Config(crate::ConfigError),
    /// A `MultiBucket` or a keyed table's policy saved with another number of quotas than the
    /// restoring one has.
    LimitsChanged {
        /// Quotas saved.
        saved: usize,
        /// Quotas of the restoring bucket.
        restoring: usize,
    },
    /// The pairs given to a keyed table's restore (`KeyedLimiterBuilder::restore_paired_at`)
    /// do not fit a pair of policies a key may go through: not one pair per quota here, or a
    /// pair naming a position past the saved policy's quotas.
    BadPairs {
        /// Pairs given.
        pairs: usize,
        /// Quotas of the restoring policy.
        quotas: usize,
        /// Quotas of the saved policy.
        saved: usize,
    },
}

impl RestoreError {
    /// An `io::Error` from a read: ending early is [`RestoreError::Truncated`].
    pub(crate) fn from_io(e: io::Error) -> RestoreError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            RestoreError::Truncated
        } else {
            RestoreError::Io(e)
        }
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::Io(e) => write!(f, "reading the saved state failed: {e}"),
            RestoreError::Truncated => f.write_str("the saved state is truncated"),
            RestoreError::NotAState => f.write_str("not a tollgate saved state (bad magic number)"),
            RestoreError::UnsupportedVersion(v) => {
                write!(f, "saved state format version {v} is not supported (this build reads {VERSION})")
            }
            RestoreError::Corrupt(why) => write!(f, "the saved state is corrupt: {why}"),
            RestoreError::WrongLimiter { saved, restoring } => {
                write!(f, "the saved state is a {saved}, not a {restoring}")
            }
            RestoreError::FromTheFuture { ahead } => write!(
                f,
                "the saved state is dated {ahead:?} after the wall clock (more than the tolerated step back)"
            ),
            RestoreError::LimitsChanged { saved, restoring } => write!(
                f,
                "the saved state has {saved} quotas, the restoring bucket {restoring}"
            ),
            RestoreError::Config(e) => write!(f, "cannot build the limiter to restore: {e}"),
            RestoreError::BadPairs {
                pairs,
                quotas,
                saved,
            } => write!(
                f,
                "{pairs} quota pairs do not fit a restoring policy of {quotas} quotas and a \
                 saved one of {saved}"
            ),
        }
    }
}

impl std::error::Error for RestoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RestoreError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Nanoseconds since the Unix epoch; a wall clock before 1970 cannot anchor a save.
pub(crate) fn wall_ns(t: SystemTime) -> io::Result<u128> {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "wall clock before 1970"))
}

/// The downtime (ns) from a save anchored at `saved_ns` to `now`: 0 for a wall clock that stepped
/// back (within [`FUTURE_TOLERANCE`]), saturating (any bucket is full after 584 years).
pub(crate) fn downtime(saved_ns: u128, now: SystemTime) -> Result<u64, RestoreError> {
    // A restore's clock before 1970 reads as 1970: earlier still refills nothing.
    let now_ns = wall_ns(now).unwrap_or(0);
    if now_ns >= saved_ns {
        return Ok(u64::try_from(now_ns - saved_ns).unwrap_or(u64::MAX));
    }
    let ahead = saved_ns - now_ns;
    if ahead > FUTURE_TOLERANCE.as_nanos() {
        let ahead = u64::try_from(ahead).map_or(Duration::MAX, Duration::from_nanos);
        return Err(RestoreError::FromTheFuture { ahead });
    }
    Ok(0)
}

/// The units a bucket in `state` lacks from full at `now` (a debt included), rounded up, in the
/// unit a save records: that of [`Quota::new`] for the quota's rate and burst, which a restore
/// rebuilds from the saved `tokens`, `per` and `burst` (a quota built by
/// [`Quota::with_scale`] counts in another unit; see [`Saved`]).
pub(crate) fn lack(state: u64, now: u64, quota: &Quota) -> u64 {
    Saved::of(quota).lack(state, now)
}

/// A quota as a save records it: its own unit and the one a restore reads the lack in
/// ([`Quota::new`]'s for the same rate and burst). Build once per quota on a save's path: the
/// second unit takes `Quota::new`'s search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    quota: Quota,
    /// The restore's unit (`Quota::new`'s scale), if it differs from the quota's own.
    rebuilt: Option<u64>,
}

impl Saved {
    /// `quota`, and the unit its saved lack is read in.
    pub(crate) fn of(quota: &Quota) -> Saved {
        // Always `Ok`: a quota's rate and burst passed `Quota::new` when it was built.
        let rebuilt = Quota::new(quota.tokens(), quota.per(), quota.burst())
            .ok()
            .map(|q| q.scale())
            .filter(|&s| s != quota.scale());
        Saved {
            quota: *quota,
            rebuilt,
        }
    }

    /// Whether this describes `quota` (for a cache keyed by the quota).
    #[cfg(feature = "keyed")]
    pub(crate) fn is_for(&self, quota: &Quota) -> bool {
        self.quota == *quota
    }

    /// The units a bucket in `state` lacks from full at `now` (a debt included), in the
    /// restore's unit, rounded up: converted from the quota's own unit when they differ, so a
    /// restore never reads fewer tokens lacked than the bucket lacked (saturating at the largest
    /// state, which restores as the largest debt).
    pub(crate) fn lack(&self, state: u64, now: u64) -> u64 {
        let own = state.saturating_sub(self.quota.earned_floor(now));
        match self.rebuilt {
            None => own,
            Some(to) => {
                let units =
                    (u128::from(own) * u128::from(to)).div_ceil(u128::from(self.quota.scale()));
                u64::try_from(units).map_or(MAX_UNITS, |u| u.min(MAX_UNITS))
            }
        }
    }
}

/// The state, under `new` at reading `now`, of a bucket that lacked `lack` units of quota `old`
/// when saved, `down` nanoseconds of downtime ago: the lack minus the refill over the downtime
/// (both in `old`'s units, the refill rounded down), then converted to `new` as
/// [`gcra::rescale`] converts (balance carried, capped at the new burst; a debt keeps its due
/// instant). Never lower than a full bucket, never above the largest state.
pub(crate) fn restored_state(lack: u64, down: u64, now: u64, old: &Quota, new: &Quota) -> u64 {
    // `earned_floor(d)` is the refill over a span of `d` (horizon-capped), rounded down.
    let lack = lack.saturating_sub(old.earned_floor(down));
    if lack == 0 && old == new {
        return gcra::FULL;
    }
    let state = old.earned_ceil(now).saturating_add(lack).min(MAX_UNITS);
    if old == new {
        state
    } else {
        gcra::rescale(state, now, old, new)
    }
}

/// The states, under a policy's quotas `new` at reading `now`, of buckets saved as `saved`
/// (each quota and its lack), `down` nanoseconds ago: each through [`restored_state`], written
/// to `out[..new.len()]`.
///
/// Which saved quota a restoring one takes its state from does not follow position (a policy
/// reordered across a restart would hand a per-day quota a per-second one's balance): first an
/// equal quota, then the one of the same period (a quota whose rate or burst changed) where
/// exactly one saved and one restoring quota of that period are left, each saved quota taken
/// once. A restoring quota left with no pair (several changed at once, or another number of
/// quotas: no pairs then) takes the strictest of the states the saved quotas left over convert
/// to: which became which cannot be told, and a restore only ever withholds.
pub(crate) fn restored_states(
    saved: &[(Quota, u64)],
    down: u64,
    now: u64,
    new: &[Quota],
    out: &mut [u64],
) {
    const NONE: usize = usize::MAX;
    let (ns, nn) = (saved.len(), new.len());
    let mut from = [NONE; crate::limits::MAX_LIMITS];
    let mut taken = [false; crate::limits::MAX_LIMITS];
    if ns == nn {
        for (j, q) in new.iter().enumerate() {
            if let Some(i) = (0..ns).find(|&i| !taken[i] && saved[i].0 == *q) {
                from[j] = i;
                taken[i] = true;
            }
        }
        // By period only where it names one quota on each side: of two changed quotas of one
        // period, which became which cannot be told (paired in order, a reordered policy's
        // small burst would take the large one's balance), so both are left to the strictest.
        for (j, q) in new.iter().enumerate() {
            if from[j] != NONE {
                continue;
            }
            let per = q.per();
            let mut candidates = (0..ns).filter(|&i| !taken[i] && saved[i].0.per() == per);
            let (Some(i), None) = (candidates.next(), candidates.next()) else {
                continue;
            };
            let rivals = (0..nn).filter(|&k| from[k] == NONE && new[k].per() == per);
            if rivals.count() == 1 {
                from[j] = i;
                taken[i] = true;
            }
        }
    }
    let state = |i: usize, q: &Quota| restored_state(saved[i].1, down, now, &saved[i].0, q);
    for (j, q) in new.iter().enumerate() {
        out[j] = match from[j] {
            NONE => (0..ns)
                .filter(|&i| !taken[i])
                .map(|i| state(i, q))
                .max()
                .unwrap_or(gcra::FULL),
            i => state(i, q),
        };
    }
}

/// Saving a limiter's state and restoring it in another process (feature `persist`); the
/// format and the guarantees are [the module's](self).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tollgate::persist::Persist;
/// use tollgate::{Bucket, ManualClock, Quota, ShardedBucket};
///
/// fn carry_over(from: &impl Persist, to: &impl Persist, downtime: Duration) {
///     let mut file = Vec::new();
///     from.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
///     to.restore_at(&file[..], SystemTime::UNIX_EPOCH + downtime).unwrap();
/// }
/// let q = Quota::per_second(10).unwrap();
/// let old = Bucket::with_clock(q, ManualClock::new());
/// old.try_acquire(10).unwrap();
/// let new = Bucket::with_clock(q, ManualClock::new());
/// carry_over(&old, &new, Duration::from_millis(300));
/// assert_eq!(new.available(), 3);
/// let sharded = ShardedBucket::with_clock(q, 2, ManualClock::new());
/// carry_over(&sharded, &ShardedBucket::with_clock(q, 4, ManualClock::new()), Duration::ZERO);
/// ```
pub trait Persist: sealed::Frames {
    /// Writes the state to `w`, anchored to the wall clock ([`SystemTime::now`]). Decisions go
    /// on meanwhile; each state saved is the one at the save's clock reading or a later one.
    /// Errors: only `w`'s, or a wall clock before 1970.
    ///
    /// ```
    /// use tollgate::persist::Persist;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// bucket.try_acquire(4).unwrap();
    /// let mut file = Vec::new();
    /// Persist::save(&bucket, &mut file).unwrap();
    /// let restarted = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// Persist::restore(&restarted, &file[..]).unwrap();
    /// assert!(restarted.available() <= 7); // 6, plus what the (tiny) downtime refilled
    /// ```
    fn save<W: Write>(&self, w: W) -> io::Result<()> {
        save_with(self, w, SystemTime::now)
    }

    /// [`save`](Persist::save) with the wall-clock time given: what the save is anchored to.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::persist::Persist;
    /// use tollgate::{ManualClock, Smooth};
    /// let limiter = Smooth::bursty_with_clock(1.0, std::time::Duration::from_secs(1), ManualClock::new()).unwrap();
    /// let mut file = Vec::new();
    /// Persist::save_at(&limiter, &mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// assert_eq!(&file[..8], b"TOLLGATE");
    /// ```
    fn save_at<W: Write>(&self, w: W, wall: SystemTime) -> io::Result<()> {
        save_with(self, w, || wall)
    }

    /// Restores a state written by [`save`](Persist::save), refilled over the downtime on the
    /// wall clock ([`SystemTime::now`]); it never adds tokens, and on error changes nothing but
    /// a keyed table's entries read before the error, which only withhold (then `drain`: see
    /// [the module](self)).
    ///
    /// ```
    /// use tollgate::persist::{Persist, RestoreError};
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
    /// let mut file = Vec::new();
    /// Persist::save(&bucket, &mut file).unwrap();
    /// file.truncate(file.len() - 1);
    /// assert!(matches!(Persist::restore(&bucket, &file[..]), Err(RestoreError::Truncated)));
    /// ```
    fn restore<R: Read>(&self, r: R) -> Result<(), RestoreError> {
        restore_with(self, r, SystemTime::now)
    }

    /// [`restore`](Persist::restore) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::persist::Persist;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::from(Quota::per_second(10).unwrap());
    /// let bucket = MultiBucket::with_clock(limits.clone(), ManualClock::new());
    /// bucket.try_acquire(10).unwrap();
    /// let mut file = Vec::new();
    /// Persist::save_at(&bucket, &mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// let restarted = MultiBucket::with_clock(limits, ManualClock::new());
    /// Persist::restore_at(&restarted, &file[..], SystemTime::UNIX_EPOCH + Duration::from_millis(300)).unwrap();
    /// assert_eq!(restarted.available(), 3);
    /// ```
    fn restore_at<R: Read>(&self, r: R, wall: SystemTime) -> Result<(), RestoreError> {
        restore_with(self, r, || wall)
    }
}

impl<T: sealed::Frames + ?Sized> Persist for T {}

/// The limiter's clock (in [`Frames::measure`](sealed::Frames::measure)), then the wall clock,
/// so a restore refills no more than the downtime.
fn save_with<T: sealed::Frames + ?Sized, W: Write>(
    limiter: &T,
    mut w: W,
    wall: impl FnOnce() -> SystemTime,
) -> io::Result<()> {
    let measured = limiter.measure();
    let wall = wall_ns(wall())?;
    let mut fw = FrameWriter::start(&mut w as &mut dyn Write, T::LIMITER, wall)?;
    limiter.write(measured, &mut fw)?;
    fw.finish().map(drop)
}

/// The frames, the wall clock, then the limiter's clock (in
/// [`Frames::apply`](sealed::Frames::apply)): the downtime ends no later than that reading.
fn restore_with<T: sealed::Frames + ?Sized, R: Read>(
    limiter: &T,
    mut r: R,
    wall: impl FnOnce() -> SystemTime,
) -> Result<(), RestoreError> {
    let mut fr = FrameReader::open(&mut r as &mut dyn Read, T::LIMITER)?;
    let read = limiter.read(&mut fr)?;
    let down = downtime(fr.wall_ns(), wall())?;
    limiter.apply(read, &mut fr, down)
}

/// The four [`Persist`] methods as inherent methods of a limiter type (no import needed).
macro_rules! inherent_persist {
    (impl[$($generics:tt)*] $ty:ty) => {
        #[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
        impl<$($generics)*> $ty {
            /// [`Persist::save`](crate::persist::Persist::save) (feature `persist`).
            pub fn save<W: std::io::Write>(&self, w: W) -> std::io::Result<()> {
                crate::persist::Persist::save(self, w)
            }

            /// [`Persist::save_at`](crate::persist::Persist::save_at) (feature `persist`).
            pub fn save_at<W: std::io::Write>(
                &self,
                w: W,
                wall: std::time::SystemTime,
            ) -> std::io::Result<()> {
                crate::persist::Persist::save_at(self, w, wall)
            }

            /// [`Persist::restore`](crate::persist::Persist::restore) (feature `persist`).
            pub fn restore<R: std::io::Read>(
                &self,
                r: R,
            ) -> Result<(), crate::persist::RestoreError> {
                crate::persist::Persist::restore(self, r)
            }

            /// [`Persist::restore_at`](crate::persist::Persist::restore_at) (feature `persist`).
            pub fn restore_at<R: std::io::Read>(
                &self,
                r: R,
                wall: std::time::SystemTime,
            ) -> Result<(), crate::persist::RestoreError> {
                crate::persist::Persist::restore_at(self, r, wall)
            }
        }
    };
}
pub(crate) use inherent_persist;

pub(crate) mod sealed {
    use super::format::{kind, Cursor, FrameReader, FrameWriter, Limiter, Payload};
    use super::RestoreError;
    use std::io::{self, Read, Write};

    /// A limiter whose state is one frame (all but the keyed ones).
    pub trait OneFrame {
        /// The limiter type named in the header.
        const LIMITER: Limiter;
        /// The kind of its frame.
        const KIND: u8;
        /// What a restore reads from the frame.
        type Saved;
        /// Reads the limiter's clock, then its state, into the frame's payload.
        fn payload(&self) -> Payload;
        /// Decodes and checks the payload (the caller checks its end).
        fn decode(&self, c: &mut Cursor<'_>) -> Result<Self::Saved, RestoreError>;
        /// Applies `saved` after `down` nanoseconds of downtime, at a clock reading taken now.
        fn apply(&self, saved: Self::Saved, down: u64);
    }

    /// Every frame read before the wall clock: an error changes nothing.
    impl<T: OneFrame> Frames for T {
        const LIMITER: Limiter = T::LIMITER;
        type Measured = Payload;
        type Read = T::Saved;

        fn measure(&self) -> Payload {
            self.payload()
        }
        fn write(&self, p: Payload, fw: &mut FrameWriter<&mut dyn Write>) -> io::Result<()> {
            fw.frame(T::KIND, &p.0)
        }
        fn read(&self, fr: &mut FrameReader<&mut dyn Read>) -> Result<T::Saved, RestoreError> {
            let mut c = fr.expect(T::KIND)?;
            let saved = self.decode(&mut c)?;
            c.end()?;
            fr.expect(kind::END)?;
            Ok(saved)
        }
        fn apply(
            &self,
            saved: T::Saved,
            _: &mut FrameReader<&mut dyn Read>,
            down: u64,
        ) -> Result<(), RestoreError> {
            OneFrame::apply(self, saved, down);
            Ok(())
        }
    }

    /// A limiter's half of [`Persist`](super::Persist): its frames (sealed).
    pub trait Frames {
        /// The limiter type named in the header.
        const LIMITER: Limiter;
        /// What a save reads before the wall clock.
        type Measured;
        /// What a restore reads before the wall clock.
        type Read;

        /// Reads the limiter's clock, then what the save needs before the wall clock.
        fn measure(&self) -> Self::Measured;

        /// Writes the frames between the header and the end.
        fn write(
            &self,
            measured: Self::Measured,
            fw: &mut FrameWriter<&mut dyn Write>,
        ) -> io::Result<()>;

        /// Reads and checks the frames a restore needs before the wall clock.
        fn read(&self, fr: &mut FrameReader<&mut dyn Read>) -> Result<Self::Read, RestoreError>;

        /// Applies what was read after `down` ns of downtime, at a clock reading taken now (a
        /// keyed table streams its entries from `fr` here).
        fn apply(
            &self,
            read: Self::Read,
            fr: &mut FrameReader<&mut dyn Read>,
            down: u64,
        ) -> Result<(), RestoreError>;
    }
}
