//! The reconfiguration writer lock (`Bucket::set_quota`, `Smooth::set_rate`): concurrent writers
//! take turns without burning a core, and the user's clock is never called while the lock is
//! held.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Smooth};

use quotas::quota;
use tollgate_testkit::quotas;

/// A clock that, on its first reading after being armed, reconfigures its own bucket. If the
/// bucket read the clock while holding the writer lock, the nested `set_quota` would wait for
/// that lock forever.
#[derive(Clone)]
struct Reentrant {
    time: ManualClock,
    bucket: Arc<OnceLock<Weak<Bucket<Reentrant>>>>,
    armed: Arc<AtomicBool>,
}

impl Clock for Reentrant {
    fn now(&self) -> u64 {
        if self.armed.swap(false, Ordering::SeqCst) {
            if let Some(bucket) = self.bucket.get().and_then(Weak::upgrade) {
                bucket.set_quota(quota(7, 7));
            }
        }
        self.time.now()
    }
}

#[test]
fn the_clock_is_not_read_under_the_writer_lock() {
    let clock = Reentrant {
        time: ManualClock::new(),
        bucket: Arc::new(OnceLock::new()),
        armed: Arc::new(AtomicBool::new(false)),
    };
    let bucket = Arc::new(Bucket::with_clock(quota(10, 10), clock.clone()));
    clock.bucket.set(Arc::downgrade(&bucket)).ok().unwrap();
    let (done, finished) = mpsc::channel();
    {
        let bucket = bucket.clone();
        // Detached: if the lock is re-entered it never returns, and the test fails below.
        thread::spawn(move || {
            clock.armed.store(true, Ordering::SeqCst);
            bucket.set_quota(quota(100, 100));
            let _ = done.send(());
        });
    }
    assert!(
        finished.recv_timeout(Duration::from_secs(10)).is_ok(),
        "set_quota deadlocked: it read the clock while holding the writer lock"
    );
    // Both reconfigurations ran, the nested one first: the outer one is in force.
    assert_eq!(bucket.quota(), quota(100, 100));
}

#[test]
fn concurrent_reconfigurations_and_decisions_finish_and_stay_consistent() {
    const WRITERS: usize = 4;
    const READERS: usize = 2;
    const ROUNDS: u64 = 2_000;
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(10, 10), clock.clone());
    let smooth = Smooth::bursty_with_clock(10.0, Duration::from_secs(1), clock.clone()).unwrap();
    let stop = AtomicBool::new(false);
    let decisions = AtomicU64::new(0);
    thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..WRITERS as u64 {
            let (bucket, smooth, clock) = (&bucket, &smooth, &clock);
            writers.push(s.spawn(move || {
                for i in 0..ROUNDS {
                    let n = 1 + (w * ROUNDS + i) % 50;
                    bucket.set_quota(quota(n, n));
                    smooth.set_rate(n as f64).unwrap();
                    if i % 64 == 0 {
                        clock.advance(Duration::from_millis(1));
                    }
                }
            }));
        }
        for _ in 0..READERS {
            s.spawn(|| {
                // At least 1,000 decisions each, however the scheduler orders the threads.
                let mut n = 0u64;
                while n < 1_000 || !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let _ = bucket.try_acquire(1);
                    let _ = bucket.available();
                    let _ = smooth.try_acquire(1, Duration::ZERO);
                }
                decisions.fetch_add(n, Ordering::Relaxed);
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Every writer finished; the last reconfiguration is one of the written quotas and the
    // bucket is consistent with it.
    let q = bucket.quota();
    assert!((1..=50).contains(&q.burst()), "{q:?}");
    assert!(bucket.available() <= q.burst());
    bucket.set_quota(quota(3, 3));
    clock.advance(Duration::from_secs(10));
    assert_eq!(bucket.available(), 3);
    assert!(smooth.rate() >= 1.0 && smooth.rate() <= 50.0);
    // (Whether any reader was admitted depends on the schedule: reconfigurations every few
    // microseconds at 1 to 50 tokens/s, on a clock that moves 1 ms per 64 of them, may keep
    // the bucket empty.)
    assert!(decisions.load(Ordering::Relaxed) >= 2_000);
}
