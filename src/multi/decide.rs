//! The pure decision over several quotas at one clock reading: [`crate::gcra`]'s decision for
//! each quota, combined all or nothing. No atomics: the multi-bucket's word, its seqlocked
//! words, the tests and custom storage ([`crate::gcra::try_acquire_all`]) all apply it.
//!
//! Every quota is decided exactly as a [`Bucket`](crate::Bucket) decides it
//! ([`gcra`]'s `try_acquire_in`). The verdict is the conjunction: admitted iff every quota
//! admits, and then every quota's new state is written; otherwise nothing is. So each quota's
//! state moves only by decisions that quota admits on its own at the same reading, and its
//! window bound is the bucket's.

use super::refusal::Refusal;
use crate::error::Denied;
use crate::gcra;
use crate::limits::{Limits, MAX_LIMITS};
use crate::quota::Scaled;
use crate::snapshot::Snapshot;

/// The decision words of `N` quotas and the index of the smallest burst (the first of equals).
///
/// A policy of fewer quotas than `N` is padded by repeating its last quota, with its state
/// repeated too: a copy decides exactly as its original, so the padding never changes a verdict,
/// and every choice below takes the first of equal candidates, so it never names a copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rates<const N: usize> {
    pub(crate) rates: [Scaled; N],
    min_burst: u64,
    min_burst_index: usize,
}

impl<const N: usize> Rates<N> {
    /// The first `N` quotas of `limits`, padded as described above. Requires `N >= len`.
    pub(crate) fn new(limits: &Limits) -> Rates<N> {
        let quotas = limits.quotas();
        let rates = core::array::from_fn(|i| *quotas[i.min(quotas.len() - 1)].scaled());
        let mut min_burst_index = 0;
        for (i, q) in quotas.iter().enumerate() {
            if q.burst() < quotas[min_burst_index].burst() {
                min_burst_index = i;
            }
        }
        Rates {
            rates,
            min_burst: quotas[min_burst_index].burst(),
            min_burst_index,
        }
    }
}

/// States padded to `N` as [`Rates`] pads the quotas: entry `i` of `states` for `i < len`,
/// the last one repeated after.
#[inline]
pub(crate) fn pad<const N: usize>(states: &[u64]) -> [u64; N] {
    core::array::from_fn(|i| states[i.min(states.len() - 1)])
}

/// Decides `cost` over every quota at `now`: `Ok(Some(states'))` admitted (write all of
/// them), `Ok(None)` admitted with nothing to write (`cost == 0`), `Err` refused (write
/// nothing).
///
/// A refusal is [`Denied::ExceedsBurst`] iff `cost` exceeds the smallest burst (naming that
/// quota); otherwise [`Denied::RetryAfter`] of the largest per-quota wait, naming the quota that
/// waits longest (the first of equals). Each per-quota wait is the smallest whole number of
/// nanoseconds after which that quota holds `cost`; a quota's balance only grows while nothing
/// is admitted, so after the largest of them every quota holds it, and before it the quota
/// that waits longest does not: the largest wait is the exact wait of the conjunction.
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
    let mut worst: Option<Refusal> = None;
    for i in 0..N {
        match gcra::try_acquire_scaled(states[i], now, &rates.rates[i], cost) {
            Ok(Some(s)) => next[i] = s,
            // `cost > 0`: every admission has a state to write.
            Ok(None) => {}
            Err(denied) => {
                let longer = match (worst.map(|w| w.denied()), denied) {
                    (None, _) => true,
                    (Some(Denied::RetryAfter(w)), Denied::RetryAfter(d)) => d > w,
                    // `cost <= min_burst`: no quota answers `ExceedsBurst`; kept if one did.
                    (Some(_), _) => false,
                };
                if longer {
                    worst = Some(Refusal::new(denied, i));
                }
            }
        }
    }
    match worst {
        None => Ok(Some(next)),
        Some(refusal) => Err(refusal),
    }
}

/// Whole tokens every quota holds at `now`: the smallest per-quota [`gcra::available`].
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

/// The index of the tightest snapshot: the fewest remaining tokens, ties broken by the longest
/// time until full (the one full last), then by the first index.
pub(crate) fn tightest(snapshots: &[Snapshot]) -> usize {
    let mut best = 0;
    for (i, s) in snapshots.iter().enumerate().skip(1) {
        let b = &snapshots[best];
        if (s.remaining(), core::cmp::Reverse(s.until_full()))
            < (b.remaining(), core::cmp::Reverse(b.until_full()))
        {
            best = i;
        }
    }
    best
}

/// [`decide`] on a [`Limits`], for storage outside the crate: see
/// [`gcra::try_acquire_all`].
pub(crate) fn try_acquire_all(
    states: [u64; MAX_LIMITS],
    now: u64,
    limits: &Limits,
    cost: u64,
) -> Result<Option<[u64; MAX_LIMITS]>, Refusal> {
    let len = limits.quotas().len();
    let rates = Rates::<MAX_LIMITS>::new(limits);
    let padded = pad::<MAX_LIMITS>(&states[..len]);
    let next = decide(padded, now, &rates, cost)?;
    Ok(next.map(|next| {
        let mut out = states;
        out[..len].copy_from_slice(&next[..len]);
        out
    }))
}
