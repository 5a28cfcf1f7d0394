//! loom model: a reservation and its cancellation racing two reconfigurations that switch the
//! quota away and back (so the word's epoch bit and the quota are the same again at the end).
//!
//! A cancellation may only give tokens back if no reconfiguration happened since its
//! reservation: the state is counted in another unit after one, and a switch there-and-back may
//! have capped the balance (lost tokens) while leaving the word equal to the reservation's. Every
//! outcome must be one that a serial order explains, with the cancel refused whenever a switch
//! came between the reservation and the cancel.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test cancel_reconfigure`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use tollgate::Limiter;
use tollgate::{gcra, Bucket, ManualClock, Quota, Snapshot};

fn q1() -> Quota {
    Quota::per_second(10).unwrap().with_burst(2).unwrap()
}

fn q2() -> Quota {
    Quota::per_second(10).unwrap().with_burst(3).unwrap()
}

/// Serial orders of A = [reserve(2), cancel] and B = [switch to q2, switch to q1], at reading 0
/// after a first take of 2: the final bucket seen at 0.
fn serial_outcomes() -> Vec<Snapshot> {
    let (q1, q2) = (q1(), q2());
    let mut out = Vec::new();
    for mask in 0u32..16 {
        if mask.count_ones() != 2 {
            continue;
        }
        let mut s = gcra::try_acquire(gcra::FULL, 0, &q1, 2).unwrap().unwrap();
        let mut q = q1;
        let (mut ticket, mut switched_since) = ((0, 0), false);
        let (mut a, mut b) = (0, 0);
        for pos in 0..4 {
            if mask & (1 << pos) != 0 {
                a += 1;
                if a == 1 {
                    ticket = gcra::reserve(s, 0, &q, 2).unwrap();
                    s = ticket.0;
                    switched_since = false;
                } else if !switched_since {
                    if let Some(n) = gcra::cancel(s, 0, &q, ticket.0, ticket.1, 2) {
                        s = n;
                    }
                }
            } else {
                b += 1;
                let next = if b == 1 { q2 } else { q1 };
                s = gcra::rescale(s, 0, &q, &next);
                q = next;
                switched_since = true;
            }
        }
        out.push(gcra::snapshot(s, 0, &q));
    }
    out.sort_by_key(|s| format!("{s:?}"));
    out.dedup();
    out
}

#[test]
fn cancel_races_a_switch_there_and_back() {
    let allowed = serial_outcomes();
    loom::model(move || {
        let bucket = Arc::new(Bucket::with_clock(q1(), ManualClock::new()));
        bucket.try_acquire(2).unwrap();
        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.reserve(2).unwrap().cancel())
        };
        bucket.set_quota(q2());
        bucket.set_quota(q1());
        a.join().unwrap();
        assert_eq!(bucket.quota(), q1());
        let outcome = bucket.decide_snapshots(&(), 0).1.tightest().1;
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
    });
}
