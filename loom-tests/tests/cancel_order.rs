//! loom model: reservations cancelled in any order, racing reservations of another thread, on a
//! clock that stands still (so only the order of the compare-and-swaps matters).
//!
//! Every outcome must be one that a serial order of the same steps explains, and every window
//! must hold `burst + rate·Δ` (a kept reservation counted at its due instant, a cancelled one
//! not at all). The first model is out-of-order cancellation scaled to burst 3: with Go's rule, the
//! interleaving `r0 r1 | r2 | cancel r1, cancel r0 | r3` put r2 and r3 due at one instant, 4
//! tokens with burst 3.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test cancel_order`
#![cfg(tollgate_loom)]

use tollgate::Limiter;
use tollgate_testkit::window;

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{gcra, Bucket, ManualClock, Quota, Reservation, Snapshot};
use window::WindowChecker;

fn quota() -> Quota {
    Quota::per_second(10).unwrap().with_burst(3).unwrap()
}

/// One step of a thread's program; reservations are numbered per thread.
#[derive(Clone, Copy, Debug)]
enum Step {
    Reserve(usize, u64),
    Cancel(usize),
}
use Step::{Cancel, Reserve};

/// The due instants of the reservations each thread kept (by number; `None` if cancelled) and
/// the final bucket seen at 0 (which fixes the state).
type Outcome = (Vec<Option<u64>>, Vec<Option<u64>>, Snapshot);

/// Runs `steps` on the bucket; returns the due instants of the reservations kept.
fn run(bucket: &Bucket<ManualClock>, steps: &[Step]) -> Vec<Option<u64>> {
    let mut held: Vec<Option<Reservation<'_, ManualClock>>> = Vec::new();
    let mut dues = Vec::new();
    for &step in steps {
        match step {
            Reserve(i, cost) => {
                let r = bucket.reserve(cost).unwrap();
                held.resize_with(i + 1, || None);
                dues.resize(i + 1, None);
                dues[i] = Some(r.delay_from(0).as_nanos() as u64);
                held[i] = Some(r);
            }
            Cancel(i) => {
                held[i].take().unwrap().cancel();
                dues[i] = None;
            }
        }
    }
    dues
}

/// Serial orders of the two programs (every interleaving that keeps each program's order).
fn serial_outcomes(a: &[Step], b: &[Step]) -> Vec<Outcome> {
    let q = quota();
    let n = a.len() + b.len();
    let mut out = Vec::new();
    for mask in 0u32..(1 << n) {
        if mask.count_ones() as usize != a.len() {
            continue;
        }
        let mut s = gcra::FULL;
        // Per thread: (after, due, cost) of each reservation, and the kept due instants.
        let mut tickets: [Vec<(u64, u64, u64)>; 2] = [Vec::new(), Vec::new()];
        let mut dues: [Vec<Option<u64>>; 2] = [Vec::new(), Vec::new()];
        let mut next = [0, 0];
        for pos in 0..n {
            let who = usize::from(mask & (1 << pos) == 0);
            let step = [a, b][who][next[who]];
            next[who] += 1;
            match step {
                Reserve(i, cost) => {
                    let (after, due) = gcra::reserve(s, 0, &q, cost).unwrap();
                    s = after;
                    tickets[who].resize(i + 1, (0, 0, 0));
                    dues[who].resize(i + 1, None);
                    tickets[who][i] = (after, due, cost);
                    dues[who][i] = Some(due);
                }
                Cancel(i) => {
                    let (after, due, cost) = tickets[who][i];
                    if let Some(n) = gcra::cancel(s, 0, &q, after, due, cost) {
                        s = n;
                    }
                    dues[who][i] = None;
                }
            }
        }
        let [da, db] = dues;
        out.push((da, db, gcra::snapshot(s, 0, &q)));
    }
    out
}

fn model(a: &'static [Step], b: &'static [Step]) {
    let allowed = serial_outcomes(a, b);
    loom::model(move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(Bucket::with_clock(quota(), clock.clone()));
        // B on the spawned thread: the over-restoring interleaving is then within 2 preemptions.
        let t = {
            let bucket = bucket.clone();
            thread::spawn(move || run(&bucket, b))
        };
        let da = run(&bucket, a);
        let db = t.join().unwrap();

        let outcome = (da, db, bucket.decide_snapshots(&(), 0).1.tightest().1);
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
        // Every kept reservation at its due instant, with its cost.
        let w = WindowChecker::new();
        for (steps, dues) in [(a, &outcome.0), (b, &outcome.1)] {
            for step in steps {
                if let Reserve(i, cost) = *step {
                    if let Some(due) = dues[i] {
                        w.admit(due, cost);
                    }
                }
            }
        }
        // Drain now and one token-time later; every window holds.
        for t in [0, 100_000_000] {
            clock.set(Duration::from_nanos(t));
            while bucket.try_acquire(1).is_ok() {
                w.admit(t, 1);
            }
        }
        assert_eq!(w.check(&quota()), Ok(()));
    });
}

/// Out-of-order cancellation, burst 3: A reserves 3 and 3 and cancels them in order of reservation;
/// B keeps a reservation of 1 and then one of 3.
#[test]
fn cancels_in_order_of_reservation_racing_kept_reservations() {
    model(
        &[Reserve(0, 3), Reserve(1, 3), Cancel(1), Cancel(0)],
        &[Reserve(0, 1), Reserve(1, 3)],
    );
}

/// The same, cancelled in reverse order (each restores everything if nothing came between).
#[test]
fn cancels_in_reverse_order_racing_kept_reservations() {
    model(
        &[Reserve(0, 3), Reserve(1, 3), Cancel(0), Cancel(1)],
        &[Reserve(0, 1), Reserve(1, 3)],
    );
}

/// Both threads reserve and cancel.
#[test]
fn both_threads_cancel() {
    model(&[Reserve(0, 2), Cancel(0)], &[Reserve(0, 1), Cancel(0)]);
}
