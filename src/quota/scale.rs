//! The search for a quota's fixed-point unit: the largest scale (state units per token) that
//! lets `rate × HORIZON + burst` fit in 63 bits, preferring a divisor of the reduced period.

use super::scaled::gcd;
use super::{Scaled, HORIZON_NS, MAX_UNITS};
use crate::error::ConfigError;

/// The reduced rate `t / p` tokens per ns with `burst` in the finest unit that fits the horizon
/// ([`ConfigError::BeyondRange`] if whole tokens do not).
pub(super) fn search(t: u64, p: u64, burst: u64) -> Result<Scaled, ConfigError> {
    // Whole tokens earned over the horizon, rounded up, plus the burst.
    let earned = (u128::from(HORIZON_NS) * u128::from(t)).div_ceil(u128::from(p));
    let need = earned + u128::from(burst);
    if need > u128::from(MAX_UNITS) {
        return Err(ConfigError::BeyondRange);
    }
    let mut scale = best_scale(p, (u128::from(MAX_UNITS) / need) as u64);
    loop {
        let g2 = gcd(u128::from(scale), u128::from(p));
        let mul = u128::from(t) * (u128::from(scale) / g2);
        if let Ok(mul) = u64::try_from(mul) {
            let div = (u128::from(p) / g2) as u64;
            return Ok(Scaled::new(burst, scale, mul, div));
        }
        // Only reachable for periods of centuries; a coarser unit still fits.
        scale = (scale / 2).max(1);
    }
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
