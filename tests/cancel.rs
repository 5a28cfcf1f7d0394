//! `Reservation::cancel` never lets a window admit more than `burst + rate·Δ`, whatever the
//! canceller's clock reading (stale, stepped back, preempted) and whatever order reservations are
//! cancelled in. Every admission is recorded with the instant it was
//! decided at (a kept reservation at its due instant) and every window is checked exactly.
#![cfg(feature = "std")]

use tollgate_testkit::stall;
use tollgate_testkit::window;

use stall::{arm, armed, gated, last_reading, Stall, StallClock};
use std::thread;
use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota, Reservation, StdClock};
use window::WindowChecker;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn quota(per_second: u64, burst: u64) -> Quota {
    Quota::per_second(per_second)
        .unwrap()
        .with_burst(burst)
        .unwrap()
}

fn stall_bucket(q: Quota) -> (StallClock<ManualClock>, Bucket<StallClock<ManualClock>>) {
    let clock = StallClock::new(ManualClock::new());
    let bucket = Bucket::with_clock(q, clock.clone());
    (clock, bucket)
}

/// A bucket on a `StallClock` emptied at 0 by one `try_acquire(burst)`, recorded.
fn emptied(
    q: Quota,
) -> (
    StallClock<ManualClock>,
    Bucket<StallClock<ManualClock>>,
    WindowChecker,
) {
    let (clock, bucket) = stall_bucket(q);
    let w = WindowChecker::new();
    bucket.try_acquire(q.burst()).unwrap();
    w.admit(0, q.burst());
    (clock, bucket, w)
}

/// The due instant of a reservation, recorded as its admission.
fn due<C: Clock>(r: &Reservation<'_, C>) -> u64 {
    r.delay_from(0).as_nanos() as u64
}

/// `try_acquire(1)` until refused, each admission recorded at its own reading; returns the count.
fn drain<C: Clock>(bucket: &Bucket<StallClock<C>>, w: &WindowChecker) -> u64 {
    let mut n = 0;
    while bucket.try_acquire(1).is_ok() {
        w.admit(last_reading(), 1);
        n += 1;
    }
    n
}

// ---------------------------------------------------------------------------------------------
// A cancel with a stale reading must restore nothing a later decision absorbed.

#[test]
fn a_stale_canceller_restores_nothing_a_later_decision_absorbed() {
    let q = quota(10, 10);
    let (clock, bucket, w) = emptied(q);
    let r = bucket.reserve(10).unwrap();
    assert_eq!(due(&r), S);
    clock.inner().set(Duration::from_secs(2));
    // At 2 s the bucket is exactly full again: this decision absorbs the reservation's tokens
    // without any visible change of the word beyond its own cost.
    bucket.try_acquire(5).unwrap();
    w.admit(2 * S, 5);
    // The canceller's reading is 1 s (taken before it was preempted, or a clock that stepped
    // back): not past the due instant, so Go's rule would restore 10 − 5.
    arm([Stall::Reading(S)]);
    r.cancel();
    assert!(!armed(), "cancel read the clock");
    assert_eq!(drain(&bucket, &w), 5, "10 tokens at 2 s, no more");
    assert_eq!(w.check(&q), Ok(()));
}

#[test]
fn a_clock_stepped_back_for_the_canceller() {
    // The same with a plain ManualClock moved back: the reading order is all that matters.
    let q = quota(10, 10);
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(q, clock.clone());
    bucket.try_acquire(10).unwrap();
    let r = bucket.reserve(10).unwrap();
    clock.set(Duration::from_secs(2));
    bucket.try_acquire(5).unwrap();
    clock.set(Duration::from_secs(1));
    r.cancel();
    clock.set(Duration::from_secs(2));
    assert_eq!(bucket.available(), 5);
}

#[test]
fn a_gated_canceller_on_real_threads() {
    // The canceller takes its reading at 0, then blocks between the reading and its CAS while the
    // main thread decides at 2 s.
    let q = quota(10, 10);
    let (clock, bucket, w) = emptied(q);
    let r = bucket.reserve(10).unwrap();
    gated(
        || r.cancel(),
        || {
            clock.inner().set(Duration::from_secs(2));
            bucket.try_acquire(5).unwrap();
            w.admit(2 * S, 5);
        },
    );
    assert_eq!(drain(&bucket, &w), 5);
    assert_eq!(w.check(&q), Ok(()));
}

