//! The pure decision function: `(state, now, quota, cost) -> (state', verdict)`, no atomics;
//! every limiter, the harness, the loom models and the fuzzer apply it to their own storage.
//!
//! # The state
//!
//! A state (at most 2^63 − 1) is the **theoretical arrival time** of the continuous token
//! bucket, shifted by one burst, in *units* of `1 / quota.scale()` token since the clock's origin:
//!
//! ```text
//! balance(now) = min(burst, earned(now) + burst − state)        (in units)
//! earned(now)  = now_ns × rate × scale                          (a 128-bit multiply)
//! ```
//!
//! * `0` is full at any time ("never used"), as is every `state <= earned(now)`: idle time never
//!   accumulates more than `burst`.
//! * Admitting `cost` adds `cost × scale` to `max(state, earned(now))` (the `max` is the cap at
//!   `burst`): no rounding happens on a debit.
//! * For an inexact quota `earned(now)` need not be whole: a cap takes `⌈earned(now)⌉`, and a
//!   request is admitted iff `state + cost × scale <= ⌊earned(now)⌋ + burst × scale`. The state
//!   stays less than one unit above the continuous bucket's, so a request waits at most one
//!   unit's refill longer (`⌈div / mul⌉` ns, [`Quota::units_per_ns`]); no whole-unit rule does
//!   better without over-admitting ([docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#inexact-quotas-the-one-rounding)).
//! * A state above `earned(now) + burst × scale` is a debt (reservations taken ahead).
//! * A clock reading earlier than one already acted on only makes `earned(now)` smaller: it can
//!   refuse where the later reading would admit, never the reverse.
//!
//! ```
//! use tollgate::{gcra, Quota};
//! let q = Quota::per_second(2).unwrap();
//! let s = gcra::FULL;
//! let s = gcra::try_acquire(s, 0, &q, 2).unwrap().unwrap();   // admitted, new state
//! assert_eq!(gcra::available(s, 0, &q), 0);
//! assert!(gcra::try_acquire(s, 0, &q, 1).is_err());             // refused, state unchanged
//! assert_eq!(gcra::available(s, 500_000_000, &q), 1);
//! ```

use crate::error::Denied;
use crate::quota::{Quota, Scaled, MAX_UNITS};
use crate::snapshot::Snapshot;
use core::time::Duration;

pub(crate) mod all;

/// The state of a full bucket, valid for every quota and every clock reading.
pub const FULL: u64 = 0;

/// The wait from `now` until a refusal's instant `at > min(now, HORIZON)` (past it: never).
#[inline(always)]
pub(crate) fn wait_until(at: u64, now: u64) -> Duration {
    if at > crate::quota::HORIZON_NS {
        return Duration::MAX;
    }
    to_duration(at - now)
}

/// `Duration::from_nanos(ns)`, without the division by 10^9 for waits under a second.
#[inline(always)]
pub(crate) fn to_duration(ns: u64) -> Duration {
    const NANOS_PER_SEC: u64 = 1_000_000_000;
    if ns < NANOS_PER_SEC {
        Duration::new(0, ns as u32)
    } else {
        Duration::from_nanos(ns)
    }
}

/// The state of a bucket that holds `tokens` at `now`. Errors if `tokens > burst`.
///
/// ```
/// use tollgate::{gcra, Quota};
/// let q = Quota::per_second(10).unwrap();
/// let s = gcra::with_tokens(0, &q, 3).unwrap();
/// assert_eq!(gcra::available(s, 0, &q), 3);
/// ```
pub fn with_tokens(now: u64, quota: &Quota, tokens: u64) -> Result<u64, crate::ConfigError> {
    if tokens > quota.burst() {
        return Err(crate::ConfigError::InitialAboveBurst);
    }
    if tokens == quota.burst() {
        return Ok(FULL);
    }
    // Rounded toward fewer tokens when `now` is off the unit grid (inexact quotas only).
    Ok(quota.earned_ceil(now) + (quota.burst() - tokens) * quota.scale())
}

/// Decides whether `cost` tokens are admitted at `now`: `Ok(Some(state'))` admitted (store
/// `state'`), `Ok(None)` admitted with nothing to write (`cost == 0`). Refused, nothing to
/// write: `Err(RetryAfter(d))`, `d` the smallest whole nanoseconds after which the same request
/// is admitted, or `Err(ExceedsBurst)` (`cost > burst`).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{gcra, Denied, Quota};
/// let q = Quota::per_second(1).unwrap();
/// let s = gcra::try_acquire(gcra::FULL, 0, &q, 1).unwrap().unwrap();
/// assert_eq!(gcra::try_acquire(s, 0, &q, 1), Err(Denied::RetryAfter(Duration::from_secs(1))));
/// ```
#[inline]
pub fn try_acquire(state: u64, now: u64, quota: &Quota, cost: u64) -> Result<Option<u64>, Denied> {
    try_acquire_scaled(state, now, quota.scaled(), cost)
}

