//! The pure decision over several quotas at one reading: each decided as a
//! [`Bucket`](crate::Bucket) decides, all written iff all admit, so each quota moves only by
//! decisions it admits on its own and keeps the bucket's window bound.

use crate::error::Denied;
use crate::gcra;
use crate::limits::Limits;
use crate::quota::{Scaled, HORIZON_NS};
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;

/// The decision words of `N` quotas, padded by repeating the last quota (and its state): a
/// copy decides as its original, and every choice takes the first of equals, never a copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rates<const N: usize> {
    pub(crate) rates: [Scaled; N],
    /// Each quota's `burst × scale`.
    burst_units: [u64; N],
    /// Every quota's units per nanosecond if all are exact, for `decide_pair_within`.
    exact_muls: Option<[u64; N]>,
    min_burst: u64,
    min_burst_index: usize,
}

impl<const N: usize> Rates<N> {
    /// The quotas of `limits`, padded. Requires `N >= len`.
    pub(crate) fn new(limits: &Limits) -> Rates<N> {
        let quotas = limits.quotas();
        let rates = core::array::from_fn(|i| *quotas[i.min(quotas.len() - 1)].scaled());
        // `min_by_key` returns the first of equals.
        let min_burst_index = (0..quotas.len())
            .min_by_key(|&i| quotas[i].burst())
            .unwrap_or(0);
        Rates {
            rates,
            burst_units: rates.map(|r| r.burst_units()),
            exact_muls: rates
                .iter()
                .all(|r| r.exact_mul().is_some())
                .then(|| rates.map(|r| r.exact_mul().unwrap_or(0))),
            min_burst: quotas[min_burst_index].burst(),
            min_burst_index,
        }
    }
}

/// States padded to `N` as [`Rates`] pads the quotas.
#[inline]
pub(crate) fn pad<const N: usize>(states: &[u64]) -> [u64; N] {
    core::array::from_fn(|i| states[i.min(states.len() - 1)])
}

/// [`crate::gcra::try_acquire_all`]. The largest per-quota wait is exact for all: balances only
/// grow while nothing is admitted, and before it the longest-waiting quota lacks `cost`.
#[inline(always)]
pub(crate) fn decide<const N: usize>(
    states: [u64; N],
    now: u64,
    rates: &Rates<N>,
    cost: u64,
) -> Result<Option<[u64; N]>, Refusal> {
    if cost == 0 {
        return Ok(None);
    }
    if cost > rates.min_burst {
        return Err(Refusal::new(Denied::ExceedsBurst, rates.min_burst_index));
    }
    let mut next = states;
    let mut verdicts = [Ok(None); N];
    let mut refused = false;
    for i in 0..N {
        match gcra::try_acquire_scaled(states[i], now, &rates.rates[i], cost) {
            Ok(Some(s)) => next[i] = s,
            // `cost > 0`: every admission has a state to write (unreachable; kept).
            Ok(None) => {}
            Err(denied) => {
                verdicts[i] = Err(denied);
                refused = true;
            }
        }
    }
    if refused {
        return Err(longest(&verdicts));
    }
    Ok(Some(next))
}

/// [`decide`] for two quotas, written out straight-line.
#[inline(always)]
pub(crate) fn decide_pair(
    states: [u64; 2],
    now: u64,
    rates: &Rates<2>,
    cost: u64,
) -> Result<Option<[u64; 2]>, Refusal> {
    if cost == 0 {
        return Ok(None);
    }
    if cost > rates.min_burst {
        return Err(Refusal::new(Denied::ExceedsBurst, rates.min_burst_index));
    }
    decide_pair_within(states, now, rates, cost).map(Some)
}

