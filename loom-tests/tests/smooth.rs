//! loom models of `Smooth`: concurrent acquire / try_acquire / set_rate against the sequential
//! Guava results.
//!
//! Run: `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests
//! --release --test smooth`.
//!
//! Time comes from `ManualClock` (built on loom's atomics). A `Smooth` reads the clock before
//! its CAS and sleeps (advances the manual clock) after it; the models are arranged so that the
//! operation that goes first never sleeps, so every thread reads the same time and the outcome
//! must equal one of the sequential orders exactly. The final state is compared by behaviour:
//! the same probe requests after the race must wait exactly as after a sequential run.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{Clock, ManualClock, Smooth};

const SEC: u64 = 1_000_000_000;

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// Waits of `n` probe `acquire(1)`s, then the clock.
fn probe(limiter: &Smooth<ManualClock>, n: usize) -> (Vec<u64>, u64) {
    let waits = (0..n).map(|_| micros(limiter.acquire(1))).collect();
    (waits, limiter.clock().now())
}

#[test]
fn concurrent_acquires_hand_out_each_permit_once() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            Smooth::bursty_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap(),
        );
        let l2 = limiter.clone();
        let t = thread::spawn(move || micros(l2.acquire(2)));
        let a = micros(limiter.acquire(1));
        let b = t.join().unwrap();
        // Sequential orders: acquire(1) first → waits (0, 1 s); acquire(2) first → (2 s, 0).
        assert!(
            (a, b) == (0, 1_000_000) || (a, b) == (2_000_000, 0),
            "waits {a} {b}"
        );
        // Exactly one of them slept, by its wait.
        assert_eq!(clock.now(), (a + b) * 1000);
        // Both orders leave the next free time at 3 s and nothing stored.
        let (waits, now) = probe(&limiter, 1);
        assert_eq!(waits, [3_000_000 - (a + b)]);
        assert_eq!(now, 3 * SEC);
    });
}

#[test]
fn try_acquire_races_acquire() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(
            Smooth::bursty_with_clock(5.0, Duration::from_secs(1), clock.clone()).unwrap(),
        );
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.try_acquire(1, Duration::ZERO));
        let wait = micros(limiter.acquire(1));
        let tried = t.join().unwrap();
        // try first: admitted at 0, then acquire waits 200 ms. acquire first: it goes free and
        // the try is refused (the next free time is 200 ms away), changing nothing.
        if tried {
            assert_eq!(wait, 200_000);
            assert_eq!(probe(&limiter, 1), (vec![200_000], 400_000_000));
        } else {
            assert_eq!(wait, 0);
            assert_eq!(probe(&limiter, 1), (vec![200_000], 200_000_000));
        }
    });
}

/// The sequential run: a cold warming-up limiter takes one permit, then `set_rate(3)` and
/// `acquire(1)` in the given order, then the probes. (3, not 4: doubling the rate doubles the
/// maximum exactly, and a mix of old parameters with the new state would then be
/// indistinguishable from the sequential order, hiding a bug from the model.)
fn sequential(rate_first: bool) -> (u64, (Vec<u64>, u64)) {
    let limiter = warming(ManualClock::new());
    assert_eq!(micros(limiter.acquire(1)), 0);
    let wait = if rate_first {
        limiter.set_rate(3.0).unwrap();
        micros(limiter.acquire(1))
    } else {
        let wait = micros(limiter.acquire(1));
        limiter.set_rate(3.0).unwrap();
        wait
    };
    (wait, probe(&limiter, 2))
}

fn warming(clock: ManualClock) -> Smooth<ManualClock> {
    Smooth::warming_up_with_clock(2.0, Duration::from_secs(4), 3.0, clock).unwrap()
}

#[test]
fn set_rate_races_acquire() {
    loom::model(|| {
        // (Inside the model: the clock's atomics are loom's.)
        let old_first = sequential(false);
        let new_first = sequential(true);
        // The two orders are distinguishable by the probes.
        assert_ne!(old_first.1, new_first.1);
        let clock = ManualClock::new();
        let limiter = Arc::new(warming(clock.clone()));
        assert_eq!(micros(limiter.acquire(1)), 0);
        let l2 = limiter.clone();
        let t = thread::spawn(move || l2.set_rate(3.0).unwrap());
        let wait = micros(limiter.acquire(1));
        t.join().unwrap();
        // Whichever went first, the acquire pays the previous permit at the old rate (1.375 s);
        // its own permit is priced entirely at the old rate or entirely at the new one.
        let outcome = (wait, probe(&limiter, 2));
        assert!(outcome == old_first || outcome == new_first, "{outcome:?}");
    });
}

/// Sequential: one permit, then `acquire(1)` after `skip` of the two rate changes, then the
/// rest of them, then the probes.
fn sequential_two_rates(before: usize) -> (u64, (Vec<u64>, u64)) {
    let limiter = warming(ManualClock::new());
    assert_eq!(micros(limiter.acquire(1)), 0);
    let rates = [3.0, 5.0];
    for &r in &rates[..before] {
        limiter.set_rate(r).unwrap();
    }
    let wait = micros(limiter.acquire(1));
    for &r in &rates[before..] {
        limiter.set_rate(r).unwrap();
    }
    (wait, probe(&limiter, 2))
}

/// Two reconfigurations reuse a parameter slot while a decision may still be reading it: the
/// seqlock must make the decision retry, never mix a slot's new contents with an old state.
#[test]
fn acquire_across_two_rate_changes() {
    loom::model(|| {
        let expected: Vec<_> = (0..3).map(sequential_two_rates).collect();
        let clock = ManualClock::new();
        let limiter = Arc::new(warming(clock.clone()));
        assert_eq!(micros(limiter.acquire(1)), 0);
        let l2 = limiter.clone();
        let t = thread::spawn(move || {
            l2.set_rate(3.0).unwrap();
            l2.set_rate(5.0).unwrap();
        });
        let wait = micros(limiter.acquire(1));
        t.join().unwrap();
        let outcome = (wait, probe(&limiter, 2));
        assert!(
            expected.contains(&outcome),
            "{outcome:?} not in {expected:?}"
        );
    });
}
