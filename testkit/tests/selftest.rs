//! The adversarial test helpers test themselves: `WindowChecker` finds the worst window,
//! `StallClock` returns the armed readings and holds a thread at its gate.

use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota};

use stall::{arm, Gate, Stall, StallClock};
use tollgate_testkit::stall;
use tollgate_testkit::window;
use window::WindowChecker;

#[test]
fn checker_finds_the_worst_window() {
    let q = Quota::per_second(10).unwrap(); // burst 10
    let c = WindowChecker::new();
    c.admit(0, 10);
    c.admit(1_000_000_000, 10);
    assert_eq!(c.check(&q), Ok(()));
    c.admit(1_000_000_000, 1);
    let v = c.check(&q).unwrap_err();
    assert_eq!((v.from, v.to, v.admitted), (0, 1_000_000_000, 21));
    c.retract(1_000_000_000, 1);
    c.admit(1_100_000_000, 1);
    assert_eq!(c.check(&q), Ok(()));
    c.admit(1_099_999_999, 1);
    assert!(c.check(&q).is_err());
    // A burst at one instant.
    let c = WindowChecker::new();
    c.admit(5, 6);
    c.admit(5, 5);
    assert_eq!(c.check(&q).unwrap_err().admitted, 11);
}

#[test]
fn armed_readings_are_returned_in_order_then_the_clock() {
    let clock = StallClock::new(ManualClock::new());
    clock.inner().set(Duration::from_secs(5));
    arm([Stall::Reading(1), Stall::Reading(2)]);
    assert_eq!(
        (clock.now(), clock.now(), clock.now()),
        (1, 2, 5_000_000_000)
    );
}

#[test]
fn a_gated_thread_acts_on_its_old_reading_after_others_moved_on() {
    let clock = StallClock::new(ManualClock::new());
    let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    assert_eq!(bucket.try_acquire(10), Ok(()));
    let gate = Gate::new();
    std::thread::scope(|s| {
        let g = gate.clone();
        let stalled = s.spawn(|| {
            arm([Stall::Gate(g)]);
            bucket.try_acquire(1) // decided at reading 0
        });
        gate.wait_reached();
        clock.inner().set(Duration::from_secs(1));
        assert_eq!(bucket.try_acquire(10), Ok(()));
        gate.open();
        assert!(stalled.join().unwrap().is_err());
    });
}
