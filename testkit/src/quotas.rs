//! Short constructors shared by the waiting tests, and the policy quotas of the multi-quota
//! benchmarks.

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

/// The quotas `benches/multi.rs` and `examples/multi_interleaved.rs` decide: with `deny` false
/// every call is admitted (10^9/s and 10^9/day, bursts of 4 · 10^9); with `deny` the first is
/// one an hour with a burst of 1 (drained by the first call), the others still hold tokens. A
/// two-quota policy takes the first two.
pub fn multi_bench(deny: bool) -> [Quota; 4] {
    let big = 4_000_000_000;
    let fast = Quota::new(1_000_000_000, Duration::from_secs(1), big).unwrap();
    let first = if deny {
        Quota::new(1, Duration::from_secs(3600), 1).unwrap()
    } else {
        fast
    };
    let day = Quota::new(1_000_000_000, Duration::from_secs(86_400), big).unwrap();
    [first, day, fast, day]
}