/// [`try_acquire`] on the decision words alone (the bucket's hot path).
#[inline(always)]
pub(crate) fn try_acquire_scaled(
    state: u64,
    now: u64,
    scaled: &Scaled,
    cost: u64,
) -> Result<Option<u64>, Denied> {
    if cost == 0 {
        return Ok(None);
    }
    if cost > scaled.burst() {
        return Err(Denied::ExceedsBurst);
    }
    // A state no quota produces is refused; below MAX_UNITS, `state + cost_units` fits.
    if state > MAX_UNITS {
        return Err(Denied::RetryAfter(Duration::MAX));
    }
    let scale = scaled.scale();
    // Both products are at most MAX_UNITS by the quota's construction.
    let cost_units = cost * scale;
    let burst_units = scaled.burst_units();
    // Admit iff `state + cost <= earned_floor + burst` (in units); else wait for `instant_of`.
    let want = state + cost_units;
    let at = if let Some(earned) = scaled.exact_earned(now) {
        // The right side cannot overflow: the quota guarantees earned + burst <= 2^63 - 1.
        if want <= earned + burst_units {
            return Ok(Some(state.max(earned) + cost_units));
        }
        scaled.instant_of_exact(want - burst_units)
    } else {
        // Inexact: compare products instead of dividing (`need <= ⌊n/d⌋ ⇔ need·d <= n`), and
        // divide only when the bucket is capped (`state < ⌈n/d⌉ ⇔ state·d < n`), and then only
        // the excess over the state, by the stored reciprocal of `div`.
        let need = want.saturating_sub(burst_units);
        if let Some((n, x)) = scaled.narrow(now, need) {
            if x <= n {
                return Ok(Some(scaled.cap_narrow(state, n) + cost_units));
            }
            scaled.instant_of_narrow(x)
        } else {
            let (n, div) = scaled.earned_scaled(now);
            if u128::from(need) * div <= n {
                let base = if u128::from(state) * div >= n {
                    state
                } else {
                    scaled.ceil_above(state, n)
                };
                return Ok(Some(base + cost_units));
            }
            scaled.instant_of_scaled(u128::from(need) * div)
        }
    };
    Err(Denied::RetryAfter(wait_until(at, now)))
}

/// Whole tokens available at `now` (0 while in debt).
///
/// ```
/// use tollgate::{gcra, Quota};
/// let q = Quota::per_second(4).unwrap();
/// assert_eq!(gcra::available(gcra::FULL, 123, &q), 4);
/// ```
#[inline]
pub fn available(state: u64, now: u64, quota: &Quota) -> u64 {
    available_scaled(state, now, quota.scaled())
}

/// [`available`] on the decision words alone.
#[inline(always)]
pub(crate) fn available_scaled(state: u64, now: u64, scaled: &Scaled) -> u64 {
    units_scaled(state, now, scaled) / scaled.scale()
}

/// The exact balance in units at `now`, capped at the burst, 0 while in debt.
#[inline(always)]
fn units_scaled(state: u64, now: u64, scaled: &Scaled) -> u64 {
    let burst_units = scaled.burst_units();
    (scaled.earned_floor(now) + burst_units)
        .saturating_sub(state)
        .min(burst_units)
}

/// The bucket in `state` as seen at `now`: whole tokens available and the time until it is full.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{gcra, Quota, Snapshot};
/// let q = Quota::per_second(4).unwrap();
/// let s = gcra::try_acquire(gcra::FULL, 0, &q, 3).unwrap().unwrap();
/// assert_eq!(gcra::snapshot(s, 0, &q), Snapshot::new(1, Duration::from_millis(750)));
/// assert_eq!(gcra::snapshot(s, 750_000_000, &q), Snapshot::new(4, Duration::ZERO));
/// ```
#[inline]
pub fn snapshot(state: u64, now: u64, quota: &Quota) -> Snapshot {
    snapshot_scaled(state, now, quota.scaled())
}

