//! Saving and restoring a `KeyedMultiLimiter`: every tracked key comes back with every quota as
//! the live limiter has it at the restore's instant (override policies and the untracked-key
//! floor included), so a restart keeps a per-day quota's spend; a save racing decisions,
//! insertions and evictions never restores more tokens to any quota of any key than it had when
//! the save began; a changed quota count is refused; damaged input is an error. The tests
//! `persist_keyed.rs` makes of a `Quota` policy too are written once in
//! `common/keyed_persist.rs`; each test here gives them its policies, seeds and counts.
#![cfg(all(feature = "persist", feature = "keyed"))]

#[path = "common/keyed_persist.rs"]
mod keyed_persist;

use keyed_persist::{quotas_of, wall, Race};
use std::time::Duration;
use tollgate::persist::RestoreError;
use tollgate::Limiter;
use tollgate::{KeyedMultiLimiter, KeyedMultiLimiterBuilder, Limits, ManualClock, Quota};

/// A quota of `tokens` per `per_ms` milliseconds, bursting to `burst`.
fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

/// 10 per second, 40 per 10 s.
fn default_limits() -> Limits {
    Limits::new([q(10, 1000, 10), q(40, 10_000, 40)]).unwrap()
}

/// A table of `default_limits` in which keys 1 and 2 each spent 10 tokens, saved at wall 0.
fn two_keys_spent() -> Vec<u8> {
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, ManualClock::new());
    live.try_acquire(&1u64, 10).unwrap();
    live.try_acquire(&2u64, 10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    file
}

/// Key 7: three quotas.
fn premium() -> Limits {
    Limits::new([q(100, 1000, 20), q(200, 10_000, 200), q(3, 1000, 30)]).unwrap()
}

/// A table of `max_keys` keys on [`default_limits`], key 7 on [`premium`].
fn build(max_keys: usize, clock: ManualClock) -> KeyedMultiLimiterBuilder<u64, ManualClock> {
    KeyedMultiLimiter::builder(default_limits(), max_keys, clock).override_quota(7, premium())
}

/// Random decisions over 3,000 keys (evictions included, through a small table), saved, then
/// restored at several later instants: every quota of every key and every next decision (with
/// the quota it names) equal the live limiter's.
#[test]
fn every_key_comes_back_with_every_quota_as_the_live_limiter_has_it() {
    keyed_persist::every_key_comes_back_as_the_live_limiter_has_it(0xfeed_0000_3333_4444, 5, build);
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
    keyed_persist::the_floor_travels_and_a_small_table_holds_no_key_more_leniently(build);
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

/// A changed quota count is refused by the policies alone, whatever the file holds: a table
/// saved with no entries (every key full, or none ever seen) is refused as one with entries
/// is, not restored with only its floor converted; so is a file whose default policy has
/// another count than an override set here (a key of it, tracked or not, would change count).
/// A refused restore into a live limiter changes nothing.
#[test]
fn a_changed_count_is_refused_with_or_without_entries() {
    let three = Limits::new([q(10, 1000, 10), q(40, 10_000, 40), q(1, 1000, 5)]).unwrap();
    let changed = |saved, restoring| move |e: &RestoreError| matches!(e, RestoreError::LimitsChanged { saved: s, restoring: r } if *s == saved && *r == restoring);
    let clock = ManualClock::new();
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, clock.clone());
    let mut never_used = Vec::new();
    live.save_at(&mut never_used, wall(0)).unwrap();
    live.try_acquire(&1u64, 4).unwrap();
    let mut with_entries = Vec::new();
    live.save_at(&mut with_entries, wall(0)).unwrap();
    clock.advance(Duration::from_secs(10)); // key 1 full again: no entry left to save
    let mut idle = Vec::new();
    live.save_at(&mut idle, wall(10_000_000_000)).unwrap();
    for (file, what) in [
        (&with_entries, "with entries"),
        (&never_used, "never used"),
        (&idle, "every key full"),
    ] {
        let err = KeyedMultiLimiter::<u64, _>::builder(three.clone(), 100, ManualClock::new())
            .restore_at(&file[..], wall(10_000_000_000))
            .unwrap_err();
        assert!(changed(2, 3)(&err), "{what}: {err:?}");
        // The same count restores, an override of another count set here is refused.
        KeyedMultiLimiter::<u64, _>::builder(default_limits(), 100, ManualClock::new())
            .restore_at(&file[..], wall(10_000_000_000))
            .unwrap();
        let err = build(100, ManualClock::new())
            .restore_at(&file[..], wall(10_000_000_000))
            .unwrap_err();
        assert!(changed(2, 3)(&err), "{what}, an override here: {err:?}");
    }
    // Into a live limiter, in use: refused, and nothing changed.
    let target = KeyedMultiLimiter::with_clock(three, 100, ManualClock::new());
    target.try_acquire(&1u64, 2).unwrap();
    let err = target.restore_at(&with_entries[..], wall(0)).unwrap_err();
    assert!(changed(2, 3)(&err), "{err:?}");
    assert_eq!(quotas_of(&target, 1), vec![8, 38, 3]);
    assert_eq!(quotas_of(&target, 2), vec![10, 40, 5]);
}

