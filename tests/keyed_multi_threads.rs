//! Real threads on one `KeyedMultiLimiter`: three threads hammer one hot key while two others
//! churn cold keys through a table of 4, so the hot key is evicted whenever it is full and
//! re-inserted into a record another key held, while a sixth moves the clock and every reading
//! may stall (the kit's `stall`) between the clock and the commit. Every window of every quota
//! of the hot key must hold `burst + rate·Δ` (the kit's `window`), at the readings its
//! admissions decided at; and on a frozen clock a key admits exactly its smallest burst.
#![cfg(feature = "keyed")]
#![cfg(feature = "keyed")]

use tollgate::Limiter;
use tollgate_testkit::stall;
use tollgate_testkit::window;

use stall::StallClock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
use window::WindowChecker;

fn q(tokens: u64, per_us: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_micros(per_us), burst).unwrap()
}

#[test]
fn every_quota_of_a_hot_key_holds_its_window_through_evictions() {
    for quotas in [
        vec![q(1, 10, 8), q(3, 100, 20)],
        vec![q(1, 10, 8), q(3, 100, 20), q(1, 7, 5), q(2, 50, 30)],
    ] {
        let clock = StallClock::random(ManualClock::new(), 0.02, Duration::from_micros(200), 11);
        let limits = Limits::new(quotas.iter().copied()).unwrap();
        let limiter = KeyedMultiLimiter::with_clock(limits, 4, clock.clone());
        let log = WindowChecker::new();
        let (admitted, decided, done) =
            (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
        std::thread::scope(|s| {
            for t in 0..5u64 {
                let (limiter, log, admitted, decided, done) =
                    (&limiter, &log, &admitted, &decided, &done);
                s.spawn(move || {
                    let mut i = t;
                    // The cold keys start once the hot key has been admitted: four cold keys
                    // in the table first, each spent about as fast as it refills, are never
                    // full, so never evicted, and the table refuses the hot key for the whole
                    // run — by design (only full keys are evicted), but then the test checks
                    // nothing.
                    while t >= 3 && admitted.load(Ordering::Relaxed) == 0 {
                        if done.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::yield_now();
                    }
                    while !done.load(Ordering::Relaxed) {
                        i = i
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let cost = 1 + (i >> 60) % 3;
                        // Threads 0-2: the hot key 0; 3-4: cold keys 1..=40.
                        let key = if t < 3 { 0 } else { 1 + (i >> 32) % 40 };
                        let ok = limiter.try_acquire(&key, cost).is_ok();
                        if ok && key == 0 {
                            log.admit(stall::last_reading(), cost);
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        decided.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            let inner = clock.inner().clone();
            for _ in 0..3000 {
                let target = decided.load(Ordering::Relaxed) + 10;
                while decided.load(Ordering::Relaxed) < target {
                    std::thread::yield_now();
                }
                inner.advance(Duration::from_micros(4));
            }
            done.store(true, Ordering::Relaxed);
        });
        for quota in &quotas {
            log.check(quota)
                .unwrap_or_else(|v| panic!("{quota:?}: {v:?}"));
        }
        assert!(limiter.len() <= 4);
        let admitted = admitted.into_inner();
        assert!(admitted > 100, "the hot key was admitted {admitted} times");
    }
}

#[test]
fn a_frozen_clock_admits_exactly_the_smallest_burst_per_key() {
    let limits = Limits::new([q(1, 1_000_000, 3000), q(1, 1_000_000, 5000)]).unwrap();
    let limiter = KeyedMultiLimiter::with_clock(limits, 16, ManualClock::new());
    let admitted: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                let (key, cost) = (t % 2, 1 + t % 3);
                let mut refusals = 0;
                while refusals < 200 {
                    match limiter.try_acquire(&key, cost) {
                        Ok(()) => {
                            admitted[key as usize].fetch_add(cost, Ordering::Relaxed);
                        }
                        Err(_) => refusals += 1,
                    }
                }
            });
        }
    });
    for key in 0..2u64 {
        let a = admitted[key as usize].load(Ordering::Relaxed);
        let snaps = limiter.decide_snapshots(&key, 0).1;
        assert_eq!(snaps.as_slice()[0].remaining(), 3000 - a, "key {key}");
        assert_eq!(snaps.as_slice()[1].remaining(), 5000 - a, "key {key}");
        assert!(limiter.available(&key) < 3);
    }
}
