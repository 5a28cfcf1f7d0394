//! Shared by the criterion benches (and, by path, the harness's): run a closure on several
//! threads at once and report the slowest thread, as quanta's contention benchmark does, so a
//! strategy cannot look fast by starving one thread.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `f(thread, i)` for `i in 0..iters` on each of `threads` threads started together behind
/// a barrier; returns the slowest thread's time.
pub(crate) fn across_threads<F: Fn(usize, u64) + Sync>(
    threads: usize,
    iters: u64,
    f: F,
) -> Duration {
    let barrier = Barrier::new(threads);
    let (barrier, f) = (&barrier, &f);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    barrier.wait();
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
#[allow(dead_code)] // not every bench that shares this module counts instructions
pub(crate) fn callgrind_cli(
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
