//! [`Snapshot`]: what one decision knows about its bucket right after it.

use core::time::Duration;

/// The bucket right after one decision, from the decision's own clock reading and state (the
/// cost taken after an admission; as found after a refusal): for `RateLimit` headers.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, Limiter, ManualClock, Quota, Snapshot};
/// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
/// let (verdict, snaps) = bucket.decide_snapshots(&(), 3);
/// assert_eq!(verdict, Ok(()));
/// assert_eq!(snaps.tightest().1, Snapshot::new(7, Duration::from_millis(300)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshot {
    remaining: u64,
    until_full: Duration,
}

impl Snapshot {
    /// A bucket holding `remaining` whole tokens, full again after `until_full`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = tollgate::Snapshot::new(2, Duration::from_secs(1));
    /// assert_eq!((s.remaining(), s.until_full()), (2, Duration::from_secs(1)));
    /// ```
    pub const fn new(remaining: u64, until_full: Duration) -> Snapshot {
        Snapshot {
            remaining,
            until_full,
        }
    }

    /// Whole tokens left right after the decision (0 while the bucket is in debt).
    ///
    /// ```
    /// assert_eq!(tollgate::Snapshot::new(4, std::time::Duration::ZERO).remaining(), 4);
    /// ```
    pub const fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the bucket is full again if nothing consumes (`MAX`: beyond the horizon).
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Snapshot::new(0, Duration::from_secs(3)).until_full(), Duration::from_secs(3));
    /// ```
    pub const fn until_full(&self) -> Duration {
        self.until_full
    }
}
