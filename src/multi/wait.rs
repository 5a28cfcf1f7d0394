//! Waiting on a policy: [`MultiBucket::reserve`] → [`MultiReservation`], and the blocking
//! calls built on it: [`gcra::reserve`] and [`gcra::cancel`] applied to every quota in one
//! atomic step with one due instant (when the last quota holds the cost), so every quota keeps
//! its window bound.

use super::MultiBucket;
use crate::clock::{saturating_nanos, Clock, Timer};
use crate::error::Denied;
use crate::gcra::{self, all::pad};
use crate::limits::MAX_LIMITS;
use crate::quota::Quota;
use core::fmt;
use core::time::Duration;

/// What a reservation remembers (padded as the store is).
#[derive(Clone, Copy)]
struct Ticket {
    /// Each quota's state right before the reservation: what a cancellation restores.
    before: [u64; MAX_LIMITS],
    /// Each quota's state right after the reservation.
    after: [u64; MAX_LIMITS],
    /// The instant at which every quota's tokens are due.
    due: u64,
}

impl Ticket {
    fn new<const N: usize>(before: [u64; N], after: [u64; N], due: u64) -> Ticket {
        let (before, after) = (pad(&before), pad(&after));
        Ticket { before, after, due }
    }
}

fn quota_at(quotas: &[Quota], i: usize) -> &Quota {
    &quotas[i.min(quotas.len() - 1)]
}

/// Reserves `cost` on every quota at `now` if the tokens are due within `limit` ns: the states
/// to write and the ticket, or the refusal (nothing to write).
///
/// Two passes: `due` is the largest per-quota due instant; then every quota is debited **as of
/// `due`**, when the caller acts (as of `now`, a quota due earlier would refill until `due` and
/// could admit its whole burst again on top of this). A reading ahead of the others is
/// tolerated as a stale one is: every window bound holds.
fn reserve_states<const N: usize>(
    states: [u64; N],
    now: u64,
    quotas: &[Quota],
    cost: u64,
    limit: u64,
) -> (Option<[u64; N]>, Result<Ticket, Denied>) {
    // `ExceedsBurst` first, whatever the order of the quotas.
    if quotas.iter().any(|q| cost > q.burst()) {
        return (None, Err(Denied::ExceedsBurst));
    }
    if cost == 0 {
        // Due at once, takes nothing (as `Bucket::reserve`), even while a quota is in debt.
        return (None, Ok(Ticket::new(states, states, now)));
    }
    let mut due = now;
    for (i, &state) in states.iter().enumerate() {
        match gcra::reserve(state, now, quota_at(quotas, i), cost) {
            Ok((_, at)) => due = due.max(at),
            Err(denied) => return (None, Err(denied)),
        }
    }
    let wait = due - now;
    if wait > limit {
        return (None, Err(Denied::RetryAfter(Duration::from_nanos(wait))));
    }
    let mut next = states;
    for (i, &state) in states.iter().enumerate() {
        match gcra::reserve(state, due, quota_at(quotas, i), cost) {
            Ok((after, _)) => next[i] = after,
            Err(denied) => return (None, Err(denied)),
        }
    }
    (Some(next), Ok(Ticket::new(states, next, due)))
}

/// [`gcra::cancel`]'s rule on every quota, with one due instant: a quota gets its state from
/// before back, not `after − cost` (that would take the refill until `due` it was debited as of).
///
/// Only the policy's quotas are judged, and the padding slots (one quota in the pair word, three
/// in the four words) are written as copies of the last: a padding slot that matched on its own
/// would write the word while no quota gets anything back, a needless shared write that can
/// fail a concurrent decision's CAS. Nothing is written unless some quota gets its tokens back.
fn cancel_states<const N: usize>(
    states: [u64; N],
    now: u64,
    quotas: &[Quota],
    ticket: &Ticket,
    due: u64,
    cost: u64,
) -> (Option<[u64; N]>, ()) {
    let mut next = states;
    let mut any = false;
    for (i, quota) in quotas.iter().enumerate() {
        if gcra::cancel(states[i], now, quota, ticket.after[i], due, cost).is_some() {
            next[i] = ticket.before[i];
            any = true;
        }
    }
    (any.then(|| pad(&next[..quotas.len()])), ())
}

