//! `CoarseClock`: a cached reading of its source, refreshed by an upkeep thread; never ahead of
//! the source, never backwards, and a bucket on it decides exactly at its (stale) reading.
#![cfg(feature = "std")]

use std::time::{Duration, Instant};
use tollgate::{Bucket, Clock, CoarseClock, Denied, ManualClock, Quota};

/// Polls until the coarse clock reads `want` (the upkeep thread refreshes it): at most 60 s, so
/// that a starved upkeep thread on a loaded machine does not fail the test.
fn wait_for(clock: &CoarseClock, want: u64) {
    let start = Instant::now();
    while clock.now() != want {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never refreshed to {want}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn follows_its_source_never_ahead_never_backwards() {
    let source = ManualClock::new();
    let clock = CoarseClock::with_source(source.clone(), Duration::from_millis(1)).unwrap();
    assert_eq!(clock.now(), 0);
    assert_eq!(clock.interval(), Duration::from_millis(1));
    source.set(Duration::from_secs(2));
    wait_for(&clock, 2_000_000_000);
    // A source that steps back is not followed back.
    source.set(Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(clock.now(), 2_000_000_000);
    source.set(Duration::from_secs(3));
    wait_for(&clock, 3_000_000_000);
    // Clones share the one cached time.
    assert_eq!(clock.clone().now(), 3_000_000_000);
}

#[test]
fn zero_interval_is_an_error() {
    let e = CoarseClock::with_source(ManualClock::new(), Duration::ZERO).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn a_bucket_decides_exactly_at_the_cached_reading() {
    let source = ManualClock::new();
    let clock = CoarseClock::with_source(source.clone(), Duration::from_millis(1)).unwrap();
    let bucket = Bucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    assert_eq!(bucket.try_acquire(10), Ok(()));
    // The source moves 100 ms (one token), the cached reading has not yet: still refused, with
    // the exact wait at the cached reading.
    source.advance(Duration::from_millis(100));
    if clock.now() == 0 {
        assert_eq!(
            bucket.try_acquire(1),
            Err(Denied::RetryAfter(Duration::from_millis(100)))
        );
    }
    wait_for(&clock, 100_000_000);
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert!(bucket.try_acquire(1).is_err());
}

#[test]
fn on_the_default_clock_it_advances() {
    let clock = CoarseClock::new(Duration::from_millis(1)).unwrap();
    let a = clock.now();
    // However long the upkeep thread waits for the CPU: poll (at most 60 s), never one sleep.
    let start = Instant::now();
    while clock.now() == a {
        assert!(start.elapsed() < Duration::from_secs(60), "never advanced");
        std::thread::sleep(Duration::from_millis(1));
    }
    let b = clock.now();
    assert!(b > a, "{a} -> {b}");
}