/// [`snapshot`] on the decision words alone.
#[inline]
pub(crate) fn snapshot_scaled(state: u64, now: u64, scaled: &Scaled) -> Snapshot {
    let until_full = if state <= scaled.earned_floor(now) {
        Duration::ZERO
    } else {
        match full_at_scaled(state, scaled) {
            u64::MAX => Duration::MAX,
            at => Duration::from_nanos(at.saturating_sub(now)),
        }
    };
    Snapshot::new(available_scaled(state, now, scaled), until_full)
}

/// Takes `cost` tokens now, possibly ahead of the refill (a debt later callers queue behind):
/// the new state and the instant the tokens are due (`now` or earlier: "due already"). Errors:
/// `ExceedsBurst` when `cost > burst`; `RetryAfter(Duration::MAX)` if the backlog would exceed
/// the state's range or come due only past the [`HORIZON`](crate::HORIZON).
///
/// ```
/// use tollgate::{gcra, Quota};
/// let q = Quota::per_second(10).unwrap().with_burst(2).unwrap();
/// let (s, due) = gcra::reserve(gcra::FULL, 0, &q, 2).unwrap();
/// assert_eq!(due, 0);
/// let (_, due) = gcra::reserve(s, 0, &q, 2).unwrap();
/// assert_eq!(due, 200_000_000);
/// ```
#[inline]
pub fn reserve(state: u64, now: u64, quota: &Quota, cost: u64) -> Result<(u64, u64), Denied> {
    if cost > quota.burst() {
        return Err(Denied::ExceedsBurst);
    }
    let scale = quota.scale();
    let burst_units = quota.burst_units();
    let base = state.max(quota.earned_ceil(now));
    let next = u128::from(base) + u128::from(cost * scale);
    if next > u128::from(MAX_UNITS) {
        // Beyond the state's range now and at every later reading: never, as `try_acquire`.
        return Err(Denied::RetryAfter(Duration::MAX));
    }
    let next = next as u64;
    // Due when `try_acquire` would admit it: from `state + cost`, not `next` (they differ only
    // when capped off the unit grid, and then the tokens are there now).
    let want = state + cost * scale;
    let due = if want <= quota.earned_floor(now) + burst_units {
        now
    } else {
        match quota.instant_of(want - burst_units) {
            // Never due past the horizon (nor "due already" at a reading past it).
            at if at > crate::quota::HORIZON_NS => return Err(Denied::RetryAfter(Duration::MAX)),
            at => at,
        }
    };
    Ok((if cost == 0 { state } else { next }, due))
}

/// Gives back all the tokens of a reservation made by [`reserve`] (`after`: the state it
/// returned, `due`: its due instant) if nothing was admitted since (`state == after`) and it is
/// not yet due (Go's rule): `after − cost`, else `None` (also for `cost == 0`). All or nothing,
/// since after any admission the state cannot tell the refill cap from a debit; whatever `now`
/// reads, no window admits more than `burst + rate·Δ`. The quota must not have changed
/// ([`rescale`]) since. The proof: [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#cancellation-why-all-or-nothing).
///
/// ```
/// use tollgate::{gcra, Quota};
/// let q = Quota::per_second(10).unwrap().with_burst(2).unwrap();
/// let (s1, _) = gcra::reserve(gcra::FULL, 0, &q, 2).unwrap();
/// let (s2, due) = gcra::reserve(s1, 0, &q, 2).unwrap();
/// assert_eq!(gcra::cancel(s2, 0, &q, s2, due, 2), Some(s1)); // nothing since: all back
/// let (s3, _) = gcra::reserve(s2, 0, &q, 1).unwrap();
/// assert_eq!(gcra::cancel(s3, 0, &q, s2, due, 2), None); // a later reservation holds
/// ```
#[inline]
pub fn cancel(state: u64, now: u64, quota: &Quota, after: u64, due: u64, cost: u64) -> Option<u64> {
    if due < now || cost == 0 || state != after {
        return None;
    }
    // `after = max(before, earned_ceil) + cost·scale`: no underflow, never below `before`.
    after.checked_sub(cost.checked_mul(quota.scale())?)
}

