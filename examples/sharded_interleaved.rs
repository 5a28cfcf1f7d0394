//! One `Bucket` against a `ShardedBucket`, timed in interleaved blocks
//! (`tollgate_testkit::interleave`): 1,500 pairs of blocks of 20,000 `try_acquire(1)` calls
//! each, alternating, on the quanta clock; on `T` threads, 1,500 / `T` pairs of blocks of
//! 20,000 calls on every thread, all started together and timed until the last ends. Issue
//! #26 holds the sharded bucket to at least one word's speed in every regime, at one thread
//! too, where the harness's rounds (each strategy's run after the other's) differ by more than
//! the gap: 0.86–1.06× between runs of one binary.
//!
//! The regimes are the harness's (`tollgate-bench compare --regime R`, its default rates and
//! bursts), so the two measures can be set side by side:
//!
//! * `allow`: 10^9 tokens/s, a burst of 10^9: every call admitted (the sharded bucket from its
//!   shard's lease);
//! * `deny`: one token a second, a burst of 1,000, drained first: nearly every call refused
//!   (the sharded bucket from its shard's `dry_until`, without reading the central word);
//! * `mixed`: 10^7 tokens/s, a burst of 10,000: a call every few nanoseconds against a token
//!   every 100, so most calls are refused and both paths run.
//!
//! The shards: the first argument, else one per CPU the process may run on and at least two
//! (pinned to one CPU, one shard would take the central word's path and measure nothing of
//! the shards'). The thread counts: the second, comma-separated (default 1).
//!
//! Prints, per thread count and regime, each side's fastest block and the medians of the
//! per-pair ratios (`ShardedBucket / Bucket`, time per call, aggregate over the threads:
//! below 1 is faster), quiet and disturbed pairs apart.
//!
//! ```text
//! cargo build --release --example sharded_interleaved
//! taskset -c 1 target/release/examples/sharded_interleaved [SHARDS [THREADS]]
//! target/release/examples/sharded_interleaved 2 1,2,4,8
//! ```
use std::hint::black_box;
use std::time::Duration;
use tollgate::{Bucket, QuantaClock, Quota, ShardedBucket};
use tollgate_testkit::interleave::{report, time_pairs, time_pairs_on};

fn main() {
    let shards = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SHARDS: a number"))
        .unwrap_or_else(|| ShardedBucket::<QuantaClock>::default_shards().max(2));
    let threads: Vec<usize> = std::env::args()
        .nth(2)
        .map(|a| {
            a.split(',')
                .map(|t| t.parse().expect("THREADS: numbers, comma-separated"))
                .collect()
        })
        .unwrap_or_else(|| vec![1]);
    let regimes = [
        ("allow", (1_000_000_000, 1_000_000_000), false),
        ("deny", (1, 1_000), true),
        ("mixed", (10_000_000, 10_000), false),
    ];
    for &t in &threads {
        println!("Bucket against a ShardedBucket of {shards} shards, {t} thread(s):");
        for (regime, (tokens, burst), drain) in regimes {
            let quota = Quota::new(tokens, Duration::from_secs(1), burst).expect("a valid quota");
            let bucket = Bucket::with_clock(quota, QuantaClock::new());
            let sharded = ShardedBucket::with_clock(quota, shards, QuantaClock::new());
            // A bucket has no more shards than its burst has tokens.
            assert_eq!(
                sharded.shards(),
                shards,
                "{regime}: a burst below the shard count"
            );
            if drain {
                bucket.try_acquire(burst).expect("a full bucket");
                sharded.try_acquire(burst).expect("a full bucket");
            }
            let size = (20_000, 1_500 / t.max(1));
            let blocks = if t == 1 {
                time_pairs(
                    size,
                    || black_box(&bucket).try_acquire(1).is_ok(),
                    || black_box(&sharded).try_acquire(1).is_ok(),
                )
            } else {
                time_pairs_on(
                    t,
                    size,
                    &|| black_box(&bucket).try_acquire(1).is_ok(),
                    &|| black_box(&sharded).try_acquire(1).is_ok(),
                )
            };
            report(regime, &[blocks]);
        }
    }
}
