//! loom model: a cancellation whose clock reading is older than a concurrent decision's (a
//! canceller preempted between reading the clock and its CAS, or a clock that stepped back).
//!
//! Each thread's reading is fixed by the model (a per-thread clock), so the hard case is always
//! present: the decision reads the instant at which the bucket, reservation included, is just
//! full — its refill cap is invisible in the word — while the canceller reads an instant before
//! the reservation is due. loom explores every order of the reservation, the decision and the
//! cancellation; every outcome must be one that a serial order of the same decisions (each at its
//! own reading) explains, and every window must hold `burst + rate·Δ`.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test cancel_stale`
#![cfg(tollgate_loom)]

use tollgate_testkit::window;

use loom::sync::Arc;
use loom::thread;
use tollgate::{gcra, Bucket, Denied, Quota};
use tollgate_loom_tests::{at, PerThread};
use window::WindowChecker;

const MS: u64 = 1_000_000;

fn quota() -> Quota {
    Quota::per_second(10).unwrap().with_burst(2).unwrap()
}

/// B's verdict and how many 1-token requests a drain at B's reading then admits.
type Outcome = (Result<(), Denied>, u64);

fn drain_state(mut s: u64, t: u64, q: &Quota) -> u64 {
    let mut n = 0;
    while let Ok(Some(next)) = gcra::try_acquire(s, t, q, 1) {
        s = next;
        n += 1;
    }
    n
}

/// Serial orders: A reserves 2 at 0 and cancels at `t_cancel`; B takes `cost_b` at `t_b`
/// before, between or after A's two steps.
fn serial_outcomes(t_cancel: u64, t_b: u64, cost_b: u64) -> Vec<Outcome> {
    let q = quota();
    let mut out = Vec::new();
    for b_pos in 0..3 {
        let mut s = gcra::try_acquire(gcra::FULL, 0, &q, 2).unwrap().unwrap();
        let mut b = Ok(());
        let mut ticket = (0, 0);
        for step in 0..3 {
            if step == b_pos {
                let r = gcra::try_acquire(s, t_b, &q, cost_b);
                if let Ok(Some(n)) = r {
                    s = n;
                }
                b = r.map(|_| ());
            }
            match step {
                0 => {
                    ticket = gcra::reserve(s, 0, &q, 2).unwrap();
                    s = ticket.0;
                }
                1 => {
                    if let Some(n) = gcra::cancel(s, t_cancel, &q, ticket.0, ticket.1, 2) {
                        s = n;
                    }
                }
                _ => {}
            }
        }
        out.push((b, drain_state(s, t_b, &q)));
    }
    out
}

fn model(t_cancel: u64, t_b: u64, cost_b: u64) {
    let allowed = serial_outcomes(t_cancel, t_b, cost_b);
    loom::model(move || {
        let bucket = Arc::new(Bucket::with_clock(quota(), PerThread));
        let w = WindowChecker::new();
        at(0);
        bucket.try_acquire(2).unwrap();
        w.admit(0, 2);

        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                at(0);
                let r = bucket.reserve(2).unwrap();
                at(t_cancel);
                r.cancel();
            })
        };
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                at(t_b);
                bucket.try_acquire(cost_b)
            })
        };
        a.join().unwrap();
        let b = b.join().unwrap();
        if b.is_ok() {
            w.admit(t_b, cost_b);
        }
        at(t_b);
        let mut drained = 0;
        while bucket.try_acquire(1).is_ok() {
            w.admit(t_b, 1);
            drained += 1;
        }
        // A later reading too: the bucket refills by exactly the quota, no more.
        at(t_b + 100 * MS);
        while bucket.try_acquire(1).is_ok() {
            w.admit(t_b + 100 * MS, 1);
        }
        let outcome = (b, drained);
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
        assert_eq!(w.check(&quota()), Ok(()));
    });
}

/// A stale cancellation in miniature: the reservation (due 200 ms) is absorbed by the refill at
/// 400 ms, where the bucket is exactly full; the canceller read 100 ms.
#[test]
fn stale_canceller_vs_a_decision_at_the_full_instant() {
    model(100 * MS, 400 * MS, 1);
}

/// The decision takes the whole burst at the full instant; the canceller read 0.
#[test]
fn stale_canceller_vs_a_whole_burst_at_the_full_instant() {
    model(0, 400 * MS, 2);
}

/// The decision comes before the full instant (part of the reservation still owed) and after it.
#[test]
fn stale_canceller_vs_decisions_around_the_full_instant() {
    model(100 * MS, 300 * MS, 1);
    model(150 * MS, 500 * MS, 1);
}
