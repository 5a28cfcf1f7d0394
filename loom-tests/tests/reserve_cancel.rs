//! loom model: a reservation and its cancellation racing `try_acquire`, while another thread
//! moves the clock.
//!
//! Every interleaving must end in an outcome that some serial order of the three decisions
//! explains (each decision taken at the clock reading its thread made): no over-admission, no
//! lost or doubled refund, a consistent final state.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --test reserve_cancel`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{gcra, Bucket, Clock, Denied, ManualClock, Quota};

const STEP: u64 = 100_000_000; // 100 ms: one token at 10/s

fn quota() -> Quota {
    Quota::per_second(10).unwrap().with_burst(2).unwrap()
}

/// What the model observes: B's verdict, and a probe of the final state at `STEP`.
type Outcome = (Result<(), Denied>, Result<(), Denied>);

fn verdict(r: Result<Option<u64>, Denied>) -> Result<(), Denied> {
    r.map(|_| ())
}

/// All outcomes of the serial orders: A reserves 1 then cancels, B takes 2, in any order, each
/// at clock 0 or `STEP` (A's cancel no earlier than its reserve).
fn serial_outcomes() -> Vec<Outcome> {
    let q = quota();
    let mut out = Vec::new();
    for b_pos in 0..3 {
        for t_reserve in [0, STEP] {
            for t_cancel in [t_reserve, STEP] {
                for t_b in [0, STEP] {
                    let mut s = gcra::FULL;
                    let mut b = Ok(());
                    let mut ticket = (0, 0);
                    for step in 0..3 {
                        if step == b_pos {
                            let r = gcra::try_acquire(s, t_b, &q, 2);
                            if let Ok(Some(n)) = r {
                                s = n;
                            }
                            b = verdict(r);
                        }
                        match step {
                            0 => {
                                ticket = gcra::reserve(s, t_reserve, &q, 1).unwrap();
                                s = ticket.0;
                            }
                            1 => {
                                if let Some(n) =
                                    gcra::cancel(s, t_cancel, &q, ticket.0, ticket.1, 1)
                                {
                                    s = n;
                                }
                            }
                            _ => {}
                        }
                    }
                    let probe = verdict(gcra::try_acquire(s, STEP, &q, 2));
                    out.push((b, probe));
                }
            }
        }
    }
    out.sort_by_key(|o| format!("{o:?}"));
    out.dedup();
    out
}

#[test]
fn reserve_and_cancel_race_try_acquire() {
    let allowed = serial_outcomes();
    loom::model(move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(Bucket::with_clock(quota(), clock.clone()));

        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                let r = bucket.reserve(1).unwrap();
                assert!(r.delay() <= Duration::from_millis(200));
                r.cancel();
            })
        };
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.try_acquire(2))
        };
        let c = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(STEP)))
        };
        a.join().unwrap();
        let b = b.join().unwrap();
        c.join().unwrap();

        assert_eq!(clock.now(), STEP);
        let probe = bucket.try_acquire(2);
        let outcome = (b, probe);
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
        // Never more than the burst: after everything, at most 2 tokens.
        assert!(bucket.available() <= 2);
    });
}

/// Two reservations of the whole burst, one of them cancelled, on a clock that stands still.
/// The kept one's delay shows which came first; Go's rule then fixes the final state: the
/// cancelled one gives its tokens back only if the other did not queue behind it.
#[test]
fn cancel_keeps_what_a_concurrent_reservation_depends_on() {
    let q = quota();
    // Serial orders at time 0: (kept reservation's delay, probe of the final state).
    let mut allowed = Vec::new();
    for cancel_pos in 0..2 {
        // A reserves first, then B reserves, and A's cancel comes before or after B.
        let (a_after, a_due) = gcra::reserve(gcra::FULL, 0, &q, 2).unwrap();
        let mut s = a_after;
        let mut b_due = 0;
        for step in 0..2 {
            if step == cancel_pos {
                if let Some(n) = gcra::cancel(s, 0, &q, a_after, a_due, 2) {
                    s = n;
                }
            } else {
                let (n, due) = gcra::reserve(s, 0, &q, 2).unwrap();
                s = n;
                b_due = due;
            }
        }
        allowed.push((b_due, gcra::try_acquire(s, 0, &q, 1).map(|_| ())));
    }
    // B reserves first, A after it (and then cancels).
    let (s, b_due) = gcra::reserve(gcra::FULL, 0, &q, 2).unwrap();
    let (a_after, a_due) = gcra::reserve(s, 0, &q, 2).unwrap();
    let s = gcra::cancel(a_after, 0, &q, a_after, a_due, 2).unwrap_or(a_after);
    allowed.push((b_due, gcra::try_acquire(s, 0, &q, 1).map(|_| ())));

    loom::model(move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(Bucket::with_clock(quota(), clock.clone()));
        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.reserve(2).unwrap().cancel())
        };
        let b_delay = bucket.reserve(2).unwrap().delay();
        a.join().unwrap();
        let outcome = (b_delay.as_nanos() as u64, bucket.try_acquire(1).map(|_| ()));
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
    });
}
