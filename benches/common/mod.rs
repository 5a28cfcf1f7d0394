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
