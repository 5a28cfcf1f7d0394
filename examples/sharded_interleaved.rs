//! One `Bucket` against a `ShardedBucket` at one thread, timed in
//! interleaved blocks (`tollgate_testkit::interleave`): 1,500 pairs of blocks of 20,000
//! `try_acquire(1)` calls each, alternating, on the quanta clock. Issue #26 holds the sharded
//! bucket to at least one word's speed in every regime, at one thread too, where the harness's
//! rounds differ by more than the gap (0.86–1.06× between runs of one binary):
//!
//! * `allow`: 10^9 tokens/s, a burst of 10^9: every call admitted (the sharded bucket from its
//!   shard's lease);
//! * `deny`: one token an hour, drained first: every call refused (the sharded bucket from its
//!   shard's `dry_until`, without reading the central word);
//! * `mixed`: 10^7 tokens/s, a burst of 100: a call every few nanoseconds against a token every
//!   100, so most calls are refused and both paths run.
//!
//! The shards: the argument, else one per CPU the process may run on and at least two (pinned
//! to one CPU, one shard would take the central word's path and measure nothing of the
//! shards').
//!
//! Prints, per regime, each side's fastest block and the medians of the per-pair ratios
//! (`ShardedBucket / Bucket`, time per call: below 1 is faster), quiet and disturbed pairs
//! apart.
//!
//! ```text
//! cargo build --release --example sharded_interleaved
//! taskset -c 1 target/release/examples/sharded_interleaved [SHARDS]
//! ```
use std::hint::black_box;
use std::time::Duration;
use tollgate::{Bucket, QuantaClock, Quota, ShardedBucket};
use tollgate_testkit::interleave::{report, time_pairs};

fn main() {
    let shards = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("SHARDS: a number"))
        .unwrap_or_else(|| ShardedBucket::<QuantaClock>::default_shards().max(2));
    println!("Bucket against a ShardedBucket of {shards} shards, one thread:");
    let regimes = [
        ("allow", (1_000_000_000, 1_000_000_000), false),
        ("deny", (1, 1), true),
        ("mixed", (10_000_000, 100), false),
    ];
    for (regime, (tokens, burst), drain) in regimes {
        let per = if regime == "deny" {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs(1)
        };
        let quota = Quota::new(tokens, per, burst).expect("a valid quota");
        let bucket = Bucket::with_clock(quota, QuantaClock::new());
        let sharded = ShardedBucket::with_clock(quota, shards, QuantaClock::new());
        if drain {
            bucket.try_acquire(burst).expect("a full bucket");
            sharded.try_acquire(burst).expect("a full bucket");
        }
        let blocks = time_pairs(
            (20_000, 1_500),
            || black_box(&bucket).try_acquire(1).is_ok(),
            || black_box(&sharded).try_acquire(1).is_ok(),
        );
        report(regime, &[blocks]);
    }
}
