//! Keyed limiter vs governor 0.10's keyed limiter (DashMap store), side by side in one run.
//!
//! * `keyed/uniform10k`: 10,000 keys picked uniformly at random; `keyed/hot16`: 16 hot keys;
//!   both in a table for 2^20 keys. `keyed/uniform10k-fit`: the same 10,000 keys in a table
//!   for 16,384 (see `KEY_SETS`). All keys are inserted beforehand: this is the lookup path. The regimes are the harness's
//!   (per key): `keyed/*` the allow path (everything admitted) at 1 and 2 threads (`iter_custom`
//!   across threads, the slowest thread reported); `keyed-deny/*` every key drained first, so
//!   nearly every call is refused, and `keyed-mixed/*` (10 M/s, burst 10,000) at 1 thread.
//!   governor's refusals are timed as `check_key` returns them (no wait computed from them).
//!   `keyed_multi/1` in every group: a `KeyedMultiLimiter` of two quotas per key (the regime's
//!   and a per-minute one at the same rate that binds nothing), the same keys, at 1 thread.
//! * Before criterion runs, memory per key at 1M keys is printed for both (a counting global
//!   allocator: bytes live after inserting 1M keys, divided by 1M).
//! * `keyed callgrind LIMITER/REGIME N` runs N single-thread calls on the 10,000 keys for
//!   `valgrind --tool=callgrind` (`keyed list` prints the scenarios; `BENCH=keyed
//!   ci/callgrind.sh` prints instructions per call of each).
#![allow(missing_docs)] // criterion's macros generate undocumented functions

