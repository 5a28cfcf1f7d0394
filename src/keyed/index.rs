//! The keyed limiter's index: a flat, open-addressed table of 16-byte slots that we own.
//!
//! # Layout
//!
//! One `Box<[AtomicU128]>` allocated once, never resized. The table's full size is `capacity =
//! max(8, next_power_of_two(2 × max_keys))` slots; entries live in the *current region*, a
//! power-of-two run of slots, linear probing from `fingerprint & (len − 1)`. The region starts
//! at 64 slots (or the whole table, if smaller) and doubles as keys arrive, up to `capacity`, so
//! that live entries fill between about ¼ and ½ of it at every size: a table built for a
//! million keys holding ten thousand keeps them in 512 KiB, not 32 MiB. It never shrinks.
//!
//! A doubling *migrates* the entries from the old region to a new one of twice its size a few
//! at a time (below), so both exist for a while and must not overlap. Regions of size
//! `capacity / 2^k` lie at the front of the buffer (offset 0) for even `k` and at its back
//! (offset `capacity`) for odd `k`: the buffer holds `capacity + capacity / 2` slots (just
//! `capacity` when the first region is the whole table), any two successive regions are
//! disjoint, and a region reuses only slots of regions at least two doublings older, which
//! were emptied when they were migrated from.
//!
//! A slot is one 128-bit word `fingerprint << 64 | state`: the key's 64-bit fingerprint (a
//! seeded hash; `0` = empty, real hashes 0 and 1 are remapped to 2 and 3) and its
//! [`gcra`](crate::gcra) state. **Keys are not stored**: two keys with equal fingerprints share
//! one bucket (see [`KeyedLimiter`](super::KeyedLimiter)'s docs for that trade). 16 bytes per slot
//! and 1.5 × `capacity` slots: 48 to 96 bytes per unit of `max_keys` (50.3 at `max_keys` =
//! 1,000,000), allocated up front as a collection of zeroed atomics (the core forbids
//! `unsafe`, so there is no explicitly zeroed allocation). Optimized builds turn that into a
//! zeroed allocation (`calloc`: fresh pages the OS maps on first touch), so only the pages of
//! the regions used so far become resident — measured on Linux, a table for 2^20 keys holding
//! 10,000 keys adds 0.8 MB of RSS, and 1,000,000 keys 49 MB (both sides of the buffer) — but
//! that is the optimizer's choice, not a guarantee: a debug build writes every page.
//!
//! # Protocol
//!
//! * **Lookup** (lock-free, the hot path): read the layout word (the current region, and whether
//!   a migration is in progress), probe the current region from the home slot with plain 128-bit
//!   loads until the fingerprint matches or a slot is empty, and while migrating then the old
//!   region the same way (the hot path's first probe defers to this slower one during a
//!   migration, below). On a match the decision is a CAS of the *whole* slot from `(fp,
//!   state)` to `(fp, state')`, so it succeeds only while the slot still holds this key: no ABA
//!   through eviction, slot reuse or a move is possible, and a lookup writes nothing but the
//!   key's own slot. A key is never in two slots at once (every move takes it out before it
//!   puts it back), so a fingerprint found in *any* slot, even by a probe that read a layout
//!   long gone, is the key's one live entry.
//! * **Insert, evict, move** happen under one mutex, each in bounded work. An insertion
//!   re-probes under it (so a key is never inserted twice) and writes the empty slot ending its
//!   chain in the current region with one store. Eviction is a CAS from a *full* `(fp, state)`
//!   to empty: a racing admission either lands first (the eviction's CAS fails and the bucket
//!   is no longer full) or fails its own CAS, re-probes, misses and takes the insert path,
//!   which waits on the mutex. The gap is then closed by shifting the rest of the chain back
//!   (linear probing's deletion, so there are no tombstones and no rebuilds to clear them);
//!   each move takes the entry out with a CAS to empty (capturing its state: an admission that
//!   lands first is in the captured word, one that lands later fails) and then stores it in the
//!   gap.
//! * **Growth is a migration.** When an insertion would take live entries past half of a
//!   current region smaller than the table, the region of twice its size becomes current (one
//!   store of the layout word; it is empty) and the old one is drained into it. New keys go to
//!   the new region. Each insertion first examines [`MIGRATE_STEP`](migrate::MIGRATE_STEP) (4) slots of the old region
//!   and moves every entry it meets (taken out with a CAS to empty, capturing its state, then
//!   put in the new region), so no insertion moves more than 4 entries; a sweep step (below)
//!   migrates too, within its own budget. The old region is walked *downwards, starting from
//!   an empty slot* (found by the first visits): every entry taken out is then the last of its
//!   cluster — the slot after it is empty — so no other entry's probe passes through its slot,
//!   and the old region's chains stay intact for lookups without tombstones or shifting. Once
//!   the walk is back at the empty slot it started from, the old region is empty (all zero,
//!   ready for reuse) and the migration ends (one store of the layout word). It starts with at
//!   most `old/2` entries and visits at most `old/2 + old` slots, so it ends within `3 ×
//!   old / 8` insertions, with at most `7/8 × old` entries in the new region of `2 × old`
//!   slots: under half.
//! * **Lookups help.** While a migration is in progress the hot path's first probe returns
//!   "not found" at once (one test of the layout word's flag), and the slow path probes both
//!   regions, decides with its CAS, and then takes one migration step of [`MIGRATE_STEP`](migrate::MIGRATE_STEP) slots
//!   if the mutex is free (`try_lock`: a lookup never waits for it). So a migration ends within
//!   `3 × old / 8` calls that reach the mutex even if no key is inserted any more — otherwise a
//!   key set that stops growing mid-migration would pay for two probes for good.
//! * **Sweeping** is incremental: a cursor walks the current region, at most [`STEP_WORK`](sweep::STEP_WORK)
//!   slots and moves per step (one step per insertion that finds the table full, or per lock
//!   taken by [`KeyedLimiter::sweep`](super::KeyedLimiter::sweep)), evicting the full entries
//!   it meets and keeping the earliest full instant of the others; a completed pass yields a
//!   lower bound on every live entry's full instant. While a migration is in progress a step
//!   first migrates (within the same budget: a slot visited or an entry moved is one unit),
//!   evicting the full entries it meets there instead of moving them; the cursor walks the new
//!   region only once the old one is empty, so evictions never shift chains during a
//!   migration. A migration restarts the pass over the new region, which the cursor
//!   therefore walks only after every moved entry has arrived there; inserted entries, and
//!   shifted ones the step does not evict where they land, fold their full instants into the
//!   pass's bound: when the pass ends (never during a migration), every live entry was
//!   examined in place or folded in on arrival.
//! * **When a lock-free miss can be trusted.** A miss while entries move (a migration step, an
//!   eviction, a shift) can be wrong: a probe of the new region may run before a key is moved
//!   there and its probe of the old region after. Lookups that miss take the insert path and
//!   wait for the mutex, whose re-probe is the only thing that ever concludes "absent". The
//!   table-full refusal without the mutex trusts a miss only if the move epoch (`rebuilds`,
//!   odd while entries move) was even and unchanged around it. A migration *in progress* is
//!   not by itself a move: between steps nothing is in flight, every entry is in the new
//!   region or in an intact chain of the old one, and a lookup probes both. A layout read
//!   before a migration started names the old region, which still holds every entry it held
//!   until a step moves one (and bumps the epoch). A layout read before a migration ended names
//!   the region that is now current, and as old region one that is empty: without a move
//!   during the probe (which would bump the epoch) it was already empty when the probe began
//!   (the last step, if it moved nothing, visited only empty slots); its slots are reused only
//!   by later moves and by insertions of other keys. So a probe around which the epoch stayed
//!   even and unchanged saw every entry that was present throughout it. (A probe's slot load that returns the empty word written by a move's CAS
//!   synchronizes with that CAS, which follows the epoch's odd increment.)
//! * Probing always ends: whenever the mutex is free, the current region holds at most half of
//!   its slots in entries when no migration is in progress, and under `7/8` of half during one
//!   (above; `live ≤ max_keys ≤ capacity / 2` for the whole table), so every probe of it meets
//!   an empty slot; the old region only loses entries. Lock-free probes are also capped at one
//!   region's length (a miss then takes the insert path).
//!
//! Under `--cfg tollgate_loom` the same code runs on loom's mutex and `crate::sync`'s loom
//! `AtomicU128` (a loom mutex per word: every 128-bit load, store and CAS is one model-checked
//! step), so the loom models explore this protocol itself.

