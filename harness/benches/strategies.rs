//! The `tollgate-bench compare` comparison under criterion, for its statistics and HTML report
//! (`target/criterion/report/index.html`): every built-in strategy at 1 and 2 threads on the
//! allow, deny and mixed regimes (same quotas as the CLI; see `tollgate_bench::plan`).
//!
//! Contended cells use `iter_custom`: every thread runs `iters` operations and the sample is
//! the slowest thread's time, so a figure is the time per operation of one thread under
//! contention. Run one group with e.g. `cargo bench -p tollgate-bench -- compare/allow`.
// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tollgate::{DefaultClock, Quota};
use tollgate_bench::rng::SplitMix64;
use tollgate_bench::{strategies, RateLimiter, Regime, Setup};

use tollgate_testkit::contention as common;

/// Every thread runs `iters` operations; returns the slowest thread's time. Keyed strategies
/// draw a key per operation from 1000 keys (a hash of thread and iteration).
fn contended(limiter: &dyn RateLimiter, threads: usize, iters: u64) -> Duration {
    let keyed = limiter.is_keyed();
    common::across_threads(threads, iters, |t, i| {
        let r = if keyed {
            limiter.try_acquire_key(SplitMix64(i ^ ((t as u64) << 48)).next() % 1000, 1)
        } else {
            limiter.try_acquire(1)
        };
        black_box(r.is_ok());
    })
}

fn compare(c: &mut Criterion) {
    for regime in Regime::ALL {
        let mut group = c.benchmark_group(format!("compare/{}", regime.name()));
        let quota = Quota::new(
            regime.default_rate(),
            Duration::from_secs(1),
            regime.default_burst(),
        )
        .expect("the regimes' quotas are valid");
        for strategy in strategies::builtins() {
            for threads in [1usize, 2] {
                let setup = Setup {
                    quota,
                    keys: 1000,
                    clock: DefaultClock::default(),
                };
                let limiter = strategy
                    .build(&setup)
                    .expect("buildable with the default quotas");
                if regime.starts_drained() {
                    for key in 0..if limiter.is_keyed() { 1000 } else { 1 } {
                        let _ = limiter.try_acquire_key(key, quota.burst());
                    }
                }
                let id = BenchmarkId::new(strategy.name(), format!("{threads}t"));
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| contended(&*limiter, threads, iters))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, compare);
criterion_main!(benches);
