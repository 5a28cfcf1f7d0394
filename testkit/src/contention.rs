//! Shared by the criterion benches (and, by path, the harness's): run a closure on several
//! threads at once and report the slowest thread, as quanta's contention benchmark does, so a
//! strategy cannot look fast by starving one thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Runs `f(thread, i)` for `i in 0..iters` on each of `threads` threads started together;
/// returns the slowest thread's time.
///
/// The threads meet at a spinning start line, not a `std::sync::Barrier`: a barrier parks all
/// but the last thread, and the tens of microseconds a parked thread takes to wake up let the
/// last one run alone, uncontended, for the start of every sample — at criterion's smaller
/// iteration counts, most of it. Spinning, they start within a cache-line transfer of each
/// other, so a multi-threaded sample measures contention. (A waiting thread yields its core
/// now and then, in case there are more threads than cores.)
pub fn across_threads<F: Fn(usize, u64) + Sync>(threads: usize, iters: u64, f: F) -> Duration {
    let arrived = AtomicUsize::new(0);
    let (arrived, f) = (&arrived, &f);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    arrived.fetch_add(1, Ordering::AcqRel);
                    let mut spins = 0u32;
                    while arrived.load(Ordering::Acquire) < threads {
                        spins = spins.wrapping_add(1);
                        if spins & 1023 == 0 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    let start = Instant::now();
                    for i in 0..iters {
                        f(t, i);
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

/// The callgrind side of a bench binary (`ci/callgrind.sh` drives it): `BIN list` prints the
/// scenarios, `BIN callgrind SCENARIO N` runs one `N` times (exit status 2 on a bad one).
/// Returns `false` for any other arguments: criterion's.
pub fn callgrind_cli(
    bench: &str,
    scenarios: impl FnOnce() -> Vec<String>,
    run: impl FnOnce(&str, u64) -> Result<(), String>,
) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for s in scenarios() {
                println!("{s}");
            }
            true
        }
        Some("callgrind") => {
            let (Some(name), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse().ok()))
            else {
                eprintln!("usage: {bench} callgrind SCENARIO N (see `{bench} list`)");
                std::process::exit(2);
            };
            if let Err(e) = run(name, n) {
                eprintln!("{e}");
                std::process::exit(2);
            }
            true
        }
        _ => false,
    }
}

/// The keyed benchmarks' key stream: 65,536 keys drawn from `keys` distinct ones by xorshift
/// from `seed`, each spread over the 64-bit range (so that a key's hash says nothing about its
/// draw). `benches/keyed.rs` and `examples/multi_interleaved.rs` time the same keys.
pub fn key_stream(keys: u64, seed: u64) -> Vec<u64> {
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
