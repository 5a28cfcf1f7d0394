//! [`Reservation`]: tokens taken ahead, which can be given back.

use super::Ticket;
use crate::bucket::Bucket;
use crate::clock::Clock;
use crate::gcra;
use core::fmt;
use core::time::Duration;

/// Tokens taken ahead by [`Bucket::reserve`]: wait [`delay`](Reservation::delay) before acting,
/// or give them back with [`cancel`](Reservation::cancel). Dropping it keeps the tokens taken.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Bucket, ManualClock, Quota};
/// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), ManualClock::new());
/// bucket.reserve(2).unwrap(); // dropped: the tokens stay taken
/// let r = bucket.reserve(2).unwrap();
/// assert_eq!(r.delay(), Duration::from_millis(200));
/// r.cancel();
/// assert_eq!(bucket.reserve(2).unwrap().delay(), Duration::from_millis(200));
/// ```
pub struct Reservation<'a, C> {
    pub(super) bucket: &'a Bucket<C>,
    pub(super) cost: u64,
    pub(super) ticket: Ticket,
}

impl<C: Clock> Reservation<'_, C> {
    /// The time until the reserved tokens are due, on the bucket's clock; zero once due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(1).unwrap(), clock.clone());
    /// bucket.reserve(1).unwrap();
    /// let r = bucket.reserve(1).unwrap();
    /// assert_eq!(r.delay(), Duration::from_millis(100));
    /// clock.advance(Duration::from_millis(60));
    /// assert_eq!(r.delay(), Duration::from_millis(40));
    /// clock.advance(Duration::from_millis(60));
    /// assert_eq!(r.delay(), Duration::ZERO);
    /// ```
    pub fn delay(&self) -> Duration {
        self.delay_from(self.bucket.clock().now())
    }

    /// The time from the clock reading `now` until the tokens are due, zero if by then (Go's
    /// `DelayFrom`); `delay_from(0)` is the due instant.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(1).unwrap(), ManualClock::new());
    /// bucket.reserve(1).unwrap();
    /// let r = bucket.reserve(1).unwrap(); // due at 100 ms
    /// assert_eq!(r.delay_from(0), Duration::from_millis(100));
    /// assert_eq!(r.delay_from(30_000_000), Duration::from_millis(70));
    /// assert_eq!(r.delay_from(200_000_000), Duration::ZERO);
    /// ```
    pub fn delay_from(&self, now: u64) -> Duration {
        Duration::from_nanos(self.ticket.due.saturating_sub(now))
    }

    /// Gives all the tokens back, restoring the state from before, if nothing was admitted since
    /// ([`gcra::cancel`]), it is not yet due (Go's rule), and [`Bucket::set_quota`] was not called
    /// since. Otherwise they stay consumed: no window ever admits more than `burst + rate·Δ`.
    /// Nested reservations cancelled in reverse order all come back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Bucket, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let bucket = Bucket::with_clock(Quota::per_second(10).unwrap().with_burst(2).unwrap(), clock.clone());
    /// bucket.reserve(2).unwrap();
    /// let r = bucket.reserve(2).unwrap(); // due at 200 ms
    /// clock.advance(Duration::from_millis(100));
    /// r.cancel(); // nothing admitted since: both tokens come back
    /// assert_eq!(bucket.reserve(2).unwrap().delay(), Duration::from_millis(100));
    ///
    /// let r = bucket.reserve(1).unwrap();
    /// bucket.reserve(1).unwrap(); // kept
    /// r.cancel(); // a later reservation holds: nothing comes back
    /// assert_eq!(bucket.reserve(1).unwrap().delay(), Duration::from_millis(400));
    /// ```
    pub fn cancel(self) {
        self.give_back(false);
    }

    /// Gives back a take of an [`all_of`](crate::all_of) chain that a later limiter refused:
    /// [`cancel`](Reservation::cancel)'s rule but for "not yet due", which a take fails at once.
    pub(crate) fn undo(self) {
        self.give_back(true);
    }

    /// [`cancel`](Reservation::cancel), but for "not yet due" if `any_time`.
    fn give_back(self, any_time: bool) {
        if self.cost == 0 {
            return;
        }
        let now = self.bucket.clock().now();
        let t = self.ticket;
        let cost = self.cost;
        let bucket = self.bucket;
        // No reconfiguration can run between the check below and the CAS.
        let _reconfiguration = bucket.exclude_reconfiguration();
        bucket.update_with_epoch(|state, epoch, quota| {
            // Any reconfiguration since the reservation changed the epoch bit or the slot's
            // generation (the quota comparison only guards a generation wrap).
            if epoch != t.epoch
                || bucket.quota_generation(epoch) != t.generation
                || *quota != t.quota
            {
                return (None, ());
            }
            // The state before, not `after − cost`: a bucket that was full comes back full,
            // keeping no unit of rounding.
            let due = if any_time { now } else { t.due };
            let back = gcra::cancel(state, now, quota, t.after, due, cost).map(|_| t.before);
            (back, ())
        });
    }
}

impl<C> fmt::Debug for Reservation<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("cost", &self.cost)
            .field("due_ns", &self.ticket.due)
            .field("after", &self.ticket.after)
            .field("quota", &self.ticket.quota)
            .finish_non_exhaustive()
    }
}