/// Converts a state from quota `old` to `new` at `now`: the balance carries over, capped at both
/// bursts, rounded down, and a **debt keeps its due instant** (a faster rate must not repay it
/// early): [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#reconfiguration-what-carries-over).
///
/// ```
/// use tollgate::{gcra, Quota};
/// let old = Quota::per_second(10).unwrap();
/// let new = Quota::per_second(100).unwrap();
/// let s = gcra::try_acquire(gcra::FULL, 0, &old, 4).unwrap().unwrap();
/// assert_eq!(gcra::available(gcra::rescale(s, 0, &old, &new), 0, &new), 6);
/// // In debt: 2 tokens owed at 10/s are due in 200 ms, and still are at 20/s (4 owed).
/// let q = Quota::per_second(10).unwrap().with_burst(2).unwrap();
/// let (s, _) = gcra::reserve(gcra::FULL, 0, &q, 2).unwrap();
/// let (s, _) = gcra::reserve(s, 0, &q, 2).unwrap();
/// let fast = Quota::per_second(20).unwrap().with_burst(4).unwrap();
/// let s = gcra::rescale(s, 0, &q, &fast);
/// assert_eq!(gcra::available(s, 200_000_000, &fast), 0);
/// assert_eq!(gcra::available(s, 250_000_000, &fast), 1);
/// ```
pub fn rescale(state: u64, now: u64, old: &Quota, new: &Quota) -> u64 {
    let (s1, s2) = (i128::from(old.scale()), i128::from(new.scale()));
    let (burst1, burst2) = (i128::from(old.burst()) * s1, i128::from(new.burst()) * s2);
    // Balance in old units (negative: debt), capped at each burst in turn.
    let b1 = (i128::from(old.earned_floor(now)) + burst1 - i128::from(state)).min(burst1);
    let by_tokens =
        i128::from(new.earned_ceil(now)) + burst2 - (b1 * s2).div_euclid(s1).min(burst2);
    // In debt, the old bucket is empty again at `instant_of(state − burst) > now`.
    let by_time = if b1 < 0 {
        match old.instant_of(state - old.burst_units()) {
            at if at > crate::quota::HORIZON_NS => i128::from(MAX_UNITS),
            at => i128::from(new.earned_ceil(at)) + burst2,
        }
    } else {
        0
    };
    by_tokens.max(by_time).clamp(0, i128::from(MAX_UNITS)) as u64
}

/// Decides `cost` over every quota of a policy at one reading, all or nothing, as
/// [`MultiBucket`](crate::MultiBucket) does (`states[i]`: quota `i`'s; the rest returned as
/// they are). `Ok(Some(states'))`: store them all at once; `Ok(None)`: `cost == 0`. A refusal:
/// [`Denied::ExceedsBurst`] iff `cost` exceeds the smallest burst, else the largest per-quota
/// [`try_acquire`] wait, [`Refusal::quota_index`](crate::Refusal::quota_index) naming the quota.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{gcra, Denied, Limits, Quota};
/// let limits = Limits::new([Quota::per_second(2).unwrap(), Quota::per_second(1).unwrap()]).unwrap();
/// let s = gcra::try_acquire_all([gcra::FULL; 4], 0, &limits, 1).unwrap().unwrap();
/// let refusal = gcra::try_acquire_all(s, 0, &limits, 1).unwrap_err();
/// assert_eq!(refusal.denied(), Denied::RetryAfter(Duration::from_secs(1)));
/// assert_eq!(refusal.quota_index(), 1);
/// ```
pub fn try_acquire_all(
    states: [u64; 4],
    now: u64,
    limits: &crate::Limits,
    cost: u64,
) -> Result<Option<[u64; 4]>, crate::Refusal> {
    let len = limits.quotas().len();
    let next = all::decide(
        all::pad::<4>(&states[..len]),
        now,
        &all::Rates::new(limits),
        cost,
    )?;
    Ok(next.map(|next| {
        let mut out = states;
        out[..len].copy_from_slice(&next[..len]);
        out
    }))
}

/// Whether `state` is full at `now`: it then behaves as [`FULL`] at every later reading.
#[cfg_attr(not(feature = "std"), allow(dead_code))]
#[inline]
pub(crate) fn is_full(state: u64, now: u64, quota: &Quota) -> bool {
    state <= quota.earned_floor(now)
}

/// The first clock reading at which `state` is full (`u64::MAX`: never within the horizon).
#[cfg_attr(not(feature = "std"), allow(dead_code))]
#[inline]
pub(crate) fn full_at(state: u64, quota: &Quota) -> u64 {
    full_at_scaled(state, quota.scaled())
}

/// [`full_at`] on the decision words alone.
#[inline]
fn full_at_scaled(state: u64, scaled: &Scaled) -> u64 {
    let at = scaled.instant_of(state);
    if at > crate::quota::HORIZON_NS {
        u64::MAX
    } else {
        at
    }
}

