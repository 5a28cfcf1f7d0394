//! Saving and restoring a `KeyedMultiLimiter`: every tracked key comes back with every quota as
//! the live limiter has it at the restore's instant (override policies and the untracked-key
//! floor included), so a restart keeps a per-day quota's spend; a save racing decisions,
//! insertions and evictions never restores more tokens to any quota of any key than it had when
//! the save began; a changed quota count is refused; damaged input is an error.
#![cfg(all(feature = "persist", feature = "keyed"))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tollgate::persist::RestoreError;
use tollgate::Limiter;
use tollgate::{Clock, KeyedMultiLimiter, KeyedMultiLimiterBuilder, Limits, ManualClock, Quota};

use rng::Rng;
use tollgate_testkit::rng;
use tollgate_testkit::signal::Signal;

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(ns)
}

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

/// 10 per second, 40 per 10 s.
fn default_limits() -> Limits {
    Limits::new([q(10, 1000, 10), q(40, 10_000, 40)]).unwrap()
}

/// Key 7: three quotas.
fn premium() -> Limits {
    Limits::new([q(100, 1000, 20), q(200, 10_000, 200), q(3, 1000, 30)]).unwrap()
}

fn build(max_keys: usize, clock: ManualClock) -> KeyedMultiLimiterBuilder<u64, ManualClock> {
    KeyedMultiLimiter::builder(default_limits(), max_keys, clock).override_quota(7, premium())
}

/// Every quota's whole tokens for key `k`.
fn quotas_of(l: &KeyedMultiLimiter<u64, ManualClock>, k: u64) -> Vec<u64> {
    let (_, s) = l.decide_snapshots(&k, 0);
    s.as_slice().iter().map(|s| s.remaining()).collect()
}

#[test]
fn every_key_comes_back_with_every_quota_as_the_live_limiter_has_it() {
    let mut rng = Rng(0xfeed_0000_3333_4444);
    for round in 0..5 {
        let clock = ManualClock::new();
        let live = build(1000, clock.clone()).build().unwrap();
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
        let restored = build(1000, clock2.clone())
            .restore_at(&file[..], wall(t0 + gap))
            .unwrap();
        assert!(restored.len() <= live.len());
        for step in 0..3 {
            for k in 0..3000 {
                assert_eq!(
                    quotas_of(&restored, k),
                    quotas_of(&live, k),
                    "round {round} key {k}"
                );
            }
            for k in (0..3000).step_by(7) {
                let cost = 1 + rng.below(3);
                assert_eq!(restored.decide(&k, cost), live.decide(&k, cost), "key {k}");
            }
            let d = Duration::from_millis(100 * step);
            clock.advance(d);
            clock2.advance(d);
        }
    }
}

/// The case persistence exists for: a per-day quota spent before a restart stays spent after it.
#[test]
fn a_restart_keeps_a_daily_quota_spent() {
    let per_day = Quota::new(1_000, Duration::from_secs(86_400), 1_000).unwrap();
    let limits = Limits::new([Quota::per_second(100).unwrap(), per_day]).unwrap();
    let clock = ManualClock::new();
    let live = KeyedMultiLimiter::with_clock(limits.clone(), 10, clock.clone());
    for _ in 0..10 {
        live.try_acquire(&"api-key", 100).unwrap();
        clock.advance(Duration::from_secs(1));
    }
    assert!(live.try_acquire(&"api-key", 100).is_err()); // the day's 1,000 are spent
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    // Restarted a minute later: the second is full again, the day holds what a minute refilled.
    let restored = KeyedMultiLimiter::<&str, _>::builder(limits, 10, ManualClock::new())
        .restore_at(&file[..], wall(60_000_000_000))
        .unwrap();
    assert_eq!(restored.available(&"api-key"), 0);
    let refusal = restored.decide(&"api-key", 100).unwrap_err();
    assert_eq!(refusal.quota_index(), 1, "the per-day quota refuses");
    assert_eq!(restored.available(&"another-key"), 100);
}

