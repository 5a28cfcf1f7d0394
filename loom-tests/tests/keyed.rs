//! loom models of the keyed limiter's table protocol: concurrent insertion of one new key,
//! eviction racing an admission, and a rebuild racing an admission.
//!
//! Under `--cfg tollgate_loom` the index is the production table (`src/keyed/index.rs`) on loom's
//! mutex and `crate::sync`'s loom `AtomicU128`, with a fixed hash seed so every explored execution
//! probes the same slots: the lock-free probe, the whole-slot CAS, the re-probe under the mutex,
//! eviction to a tombstone, the in-place rebuild, the length budget and `next_full_at` are all the
//! code explored here.
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
        // Takes key 1's whole burst: correct only if it lands on the live slot, or on a fresh one.
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

/// Needs at least 3 preemptions to reach a lost update in a faulty rebuild (checked by mutating
/// the rebuild's capture into a load and a store), so the bound is raised to 3 if set lower.
#[test]
fn rebuild_races_an_admission() {
    let mut builder = loom::model::Builder::new();
    if let Some(p) = builder.preemption_bound {
        builder.preemption_bound = Some(p.max(3));
    }
    builder.check(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        // 4 keys: an 8-slot table, rebuilt in place once more than 2 slots are tombstones.
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 4, clock.clone()));
        for k in 1u8..=4 {
            limiter.try_acquire(&k, 1).unwrap();
        }
        clock.advance(Duration::from_secs(1)); // keys 1..=4 are full
        limiter.try_acquire(&4u8, 1).unwrap(); // key 4 is not: it survives the sweep, moved
        let other = limiter.clone();
        // Key 4's last token: must land on its slot before the move, or on the moved slot.
        let t = thread::spawn(move || other.try_acquire(&4u8, 1).is_ok());
        // Evicts keys 1..=3: three tombstones, so the table is rebuilt.
        let evicted = limiter.sweep();
        assert!(t.join().unwrap(), "key 4 held one token");
        assert_eq!(evicted, 3);
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.available(&4u8), 0, "both debits of key 4 are kept");
        assert!(limiter.try_acquire(&4u8, 1).is_err());
    });
}
