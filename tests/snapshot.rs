//! `try_acquire_snapshot` on every limiter: the verdict equals `try_acquire`'s, and the snapshot
//! equals `gcra::snapshot` of the state the decision left, at the decision's own reading.
#![cfg(feature = "keyed")]

use std::time::Duration;
use tollgate::{gcra, Bucket, Denied, KeyedLimiter, ManualClock, Quota, ShardedBucket, Snapshot};
use tollgate_testkit::decide::Snapshotting;

use rng::Rng;
use tollgate_testkit::rng;

/// Random costs and clock steps (backwards too) on a Bucket, mirrored on a plain state.
#[test]
fn bucket_snapshot_matches_the_pure_model() {
    let mut rng = Rng(0x5EED_5A4A);
    for _ in 0..200 {
        let quota = Quota::new(
            1 + rng.below(1_000),
            Duration::from_millis(1 + rng.below(5_000)),
            1 + rng.below(50),
        )
        .unwrap();
        let clock = ManualClock::new();
        let bucket = Bucket::with_clock(quota, clock.clone());
        let mut state = gcra::FULL;
        let mut now = 0u64;
        for _ in 0..200 {
            now = match rng.below(4) {
                0 => now.saturating_sub(rng.below(50_000_000)),
                _ => now + rng.below(200_000_000),
            };
            clock.set(Duration::from_nanos(now));
            let cost = rng.below(quota.burst() + 2);
            let (verdict, snap) = bucket.decide_snapshot(&(), cost);
            let expected = gcra::try_acquire(state, now, &quota, cost);
            assert_eq!(verdict, expected.map(|_| ()));
            if let Ok(Some(next)) = expected {
                state = next;
            }
            assert_eq!(snap, gcra::snapshot(state, now, &quota));
            assert!(snap.remaining() <= quota.burst());
            if let Err(Denied::RetryAfter(d)) = verdict {
                // The wait for `cost` never exceeds the wait until full.
                assert!(d <= snap.until_full(), "{d:?} > {:?}", snap.until_full());
            }
            assert_eq!(
                snap.until_full() == Duration::ZERO,
                snap.remaining() == quota.burst()
            );
        }
    }
}

#[test]
fn snapshot_edges() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap();
    let bucket = Bucket::with_clock(quota, clock.clone());
    // Cost 0 and ExceedsBurst write nothing and report the bucket as it is.
    assert_eq!(
        bucket.decide_snapshot(&(), 0),
        (Ok(()), Snapshot::new(10, Duration::ZERO))
    );
    assert_eq!(
        bucket.decide_snapshot(&(), u64::MAX),
        (Err(Denied::ExceedsBurst), Snapshot::new(10, Duration::ZERO))
    );
    assert_eq!(
        bucket.decide_snapshot(&(), 10),
        (Ok(()), Snapshot::new(0, Duration::from_secs(1)))
    );
    // A debt from a reservation: 0 remaining, full only after the debt is repaid.
    let _kept = bucket.reserve(10).unwrap();
    assert_eq!(
        bucket.decide_snapshot(&(), 1),
        (
            Err(Denied::RetryAfter(Duration::from_millis(1_100))),
            Snapshot::new(0, Duration::from_secs(2))
        )
    );
    // Past the horizon nothing refills: a bucket that is not full never will be.
    clock.set(tollgate::HORIZON + Duration::from_secs(1));
    let late = Bucket::with_initial_tokens(quota, 0, clock.clone()).unwrap();
    assert_eq!(
        late.decide_snapshot(&(), 1).1,
        Snapshot::new(0, Duration::MAX)
    );
}

#[test]
fn sharded_snapshot_pools_the_shards() {
    let clock = ManualClock::new();
    let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock.clone());
    assert_eq!(
        bucket.decide_snapshot(&(), 0),
        (Ok(()), Snapshot::new(8, Duration::ZERO))
    );
    let (verdict, snap) = bucket.decide_snapshot(&(), 8);
    assert_eq!(verdict, Ok(()));
    assert_eq!(snap, Snapshot::new(0, Duration::from_secs(1)));
    clock.advance(Duration::from_millis(500));
    let (verdict, snap) = bucket.decide_snapshot(&(), 5);
    assert!(matches!(verdict, Err(Denied::RetryAfter(_))));
    assert_eq!(snap, Snapshot::new(4, Duration::from_millis(500)));
    assert_eq!(snap.remaining(), bucket.available());
}

