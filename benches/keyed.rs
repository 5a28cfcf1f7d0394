//! Keyed limiter vs governor 0.10's keyed limiter (DashMap store), side by side in one run.
//!
//! * `keyed/uniform10k`: 10,000 keys picked uniformly at random; `keyed/hot16`: 16 hot keys.
//!   1 and 2 threads, `iter_custom` across threads, the slowest thread reported. All keys are
//!   inserted beforehand and the quota admits everything: this is the lookup-and-admit path.
//! * Before criterion runs, memory per key at 1M keys is printed for both (a counting global
//!   allocator: bytes live after inserting 1M keys, divided by 1M).
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{black_box, criterion_group, BenchmarkId, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::{KeyedLimiter, Quota};

mod common;
use common::across_threads;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn key_stream(keys: u64, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..1 << 16)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % keys).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
        .collect()
}

fn quota() -> Quota {
    Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 40).unwrap()
}

fn governor_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(u32::MAX).unwrap())
        .allow_burst(NonZeroU32::new(u32::MAX).unwrap())
}

fn bench_keyed(c: &mut Criterion) {
    for (name, keys) in [("uniform10k", 10_000u64), ("hot16", 16)] {
        let mut group = c.benchmark_group(format!("keyed/{name}"));
        let streams: Vec<Vec<u64>> = (0..2).map(|t| key_stream(keys, 0x1234 + t)).collect();
        let ours: KeyedLimiter<u64> = KeyedLimiter::new(quota(), 1 << 20);
        let theirs = governor::DefaultKeyedRateLimiter::<u64>::keyed(governor_quota());
        for s in &streams {
            for k in s {
                ours.try_acquire(k, 1).unwrap();
                theirs.check_key(k).unwrap();
            }
        }
        for threads in [1usize, 2] {
            group.bench_function(BenchmarkId::new("tollgate", threads), |b| {
                b.iter_custom(|iters| {
                    across_threads(threads, iters, |t, i| {
                        let k = &streams[t][(i & 0xFFFF) as usize];
                        black_box(ours.try_acquire(k, 1)).ok();
                    })
                })
            });
            group.bench_function(BenchmarkId::new("governor", threads), |b| {
                b.iter_custom(|iters| {
                    across_threads(threads, iters, |t, i| {
                        let k = &streams[t][(i & 0xFFFF) as usize];
                        black_box(theirs.check_key(k)).ok();
                    })
                })
            });
        }
        group.finish();
    }
}

fn memory_per_key() {
    const N: u64 = 1_000_000;
    let before = LIVE.load(Ordering::Relaxed);
    let ours: KeyedLimiter<u64> = KeyedLimiter::new(quota(), N as usize);
    for k in 0..N {
        ours.try_acquire(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1)
            .unwrap();
    }
    let mid = LIVE.load(Ordering::Relaxed);
    assert_eq!(ours.len(), N as usize);
    let theirs = governor::DefaultKeyedRateLimiter::<u64>::keyed(governor_quota());
    for k in 0..N {
        theirs
            .check_key(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .unwrap();
    }
    let after = LIVE.load(Ordering::Relaxed);
    println!(
        "memory per key at 1M u64 keys: tollgate {:.1} B, governor {:.1} B",
        (mid - before) as f64 / N as f64,
        (after - mid) as f64 / N as f64
    );
    drop((ours, theirs));
}

criterion_group!(benches, bench_keyed);

fn main() {
    memory_per_key();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
