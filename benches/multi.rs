//! Policies of several quotas, side by side in one run, on the same quanta clock:
//!
//! * `bucket` — one `Bucket` (one quota): the reference a two-quota decision is held to;
//! * `multi` — a two-quota `MultiBucket` (both states in one 128-bit word, one CAS);
//! * `multi_chain` — two `Bucket`s: reserve on the first (cancelled if not due at once), try the
//!   second, cancel the first on refusal (the composition without one atomic step);
//! * `multi_mutex` — both states under one `Mutex`, decided with the same `gcra` arithmetic;
//! * `multi3`, `multi4` — three and four quotas (the sequence-locked store).
//!
//! `allow`: every call admitted (rates no loop drains). `deny`: every call refused by the first
//! quota (one token an hour, drained first) while the second still holds tokens, so each
//! decision computes both quotas. `two_threads_allow`: two threads on one policy, slowest thread.
//!
//! `floor`: the atomic primitives alone, no clock and no arithmetic — what one decision's
//! commit costs on this CPU whatever the algorithm: a 64-bit load and `lock cmpxchg` (a
//! `Bucket`'s), a 128-bit load and `lock cmpxchg16b` through `portable-atomic` (a two-quota
//! `MultiBucket`'s before its mirror), the 128-bit CAS alone (its expected value from the
//! previous CAS, no load), the 128-bit CAS from a mirror of the word in two plain 64-bit words
//! (`MultiBucket`'s now), and an uncontended `Mutex` lock and unlock around two plain stores
//! (`multi_mutex`'s). Each iteration hits the same word, as the decisions above do.
//!
//! `cargo bench --bench multi -- --warm-up-time 0.5 --measurement-time 1.5`; quote ratios from
//! one run (the machines are noisy).
#![allow(missing_docs)]

use common::across_threads;
use criterion::{BenchmarkId, Criterion};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;
use tollgate::{gcra, Bucket, Clock, Denied, Limits, MultiBucket, QuantaClock, Quota};
use tollgate_testkit::contention as common;
use tollgate_testkit::quotas::multi_bench as quotas;

/// Two quotas under one mutex, decided with the bucket's arithmetic: admitted iff both hold.
struct MutexPair {
    states: Mutex<[u64; 2]>,
    quotas: [Quota; 2],
    clock: QuantaClock,
}

impl MutexPair {
    fn new(quotas: [Quota; 2]) -> MutexPair {
        MutexPair {
            states: Mutex::new([gcra::FULL; 2]),
            quotas,
            clock: QuantaClock::new(),
        }
    }

    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let mut states = self.states.lock().unwrap();
        let a = gcra::try_acquire(states[0], now, &self.quotas[0], cost);
        let b = gcra::try_acquire(states[1], now, &self.quotas[1], cost);
        match (a, b) {
            (Ok(a), Ok(b)) => {
                *states = [a.unwrap_or(states[0]), b.unwrap_or(states[1])];
                Ok(())
            }
            (Err(Denied::RetryAfter(x)), Err(Denied::RetryAfter(y))) => {
                Err(Denied::RetryAfter(x.max(y)))
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }
}

/// Two buckets taken in order: reserve the first, try the second, cancel the first on refusal.
struct Chain {
    first: Bucket<QuantaClock>,
    second: Bucket<QuantaClock>,
}

impl Chain {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let r = self.first.reserve(cost)?;
        let wait = r.delay();
        if wait > Duration::ZERO {
            r.cancel();
            return Err(Denied::RetryAfter(wait));
        }
        match self.second.try_acquire(cost) {
            Ok(()) => Ok(()),
            Err(e) => {
                r.cancel();
                Err(e)
            }
        }
    }
}

/// The quotas of a regime: `allow` never drains them; `deny` drains the first.
fn drain(deny: bool, f: impl Fn() -> Result<(), Denied>) {
    if deny {
        f().unwrap();
        assert!(f().is_err());
    }
}

fn bucket(deny: bool) -> Bucket<QuantaClock> {
    let b = Bucket::with_clock(quotas(deny)[0], QuantaClock::new());
    drain(deny, || b.try_acquire(1));
    b
}

fn multi(deny: bool, n: usize) -> MultiBucket<QuantaClock> {
    let limits = Limits::new(quotas(deny)[..n].iter().copied()).unwrap();
    let m = MultiBucket::with_clock(limits, QuantaClock::new());
    drain(deny, || m.try_acquire(1));
    m
}

fn chain(deny: bool) -> Chain {
    let q = quotas(deny);
    let c = Chain {
        first: Bucket::with_clock(q[0], QuantaClock::new()),
        second: Bucket::with_clock(q[1], QuantaClock::new()),
    };
    drain(deny, || c.try_acquire(1));
    c
}