#[test]
fn a_canceller_preempted_for_200_ms_on_the_std_clock() {
    // 100/s, burst 10: 1 token = 10 ms. The reservation of 9 is due 90 ms after the first take and
    // the bucket is exactly full again at 190 ms; the main thread decides then, while the
    // canceller, which read the clock at about 0, sleeps until about 200 ms before its CAS.
    // A cancellation that gave the tokens back at its stale reading would admit 15 tokens
    // within about 10 ms (bound 11).
    for run in 0..3 {
        let q = quota(100, 10);
        let clock = StallClock::new(StdClock::new());
        let bucket = Bucket::with_clock(q, clock.clone());
        let w = WindowChecker::new();
        bucket.try_acquire(10).unwrap();
        let t0 = last_reading();
        w.admit(t0, 10);
        let r = bucket.reserve(9).unwrap();
        let full_at = due(&r) + 100 * MS;
        thread::scope(|s| {
            let canceller = s.spawn(move || {
                arm([Stall::Sleep(Duration::from_millis(200))]);
                r.cancel();
            });
            while clock.inner().now() < full_at {
                thread::sleep(Duration::from_micros(200));
            }
            if bucket.try_acquire(5).is_ok() {
                w.admit(last_reading(), 5);
            }
            canceller.join().unwrap();
        });
        drain(&bucket, &w);
        assert_eq!(w.check(&q), Ok(()), "run {run}");
    }
}

// ---------------------------------------------------------------------------------------------
// Cancelling out of order must give back nothing a kept reservation depends on.

#[test]
fn cancel_order_never_over_restores() {
    let q = quota(10, 7);
    let (_, bucket) = stall_bucket(q);
    let w = WindowChecker::new();
    let r0 = bucket.reserve(7).unwrap();
    let r1 = bucket.reserve(5).unwrap();
    let r2 = bucket.reserve(2).unwrap();
    w.admit(due(&r2), 2);
    r1.cancel();
    r0.cancel();
    let r3 = bucket.reserve(6).unwrap();
    w.admit(due(&r3), 6);
    // Had r1 and r0 come back while r2 was kept, r2 and r3 would both be due at 700 ms: 8
    // tokens at one instant, burst 7.
    assert_eq!(w.check(&q), Ok(()));
    assert_eq!(due(&r2), 700 * MS);
    assert_eq!(due(&r3), 1_300 * MS);
}

#[test]
fn cancels_in_reverse_order_restore_everything() {
    let q = quota(10, 7);
    let (_, bucket) = stall_bucket(q);
    bucket.try_acquire(3).unwrap();
    let r0 = bucket.reserve(7).unwrap();
    let r1 = bucket.reserve(5).unwrap();
    let r2 = bucket.reserve(2).unwrap();
    r2.cancel();
    r1.cancel();
    r0.cancel();
    assert_eq!(bucket.available(), 4);
    // Nested: a reservation taken and cancelled in between does not block the outer one.
    let outer = bucket.reserve(4).unwrap();
    bucket.reserve(3).unwrap().cancel();
    outer.cancel();
    assert_eq!(bucket.available(), 4);
}

#[test]
fn a_cancel_after_any_later_admission_restores_nothing() {
    // The word cannot tell a later decision's debit from a refill cap, so whatever the clock
    // says, one token admitted after the reservation keeps all of it taken.
    let q = quota(10, 4);
    let (clock, bucket) = stall_bucket(q);
    let r = bucket.reserve(4).unwrap();
    bucket
        .try_acquire_for(1, Duration::from_millis(100))
        .unwrap(); // sleeps to 100 ms
    assert_eq!(clock.now(), 100 * MS);
    r.cancel();
    assert_eq!(bucket.available(), 0);
}

#[test]
fn a_cancel_with_a_reading_past_the_due_instant_restores_nothing() {
    // Go's rule, kept: a reservation that came due before the canceller's reading stays.
    let q = quota(10, 2);
    let (clock, bucket) = stall_bucket(q);
    bucket.try_acquire(2).unwrap();
    let r = bucket.reserve(2).unwrap(); // due 200 ms
    clock.inner().set(Duration::from_millis(201));
    r.cancel();
    assert_eq!(bucket.available(), 0);
}

// ---------------------------------------------------------------------------------------------
// Gated real threads: a decision with an old reading, a reservation with an old reading.

