//! The cost of the `metrics` feature per decision, side by side in one run with the Prometheus
//! recorder installed (the one the example server uses, without its HTTP listener): a plain
//! `Bucket` against a `Metered` one, and an unnamed `KeyedLimiter` against a named one, on the
//! admit path (one counter increment) and the refuse path (a counter and a histogram sample).
//!
//! `cargo bench --bench metrics --features metrics`; quote ratios from one run.
#![allow(missing_docs)]

use criterion::{black_box, Criterion};
use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::metrics::Metered;
use tollgate::{Bucket, DefaultClock, KeyedLimiter, Quota};

/// A rate and burst no benchmark loop drains: every call is admitted.
fn open() -> Quota {
    Quota::new(
        1_000_000_000,
        std::time::Duration::from_secs(1),
        4_000_000_000,
    )
    .unwrap()
}

/// One token an hour, drained: every call is refused.
fn shut() -> Quota {
    Quota::new(1, std::time::Duration::from_secs(3600), 1).unwrap()
}

fn bench(c: &mut Criterion) {
    // Installed before any limiter is named: their handles are the recorder's.
    metrics::set_global_recorder(PrometheusBuilder::new().build_recorder())
        .expect("the only recorder");

    let mut g = c.benchmark_group("metrics/admitted");
    let plain = Bucket::new(open());
    let metered = Metered::new("bench", Bucket::new(open()));
    g.bench_function("bucket", |b| b.iter(|| black_box(plain.try_acquire(1))));
    g.bench_function("bucket_metered", |b| {
        b.iter(|| black_box(metered.try_acquire(1)))
    });
    let keyed: KeyedLimiter<u64> = KeyedLimiter::new(open(), 1024);
    let named: KeyedLimiter<u64> = KeyedLimiter::builder(open(), 1024, DefaultClock::default())
        .name("bench-keyed")
        .build()
        .unwrap();
    g.bench_function("keyed", |b| b.iter(|| black_box(keyed.try_acquire(&7, 1))));
    g.bench_function("keyed_named", |b| {
        b.iter(|| black_box(named.try_acquire(&7, 1)))
    });
    g.finish();

    let mut g = c.benchmark_group("metrics/refused");
    let plain = Bucket::new(shut());
    let metered = Metered::new("bench-refused", Bucket::new(shut()));
    let _ = (plain.try_acquire(1), metered.try_acquire(1));
    g.bench_function("bucket", |b| b.iter(|| black_box(plain.try_acquire(1))));
    g.bench_function("bucket_metered", |b| {
        b.iter(|| black_box(metered.try_acquire(1)))
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
