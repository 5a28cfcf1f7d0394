//! A `ShardedBucket` run exactly at its rate on a `ManualClock` (10 M tokens/s, the clock
//! advancing by one token's time before each one-token request), so that every token is spread
//! over all the shards and each admission borrows: for counting the instructions of that path
//! with callgrind (run with N = 0 and N = 1,000,000 and subtract; SHARDS = 0: a single `Bucket`).
//!
//! ```text
//! cargo build --release --example sharded_tight
//! valgrind --tool=callgrind target/release/examples/sharded_tight 2 1000000
//! ```
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota, ShardedBucket};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let shards = args.next().unwrap_or(2);
    let n = args.next().unwrap_or(1_000_000);
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    let clock = ManualClock::new();
    let step = Duration::from_nanos(100);
    let mut admitted = 0usize;
    if shards == 0 {
        let bucket = Bucket::with_clock(quota, clock.clone());
        bucket.try_acquire(10_000).unwrap();
        for _ in 0..n {
            clock.advance(step);
            admitted += usize::from(std::hint::black_box(&bucket).try_acquire(1).is_ok());
        }
    } else {
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        bucket.try_acquire(10_000).unwrap();
        for _ in 0..n {
            clock.advance(step);
            admitted += usize::from(std::hint::black_box(&bucket).try_acquire(1).is_ok());
        }
    }
    assert_eq!(admitted, n);
    println!("{shards} shards: {admitted} admitted");
}
