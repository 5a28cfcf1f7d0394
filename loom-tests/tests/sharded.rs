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
        // Whatever the refusals published as the pool's "dry until" hint, it never refuses a
        // token that is there once the races are over.
        if admitted == 1 {
            assert_eq!(bucket.try_acquire(1), Ok(()));
        }
    });
}

/// Quota 2/s on `clock`, split into two shards of one token each (1 token/s), both full.
fn two_shards_of_one(clock: &ManualClock) -> loom::sync::Arc<ShardedBucket<ManualClock>> {
    let quota = Quota::per_second(2).unwrap();
    loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, clock.clone()))
}

/// The same race with the clock moving by half a second meanwhile (both shards start full, so
/// the borrow of 2 can fail after taking one shard's token and must give it back): a failed borrow
/// gives back no more than it took, so the total never exceeds burst + what the clock can earn.
#[test]
fn giving_back_while_the_clock_moves_creates_nothing() {
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = two_shards_of_one(&clock);
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

/// A clock whose reading is chosen per model thread (a stale reading, as preemption between a
/// clock read and the CAS that uses it produces): each thread sets its own before acting.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadClock;

loom::thread_local! {
    static READING: std::cell::Cell<u64> = std::cell::Cell::new(2_000_000_000);
}

impl tollgate::Clock for ThreadClock {
    fn now(&self) -> u64 {
        READING.with(|r| r.get())
    }
}

/// Issue 8, defect 6: a failed borrow's give-back racing a decision at a later reading.
///
/// Quota 2/s, burst 4: two shards of 1 token/s, burst 2 each, both full. `B` reads 0 (stale) and
/// asks for 3: it takes both tokens of one shard, then can fail on the other (drained by `O`
/// meanwhile) and give its take back. `O` reads 2 s, when a shard emptied at 0 is exactly full
/// again: it takes 2, then 1. If `O`'s second take lands on the shard `B` emptied, between `B`'s
/// take and its give-back, the word cannot tell `O`'s debit from a refill cap; a give-back that
/// restores anything then leaves more than the burst at 2 s. In every interleaving the tokens
/// admitted at the instant 2 s plus those still available then stay within the burst, and
/// everything admitted within [0, 2 s] within burst + 2 s of rate.
#[test]
fn give_back_after_a_later_reading_decision_creates_nothing() {
    loom::model(|| {
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::new(2, Duration::from_secs(1), 4).unwrap(),
            2,
            ThreadClock,
        ));
        assert_eq!(bucket.shards(), 2);
        let b = bucket.clone();
        let stale = thread::spawn(move || {
            READING.with(|r| r.set(0));
            if b.try_acquire(3).is_ok() {
                3
            } else {
                0
            }
        });
        let o = bucket.clone();
        let fresh = thread::spawn(move || {
            let mut got = 0;
            for cost in [2, 1] {
                if o.try_acquire(cost).is_ok() {
                    got += cost;
                }
            }
            got
        });
        let at_zero = stale.join().unwrap();
        let at_two = fresh.join().unwrap();
        let left = bucket.available(); // at 2 s
        assert!(
            at_two + left <= 4,
            "{at_two} admitted at 2 s and {left} left: burst 4"
        );
        assert!(
            at_zero + at_two + left <= 8,
            "{at_zero} + {at_two} + {left} in 2 s"
        );
    });
}

/// Issue 9: a served borrow publishes its hint with a plain store (`taken_until`, no CAS) while
/// another borrow fails, gives back and republishes the versioned hint, and the clock moves.
///
/// Quota 2/s, burst 2: two shards of 1 token/s, burst 1 each, drained at 0. At 0.5 s each holds
/// half a token, so a one-token request collects both halves and publishes when the pool next
/// holds a token from the words its takes left. Two such requests, on different shards, race
/// while the clock moves on to 0.75 s (1.5 tokens earned since the drain): at most one is
/// admitted, nothing is created, and once the races are over a token the pool holds is refused
/// by neither hint.
#[test]
fn served_borrow_hint_stored_while_another_gives_back() {
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = two_shards_of_one(&clock);
        assert_eq!(bucket.try_acquire(2), Ok(()));
        clock.advance(Duration::from_millis(500));
        let spawn = |b: loom::sync::Arc<ShardedBucket<ManualClock>>| {
            thread::spawn(move || u64::from(b.try_acquire(1).is_ok()))
        };
        let (t, u) = (spawn(bucket.clone()), spawn(bucket.clone()));
        clock.advance(Duration::from_millis(250));
        let admitted = t.join().unwrap() + u.join().unwrap();
        let left = bucket.available(); // at 0.75 s
        assert!(admitted <= 1, "admitted {admitted}");
        assert!(admitted + left <= 1, "{admitted} admitted and {left} left");
        if left >= 1 {
            assert_eq!(bucket.try_acquire(1), Ok(()), "a hint refused a token");
        }
    });
}
