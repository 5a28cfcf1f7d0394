//! Saving and restoring `Bucket`, `ShardedBucket`, `Smooth` and `MultiBucket`: a restore at any
//! later instant equals the live bucket then (never more tokens), downtime refills at most a
//! burst, a wall clock that stepped back refills nothing, and damaged input is an error that
//! changes nothing.
#![cfg(feature = "persist")]

use proptest::prelude::*;
use std::time::{Duration, SystemTime};
use tollgate::persist::{RestoreError, FUTURE_TOLERANCE};
use tollgate::{
    Bucket, Denied, Limiter, Limits, ManualClock, MultiBucket, Quota, ShardedBucket, Smooth,
};

use rng::Rng;
use tollgate_testkit::rng;

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(ns)
}

fn saved(b: &Bucket<ManualClock>, at: SystemTime) -> Vec<u8> {
    let mut file = Vec::new();
    b.save_at(&mut file, at).unwrap();
    file
}

/// A live bucket after some decisions, saved at `t0`; then, `gap` later on both clocks, the
/// live bucket and one restored into a new process (another clock origin) make the same
/// decisions. Exact quotas: equal, decision for decision; any quota: never more tokens.
fn check_restore_equals_live(
    q: Quota,
    ops: &[(u64, u64)],
    gap: u64,
    origin: u64,
    later: &[(u64, u64)],
) {
    let clock = ManualClock::new();
    let live = Bucket::with_clock(q, clock.clone());
    for &(advance, cost) in ops {
        clock.advance(Duration::from_nanos(advance));
        let _ = live.try_acquire(cost);
    }
    let t0 = clock.now_ns();
    let file = saved(&live, wall(t0));
    clock.advance(Duration::from_nanos(gap));
    let clock2 = ManualClock::new();
    clock2.set(Duration::from_nanos(origin));
    let restored = Bucket::with_clock(q, clock2.clone());
    restored.restore_at(&file[..], wall(t0 + gap)).unwrap();
    for &(advance, cost) in later {
        if q.is_exact() {
            assert_eq!(restored.available(), live.available(), "{q:?}");
            assert_eq!(restored.try_acquire(cost), live.try_acquire(cost), "{q:?}");
        } else {
            // Both take the same: the restored bucket admits only what the live one admits.
            assert!(restored.available() <= live.available(), "{q:?}");
            if restored.try_acquire(cost).is_ok() {
                assert_eq!(live.try_acquire(cost), Ok(()), "{q:?}");
            }
        }
        clock.advance(Duration::from_nanos(advance));
        clock2.advance(Duration::from_nanos(advance));
    }
}

