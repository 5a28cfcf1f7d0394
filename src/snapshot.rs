//! [`Snapshot`]: what one decision knows about its bucket right after it.

use core::time::Duration;

/// The bucket right after one decision, computed from the same clock reading and the same state
/// word as the decision itself (no second clock read): what HTTP `RateLimit` /
/// `X-RateLimit-Remaining` headers and governor's "remaining burst capacity" need.
///
/// After an admission it describes the bucket with the cost taken; after a refusal, the bucket
/// as the refusal found it (a refusal changes nothing).
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
    /// A snapshot of a bucket holding `remaining` whole tokens that is full again after
    /// `until_full`. For limiters stored elsewhere (a Redis backend, a test double).
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

    /// How long until the bucket is full again if nothing else consumes: `Duration::ZERO` when
    /// it is full, `Duration::MAX` when it never will be within the clock's horizon.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Snapshot::new(0, Duration::from_secs(3)).until_full(), Duration::from_secs(3));
    /// ```
    pub const fn until_full(&self) -> Duration {
        self.until_full
    }
}
