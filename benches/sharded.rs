//! ShardedBucket vs a single Bucket:
//! * `sharded/allow`: the allow path, 1 and 2 threads (`iter_custom` across threads, the slowest
//!   thread reported); the quota admits everything, so every call writes.
//! * `sharded/refuse`: the refusal of one token on a drained bucket, one thread, at 2, 64 and
//!   1,024 shards and on a single `Bucket`.
//! * Then, outside criterion, the share of the rate one greedy thread gets on the real clock at
//!   5 M tokens/s, on a single `Bucket` and at 2, 64 and 1,024 shards, printed
//!   (`cargo bench --bench sharded -- greedy` for these alone).
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{black_box, criterion_group, BenchmarkId, Criterion};
use std::time::{Duration, Instant};
use tollgate::{Bucket, Quota, ShardedBucket};

use common::across_threads;
use tollgate_testkit::contention as common;

fn bench_allow(c: &mut Criterion) {
    let quota = Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 50).unwrap();
    let mut group = c.benchmark_group("sharded/allow");
    for threads in [1usize, 2] {
        let sharded = ShardedBucket::new(quota);
        group.bench_function(BenchmarkId::new("sharded", threads), |b| {
            b.iter_custom(|iters| {
                across_threads(threads, iters, |_, _| {
                    black_box(sharded.try_acquire(1)).ok();
                })
            })
        });
        let single = Bucket::new(quota);
        group.bench_function(BenchmarkId::new("bucket", threads), |b| {
            b.iter_custom(|iters| {
                across_threads(threads, iters, |_, _| {
                    black_box(single.try_acquire(1)).ok();
                })
            })
        });
    }
    group.finish();
}

fn bench_refuse(c: &mut Criterion) {
    // 1,024 tokens per hour: drained, every shard stays below one token for the whole run.
    let quota = Quota::new(1024, Duration::from_secs(3600), 1024).unwrap();
    let mut group = c.benchmark_group("sharded/refuse");
    for shards in [2usize, 64, 1024] {
        let sharded = ShardedBucket::with_clock(quota, shards, tollgate::DefaultClock::default());
        assert_eq!(sharded.shards(), shards);
        sharded.try_acquire(1024).unwrap();
        assert!(sharded.try_acquire(1).is_err());
        group.bench_function(BenchmarkId::new("sharded", shards), |b| {
            b.iter(|| black_box(sharded.try_acquire(black_box(1))).is_err())
        });
    }
    let single = Bucket::new(quota);
    single.try_acquire(1024).unwrap();
    group.bench_function("bucket", |b| {
        b.iter(|| black_box(single.try_acquire(black_box(1))).is_err())
    });
    group.finish();
}

/// One thread asks for one token at a time as fast as it can for `run` on a drained bucket
/// (`shards` 0: a single `Bucket`, the reference): the tokens it got over what the rate allowed
/// in that time.
fn greedy_share(shards: usize, rate: u64, run: Duration) -> f64 {
    let quota = Quota::per_second(rate).unwrap();
    let clock = tollgate::DefaultClock::default();
    let (sharded, single) = if shards == 0 {
        (None, Some(Bucket::with_clock(quota, clock)))
    } else {
        (Some(ShardedBucket::with_clock(quota, shards, clock)), None)
    };
    let acquire = |cost| match (&sharded, &single) {
        (Some(b), _) => b.try_acquire(cost).is_ok(),
        (_, Some(b)) => b.try_acquire(cost).is_ok(),
        _ => unreachable!(),
    };
    assert!(acquire(rate));
    let start = Instant::now();
    let mut got = 0u64;
    while start.elapsed() < run {
        for _ in 0..256 {
            got += u64::from(acquire(1));
        }
    }
    got as f64 / (rate as f64 * start.elapsed().as_secs_f64())
}

criterion_group!(benches, bench_allow, bench_refuse);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench -- <filter>` runs only the criterion benchmarks it names (`greedy`: only
    // the greedy-thread shares).
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "greedy")
    {
        return;
    }
    for shards in [0usize, 2, 64, 1024] {
        let shares: Vec<String> = (0..3)
            .map(|_| {
                format!(
                    "{:.2} %",
                    100.0 * greedy_share(shards, 5_000_000, Duration::from_millis(300))
                )
            })
            .collect();
        let what = match shards {
            0 => "a single Bucket".to_owned(),
            n => format!("{n} shards"),
        };
        println!(
            "greedy thread, 5 M/s, {what}, real clock: {} of the rate (3 runs of 300 ms)",
            shares.join(", ")
        );
    }
}