mod layout;
mod migrate;
mod probe;
#[cfg(feature = "persist")]
mod scan;
mod slot;
mod sweep;
#[cfg(all(test, not(tollgate_loom)))]
mod tests;

use crate::sync::{AtomicU128, AtomicU64, Mutex, MutexGuard};
use alloc::boxed::Box;
use layout::{capacity, encode, region_in, MIN_ACTIVE};
use migrate::Migration;
#[cfg(feature = "persist")]
pub(crate) use scan::ScanRegion;
pub(crate) use slot::fingerprint;
pub(crate) use sweep::{Step, Sweep};

/// The table. Not generic: it sees only fingerprints.
pub(crate) struct Index {
    slots: Box<[AtomicU128]>,
    /// The whole table's length in slots (the largest region), a power of two.
    cap: usize,
    /// The current region and whether a migration is in progress ([`encode`]). Written only
    /// under the mutex, when a migration starts or ends; read with `Acquire` by every probe.
    layout: AtomicU64,
    /// Odd while entries move (a migration step, or an eviction shifting its chain back);
    /// incremented before and after: a lock-free miss is only trusted if this did not change
    /// around it.
    rebuilds: AtomicU64,
    /// Serializes every change of a fingerprint or of `layout`.
    lock: Mutex<Meta>,
}

