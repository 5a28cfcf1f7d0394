//! A [`MultiBucket`]'s snapshots only on refusal, as
//! [`Bucket::try_acquire_or_snapshot`](crate::Bucket::try_acquire_or_snapshot) takes one
//! quota's.

use super::{MultiBucket, Refusal, Snapshots, Store};
use crate::clock::Clock;
use crate::gcra::all::{self as decide, Rates};

impl<C: Clock> MultiBucket<C> {
    /// The decision with every quota's snapshot on refusal only, from the refusal's own clock
    /// reading and states (an admission computes none): `Limiter::decide_or_snapshots`.
    #[inline]
    // The refusal carries up to four snapshots by value: boxing would allocate on every refusal.
    #[allow(clippy::result_large_err)]
    pub(super) fn refusal_snapshots(&self, cost: u64) -> Result<(), (Refusal, Snapshots)> {
        if cost == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        let len = self.limits.quotas().len();
        match &self.store {
            Store::Pair(rates, pair) => pair.update(|states| {
                let verdict = decide::decide_pair(states, now, rates, cost);
                with_snapshots(verdict, states, now, rates, len)
            }),
            Store::Wide(rates, wide) => wide.update(|states| {
                let verdict = decide::decide(states, now, rates, cost);
                with_snapshots(verdict, states, now, rates, len)
            }),
        }
    }
}

/// A refusal and the snapshots of the states it was decided on.
type Refused = (Refusal, Snapshots);

/// One decision in the form the store's loops take; a refusal writes nothing and reports the
/// snapshots of the states it read (the ones it was decided on).
#[inline(always)]
fn with_snapshots<const N: usize>(
    verdict: Result<Option<[u64; N]>, Refusal>,
    states: [u64; N],
    now: u64,
    rates: &Rates<N>,
    len: usize,
) -> (Option<[u64; N]>, Result<(), Refused>) {
    match verdict {
        Ok(next) => (next, Ok(())),
        Err(refusal) => {
            let snaps = decide::snapshots(states, now, rates);
            (None, Err((refusal, Snapshots::from_padded(snaps, len))))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Limiter, Limits, ManualClock, MultiBucket, Quota};
    use core::time::Duration;

    /// Equal to `Limiter::decide_snapshots` on refusals and in the verdict, for one to four quotas
    /// (the pair word and the sequence lock), two policies driven alike.
    #[test]
    fn agrees_with_decide_snapshots() {
        let quotas = [
            Quota::per_second(3).unwrap(),
            Quota::new(5, Duration::from_secs(60), 5).unwrap(),
            Quota::new(7, Duration::from_secs(3600), 6).unwrap(),
            Quota::new(2, Duration::from_millis(300), 2).unwrap(),
        ];
        for n in 1..=4 {
            let limits = Limits::new(quotas[..n].iter().copied()).unwrap();
            let (ca, cb) = (ManualClock::new(), ManualClock::new());
            let a = MultiBucket::with_clock(limits.clone(), ca.clone());
            let b = MultiBucket::with_clock(limits, cb.clone());
            for step in 0..200u64 {
                let cost = step % 4;
                let (verdict, snaps) = a.decide_snapshots(&(), cost);
                match (verdict, b.decide_or_snapshots(&(), cost)) {
                    (Ok(()), Ok(())) => {}
                    (Err(r1), Err((r2, s2))) => assert_eq!((r1, snaps), (r2, s2), "step {step}"),
                    other => panic!("step {step}: {other:?}"),
                }
                let dt = Duration::from_millis(step * 37 % 700);
                ca.advance(dt);
                cb.advance(dt);
            }
        }
    }
}
