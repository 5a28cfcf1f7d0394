use super::layout::*;
use super::migrate::*;
use super::slot::*;
use super::sweep::*;
use super::*;
use crate::sync::Ordering;
use crate::test_support::Xorshift;
use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

/// Fingerprints spread over the table.
fn fp(i: u64) -> u64 {
    fingerprint(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
}

/// A fixed-seed generator ([`Xorshift`]) as a closure.
fn rng(s: u64) -> impl FnMut() -> u64 {
    let mut x = Xorshift(s);
    move || x.next()
}

/// Inserts `fp` with `state` (full at `state`: the tests' states are their full instants).
fn insert(ix: &Index, fp: u64, state: u64) {
    let mut locked = ix.lock();
    assert!(!locked.contains(fp));
    locked.insert(fp, state, state);
}

/// A whole sweep at reading 5 evicting the keys `evict` says; returns how many.
fn sweep(ix: &Index, evict: impl Fn(u64) -> bool) -> u64 {
    ix.sweep_all(|locked| locked.sweep_step(5, |f, _| if evict(f) { 0 } else { 7 }, || ()))
}

fn used(ix: &Index) -> usize {
    ix.slots
        .iter()
        .filter(|s| s.load(Ordering::Relaxed) != 0)
        .count()
}

/// Entries in region `r`.
fn used_in(ix: &Index, r: Region) -> usize {
    (0..r.len())
        .filter(|&i| ix.slots[r.at(i)].load(Ordering::Relaxed) != 0)
        .count()
}

/// Whether `f`'s slot lies in region `r`.
fn in_region(ix: &Index, r: Region, f: u64) -> bool {
    let (slot, _) = ix.find(f).unwrap();
    (0..r.len()).any(|j| core::ptr::eq(&ix.slots[r.at(j)], slot))
}

/// The layout's invariants with the mutex free: slots outside the current (and old) region
/// are empty, the current region is at most half full, the live count is exact.
fn check_layout(ix: &Index) {
    let layout = ix.layout();
    let new = decode(layout);
    let old = (layout & MIGRATING != 0).then(|| old_of(ix.cap, new));
    assert!(new.base + new.len() <= ix.slots.len());
    for (i, s) in ix.slots.iter().enumerate() {
        let inside = |r: Region| (r.base..r.base + r.len()).contains(&i);
        if !inside(new) && !old.is_some_and(inside) {
            assert_eq!(s.load(Ordering::Relaxed), 0, "slot {i} outside the regions");
        }
    }
    assert!(
        used_in(ix, new) * 2 <= new.len(),
        "current region over half"
    );
    assert_eq!(used(ix), ix.lock().meta.live);
    assert_eq!(old.is_some(), ix.lock().migrating());
}

#[test]
fn the_visit_order_is_a_scattered_permutation() {
    for mask in [3usize, 7, 63, 4095] {
        let mut seen = vec![false; mask + 1];
        for c in 0..=mask {
            seen[visit_order(c, mask)] = true;
        }
        assert!(seen.iter().all(|&s| s), "mask {mask}");
    }
    let order: Vec<usize> = (0..16).map(|c| visit_order(c, 63)).collect();
    assert_eq!(
        order,
        [0, 1, 2, 3, 32, 33, 34, 35, 16, 17, 18, 19, 48, 49, 50, 51]
    );
}

#[test]
fn markers_are_never_fingerprints() {
    assert_eq!(fingerprint(0), 1);
    assert_eq!(fingerprint(1), 1);
    assert_eq!(fingerprint(2), 3);
    assert_eq!(fingerprint(u64::MAX), u64::MAX);
}

#[test]
fn capacity_is_twice_max_keys_rounded_up_plus_half_for_migrations() {
    assert_eq!(Index::plain(0).cap, 8);
    assert_eq!(Index::plain(0).slots.len(), 8, "one region: no room needed");
    assert_eq!(Index::plain(32).slots.len(), 64);
    assert_eq!(Index::plain(33).cap, 128);
    assert_eq!(Index::plain(33).slots.len(), 192);
    assert_eq!(Index::plain(1 << 20).cap, 1 << 21);
    assert_eq!(Index::plain(1_000_000).cap, 1 << 21);
    assert_eq!(Index::plain(1_000_000).slots.len(), 3 << 20);
    assert_eq!(Index::plain(1_000_000).region().len(), MIN_ACTIVE);
    assert_eq!(capacity(usize::MAX), MAX_CAPACITY);
    assert_eq!(capacity(MAX_CAPACITY), MAX_CAPACITY);
}

#[test]
fn regions_alternate_between_the_front_and_the_back() {
    let cap = 1 << 10;
    let mut len = cap;
    let mut sides = Vec::new();
    while len >= 64 {
        let r = region_in(cap, len);
        assert!(r.base + r.len() <= cap + cap / 2);
        sides.push(r.base);
        len /= 2;
    }
    assert_eq!(sides, [0, cap, 0, cap, 0]);
    // Layout words round-trip, at the largest table too.
    let r = region_in(MAX_CAPACITY, MAX_CAPACITY / 2);
    assert_eq!(decode(encode(r, true)), r);
    assert_eq!(encode(r, true) & MIGRATING, MIGRATING);
    assert_eq!(decode(encode(r, false)), r);
}

/// From 64 slots to the whole table of 2^17, one key at a time: no insertion moves more than
/// `MIGRATE_STEP` entries, the region doubles, stays ¼ to ½ full, and every key keeps its state.
#[test]
fn grows_from_64_slots_to_the_whole_table_with_bounded_moves_per_insert() {
    let max = 1 << 16;
    let ix = Index::plain(max);
    let mut sizes = vec![ix.region().len()];
    let mut max_moves = 0;
    let mut migrations_seen = 0;
    for i in 0..max as u64 {
        let before = ix.lock().meta.migrated;
        insert(&ix, fp(i), i + 10);
        let locked = ix.lock();
        let moved = locked.meta.migrated - before;
        assert!(moved <= MIGRATE_STEP as u64, "insert {i} moved {moved}");
        max_moves = max_moves.max(moved);
        let len = locked.active();
        let live = locked.meta.live;
        let migrating = locked.migrating();
        drop(locked);
        if len != *sizes.last().unwrap() {
            assert_eq!(len, sizes.last().unwrap() * 2, "doubles");
            sizes.push(len);
        }
        migrations_seen += usize::from(migrating);
        assert!(live * 2 <= len || len == ix.cap, "over half at {i}");
        if !migrating && len > MIN_ACTIVE {
            assert!(live * 4 >= len, "under a quarter at {i}: {live} in {len}");
        }
        if i % 4096 == 4095 || i < 300 {
            check_layout(&ix);
        }
    }
    assert_eq!(max_moves, MIGRATE_STEP as u64);
    assert!(migrations_seen > 1000);
    assert_eq!(
        sizes,
        (6..=17).map(|b| 1usize << b).collect::<Vec<_>>(),
        "64 to the whole table"
    );
    for i in 0..max as u64 {
        assert_eq!(ix.load(fp(i)), Some(i + 10));
    }
    check_layout(&ix);
}

/// Inserts keys until a migration from an old region of at least `min_old` slots is in
/// progress with entries left in it; returns the keys inserted.
fn mid_migration(ix: &Index, min_old: usize) -> u64 {
    let mut n = 0;
    loop {
        insert(ix, fp(n), n + 10);
        n += 1;
        let layout = ix.layout();
        let old = old_of(ix.cap, decode(layout));
        if layout & MIGRATING != 0 && old.len() >= min_old && used_in(ix, old) >= 8 {
            return n;
        }
    }
}

#[test]
fn lookups_during_a_migration_find_keys_in_both_regions() {
    let ix = Index::plain(1 << 12);
    let n = mid_migration(&ix, 0);
    let layout = ix.layout();
    let (new, old) = (decode(layout), old_of(ix.cap, decode(layout)));
    assert!(used_in(&ix, new) > 0 && used_in(&ix, old) > 0);
    let in_new = (0..n).filter(|&i| in_region(&ix, new, fp(i))).count();
    assert!(in_new > 0 && in_new < n as usize, "{in_new} of {n} moved");
    let epoch = ix.rebuild_epoch();
    for i in 0..n {
        assert_eq!(ix.load(fp(i)), Some(i + 10));
        assert!(ix.lock().contains(fp(i)));
        // The hot path's probe defers to the slow path; `apply` probes both regions.
        assert!(ix.lookup(fp(i)).is_none());
        assert_eq!(
            ix.apply(fp(i), |_| Err::<Option<u64>, _>(())),
            Some(Err(()))
        );
    }
    // A miss between steps is exact: nothing moves, so the epoch stays even.
    assert_eq!(ix.load(fp(1 << 40)), None);
    assert_eq!(epoch % 2, 0);
    assert_eq!(ix.rebuild_epoch(), epoch, "lookups move nothing");
    check_layout(&ix);
}

#[test]
fn every_state_survives_a_migration_and_decisions_land_during_it() {
    let ix = Index::plain(1 << 12);
    let n = mid_migration(&ix, 0);
    let mut model: BTreeMap<u64, u64> = (0..n).map(|i| (fp(i), i + 10)).collect();
    let mut next = rng(7);
    let mut k = n;
    while ix.lock().migrating() {
        // Decisions on random keys, in whichever region they are, then one insertion.
        for _ in 0..4 {
            let f = fp(next() % k);
            assert_eq!(ix.apply(f, |s| Ok::<_, ()>(Some(s + 3))), Some(Ok(())));
            *model.get_mut(&f).unwrap() += 3;
            // The hot path's probe defers to the slow path while migrating.
            assert!(ix.lookup(f).is_none());
        }
        insert(&ix, fp(k), k);
        model.insert(fp(k), k);
        k += 1;
        for (&f, &s) in &model {
            assert_eq!(ix.load(f), Some(s));
        }
    }
    check_layout(&ix);
    assert_eq!(ix.lock().meta.live, model.len());
}

/// A migration that no insertion finishes: lookups' steps (`help_migrate`) drain the old
/// region within `1.5 × old / MIGRATE_STEP`; then every key is on the hot path's probe again.
#[test]
fn lookups_help_a_migration_to_its_end() {
    let ix = Index::plain(1 << 12);
    let n = mid_migration(&ix, 512);
    let mut helps = 0;
    while ix.lock().migrating() {
        let before = ix.lock().meta.migrated;
        ix.try_lock().unwrap().help_migrate();
        assert!(ix.lock().meta.migrated - before <= MIGRATE_STEP as u64);
        helps += 1;
        assert!(
            helps <= 3 * 512 / (2 * MIGRATE_STEP),
            "{helps} steps: at most 1.5 × old / MIGRATE_STEP"
        );
    }
    assert!(helps >= 512 / MIGRATE_STEP / 2);
    for i in 0..n {
        assert_eq!(ix.lookup(fp(i)).map(|h| h.state()), Some(i + 10));
    }
    // Outside a migration a step does nothing.
    let before = ix.lock().meta.migrated;
    ix.try_lock().unwrap().help_migrate();
    assert_eq!(ix.lock().meta.migrated, before);
    let held = ix.lock();
    assert!(ix.try_lock().is_none(), "never waits for the mutex");
    drop(held);
    check_layout(&ix);
}

/// Sweep steps during a migration evict the old region's full entries there and move the
/// others; the new region waits until it is drained; the pass that ends covers both regions'
/// entries, including those inserted during the migration.
#[test]
fn sweeps_during_a_migration_evict_in_both_regions_and_bound_every_entry() {
    // An old region of 1,024 slots: drained over several steps.
    let ix = Index::plain(1 << 12);
    let n = mid_migration(&ix, 1024);
    // Entries inserted during the migration: in the new region, one with the smallest full
    // instant of all survivors.
    insert(&ix, fp(n), 6);
    insert(&ix, fp(n + 1), 100);
    let gone = |f: u64| (0..n).step_by(3).any(|i| fp(i) == f);
    let mut evicted = 0;
    let mut evicted_draining = 0;
    let mut steps_migrating = 0;
    let bound = loop {
        let mut locked = ix.lock();
        let was = locked.migrating();
        let step = locked.sweep_step(5, |f, s| if gone(f) { 0 } else { s.max(7) }, || ());
        if was {
            steps_migrating += 1;
            assert!(step.migrated > 0);
            if locked.migrating() {
                assert_eq!(step.examined, 0, "the new region waits for the drain");
                evicted_draining += step.evicted;
            }
        }
        evicted += step.evicted;
        if let Some(b) = step.pass_done {
            assert!(!locked.migrating(), "no pass ends during a migration");
            break b;
        }
    };
    assert!(steps_migrating >= 1);
    assert!(evicted_draining > 0, "evictions in the old region");
    assert_eq!(evicted, n.div_ceil(3));
    assert_eq!(bound, 6, "the earliest survivor, in the new region");
    for i in 0..n {
        let want = (!gone(fp(i))).then_some(i + 10);
        assert_eq!(ix.load(fp(i)), want, "key {i}");
    }
    assert_eq!(ix.load(fp(n)), Some(6));
    check_layout(&ix);
}

/// A pass across a migration finished by insertions still bounds an entry that was in the
/// old region (examined where it landed).
#[test]
fn a_pass_covers_entries_moved_by_insertions() {
    let ix = Index::plain(1 << 12);
    let n = mid_migration(&ix, 0);
    // The earliest-full entry is one still in the old region.
    let old = old_of(ix.cap, ix.region());
    let in_old = (0..n).find(|&i| in_region(&ix, old, fp(i))).unwrap();
    assert!(ix.apply(fp(in_old), |_| Ok::<_, ()>(Some(1))).is_some());
    let mut k = n;
    while ix.lock().migrating() {
        insert(&ix, fp(k), k + 10);
        k += 1;
    }
    let bound = loop {
        if let Some(b) = ix.lock().sweep_step(0, |_, s| s, || ()).pass_done {
            break b;
        }
    };
    assert_eq!(bound, 1);
}

/// Random insertions, decisions and evictions across many migrations against a map: every
/// survivor is found with its state, and slots outside the regions stay empty.
#[test]
fn random_operations_across_migrations_against_a_map() {
    let mut next = rng(0x1234_5678_9ABC_DEF1);
    let ix = Index::plain(3000);
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut evictions = 0;
    for round in 0..6_000u64 {
        let r = next() % 10;
        if r < 6 && model.len() < 3000 {
            let f = fp(next() % 10_000);
            model.entry(f).or_insert_with(|| {
                insert(&ix, f, round);
                round
            });
        } else if r < 9 {
            if let Some(&f) = model.keys().nth((next() % 16) as usize) {
                assert_eq!(ix.apply(f, |s| Ok::<_, ()>(Some(s + 1))), Some(Ok(())));
                *model.get_mut(&f).unwrap() += 1;
            }
        } else {
            // One sweep step evicting the entries with an odd state.
            let step = ix
                .lock()
                .sweep_step(5, |_, s| if s % 2 == 1 { 0 } else { 9 }, || ());
            evictions += step.evicted;
            let before = model.len();
            model.retain(|&f, _| ix.load(f).is_some());
            assert_eq!((before - model.len()) as u64, step.evicted);
        }
        if round % 64 == 0 {
            check_layout(&ix);
            for (&f, &s) in &model {
                assert_eq!(ix.load(f), Some(s), "round {round}");
            }
        }
    }
    assert!(evictions > 100);
    assert_eq!(ix.lock().meta.live, model.len());
}

/// Every pass bound is at most every entry's full instant (its state here), through
/// migrations from 64 slots to 4,096, insertions, decisions, lookups' migration steps and
/// evictions between sweep steps, over six seeds. Fails without the insertions' fold or the
/// pass restart at a migration's start.
#[test]
fn every_pass_bound_holds_across_migrations() {
    let (mut passes, mut evicted, mut moved, mut mid_pass) = (0, 0, 0, 0);
    for seed in 1..=6u64 {
        let mut next = rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let ix = Index::plain(1 << 12);
        let inserts = 3 + next() % 4;
        let decisions = inserts + 1 + next() % 3;
        let spread = 1000 + next() % 4000;
        let mut keys: Vec<u64> = Vec::new();
        let mut now = 0;
        for round in 0..12_000u64 {
            if next() % 4 == 0 {
                now += next() % 4;
            }
            let r = next() % 10;
            if r < inserts && ix.lock().meta.live < 1800 {
                let f = fp(next() % 1_000_000);
                let mut locked = ix.lock();
                if !locked.contains(f) {
                    let full = now + next() % spread;
                    let (restarts, examined) =
                        (locked.restarts(), locked.meta.pass_left < ix.region().len());
                    locked.insert(f, full, full);
                    keys.push(f);
                    if locked.restarts() > restarts && examined {
                        mid_pass += 1;
                    }
                }
            } else if r < decisions && !keys.is_empty() {
                let f = keys[(next() % keys.len() as u64) as usize];
                let add = next() % 7;
                // Evicted keys are `None` here: nothing to decide.
                let _ = ix.apply(f, |s| Ok::<_, ()>(Some(s + add)));
                if next() % 3 == 0 {
                    ix.lock().help_migrate();
                }
            } else {
                let step = ix.lock().sweep_step(now, |_, s| s, || ());
                evicted += step.evicted;
                if let Some(bound) = step.pass_done {
                    passes += 1;
                    let least = ix
                        .slots
                        .iter()
                        .map(|w| w.load(Ordering::Acquire))
                        .filter(|&w| fp_of(w) != EMPTY)
                        .map(state_of)
                        .min()
                        .unwrap_or(u64::MAX);
                    assert!(
                        bound <= least,
                        "seed {seed}, round {round}: bound {bound} > {least}"
                    );
                }
            }
            if keys.len() > 8_000 {
                keys.retain(|&f| ix.load(f).is_some());
            }
        }
        let locked = ix.lock();
        assert_eq!(
            locked.restarts(),
            6,
            "seed {seed}: 64 slots doubled to 4,096"
        );
        moved += locked.meta.migrated;
    }
    // Migrations that started after the pass had examined part of the region: the case
    // the pass restart is for.
    assert!(mid_pass >= 6, "{mid_pass} migrations started mid-pass");
    assert!(
        passes > 100 && evicted > 5_000 && moved > 5_000,
        "{passes} {evicted} {moved}"
    );
}

#[test]
fn grows_keeps_every_state_and_decides_in_place() {
    let ix = Index::plain(1000);
    for i in 0..1000 {
        insert(&ix, fp(i), i + 10);
    }
    assert_eq!(ix.region().len(), 2048, "grew to the whole table");
    for i in 0..1000 {
        assert_eq!(ix.load(fp(i)), Some(i + 10));
    }
    assert_eq!(ix.load(fp(5000)), None);
    // A decision writes the new state; a refusal writes nothing; a missing key is `None`.
    assert_eq!(ix.apply(fp(3), |s| Ok::<_, ()>(Some(s + 1))), Some(Ok(())));
    assert_eq!(ix.load(fp(3)), Some(14));
    assert_eq!(
        ix.apply(fp(3), |_| Err::<Option<u64>, _>("no")),
        Some(Err("no"))
    );
    assert_eq!(ix.load(fp(3)), Some(14));
    assert_eq!(ix.apply(fp(5000), |s| Ok::<_, ()>(Some(s))), None);
}

#[test]
fn evictions_shift_chains_back_and_keep_every_survivor() {
    let ix = Index::plain(64); // 128 slots
    for i in 0..64 {
        insert(&ix, fp(i), i + 1);
    }
    assert_eq!(ix.region().len(), 128);
    assert_eq!(sweep(&ix, |f| (0..30).any(|i| fp(i) == f)), 30);
    for i in 0..30 {
        assert_eq!(ix.load(fp(i)), None);
    }
    for i in 30..64 {
        assert_eq!(ix.load(fp(i)), Some(i + 1));
    }
    assert_eq!(used(&ix), 34, "no markers left behind");
    for i in 100..130 {
        insert(&ix, fp(i), i);
    }
    assert_eq!(sweep(&ix, |f| (30..64).any(|i| fp(i) == f)), 34);
    for i in 100..130 {
        assert_eq!(ix.load(fp(i)), Some(i));
    }
    assert_eq!(used(&ix), 30);
    assert_eq!(ix.lock().meta.live, 30);
}

/// One pass evicts every full entry, also one that an eviction's gap moves back behind the
/// cursor (`evict_landed`; without it some of these tables keep one): random tables with
/// colliding homes and fewer than `STEP_EVICTIONS` full entries.
#[test]
fn a_sweep_evicts_full_entries_moved_behind_its_cursor() {
    let mut next = rng(0x0DDB_1A5E_5EED_0001);
    let mut tables = 0;
    while tables < 2_000 {
        // 64 slots, all active; homes packed into a few lines: long chains that cross line
        // boundaries.
        let ix = Index::plain(32);
        let base = next() % 64;
        let n = 8 + next() % 24;
        let mut full = BTreeMap::new();
        for k in 0..n {
            let home = (base + next() % 12) & 63;
            let f = (k << 8) | home | 0x1_0000_0000;
            // Inserted full at 7 (the pass folds that in): only the sweep's `full_at`
            // makes some of them full at 5.
            insert(&ix, f, 7);
            full.insert(f, next() % 3 == 0);
        }
        if full.values().filter(|&&x| x).count() as u64 >= STEP_EVICTIONS {
            continue;
        }
        let step = ix
            .lock()
            .sweep_step(5, |f, _| if full[&f] { 0 } else { 7 }, || ());
        assert_eq!((step.examined, step.moved_full), (64, 0));
        // The pass's bound is the survivors' (full at 7), not an evicted entry's.
        assert_eq!(step.pass_done, Some(7));
        for (&f, &is_full) in &full {
            assert_eq!(ix.load(f).is_some(), !is_full, "entry {f:#x}");
        }
        tables += 1;
    }
}

/// Clusters long enough to reach both fallbacks of `evict_landed` (its budget, landings 64
/// slots or more away): a whole sweep still evicts every full entry and keeps the rest.
#[test]
fn sweeps_of_long_clusters_evict_every_full_entry_and_keep_the_rest() {
    let mut next = rng(0x005E_ED0F_C1A5_7E25);
    let mut left = 0;
    for round in 0..300 {
        let keys = [128u64, 500][round % 2];
        let ix = Index::plain(keys as usize);
        let spread = 8 + next() % 100;
        let base = next();
        let mut full = BTreeMap::new();
        for k in 0..keys {
            let f = fingerprint(((base + next() % spread) & 0xFFFF) | (k << 16) | 1 << 40);
            if full.contains_key(&f) || ix.lock().contains(f) {
                continue;
            }
            insert(&ix, f, 7);
            full.insert(f, next() % 2 == 0);
        }
        ix.sweep_all(|locked| {
            let step = locked.sweep_step(5, |f, _| if full[&f] { 0 } else { 7 }, || ());
            left += step.moved_full;
            step
        });
        for (&f, &is_full) in &full {
            assert_eq!(ix.load(f), (!is_full).then_some(7), "round {round}, {f:#x}");
        }
        check_layout(&ix);
    }
    assert!(
        left > 0,
        "no step left a moved entry: the fallback is not tested"
    );
}

/// A migration started between two steps of a sweep restarts its count over the new region,
/// so it still evicts every full entry, even when lookups (which move entries without
/// examining them) finish the migration.
#[test]
fn a_sweep_restarted_by_a_migration_still_evicts_every_full_entry() {
    let ix = Index::plain(1 << 12);
    // 1,500 entries, every 50th full: a region of 4,096 slots.
    let is_full = |i: u64| i % 50 == 0;
    let full = |f: u64| (0..1_500).any(|i| is_full(i) && fp(i) == f);
    for i in 0..1_500 {
        insert(&ix, fp(i), 7);
    }
    assert_eq!(ix.region().len(), 4_096);
    let mut sweep = Sweep::default();
    let mut doubled = false;
    loop {
        let mut locked = ix.lock();
        sweep.before(&locked);
        let step = locked.sweep_step(5, |f, _| if full(f) { 0 } else { 7 }, || ());
        let done = sweep.after(&locked, &step);
        drop(locked);
        if !doubled && sweep.examined >= 2_500 {
            // Most of the way through the pass: insertions until the table doubles, and
            // lookups that finish moving every entry.
            assert!(!done);
            let mut k = 10_000;
            while !ix.lock().migrating() {
                insert(&ix, fp(k), 7);
                k += 1;
            }
            while ix.lock().migrating() {
                ix.lock().help_migrate();
            }
            doubled = true;
        } else if done {
            assert!(doubled);
            break;
        }
    }
    assert_eq!(
        ix.lock().restarts(),
        1 + 6,
        "six doublings from 64 slots, then ours"
    );
    for i in 0..1_500 {
        assert_eq!(ix.load(fp(i)).is_some(), !is_full(i), "entry {i}");
    }
}

/// Long colliding chains wrapping past the region's end: random inserts and evictions against
/// a map, every survivor found, nothing stored twice.
#[test]
fn shifting_back_colliding_and_wrapping_chains() {
    let mut next = rng(0x1234_5678_9ABC_DEF1);
    let ix = Index::plain(32); // 64 slots, all active
    assert_eq!(ix.region().mask, 63);
    // Homes 61..=63 and 0..=1 only: chains collide and wrap around the end.
    let key = |k: u64| (k << 8) | [61, 62, 63, 0, 1][(k % 5) as usize] | 0x1_0000_0000;
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    for round in 0..2_000u64 {
        if model.len() < 32 && next() % 3 != 0 {
            let k = key(next() % 200);
            if !ix.lock().contains(k) {
                insert(&ix, k, round);
                model.insert(k, round);
            }
        } else {
            let victim = next() % 200;
            let evicted = sweep(&ix, |f| f == key(victim));
            assert_eq!(evicted, u64::from(model.remove(&key(victim)).is_some()));
        }
        for (&k, &v) in &model {
            assert_eq!(ix.load(k), Some(v), "round {round}");
        }
        assert_eq!(used(&ix), model.len());
    }
}

/// Draining an old region whose chains collide and wrap around its end keeps every entry
/// reachable at every step.
#[test]
fn draining_colliding_and_wrapping_chains_keeps_them_reachable() {
    let ix = Index::plain(1 << 10);
    // Homes 61..=63 and 0..=1 of the 64-slot region only.
    let key = |k: u64| (k << 12) | [61, 62, 63, 0, 1][(k % 5) as usize] | 0x1_0000_0000;
    for k in 0..32 {
        insert(&ix, key(k), k);
    }
    assert!(!ix.lock().migrating());
    insert(&ix, key(32), 32); // starts the migration
    let mut k = 33;
    while ix.lock().migrating() {
        for j in 0..k {
            assert_eq!(ix.load(key(j)), Some(j), "key {j} after {k}");
            // Lock-free and exact: the walk leaves every chain intact between steps.
            assert!(ix.find(key(j)).is_some());
        }
        insert(&ix, key(k), k);
        k += 1;
    }
    check_layout(&ix);
}

#[test]
fn a_step_does_bounded_work_and_a_pass_yields_the_earliest_full_instant() {
    let ix = Index::plain(1 << 16);
    for i in 0..30_000 {
        ix.lock().insert(fp(i), i, 100);
    }
    let active = ix.region().len();
    assert_eq!(
        active,
        1 << 16,
        "30,000 keys: between ¼ and ½ of the region"
    );
    assert!(!ix.lock().migrating());
    let mut steps = 0;
    let bound = loop {
        steps += 1;
        let step = ix
            .lock()
            .sweep_step(1, |f, _| if f == fp(777) { 5 } else { 9 }, || ());
        assert!(step.examined <= STEP_WORK);
        if let Some(b) = step.pass_done {
            break b;
        }
    };
    assert_eq!(steps, active / STEP_WORK);
    assert_eq!(bound, 5);
}

/// An eviction of an unchanged word runs its hook (which frees a record) once, even where a
/// weak CAS may fail spuriously (Miri's do).
#[test]
fn an_eviction_of_an_unchanged_word_runs_its_hook_once() {
    for _ in 0..64 {
        let word = pack(5, 7);
        let slot = crate::sync::AtomicU128::new(word);
        let mut calls = 0;
        let evicted = evict_if_full(&slot, word, 10, &mut |_, _| 0, &mut || calls += 1);
        assert_eq!(evicted, Ok(()));
        assert_eq!(calls, 1);
        assert_eq!(slot.load(Ordering::Relaxed), 0);
    }
}

/// Fingerprints in arithmetic progression (a state file may hold any) spread as random ones do
/// under every secret: 2,500 of each family in 8,192 slots under 1,000 fixed-seed secrets, the
/// longest linear-probe displacement under 64 (random fingerprints' is about 20 there).
#[test]
fn fingerprints_in_progression_spread_under_every_secret() {
    let mut next = rng(0x5EC2_E7D0_0000_0001);
    type Family = (&'static str, fn(u64) -> u64);
    let families: [Family; 3] = [
        ("(i + 1) << 32 | 1", |i| (i + 1) << 32 | 1),
        ("2i + 1", |i| 2 * i + 1),
        ("i << 16 | 1", |i| i << 16 | 1),
    ];
    let slots = 8192;
    for _ in 0..1000 {
        let secret = [next(), next()];
        let ix = Index::with_secret(slots / 2, secret);
        for (name, f) in families {
            let mut taken = vec![false; slots];
            let mut longest = 0;
            for i in 0..2500 {
                let home = ix.home(f(i));
                let mut d = 0;
                while taken[home.wrapping_add(d) & (slots - 1)] {
                    d += 1;
                }
                taken[home.wrapping_add(d) & (slots - 1)] = true;
                longest = longest.max(d);
            }
            assert!(
                longest < 64,
                "{name}, secret {secret:x?}: a run of {longest}"
            );
        }
    }
}
