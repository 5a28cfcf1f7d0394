//! Single bucket: tollgate's CAS bucket vs a `Mutex` with the same exact arithmetic vs governor,
//! side by side, on the allow path, the deny path, and 2 threads (allow path).
//!
//! `cargo bench --bench bucket`. Quote ratios from one run; the machines are noisy.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;
mod common;
use common::across_threads;
use tollgate::{gcra, Bucket, Clock, Denied, QuantaClock, Quota};

/// The baseline: a `Mutex<u64>` around the same pure decision function.
struct MutexBucket {
    state: Mutex<u64>,
    quota: Quota,
    clock: QuantaClock,
}

impl MutexBucket {
    fn new(quota: Quota) -> Self {
        MutexBucket {
            state: Mutex::new(gcra::FULL),
            quota,
            clock: QuantaClock::new(),
        }
    }
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let mut state = self.state.lock().unwrap();
        if let Some(next) = gcra::try_acquire(*state, now, &self.quota, cost)? {
            *state = next;
        }
        Ok(())
    }
}

type Governor = governor::DefaultDirectRateLimiter;

fn governor(per_second: u32, burst: u32) -> Governor {
    let q = governor::Quota::per_second(NonZeroU32::new(per_second).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    governor::RateLimiter::direct(q)
}

/// A rate no benchmark loop can drain: every call is admitted.
fn allow_quota() -> Quota {
    Quota::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).unwrap()
}

/// One token an hour, drained first: every call is refused.
fn deny_quota() -> Quota {
    Quota::new(1, Duration::from_secs(3600), 1).unwrap()
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_thread");
    for (regime, quota, gov) in [
        (
            "allow",
            allow_quota(),
            governor(1_000_000_000, 1_000_000_000),
        ),
        ("deny", deny_quota(), governor(1, 1)),
    ] {
        let tollgate = Bucket::with_clock(quota, QuantaClock::new());
        let mutex = MutexBucket::new(quota);
        if regime == "deny" {
            let _ = tollgate.try_acquire(1);
            let _ = mutex.try_acquire(1);
            let _ = gov.check();
        }
        g.bench_function(BenchmarkId::new("tollgate", regime), |b| {
            b.iter(|| black_box(tollgate.try_acquire(black_box(1))))
        });
        g.bench_function(BenchmarkId::new("mutex", regime), |b| {
            b.iter(|| black_box(mutex.try_acquire(black_box(1))))
        });
        g.bench_function(BenchmarkId::new("governor", regime), |b| {
            b.iter(|| black_box(gov.check()))
        });
    }
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads_allow");
    let tollgate = Bucket::with_clock(allow_quota(), QuantaClock::new());
    let mutex = MutexBucket::new(allow_quota());
    let gov = governor(1_000_000_000, 1_000_000_000);
    g.bench_function("tollgate", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(tollgate.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("mutex", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(mutex.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(gov.check()).ok();
            })
        })
    });
    g.finish();
}

criterion_group!(benches, single_thread, two_threads);
criterion_main!(benches);