impl<C: Clock> MultiBucket<C> {
    /// [`Bucket::reserve`](crate::Bucket::reserve) on every quota in one atomic step, due when
    /// the last quota's tokens are; errors as its, over the policy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(1).unwrap().with_burst(4).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// assert_eq!(policy.reserve(4).unwrap().delay(), Duration::ZERO);
    /// // The first quota still holds 6; the second needs 4 s: due when both are.
    /// assert_eq!(policy.reserve(4).unwrap().delay(), Duration::from_secs(4));
    /// ```
    pub fn reserve(&self, cost: u64) -> Result<MultiReservation<'_, C>, Denied> {
        self.reserve_within(self.clock.now(), cost, u64::MAX)
    }

    /// A reservation only if every quota holds `cost` now, else `try_acquire`'s refusal; one
    /// atomic step either way (for [`GiveBack`](crate::GiveBack)).
    pub(crate) fn try_reserve_now(&self, cost: u64) -> Result<MultiReservation<'_, C>, Denied> {
        if cost > 0 {
            // The refusal's wait and `ExceedsBurst` exactly as `try_acquire` reports them.
            self.check_now(cost).map_err(Denied::from)?;
        }
        self.reserve_within(self.clock.now(), cost, 0)
    }

    fn reserve_within(
        &self,
        now: u64,
        cost: u64,
        limit: u64,
    ) -> Result<MultiReservation<'_, C>, Denied> {
        let quotas = self.limits.quotas();
        let ticket = on_store!(self, |_, s| s
            .update(|states| reserve_states(states, now, quotas, cost, limit)))?;
        Ok(MultiReservation {
            policy: self,
            cost,
            ticket,
        })
    }
}

impl<C: Timer> MultiBucket<C> {
    /// [`Bucket::acquire`](crate::Bucket::acquire) on every quota: reserves, then sleeps on the
    /// clock until the tokens are due; returns the scheduled wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, Limits, ManualClock, MultiBucket, Quota};
    /// let clock = ManualClock::new();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, clock.clone());
    /// assert_eq!(policy.acquire(5), Ok(Duration::ZERO));
    /// assert_eq!(policy.acquire(5), Ok(Duration::from_secs(1)));
    /// assert_eq!(clock.now(), 1_000_000_000);
    /// ```
    pub fn acquire(&self, cost: u64) -> Result<Duration, Denied> {
        self.try_acquire_for(cost, Duration::MAX)
    }

    /// [`acquire`](MultiBucket::acquire) only if the wait is at most `timeout`, else
    /// `Err(RetryAfter(wait))` and nothing is consumed. `timeout` zero decides as
    /// [`try_acquire`](MultiBucket::try_acquire).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// assert_eq!(policy.try_acquire_for(5, Duration::ZERO), Ok(Duration::ZERO));
    /// assert_eq!(policy.try_acquire_for(5, Duration::from_millis(500)), Err(Denied::RetryAfter(Duration::from_secs(1))));
    /// assert_eq!(policy.try_acquire_for(1, Duration::from_millis(500)), Ok(Duration::from_millis(200)));
    /// ```
    pub fn try_acquire_for(&self, cost: u64, timeout: Duration) -> Result<Duration, Denied> {
        if cost == 0 {
            return Ok(Duration::ZERO);
        }
        let now = self.clock.now();
        let reservation = self.reserve_within(now, cost, saturating_nanos(timeout))?;
        Ok(crate::wait::sleep_until(
            &self.clock,
            now,
            reservation.ticket.due,
        ))
    }
}

/// Tokens taken from every quota by [`MultiBucket::reserve`], as a
/// [`Reservation`](crate::Reservation) takes them from a bucket. Dropping it keeps them taken.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
/// let limits = Limits::new([Quota::per_second(10).unwrap().with_burst(2).unwrap(), Quota::per_second(100).unwrap()]).unwrap();
/// let policy = MultiBucket::with_clock(limits, ManualClock::new());
/// policy.reserve(2).unwrap();
/// let r = policy.reserve(2).unwrap();
/// assert_eq!(r.delay(), Duration::from_millis(200));
/// r.cancel(); // nothing admitted since: every quota gets its tokens back
/// assert_eq!(policy.reserve(2).unwrap().delay(), Duration::from_millis(200));
/// ```
pub struct MultiReservation<'a, C> {
    policy: &'a MultiBucket<C>,
    cost: u64,
    ticket: Ticket,
}