trait NowNs {
    fn now_ns(&self) -> u64;
}
impl NowNs for ManualClock {
    fn now_ns(&self) -> u64 {
        tollgate::Clock::now(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Exact quotas (n per second with n dividing 10^9, n per hour): decision for decision.
    #[test]
    fn a_restore_at_any_later_instant_equals_the_live_bucket(
        rate in prop::sample::select(vec![1u64, 2, 10, 1000, 1_000_000]),
        burst in 1u64..50,
        ops in prop::collection::vec((0u64..2_000_000_000, 0u64..60), 0..30),
        // Up to 50 years: past the 100-year horizon the live clock reads as stopped.
        gap in prop_oneof![0u64..10, 0u64..3_000_000_000, 0u64..1_500_000_000_000_000_000],
        origin in 0u64..1_000_000_000_000,
        later in prop::collection::vec((0u64..500_000_000, 0u64..60), 1..20),
    ) {
        let q = Quota::per_second(rate).unwrap().with_burst(burst).unwrap();
        check_restore_equals_live(q, &ops, gap, origin, &later);
        let hourly = Quota::new(rate, Duration::from_secs(3600), burst).unwrap();
        check_restore_equals_live(hourly, &ops, gap, origin, &later);
    }

    /// Inexact quotas: never more tokens than the live bucket, at any later instant.
    #[test]
    fn a_restore_of_an_inexact_quota_never_holds_more(
        rate in prop::sample::select(vec![3u64, 7, 999_999_937]),
        burst in 1u64..50,
        ops in prop::collection::vec((0u64..2_000_000_000, 0u64..60), 0..30),
        gap in 0u64..5_000_000_000,
        origin in 0u64..1_000_000_000_000,
        later in prop::collection::vec((0u64..500_000_000, 0u64..60), 1..20),
    ) {
        let q = Quota::per_second(rate).unwrap().with_burst(burst).unwrap();
        prop_assume!(!q.is_exact());
        check_restore_equals_live(q, &ops, gap, origin, &later);
    }
}

/// A long stop refills at most the burst; a debt taken with reservations carries over.
#[test]
fn downtime_refills_at_most_the_burst_and_a_debt_carries_over() {
    let q = Quota::per_second(10).unwrap();
    let clock = ManualClock::new();
    let b = Bucket::with_clock(q, clock.clone());
    b.try_acquire(10).unwrap();
    let file = saved(&b, wall(0));
    let r = Bucket::with_clock(q, ManualClock::new());
    r.restore_at(&file[..], wall(3_600_000_000_000)).unwrap();
    assert_eq!(r.available(), 10);
    // Two bursts reserved ahead: 10 more tokens owed, due in a second.
    let b = Bucket::with_clock(q, clock.clone());
    b.try_acquire(10).unwrap();
    let _kept = b.reserve(10).unwrap(); // a reservation dropped is kept
    let file = saved(&b, wall(0));
    let r = Bucket::with_clock(q, ManualClock::new());
    r.restore_at(&file[..], wall(500_000_000)).unwrap();
    assert_eq!(
        r.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_millis(600)))
    );
}

/// A wall clock that stepped back across the restart refills nothing (within the tolerance);
/// further back the file is refused.
#[test]
fn a_wall_clock_stepped_back_refills_nothing() {
    let q = Quota::new(1, Duration::from_secs(3600), 5).unwrap();
    let b = Bucket::with_clock(q, ManualClock::new());
    b.try_acquire(5).unwrap();
    let t = wall(10_000_000_000_000);
    let file = saved(&b, t);
    for back in [
        Duration::from_nanos(1),
        Duration::from_secs(1),
        FUTURE_TOLERANCE,
    ] {
        let r = Bucket::with_clock(q, ManualClock::new());
        r.restore_at(&file[..], t - back).unwrap();
        assert_eq!(
            r.try_acquire(1),
            Err(Denied::RetryAfter(Duration::from_secs(3600)))
        );
    }
    let r = Bucket::with_clock(q, ManualClock::new());
    let back = FUTURE_TOLERANCE + Duration::from_nanos(1);
    match r.restore_at(&file[..], t - back) {
        Err(RestoreError::FromTheFuture { ahead }) => assert_eq!(ahead, back),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.available(), 5, "a failed restore changes nothing");
    // Before 1970 the wall clock cannot anchor a save.
    assert!(b
        .save_at(Vec::new(), SystemTime::UNIX_EPOCH - Duration::from_secs(1))
        .is_err());
}

/// A state saved under another quota is carried over as `set_quota` carries it.
#[test]
fn another_quota_is_carried_over_as_set_quota_carries_it() {
    let old = Quota::per_second(10).unwrap();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let news = [
        Quota::per_second(100).unwrap(),
        Quota::per_second(2).unwrap(),
        Quota::per_second(3).unwrap().with_burst(40).unwrap(),
        Quota::new(1, Duration::from_secs(3600), 1).unwrap(),
    ];
    for new in news {
        for _ in 0..50 {
            let clock = ManualClock::new();
            let live = Bucket::with_clock(old, clock.clone());
            for _ in 0..rng.below(5) {
                clock.advance(Duration::from_millis(rng.below(300)));
                let _ = live.try_acquire(rng.below(11));
            }
            if rng.below(2) == 0 {
                let _ = live.reserve(rng.below(11)); // kept
            }
            let file = saved(&live, wall(0));
            live.set_quota(new);
            let r = Bucket::with_clock(new, clock.clone());
            r.restore_at(&file[..], wall(0)).unwrap();
            for _ in 0..5 {
                assert_eq!(r.available(), live.available(), "{new:?}");
                assert_eq!(r.try_acquire(1), live.try_acquire(1), "{new:?}");
                clock.advance(Duration::from_millis(rng.below(400)));
            }
        }
    }
}

