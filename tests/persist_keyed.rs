//! Saving and restoring a `KeyedLimiter`: every tracked key comes back as the live limiter has
//! it at the restore's instant, override quotas and the untracked-key floor included; a save
//! racing decisions, insertions and evictions on other threads never restores more tokens than
//! a key had when the save began; damaged input is an error.
#![cfg(all(feature = "persist", feature = "keyed"))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tollgate::persist::RestoreError;
use tollgate::{Clock, KeyedLimiter, ManualClock, Quota};

use rng::Rng;
use tollgate_testkit::rng;
use tollgate_testkit::signal::Signal;

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(ns)
}

fn premium() -> Quota {
    Quota::per_second(100).unwrap().with_burst(20).unwrap()
}

fn build(
    q: Quota,
    max_keys: usize,
    clock: ManualClock,
) -> tollgate::KeyedLimiterBuilder<u64, Quota, ManualClock> {
    KeyedLimiter::builder(q, max_keys, clock)
        .override_quota(7, premium())
        .override_quota(8, premium())
}

/// Random decisions over 3,000 keys (evictions included, through a small table), saved, then
/// restored at several later instants: every key's availability and next decision equal the
/// live limiter's.
#[test]
fn every_key_comes_back_as_the_live_limiter_has_it() {
    let q = Quota::per_second(10).unwrap();
    let mut rng = Rng(0xfeed_0000_1111_2222);
    for round in 0..6 {
        let clock = ManualClock::new();
        let live = build(q, 1000, clock.clone()).build().unwrap();
        for _ in 0..20_000 {
            if rng.below(50) == 0 {
                clock.advance(Duration::from_millis(rng.below(200)));
            }
            let _ = live.try_acquire(&rng.below(3000), 1 + rng.below(12));
        }
        let t0 = clock.now();
        let mut file = Vec::new();
        live.save_at(&mut file, wall(t0)).unwrap();
        let gap = [0, 1, 150_000_000, 900_000_000, 5_000_000_000][round % 5];
        clock.advance(Duration::from_nanos(gap));
        let clock2 = ManualClock::new();
        clock2.set(Duration::from_secs(rng.below(1000)));
        let restored = build(q, 1000, clock2.clone())
            .restore_at(&file[..], wall(t0 + gap))
            .unwrap();
        assert!(restored.len() <= live.len());
        for step in 0..3 {
            for k in 0..3000 {
                assert_eq!(
                    restored.available(&k),
                    live.available(&k),
                    "round {round} key {k}"
                );
            }
            for k in (0..3000).step_by(7) {
                let cost = 1 + rng.below(3);
                assert_eq!(
                    restored.try_acquire(&k, cost),
                    live.try_acquire(&k, cost),
                    "key {k}"
                );
            }
            let d = Duration::from_millis(100 * step);
            clock.advance(d);
            clock2.advance(d);
        }
    }
}

