//! Memory kept by `Bucket::until_ready` under spurious polls: one pending future polled 1 M
//! times with the same waker, then dropped. Prints the resident set (Linux `/proc`) before, after
//! the polls and after the drop, and the shared timer's queue length.
//!
//! `cargo run --release --example spurious_polls`

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use tollgate::{Bucket, Quota, StdClock};

struct Count(AtomicUsize);
impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Resident set size in KiB (0 where `/proc` is not available).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    const POLLS: usize = 1_000_000;
    let bucket = Bucket::with_clock(
        Quota::new(1, Duration::from_secs(3600), 1).expect("valid quota"),
        StdClock::new(),
    );
    bucket.try_acquire(1).expect("the bucket starts full");
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let before = rss_kib();
    {
        let mut fut = pin!(bucket.until_ready(1));
        for _ in 0..POLLS {
            assert!(fut.as_mut().poll(&mut cx) == Poll::Pending);
        }
        let polled = rss_kib();
        println!(
            "RSS before: {before} KiB; after {POLLS} polls: {polled} KiB (+{} KiB)",
            polled.saturating_sub(before)
        );
        println!("timer queue after the polls: {}", tollgate_probe());
    }
    let dropped = rss_kib();
    println!(
        "RSS after the drop: {dropped} KiB (+{} KiB over the start)",
        dropped.saturating_sub(before)
    );
    println!("timer queue after the drop: {}", tollgate_probe());
    println!(
        "wakes delivered so far: {}",
        count.0.load(Ordering::Relaxed)
    );
}

fn tollgate_probe() -> usize {
    tollgate::WakeRegistration::timer_queue_len()
}
