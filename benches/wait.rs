//! `Bucket::reserve` (and dropping the reservation) next to `Bucket::try_acquire`, single
//! thread, on the allow path (the quota never refuses), on the default clock.
//!
//! `cargo bench --bench wait -- --warm-up-time 1 --measurement-time 2`

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tollgate::{Bucket, Quota};

/// A quota that always admits one token: 10^9 per second with a huge burst.
fn allow_all() -> Quota {
    Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 40).unwrap()
}

fn wait(c: &mut Criterion) {
    let mut g = c.benchmark_group("wait/allow");
    let bucket = Bucket::new(allow_all());
    g.bench_function("Bucket::try_acquire", |b| {
        b.iter(|| black_box(bucket.try_acquire(black_box(1))))
    });
    let bucket = Bucket::new(allow_all());
    g.bench_function("Bucket::reserve+drop", |b| {
        b.iter(|| {
            let r = bucket.reserve(black_box(1));
            black_box(&r);
        })
    });
    let bucket = Bucket::new(allow_all());
    g.bench_function("Bucket::try_acquire_for(0)", |b| {
        b.iter(|| black_box(bucket.try_acquire_for(black_box(1), Duration::ZERO)))
    });
    g.finish();
}

criterion_group!(benches, wait);
criterion_main!(benches);
