//! loom models of the keyed limiter's table protocol: concurrent insertion of one new key,
//! eviction racing an admission, a sweep (evictions shifting chains back) racing an admission,
//! the table growing (a migration step moving an entry to the new region) under an admission
//! and under a read, a new key inserted by two threads during a migration, a sweep draining the
//! old region racing an admission, decisions helping a migration along, and an eviction at a
//! later reading racing a decision at an earlier one.
//!
//! Under `--cfg tollgate_loom` the index is the production table (`src/keyed/index.rs`) on loom's
//! mutex and `crate::sync`'s loom `AtomicU128`, with a fixed hash seed so every explored execution
//! probes the same slots: the lock-free probe, the whole-slot CAS, the re-probe under the mutex,
//! eviction and the backward shift that closes its gap, the migration between regions, the
//! incremental sweep, the length budget and `next_full_at` are all the code explored here.
#![cfg(tollgate_loom)]

use loom::thread;
use std::cell::Cell;
use std::time::Duration;
use tollgate::{Clock, KeyedLimiter, ManualClock, Quota};

loom::thread_local! {
    /// The calling thread's latest reading of a [`Recording`] clock.
    static LAST: Cell<u64> = Cell::new(u64::MAX);
}

/// A `ManualClock` that remembers, per thread, the reading it last returned: the model then
/// knows at which reading each decision was taken.
#[derive(Clone, Debug)]
struct Recording(ManualClock);

impl Clock for Recording {
    fn now(&self) -> u64 {
        let t = self.0.now();
        LAST.with(|c| c.set(t));
        t
    }
}

#[test]
fn two_threads_insert_and_admit_the_same_new_key() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(
            Quota::per_second(1).unwrap(),
            4,
            clock,
        ));
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&7u8, 1).is_ok());
        let mine = limiter.try_acquire(&7u8, 1).is_ok();
        let theirs = t.join().unwrap();
        assert!(
            mine ^ theirs,
            "exactly one of two requests for a burst of 1"
        );
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.available(&7u8), 0);
    });
}

#[test]
fn eviction_races_an_admission() {
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 1, clock.clone()));
        limiter.try_acquire(&1u8, 1).unwrap();
        clock.advance(Duration::from_secs(1)); // key 1 is full: evictable
        let other = limiter.clone();
        // Takes key 1's whole burst: correct only if it lands on the live slot, or on a fresh one.
        let t = thread::spawn(move || other.try_acquire(&1u8, 2).is_ok());
        // Needs room: evicts key 1 unless the admission landed first.
        let new_key = limiter.try_acquire(&2u8, 1).is_ok();
        let old_key = t.join().unwrap();
        assert!(
            old_key ^ new_key,
            "one slot: exactly one of them is tracked and admitted"
        );
        assert_eq!(limiter.len(), 1);
        if old_key {
            assert_eq!(limiter.available(&1u8), 0);
        } else {
            assert_eq!(limiter.available(&2u8), 1);
            assert_eq!(limiter.available(&1u8), 2);
        }
        let c = limiter.counters();
        assert_eq!(c.admitted, 2);
        assert_eq!(c.refused_table_full + c.refused, 2);
    });
}

/// A sweep racing an admission: evicting keys 1..=3 shifts the rest of their chains back, so key
/// 4 may move (taken out with a CAS, stored in the gap) while its last token is being taken.
/// Run at no fewer than 3 preemptions (a faulty move, a load then a store instead of the CAS,
/// needs 3 to lose an update).
#[test]
fn sweep_races_an_admission() {
    let mut builder = loom::model::Builder::new();
    if let Some(p) = builder.preemption_bound {
        builder.preemption_bound = Some(p.max(3));
    }
    builder.check(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
        let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 4, clock.clone()));
        for k in 1u8..=4 {
            limiter.try_acquire(&k, 1).unwrap();
        }
        clock.advance(Duration::from_secs(1)); // keys 1..=4 are full
        limiter.try_acquire(&4u8, 1).unwrap(); // key 4 is not: it survives the sweep
        let other = limiter.clone();
        // Key 4's last token: must land on its slot before a move, or on the moved slot.
        let t = thread::spawn(move || other.try_acquire(&4u8, 1).is_ok());
        let evicted = limiter.sweep();
        assert!(t.join().unwrap(), "key 4 held one token");
        assert_eq!(evicted, 3);
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.available(&4u8), 0, "both debits of key 4 are kept");
        assert!(limiter.try_acquire(&4u8, 1).is_err());
    });
}