impl<C: Clock> MultiReservation<'_, C> {
    /// The time until every quota's reserved tokens are due; zero once due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let clock = ManualClock::new();
    /// let policy = MultiBucket::with_clock(Limits::from(Quota::per_second(10).unwrap().with_burst(1).unwrap()), clock.clone());
    /// policy.reserve(1).unwrap();
    /// let r = policy.reserve(1).unwrap();
    /// clock.advance(Duration::from_millis(60));
    /// assert_eq!(r.delay(), Duration::from_millis(40));
    /// ```
    pub fn delay(&self) -> Duration {
        let now = self.policy.clock.now();
        Duration::from_nanos(self.ticket.due.saturating_sub(now))
    }

    /// Gives the tokens back in one atomic step, if not yet due, to every quota on which nothing
    /// was admitted since ([`gcra::cancel`]'s rule per quota); the others keep them consumed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limits, ManualClock, MultiBucket, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap().with_burst(1).unwrap(), Quota::per_second(10).unwrap()]).unwrap();
    /// let policy = MultiBucket::with_clock(limits, ManualClock::new());
    /// let r = policy.reserve(1).unwrap();
    /// policy.reserve(1).unwrap(); // kept
    /// r.cancel(); // a later reservation holds: nothing comes back
    /// assert_eq!(policy.reserve(1).unwrap().delay(), Duration::from_millis(200));
    /// ```
    pub fn cancel(self) {
        self.give_back(false);
    }

    /// Gives back a take of an [`all_of`](crate::all_of) chain that a later limiter refused:
    /// [`cancel`](MultiReservation::cancel)'s rule but for "not yet due".
    pub(crate) fn undo(self) {
        self.give_back(true);
    }

    fn give_back(self, any_time: bool) {
        if self.cost == 0 {
            return;
        }
        let now = self.policy.clock.now();
        let quotas = self.policy.limits.quotas();
        let (t, cost) = (&self.ticket, self.cost);
        let due = if any_time { now } else { t.due };
        on_store!(self.policy, |_, s| s
            .update(|states| cancel_states(states, now, quotas, t, due, cost)))
    }
}

impl<C> fmt::Debug for MultiReservation<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.policy.limits.quotas().len();
        f.debug_struct("MultiReservation")
            .field("cost", &self.cost)
            .field("due_ns", &self.ticket.due)
            .field("after", &&self.ticket.after[..len])
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::gcra::all::pad;
    use crate::limits::MAX_LIMITS;
    use crate::{Limits, ManualClock, MultiBucket, Quota};
    use core::time::Duration;

    /// Every slot of the store, the padding included (one quota: the pair word's second slot;
    /// three: the fourth word).
    fn raw(policy: &MultiBucket<ManualClock>) -> [u64; MAX_LIMITS] {
        on_store!(policy, |_, s| pad(&s.load()))
    }

    /// A cancel that gives nothing back to any quota leaves the store as it found it, so it
    /// makes no concurrent decision's CAS fail: a padding slot never matches on its own. The
    /// reservation is followed by a `drain` (every quota raised past it, so none gives anything
    /// back); a padding slot stays a copy of the slot it repeats.
    #[test]
    fn a_cancel_that_gives_nothing_back_writes_nothing() {
        let second = Quota::per_second(10).unwrap();
        let minute = Quota::new(100, Duration::from_secs(60), 100).unwrap();
        let hour = Quota::new(1000, Duration::from_secs(3600), 1000).unwrap();
        for quotas in [&[second][..], &[second, minute, hour][..]] {
            let n = quotas.len();
            let limits = Limits::new(quotas.iter().copied()).unwrap();
            let policy = MultiBucket::with_clock(limits, ManualClock::new());
            let r = policy.reserve(1).unwrap();
            policy.drain();
            let drained = raw(&policy);
            assert_eq!(
                drained,
                pad(&drained[..n]),
                "{n} quotas: padding after a drain"
            );
            r.cancel();
            assert_eq!(
                raw(&policy),
                drained,
                "{n} quotas: a cancel of nothing wrote"
            );
        }
    }
}