/// Restoring into a live bucket keeps the stricter state: never more tokens than it had.
#[test]
fn a_restore_never_adds_tokens_to_a_live_bucket() {
    let q = Quota::per_second(10).unwrap();
    let full = Bucket::with_clock(q, ManualClock::new());
    let file = saved(&full, wall(0));
    let b = Bucket::with_clock(q, ManualClock::new());
    b.try_acquire(7).unwrap();
    b.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(b.available(), 3);
    b.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(b.available(), 3);
}

/// Every truncation and every single-byte corruption of a saved state is an error that
/// changes nothing; foreign input, another limiter's file and a future version are named.
#[test]
fn damaged_input_is_an_error_and_changes_nothing() {
    let q = Quota::per_second(10).unwrap();
    let b = Bucket::with_clock(q, ManualClock::new());
    b.try_acquire(10).unwrap();
    let file = saved(&b, wall(0));
    let fresh = || Bucket::with_clock(q, ManualClock::new());
    for len in 0..file.len() {
        let r = fresh();
        let err = r.restore_at(&file[..len], wall(0)).unwrap_err();
        assert!(matches!(err, RestoreError::Truncated), "{len}: {err:?}");
        assert_eq!(r.available(), 10);
    }
    for i in 0..file.len() {
        for bit in 0..8 {
            let mut bad = file.clone();
            bad[i] ^= 1 << bit;
            let r = fresh();
            assert!(
                r.restore_at(&bad[..], wall(0)).is_err(),
                "byte {i} bit {bit}"
            );
            assert_eq!(r.available(), 10);
        }
    }
    assert!(matches!(
        fresh().restore(&b"GIF89a..."[..]),
        Err(RestoreError::NotAState)
    ));
    // This build reads only its own version: any other, lower or higher, is refused whole.
    for v in [2, 4] {
        let mut other = file.clone();
        other[8] = v;
        assert!(matches!(
            fresh().restore(&other[..]),
            Err(RestoreError::UnsupportedVersion(n)) if n == u16::from(v)
        ));
    }
    let sharded = ShardedBucket::with_clock(q, 2, ManualClock::new());
    let mut other = Vec::new();
    sharded.save_at(&mut other, wall(0)).unwrap();
    match fresh().restore(&other[..]) {
        Err(e @ RestoreError::WrongLimiter { .. }) => {
            assert_eq!(
                e.to_string(),
                "the saved state is a ShardedBucket, not a Bucket"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// A sharded bucket restores the tokens all shards held plus the downtime's refill, with any
/// shard count, never more.
#[test]
fn a_sharded_bucket_restores_its_total_with_any_shard_count() {
    let q = Quota::per_second(8).unwrap();
    for (from, to) in [(1, 4), (4, 4), (4, 2), (8, 3)] {
        let b = ShardedBucket::with_clock(q, from, ManualClock::new());
        b.try_acquire(8).unwrap();
        let mut file = Vec::new();
        b.save_at(&mut file, wall(0)).unwrap();
        let r = ShardedBucket::with_clock(q, to, ManualClock::new());
        r.restore_at(&file[..], wall(0)).unwrap();
        assert_eq!(r.available(), 0, "{from} -> {to}");
        assert!(r.try_acquire(1).is_err());
        let r = ShardedBucket::with_clock(q, to, ManualClock::new());
        r.restore_at(&file[..], wall(500_000_000)).unwrap();
        assert_eq!(r.available(), 4, "{from} -> {to}");
        assert_eq!(r.try_acquire(4), Ok(()));
        assert!(r.try_acquire(1).is_err());
        let r = ShardedBucket::with_clock(q, to, ManualClock::new());
        r.restore_at(&file[..], wall(60_000_000_000)).unwrap();
        assert_eq!(r.available(), 8);
    }
    let r = ShardedBucket::with_clock(q, 4, ManualClock::new());
    r.drain();
    assert_eq!(r.available(), 0);
}

/// Tokens leased out to a shard count as spent in the saved state: the restored bucket holds
/// what the central word held, never the shard's unspent lease on top.
#[test]
fn a_sharded_bucket_saves_leased_tokens_as_spent() {
    let q = Quota::per_second(1_000).unwrap();
    let b = ShardedBucket::with_clock(q, 2, ManualClock::new());
    b.try_acquire(1).unwrap();
    let mut file = Vec::new();
    b.save_at(&mut file, wall(0)).unwrap();
    let r = ShardedBucket::with_clock(q, 2, ManualClock::new());
    r.restore_at(&file[..], wall(0)).unwrap();
    let held = r.available();
    assert!(
        held < 999,
        "a lease was taken, so the central word holds less than 999: {held}"
    );
    assert_eq!(r.try_acquire(held), Ok(()));
    assert!(r.try_acquire(1).is_err());
}

/// A restore into a sharded bucket in use empties the leases its shards hold: a drained file
/// leaves nothing to admit, whatever a shard took from the central word before the restore
/// (a lease kept would hand out tokens the saved bucket never held).
#[test]
fn a_restore_into_a_sharded_bucket_in_use_empties_its_leases() {
    let q = Quota::per_second(1_000).unwrap();
    for shards in [1, 2, 4] {
        let drained = ShardedBucket::with_clock(q, shards, ManualClock::new());
        drained.drain();
        let mut file = Vec::new();
        drained.save_at(&mut file, wall(0)).unwrap();
        let live = ShardedBucket::with_clock(q, shards, ManualClock::new());
        live.try_acquire(1).unwrap(); // the calling thread's shard takes a lease
        live.restore_at(&file[..], wall(0)).unwrap();
        assert_eq!(live.available(), 0, "{shards} shards");
        assert!(
            live.try_acquire(1).is_err(),
            "{shards} shards: a lease kept"
        );
    }
}

/// A bursty `Smooth` restored later waits as the live one does (Guava's arithmetic carried
/// through the downtime), to the microsecond.
#[test]
fn a_smooth_limiter_restored_later_waits_as_the_live_one() {
    let mut rng = Rng(0x0bad_cafe_1234_5678);
    for _ in 0..200 {
        let rate = [0.5, 1.0, 5.0, 100.0][rng.below(4) as usize];
        let clock = ManualClock::new();
        let live = Smooth::bursty_with_clock(rate, Duration::from_secs(2), clock.clone()).unwrap();
        for _ in 0..rng.below(6) {
            clock.advance(Duration::from_millis(rng.below(3000)));
            live.acquire(rng.below(4));
        }
        let t0 = clock.now_ns();
        let mut file = Vec::new();
        live.save_at(&mut file, wall(t0)).unwrap();
        let gap = rng.below(5_000_000_000);
        clock.advance(Duration::from_nanos(gap));
        let clock2 = ManualClock::new();
        let r = Smooth::bursty_with_clock(rate, Duration::from_secs(2), clock2.clone()).unwrap();
        r.restore_at(&file[..], wall(t0 + gap)).unwrap();
        for _ in 0..5 {
            let permits = rng.below(3);
            let (a, b) = (live.acquire(permits), r.acquire(permits));
            let diff = a.as_micros().abs_diff(b.as_micros());
            assert!(
                diff <= 1 && b + Duration::from_micros(1) >= a,
                "{a:?} {b:?}"
            );
            let d = Duration::from_millis(rng.below(1000));
            clock.advance(d);
            clock2.advance(d);
        }
    }
    let r = Smooth::bursty_with_clock(1.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    assert!(matches!(
        r.restore(&b"TOLLGATE\x03\x00"[..]),
        Err(RestoreError::Truncated)
    ));
}

/// Every permit a bursty `Smooth` admits at once, one at a time.
fn drain_now(s: &Smooth<ManualClock>) -> u64 {
    let mut n = 0;
    while s.try_acquire(1, Duration::ZERO) {
        n += 1;
        assert!(n < 10_000);
    }
    n
}

/// The same file restored three times (a retried restore, a supervisor restoring twice) hands
/// its stored permits out once: over 2 s at 1 permit/s with 10 s of burst, at most the rate,
/// the burst and the one permit taken ahead (11 in all, not 11 per restore).
#[test]
fn a_smooth_limiter_restored_twice_hands_out_its_permits_once() {
    let burst = Duration::from_secs(10);
    let old_clock = ManualClock::new();
    let old = Smooth::bursty_with_clock(1.0, burst, old_clock.clone()).unwrap();
    old_clock.advance(Duration::from_secs(60));
    let mut file = Vec::new();
    old.save_at(&mut file, wall(0)).unwrap();
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1000));
    let new = Smooth::bursty_with_clock(1.0, burst, clock.clone()).unwrap();
    new.restore_at(&file[..], wall(0)).unwrap();
    let first = drain_now(&new);
    assert_eq!(first, 11, "the saved burst, carried over, and one ahead");
    new.restore_at(&file[..], wall(0)).unwrap();
    clock.advance(Duration::from_secs(1));
    let second = drain_now(&new);
    new.restore_at(&file[..], wall(0)).unwrap();
    clock.advance(Duration::from_secs(1));
    let third = drain_now(&new);
    assert!(first + second + third <= 13, "{first} + {second} + {third}");
}

/// An older file restored into the limiter it was saved from, in use since, refills nothing;
/// nor does a hot (warm) file make a warming-up limiter in use any warmer.
#[test]
fn an_old_file_restored_into_a_smooth_limiter_in_use_refills_nothing() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(100));
    let live = Smooth::bursty_with_clock(1.0, Duration::from_secs(10), clock.clone()).unwrap();
    clock.advance(Duration::from_secs(60));
    assert!(live.try_acquire(1, Duration::ZERO));
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let before = 1 + drain_now(&live);
    live.restore_at(&file[..], wall(0)).unwrap();
    clock.advance(Duration::from_secs(1));
    let after = drain_now(&live);
    assert!(before + after <= 12, "{before} + {after}");

    // Warming up: 10/s, 2 s of warm-up, cold factor 3. A hot limiter's file (stored 0), into
    // a cold one that has taken a permit: it stays as cold, so its next permit waits as long.
    let hot_clock = ManualClock::new();
    let hot = Smooth::warming_up_with_clock(10.0, Duration::from_secs(2), 3.0, hot_clock.clone())
        .unwrap();
    for _ in 0..200 {
        hot.acquire(1);
    }
    let mut hot_file = Vec::new();
    hot.save_at(&mut hot_file, wall(0)).unwrap();
    let [a, b] = [0, 1].map(|_| {
        let c = ManualClock::new();
        let l =
            Smooth::warming_up_with_clock(10.0, Duration::from_secs(2), 3.0, c.clone()).unwrap();
        l.acquire(1);
        l
    });
    b.restore_at(&hot_file[..], wall(0)).unwrap();
    assert_eq!(b.acquire(1), a.acquire(1), "as cold as before the restore");
}

/// A file saved by a `Smooth` of the other mode (bursty or warming up) carries its queue but
/// not its stored permits, which mean the opposite there (a burst to hand out, or how cold the
/// limiter is): the restoring limiter keeps its own mode's strictest.
#[test]
fn a_smooth_file_of_the_other_mode_carries_no_stored_permits() {
    // A fresh warming-up limiter is cold (its stored permits at their maximum): into a fresh
    // bursty one they would be a full burst (10 permits) at once.
    let cold = Smooth::warming_up_with_clock(10.0, Duration::from_secs(2), 3.0, ManualClock::new())
        .unwrap();
    let mut cold_file = Vec::new();
    cold.save_at(&mut cold_file, wall(0)).unwrap();
    let [fresh, restored] = [0, 1].map(|_| {
        Smooth::bursty_with_clock(10.0, Duration::from_secs(1), ManualClock::new()).unwrap()
    });
    restored.restore_at(&cold_file[..], wall(0)).unwrap();
    assert_eq!(
        drain_now(&restored),
        drain_now(&fresh),
        "no burst from a cold file"
    );

    // A bursty limiter that spent its burst has no stored permits: into a fresh warming-up
    // one that would make it hot at once.
    let clock = ManualClock::new();
    let spent = Smooth::bursty_with_clock(10.0, Duration::from_secs(1), clock.clone()).unwrap();
    clock.advance(Duration::from_secs(5));
    drain_now(&spent);
    let mut spent_file = Vec::new();
    spent.save_at(&mut spent_file, wall(0)).unwrap();
    let [a, b] = [0, 1].map(|_| {
        Smooth::warming_up_with_clock(10.0, Duration::from_secs(2), 3.0, ManualClock::new())
            .unwrap()
    });
    b.restore_at(&spent_file[..], wall(0)).unwrap();
    // The saved queue (one permit ahead) is kept; the limiter stays as cold as built.
    let (wait_a, wait_b) = (a.acquire(1), b.acquire(1));
    assert!(wait_b >= wait_a, "{wait_b:?} < {wait_a:?}");
    assert_eq!(b.acquire(1), a.acquire(1), "as cold as built");
}

/// The whole tokens each quota of a multi-quota bucket holds now.
fn balances(b: &MultiBucket<ManualClock>) -> Vec<u64> {
    let (verdict, snapshots) = Limiter::decide_snapshots(b, &(), 0);
    assert!(verdict.is_ok());
    snapshots.as_slice().iter().map(|s| s.remaining()).collect()
}

/// A saved quota's state goes to the restoring quota equal to it, else to one of the same
/// period, whatever their order: a policy reordered across a restart (and one of its quotas
/// changed) holds each window's spend where it was. Quotas left over, whose pairing cannot be
/// told, each take the strictest of the saved states left over.
#[test]
fn a_multi_bucket_pairs_saved_quotas_by_value_then_period_not_position() {
    let second = Quota::per_second(10).unwrap();
    let minute = Quota::new(100, Duration::from_secs(60), 100).unwrap();
    let clock = ManualClock::new();
    let live = MultiBucket::with_clock(Limits::new([second, minute]).unwrap(), clock.clone());
    // Drained every second until the minute's quota binds; a second later the per-second
    // quota is full again and the minute's holds a token.
    for _ in 0..12 {
        drain_multi(&live);
        clock.advance(Duration::from_secs(1));
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let spent = balances(&live);
    assert_eq!(spent, [10, 2]);

    // Reordered: each quota keeps its own balance, and the next minute admits as the live
    // bucket would (by position, the minute's quota took the second's 10: 8 more admitted).
    let (c, rc) = (ManualClock::new(), clock.clone());
    let reordered = MultiBucket::with_clock(Limits::new([minute, second]).unwrap(), c.clone());
    reordered.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(balances(&reordered), [spent[1], spent[0]]);
    let (mut a, mut b) = (0, 0);
    for _ in 0..60 {
        a += drain_multi(&live);
        b += drain_multi(&reordered);
        rc.advance(Duration::from_secs(1));
        c.advance(Duration::from_secs(1));
    }
    assert_eq!(a, b, "a minute after the restore");

    // Reordered and the per-second quota changed: paired by its period.
    let faster = Quota::per_second(20).unwrap();
    let changed =
        MultiBucket::with_clock(Limits::new([minute, faster]).unwrap(), ManualClock::new());
    changed.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(balances(&changed), [spent[1], 10], "the second's 10 kept");

    // Both changed, periods too: which became which cannot be told; each takes the stricter.
    let hour = Quota::new(1000, Duration::from_secs(3600), 1000).unwrap();
    let two_s = Quota::new(30, Duration::from_secs(2), 30).unwrap();
    let both = MultiBucket::with_clock(Limits::new([hour, two_s]).unwrap(), ManualClock::new());
    both.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(balances(&both), [spent[1], spent[1]]);
}

/// Two saved quotas of one period, both changed and reordered: which became which cannot be
/// told by the period, so each takes the strictest of the states they convert to, never the
/// other quota's full balance (paired in order, the burst-10 quota would take the big one's).
#[test]
fn two_changed_quotas_of_one_period_take_the_strictest() {
    let small = Quota::per_second(10).unwrap();
    let big = Quota::new(100, Duration::from_secs(1), 1_000).unwrap();
    let live = MultiBucket::with_clock(Limits::new([small, big]).unwrap(), ManualClock::new());
    live.try_acquire(10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let (small2, big2) = (
        Quota::new(20, Duration::from_secs(1), 10).unwrap(),
        Quota::new(100, Duration::from_secs(1), 2_000).unwrap(),
    );
    let clock = ManualClock::new();
    let restored = MultiBucket::with_clock(Limits::new([big2, small2]).unwrap(), clock.clone());
    restored.restore_at(&file[..], wall(0)).unwrap();
    // The burst-10 quota was empty: at 20/s it holds 1 token 50 ms later, whichever it became.
    clock.advance(Duration::from_millis(50));
    assert_eq!(drain_multi(&restored), 1);
}

/// Every token a multi-quota bucket admits now, one at a time.
fn drain_multi(b: &MultiBucket<ManualClock>) -> u64 {
    let mut n = 0;
    while b.try_acquire(1).is_ok() {
        n += 1;
        assert!(n < 100_000);
    }
    n
}

/// A multi-quota bucket restores every quota; another number of quotas is refused.
#[test]
fn a_multi_bucket_restores_every_quota() {
    let limits = Limits::new([
        Quota::per_second(10).unwrap(),
        Quota::new(20, Duration::from_secs(60), 20).unwrap(),
        Quota::new(30, Duration::from_secs(3600), 30).unwrap(),
    ])
    .unwrap();
    let clock = ManualClock::new();
    let live = MultiBucket::with_clock(limits.clone(), clock.clone());
    live.try_acquire(10).unwrap();
    clock.advance(Duration::from_secs(1));
    live.try_acquire(10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    clock.advance(Duration::from_secs(3));
    let r = MultiBucket::with_clock(limits, ManualClock::new());
    r.restore_at(&file[..], wall(3_000_000_000)).unwrap();
    // The minute quota binds: 1 token refilled in 3 s.
    assert_eq!(r.available(), live.available());
    assert_eq!(r.available(), 1);
    let two = MultiBucket::with_clock(
        Limits::new([
            Quota::per_second(10).unwrap(),
            Quota::per_second(20).unwrap(),
        ])
        .unwrap(),
        ManualClock::new(),
    );
    assert!(matches!(
        two.restore_at(&file[..], wall(0)),
        Err(RestoreError::LimitsChanged {
            saved: 3,
            restoring: 2
        })
    ));
}

/// A save whose reading is behind the state it saves (a clock stepped back, or a decision at a
/// later reading racing the save): the bucket is in debt at that reading, and the debt must
/// travel, as a `Bucket`'s does, or the restored bucket holds what the debt withheld (a whole
/// burst here, where the saved bucket holds nothing at the restore's instant).
#[test]
fn a_sharded_bucket_saved_at_a_reading_behind_its_state_carries_the_debt() {
    let q = Quota::per_second(10).unwrap();
    let clock = ManualClock::new();
    let live = ShardedBucket::with_clock(q, 1, clock.clone());
    let twin = Bucket::with_clock(q, clock.clone());
    clock.set(Duration::from_secs(10));
    live.try_acquire(10).unwrap();
    twin.try_acquire(10).unwrap();
    // Saved at 9 s: 10 tokens owed there.
    clock.set(Duration::from_secs(9));
    let (mut file, mut twin_file) = (Vec::new(), Vec::new());
    live.save_at(&mut file, wall(0)).unwrap();
    twin.save_at(&mut twin_file, wall(0)).unwrap();
    // One second of downtime: the saved buckets, at 10 s, hold nothing.
    clock.set(Duration::from_secs(10));
    assert_eq!((live.available(), twin.available()), (0, 0));
    let restored_twin = Bucket::with_clock(q, ManualClock::new());
    restored_twin
        .restore_at(&twin_file[..], wall(1_000_000_000))
        .unwrap();
    assert_eq!(restored_twin.available(), 0);
    let restored = ShardedBucket::with_clock(q, 1, ManualClock::new());
    restored.restore_at(&file[..], wall(1_000_000_000)).unwrap();
    assert_eq!(restored.available(), 0);
}