/// A restore into a live limiter of another seed (any limiter not built from the file: each
/// draws its own) with the very policies saved is no changed count, even where an override has
/// another count than the default: the file's fingerprints name no key here, so its override's
/// entry (key 7, three quotas) cannot be paired with key 7's override here, and pairing it with
/// the policy its foreign fingerprint falls to here (the default, two quotas) read as a changed
/// count. The saved entries raise the floor for untracked keys instead, so no key here starts
/// fuller than it was saved.
#[test]
fn the_same_policies_restore_into_a_limiter_of_another_seed() {
    let clock = ManualClock::new();
    let live = build(100, clock.clone()).build().unwrap();
    let mut never_used = Vec::new();
    live.save_at(&mut never_used, wall(0)).unwrap();
    live.try_acquire(&7u64, 20).unwrap();
    live.try_acquire(&1u64, 10).unwrap();
    let mut with_entries = Vec::new();
    live.save_at(&mut with_entries, wall(0)).unwrap();
    for (file, what) in [(&never_used, "never used"), (&with_entries, "with entries")] {
        let other = build(100, ManualClock::new()).build().unwrap();
        other
            .restore_at(&file[..], wall(0))
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
    }
    // The entries of keys 1 and 7, not found here, keep both from starting fuller.
    let other = build(100, ManualClock::new()).build().unwrap();
    other.restore_at(&with_entries[..], wall(0)).unwrap();
    assert!(other.try_acquire(&7u64, 1).is_err());
    assert!(other.try_acquire(&1u64, 1).is_err());
}

