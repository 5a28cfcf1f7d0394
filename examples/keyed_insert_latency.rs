//! Latency of new-key inserts into a `KeyedLimiter` under a flood of unique keys:
//! every call is a key never seen before, so each one inserts (growing the table's
//! region by migration steps, sweeping) or is refused as "table full". Prints the distribution (HdrHistogram) of
//! those calls' wall time and of their thread CPU time (the work each call did, which excludes
//! time its thread spent descheduled or blocked: with one thread, it bounds the time a call holds
//! the insert mutex), and the limiter's counters.
//!
//! `cargo run --release --example keyed_insert_latency -- [max_keys] [calls per thread] [threads]
//! [warm-up keys]` (defaults: 1,000,000 keys, 3,000,000 calls, 2 threads, 0): calls for the
//! first `warm-up` keys are not recorded (the first touches of the table's pages are page
//! faults, which thread CPU time counts). Quota 1000/s with a burst of 1:
//! a bucket is full again 1 ms after its last admission, so a full table is swept over and over.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tollgate::{KeyedLimiter, Quota};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map_or(default, |a| a.replace('_', "").parse().expect("a number"))
}

/// The calling thread's CPU time in ns (Linux and the BSDs; 0 elsewhere).
fn thread_cpu_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant libc defines.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        }
    }
    0
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 10 s, 3 significant digits.
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("bounds")
}

fn report(name: &str, h: &Histogram<u64>) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{name} (us): p50 {:.2}  p99 {:.2}  p99.9 {:.2}  p99.99 {:.2}  max {:.2}  (over 100 us: {}, over 1 ms: {})",
        us(0.5),
        us(0.99),
        us(0.999),
        us(0.9999),
        h.max() as f64 / 1000.0,
        h.count_between(100_001, u64::MAX),
        h.count_between(1_000_001, u64::MAX)
    );
}

fn main() {
    let max_keys = arg(1, 1_000_000) as usize;
    let calls = arg(2, 3_000_000);
    let threads = arg(3, 2);
    let warm_up = arg(4, 0);
    let quota = Quota::new(1000, Duration::from_secs(1), 1).expect("valid quota");
    let limiter = KeyedLimiter::<u64>::new(quota, max_keys);
    let next = AtomicU64::new(0);
    let all = Mutex::new((histogram(), histogram()));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (limiter, next, all) = (&limiter, &next, &all);
            s.spawn(move || {
                let (mut wall, mut cpu) = (histogram(), histogram());
                for _ in 0..calls {
                    let key = next.fetch_add(1, Ordering::Relaxed);
                    let (t, c) = (Instant::now(), thread_cpu_ns());
                    let _ = limiter.try_acquire(&key, 1);
                    let c = thread_cpu_ns().saturating_sub(c);
                    if key >= warm_up {
                        wall.saturating_record(t.elapsed().as_nanos().max(1) as u64);
                        cpu.saturating_record(c.max(1));
                    }
                }
                let mut all = all.lock().expect("no panics");
                all.0.add(&wall).expect("same bounds");
                all.1.add(&cpu).expect("same bounds");
            });
        }
    });
    let elapsed = start.elapsed();
    let (wall, cpu) = all.into_inner().expect("no panics");
    println!(
        "max_keys {max_keys}, {threads} threads x {calls} unique keys in {:.2} s (first {warm_up} not recorded)",
        elapsed.as_secs_f64()
    );
    report("wall", &wall);
    report("cpu ", &cpu);
    println!("{:?}, len {}", limiter.counters(), limiter.len());
}
