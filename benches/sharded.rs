//! ShardedBucket vs a single Bucket on the allow path, 1 and 2 threads (`iter_custom` across
//! threads, the slowest thread reported). The quota admits everything, so every call writes.
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use std::time::Duration;
use tollgate::{Bucket, Quota, ShardedBucket};

mod common;
use common::across_threads;

fn bench_sharded(c: &mut Criterion) {
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

criterion_group!(benches, bench_sharded);
criterion_main!(benches);
