//! Waiting on a policy: [`MultiBucket::reserve`] → [`MultiReservation`], and the blocking
//! [`MultiBucket::acquire`] / [`MultiBucket::try_acquire_for`] built on it.
//!
//! The primitive is the bucket's ([`gcra::reserve`]) applied to every quota in one atomic step:
//! the reservation is due when the last quota holds the cost (the largest per-quota due
//! instant), and every quota is debited as of that instant (see `reserve_states`). Cancelling
//! applies [`gcra::cancel`] to each quota with that due instant, in one atomic step: a quota
//! gets the tokens back iff nothing was admitted on it since and the reservation is not yet
//! due, the bucket's all-or-nothing rule per quota, so every quota keeps its window bound.

use super::{MultiBucket, Store};
use crate::clock::{saturating_nanos, Clock, Timer};
use crate::error::Denied;
use crate::gcra;
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

/// The quota at padded index `i`.
fn quota_at(quotas: &[Quota], i: usize) -> &Quota {
    &quotas[i.min(quotas.len() - 1)]
}

/// Reserves `cost` on every quota in `states` at `now`, if the tokens are due within `limit`
/// nanoseconds: the states to write and the ticket, or the refusal (nothing to write).
///
/// Two passes: the first finds the instant `due` at which every quota holds `cost` (the largest
/// per-quota due instant); the second debits every quota **as of `due`**, the instant the caller
/// acts (`gcra::reserve` at reading `due`, where each quota holds the cost). Debiting a quota
/// whose own tokens are there earlier as of `now` instead would let it refill, between `now` and
/// `due`, tokens that the caller only spends at `due`: at `due` that quota could then admit its
/// whole burst again on top of this reservation. As of `due`, each quota sees one more decision
/// at a reading ahead of the others, which the bucket's arithmetic tolerates as it tolerates a
/// stale reading: every quota's window bound holds at the instants callers act.
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
        let mut after = [0; MAX_LIMITS];
        after[..N].copy_from_slice(&states);
        return (
            None,
            Ok(Ticket {
                before: after,
                after,
                due: now,
            }),
        );
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
    let (mut before, mut after) = ([0; MAX_LIMITS], [0; MAX_LIMITS]);
    before[..N].copy_from_slice(&states);
    after[..N].copy_from_slice(&next);
    (Some(next), Ok(Ticket { before, after, due }))
}

/// Applies the bucket's cancellation rule to every quota in `states`, with the reservation's
/// one due instant (`due`: the ticket's, or the reading for a take given back): all or nothing
/// on each quota, which gets its state from before the reservation back. Not `after − cost`: a
/// quota whose tokens were there before the due instant was debited as of it, so that would
/// take away its refill until then.
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
    for (i, &state) in states.iter().enumerate() {
        let quota = quota_at(quotas, i);
        if gcra::cancel(state, now, quota, ticket.after[i], due, cost).is_some() {
            next[i] = ticket.before[i];
            any = true;
        }
    }
    (any.then_some(next), ())
}

impl<C: Clock> MultiBucket<C> {
    /// Takes `cost` tokens from every quota now, possibly ahead of their refill, in one atomic
    /// step, and never blocks: the [`MultiReservation`] says how long to wait (until the last
    /// quota's tokens are due) and can give the tokens back. Later callers queue behind it on
    /// every quota. Dropping it keeps the tokens taken.
    ///
    /// Errors: [`Denied::ExceedsBurst`] when `cost` exceeds the smallest burst, and nothing is
    /// taken. (`RetryAfter` only if a quota's queue of reservations already reaches past the
    /// state's range or the horizon.) Cost 0 is due at once and takes nothing.
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

    /// Waits until `cost` tokens are admitted by every quota, then takes them; returns the
    /// scheduled wait. As [`Bucket::acquire`](crate::Bucket::acquire): the tokens are reserved
    /// first (one atomic step), then the thread sleeps on the clock until they are due (a
    /// [`ManualClock`](crate::ManualClock) advances itself).
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
    pub fn acquire(&self, cost: u64) -> Result<Duration, Denied>
    where
        C: Timer,
    {
        self.try_acquire_for(cost, Duration::MAX)
    }

    /// Like [`acquire`](MultiBucket::acquire), but only if the wait is at most `timeout`;
    /// otherwise `Err(RetryAfter(wait))` and nothing is consumed (decided inside the one atomic
    /// step). `timeout` zero decides as [`try_acquire`](MultiBucket::try_acquire).
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
    pub fn try_acquire_for(&self, cost: u64, timeout: Duration) -> Result<Duration, Denied>
    where
        C: Timer,
    {
        if cost == 0 {
            return Ok(Duration::ZERO);
        }
        let now = self.clock.now();
        let reservation = self.reserve_within(now, cost, saturating_nanos(timeout))?;
        let due = reservation.ticket.due;
        // A fresh reading: this thread may have stalled since `now` (see `Bucket::acquire`).
        let mut t = self.clock.now();
        while t < due {
            self.clock.sleep_until(due);
            t = self.clock.now();
        }
        Ok(Duration::from_nanos(due.saturating_sub(now)))
    }

    /// A reservation only if every quota holds `cost` now, else the refusal
    /// [`try_acquire`](MultiBucket::try_acquire) gives; one atomic step either way (for
    /// [`GiveBack`](crate::GiveBack)).
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
        let ticket = match &self.store {
            Store::Pair(_, pair) => {
                pair.update(|states| reserve_states(states, now, quotas, cost, limit))
            }
            Store::Wide(_, wide) => {
                wide.update(|states| reserve_states(states, now, quotas, cost, limit))
            }
        }?;
        Ok(MultiReservation {
            policy: self,
            cost,
            ticket,
        })
    }
}

/// Tokens taken from every quota of a [`MultiBucket`] by [`MultiBucket::reserve`]: wait
/// [`delay`](MultiReservation::delay) before acting, or give them back with
/// [`cancel`](MultiReservation::cancel). Dropping it keeps the tokens taken.
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
    /// The time until every quota's reserved tokens are due, on the policy's clock; zero once
    /// due.
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

    /// Gives the reserved tokens back, in one atomic step, if the reservation is not yet due,
    /// to every quota on which nothing was admitted since ([`gcra::cancel`]'s rule, per
    /// quota), restoring its state from before the reservation; the others keep them
    /// consumed, which can refuse more, never admit more.
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

    /// Gives back a take that was due at its own reading and on which nothing was acted (an
    /// [`all_of`](crate::all_of) member whose chain a later limiter refused): [`cancel`]'s rule
    /// but for "not yet due", which a take fails as soon as the clock moves.
    ///
    /// [`cancel`]: MultiReservation::cancel
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
        match &self.policy.store {
            Store::Pair(_, pair) => {
                pair.update(|states| cancel_states(states, now, quotas, t, due, cost))
            }
            Store::Wide(_, wide) => {
                wide.update(|states| cancel_states(states, now, quotas, t, due, cost))
            }
        }
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