fn mutex(deny: bool) -> MutexPair {
    let q = quotas(deny);
    let m = MutexPair::new([q[0], q[1]]);
    drain(deny, || m.try_acquire(1));
    m
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("multi_single_thread");
    for (regime, deny) in [("allow", false), ("deny", true)] {
        let (b, m, m3, m4) = (bucket(deny), multi(deny, 2), multi(deny, 3), multi(deny, 4));
        let (ch, mx) = (chain(deny), mutex(deny));
        g.bench_function(BenchmarkId::new("bucket", regime), |i| {
            i.iter(|| black_box(b.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("multi", regime), |i| {
            i.iter(|| black_box(m.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("multi_chain", regime), |i| {
            i.iter(|| black_box(ch.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("multi_mutex", regime), |i| {
            i.iter(|| black_box(mx.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("multi3", regime), |i| {
            i.iter(|| black_box(m3.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("multi4", regime), |i| {
            i.iter(|| black_box(m4.try_acquire(1)))
        });
    }
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("multi_two_threads_allow");
    let (b, m, ch, mx) = (bucket(false), multi(false, 2), chain(false), mutex(false));
    g.bench_function("bucket", |i| {
        i.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(b.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("multi", |i| {
        i.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(m.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("multi_chain", |i| {
        i.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(ch.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("multi_mutex", |i| {
        i.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(mx.try_acquire(1)).ok();
            })
        })
    });
    g.finish();
}

fn floor(c: &mut Criterion) {
    use portable_atomic::AtomicU128;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let mut g = c.benchmark_group("multi_floor");
    let word = AtomicU64::new(0);
    g.bench_function("load_cas64", |i| {
        i.iter(|| {
            let v = word.load(Relaxed);
            black_box(word.compare_exchange_weak(v, v + 1, Relaxed, Relaxed)).ok();
        })
    });
    let pair = AtomicU128::new(0);
    let step = 1 | (1u128 << 64);
    g.bench_function("load_cas128", |i| {
        i.iter(|| {
            let v = pair.load(Relaxed);
            black_box(pair.compare_exchange_weak(v, v.wrapping_add(step), Relaxed, Relaxed)).ok();
        })
    });
    g.bench_function("cas128_no_load", |i| {
        let mut v = pair.load(Relaxed);
        i.iter(|| {
            match pair.compare_exchange_weak(v, v.wrapping_add(step), Relaxed, Relaxed) {
                Ok(_) => v = v.wrapping_add(step),
                Err(actual) => v = actual,
            }
            black_box(v);
        })
    });
    let mirrored = (AtomicU128::new(0), [AtomicU64::new(0), AtomicU64::new(0)]);
    g.bench_function("mirror_cas128", |i| {
        i.iter(|| {
            let (word, mirror) = &mirrored;
            let v =
                u128::from(mirror[0].load(Relaxed)) | (u128::from(mirror[1].load(Relaxed)) << 64);
            let next = v.wrapping_add(step);
            if word
                .compare_exchange_weak(v, next, Relaxed, Relaxed)
                .is_ok()
            {
                mirror[0].store(next as u64, Relaxed);
                mirror[1].store((next >> 64) as u64, Relaxed);
            }
            black_box(v);
        })
    });
    let locked = Mutex::new([0u64; 2]);
    g.bench_function("mutex_pair", |i| {
        i.iter(|| {
            let mut s = locked.lock().unwrap();
            s[0] += 1;
            s[1] += 1;
            black_box(&*s);
        })
    });
    g.finish();
}

// ---- instruction counts (callgrind: `BENCH=multi ci/callgrind.sh`) ----

/// The measured loop: `n` calls of `f`, never inlined, so callgrind collects exactly this.
#[inline(never)]
fn callgrind_loop<R>(n: u64, f: impl Fn() -> R) {
    for _ in 0..n {
        black_box(f());
    }
}

fn scenarios() -> Vec<String> {
    let mut v = Vec::new();
    for l in [
        "bucket",
        "multi",
        "multi_chain",
        "multi_mutex",
        "multi3",
        "multi4",
    ] {
        for r in ["allow", "deny"] {
            v.push(format!("{l}/{r}"));
        }
    }
    v
}

fn callgrind(name: &str, n: u64) -> Result<(), String> {
    let (limiter, regime) = name
        .split_once('/')
        .ok_or_else(|| format!("{name}: expected LIMITER/REGIME"))?;
    let deny = match regime {
        "allow" => false,
        "deny" => true,
        other => return Err(format!("{other}: no such regime")),
    };
    fn run(n: u64, f: impl Fn() -> Result<(), Denied>) {
        for _ in 0..1000 {
            black_box(f()).ok();
        }
        callgrind_loop(n, f);
    }
    match limiter {
        "bucket" => {
            let b = bucket(deny);
            run(n, || b.try_acquire(1));
        }
        "multi" | "multi3" | "multi4" => {
            let k = match limiter {
                "multi" => 2,
                "multi3" => 3,
                _ => 4,
            };
            let m = multi(deny, k);
            run(n, || m.try_acquire(1));
        }
        "multi_chain" => {
            let c = chain(deny);
            run(n, || c.try_acquire(1));
        }
        "multi_mutex" => {
            let m = mutex(deny);
            run(n, || m.try_acquire(1));
        }
        other => return Err(format!("{other}: no such limiter")),
    }
    Ok(())
}

fn main() {
    if common::callgrind_cli("multi", scenarios, callgrind) {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    single_thread(&mut c);
    two_threads(&mut c);
    floor(&mut c);
    c.final_summary();
}