/// The table growing while another thread takes a tracked key's last token and reads it: key 3
/// starts the migration from the 4-slot region to the 8-slot one, whose first step takes key 1
/// out with a CAS and puts it in the new region. No debit is lost, and `available` never
/// reports the moving key as untracked (full).
#[test]
fn growth_races_an_admission() {
    loom::model(|| {
        let limiter = table_for_four(ManualClock::new(), 2);
        let other = limiter.clone();
        let t = thread::spawn(move || {
            let got = other.try_acquire(&1u8, 1).is_ok();
            (got, other.available(&1u8))
        });
        limiter.try_acquire(&3u8, 1).unwrap(); // starts a migration; its step moves key 1
        let (got, seen) = t.join().unwrap();
        assert!(got, "key 1 held one token");
        assert_eq!(seen, 0, "a key being moved is not reported untracked");
        assert_eq!(limiter.available(&1u8), 0);
        assert_eq!(limiter.available(&2u8), 1);
        assert_eq!(limiter.len(), 3);
    });
}

/// keys 1 and 9 spent their bursts at 0 and fill the table; a decision for
/// key 1 reads the clock at 0.5 s while another thread moves the clock to 1 s and inserts key 2,
/// which evicts both (full at 1 s) to make room, leaving room for key 1 to come back. Whatever the interleaving — the decision's reading before or after the
/// move, its probe before or after the eviction, its CAS failing on the empty slot — key 1's
/// admissions stay within `burst + rate·Δ`: 10 more tokens need a reading of at least 1 s.
#[test]
fn eviction_at_a_later_reading_races_a_decision_at_an_earlier_one() {
    loom::model(|| {
        let clock = ManualClock::new();
        let quota = Quota::per_second(10).unwrap();
        let limiter =
            loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 2, Recording(clock.clone())));
        limiter.try_acquire(&1u8, 10).unwrap();
        limiter.try_acquire(&9u8, 10).unwrap(); // the table is full

        clock.set(Duration::from_millis(500));
        let other = limiter.clone();
        let t = thread::spawn(move || {
            let verdict = other.try_acquire(&1u8, 10);
            (verdict, LAST.with(Cell::get))
        });
        clock.set(Duration::from_secs(1));
        let new_key = limiter.try_acquire(&2u8, 1);
        let (old_key, reading) = t.join().unwrap();
        if old_key.is_ok() {
            // 20 tokens in [0, reading] against a bound of 10 + 10·reading.
            assert!(
                reading >= 1_000_000_000,
                "key 1 re-admitted its burst at the stale reading {reading}"
            );
        }
        assert!(limiter.len() <= 2);
        // Key 2 got a slot only by evicting full buckets.
        assert!(new_key.is_err() || limiter.counters().evicted >= 1);
        if old_key.is_ok() {
            // Its 10 tokens were taken at 1 s: none left at 1 s.
            assert_eq!(limiter.available(&1u8), 0);
        }
    });
}

/// A read racing a growth: `available` for a tracked key that is being moved must not report
/// it untracked (full); it re-checks a miss under the mutex while entries move.
#[test]
fn a_read_racing_a_growth_sees_the_tracked_state() {
    loom::model(|| {
        let limiter = table_for_four(ManualClock::new(), 2);
        let other = limiter.clone();
        let t = thread::spawn(move || other.available(&1u8));
        limiter.try_acquire(&3u8, 1).unwrap(); // starts a migration; its step moves key 1
        assert_eq!(t.join().unwrap(), 1);
    });
}

/// Keys 1, 2 and 3 in a table for 4: the third starts a migration from the 4-slot region to the
/// 8-slot one, whose first step (2 slots under loom) moves key 1 and leaves key 2 in the old
/// region (the fixed seed's homes: key 1 at 2, key 2 at 0 of the old region; keys 3 and 4 at
/// 7 and 0 of the new). Returns the limiter with the migration in progress.
fn mid_migration(clock: ManualClock) -> loom::sync::Arc<KeyedLimiter<u8, Quota, ManualClock>> {
    let limiter = table_for_four(clock, 3);
    assert!(limiter.is_migrating(), "the model must reach a migration");
    limiter
}

/// A table for 4 keys (8 slots, 4 active under loom: the third key grows the region), quota
/// 1/s with burst 2, in which keys `1..=keys` each took one token.
fn table_for_four(
    clock: ManualClock,
    keys: u8,
) -> loom::sync::Arc<KeyedLimiter<u8, Quota, ManualClock>> {
    let quota = Quota::new(1, Duration::from_secs(1), 2).unwrap();
    let limiter = loom::sync::Arc::new(KeyedLimiter::with_clock(quota, 4, clock));
    for k in 1..=keys {
        limiter.try_acquire(&k, 1).unwrap();
    }
    limiter
}

