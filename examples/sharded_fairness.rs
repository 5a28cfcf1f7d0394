//! How a token stream is shared between threads: a `Bucket` against a two-shard `ShardedBucket`
//! on the default clock, in the harness's `mixed` regime (10 M tokens/s, a burst of 10,000,
//! one-token calls), thread `i` pinned to the `i`-th CPU the process may run on where the OS
//! allows. Near the limit each shard takes near leases in turn and its threads pay them out
//! (`docs/sharded.md`): this counts what each thread gets.
//! The harness's fairness column counts decisions, not admissions.
//!
//! ```text
//! cargo build --release --example sharded_fairness
//! target/release/examples/sharded_fairness [THREADS] [MILLISECONDS] [RUNS] [PACE_NS]
//! ```
//! Every thread calls as fast as it can; with `PACE_NS`, every thread but the first calls once
//! every `PACE_NS` nanoseconds. Prints, per run and side: the tokens each thread was admitted,
//! the fewest over the most, and the 1 ms windows in which one thread got none while another
//! got some (a thread descheduled for a window counts there too).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tollgate::{Bucket, DefaultClock, Quota, ShardedBucket};

/// Pins the calling thread to the `i`-th CPU of the process's set, if it can.
#[cfg(target_os = "linux")]
fn pin(i: usize) {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return;
    };
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect();
    if cpus.is_empty() {
        return;
    }
    let mut one = CpuSet::new();
    if one.set(cpus[i % cpus.len()]).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &one);
    }
}

#[cfg(not(target_os = "linux"))]
fn pin(_: usize) {}

/// Per thread: tokens admitted, and admissions per 1 ms window.
fn run(
    threads: usize,
    ms: u64,
    pace: u64,
    acquire: &(dyn Fn() -> bool + Sync),
) -> Vec<(u64, Vec<u32>)> {
    let barrier = Barrier::new(threads);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, stop) = (&barrier, &stop);
                s.spawn(move || {
                    pin(i);
                    barrier.wait();
                    let start = Instant::now();
                    let mut windows = vec![0u32; ms as usize];
                    let mut admitted = 0u64;
                    let mut k = 0u32;
                    let mut w = 0usize;
                    let mut next = Duration::ZERO;
                    while !stop.load(Ordering::Relaxed) {
                        if i > 0 && pace > 0 {
                            // Paced: one call every `pace` ns.
                            next += Duration::from_nanos(pace);
                            while start.elapsed() < next {
                                std::hint::spin_loop();
                            }
                        }
                        if acquire() {
                            admitted += 1;
                            windows[w] += 1;
                        }
                        k += 1;
                        if k % 64 == 0 {
                            let e = start.elapsed();
                            w = (e.as_millis() as usize).min(windows.len() - 1);
                            if e >= Duration::from_millis(ms) {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    (admitted, windows)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn report(name: &str, r: &[(u64, Vec<u32>)]) {
    let counts: Vec<u64> = r.iter().map(|x| x.0).collect();
    let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    let windows = r[0].1.len();
    let starved = (0..windows)
        .filter(|&w| {
            let any = r.iter().any(|x| x.1[w] > 0);
            any && r.iter().any(|x| x.1[w] == 0)
        })
        .count();
    println!(
        "{name:>8}: admitted {counts:?} (total {}), min/max {:.3}, windows with a thread starved {}/{}",
        counts.iter().sum::<u64>(),
        min as f64 / max.max(1) as f64,
        starved,
        windows
    );
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let threads = args.next().unwrap_or(2) as usize;
    let ms = args.next().unwrap_or(1_000);
    let runs = args.next().unwrap_or(3);
    let pace = args.next().unwrap_or(0);
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    for _ in 0..runs {
        let bucket = Bucket::with_clock(quota, DefaultClock::default());
        report(
            "cas",
            &run(threads, ms, pace, &|| bucket.try_acquire(1).is_ok()),
        );
        let sharded = ShardedBucket::with_clock(quota, 2, DefaultClock::default());
        report(
            "sharded",
            &run(threads, ms, pace, &|| sharded.try_acquire(1).is_ok()),
        );
    }
}