/// A floor ahead of the save's reading (left by a restore into a table too small for the saved
/// entries, and saved again) is carried to changed quotas as `set_quota` carries an untracked
/// key's buckets, never more leniently: the per-second quota, in debt under the saved rate,
/// stays empty under a slower one instead of lacking only what that rate refills before the
/// floor.
#[test]
fn a_floor_ahead_saved_under_other_quotas_is_converted() {
    let file = two_keys_spent();
    // One key fits; the other raises the floor to its full instant, 2.5 s ahead.
    let small = KeyedMultiLimiter::<u64, _>::builder(default_limits(), 1, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    assert_eq!(quotas_of(&small, 99), vec![0, 30]);
    let mut file = Vec::new();
    small.save_at(&mut file, wall(0)).unwrap();
    let slower = Limits::new([q(1, 1000, 10), q(40, 10_000, 40)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(slower, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    // One floor instant for every quota: the slower quota's later full instant holds the
    // 10-second one back too (stricter, never more than the 30 converted).
    let got = quotas_of(&restored, 99);
    assert!(got[0] == 0 && got[1] <= 30, "{got:?}");
}

/// A policy reordered across a restart keeps each quota's spend with that quota (paired by
/// value, then by period, not by position): a key whose 10-second quota is nearly spent does
/// not get the per-second quota's full balance there.
#[test]
fn a_reordered_policy_keeps_each_quota_with_its_own_state() {
    let clock = ManualClock::new();
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, clock.clone());
    // 10 a second for 4 s: 40 of the 10 s quota's 40 spent, 16 refilled; a second later the
    // per-second quota is full again.
    for _ in 0..4 {
        live.try_acquire(&1u64, 10).unwrap();
        clock.advance(Duration::from_secs(1));
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let spent = quotas_of(&live, 1);
    assert_eq!(spent, vec![10, 16]);
    let reordered = Limits::new([q(40, 10_000, 40), q(10, 1000, 10)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(reordered, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    assert_eq!(quotas_of(&restored, 1), vec![16, 10]);
    // One quota changed as well (its period kept): the other still found by value.
    let changed = Limits::new([q(40, 10_000, 40), q(20, 1000, 20)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(changed, 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    assert_eq!(quotas_of(&restored, 1), vec![16, 10]);
}

/// Every truncation of a saved table and every flipped byte is an error, never a panic.
#[test]
fn damaged_input_is_an_error() {
    keyed_persist::damaged_input_is_an_error(0x1234_5678_9abc_def2, build);
}

/// A save on one thread while four others admit, insert new keys (evicting full ones once the
/// table is full) and the clock moves: restored at the save's own instant, no quota of any key
/// holds more tokens than it had when the save began.
#[test]
fn a_save_racing_decisions_never_restores_more_tokens() {
    let race = Race {
        rounds: 3,
        seed: 0xabcd_ef01_2345_6780,
        max_fill_cost: 10,
        keys: 30_000,
        thread_seed: 0x2222,
    };
    keyed_persist::a_save_racing_decisions_never_restores_more_tokens(
        race,
        |clock| build(20_000, clock).build().unwrap(),
        |clock| build(20_000, clock),
    );
}

/// Restoring into a live limiter while other threads keep deciding on the same keys: a
/// record a decision holds for its write is waited for, never skipped and never a panic (the
/// merge keeps the stricter of the two states). The file is the limiter's own save with every
/// key drained, restored at the save's wall-clock instant; the deciders' admissions (a token a
/// key every 100 ms of their clock) hold the records the merges need.
#[test]
fn a_restore_into_a_live_limiter_waits_for_records_decisions_hold() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let clock = ManualClock::new_frozen();
    let live = Arc::new(build(64, clock.clone()).build().unwrap());
    for k in 0..8u64 {
        while live.try_acquire(&k, 1).is_ok() {}
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let deciders: Vec<_> = (0..2u64)
        .map(|t| {
            let (live, stop, clock) = (live.clone(), stop.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut k = t;
                while !stop.load(Ordering::Relaxed) {
                    // A token a key every 100 ms: admissions write (and hold) the records.
                    if t == 0 && k % 8 == 0 {
                        clock.advance(Duration::from_millis(100));
                    }
                    let _ = live.try_acquire(&(k % 8), 1);
                    k += 1;
                }
            })
        })
        .collect();
    for _ in 0..300 {
        live.restore_at(&file[..], wall(0)).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for d in deciders {
        d.join().unwrap();
    }
}

/// A restore with the quotas paired by the caller (`restore_paired_at`) takes any number of
/// quotas on either side: each quota here takes the state of the saved quota its pair names,
/// converted as `set_quota` converts (the balance kept, capped at the new burst), an unpaired
/// one starts full for every key, a saved quota named by no pair is dropped.
#[test]
fn paired_quotas_keep_their_state_and_unpaired_ones_start_full() {
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, ManualClock::new());
    live.try_acquire(&1u64, 4).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    // A quota added between the two, which are swapped: each keeps its own state.
    let three = Limits::new([q(40, 10_000, 40), q(1, 1000, 5), q(10, 1000, 10)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(three, 100, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[Some(1), None, Some(0)])
        .unwrap();
    assert_eq!(quotas_of(&restored, 1), vec![36, 5, 6]);
    assert_eq!(quotas_of(&restored, 2), vec![40, 5, 10]);
    // The per-second quota removed, the 10-second one's burst cut: 36 → 30.
    let one = Limits::new([q(40, 10_000, 30)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(one, 100, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[Some(1)])
        .unwrap();
    assert_eq!(quotas_of(&restored, 1), vec![30]);
    assert_eq!(quotas_of(&restored, 2), vec![30]);
    // A changed rate, paired: the balance carried (6 of 10, now of 100), refilled over the
    // downtime first (half a second: 5 of the per-second quota).
    let faster = Limits::new([q(100, 1000, 100), q(40, 10_000, 40), q(1, 1000, 5)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(faster, 100, ManualClock::new())
        .restore_paired_at(&file[..], wall(500_000_000), &[Some(0), Some(1), None])
        .unwrap();
    assert_eq!(quotas_of(&restored, 1), vec![10, 38, 5]);
}

/// Pairs naming every quota where it was restore exactly as `restore_at` does (the floor for
/// untracked keys included); pairs that move a quota elsewhere or drop it never let a key or
/// the floor hold more than saved under any paired quota.
#[test]
fn pairs_in_place_restore_as_a_plain_restore_and_the_floor_travels() {
    let file = two_keys_spent();
    // One key fits; the other raises the floor to its full instant, 2.5 s ahead.
    let small = KeyedMultiLimiter::<u64, _>::builder(default_limits(), 1, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[Some(0), Some(1)])
        .unwrap();
    assert_eq!(quotas_of(&small, 99), vec![0, 30]);
    let mut file = Vec::new();
    small.save_at(&mut file, wall(0)).unwrap();
    let plain = KeyedMultiLimiter::<u64, _>::builder(default_limits(), 100, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    let paired = KeyedMultiLimiter::<u64, _>::builder(default_limits(), 100, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[Some(0), Some(1)])
        .unwrap();
    for k in [1, 2, 99] {
        assert_eq!(quotas_of(&paired, k), quotas_of(&plain, k), "key {k}");
    }
    // The 10-second quota alone, moved behind a new per-second one: the floor holds the
    // untracked key to no more than the 30 it had; the new quota waits for the floor's
    // instant too (one instant for the table: stricter, never more lenient).
    let moved = Limits::new([q(5, 1000, 5), q(40, 10_000, 40)]).unwrap();
    let restored = KeyedMultiLimiter::<u64, _>::builder(moved, 100, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[None, Some(1)])
        .unwrap();
    let got = quotas_of(&restored, 99);
    assert!(got[1] <= 30, "{got:?}");
}

/// Pairs that do not fit the policies are an error, never a panic, and build nothing: not one
/// pair per quota here (fewer, more, none), a position past the saved quotas, an override set
/// here with another count than the pairs.
#[test]
fn pairs_that_do_not_fit_are_an_error() {
    let live = KeyedMultiLimiter::with_clock(default_limits(), 100, ManualClock::new());
    live.try_acquire(&1u64, 4).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let three = Limits::new([q(10, 1000, 10), q(40, 10_000, 40), q(1, 1000, 5)]).unwrap();
    let bad = |pairs: usize, quotas: usize, saved: usize| {
        move |e: &RestoreError| {
            matches!(e, RestoreError::BadPairs { pairs: p, quotas: q, saved: s }
                if *p == pairs && *q == quotas && *s == saved)
        }
    };
    for (pairs, want) in [
        (&[Some(0), Some(1)][..], bad(2, 3, 2)),
        (&[Some(0), Some(1), None, None][..], bad(4, 3, 2)),
        (&[][..], bad(0, 3, 2)),
        (&[Some(0), Some(2), None][..], bad(3, 3, 2)),
        (&[Some(usize::MAX), None, None][..], bad(3, 3, 2)),
    ] {
        let err = KeyedMultiLimiter::<u64, _>::builder(three.clone(), 100, ManualClock::new())
            .restore_paired_at(&file[..], wall(0), pairs)
            .unwrap_err();
        assert!(want(&err), "{pairs:?}: {err:?}");
        assert!(!err.to_string().is_empty());
    }
    // Key 7's override here has three quotas: two pairs fit the default, not it.
    let err = build(100, ManualClock::new())
        .restore_paired_at(&file[..], wall(0), &[Some(0), Some(1)])
        .unwrap_err();
    assert!(bad(2, 3, 2)(&err), "{err:?}");
    // A damaged file is refused as such, whatever the pairs.
    let err = KeyedMultiLimiter::<u64, _>::builder(three, 100, ManualClock::new())
        .restore_paired_at(&file[..file.len() - 1], wall(0), &[None, None, None])
        .unwrap_err();
    assert!(matches!(err, RestoreError::Truncated), "{err:?}");
}

/// The saved table does not bound the restored one where the restore cuts a debt (two refills
/// of the restoring table's slowest quota, `docs/guarantees.md`) that a conversion carried past
/// a burst with no admission behind it. Restored into another seed, an untracked key's floor
/// is raised to the strictest any saved policy converts to under any policy here: key 0 (an
/// override of 1 per ms, burst 10) spent 2, holds 8, carried as a balance into a default of
/// burst 100 lacks 92, so every untracked key waits 92 ms, key 0 too. Restored again into
/// another seed whose slowest quota refills in 10 ms, that floor is cut to 20 ms: the restored
/// table admits key 0 before the saved one would, and still no more than key 0's own state
/// (full 2 ms after its spend) allows.
#[test]
fn a_floor_a_conversion_carried_past_a_burst_is_cut_at_two_refills() {
    let per_ms = |burst| Limits::new([q(1, 1, burst)]).unwrap();
    let table = |default, clock| {
        KeyedMultiLimiter::builder(per_ms(default), 10, clock)
            .override_quota(0u64, per_ms(10))
            .build()
            .unwrap()
    };
    let live = table(10, ManualClock::new());
    live.try_acquire(&0, 2).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let saved = table(100, ManualClock::new());
    saved.restore_at(&file[..], wall(0)).unwrap();
    let mut file = Vec::new();
    saved.save_at(&mut file, wall(0)).unwrap();
    let clock = ManualClock::new();
    let restored = table(5, clock.clone());
    restored.restore_at(&file[..], wall(0)).unwrap();
    let at = |ms: u64| {
        clock.set(Duration::from_millis(ms));
        saved.clock().set(Duration::from_millis(ms));
        (restored.available(&0), saved.available(&0))
    };
    assert_eq!(at(0), (0, 0));
    assert_eq!(at(15), (5, 0), "full at 20 ms here, at 92 ms saved");
    assert_eq!(at(20), (10, 0));
    assert_eq!(at(87), (10, 5));
    assert_eq!(at(92), (10, 10));
}

/// A restore into a live table of the file's seed never adds tokens to a key it does not
/// track (`keyed_persist`): every quota holds at least the floor's state.
#[test]
fn a_restore_in_place_never_hands_an_untracked_key_more_than_the_floor() {
    keyed_persist::a_restore_in_place_never_hands_an_untracked_key_more_than_the_floor(
        Limits::new([q(10, 1_000, 10), q(30, 60_000, 30)]).unwrap(),
    );
}
