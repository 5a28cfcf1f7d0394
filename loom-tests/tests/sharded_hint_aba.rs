//! The sharded bucket's `dry_until` hint and its publication counter: four republications of
//! the same instant must not bring the word back for a stale publisher. With the 2-bit counter
//! the 64-bit hint had, they did: a refusal that read the shards while another thread's take was
//! in place (before its give-back) then published its stale, too-late hint with a CAS that
//! succeeded (found by an adversarial review, 2026-12-01; the hint is now 128 bits with a
//! 64-bit counter).
#![cfg(tollgate_loom)]

use loom::thread;
use tollgate::{Clock, Quota, ShardedBucket};

/// A clock whose reading is chosen per model thread (a stale reading, as preemption between a
/// clock read and the decision that uses it produces).
#[derive(Clone, Copy, Debug, Default)]
struct ThreadClock;

loom::thread_local! {
    static READING: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

impl Clock for ThreadClock {
    fn now(&self) -> u64 {
        READING.with(|r| r.get())
    }
}

const MS: u64 = 1_000_000;

/// Quota 2/s, burst 2: two shards of 1 token/s, burst 1 each, drained at 0. At 750 ms each holds
/// 0.75 tokens: the pool holds 1.5, and held one token from 500 ms on. A failed borrow of 2 at
/// 750 ms (it takes both fractions, gives them back and republishes `dry_until` = 500 ms) sets
/// the hint up.
///
/// Then `B` (reading 750 ms) asks for 2 four times: each borrow takes both fractions, fails, gives
/// them back and republishes 500 ms with a CAS (a give-back always republishes), stepping the
/// hint's version by one each time — four steps bring the word back bit for bit. `A` (a stale
/// reading, 250 ms, before the hint) asks for 2: it is sent to `read_pool`, loads the hint, and
/// can read the shards while `B`'s first takes are in place (pool empty at 750 ms, one token at
/// 1,250 ms), then be preempted before its CAS. When `A` resumes, the word equals what it
/// loaded and its CAS publishes 1,250 ms (875 ms if it read one shard before `B`'s second take),
/// missing `B`'s give-backs.
///
/// Once the races are over the pool holds 1.5 tokens at 750 ms; a one-token request at 750 ms
/// must be admitted. Fails: refused with `RetryAfter(125 ms)` by `A`'s hint (two preemptions).
/// Control: with three give-backs instead of four (the version cannot come back) every
/// interleaving passes (94 s on 2 cores), so the failure is the version's wrap.
#[test]
fn stale_refusal_republishes_over_four_give_backs() {
    loom::model(|| {
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::per_second(2).unwrap(),
            2,
            ThreadClock,
        ));
        assert_eq!(bucket.shards(), 2);
        READING.with(|r| r.set(0));
        assert_eq!(bucket.try_acquire(2), Ok(()));
        READING.with(|r| r.set(750 * MS));
        assert_eq!(bucket.available(), 1);
        // A failed borrow: publishes dry_until = 500 ms (version 1).
        assert!(bucket.try_acquire(2).is_err());

        let b = bucket.clone();
        let gives_back = thread::spawn(move || {
            READING.with(|r| r.set(750 * MS));
            for _ in 0..4 {
                assert!(b.try_acquire(2).is_err());
            }
        });
        let a = bucket.clone();
        let stale = thread::spawn(move || {
            READING.with(|r| r.set(250 * MS));
            assert!(a.try_acquire(2).is_err());
        });
        gives_back.join().unwrap();
        stale.join().unwrap();

        READING.with(|r| r.set(750 * MS));
        assert_eq!(bucket.available(), 1, "1.5 tokens at 750 ms");
        let verdict = bucket.try_acquire(1);
        assert!(
            verdict.is_ok(),
            "the pool holds 1.5 tokens at 750 ms, yet a one-token request got {verdict:?}"
        );
    });
}
