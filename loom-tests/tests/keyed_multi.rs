//! loom models of `KeyedMultiLimiter`: a decision racing the eviction of its key and the
//! re-use of the key's record by another key (it must never debit the new owner), a decision
//! racing a sweep (no debit lost), and two decisions racing for a key's last token (one is
//! admitted, every quota debited once).
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test keyed_multi`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::Limiter;
use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};

fn limits() -> Limits {
    let per_second = Quota::new(1, Duration::from_secs(1), 3).unwrap();
    let per_minute = Quota::new(60, Duration::from_secs(60), 5).unwrap();
    Limits::new([per_second, per_minute]).unwrap()
}

/// One record: key 1 is full and evictable; key 2 needs room, evicts key 1 and takes its
/// record, while a decision on key 1 that may already have looked it up (record 0) races it.
/// That decision must land on key 1 while key 1 owns the record, or miss and find the table
/// full; never on key 2's tokens in key 1's old record.
#[test]
fn a_decision_never_debits_the_key_that_took_its_record() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(KeyedMultiLimiter::with_clock(limits(), 1, clock.clone()));
        limiter.try_acquire(&1u8, 1).unwrap();
        clock.advance(Duration::from_secs(1)); // key 1 is full again: evictable
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&1u8, 1).is_ok());
        let new_key = limiter.try_acquire(&2u8, 2).is_ok();
        let old_key = t.join().unwrap();
        assert!(
            old_key ^ new_key,
            "one record: exactly one key tracked and admitted"
        );
        assert_eq!(limiter.len(), 1);
        if new_key {
            assert_eq!(
                limiter.available(&2u8),
                1,
                "key 2 debited by its own decision only"
            );
            assert_eq!(limiter.available(&1u8), 3, "key 1 untracked: full");
        } else {
            assert_eq!(limiter.available(&1u8), 2);
        }
    });
}

/// A sweep racing an admission on a full key: the sweep locks the record before it decides to
/// evict, so either the debit lands first (the key is kept) or the key is evicted first and the
/// decision re-inserts it; the debit is never lost.
#[test]
fn a_sweep_never_loses_a_racing_debit() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = Arc::new(KeyedMultiLimiter::with_clock(limits(), 2, clock.clone()));
        limiter.try_acquire(&1u8, 1).unwrap();
        clock.advance(Duration::from_secs(1));
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&1u8, 2).is_ok());
        let evicted = limiter.sweep();
        assert!(t.join().unwrap());
        assert!(evicted <= 1);
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.available(&1u8), 1, "the debit of 2 is kept");
    });
}

/// Two decisions for the last token of a key's tighter quota (frozen clock): exactly one is
/// admitted and it debits both quotas once.
#[test]
fn two_decisions_race_for_a_keys_last_token() {
    loom::model(|| {
        let limiter = Arc::new(KeyedMultiLimiter::with_clock(
            limits(),
            2,
            ManualClock::new(),
        ));
        limiter.try_acquire(&7u8, 2).unwrap();
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = limiter.clone();
                thread::spawn(move || l.try_acquire(&7u8, 1).is_ok())
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&ok| ok)
            .count();
        assert_eq!(admitted, 1);
        let (_, snaps) = limiter.decide_snapshots(&7u8, 0);
        assert_eq!(snaps.as_slice()[0].remaining(), 0);
        assert_eq!(
            snaps.as_slice()[1].remaining(),
            2,
            "the minute debited 2 + 1"
        );
    });
}
