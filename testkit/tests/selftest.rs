//! The adversarial test helpers test themselves: `WindowChecker` and `SpanChecker` find the
//! worst window, `StallClock` returns the armed readings and holds a thread at its gate, and a
//! restarted `RedisServer` serves commands once `restart` returns.

use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota};

use stall::{arm, Gate, Stall, StallClock};
use tollgate_testkit::stall;
use tollgate_testkit::window;
use window::{SpanChecker, WindowChecker};

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
fn span_checker_counts_only_intervals_inside_a_window() {
    let q = Quota::per_second(10).unwrap(); // burst 10, a token per 100 ms
    let ms = |n: u64| n * 1_000_000;
    let c = SpanChecker::new();
    assert_eq!(c.tightest(&q, 0), None);
    c.admit(ms(0), ms(1), 10);
    // Somewhere in 0..=1000 ms: it may have been decided a whole refill after the burst.
    c.admit(ms(0), ms(1000), 9);
    assert_eq!(c.check_within(&q, 0), Ok(()));
    // A token 1 ms after the burst, known to the millisecond: 11 in 2 ms.
    c.admit(ms(1), ms(2), 1);
    let v = c.check_within(&q, 0).unwrap_err();
    assert_eq!((v.from, v.to, v.admitted), (ms(0), ms(2), 11));
    // The tightest window of a log within the bound: half a token short of it.
    let c = SpanChecker::new();
    c.admit(ms(0), ms(0), 9);
    c.admit(ms(50), ms(50), 1);
    let v = c.tightest(&q, 0).unwrap();
    assert_eq!((v.from, v.to, v.admitted), (ms(0), ms(50), 10));
    assert_eq!(v.bound_num - v.admitted as i128 * v.per_ns, v.per_ns / 2);
    assert_eq!(c.check_within(&q, 0), Ok(()));
    // The slack widens every window: 11 tokens 100 ms - 1 ns apart pass with 1 ns of it.
    let c = SpanChecker::new();
    c.admit(ms(0), ms(0), 10);
    c.admit(ms(100) - 1, ms(100) - 1, 1);
    assert!(c.check_within(&q, 0).is_err());
    assert_eq!(c.check_within(&q, 1), Ok(()));
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

/// A restarted server answers `INFO` while it loads its append-only file and refuses every
/// other command (`LOADING`) until it is done: `restart` returns only after that, so the next
/// command a test sends is served. A million keys make the load last long enough to be seen.
#[test]
fn a_restart_returns_once_the_data_is_loaded() {
    use tollgate_testkit::redis_server::RedisServer;
    let Some(mut server) = RedisServer::start_with(
        "selftest::a_restart_returns_once_the_data_is_loaded",
        &["--appendonly", "yes", "--appendfsync", "always"],
    ) else {
        return;
    };
    let script = "for i = 1, 1000000 do redis.call('SET', 'k' .. i, 'v') end return 1";
    assert_eq!(server.cli(&["EVAL", script, "0"]).trim(), "1");
    server.restart();
    assert_eq!(server.cli(&["SET", "after", "restart"]).trim(), "OK");
    assert_eq!(server.cli(&["EXISTS", "k1000000"]).trim(), "1");
}
