//! Saving a limiter whose quota counts in a unit chosen by `Quota::with_scale`: the file records
//! the rate and burst, and a restore reads the lack in `Quota::new`'s unit for them, so a save
//! converts it (rounding toward more lacked). Restored into the same quota or into `Quota::new`'s,
//! a bucket never holds more tokens than it did.
#![cfg(feature = "persist")]

use std::time::{Duration, SystemTime};
use tollgate::{Bucket, Denied, Limits, ManualClock, MultiBucket, Quota, ShardedBucket};

fn wall() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// 7 per 30 days in `Quota::new`'s unit (8.64e14 per token) and in a coarser one (2.592e12,
/// exact at every microsecond); 1,000/s in its own unit (1e6) and in whole tokens.
fn pairs() -> Vec<(Quota, Quota)> {
    let month = Quota::new(7, Duration::from_secs(30 * 86_400), 7).unwrap();
    let fast = Quota::per_second(1000).unwrap();
    vec![
        (month, month.with_scale(2_592_000_000_000).unwrap()),
        (fast, fast.with_scale(1).unwrap()),
        (fast, fast.with_scale(7).unwrap()),
    ]
}

/// Counts what `b` admits one token at a time at its clock's reading (3 s: on every unit grid
/// here, so an inexact quota's rounding does not hold back the last token).
fn admitted(b: &Bucket<ManualClock>) -> u64 {
    let mut n = 0;
    while b.try_acquire(1).is_ok() {
        n += 1;
    }
    n
}

#[test]
fn a_bucket_in_a_chosen_unit_restores_what_it_held() {
    for (own, chosen) in pairs() {
        for taken in [0, 1, 3, chosen.burst() - 1, chosen.burst()] {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let live = Bucket::with_clock(chosen, clock);
            if taken > 0 {
                live.try_acquire(taken).unwrap();
            }
            let mut file = Vec::new();
            live.save_at(&mut file, wall()).unwrap();
            let left = chosen.burst() - taken;
            for into in [chosen, own] {
                let clock = ManualClock::new();
                clock.set(Duration::from_secs(3));
                let b = Bucket::with_clock(into, clock);
                b.restore_at(&file[..], wall()).unwrap();
                assert_eq!(
                    admitted(&b),
                    left,
                    "{chosen:?} at scale {}, {taken} taken, restored at scale {}",
                    chosen.scale(),
                    into.scale()
                );
            }
        }
    }
}

#[test]
fn a_policy_in_a_chosen_unit_restores_what_it_held() {
    for (own, chosen) in pairs() {
        let slow = Quota::per_second(1).unwrap().with_burst(5000).unwrap();
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3));
        let live = MultiBucket::with_clock(Limits::new([chosen, slow]).unwrap(), clock);
        live.try_acquire(3).unwrap();
        let mut file = Vec::new();
        live.save_at(&mut file, wall()).unwrap();
        for into in [chosen, own] {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let b = MultiBucket::with_clock(Limits::new([into, slow]).unwrap(), clock);
            b.restore_at(&file[..], wall()).unwrap();
            let mut n = 0;
            while b.try_acquire(1).is_ok() {
                n += 1;
            }
            assert_eq!(
                n,
                chosen.burst() - 3,
                "{chosen:?} at scale {}",
                into.scale()
            );
        }
    }
}

#[cfg(feature = "keyed")]
#[test]
fn a_keyed_table_in_a_chosen_unit_restores_what_it_held() {
    for (own, chosen) in pairs() {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3));
        use tollgate::KeyedLimiter;
        let live = KeyedLimiter::with_clock(chosen, 100, clock);
        for key in 0..20u64 {
            live.try_acquire(&key, 1 + key % 3).unwrap();
        }
        let mut file = Vec::new();
        live.save_at(&mut file, wall()).unwrap();
        for into in [chosen, own] {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let restored = KeyedLimiter::<u64, Quota, _>::builder(into, 100, clock)
                .restore_at(&file[..], wall())
                .unwrap();
            for key in 0..20u64 {
                let mut n = 0;
                while restored.try_acquire(&key, 1).is_ok() {
                    n += 1;
                }
                assert_eq!(
                    n,
                    chosen.burst() - 1 - key % 3,
                    "{chosen:?} key {key} restored at scale {}",
                    into.scale()
                );
            }
        }
    }
}