/// [`decide_pair`] for `0 < cost <=` the smallest burst, checked by the caller.
#[inline(always)]
pub(crate) fn decide_pair_within(
    states: [u64; 2],
    now: u64,
    rates: &Rates<2>,
    cost: u64,
) -> Result<[u64; 2], Refusal> {
    debug_assert!(cost > 0 && cost <= rates.min_burst);
    let (a, b) = match rates.exact_muls {
        // Both exact: `one`'s arithmetic, both admissions tested at once.
        Some([m0, m1]) => {
            let t = now.min(HORIZON_NS);
            let (e0, e1) = (t * m0, t * m1);
            let (c0, c1) = (cost * rates.rates[0].scale(), cost * rates.rates[1].scale());
            let (w0, w1) = (states[0] + c0, states[1] + c1);
            let (ok0, ok1) = (
                w0 <= e0 + rates.burst_units[0],
                w1 <= e1 + rates.burst_units[1],
            );
            if ok0 & ok1 {
                return Ok([states[0].max(e0) + c0, states[1].max(e1) + c1]);
            }
            let wait = |i: usize, want: u64| {
                let at = rates.rates[i].instant_of_exact(want - rates.burst_units[i]);
                Denied::RetryAfter(gcra::wait_until(at, now))
            };
            (
                if ok0 { Ok(0) } else { Err(wait(0, w0)) },
                if ok1 { Ok(0) } else { Err(wait(1, w1)) },
            )
        }
        None => (
            one(states[0], now, &rates.rates[0], rates.burst_units[0], cost),
            one(states[1], now, &rates.rates[1], rates.burst_units[1], cost),
        ),
    };
    match (a, b) {
        (Ok(a), Ok(b)) => Ok([a, b]),
        (Err(x), Ok(_)) => Err(Refusal::new(x, 0)),
        (Ok(_), Err(y)) => Err(Refusal::new(y, 1)),
        (Err(x), Err(y)) => Err(match (x, y) {
            (Denied::RetryAfter(dx), Denied::RetryAfter(dy)) if dy > dx => Refusal::new(y, 1),
            _ => Refusal::new(x, 0),
        }),
    }
}

/// One quota's decision for `0 < cost <= burst` on a state `<= MAX_UNITS` (the caller's
/// guarantee): `try_acquire_scaled`'s arithmetic without its checks for an exact quota.
#[inline(always)]
fn one(state: u64, now: u64, rate: &Scaled, burst_units: u64, cost: u64) -> Result<u64, Denied> {
    match rate.exact_earned(now) {
        Some(earned) => {
            // Every term is at most MAX_UNITS by the quota's range: no overflow.
            let cost_units = cost * rate.scale();
            let want = state + cost_units;
            if want <= earned + burst_units {
                Ok(state.max(earned) + cost_units)
            } else {
                let at = rate.instant_of_exact(want - burst_units);
                Err(Denied::RetryAfter(gcra::wait_until(at, now)))
            }
        }
        None => gcra::try_acquire_scaled(state, now, rate, cost).map(|n| n.unwrap_or(state)),
    }
}

/// The longest wait among the refusals and its quota (the first of equals); out of line.
#[cold]
#[inline(never)]
fn longest(verdicts: &[Result<Option<u64>, Denied>]) -> Refusal {
    let mut worst: Option<Refusal> = None;
    for (i, v) in verdicts.iter().enumerate() {
        let Err(denied) = *v else { continue };
        let longer = match (worst.map(|w| w.denied()), denied) {
            (None, _) => true,
            (Some(Denied::RetryAfter(w)), Denied::RetryAfter(d)) => d > w,
            // `cost <= min_burst`: no quota answers `ExceedsBurst`; the first kept if one did.
            (Some(_), _) => false,
        };
        if longer {
            worst = Some(Refusal::new(denied, i));
        }
    }
    // Called only when some verdict is an error.
    worst.unwrap_or(Refusal::new(
        Denied::RetryAfter(core::time::Duration::MAX),
        0,
    ))
}

/// Whole tokens every quota holds at `now`: the smallest per-quota [`crate::gcra::available`].
#[inline]
pub(crate) fn available<const N: usize>(states: [u64; N], now: u64, rates: &Rates<N>) -> u64 {
    (0..N)
        .map(|i| gcra::available_scaled(states[i], now, &rates.rates[i]))
        .min()
        .unwrap_or(0)
}

/// Every quota's snapshot at `now` (the first `len` are the policy's).
#[inline]
pub(crate) fn snapshots<const N: usize>(
    states: [u64; N],
    now: u64,
    rates: &Rates<N>,
) -> [Snapshot; N] {
    core::array::from_fn(|i| gcra::snapshot_scaled(states[i], now, &rates.rates[i]))
}

/// [`Snapshots::tightest`](crate::Snapshots::tightest)'s index.
pub(crate) fn tightest(snapshots: &[Snapshot]) -> usize {
    let key = |s: &Snapshot| (s.remaining(), core::cmp::Reverse(s.until_full()));
    (0..snapshots.len())
        .min_by_key(|&i| key(&snapshots[i]))
        .unwrap_or(0)
}
