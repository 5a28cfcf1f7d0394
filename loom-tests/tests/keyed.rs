//! loom models of the keyed limiter's per-key word protocol: concurrent insertion of one new key,
//! and eviction racing an admission.
//!
//! Under `--cfg tollgate_loom` the index is a loom `Mutex` around a `HashMap` (papaya has no loom
//! support), so the map is modelled as a linearizable black box; everything around it — the CAS
//! decisions on the word, the dead bit, the length budget, `next_full_at`, the sweep — is the
//! production code, explored here.
#![cfg(tollgate_loom)]

use loom::thread;
use std::time::Duration;
use tollgate::{KeyedLimiter, ManualClock, Quota};

#[test]
fn two_threads_insert_and_admit_the_same_new_key() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(
            Quota::per_second(1).unwrap(),
            4,
            clock,
        ));
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&7u8, 1).is_ok());
        let mine = limiter.try_acquire(&7u8, 1).is_ok();
        let theirs = t.join().unwrap();
        assert!(
            mine ^ theirs,
            "exactly one of two requests for a burst of 1"
        );
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.available(&7u8), 0);
    });
}

#[test]
fn eviction_races_an_admission() {
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 1, clock.clone()));
        limiter.try_acquire(&1u8, 1).unwrap();
        clock.advance(Duration::from_secs(1)); // key 1 is full: evictable
        let other = limiter.clone();
        // Takes key 1's whole burst: correct only if it lands on the live word, or on a fresh one.
        let t = thread::spawn(move || other.try_acquire(&1u8, 2).is_ok());
        // Needs room: evicts key 1 unless the admission landed first.
        let new_key = limiter.try_acquire(&2u8, 1).is_ok();
        let old_key = t.join().unwrap();
        assert!(
            old_key ^ new_key,
            "one slot: exactly one of them is tracked and admitted"
        );
        assert_eq!(limiter.len(), 1);
        if old_key {
            assert_eq!(limiter.available(&1u8), 0);
        } else {
            assert_eq!(limiter.available(&2u8), 1);
            assert_eq!(limiter.available(&1u8), 2);
        }
        let c = limiter.counters();
        assert_eq!(c.admitted, 2);
        assert_eq!(c.refused_table_full + c.refused, 2);
    });
}
