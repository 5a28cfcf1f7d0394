//! Refuses `N` one-token requests on a drained `ShardedBucket` of `SHARDS` shards (0: a single
//! `Bucket`), for counting the instructions of a refusal with callgrind (run with N = 0 and
//! N = 1,000,000 and subtract):
//!
//! ```text
//! cargo build --release --example sharded_refusals
//! valgrind --tool=callgrind target/release/examples/sharded_refusals 64 1000000
//! ```
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota, ShardedBucket};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let shards = args.next().unwrap_or(64);
    let n = args.next().unwrap_or(1_000_000);
    // 1,024 tokens per hour on a frozen clock: the pool stays dry for the whole run.
    let quota = Quota::new(1024, Duration::from_secs(3600), 1024).unwrap();
    let mut refused = 0usize;
    if shards == 0 {
        let bucket = Bucket::with_clock(quota, ManualClock::new());
        bucket.try_acquire(1024).unwrap();
        for _ in 0..n {
            refused += usize::from(std::hint::black_box(&bucket).try_acquire(1).is_err());
        }
    } else {
        let bucket = ShardedBucket::with_clock(quota, shards, ManualClock::new());
        assert_eq!(bucket.shards(), shards);
        bucket.try_acquire(1024).unwrap();
        for _ in 0..n {
            refused += usize::from(std::hint::black_box(&bucket).try_acquire(1).is_err());
        }
    }
    assert_eq!(refused, n);
    println!("{shards} shards: {refused} refusals");
}
