//! `set_quota` never lets a window admit more than the looser quota allows, with a monotone
//! clock and with readings older than the reconfiguration's (found by the random schedules in
//! `tests/schedules.rs`; fixed in `gcra::rescale`).

#[path = "support/stall.rs"]
mod stall;
#[path = "support/window.rs"]
mod window;

use stall::{arm, Stall, StallClock};
use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota};
use window::WindowChecker;

const MS: u64 = 1_000_000;

fn quota(per_second: u64, burst: u64) -> Quota {
    Quota::per_second(per_second)
        .unwrap()
        .with_burst(burst)
        .unwrap()
}

#[test]
fn a_faster_rate_does_not_repay_queued_debt_early() {
    // 5/s, burst 2: 2 now, 2 reserved for 400 ms; at 200 ms the rate doubles. Carrying the debt
    // as tokens (Go's rule) repaid it at 300 ms and put a new token at 400 ms beside the queued
    // two: 3 at one instant, burst 2.
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(5, 2), clock.clone());
    let w = WindowChecker::new();
    w.admit(0, 2);
    bucket.try_acquire(2).unwrap();
    let r = bucket.reserve(2).unwrap();
    w.admit(r.delay_from(0).as_nanos() as u64, 2);
    assert_eq!(r.delay_from(0), Duration::from_millis(400));
    clock.set(Duration::from_millis(200));
    bucket.set_quota(quota(10, 2));
    let r = bucket.reserve(1).unwrap();
    w.admit(r.delay_from(0).as_nanos() as u64, 1);
    assert_eq!(w.check(&quota(10, 2)), Ok(()));
    assert_eq!(r.delay_from(0), Duration::from_millis(500));
}

#[test]
fn a_slower_rate_gives_a_stale_reading_no_more_than_the_old_quota_had() {
    // 20/s, burst 8: 7 at 0; at 191 ms the rate goes down to 13/s; then a decision whose
    // reading is 10 ms (stale). Carrying the 4.82 tokens as tokens left 2.47 at 10 ms under the
    // slower rate, where the old quota had 1.2: 9 tokens in 10 ms, more than even 20/s, burst 8
    // allows.
    let clock = StallClock::new(ManualClock::new());
    let bucket = Bucket::with_clock(quota(20, 8), clock.clone());
    let w = WindowChecker::new();
    bucket.try_acquire(7).unwrap();
    w.admit(0, 7);
    clock.inner().set(Duration::from_millis(191));
    bucket.set_quota(quota(13, 8));
    arm([Stall::Reading(10 * MS)]);
    if bucket.try_acquire(2).is_ok() {
        w.admit(10 * MS, 2);
    }
    assert_eq!(w.check(&quota(20, 8)), Ok(()));
    // At the switch's own reading the new quota holds what 13/s earns in the 241 ms the old
    // bucket took to earn its 4.82 tokens: 3.13.
    assert_eq!(bucket.available(), 3);
    assert_eq!(clock.now(), 191 * MS);
}

#[test]
fn a_bucket_full_for_long_keeps_the_smaller_burst() {
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(100, 50), clock.clone());
    clock.set(Duration::from_secs(5));
    bucket.set_quota(quota(1, 4));
    assert_eq!(bucket.available(), 4);
    bucket.set_quota(quota(1, 60));
    assert_eq!(bucket.available(), 4, "raising the burst does not fill");
}
