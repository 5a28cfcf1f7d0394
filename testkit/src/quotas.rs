//! Short constructors shared by the waiting tests.

use std::time::Duration;
use tollgate::Quota;

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `per_second` tokens per second with burst `burst` (both valid).
pub fn quota(per_second: u64, burst: u64) -> Quota {
    Quota::per_second(per_second)
        .unwrap()
        .with_burst(burst)
        .unwrap()
}