/// [`units_scaled`] of a quota.
#[cfg_attr(not(feature = "std"), allow(dead_code))]
#[inline]
pub(crate) fn available_units(state: u64, now: u64, quota: &Quota) -> u64 {
    units_scaled(state, now, quota.scaled())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{inexact_quotas, Xorshift};

    /// [`to_duration`] equals `Duration::from_nanos` around one second and the range's ends.
    #[test]
    fn to_duration_matches_from_nanos() {
        let mut rng = Xorshift(0x2545_F491_4F6C_DD1D);
        let mut xs = alloc::vec![0, 1, 999_999_999, 1_000_000_000, 1_000_000_001, u64::MAX];
        xs.extend((0..10_000).map(|_| {
            let x = rng.next();
            x >> (x % 64)
        }));
        for x in xs {
            assert_eq!(to_duration(x), Duration::from_nanos(x), "{x}");
        }
    }

    /// The product compares and stored reciprocals decide exactly as the divisions they replace,
    /// for exact and inexact quotas, states around the boundary and the range's edges, and
    /// readings past the horizon.
    #[test]
    fn product_compares_decide_as_divisions() {
        let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15);
        let mut next = || rng.next();
        let exact = [
            Quota::per_second(1_000_000_000).unwrap(),
            Quota::per_second(1000).unwrap(),
            Quota::new(2, Duration::from_nanos(3), 9).unwrap(),
            Quota::new(2, Duration::from_nanos(999_999_999), 1 << 20).unwrap(),
            Quota::new(7_000_000_000, Duration::from_secs(7), 5).unwrap(),
            Quota::new(1, Duration::from_secs(3600), 1).unwrap(),
        ];
        assert!(exact.iter().all(|q| q.is_exact()));
        assert!(exact.iter().any(|q| q.units_per_ns().0 > 1));
        assert!(inexact_quotas().iter().all(|q| !q.is_exact()));
        for q in inexact_quotas().into_iter().chain(exact) {
            let horizon = crate::quota::HORIZON_NS;
            let mut nows = alloc::vec![0, 1, horizon - 1, horizon, u64::MAX];
            for _ in 0..300 {
                nows.push(next() % (horizon + 2));
            }
            // Where an inexact quota's products leave 64 bits (`Scaled::narrow`): readings around
            // `now · mul = 2^64` (after 18 s at 999,999,937/s), and early readings.
            let (mul, div) = q.units_per_ns();
            let wide_at = u64::MAX / mul;
            nows.extend((0..4).map(|k| (wide_at - 1).saturating_add(k)));
            for _ in 0..100 {
                nows.push(next() % (1 << 40));
            }
            for now in nows {
                let floor = q.earned_floor(now);
                let ceil = q.earned_ceil(now);
                let burst_units = q.burst_units();
                for cost in [1, q.burst()] {
                    let cost_units = cost * q.scale();
                    let edge = (floor + burst_units).saturating_sub(cost_units);
                    let mut states = alloc::vec![0, floor, ceil, edge, edge + 1, MAX_UNITS];
                    states.extend([edge.saturating_sub(1), ceil.saturating_sub(1)]);
                    // Around `state · div = 2^64` and `need · div = 2^64`.
                    let state_wide = (u64::MAX / div).min(MAX_UNITS);
                    states.extend([state_wide - 1, state_wide, state_wide.saturating_add(1)]);
                    let need_wide = (u64::MAX / div).saturating_add(burst_units - cost_units);
                    states.extend([need_wide - 1, need_wide, need_wide.saturating_add(1)]);
                    states.retain(|&s| s <= MAX_UNITS);
                    states.push(next() % MAX_UNITS);
                    for state in states {
                        let want = if state + cost_units <= floor + burst_units {
                            Ok(Some(state.max(ceil) + cost_units))
                        } else {
                            // The wait by plain 128-bit division, not by `instant_of`.
                            let need = state + cost_units - burst_units;
                            let at = (u128::from(need) * u128::from(div)).div_ceil(u128::from(mul));
                            Err(Denied::RetryAfter(
                                if at <= u128::from(now) || at > u128::from(horizon) {
                                    Duration::MAX
                                } else {
                                    Duration::from_nanos((at - u128::from(now)) as u64)
                                },
                            ))
                        };
                        assert_eq!(
                            try_acquire(state, now, &q, cost),
                            want,
                            "{q:?} state {state} now {now} cost {cost}"
                        );
                    }
                }
            }
        }
        // A state no quota produces is refused, never wrapped.
        let q = Quota::per_second(3).unwrap();
        assert_eq!(
            try_acquire(u64::MAX, 0, &q, 1),
            Err(Denied::RetryAfter(Duration::MAX))
        );
    }
}
