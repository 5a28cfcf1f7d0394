//! Random quotas over the whole range, log-uniform, and quotas at the ends of a backend's range.
//! `fits` says which quotas a backend holds (tollgate-redis: `check_quota(q).is_ok()`); every
//! quota returned passes it.

use crate::rng::Rng;
use std::time::Duration;
use tollgate::Quota;

/// Log-uniform in `1..=max`.
pub fn log_uniform(rng: &mut Rng, max: u64) -> u64 {
    let bits = 64 - max.leading_zeros();
    let b = rng.below(u64::from(bits)) as u32 + 1;
    let hi = if b >= 64 { u64::MAX } else { (1u64 << b) - 1 };
    (rng.next() & hi).clamp(1, max)
}

/// A random quota that `fits` (tries until one does; most do).
pub fn quota(rng: &mut Rng, fits: impl Fn(Quota) -> bool) -> Quota {
    loop {
        let tokens = match rng.below(4) {
            0 => [1, 2, 3, 7, 10, 100, 1000, 999_999_937][rng.below(8) as usize],
            _ => log_uniform(rng, 1_000_000_000),
        };
        let per = match rng.below(4) {
            0 => [
                1,
                1_000,
                1_000_000,
                1_000_000_000,
                60_000_000_000,
                3_600_000_000_000,
            ][rng.below(6) as usize],
            _ => log_uniform(rng, 100_000_000_000_000),
        };
        let burst = log_uniform(rng, 10_000_000);
        if let Ok(q) = Quota::new(tokens, Duration::from_nanos(per), burst) {
            if fits(q) {
                return q;
            }
        }
    }
}

/// The largest burst that `fits` for `tokens` per `per` (0: none), assuming a smaller burst
/// fits whenever a larger one does.
pub fn max_burst(tokens: u64, per: Duration, fits: impl Fn(Quota) -> bool) -> u64 {
    let ok = |b: u64| Quota::new(tokens, per, b).is_ok_and(&fits);
    if !ok(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u64, 1u64 << 62);
    while lo < hi {
        let m = lo + (hi - lo).div_ceil(2);
        if ok(m) {
            lo = m
        } else {
            hi = m - 1
        }
    }
    lo
}

/// A quota at an end of the range: a fast or slow rate (10^9/s, 1/year, one per hour, a prime
/// rate) with a burst within a few tokens of the largest that `fits`, or a burst of 1.
pub fn edge_quota(rng: &mut Rng, fits: impl Fn(Quota) -> bool) -> Quota {
    const YEAR: u64 = 365 * 86_400 * 1_000_000_000;
    loop {
        let (tokens, per) = match rng.below(6) {
            0 => (1_000_000_000, 1_000_000_000),
            1 => (999_999_937, 1_000_000_000),
            2 => (1, YEAR),
            3 => (1, 3_600_000_000_000),
            4 => (30, 30 * 86_400_000_000_000),
            _ => (1 + rng.below(1000), 1_000 * (1 + rng.below(YEAR / 1_000))),
        };
        let per = Duration::from_nanos(per);
        let max = max_burst(tokens, per, &fits);
        if max == 0 {
            continue;
        }
        let burst = if rng.below(4) == 0 {
            1
        } else {
            max - rng.below(3).min(max - 1)
        };
        if let Ok(q) = Quota::new(tokens, per, burst) {
            return q;
        }
    }
}