/// A sharded bucket in a chosen unit: its frame carries the tokens held with its own unit, so a
/// restore into the same quota or `Quota::new`'s holds no more than the live bucket did (a
/// full one all of it).
#[test]
fn a_sharded_bucket_in_a_chosen_unit_restores_at_most_what_it_held() {
    for (own, chosen) in pairs() {
        for taken in [0, 1, 3, chosen.burst()] {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let live = ShardedBucket::with_clock(chosen, 4, clock);
            if taken > 0 {
                live.try_acquire(taken).unwrap();
            }
            let mut file = Vec::new();
            live.save_at(&mut file, wall()).unwrap();
            for into in [chosen, own] {
                let clock = ManualClock::new();
                clock.set(Duration::from_secs(3));
                let b = ShardedBucket::with_clock(into, 4, clock);
                b.restore_at(&file[..], wall()).unwrap();
                let mut n = 0;
                while b.try_acquire(1).is_ok() {
                    n += 1;
                }
                // Tokens leased to shards travel as spent: at most what was held.
                assert!(
                    n <= chosen.burst() - taken,
                    "{chosen:?} restored at {into:?}"
                );
                if taken == 0 {
                    assert_eq!(n, chosen.burst(), "{chosen:?} restored at {into:?}");
                }
            }
        }
    }
}

/// A debt (tokens reserved ahead) in a chosen unit restores as at least the same wait, and a
/// downtime refills no more than the live bucket earns over it.
#[test]
fn a_debt_and_a_downtime_in_a_chosen_unit_never_restore_more() {
    let day = Duration::from_secs(86_400);
    for (own, chosen) in pairs() {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3));
        let live = Bucket::with_clock(chosen, clock.clone());
        live.reserve(chosen.burst()).unwrap();
        live.reserve(5).unwrap();
        let mut file = Vec::new();
        live.save_at(&mut file, wall()).unwrap();
        let Err(Denied::RetryAfter(wait)) = live.try_acquire(1) else {
            panic!("{chosen:?}: a debt admits")
        };
        clock.advance(day);
        let earned = admitted(&live);
        for into in [chosen, own] {
            let c = ManualClock::new();
            c.set(Duration::from_secs(3));
            let b = Bucket::with_clock(into, c);
            b.restore_at(&file[..], wall()).unwrap();
            match b.try_acquire(1) {
                Err(Denied::RetryAfter(w)) => assert!(w >= wait, "{chosen:?} into {into:?}"),
                other => panic!("{chosen:?} into {into:?}: {other:?}"),
            }
            // Restored a day later: at most the day's refill, as the live bucket earns it.
            let c = ManualClock::new();
            c.set(Duration::from_secs(3));
            let b = Bucket::with_clock(into, c);
            b.restore_at(&file[..], wall() + day).unwrap();
            let n = admitted(&b);
            assert!(n <= earned, "{chosen:?} into {into:?}: {n} > {earned}");
        }
    }
}

/// A table whose override counts in a chosen unit saves that key's lack in `Quota::new`'s unit:
/// restored into a table whose override is the other unit, the key holds what it held.
#[cfg(feature = "keyed")]
#[test]
fn an_override_in_a_chosen_unit_restores_what_it_held() {
    use tollgate::KeyedLimiter;
    let base = Quota::per_second(5).unwrap();
    for (own, chosen) in pairs() {
        for (from, into) in [(chosen, own), (own, chosen), (chosen, chosen)] {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let live = KeyedLimiter::<u64, Quota, _>::builder(base, 100, clock)
                .override_quota(7, from)
                .build()
                .unwrap();
            live.try_acquire(&7, 3).unwrap();
            live.try_acquire(&8, 2).unwrap();
            let mut file = Vec::new();
            live.save_at(&mut file, wall()).unwrap();
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let restored = KeyedLimiter::<u64, Quota, _>::builder(base, 100, clock)
                .override_quota(7, into)
                .restore_at(&file[..], wall())
                .unwrap();
            let mut n = 0;
            while restored.try_acquire(&7, 1).is_ok() {
                n += 1;
            }
            assert_eq!(n, chosen.burst() - 3, "{from:?} into {into:?}");
        }
    }
}
