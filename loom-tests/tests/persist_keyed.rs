//! loom models of saving a `KeyedLimiter` while it decides: the save walks the table one slot
//! per hold of the index's mutex (its chunk under loom), so evictions shifting a chain back and
//! a migration moving entries to a new region are explored between its chunks. Restored at the
//! save's own instant, no key holds more than it had when the save began.
#![cfg(tollgate_loom)]

use loom::thread;
use std::time::{Duration, SystemTime};
use tollgate::{Clock, KeyedLimiter, ManualClock, Quota};

fn restored(file: &[u8], quota: Quota, clock: ManualClock) -> KeyedLimiter<u8, Quota, ManualClock> {
    KeyedLimiter::builder(quota, 4, clock)
        .restore_at(file, SystemTime::UNIX_EPOCH)
        .unwrap()
}

/// Keys 1..=3 are full and key 4 holds one token of two: a sweep on another thread evicts
/// 1..=3 and shifts key 4 back along its chain while the save walks past; the restored key 4
/// holds at most its one token (a walk that missed it would restore it full).
#[test]
fn a_save_racing_a_sweep_misses_no_tracked_key() {
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 4, clock.clone()));
        for k in 1u8..=4 {
            limiter.try_acquire(&k, 1).unwrap();
        }
        clock.advance(Duration::from_secs(1));
        limiter.try_acquire(&4u8, 1).unwrap();
        let other = limiter.clone();
        let t = thread::spawn(move || other.sweep());
        let mut file = Vec::new();
        limiter.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(t.join().unwrap(), 3);
        let back = ManualClock::new();
        back.set(Duration::from_nanos(clock.now()));
        let r = restored(&file, quota, back);
        assert!(
            r.available(&4u8) <= 1,
            "key 4 restored with {}",
            r.available(&4u8)
        );
        for k in 1u8..=3 {
            assert!(r.available(&k) <= 2);
        }
    });
}

/// Keys 1 and 2 hold one token each; another thread's insertion of key 3 grows the table (a
/// migration whose first step moves key 1 to the new region) while the save walks: both come
/// back with at most their one token.
#[test]
fn a_save_racing_a_migration_misses_no_tracked_key() {
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 4, clock.clone()));
        limiter.try_acquire(&1u8, 1).unwrap();
        limiter.try_acquire(&2u8, 1).unwrap();
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&3u8, 1).unwrap());
        let mut file = Vec::new();
        limiter.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
        t.join().unwrap();
        let r = restored(&file, quota, clock.clone());
        assert!(r.available(&1u8) <= 1);
        assert!(r.available(&2u8) <= 1);
    });
}
