//! `Smooth::try_acquire(1, Duration::ZERO)` next to `Bucket::try_acquire(1)`, single-threaded,
//! on the default clock: the admit path (a CAS every call) and the refuse path (a load only).
//!
//! `cargo bench --bench smooth -- --warm-up-time 1 --measurement-time 2`

#![allow(missing_docs)] // criterion_group! generates an undocumented public fn

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota, Smooth};

fn try_acquire(c: &mut Criterion) {
    let mut g = c.benchmark_group("try_acquire");

    // Admit: every call is admitted and writes the word. `Smooth` allows at most 10^6 permits
    // per second (one per microsecond), so it runs on a `ManualClock` that its unbounded
    // timeout advances by the 1 µs wait (one atomic add) instead of sleeping.
    let smooth = Smooth::bursty_with_clock(1e6, Duration::ZERO, ManualClock::new()).unwrap();
    g.bench_function("smooth/admit", |b| {
        b.iter(|| assert!(smooth.try_acquire(black_box(1), Duration::MAX)))
    });
    let bucket = Bucket::new(Quota::per_second(1_000_000_000).unwrap());
    g.bench_function("bucket/admit", |b| {
        b.iter(|| assert!(bucket.try_acquire(black_box(1)).is_ok()))
    });

    // Refuse: 1 permit per 10^6 s, already taken; every call only reads.
    let smooth = Smooth::bursty(1e-6).unwrap();
    smooth.acquire(1);
    g.bench_function("smooth/refuse", |b| {
        b.iter(|| assert!(!smooth.try_acquire(black_box(1), Duration::ZERO)))
    });
    let bucket = Bucket::new(Quota::new(1, Duration::from_secs(1_000_000), 1).unwrap());
    bucket.try_acquire(1).unwrap();
    g.bench_function("bucket/refuse", |b| {
        b.iter(|| assert!(bucket.try_acquire(black_box(1)).is_err()))
    });

    g.finish();
}

criterion_group!(benches, try_acquire);
criterion_main!(benches);
