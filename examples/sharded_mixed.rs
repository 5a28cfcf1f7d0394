//! One thread offering more load than the rate (issue 9's mixed regime) to a `ShardedBucket`
//! on the real clock; prints calls/s and the time spent in the slowest calls. For profiling:
//! `cargo build --release --example sharded_mixed && target/release/examples/sharded_mixed 2 500`.
use std::time::{Duration, Instant};
use tollgate::{Quota, ShardedBucket};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let shards = args.next().unwrap_or(2) as usize;
    let ms = args.next().unwrap_or(500);
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    let bucket = ShardedBucket::with_clock(quota, shards, tollgate::DefaultClock::default());
    let start = Instant::now();
    let (mut calls, mut admitted, mut slow) = (0u64, 0u64, 0u64);
    let mut worst = Duration::ZERO;
    while start.elapsed() < Duration::from_millis(ms) {
        for _ in 0..64 {
            let t = Instant::now();
            admitted += u64::from(bucket.try_acquire(1).is_ok());
            let d = t.elapsed();
            if d > Duration::from_micros(1) {
                slow += 1;
                worst = worst.max(d);
            }
            calls += 1;
        }
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "{shards} shards: {:.2} M calls/s, {:.2} M admitted/s, {slow} calls over 1 us (worst {worst:?}), stranded {}",
        calls as f64 / s / 1e6,
        admitted as f64 / s / 1e6,
        bucket.stranded_tokens()
    );
}