/// A lock-free admission racing a migration step: the decision for key 2 (still in the old
/// region, so its probe reads the new region, then the old one) races the insertion of key 4,
/// whose migration step takes key 2 out of the old region (a CAS to empty, capturing its state)
/// and puts it in the new one, ending the migration. Whatever the interleaving — the decision's
/// CAS before the move (captured), after it (fails, re-probes), its probe of the new region
/// before the move and of the old one after (a miss, not trusted: the move epoch changed) — the
/// debit is kept exactly once and no key is inserted twice.
#[test]
fn an_admission_racing_a_migration_step_is_kept() {
    loom::model(|| {
        let limiter = mid_migration(ManualClock::new());
        let other = limiter.clone();
        let t = thread::spawn(move || (other.try_acquire(&2u8, 1).is_ok(), other.available(&2u8)));
        limiter.try_acquire(&4u8, 1).unwrap(); // the step moving key 2; ends the migration
        let (got, seen) = t.join().unwrap();
        assert!(got, "key 2 held one token");
        assert_eq!(seen, 0, "a key being moved is not reported untracked");
        assert!(!limiter.is_migrating());
        assert_eq!(limiter.len(), 4, "no key inserted twice");
        assert_eq!(limiter.available(&2u8), 0, "the debit survived the move");
        assert!(limiter.try_acquire(&2u8, 1).is_err());
        for k in [1u8, 3, 4] {
            assert_eq!(limiter.available(&k), 1, "key {k}");
        }
        assert_eq!(limiter.counters().admitted, 5);
    });
}

/// Two decisions during a migration and no insertion: each goes past the hot path's probe
/// (which defers to the slow path while migrating), decides with a CAS on whichever slot holds
/// its key, and then helps with one migration step if the mutex is free. One of the steps
/// moves key 2 — possibly while the other thread's CAS on it is in flight — and ends the
/// migration: both debits are kept, nothing is inserted, and no helper ever waits.
#[test]
fn lookups_help_a_migration_while_deciding() {
    loom::model(|| {
        let limiter = mid_migration(ManualClock::new());
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&2u8, 1).is_ok());
        let mine = limiter.try_acquire(&1u8, 1).is_ok();
        assert!(
            mine && t.join().unwrap(),
            "keys 1 and 2 held one token each"
        );
        assert!(
            !limiter.is_migrating(),
            "a helper's step drained the old region"
        );
        assert_eq!(limiter.len(), 3);
        assert_eq!(limiter.available(&1u8), 0);
        assert_eq!(limiter.available(&2u8), 0);
        assert_eq!(limiter.available(&3u8), 1);
    });
}

/// Two threads inserting the same new key, the insertion that starts a migration: the first to
/// take the mutex switches the layout to the 8-slot region and takes the first step (moving key
/// 1), while the other's lock-free probe may run on either layout and before, during or after
/// the move. The key is inserted once, both debits land on its one bucket, and the keys of the
/// old region are not lost. (The table does not fill here: a racing insertion of the same key
/// that fills the table can make the other thread's earlier miss look like "table full", a
/// spurious refusal that does not depend on migrations.)
#[test]
fn a_new_key_racing_the_start_of_a_migration_is_inserted_once() {
    loom::model(|| {
        let limiter = table_for_four(ManualClock::new(), 2);
        assert!(!limiter.is_migrating());
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&3u8, 1));
        let mine = limiter.try_acquire(&3u8, 1);
        let theirs = t.join().unwrap();
        assert!(mine.is_ok() && theirs.is_ok(), "key 3's burst is 2");
        // (The migration may have ended: the second decision, found past the hot path's probe,
        // helps it along with a step of its own.)
        assert_eq!(limiter.len(), 3, "no key inserted twice");
        assert_eq!(limiter.available(&3u8), 0);
        for k in 1u8..=2 {
            assert_eq!(limiter.available(&k), 1, "key {k}");
        }
    });
}

/// A sweep draining the old region (evicting full keys there, moving the others) racing an
/// admission on key 2: either the admission lands first (key 2 is moved, or kept, with its
/// debit) or the eviction does (the admission then re-inserts key 2 from a full state) — one
/// debit either way. Nothing else touches the table before the race: a decision made during
/// the migration would help it along and could finish it, and the sweep would then find no old
/// region to drain (the model had one, and its race never met a drain).
#[test]
fn a_sweep_draining_the_old_region_races_an_admission() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter = mid_migration(clock.clone());
        clock.advance(Duration::from_secs(1)); // keys 1..=3 are full
        assert!(limiter.is_migrating(), "the race starts mid-migration");
        let other = limiter.clone();
        let t = thread::spawn(move || other.try_acquire(&2u8, 2).is_ok());
        let evicted = limiter.sweep();
        assert!(t.join().unwrap(), "key 2 was full: its whole burst");
        assert!(!limiter.is_migrating());
        assert_eq!(limiter.available(&2u8), 0, "the burst taken is kept");
        assert!(limiter.try_acquire(&2u8, 1).is_err(), "and kept once");
        for k in [1u8, 3] {
            assert_eq!(limiter.available(&k), 2, "key {k}: full, evicted or not");
        }
        assert!((1..=3).contains(&evicted), "{evicted}");
        // Key 2 is tracked (moved with its debit, or inserted again); keys 1 and 3 at most.
        assert!((1..=3).contains(&limiter.len()), "{}", limiter.len());
    });
}