#[test]
fn keyed_snapshot_per_key_and_table_full() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<String, _, _> =
        KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 1, clock.clone());
    assert_eq!(
        limiter.decide_snapshot(&"a".to_string(), 4),
        (Ok(()), Snapshot::new(6, Duration::from_millis(400)))
    );
    assert_eq!(
        limiter.decide_snapshot(&"a".to_string(), 7),
        (
            Err(Denied::RetryAfter(Duration::from_millis(100))),
            Snapshot::new(6, Duration::from_millis(400))
        )
    );
    // The table (one key) is full and "a" is not full: a new key is refused untracked.
    let (verdict, snap) = limiter.decide_snapshot(&"b".to_string(), 1);
    let Err(Denied::RetryAfter(wait)) = verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(snap, Snapshot::new(0, wait));
    // An untracked key reads as full.
    assert_eq!(
        limiter.decide_snapshot(&"c".to_string(), 0).1.remaining(),
        10
    );
}

/// `try_acquire_or_snapshot` agrees with `Limiter::decide_snapshots` on every limiter: the same
/// verdicts, and on refusal the same snapshot.
#[test]
fn snapshot_only_on_refusal_matches_the_full_snapshot() {
    let mut rng = Rng(0x0DD5_EED5);
    let quota = Quota::new(7, Duration::from_secs(1), 5).unwrap();
    let (c1, c2) = (ManualClock::new(), ManualClock::new());
    let (a, b) = (
        Bucket::with_clock(quota, c1.clone()),
        Bucket::with_clock(quota, c2.clone()),
    );
    let (sa, sb) = (
        ShardedBucket::with_clock(quota, 3, c1.clone()),
        ShardedBucket::with_clock(quota, 3, c2.clone()),
    );
    // Room for every key: a table-full refusal's wait depends on where the incremental sweep
    // stands, which differs between two tables (each hashes with its own random seed).
    let ka: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(quota, 8, c1.clone());
    let kb: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(quota, 8, c2.clone());
    for _ in 0..5_000 {
        let step = Duration::from_nanos(rng.below(300_000_000));
        c1.advance(step);
        c2.advance(step);
        let cost = rng.below(7);
        let key = rng.below(4) as u8;
        for (fast, full) in [
            (
                a.try_acquire_or_snapshot(cost),
                b.decide_snapshot(&(), cost),
            ),
            (
                sa.try_acquire_or_snapshot(cost),
                sb.decide_snapshot(&(), cost),
            ),
            (
                ka.try_acquire_or_snapshot(&key, cost),
                kb.decide_snapshot(&key, cost),
            ),
        ] {
            match (fast, full) {
                (Ok(()), (Ok(()), _)) => {}
                (Err((d, s)), (Err(e), t)) => assert_eq!((d, s), (e, t)),
                other => panic!("{other:?}"),
            }
        }
    }
}

/// The names deprecated for the `Limiter` trait's still answer as the trait does: the same
/// verdicts, the same snapshots.
#[test]
#[allow(deprecated)]
fn deprecated_names_answer_as_the_trait() {
    use tollgate::{KeyedMultiLimiter, Limiter, Limits, MultiBucket};
    let q = Quota::per_second(10).unwrap();
    let minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
    let limits = Limits::new([q, minute]).unwrap();
    let (a, b) = (ManualClock::new(), ManualClock::new());
    let (x, y) = (
        Bucket::with_clock(q, a.clone()),
        Bucket::with_clock(q, b.clone()),
    );
    assert_eq!(x.try_acquire_snapshot(4), y.decide_snapshot(&(), 4));
    let (x, y) = (
        MultiBucket::with_clock(limits.clone(), a.clone()),
        MultiBucket::with_clock(limits.clone(), b.clone()),
    );
    assert_eq!(x.try_acquire_detailed(4), y.decide(&(), 4));
    assert_eq!(x.try_acquire_snapshot(4), y.decide_snapshot(&(), 4));
    assert_eq!(x.try_acquire_snapshots(11), y.decide_snapshots(&(), 11));
    assert_eq!(x.try_acquire_or_snapshots(3), y.decide_or_snapshots(&(), 3));
    let x = KeyedLimiter::builder(q, 10, a.clone())
        .quota_for(1u8, minute)
        .build()
        .unwrap();
    let y = KeyedLimiter::builder(q, 10, b.clone())
        .override_quota(1u8, minute)
        .build()
        .unwrap();
    assert_eq!(x.try_acquire_snapshot(&1, 15), y.decide_snapshot(&1, 15));
    assert_eq!(x.quota_for(&1), minute);
    let x = KeyedMultiLimiter::builder(limits.clone(), 10, a)
        .limits_for(1u8, Limits::from(q))
        .build()
        .unwrap();
    let y = KeyedMultiLimiter::builder(limits.clone(), 10, b)
        .override_quota(1u8, Limits::from(q))
        .build()
        .unwrap();
    assert_eq!(x.try_acquire_detailed(&2, 5), y.decide(&2, 5));
    assert_eq!(x.try_acquire_snapshots(&2, 5), y.decide_snapshots(&2, 5));
    assert_eq!(
        x.try_acquire_or_snapshots(&2, 20),
        y.decide_or_snapshots(&2, 20)
    );
    assert_eq!(x.limits_for(&1), &Limits::from(q));
}
