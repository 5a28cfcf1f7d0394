//! The latency of one call, admissions and refusals apart: a `Bucket` against a two-shard
//! `ShardedBucket` in the harness's `mixed` regime on one thread (10 M tokens/s, a burst of
//! 10,000, on the default clock), every call timed with the CPU's timestamp counter (x86-64;
//! elsewhere `std::time::Instant`, in nanoseconds). The harness samples every 64th call with
//! a clock read that costs as much as the call, so its p99 of this regime (one call in six to
//! eight admitted) is a coarse view of the admissions' tail; this separates the two paths.
//!
//! ```text
//! cargo build --release --example sharded_latency
//! taskset -c 0 target/release/examples/sharded_latency [CALLS]
//! ```
//! Prints, for each side, the calls admitted and the 50th, 90th and 99th percentiles of the
//! admissions' and of the refusals' times in ticks (the timer's own cost included, the same
//! on both sides), three runs alternating.
use std::time::Duration;
use tollgate::{Bucket, DefaultClock, Quota, ShardedBucket};

/// A timestamp: the CPU's counter on x86-64, nanoseconds since `origin` elsewhere.
#[cfg(target_arch = "x86_64")]
fn ticks(_origin: std::time::Instant) -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks(origin: std::time::Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

/// The `p` quantile of sorted `v` (0 for none).
fn quantile(v: &[u64], p: f64) -> u64 {
    v.get(((v.len().max(1) - 1) as f64 * p) as usize)
        .copied()
        .unwrap_or(0)
}

/// Times `calls` one-token calls of `acquire`: the admissions' and refusals' times, sorted.
fn timed(calls: u64, acquire: impl Fn() -> bool) -> (Vec<u64>, Vec<u64>) {
    let origin = std::time::Instant::now();
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let t0 = ticks(origin);
        let ok = acquire();
        let t = ticks(origin) - t0;
        if ok {
            admitted.push(t);
        } else {
            refused.push(t);
        }
    }
    admitted.sort_unstable();
    refused.sort_unstable();
    (admitted, refused)
}

fn main() {
    let calls = std::env::args()
        .nth(1)
        .map_or(20_000_000, |a| a.parse().expect("a number of calls"));
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    for run in 1..=3 {
        for name in ["Bucket", "ShardedBucket"] {
            let (admitted, refused) = if name == "Bucket" {
                let b = Bucket::with_clock(quota, DefaultClock::default());
                timed(calls, || std::hint::black_box(&b).try_acquire(1).is_ok())
            } else {
                let b = ShardedBucket::with_clock(quota, 2, DefaultClock::default());
                timed(calls, || std::hint::black_box(&b).try_acquire(1).is_ok())
            };
            let q = |v: &[u64]| {
                format!(
                    "p50 {} p90 {} p99 {}",
                    quantile(v, 0.5),
                    quantile(v, 0.9),
                    quantile(v, 0.99)
                )
            };
            println!(
                "run {run} {name:<13} admitted {:>9}: admissions {} | refusals {}",
                admitted.len(),
                q(&admitted),
                q(&refused)
            );
        }
    }
}