#[test]
fn a_stale_decision_after_a_cancel_is_refused() {
    // A thread reads 0 and blocks; meanwhile a reservation is taken and cancelled at 2 s, and
    // the bucket is drained at 2 s. The stale decision then must not find the cancelled tokens.
    let q = quota(10, 10);
    let (clock, bucket, w) = emptied(q);
    let stale = gated(
        || {
            let got = bucket.try_acquire(3);
            if got.is_ok() {
                w.admit(last_reading(), 3);
            }
            got
        },
        || {
            clock.inner().set(Duration::from_secs(2));
            let r = bucket.reserve(4).unwrap();
            r.cancel(); // nothing since: all 4 back
            assert_eq!(drain(&bucket, &w), 10);
        },
    );
    assert!(stale.is_err());
    assert_eq!(w.check(&q), Ok(()));
}

#[test]
fn a_reservation_with_a_stale_reading_cancelled_after_later_decisions() {
    // The reservation is decided at reading 0 after the bucket was drained at 1 s; it is due
    // only when the 1 s drain allows. Cancelled behind later admissions it restores nothing;
    // cancelled before them, all of it.
    for cancel_first in [false, true] {
        let q = quota(10, 10);
        let (clock, bucket) = stall_bucket(q);
        let w = WindowChecker::new();
        clock.inner().set(Duration::from_secs(1));
        assert_eq!(drain(&bucket, &w), 10);
        arm([Stall::Reading(0)]);
        let r = bucket.reserve(5).unwrap();
        assert_eq!(due(&r), 1_500 * MS);
        let kept = if cancel_first {
            r.cancel();
            None
        } else {
            Some(r)
        };
        clock.inner().set(Duration::from_millis(1_600));
        let n = drain(&bucket, &w);
        if let Some(r) = kept {
            assert_eq!(n, 1);
            arm([Stall::Reading(0)]);
            r.cancel();
            assert_eq!(drain(&bucket, &w), 0);
        } else {
            assert_eq!(n, 6);
        }
        assert_eq!(w.check(&q), Ok(()));
    }
}

#[test]
fn cancel_racing_try_acquire_on_threads_never_over_admits() {
    // Many rounds of: a canceller that reads its clock and is held at its gate while other
    // threads decide at later readings, or released at once. Every admission is recorded.
    let q = quota(10, 5);
    let (clock, bucket) = stall_bucket(q);
    let w = WindowChecker::new();
    let mut t = 0;
    for round in 0..300u64 {
        let cost = 1 + round % 5;
        let r = bucket.reserve(cost).unwrap();
        // The instant at which the bucket, this reservation included, is just full again: a
        // decision there absorbs the reservation with no visible cap (the hard case).
        let full_at = if due(&r) > t {
            due(&r) + 500 * MS
        } else {
            t + (5 - bucket.available()) * 100 * MS
        };
        gated(
            || r.cancel(),
            || {
                // Others move on: to the full instant or 100 ms either side, or by 0..=300 ms;
                // a decision of 1..=3.
                t = match round % 4 {
                    0 => full_at,
                    1 => full_at + 100 * MS,
                    2 => full_at.saturating_sub(100 * MS).max(t),
                    _ => t + (round * 37 % 4) * 100 * MS,
                };
                clock.inner().set(Duration::from_nanos(t));
                if round % 5 != 4 && bucket.try_acquire(1 + round % 3).is_ok() {
                    w.admit(t, 1 + round % 3);
                }
            },
        );
        // The cancelled reservation is not recorded; the drain shows whatever it restored.
        drain(&bucket, &w);
    }
    assert_eq!(w.check(&q), Ok(()));
}

#[test]
fn a_cancel_after_a_reconfiguration_there_and_back_restores_nothing() {
    // The epoch bit and the quota are the same again; the slot generation is not.
    let q = quota(10, 2);
    let (_, bucket) = stall_bucket(q);
    bucket.reserve(2).unwrap();
    let r = bucket.reserve(2).unwrap();
    bucket.set_quota(quota(10, 3));
    bucket.set_quota(q);
    r.cancel();
    assert_eq!(
        bucket.reserve(1).unwrap().delay(),
        Duration::from_millis(300)
    );
}

#[test]
fn cancel_racing_set_quota_there_and_back() {
    // The canceller is held between its reading and its CAS while the quota switches away and
    // back: it must give back nothing.
    let q = quota(10, 2);
    let (_, bucket) = stall_bucket(q);
    bucket.reserve(2).unwrap();
    let r = bucket.reserve(2).unwrap();
    gated(
        || r.cancel(),
        || {
            bucket.set_quota(quota(10, 3));
            bucket.set_quota(q);
        },
    );
    assert_eq!(
        bucket.reserve(1).unwrap().delay(),
        Duration::from_millis(300)
    );
}