use criterion::{black_box, criterion_group, BenchmarkId, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tollgate::{KeyedLimiter, KeyedMultiLimiter, Limits, Quota};

use common::across_threads;
use tollgate_testkit::contention as common;
use tollgate_testkit::contention::key_stream;

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

/// The harness's regimes (`harness/README.md`), per key: `allow` admits everything, `deny`
/// starts every key drained and refuses nearly everything, `mixed` is 10 M/s with a 1 ms burst.
#[derive(Clone, Copy)]
struct Regime {
    name: &'static str,
    tokens: u32,
    burst: u32,
    drained: bool,
}

const ALLOW: Regime = Regime {
    name: "allow",
    tokens: 1_000_000_000,
    burst: 1_000_000_000,
    drained: false,
};
const DENY: Regime = Regime {
    name: "deny",
    tokens: 1,
    burst: 1_000,
    drained: true,
};
const MIXED: Regime = Regime {
    name: "mixed",
    tokens: 10_000_000,
    burst: 10_000,
    drained: false,
};

type Governor = governor::DefaultKeyedRateLimiter<u64>;

impl Regime {
    fn quota(self) -> Quota {
        Quota::new(
            u64::from(self.tokens),
            Duration::from_secs(1),
            u64::from(self.burst),
        )
        .unwrap()
    }

    fn governor_quota(self) -> governor::Quota {
        governor::Quota::per_second(NonZeroU32::new(self.tokens).unwrap())
            .allow_burst(NonZeroU32::new(self.burst).unwrap())
    }

    /// The two-quota policy of `keyed_multi`: this regime's quota and a per-minute one of the
    /// same rate (60 bursts), which binds nothing here, so both are decided and debited.
    fn limits(self) -> Limits {
        let minute = Quota::new(
            60 * u64::from(self.tokens),
            Duration::from_secs(60),
            60 * u64::from(self.burst),
        )
        .unwrap();
        Limits::new([self.quota(), minute]).unwrap()
    }

    /// A two-quota `KeyedMultiLimiter` with every key of `streams` tracked as in `limiters`.
    fn multi(self, streams: &[Vec<u64>], max_keys: usize) -> KeyedMultiLimiter<u64> {
        let multi = KeyedMultiLimiter::new(self.limits(), max_keys);
        let take = if self.drained { self.burst } else { 1 };
        for s in streams {
            for k in s {
                let _ = multi.try_acquire(k, u64::from(take));
            }
        }
        multi
    }

    /// Both limiters with every key of `streams` tracked (and drained, for `deny`), ours in a
    /// table for `max_keys`.
    fn limiters(self, streams: &[Vec<u64>], max_keys: usize) -> (KeyedLimiter<u64>, Governor) {
        let ours: KeyedLimiter<u64> = KeyedLimiter::new(self.quota(), max_keys);
        let theirs = Governor::keyed(self.governor_quota());
        let take = if self.drained { self.burst } else { 1 };
        for s in streams {
            for k in s {
                let _ = ours.try_acquire(k, u64::from(take));
                let _ = theirs.check_key_n(k, NonZeroU32::new(take).unwrap());
            }
        }
        (ours, theirs)
    }
}

/// The key sets: name, keys drawn from, `max_keys` of our table, thread counts of the allow
/// path. `uniform10k` and `hot16` track their keys in a table for 2^20 keys (32 MiB, so 10,000
/// keys are spread over all of it: mostly cache and TLB misses); `uniform10k-fit` tracks the
/// same keys in a table for 16,384 keys (512 KiB), as the harness sizes it (`max_keys` = keys).
const KEY_SETS: [(&str, u64, usize, &[usize]); 3] = [
    ("uniform10k", 10_000, 1 << 20, &[1, 2]),
    ("uniform10k-fit", 10_000, 1 << 14, &[1]),
    ("hot16", 16, 1 << 20, &[1, 2]),
];

fn bench_keyed(c: &mut Criterion) {
    for (name, keys, max_keys, allow_threads) in KEY_SETS {
        let streams: Vec<Vec<u64>> = (0..2).map(|t| key_stream(keys, 0x1234 + t)).collect();
        for regime in [ALLOW, DENY, MIXED] {
            // The allow path (`keyed/...`, the names of earlier runs) at 1 and 2 threads; the
            // deny and mixed paths at 1 thread.
            let (group_name, threads): (String, &[usize]) = if regime.name == "allow" {
                (format!("keyed/{name}"), allow_threads)
            } else {
                (format!("keyed-{}/{name}", regime.name), &[1])
            };
            let mut group = c.benchmark_group(group_name);
            let (ours, theirs) = regime.limiters(&streams, max_keys);
            // Per-key policies of two quotas, at 1 thread, beside the single-quota table.
            let multi = regime.multi(&streams, max_keys);
            group.bench_function(BenchmarkId::new("keyed_multi", 1), |b| {
                b.iter_custom(|iters| {
                    across_threads(1, iters, |t, i| {
                        let k = &streams[t][(i & 0xFFFF) as usize];
                        black_box(multi.try_acquire(k, 1)).ok();
                    })
                })
            });
            drop(multi);
            for &threads in threads {
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
}

// ---- instruction counts (callgrind) ----

/// The measured loop: `n` calls of `f(i)`. Never inlined, so callgrind can collect exactly this
/// function (`--toggle-collect`) and the setup is left out.
#[inline(never)]
fn callgrind_loop<R>(n: u64, f: impl Fn(u64) -> R) {
    for i in 0..n {
        black_box(f(i));
    }
}

/// Runs scenario `name` (`LIMITER/REGIME`) `n` times on the 10,000 keys of `uniform10k` (in a
/// table for 2^20 keys, as criterion's), one thread, after a warm-up outside the measured loop.
fn callgrind(name: &str, n: u64) -> Result<(), String> {
    let (limiter, regime) = name
        .split_once('/')
        .ok_or_else(|| format!("{name}: expected LIMITER/REGIME"))?;
    let regime = [ALLOW, DENY, MIXED]
        .into_iter()
        .find(|r| r.name == regime)
        .ok_or_else(|| format!("{regime}: no such regime"))?;
    let streams = [key_stream(10_000, 0x1234)];
    let (ours, theirs) = regime.limiters(&streams, 1 << 20);
    let multi = regime.multi(&streams, 1 << 20);
    let keys = &streams[0];
    fn run<R>(n: u64, f: impl Fn(u64) -> R) {
        for i in 0..1000 {
            black_box(f(i));
        }
        callgrind_loop(n, f);
    }
    match limiter {
        "tollgate" => run(n, |i| ours.try_acquire(&keys[(i & 0xFFFF) as usize], 1)),
        "keyed_multi" => run(n, |i| multi.try_acquire(&keys[(i & 0xFFFF) as usize], 1)),
        "governor" => run(n, |i| {
            theirs.check_key(&keys[(i & 0xFFFF) as usize]).is_ok()
        }),
        other => return Err(format!("{other}: no such limiter")),
    }
    Ok(())
}

fn scenarios() -> Vec<String> {
    let mut v = Vec::new();
    for l in ["tollgate", "keyed_multi", "governor"] {
        for r in [ALLOW, DENY, MIXED] {
            v.push(format!("{l}/{}", r.name));
        }
    }
    v
}

fn memory_per_key() {
    const N: u64 = 1_000_000;
    let before = LIVE.load(Ordering::Relaxed);
    let ours: KeyedLimiter<u64> = KeyedLimiter::new(ALLOW.quota(), N as usize);
    for k in 0..N {
        ours.try_acquire(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1)
            .unwrap();
    }
    let mid = LIVE.load(Ordering::Relaxed);
    assert_eq!(ours.len(), N as usize);
    let theirs = Governor::keyed(ALLOW.governor_quota());
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
    if common::callgrind_cli("keyed", scenarios, callgrind) {
        return;
    }
    memory_per_key();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