/// What the mutex guards: the live count, the incremental sweep's position and the migration.
struct Meta {
    live: usize,
    /// The slot (of the current region, in [`visit_order`](sweep::visit_order)) the sweep examines next.
    cursor: usize,
    /// Slots the current pass has still to examine.
    pass_left: usize,
    /// The earliest full instant of the entries this pass saw not full, or that were inserted
    /// since it began, or that an eviction's shift moved and the step neither reported nor
    /// evicted where they landed (`shift_back`, `evict_landed`): when the pass ends, a lower
    /// bound on every live entry's full instant. Entries a migration moves need no folding:
    /// the pass restarts when a migration starts, and its cursor walks the new region only
    /// once the migration has ended, so it examines them where they landed.
    pass_min: u64,
    /// The migration in progress, if any.
    migration: Option<Migration>,
    /// Passes restarted by a migration's start (the sweep's progress through a pass no longer
    /// counts then: see [`Locked::restarts`]).
    restarts: u64,
    /// Entries moved from an old region to a new one, ever (counted for the tests).
    #[cfg(test)]
    migrated: u64,
}

impl Index {
    /// A table for at most `max_keys` live entries.
    pub(crate) fn new(max_keys: usize) -> Self {
        let cap = capacity(max_keys);
        let first = MIN_ACTIVE.min(cap);
        // Room for the regions at the back (half the table at most) unless there is only one.
        let len = if first == cap { cap } else { cap + cap / 2 };
        let region = region_in(cap, first);
        Index {
            slots: (0..len).map(|_| AtomicU128::new(0)).collect(),
            cap,
            layout: AtomicU64::new(encode(region, false)),
            rebuilds: AtomicU64::new(0),
            lock: Mutex::new(Meta {
                live: 0,
                cursor: 0,
                pass_left: first,
                pass_min: u64::MAX,
                migration: None,
                restarts: 0,
                #[cfg(test)]
                migrated: 0,
            }),
        }
    }

    /// Takes the mutex: the only way to insert, move or remove.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            index: self,
            meta: self.lock.lock(),
        }
    }

    /// Takes the mutex if it is free now (a lookup helping a migration along never waits).
    pub(crate) fn try_lock(&self) -> Option<Locked<'_>> {
        self.lock
            .try_lock()
            .map(|meta| Locked { index: self, meta })
    }
}

/// The index with its mutex held.
pub(crate) struct Locked<'a> {
    index: &'a Index,
    meta: MutexGuard<'a, Meta>,
}

impl Locked<'_> {
    /// Whether `fp` is tracked. Exact: only the mutex holder changes fingerprints.
    pub(crate) fn contains(&self, fp: u64) -> bool {
        self.index.find(fp).is_some()
    }

    /// The number of slots of the current region (one sweep pass examines this many).
    pub(crate) fn active(&self) -> usize {
        self.index.region().len()
    }

    /// Whether a migration is in progress: a sweep step then drains the old region first.
    pub(crate) fn migrating(&self) -> bool {
        self.meta.migration.is_some()
    }

    /// How many times a migration's start has restarted the sweep's pass (over the new
    /// region, from its first slot): a caller counting the slots its steps examined starts
    /// counting again when this changes.
    pub(crate) fn restarts(&self) -> u64 {
        self.meta.restarts
    }

    /// Inserts `fp` (not tracked: checked with [`contains`](Locked::contains) under this same
    /// lock) with `state`, first full at `full_at_new` (folded into the sweep pass's bound).
    /// Starts a migration to a region of twice the size if live entries would pass half of the
    /// current one, and takes one migration step of [`MIGRATE_STEP`](migrate::MIGRATE_STEP) old slots while one is in
    /// progress.
    pub(crate) fn insert(&mut self, fp: u64, state: u64, full_at_new: u64) {
        let ix = self.index;
        if self.meta.migration.is_none() {
            let r = ix.region();
            if r.len() < ix.cap && (self.meta.live + 1) * 2 > r.len() {
                self.start_migration(r);
            }
        }
        self.help_migrate();
        self.put(fp, state);
        self.meta.live += 1;
        self.meta.pass_min = self.meta.pass_min.min(full_at_new);
    }
}
