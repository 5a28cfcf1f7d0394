//! `set_quota` and the window bound: a debt keeps its due instant (`gcra::rescale`; the random
//! schedules of `tests/schedules.rs` cover it too), and what readings that straddle a switch can
//! see is bounded by the rate difference times their staleness (documented there).

use tollgate_testkit::stall;
use tollgate_testkit::window;

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
fn a_stale_reading_after_a_slower_rate_gains_at_most_the_rate_difference() {
    // 20/s, burst 8: 7 at 0; at 191 ms the rate goes down to 13/s (4.82 tokens carried); then a
    // decision whose reading is 10 ms, 181 ms older than the switch. The old quota held 1.2
    // tokens at 10 ms; the new state, extrapolated back at 13/s, holds 2.47: more, by at most
    // (20 − 13) · 0.181 = 1.27 (documented on `gcra::rescale`). Each era keeps its own bound.
    let clock = StallClock::new(ManualClock::new());
    let bucket = Bucket::with_clock(quota(20, 8), clock.clone());
    let (before, after) = (WindowChecker::new(), WindowChecker::new());
    bucket.try_acquire(7).unwrap();
    before.admit(0, 7);
    clock.inner().set(Duration::from_millis(191));
    bucket.set_quota(quota(13, 8));
    assert_eq!(bucket.available(), 4);
    arm([Stall::Reading(10 * MS)]);
    assert_eq!(bucket.available(), 2);
    arm([Stall::Reading(10 * MS)]);
    bucket.try_acquire(2).unwrap();
    after.admit(10 * MS, 2);
    assert_eq!(before.check(&quota(20, 8)), Ok(()));
    assert_eq!(after.check(&quota(13, 8)), Ok(()));
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

/// On a frozen clock nothing refills, so however the burst is raised and lowered no decision
/// may find more than the 10 tokens the bucket started with: three threads admitting and
/// reserving (kept when due at once, else cancelled) race 20,000 switches among five quotas
/// (bursts 5 to 2^30, 1/s to 10^9/s, exact and inexact), twenty rounds at different readings.
#[test]
fn raising_and_lowering_the_burst_on_a_frozen_clock_hands_out_nothing_twice() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let qs = [
        quota(10, 10),
        quota(1000, 1000),
        Quota::new(1, Duration::from_secs(1), 5).unwrap(),
        Quota::new(3, Duration::from_secs(7), 10).unwrap(),
        Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 30).unwrap(),
    ];
    for round in 1..=20u64 {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(123_456_789 * round));
        let bucket = Bucket::with_clock(qs[0], clock.clone());
        let (admitted, stop) = (AtomicU64::new(0), AtomicBool::new(false));
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (bucket, admitted, stop) = (&bucket, &admitted, &stop);
                s.spawn(move || {
                    while !stop.load(Relaxed) {
                        let cost = 1 + t % 2;
                        if bucket.try_acquire(cost).is_ok() {
                            admitted.fetch_add(cost, Relaxed);
                        }
                        if let Ok(r) = bucket.reserve(1) {
                            if r.delay() == Duration::ZERO {
                                admitted.fetch_add(1, Relaxed);
                            } else {
                                r.cancel();
                            }
                        }
                    }
                });
            }
            for i in 0..20_000 {
                bucket.set_quota(qs[i % qs.len()]);
            }
            stop.store(true, Relaxed);
        });
        let admitted = admitted.into_inner();
        assert!(admitted <= 10, "round {round}: {admitted} admitted from 10");
    }
}
