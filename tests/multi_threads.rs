//! Real threads on one `MultiBucket`: every quota's window bound holds, checked on every
//! window of every quota (the kit's `window`), with threads stalled at random between their
//! clock reading and their compare-and-swap (the kit's `stall`) while another thread moves the
//! clock; and on a frozen clock the policy admits exactly the smallest burst, no more, no less.

use tollgate::Limiter;
use tollgate_testkit::stall;
use tollgate_testkit::window;

use stall::StallClock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tollgate::{Limits, ManualClock, MultiBucket, Quota};
use window::WindowChecker;

fn q(tokens: u64, per_us: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_micros(per_us), burst).unwrap()
}

/// Four threads decide (costs 1 to 3) while a fifth advances the clock in small steps; each
/// reading sleeps up to 200 µs with probability 1/50 after it is taken (a stale reading when
/// the decision commits). Every admission is logged at the reading it decided at; every window
/// of every quota must hold `burst + rate·Δ`.
#[test]
fn every_quotas_window_bound_holds_under_stalls() {
    let policies = [
        vec![q(1, 10, 8), q(3, 100, 20)],
        vec![q(1, 10, 8), q(3, 100, 20), q(1, 7, 5)],
        vec![q(1, 10, 8), q(3, 100, 20), q(1, 7, 5), q(2, 50, 30)],
    ];
    for (n, quotas) in policies.iter().enumerate() {
        let clock = StallClock::random(
            ManualClock::new(),
            0.02,
            Duration::from_micros(200),
            7 + n as u64,
        );
        let policy =
            MultiBucket::with_clock(Limits::new(quotas.iter().copied()).unwrap(), clock.clone());
        let log = WindowChecker::new();
        let (admitted, refused) = (AtomicU64::new(0), AtomicU64::new(0));
        let done = AtomicBool::new(false);
        let started = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (policy, log, admitted, refused, done, started) =
                    (&policy, &log, &admitted, &refused, &done, &started);
                s.spawn(move || {
                    started.fetch_add(1, Ordering::Relaxed);
                    let mut i = t;
                    while !done.load(Ordering::Relaxed) {
                        i = i
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let cost = 1 + (i >> 60) % 3;
                        if policy.try_acquire(cost).is_ok() {
                            log.admit(stall::last_reading(), cost);
                            admitted.fetch_add(1, Ordering::Relaxed);
                        } else {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            let inner = clock.inner().clone();
            // Time moves only once every thread runs (on a loaded machine a thread can start
            // after the loop below would have ended).
            while started.load(Ordering::Relaxed) < 4 {
                std::thread::yield_now();
            }
            let decided = || admitted.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed);
            for _ in 0..4000 {
                // Each step waits for a few decisions, so the run covers the whole schedule
                // however the machine schedules the threads.
                let target = decided() + 8;
                while decided() < target {
                    std::thread::yield_now();
                }
                inner.advance(Duration::from_micros(3));
            }
            done.store(true, Ordering::Relaxed);
        });
        for quota in quotas {
            log.check(quota)
                .unwrap_or_else(|v| panic!("{} quotas, {quota:?}: {v:?}", quotas.len()));
        }
        let (a, r) = (admitted.into_inner(), refused.into_inner());
        assert!(
            a > 100 && r > 100,
            "{} quotas: {a} admitted, {r} refused",
            quotas.len()
        );
    }
}

/// A frozen clock: eight threads race for the smallest burst with mixed costs; the tokens
/// admitted plus those left equal that burst exactly (up to a cost that no longer fits), and
/// every other quota was debited by exactly what was admitted.
#[test]
fn a_frozen_clock_admits_exactly_the_smallest_burst() {
    for quotas in [
        vec![q(1, 1_000_000, 5000), q(1, 1_000_000, 9000)],
        vec![
            q(1, 1, 9000),
            q(1, 1_000_000, 5000),
            q(1, 9, 7000),
            q(1, 1, 6000),
        ],
    ] {
        let policy = MultiBucket::with_clock(
            Limits::new(quotas.iter().copied()).unwrap(),
            ManualClock::new(),
        );
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (policy, admitted) = (&policy, &admitted);
                s.spawn(move || {
                    let cost = 1 + t % 3;
                    let mut refusals = 0;
                    while refusals < 200 {
                        match policy.try_acquire(cost) {
                            Ok(()) => {
                                admitted.fetch_add(cost, Ordering::Relaxed);
                            }
                            Err(_) => refusals += 1,
                        }
                    }
                });
            }
        });
        let admitted = admitted.into_inner();
        let snaps = policy.decide_snapshots(&(), 0).1;
        for (quota, snap) in quotas.iter().zip(snaps.as_slice()) {
            assert_eq!(snap.remaining(), quota.burst() - admitted, "{quota:?}");
        }
        assert!(policy.available() < 3, "{} left", policy.available());
    }
}
