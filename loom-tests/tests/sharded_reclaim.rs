//! loom models of reclaiming: a decision the central word refuses spends from another shard's
//! lease while that shard's own threads spend from it, replace it or pool it.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use tollgate::{ManualClock, Quota, ShardedBucket};

/// Runs `f` under loom with at least 6 preemptions: these models are small enough for that
/// bound to run in about a second, and `ci/loom.sh`'s default (`LOOM_MAX_PREEMPTIONS`, 2)
/// would leave interleavings with three or more preemptions unexplored. The protocol has no
/// spin loop (a locked lease sends a decision to the central word; every retry follows another
/// thread's successful CAS), so no model needs `yield_now` to terminate.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(6, |p| p.max(6)));
    builder.check(f);
}

/// Quota 34/s, burst 34, two shards, frozen clock: a one-token decision on the full bucket
/// takes a lease of ⌊33 / 16⌋ = 2 tokens.
fn bucket() -> Arc<ShardedBucket<ManualClock>> {
    let bucket = ShardedBucket::with_clock(Quota::per_second(34).unwrap(), 2, ManualClock::new());
    assert_eq!(bucket.shards(), 2);
    Arc::new(bucket)
}

/// The main thread (shard 0) takes 1 and a lease of 2, then the word's 31. The other thread
/// (the first to decide after it: shard 1) asks for 1 twice, refused by the word each time and
/// reclaiming from shard 0's lease, while the main thread spends that lease twice (and, finding
/// it empty, is refused). The two tokens of the lease go to exactly two of the four requests:
/// nothing spent twice, nothing lost.
#[test]
fn a_reclaim_races_the_owners_spends() {
    model(|| {
        let bucket = bucket();
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.try_acquire(31), Ok(()));
        let b = bucket.clone();
        let other = thread::spawn(move || (0..2).filter(|_| b.try_acquire(1).is_ok()).count());
        let mine = (0..2).filter(|_| bucket.try_acquire(1).is_ok()).count();
        let theirs = other.join().unwrap();
        assert_eq!(mine + theirs, 2, "{mine} + {theirs}");
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// The main thread (shard 0) takes 1 and a lease of 2, then the word's 31. Then it asks for 3:
/// its lease holds 2 and the word nothing, so the pooling locks the lease and is refused
/// (unlocking it unchanged), and the reclaim after it finds shard 1's lease empty. Meanwhile
/// the other thread (shard 1) reclaims 1 from shard 0's lease (or finds it locked). Either way the lease's 2 tokens are neither created nor
/// lost: whatever the other thread did not take is still there.
#[test]
fn a_reclaim_races_the_owners_pooling() {
    model(|| {
        let bucket = bucket();
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.try_acquire(31), Ok(()));
        let b = bucket.clone();
        let other = thread::spawn(move || u64::from(b.try_acquire(1).is_ok()));
        thread::yield_now();
        let pooled = bucket.try_acquire(3).is_ok();
        let reclaimed = other.join().unwrap();
        assert!(!pooled, "3 tokens from a pool of 2");
        assert_eq!(reclaimed + bucket.available(), 2);
    });
}
