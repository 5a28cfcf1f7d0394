//! Random quotas for the script's tests (shared by `differential.rs` and `quota_change.rs`).
#![allow(dead_code, unreachable_pub)]

use crate::rng::Rng;
use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::check_quota;

/// Log-uniform in `1..=max`.
pub fn log_uniform(rng: &mut Rng, max: u64) -> u64 {
    let bits = 64 - max.leading_zeros();
    let b = rng.below(u64::from(bits)) as u32 + 1;
    let hi = if b >= 64 { u64::MAX } else { (1u64 << b) - 1 };
    (rng.next() & hi).clamp(1, max)
}

/// A random quota the script holds (tries until one fits; most do).
pub fn quota(rng: &mut Rng) -> Quota {
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
            if check_quota(q).is_ok() {
                return q;
            }
        }
    }
}
