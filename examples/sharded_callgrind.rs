//! Drives a `ShardedBucket` (or, with SHARDS = 0, a single `Bucket`) on a `ManualClock` for
//! counting instructions per call with callgrind: run with N = 0 and N = 1,000,000 and
//! subtract. The modes:
//!
//! * `allow`: 10^9 tokens/s and a burst of 10^9, the clock advancing by 1 ns before each
//!   one-token request: every call admitted, from the shard's lease (a new lease every 65,536).
//! * `refuse`: one-token requests on a drained bucket that stays dry (1,024 tokens per hour):
//!   the refusal path.
//! * `tight`: 10 M tokens/s, the clock advancing by one token's time before each one-token
//!   request: every call admitted, from near leases (one central visit per near lease).
//! * `mixed`: 10 M tokens/s, the clock advancing by 40 ns (0.4 token's time) before each
//!   one-token request: two in five admitted, as one thread of the harness's `mixed` regime
//!   sees it (a call every few tens of nanoseconds against a token every 100).
//!
//! ```text
//! cargo build --release --example sharded_callgrind
//! taskset -c 0 valgrind --tool=callgrind target/release/examples/sharded_callgrind refuse 64 1000000
//! ```
//!
//! Pinned: a thread that migrates takes another shard at its next look at the CPU (every
//! 1,023 decisions), and in `tight` and `mixed` the near lease it leaves lapses, which changes
//! the count (and may fail the admission check below by a few tokens).
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota, ShardedBucket};

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "refuse".to_owned());
    let mut nums = args.map(|a| a.parse::<usize>().expect("a number"));
    let shards = nums.next().unwrap_or(64);
    let n = nums.next().unwrap_or(1_000_000);
    let tight = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    // The step, and how many of `n` calls are admitted (in fifths).
    let (quota, step, fifths) = match mode.as_str() {
        "refuse" => (
            Quota::new(1024, Duration::from_secs(3600), 1024).unwrap(),
            Duration::ZERO,
            0,
        ),
        "allow" => (
            Quota::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).unwrap(),
            Duration::from_nanos(1),
            5,
        ),
        "tight" => (tight, Duration::from_nanos(100), 5),
        "mixed" => (tight, Duration::from_nanos(40), 2),
        other => panic!("mode {other}: allow, refuse, tight or mixed"),
    };
    let clock = ManualClock::new();
    let sharded = (shards > 0).then(|| ShardedBucket::with_clock(quota, shards, clock.clone()));
    let single = Bucket::with_clock(quota, clock.clone());
    let acquire = |cost| match &sharded {
        Some(b) => sharded_decision(std::hint::black_box(b), cost),
        None => single_decision(std::hint::black_box(&single), cost),
    };
    // Drained first, except in `allow`.
    if mode != "allow" {
        assert!(acquire(quota.burst()));
    }
    let mut admitted = 0usize;
    for _ in 0..n {
        clock.advance(step);
        admitted += usize::from(acquire(1));
    }
    // Every token taken as soon as the pool holds it (one fewer when the last is just short).
    assert!(admitted.abs_diff(n * fifths / 5) <= 1, "{admitted} of {n}");
    println!("{mode}, {shards} shards: {admitted} of {n} admitted");
}

// One function per type, out of line, so that neither type's code shapes the other's (their
// registers saved, their layout): each count is of its own type's decision.
#[inline(never)]
fn sharded_decision(b: &ShardedBucket<ManualClock>, cost: u64) -> bool {
    b.try_acquire(cost).is_ok()
}

#[inline(never)]
fn single_decision(b: &Bucket<ManualClock>, cost: u64) -> bool {
    b.try_acquire(cost).is_ok()
}
