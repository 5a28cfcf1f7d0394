//! loom model: a decision preempted between reading its quota slot
//! and its compare-and-swap while two reconfigurations complete. On a full bucket at one
//! reading, `rescale` can bring the state back to the identical value, so the word comes back
//! bit for bit (`Q0 -> Q1 -> Q2`, epoch 0 -> 1 -> 0) with slot 0 rewritten: the decision's CAS
//! on the exact word succeeds and writes a state computed in `Q0`'s units into `Q2`'s era.
//! Without a check, `Q0`'s 10 tokens would be charged as 1 token of `Q2` and 8 more admitted
//! at the same reading: 18 tokens at one instant, where no quota in play has a burst above 10.
//! A decision checks the slot version *after* its CAS, so the racing one is revoked and made
//! again under `Q2`; the model checks that no serial order's 10 is exceeded.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test write_aba`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{Bucket, ManualClock, Quota};

#[test]
fn a_decision_racing_two_reconfigurations_never_mixes_units() {
    loom::model(|| {
        let clock = ManualClock::new(); // never moves: every reading is 0
        let q0 = Quota::per_second(10).unwrap(); // 10/s, burst 10
        let q1 = Quota::new(1, Duration::from_secs(1), 10).unwrap();
        let q2 = Quota::new(1, Duration::from_secs(1), 9).unwrap();
        let bucket = Arc::new(Bucket::with_clock(q0, clock));
        let writer = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                bucket.set_quota(q1);
                bucket.set_quota(q2);
            })
        };
        let first = bucket.try_acquire(10).is_ok();
        writer.join().unwrap();
        let mut admitted = if first { 10 } else { 0 };
        while bucket.try_acquire(1).is_ok() {
            admitted += 1;
        }
        // Serial orders: 10 under q0 then nothing left (10), or q2's 9 one by one (9).
        assert!(
            admitted <= 10,
            "{admitted} tokens at one reading, burst at most 10"
        );
    });
}
