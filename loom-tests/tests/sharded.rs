//! loom models of the sharded bucket: a shard borrowing from another while its owner admits.
#![cfg(tollgate_loom)]

use loom::thread;
use std::time::Duration;
use tollgate::{ManualClock, Quota, ShardedBucket};

/// Two shards of one token each, a frozen clock: one thread takes 2 (its own shard cannot pay, so
/// it borrows the other's token), the other thread takes 1 from its own shard at the same time.
/// Nothing is created, nothing is stranded: admitted + available is exactly the burst.
#[test]
fn borrowing_while_the_owner_admits() {
    loom::model(|| {
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::per_second(2).unwrap(),
            2,
            ManualClock::new(),
        ));
        let other = bucket.clone();
        let t = thread::spawn(move || if other.try_acquire(2).is_ok() { 2 } else { 0 });
        let b2 = bucket.clone();
        let u = thread::spawn(move || if b2.try_acquire(1).is_ok() { 1 } else { 0 });
        let admitted = t.join().unwrap() + u.join().unwrap();
        assert!(admitted == 1 || admitted == 2, "admitted {admitted}");
        assert_eq!(admitted + bucket.available(), 2);
    });
}

/// The same race with the clock moving by half a second meanwhile (both shards start full, so
/// the borrow of 2 can fail after taking one shard's token and must give it back): a failed borrow
/// gives back no more than it took, so the total never exceeds burst + what the clock can earn.
#[test]
fn giving_back_while_the_clock_moves_creates_nothing() {
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::per_second(2).unwrap(),
            2,
            clock.clone(),
        ));
        let other = bucket.clone();
        let t = thread::spawn(move || if other.try_acquire(2).is_ok() { 2 } else { 0 });
        let b2 = bucket.clone();
        let u = thread::spawn(move || if b2.try_acquire(1).is_ok() { 1 } else { 0 });
        clock.advance(Duration::from_millis(500)); // each shard earns half a token
        let admitted = t.join().unwrap() + u.join().unwrap();
        // At most the burst (2) plus what 500 ms at 2 tokens/s can refill (1).
        assert!(admitted + bucket.available() <= 3, "admitted {admitted}");
        assert!(admitted >= 1, "a full bucket refused everything");
    });
}
