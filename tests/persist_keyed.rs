//! Saving and restoring a `KeyedLimiter`: every tracked key comes back as the live limiter has
//! it at the restore's instant, override quotas and the untracked-key floor included; a save
//! racing decisions, insertions and evictions on other threads never restores more tokens than
//! a key had when the save began; damaged input is an error. The tests `persist_keyed_multi.rs`
//! makes of a `Limits` policy too are written once in `common/keyed_persist.rs`; each test here
//! gives them its quotas, seeds and counts.
#![cfg(all(feature = "persist", feature = "keyed"))]

#[path = "common/keyed_persist.rs"]
mod keyed_persist;

use keyed_persist::{wall, Race};
use std::time::Duration;
use tollgate::{KeyedLimiter, ManualClock, Quota};

/// The override quota of keys 7 and 8.
fn premium() -> Quota {
    Quota::per_second(100).unwrap().with_burst(20).unwrap()
}

/// A table of `max_keys` keys with default quota `q`, keys 7 and 8 on [`premium`].
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
    keyed_persist::every_key_comes_back_as_the_live_limiter_has_it(
        0xfeed_0000_1111_2222,
        6,
        |max_keys, clock| build(q, max_keys, clock),
    );
}

/// The floor travels: a drained limiter saved and restored still refuses new keys until it
/// has refilled; a restore into a table too small to hold every entry holds no key more
/// lenient than saved.
#[test]
fn the_floor_travels_and_a_small_table_holds_no_key_more_leniently() {
    let q = Quota::per_second(10).unwrap();
    keyed_persist::the_floor_travels_and_a_small_table_holds_no_key_more_leniently(
        |max_keys, clock| build(q, max_keys, clock),
    );
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

/// A floor ahead of the save's reading (left by a restore into a table too small for the saved
/// entries, and saved again) is carried to another quota as `set_quota` carries an untracked
/// key's bucket: one empty under the saved quota stays empty under a slower rate or a larger
/// burst, rather than lacking only what the new quota refills over the same span.
#[test]
fn a_floor_ahead_saved_under_another_quota_is_converted() {
    let old = Quota::per_second(1_000).unwrap();
    let live = KeyedLimiter::with_clock(old, 100, ManualClock::new());
    live.try_acquire(&1u64, 1_000).unwrap();
    live.try_acquire(&2u64, 1_000).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    // One key fits; the other raises the floor to its full instant, a second ahead.
    let small = KeyedLimiter::<u64, Quota, _>::builder(old, 1, ManualClock::new())
        .restore_at(&file[..], wall(0))
        .unwrap();
    assert_eq!(small.available(&99), 0, "an untracked key starts empty");
    let mut file = Vec::new();
    small.save_at(&mut file, wall(0)).unwrap();
    for new in [
        Quota::per_second(1).unwrap().with_burst(1_000).unwrap(),
        old.with_burst(5_000).unwrap(),
    ] {
        let restored = KeyedLimiter::<u64, Quota, _>::builder(new, 100, ManualClock::new())
            .restore_at(&file[..], wall(0))
            .unwrap();
        assert_eq!(restored.available(&99), 0, "{new:?}");
    }
}

/// Every truncation of a saved table and every flipped byte is an error, never a panic.
#[test]
fn damaged_keyed_input_is_an_error() {
    let q = Quota::per_second(10).unwrap();
    keyed_persist::damaged_input_is_an_error(0x1234_5678_9abc_def1, |max_keys, clock| {
        build(q, max_keys, clock)
    });
}

/// A save on one thread while four others admit, insert new keys (the table grows through
/// migrations and, once full, evicts full buckets) and the clock moves: restored at the save's
/// own instant, no key holds more tokens than it had when the save began.
#[test]
fn a_save_racing_decisions_never_restores_more_tokens() {
    let q = Quota::per_second(50).unwrap().with_burst(40).unwrap();
    let race = Race {
        rounds: 4,
        seed: 0xabcd_ef01_2345_6789,
        max_fill_cost: 40,
        keys: 40_000,
        thread_seed: 0x1111,
    };
    keyed_persist::a_save_racing_decisions_never_restores_more_tokens(
        race,
        |clock| KeyedLimiter::with_clock(q, 20_000, clock),
        |clock| KeyedLimiter::builder(q, 20_000, clock),
    );
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

/// A restore into a live table of the file's seed never adds tokens to a key it does not
/// track (`keyed_persist`).
#[test]
fn a_restore_in_place_never_hands_an_untracked_key_more_than_the_floor() {
    keyed_persist::a_restore_in_place_never_hands_an_untracked_key_more_than_the_floor(
        Quota::per_second(10).unwrap(),
    );
}

/// A save whose reading is behind a key's last admission (a clock stepped back, or a decision
/// at a later reading racing the save's walk) saves the key in debt at that reading. The
/// restore keeps that debt up to a state full two refills of the table's slowest quota after
/// the restore's reading (`Table::latest_full`, so that a damaged file cannot keep keys
/// tracked for ages) and cuts the rest, as `docs/guarantees.md` states: here the key, full six
/// seconds after the save's reading, is full two seconds after the restore, not earlier.
#[test]
fn a_key_saved_far_behind_its_last_admission_keeps_two_refills_of_debt() {
    let q = Quota::per_second(1).unwrap();
    let clock = ManualClock::new();
    let live: KeyedLimiter<u64, Quota, ManualClock> = KeyedLimiter::with_clock(q, 4, clock.clone());
    clock.set(Duration::from_secs(10));
    live.try_acquire(&1, 1).unwrap();
    // Saved at 5 s: the key holds its token again at 11 s, six seconds after that reading.
    clock.set(Duration::from_secs(5));
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let clock2 = ManualClock::new();
    let restored = KeyedLimiter::<u64, Quota, _>::builder(q, 4, clock2.clone())
        .restore_at(&file[..], wall(0))
        .unwrap();
    clock2.advance(Duration::from_nanos(1_999_999_999));
    assert_eq!(
        restored.try_acquire(&1, 1),
        Err(tollgate::Denied::RetryAfter(Duration::from_nanos(1)))
    );
    clock2.advance(Duration::from_nanos(1));
    assert_eq!(restored.try_acquire(&1, 1), Ok(()));
}

/// Restored into a limiter of another seed (built, not restored through the builder), a key
/// whose override here is slower than the default does not start fuller than it was saved
/// (`docs/guarantees.md`, "`save` → `restore`": no entry is tracked then, each raises the
/// floor, converted to the strictest policy here). Key 7, drained under its override of 1
/// token a second (burst 10): its saved entry's fingerprint names no override under the other
/// seed, so converted to the default alone (10 a second, full 1 s later) the floor would leave
/// key 7, under its slower override here, 9 of 10 tokens; converted to every policy here it
/// leaves none. `persist_vs_model`'s restarts into another seed cover `KeyedMultiLimiter`
/// with overrides alike.
#[test]
fn another_seed_holds_a_key_with_a_slower_override_to_its_saved_state() {
    let fast = Quota::per_second(10).unwrap();
    let slow = Quota::per_second(1).unwrap().with_burst(10).unwrap();
    let build = |c: ManualClock| {
        KeyedLimiter::<u64, Quota, _>::builder(fast, 100, c).override_quota(7, slow)
    };
    let live = build(ManualClock::new()).build().unwrap();
    live.try_acquire(&7, 10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(1_000_000_000)).unwrap();
    // Through the builder (the saved seed): drained, as saved.
    let same = build(ManualClock::new())
        .restore_at(&file[..], wall(1_000_000_000))
        .unwrap();
    assert_eq!(same.available(&7), 0);
    // Into a limiter of a seed of its own: no fuller than saved either.
    let other = build(ManualClock::new()).build().unwrap();
    other.restore_at(&file[..], wall(1_000_000_000)).unwrap();
    assert_eq!(other.available(&7), 0, "started fuller than it was saved");
}

/// Restored into a limiter of another seed, every pair of a saved and a present policy is
/// converted while they number at most 65,536; past that (here 300 distinct saved overrides
/// against 300 distinct ones here: 90,601 pairs) every untracked key is held to the latest
/// instant a restore holds a key to, so that the restore's cost stays bounded, and no key
/// starts fuller than saved: key 7, drained under the default, comes back drained, as does a
/// key with an override here.
#[test]
fn another_seed_with_many_policies_on_both_sides_holds_every_key() {
    let q = Quota::per_second(10).unwrap();
    let mut saved = KeyedLimiter::<u64, Quota, _>::builder(q, 1_000, ManualClock::new());
    for i in 0..300u64 {
        saved = saved.override_quota(1_000 + i, Quota::per_second(11 + i).unwrap());
    }
    let live = saved.build().unwrap();
    live.try_acquire(&7, 10).unwrap();
    let mut file = Vec::new();
    live.save_at(&mut file, wall(1_000_000_000)).unwrap();
    let mut here = KeyedLimiter::<u64, Quota, _>::builder(q, 1_000, ManualClock::new());
    for i in 0..300u64 {
        here = here.override_quota(2_000 + i, Quota::per_second(400 + i).unwrap());
    }
    let other = here.build().unwrap();
    other.restore_at(&file[..], wall(1_000_000_000)).unwrap();
    assert_eq!(other.available(&7), 0, "started fuller than it was saved");
    assert_eq!(
        other.available(&2_000),
        0,
        "an override here started fuller"
    );
}
