//! loom model: `set_quota` racing `try_acquire`, while another thread moves the clock.
//!
//! A concurrent caller must see the old quota with the old state or the new quota with the new
//! state, never a mix: every interleaving must end in an outcome that a serial order explains —
//! the decision under the old quota and then the switch, or the switch and then the decision
//! under the new quota — each taken at the clock reading its thread made.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --test set_quota`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{gcra, Bucket, Denied, ManualClock, Quota};

const STEP: u64 = 100_000_000; // 100 ms

fn old_quota() -> Quota {
    Quota::per_second(10).unwrap().with_burst(2).unwrap()
}

/// A different rate, burst and unit (scale), so a mix of old and new could not go unnoticed.
fn new_quota() -> Quota {
    Quota::new(3, Duration::from_secs(1), 3).unwrap()
}

/// B's two verdicts, the quota in force at the end, and a probe of the final state.
type Outcome = (
    Result<(), Denied>,
    Result<(), Denied>,
    Quota,
    Result<(), Denied>,
);

fn verdict(r: Result<Option<u64>, Denied>) -> Result<(), Denied> {
    r.map(|_| ())
}

/// Serial orders: B takes 2 then 1; the switch comes before, between or after; each decision at
/// clock 0 or `STEP` (B's second no earlier than its first).
fn serial_outcomes() -> Vec<Outcome> {
    let (q1, q2) = (old_quota(), new_quota());
    let mut out = Vec::new();
    for switch_pos in 0..3 {
        for t_switch in [0, STEP] {
            for t_b1 in [0, STEP] {
                for t_b2 in [t_b1, STEP] {
                    let mut s = gcra::FULL;
                    let mut q = q1;
                    let mut v = Vec::new();
                    let b_ops = [(2, t_b1), (1, t_b2)];
                    for step in 0..3 {
                        if step == switch_pos {
                            s = gcra::rescale(s, t_switch, &q1, &q2);
                            q = q2;
                        }
                        if let Some(&(cost, t)) = b_ops.get(step) {
                            let r = gcra::try_acquire(s, t, &q, cost);
                            if let Ok(Some(n)) = r {
                                s = n;
                            }
                            v.push(verdict(r));
                        }
                    }
                    let probe = verdict(gcra::try_acquire(s, STEP, &q, 2));
                    out.push((v[0], v[1], q, probe));
                }
            }
        }
    }
    out.sort_by_key(|o| format!("{o:?}"));
    out.dedup();
    out
}

#[test]
fn set_quota_races_try_acquire() {
    let allowed = serial_outcomes();
    loom::model(move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(Bucket::with_clock(old_quota(), clock.clone()));

        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.set_quota(new_quota()))
        };
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || (bucket.try_acquire(2), bucket.try_acquire(1)))
        };
        let c = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(STEP)))
        };
        a.join().unwrap();
        let (b1, b2) = b.join().unwrap();
        c.join().unwrap();

        let q = bucket.quota();
        assert_eq!(q, new_quota());
        let probe = bucket.try_acquire(2);
        let outcome = (b1, b2, q, probe);
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
    });
}