/// The floor travels: a drained limiter saved and restored still refuses new keys until it
/// has refilled; a restore into a table too small to hold every entry holds no key more
/// lenient than saved.
#[test]
fn the_floor_travels_and_a_small_table_holds_no_key_more_leniently() {
    let q = Quota::per_second(10).unwrap();
    let clock = ManualClock::new();
    let live = build(q, 100, clock.clone()).build().unwrap();
    live.drain();
    assert_eq!(live.available(&1), 0);
    for k in 0..50 {
        clock.advance(Duration::from_millis(20));
        let _ = live.try_acquire(&k, 1);
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let restored = build(q, 100, ManualClock::new())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    clock.advance(Duration::from_millis(300));
    for k in [1000u64, 7, 3, 49] {
        assert_eq!(restored.available(&k), live.available(&k), "key {k}");
    }
    // Into a table of 3 keys: the entries that do not fit raise the floor instead.
    let small = build(q, 3, clock.clone())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    assert!(small.len() <= 3);
    for k in 0..60 {
        assert!(small.available(&k) <= live.available(&k), "key {k}");
    }
}

/// An entry saved under another quota (the default changed, an override added) is carried
/// over as `set_quota` carries a bucket: the balance, capped at the new burst.
#[test]
fn entries_saved_under_another_quota_are_converted() {
    let clock = ManualClock::new();
    let live = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 100, clock.clone());
    live.try_acquire(&1u64, 4).unwrap();
    live.try_acquire(&2u64, 10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let restored = KeyedLimiter::builder(Quota::per_second(100).unwrap(), 100, ManualClock::new())
        .override_quota(2, Quota::per_second(1).unwrap().with_burst(3).unwrap())
        .restore_at(&file[..], wall(0))
        .unwrap();
    assert_eq!(restored.available(&1), 6);
    assert_eq!(restored.available(&2), 0);
    assert_eq!(restored.available(&3), 100);
}

/// Every truncation of a saved table and every flipped byte is an error, never a panic.
#[test]
fn damaged_keyed_input_is_an_error() {
    let q = Quota::per_second(10).unwrap();
    let live = build(q, 100, ManualClock::new()).build().unwrap();
    for k in 0..40 {
        live.try_acquire(&k, 3).unwrap();
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    for len in 0..file.len() {
        let r = build(q, 100, ManualClock::new()).restore_at(&file[..len], wall(0));
        assert!(matches!(r, Err(RestoreError::Truncated)), "{len}");
    }
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..2000 {
        let mut bad = file.clone();
        let i = rng.below(bad.len() as u64) as usize;
        bad[i] ^= 1 << rng.below(8);
        assert!(build(q, 100, ManualClock::new())
            .restore_at(&bad[..], wall(0))
            .is_err());
    }
}

/// A save on one thread while four others admit, insert new keys (the table grows through
/// migrations and, once full, evicts full buckets) and the clock moves: restored at the save's
/// own instant, no key holds more tokens than it had when the save began.
#[test]
fn a_save_racing_decisions_never_restores_more_tokens() {
    let q = Quota::per_second(50).unwrap().with_burst(40).unwrap();
    for round in 0..4u64 {
        let clock = ManualClock::new();
        let live = Arc::new(KeyedLimiter::with_clock(q, 20_000, clock.clone()));
        let mut rng = Rng(0xabcd_ef01_2345_6789 + round);
        for k in 0..15_000u64 {
            let _ = live.try_acquire(&k, 1 + rng.below(40));
        }
        let before: Vec<u64> = (0..40_000u64).map(|k| live.available(&k)).collect();
        let t0 = clock.now();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (live, clock, stop) = (live.clone(), clock.clone(), stop.clone());
                let started = started.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x1111 + t * 7919 + round);
                    while !stop.load(Ordering::Relaxed) {
                        let _ = live.try_acquire(&rng.below(40_000), 1 + rng.below(5));
                        // The clock moves only once the save has read it (its first write).
                        if t == 0 && started.load(Ordering::Relaxed) && rng.below(64) == 0 {
                            clock.advance(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        let mut file = Signal(Vec::new(), started.clone());
        live.save_at(&mut file, wall(t0)).unwrap();
        let file = file.0;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let clock2 = ManualClock::new();
        let restored = KeyedLimiter::<u64, _, _>::builder(q, 20_000, clock2)
            .restore_at(&file[..], wall(t0))
            .unwrap();
        for (k, &had) in before.iter().enumerate() {
            let got = restored.available(&(k as u64));
            assert!(got <= had, "round {round} key {k}: {got} > {had}");
        }
    }
}

/// A keyed limiter restored in place finds the saved keys only under the seed they were saved
/// with (a limiter the builder restored from the file): then it keeps the stricter state of
/// each. Under another seed it cannot find them, and every untracked key starts as strictly as
/// the strictest saved one until that one would be full: never more than a key had.
#[test]
fn a_restore_in_place_never_hands_out_more() {
    let q = Quota::per_second(10).unwrap();
    let saved = KeyedLimiter::with_clock(q, 100, ManualClock::new());
    saved.try_acquire(&"alice", 10).unwrap();
    let mut file = Vec::new();
    saved.save_at(&mut file, wall(0)).unwrap();

    let other: KeyedLimiter<&str, Quota, _> = KeyedLimiter::with_clock(q, 100, ManualClock::new());
    other.restore_at(&file[..], wall(0)).unwrap();
    assert!(other.is_empty());
    assert_eq!((other.available(&"alice"), other.available(&"bob")), (0, 0));
    other.clock().advance(Duration::from_millis(500));
    assert_eq!(other.available(&"bob"), 5);

    let same = KeyedLimiter::<&str, Quota, _>::builder(q, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    // Again, half a second later on the wall clock: alice's 5 restored tokens are not added
    // to the 0 she holds, and bob, untracked, is untouched.
    same.restore_at(&file[..], wall(500_000_000)).unwrap();
    assert_eq!((same.available(&"alice"), same.available(&"bob")), (0, 10));
    assert_eq!(same.len(), 1);
}
