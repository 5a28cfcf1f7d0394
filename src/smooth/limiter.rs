//! [`Smooth`] as a [`Limiter`]: Guava's `tryAcquire` with no timeout, the refusal naming the
//! wait.

use super::guava::{ceil_u64, Params, State};
use super::Smooth;
use crate::clock::Clock;
use crate::error::Denied;
use crate::limiter::{one, Limiter};
use crate::limits::Limits;
use crate::multi::Snapshots;
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;
use core::time::Duration;

impl<C: Clock> Smooth<C> {
    /// Guava's `tryAcquire(permits)`, refusing with the wait until the next free time
    /// (`Duration::MAX`: never), and the snapshot of the state it left if `snap(verdict)`.
    fn decide_now(
        &self,
        permits: u64,
        snap: impl Fn(&Result<(), Denied>) -> bool,
    ) -> (Result<(), Denied>, Snapshot) {
        let now = self.micros_at(self.clock.now());
        self.update(|mut s, p| {
            let (next, verdict) = if permits == 0 {
                (None, Ok(()))
            } else if s.next > now {
                let wait = Duration::from_micros(s.next - now);
                (None, Err(Denied::RetryAfter(wait)))
            } else if s.reserve(permits as f64, now, p, self.mode).is_some() {
                (Some(s), Ok(()))
            } else {
                (None, Err(Denied::RetryAfter(Duration::MAX)))
            };
            let snapshot = match snap(&verdict) {
                true => snapshot(s, p, now),
                false => Snapshot::new(0, Duration::ZERO),
            };
            (next, (verdict, snapshot))
        })
    }
}

/// The limiter at `now` in state `s`: the whole permits stored once the next free time has
/// come (none before it), and the time until it has come and every permit is stored.
fn snapshot(mut s: State, p: &Params, now: u64) -> Snapshot {
    s.resync(now, p);
    let ahead = s.next.saturating_sub(now);
    let remaining = if ahead > 0 { 0 } else { s.stored as u64 };
    let storing = (p.max - s.stored).max(0.0) * p.cool_down;
    let micros = if storing.is_finite() {
        ahead.saturating_add(ceil_u64(storing))
    } else {
        ahead
    };
    Snapshot::new(remaining, Duration::from_micros(micros))
}

/// `try_acquire(permits, Duration::ZERO)` with the refusal's wait (`Smooth::try_acquire` keeps
/// Guava's signature). A snapshot counts the whole permits stored once the next free time has
/// come; `limits` is `None` (a rate, not a quota).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, Limiter, ManualClock, Smooth};
/// let limiter = Smooth::bursty_with_clock(2.0, Duration::from_secs(1), ManualClock::new()).unwrap();
/// assert_eq!(limiter.decide(&(), 1), Ok(()));
/// let refusal = limiter.decide(&(), 1).unwrap_err();
/// assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_millis(500)));
/// assert_eq!(limiter.limits(&()), None);
/// ```
impl<C: Clock> Limiter for Smooth<C> {
    type Key = ();

    fn decide(&self, _: &(), permits: u64) -> Result<(), Refusal> {
        self.decide_now(permits, |_| false).0.map_err(one)
    }

    fn decide_or_snapshots(&self, _: &(), permits: u64) -> Result<(), (Refusal, Snapshots)> {
        let (verdict, snap) = self.decide_now(permits, Result::is_err);
        verdict.map_err(|denied| (one(denied), Snapshots::one(snap)))
    }

    fn decide_snapshots(&self, _: &(), permits: u64) -> (Result<(), Refusal>, Snapshots) {
        let (verdict, snap) = self.decide_now(permits, |_| true);
        (verdict.map_err(one), Snapshots::one(snap))
    }

    fn limits(&self, _: &()) -> Option<Limits> {
        None
    }

    // A rate, not a quota: nothing to tie to the decision.
    fn decide_snapshots_limits(
        &self,
        key: &(),
        permits: u64,
    ) -> (Result<(), Refusal>, Snapshots, Option<Limits>) {
        let (verdict, snaps) = self.decide_snapshots(key, permits);
        (verdict, snaps, None)
    }

    fn decide_or_snapshots_limits(
        &self,
        key: &(),
        permits: u64,
    ) -> Result<(), (Refusal, Snapshots, Option<Limits>)> {
        self.decide_or_snapshots(key, permits)
            .map_err(|(refusal, snaps)| (refusal, snaps, None))
    }
}