/// The floor travels: a drained limiter saved and restored still holds nothing for new keys
/// until it has refilled; a restore into a table too small for every entry holds no quota of
/// any key more leniently than saved.
#[test]
fn the_floor_travels_and_a_small_table_holds_no_key_more_leniently() {
    let clock = ManualClock::new();
    let live = build(100, clock.clone()).build().unwrap();
    live.drain();
    assert_eq!(live.available(&1), 0);
    for k in 0..50 {
        clock.advance(Duration::from_millis(20));
        let _ = live.try_acquire(&k, 1);
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let restored = build(100, ManualClock::new())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    clock.advance(Duration::from_millis(300));
    for k in [1000u64, 7, 3, 49] {
        assert_eq!(quotas_of(&restored, k), quotas_of(&live, k), "key {k}");
    }
    let small = build(3, clock.clone())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    assert!(small.len() <= 3);
    for k in 0..60 {
        let (s, l) = (quotas_of(&small, k), quotas_of(&live, k));
        assert!(
            s.iter().zip(&l).all(|(a, b)| a <= b),
            "key {k}: {s:?} {l:?}"
        );
    }
}

/// A key saved under other quotas (the policy changed, keeping its count) is converted quota by
/// quota as `set_quota` converts; a changed quota count refuses the restore.
#[test]
fn changed_quotas_are_converted_and_a_changed_count_is_refused() {
    let clock = ManualClock::new();
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, clock.clone());
    live.try_acquire(&1u64, 4).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let wider = Limits::new([q(100, 1000, 100), q(40, 10_000, 30)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(wider, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    // The balance kept, capped at the new burst: 6 (of 10, now of 100); 36 of 40 → 30.
    assert_eq!(quotas_of(&restored, 1), vec![6, 30]);
    assert_eq!(quotas_of(&restored, 2), vec![100, 30]);
    let three = Limits::new([q(10, 1000, 10), q(40, 10_000, 40), q(1, 1000, 5)]).unwrap();
    let err = KeyedMultiLimiter::<u64, _>::builder(three, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap_err();
    assert!(
        matches!(
            err,
            RestoreError::LimitsChanged {
                saved: 2,
                restoring: 3
            }
        ),
        "{err:?}"
    );
    // Another kind of limiter's file is refused as such.
    let single = tollgate::KeyedLimiter::<u64, _, _>::with_clock(
        Quota::per_second(1).unwrap(),
        10,
        ManualClock::new(),
    );
    let mut other = Vec::new();
    single.save_at(&mut other, wall(0)).unwrap();
    assert!(build(10, ManualClock::new())
        .restore_at(&other[..], wall(0))
        .is_err());
}

/// Every truncation of a saved table and every flipped byte is an error, never a panic.
#[test]
fn damaged_input_is_an_error() {
    let live = build(100, ManualClock::new()).build().unwrap();
    for k in 0..40 {
        live.try_acquire(&k, 3).unwrap();
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    for len in 0..file.len() {
        let r = build(100, ManualClock::new()).restore_at(&file[..len], wall(0));
        assert!(matches!(r, Err(RestoreError::Truncated)), "{len}");
    }
    let mut rng = Rng(0x1234_5678_9abc_def2);
    for _ in 0..2000 {
        let mut bad = file.clone();
        let i = rng.below(bad.len() as u64) as usize;
        bad[i] ^= 1 << rng.below(8);
        assert!(build(100, ManualClock::new())
            .restore_at(&bad[..], wall(0))
            .is_err());
    }
}

/// A save on one thread while four others admit, insert new keys (evicting full ones once the
/// table is full) and the clock moves: restored at the save's own instant, no quota of any key
/// holds more tokens than it had when the save began.
#[test]
fn a_save_racing_decisions_never_restores_more_tokens() {
    for round in 0..3u64 {
        let clock = ManualClock::new();
        let live = Arc::new(build(20_000, clock.clone()).build().unwrap());
        let mut rng = Rng(0xabcd_ef01_2345_6780 + round);
        for k in 0..15_000u64 {
            let _ = live.try_acquire(&k, 1 + rng.below(10));
        }
        let before: Vec<Vec<u64>> = (0..30_000u64).map(|k| quotas_of(&live, k)).collect();
        let t0 = clock.now();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (live, clock, stop) = (live.clone(), clock.clone(), stop.clone());
                let started = started.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x2222 + t * 7919 + round);
                    while !stop.load(Ordering::Relaxed) {
                        let _ = live.try_acquire(&rng.below(30_000), 1 + rng.below(5));
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
        let restored = build(20_000, ManualClock::new())
            .restore_at(&file[..], wall(t0))
            .unwrap();
        for (k, had) in before.iter().enumerate() {
            let got = quotas_of(&restored, k as u64);
            assert!(
                got.iter().zip(had).all(|(g, h)| g <= h),
                "round {round} key {k}: {got:?} > {had:?}"
            );
        }
    }
}
