//! The search for a quota's fixed-point unit: the largest scale (state units per token) that
//! lets `rate × HORIZON + burst` fit in 63 bits, preferring a divisor of the reduced period.

use super::scaled::gcd;
use super::{Scaled, HORIZON_NS, MAX_UNITS};
use crate::error::ConfigError;

/// The reduced rate `t / p` tokens per ns with `burst` in the finest unit that fits the horizon
/// ([`ConfigError::BeyondRange`] if whole tokens do not).
pub(super) fn search(t: u64, p: u64, burst: u64) -> Result<Scaled, ConfigError> {
    let mut scale = best_scale(p, max_scale(t, p, burst)?);
    loop {
        if let Some(scaled) = at_scale(t, p, burst, scale) {
            return Ok(scaled);
        }
        // Only reachable for periods of centuries; a coarser unit still fits.
        scale = (scale / 2).max(1);
    }
}

/// The largest scale at which `rate × HORIZON + burst` fits in 63 bits
/// ([`ConfigError::BeyondRange`] if whole tokens do not).
fn max_scale(t: u64, p: u64, burst: u64) -> Result<u64, ConfigError> {
    // Whole tokens earned over the horizon, rounded up, plus the burst.
    let earned = (u128::from(HORIZON_NS) * u128::from(t)).div_ceil(u128::from(p));
    let need = earned + u128::from(burst);
    if need > u128::from(MAX_UNITS) {
        return Err(ConfigError::BeyondRange);
    }
    Ok((u128::from(MAX_UNITS) / need) as u64)
}

/// The reduced rate `t / p` with `burst` in units of `1 / scale` token, for a `scale` at most
/// [`max_scale`]; `None` when the units earned per nanosecond, `mul / div` reduced, have a
/// numerator beyond 64 bits.
fn at_scale(t: u64, p: u64, burst: u64, scale: u64) -> Option<Scaled> {
    let g2 = gcd(u128::from(scale), u128::from(p));
    let mul = u64::try_from(u128::from(t) * (u128::from(scale) / g2)).ok()?;
    let div = (u128::from(p) / g2) as u64;
    Some(Scaled::new(burst, scale, mul, div))
}

/// The reduced rate `t / p` with `burst` in units of exactly `1 / scale` token: the same
/// validation as [`search`] ([`ConfigError::BeyondRange`] for a scale at which
/// `rate × HORIZON + burst` leaves 63 bits, or `mul` leaves 64), with a chosen unit.
pub(super) fn chosen(t: u64, p: u64, burst: u64, scale: u64) -> Result<Scaled, ConfigError> {
    if scale == 0 {
        return Err(ConfigError::ZeroScale);
    }
    if scale > max_scale(t, p, burst)? {
        return Err(ConfigError::BeyondRange);
    }
    at_scale(t, p, burst, scale).ok_or(ConfigError::BeyondRange)
}

/// The largest divisor of `p` at most `s_max` (a bounded search), else `s_max`: a divisor
/// keeps more instants exact.
fn best_scale(p: u64, s_max: u64) -> u64 {
    if p <= s_max {
        return p;
    }
    let d0 = p.div_ceil(s_max);
    (d0..d0.saturating_add(4096))
        .find(|d| p % d == 0)
        .map_or(s_max, |d| p / d)
}

/// [`max_scale`] for the quota's unit tests.
#[cfg(test)]
pub(super) fn max_scale_for_tests(t: u64, p: u64, burst: u64) -> Result<u64, ConfigError> {
    max_scale(t, p, burst)
}
