//! Saving and restoring a `KeyedLimiter` of 1,000,000 keys: the time, the file size and the
//! peak memory each takes (resident-set high-water mark, reset just before; Linux), and the
//! slowest new-key insertion of a thread deciding while the save runs.
//!
//! ```text
//! cargo run --release --features persist --example persist_keyed [KEYS]
//! ```

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tollgate::{KeyedLimiter, ManualClock, Quota};

/// A writer that only counts (the save's own cost, without a disk).
struct Count(u64);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `VmRSS` or `VmHWM` from `/proc/self/status`, in KiB (0 where there is none).
fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Resets the high-water mark to the current RSS (`/proc/self/clear_refs`, "5").
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn main() {
    let keys: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let q = Quota::per_second(10).unwrap();
    let clock = ManualClock::new();
    let limiter = Arc::new(KeyedLimiter::with_clock(
        q,
        keys as usize + 1024,
        clock.clone(),
    ));
    for k in 0..keys {
        limiter.try_acquire(&k, 1 + k % 10).unwrap();
    }
    println!("keys tracked: {}", limiter.len());

    reset_peak();
    let rss = status_kib("VmRSS:");
    let t = Instant::now();
    let mut out = Count(0);
    limiter.save(&mut out).unwrap();
    let save = t.elapsed();
    println!(
        "save (alone): {:.1} ms, {} bytes, peak RSS +{} KiB",
        save.as_secs_f64() * 1e3,
        out.0,
        status_kib("VmHWM:").saturating_sub(rss)
    );

    // Again, with a thread inserting new keys meanwhile: its slowest insertion.
    let stop = Arc::new(AtomicBool::new(false));
    let inserter = {
        let (limiter, stop) = (limiter.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut took, mut k) = (Vec::new(), u64::MAX / 2);
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let _ = limiter.try_acquire(&k, 1);
                took.push(t.elapsed());
                k += 1;
            }
            took.sort();
            took
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let mut file = Vec::with_capacity(out.0 as usize + (1 << 20));
    limiter.save(&mut file).unwrap();
    let racing = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let took = inserter.join().unwrap();
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "save (racing inserts): {:.1} ms; {} inserts meanwhile: median {:.2} µs, p99 {:.1} µs, \
         p99.9 {:.1} µs, slowest {:.1} µs, {} over 1 ms",
        racing.as_secs_f64() * 1e3,
        took.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0),
        took.iter()
            .filter(|d| **d > Duration::from_millis(1))
            .count()
    );

    drop(limiter);
    reset_peak();
    let rss = status_kib("VmRSS:");
    let t = Instant::now();
    let restored = KeyedLimiter::<u64, _, _>::builder(q, 2 * keys as usize, ManualClock::new())
        .restore(&file[..])
        .unwrap();
    println!(
        "restore: {:.1} ms, {} keys, peak RSS +{} KiB (the table itself included)",
        t.elapsed().as_secs_f64() * 1e3,
        restored.len(),
        status_kib("VmHWM:").saturating_sub(rss)
    );
}
