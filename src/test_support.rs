//! Shared by the crate's unit tests: a seeded generator and quotas at the edges of the range.

use crate::Quota;
use core::time::Duration;

/// xorshift64: a fixed sequence from a fixed seed, values of every magnitude.
pub(crate) struct Xorshift(pub(crate) u64);

impl Xorshift {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Quotas whose unit does not divide a nanosecond (`!is_exact()`): small and large rates, a
/// prime, a burst of 2^30.
pub(crate) fn inexact_quotas() -> [Quota; 5] {
    [
        Quota::per_second(3).unwrap(),
        Quota::per_second(7).unwrap().with_burst(5).unwrap(),
        Quota::per_second(999_999_937).unwrap(),
        Quota::new(999_999_999_989, Duration::from_secs(1000), 7).unwrap(),
        Quota::new(3, Duration::from_secs(1), 1 << 30).unwrap(),
    ]
}
