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
//!   the new region. Each insertion first examines [`MIGRATE_STEP`] (4) slots of the old region
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
//!   regions, decides with its CAS, and then takes one migration step of [`MIGRATE_STEP`] slots
//!   if the mutex is free (`try_lock`: a lookup never waits for it). So a migration ends within
//!   `3 × old / 8` calls that reach the mutex even if no key is inserted any more — otherwise a
//!   key set that stops growing mid-migration would pay for two probes for good.
//! * **Sweeping** is incremental: a cursor walks the current region, at most [`STEP_WORK`]
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

use crate::sync::{AtomicU128, AtomicU64, Mutex, MutexGuard, Ordering};
use alloc::boxed::Box;

/// Fingerprint of a free slot.
const EMPTY: u64 = 0;

/// Maps a 64-bit hash to a fingerprint (never [`EMPTY`]; 0 and 1 become 2 and 3, so that the
/// fingerprints of earlier layouts, which reserved 1, keep their meaning).
#[inline]
pub(crate) fn fingerprint(hash: u64) -> u64 {
    if hash < 2 {
        hash + 2
    } else {
        hash
    }
}

#[inline]
fn pack(fp: u64, state: u64) -> u128 {
    (u128::from(fp) << 64) | u128::from(state)
}

#[inline]
fn fp_of(word: u128) -> u64 {
    (word >> 64) as u64
}

#[inline]
fn state_of(word: u128) -> u64 {
    word as u64
}

/// The smallest region, in slots (or the whole table, if smaller).
#[cfg(not(tollgate_loom))]
const MIN_ACTIVE: usize = 64;
/// Under loom, 4: a table for 4 keys (8 slots) then migrates once, so the models reach a
/// migration.
#[cfg(tollgate_loom)]
const MIN_ACTIVE: usize = 4;

/// The largest table: 2^30 slots (`max_keys` above 2^29 is clamped), so a region's offset and
/// mask fit the layout word's 31-bit fields, and the buffer's length a 32-bit `usize`.
const MAX_CAPACITY: usize = 1 << 30;

/// Old-region slots one insertion examines during a migration, moving every entry among them:
/// at most this many moves per insertion. At least 3 keeps the new region under half full
/// when the migration ends (module docs); 4 leaves a margin.
#[cfg(not(tollgate_loom))]
pub(crate) const MIGRATE_STEP: usize = 4;
/// Under loom, 2: a migration of the 4-slot region then spans insertions, so the models see
/// lookups and decisions racing a migration in progress, not only within one step. (The
/// models' tables are bounded by `max_keys`, so probing still ends.)
#[cfg(tollgate_loom)]
pub(crate) const MIGRATE_STEP: usize = 2;

/// Work units (slots visited or entries moved) one sweep step may spend under the mutex.
pub(crate) const STEP_WORK: usize = 1024;

/// Evictions after which a sweep step stops (each is a CAS and a shift of its chain: a step
/// evicting every full entry of 1,024 slots took over 100 µs); as many again of full entries
/// that closing a gap moved back, evicted where they land.
pub(crate) const STEP_EVICTIONS: u64 = 16;

/// A region of the buffer: `mask + 1` slots (a power of two) from `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    base: usize,
    mask: usize,
}

impl Region {
    /// The buffer index of the region's slot `i` (taken modulo its length).
    #[inline]
    fn at(self, i: usize) -> usize {
        self.base + (i & self.mask)
    }

    #[inline]
    fn len(self) -> usize {
        self.mask + 1
    }
}

/// The layout word's flag: a migration is in progress (the old region is the one of half the
/// current region's length, on the other side of the buffer).
const MIGRATING: u64 = 1;

/// The layout word: `base << 32 | mask << 1 | migrating`.
#[inline]
fn encode(r: Region, migrating: bool) -> u64 {
    ((r.base as u64) << 32) | ((r.mask as u64) << 1) | u64::from(migrating)
}

/// The current region named by a layout word.
#[inline]
fn decode(layout: u64) -> Region {
    Region {
        base: (layout >> 32) as usize,
        mask: ((layout as u32) >> 1) as usize,
    }
}

/// The whole table's length for `max_keys`: twice it, rounded up to a power of two, within
/// `[8, MAX_CAPACITY]`.
fn capacity(max_keys: usize) -> usize {
    max_keys
        .saturating_mul(2)
        .checked_next_power_of_two()
        .unwrap_or(MAX_CAPACITY)
        .clamp(8, MAX_CAPACITY)
}

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
    /// The slot (of the current region, in [`visit_order`]) the sweep examines next.
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

/// A migration's walk down the old region.
#[derive(Clone, Copy, Debug)]
struct Migration {
    /// The old region's slot (relative to it) visited next.
    cursor: usize,
    /// Slots still to drain, once the walk met the empty slot it starts from; `None` while it
    /// is still looking for one.
    left: Option<usize>,
}

/// What one migration step did.
#[derive(Debug, Default)]
struct Migrated {
    visited: usize,
    moved: usize,
    evicted: u64,
}

/// What one sweep step did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// Entries evicted.
    pub(crate) evicted: u64,
    /// Slots of the current region examined (and left behind by the cursor).
    pub(crate) examined: usize,
    /// Slots of an old region drained by the migration in progress.
    pub(crate) migrated: usize,
    /// Entries moved back into a gap an eviction left, full at the step's reading, that the
    /// step left where they landed (past its eviction budget, or 64 slots or more from the
    /// gap; otherwise it evicts them there): such an entry may sit in a slot the pass has
    /// already examined, so a caller that must evict every full entry walks another pass.
    pub(crate) moved_full: u64,
    /// `Some(bound)` when the step ended a pass: the earliest instant at which a live entry can
    /// be full (`u64::MAX` if none).
    pub(crate) pass_done: Option<u64>,
}

/// A whole sweep's progress over its steps (one per lock): when it has examined every entry at
/// its reading. [`Sweep::before`] under each step's lock before the step, [`Sweep::after`]
/// after it.
///
/// Done after a whole region's worth of slots examined, no old region left to drain, and no
/// reason to doubt the slots already examined: a migration started by an insertion between two
/// steps restarts the pass over the new region ([`Locked::restarts`]), and a step may leave a
/// full entry that closing a gap moved back behind the cursor ([`Step::moved_full`]: rare, a
/// step evicts those where they land within its budget); either makes the count start again.
/// The second only follows evictions, so a sweep goes on only while it finds full entries to
/// evict; the first at most once per doubling of the table.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    examined: usize,
    restarts: Option<u64>,
}

impl Sweep {
    /// Before a step, under its lock.
    pub(crate) fn before(&mut self, locked: &Locked<'_>) {
        let seen = locked.restarts();
        if self.restarts.replace(seen) != Some(seen) {
            self.examined = 0;
        }
    }

    /// After the step, under the same lock: whether the sweep is done.
    pub(crate) fn after(&mut self, locked: &Locked<'_>, step: &Step) -> bool {
        self.examined = if step.moved_full > 0 {
            0
        } else {
            self.examined + step.examined
        };
        self.examined >= locked.active() && !locked.migrating()
    }
}

impl Index {
    /// A table for at most `max_keys` live entries.
    pub(crate) fn new(max_keys: usize) -> Self {
        let cap = capacity(max_keys);
        let first = MIN_ACTIVE.min(cap);
        // Room for the regions at the back (half the table at most) unless there is only one.
        let len = if first == cap { cap } else { cap + cap / 2 };
        let region = Self::region_in(cap, first);
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

    /// Where the region of `len` slots lies in a table of `cap`: at the front if `cap / len` is
    /// an even power of two, else at the back.
    fn region_in(cap: usize, len: usize) -> Region {
        let doublings_left = (cap / len).trailing_zeros();
        Region {
            base: if doublings_left % 2 == 1 { cap } else { 0 },
            mask: len - 1,
        }
    }

    /// The region a migration to `new` drains: half its length, on the other side.
    #[inline]
    fn old_of(&self, new: Region) -> Region {
        Region {
            base: if new.base == 0 { self.cap } else { 0 },
            mask: new.mask >> 1,
        }
    }

    /// The rebuild epoch: read it before a lock-free probe and compare after; odd or changed
    /// means the probe may have missed a present key while entries were moving.
    #[inline]
    pub(crate) fn rebuild_epoch(&self) -> u64 {
        self.rebuilds.load(Ordering::SeqCst)
    }

    /// The layout word.
    #[inline]
    fn layout(&self) -> u64 {
        self.layout.load(Ordering::Acquire)
    }

    /// The current region.
    #[inline]
    fn region(&self) -> Region {
        decode(self.layout())
    }

    /// Whether a migration is in progress (a hint without the mutex).
    #[inline]
    pub(crate) fn migrating(&self) -> bool {
        self.layout() & MIGRATING != 0
    }

    /// The slot holding `fp` and its word, if a lock-free probe finds it. A probe racing a
    /// move may miss a present key (the caller then asks again under the mutex), never find
    /// a wrong one: the fingerprint is in the word it returns.
    #[inline]
    fn find(&self, fp: u64) -> Option<(&AtomicU128, u128)> {
        let layout = self.layout();
        match self.probe(decode(layout), fp) {
            None if layout & MIGRATING != 0 => self.find_old(layout, fp),
            found => found,
        }
    }

    /// [`find`](Index::find)'s probe of the old region, during a migration.
    #[inline(never)]
    fn find_old(&self, layout: u64, fp: u64) -> Option<(&AtomicU128, u128)> {
        self.probe(self.old_of(decode(layout)), fp)
    }

    /// Linear probing for `fp` in `r`, from its home slot to the first empty one (at most the
    /// whole region).
    #[inline]
    fn probe(&self, r: Region, fp: u64) -> Option<(&AtomicU128, u128)> {
        // One bounds check for the region, none per step (`home + step` masked by `len − 1`
        // is below `len` once the loop runs).
        let region = &self.slots[r.base..r.base + r.len()];
        let mask = region.len() - 1;
        let home = fp as usize;
        for step in 0..region.len() {
            let slot = &region[home.wrapping_add(step) & mask];
            let w = slot.load(Ordering::Acquire);
            let f = fp_of(w);
            if f == fp {
                return Some((slot, w));
            }
            if f == EMPTY {
                return None;
            }
        }
        None
    }

    /// The lock-free probe of the hot path: `fp`'s slot and the word read from it, if found.
    /// Always `None` during a migration: the caller then takes the slow path, which probes
    /// both regions with [`apply`](Index::apply) and helps the migration along (one bounded
    /// step if the mutex is free), so a migration ends within a bounded number of calls even
    /// when no key is inserted any more. A miss may be wrong while entries move (the caller
    /// then takes the insert path).
    #[inline]
    pub(crate) fn lookup(&self, fp: u64) -> Option<Hit<'_>> {
        let layout = self.layout();
        if layout & MIGRATING != 0 {
            return None;
        }
        self.probe(decode(layout), fp)
            .map(|(slot, word)| Hit { slot, word })
    }

    /// The state of `fp`, if tracked. Lock-free unless the probe missed while entries were
    /// moving; then it asks again under the mutex, so a tracked key is never reported absent.
    pub(crate) fn load(&self, fp: u64) -> Option<u64> {
        let epoch = self.rebuild_epoch();
        if let Some((_, w)) = self.find(fp) {
            return Some(state_of(w));
        }
        if epoch % 2 == 0 && self.rebuild_epoch() == epoch {
            return None;
        }
        let _locked = self.lock();
        self.find(fp).map(|(_, w)| state_of(w))
    }

    /// Decides on `fp`'s state with `f` (lock-free): `None` if `fp` is not found (take the insert
    /// path), else `f`'s verdict, its new state written with a CAS of the whole slot.
    #[inline]
    pub(crate) fn apply<E>(
        &self,
        fp: u64,
        mut f: impl FnMut(u64) -> Result<Option<u64>, E>,
    ) -> Option<Result<(), E>> {
        let (slot, mut w) = self.find(fp)?;
        loop {
            if fp_of(w) != fp {
                // Evicted or moved: the insert path decides under the mutex.
                return None;
            }
            match f(state_of(w)) {
                Ok(Some(next)) => match slot.compare_exchange_weak(
                    w,
                    pack(fp, next),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(Ok(())),
                    Err(actual) => w = actual,
                },
                Ok(None) => return Some(Ok(())),
                Err(e) => return Some(Err(e)),
            }
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

/// A slot found by [`Index::lookup`] and the word it held: one decision's first attempt.
pub(crate) struct Hit<'a> {
    slot: &'a AtomicU128,
    word: u128,
}

impl Hit<'_> {
    /// The key's state as the probe read it.
    #[inline]
    pub(crate) fn state(&self) -> u64 {
        state_of(self.word)
    }

    /// One CAS of the whole slot from the word read to `(fp, next)`: fails if anything changed
    /// it since (a decision, an eviction, a move) — or spuriously, as a weak CAS may — and
    /// never writes another key's slot. The failure ordering is `Relaxed`: the caller then
    /// probes again ([`Index::apply`]) and does not use the value.
    #[inline]
    pub(crate) fn commit(&self, next: u64) -> bool {
        self.slot
            .compare_exchange_weak(
                self.word,
                pack(fp_of(self.word), next),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

/// The slot the sweep examines at position `cursor` of its pass over `mask + 1` slots: cache
/// lines (4 slots) in bit-reversed order, the slots of a line in order. A permutation, so a
/// pass examines every slot once; any run of consecutive positions is spread evenly over the
/// region.
#[inline]
fn visit_order(cursor: usize, mask: usize) -> usize {
    const LINE: usize = 4;
    let lines = (mask + 1) / LINE;
    if lines <= 1 {
        return cursor;
    }
    let bits = lines.trailing_zeros();
    let line = (cursor / LINE).reverse_bits() >> (usize::BITS - bits);
    line * LINE + cursor % LINE
}

/// Takes the entry out of `slot` (a CAS to empty, retried while admissions change its state):
/// returns the word it held, so no admission is lost — one that lands first is in the word, one
/// that lands later fails its CAS and re-probes.
fn take(slot: &AtomicU128, mut w: u128) -> u128 {
    loop {
        match slot.compare_exchange_weak(w, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return w,
            Err(actual) => w = actual,
        }
    }
}

/// Evicts the entry in `slot` if it is full at `now`: `w` is the word read from it (not empty).
/// Each attempt calls `evicting()`, then CASes the slot to empty, and is retried with the new
/// word while admissions change the state: a racing admission either lands first (the CAS
/// fails, and the bucket may no longer be full) or fails its own CAS and re-probes into the
/// insert path. `Ok(())` once evicted; else `Err((word, at))`: the latest word, not full before
/// `at > now`. Never for an empty slot (only the mutex holder empties one, and its callers skip
/// them): that would count an eviction of nothing; it answers `Err` with `at = u64::MAX`.
fn evict_if_full(
    slot: &AtomicU128,
    mut w: u128,
    now: u64,
    full_at: &mut impl FnMut(u64, u64) -> u64,
    evicting: &mut impl FnMut(),
) -> Result<(), (u128, u64)> {
    loop {
        if fp_of(w) == EMPTY {
            debug_assert!(false, "evicting an empty slot");
            return Err((w, u64::MAX));
        }
        let at = full_at(fp_of(w), state_of(w));
        if at > now {
            return Err((w, at));
        }
        evicting();
        match slot.compare_exchange_weak(w, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(actual) => w = actual,
        }
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
    /// current one, and takes one migration step of [`MIGRATE_STEP`] old slots while one is in
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

    /// One migration step of [`MIGRATE_STEP`] old slots, if a migration is in progress: how
    /// lookups of keys still in the old region help it along (so that it ends even if no key
    /// is inserted any more).
    pub(crate) fn help_migrate(&mut self) {
        // Nothing is evicted, so `full_at` is never asked.
        self.migrate(
            MIGRATE_STEP,
            usize::MAX,
            None,
            &mut |_, _| u64::MAX,
            &mut || (),
        );
    }

    /// Makes the region of twice `old`'s length current (it is empty: module docs) and starts
    /// draining `old` into it; the sweep starts a new pass over the new region.
    fn start_migration(&mut self, old: Region) {
        let ix = self.index;
        let new = Index::region_in(ix.cap, old.len() * 2);
        debug_assert_eq!(ix.old_of(new), old);
        self.meta.migration = Some(Migration {
            cursor: old.mask,
            left: None,
        });
        // No entry moves here: a probe that read the previous layout still finds every entry
        // in `old` until a step moves it (and bumps the epoch).
        ix.layout.store(encode(new, true), Ordering::Release);
        // The old pass's bound stays valid until this one ends; the entries still in `old`
        // are examined by this pass where they land (its cursor waits for the migration).
        self.meta.cursor = 0;
        self.meta.pass_left = new.len();
        self.meta.pass_min = u64::MAX;
        self.meta.restarts += 1;
    }

    /// One step of the migration in progress: visits at most `visits` slots of the old region
    /// walking down, within `work` units (a slot visited, an entry moved or evicted), and
    /// drains each entry it meets after the first empty slot — evicting it if `evict_at` gives
    /// a reading `now` and `full_at(fp, state)` is at or before it (`evicting()` before the CAS,
    /// at most `max_evictions` of them), else moving it to the current region. Ends the
    /// migration when the walk is back at its empty start.
    fn migrate(
        &mut self,
        visits: usize,
        work: usize,
        evict_at: Option<(u64, u64)>,
        full_at: &mut impl FnMut(u64, u64) -> u64,
        evicting: &mut impl FnMut(),
    ) -> Migrated {
        let ix = self.index;
        let mut done = Migrated::default();
        let Some(mut m) = self.meta.migration else {
            return done;
        };
        let new = ix.region();
        let old = ix.old_of(new);
        let mut moving = false;
        let mut finished = false;
        while done.visited < visits && done.visited + done.moved + (done.evicted as usize) < work {
            let slot = &ix.slots[old.at(m.cursor)];
            let mut w = slot.load(Ordering::Acquire);
            done.visited += 1;
            m.cursor = m.cursor.wrapping_sub(1) & old.mask;
            let Some(left) = m.left else {
                // The walk starts below an empty slot: from there on, each entry it takes is
                // the last of its cluster.
                if fp_of(w) == EMPTY {
                    m.left = Some(old.mask);
                }
                continue;
            };
            if fp_of(w) != EMPTY {
                if !moving {
                    // Lock-free misses are not trusted from here on (see `rebuilds`).
                    ix.rebuilds.fetch_add(1, Ordering::SeqCst);
                    moving = true;
                }
                let evicted = match evict_at {
                    Some((now, _)) => match evict_if_full(slot, w, now, full_at, evicting) {
                        Ok(()) => true,
                        Err((latest, _)) => {
                            w = latest;
                            false
                        }
                    },
                    None => false,
                };
                if evicted {
                    // The last of its cluster: no chain passes through the slot it leaves.
                    done.evicted += 1;
                    self.meta.live -= 1;
                } else {
                    // Not folded into the pass's bound: the pass examines it where it lands.
                    let w = take(slot, w);
                    self.put(fp_of(w), state_of(w));
                    done.moved += 1;
                }
            }
            m.left = Some(left - 1);
            if left == 1 {
                finished = true;
                break;
            }
            if evict_at.is_some_and(|(_, max)| done.evicted >= max) {
                break;
            }
        }
        #[cfg(test)]
        {
            self.meta.migrated += done.moved as u64;
        }
        if finished {
            // The old region is all empty: it leaves the layout (its slots are reused only by
            // a region two doublings later, filled by moves and insertions).
            self.meta.migration = None;
            ix.layout.store(encode(new, false), Ordering::Release);
        } else {
            self.meta.migration = Some(m);
        }
        if moving {
            ix.rebuilds.fetch_add(1, Ordering::SeqCst);
        }
        done
    }

    /// Writes `fp` into the empty slot ending its chain in the current region.
    fn put(&mut self, fp: u64, state: u64) {
        let ix = self.index;
        let r = ix.region();
        let mut i = fp as usize;
        // At most half of the current region is full (module docs), so this ends.
        loop {
            let f = fp_of(ix.slots[r.at(i)].load(Ordering::Acquire));
            if f == EMPTY {
                break;
            }
            debug_assert_ne!(f, fp, "inserted twice");
            i = i.wrapping_add(1);
        }
        ix.slots[r.at(i)].store(pack(fp, state), Ordering::Release);
    }

    /// One bounded step of the incremental sweep at reading `now`: examines slots from the
    /// cursor, at most [`STEP_WORK`] units of work (a slot examined or an entry moved), at most
    /// [`STEP_EVICTIONS`] evictions and at most one whole region, and evicts every entry it
    /// meets whose `full_at(fp, state)` is at or before `now`, calling `evicting()` before each
    /// eviction's CAS. Each eviction closes its gap by shifting the rest of its chain back (no
    /// tombstones); an entry so moved that is full at `now` is evicted where it lands, since
    /// the cursor may have passed that slot ([`evict_landed`](Locked::evict_landed): up to
    /// [`STEP_EVICTIONS`] more evictions, whose chain shifts may take the work past
    /// [`STEP_WORK`]). During a migration the step first drains the old region (within the same
    /// budget, evicting its full entries and moving the others), and examines the current
    /// region only once that is done.
    ///
    /// The cursor visits the region in a scattered order (cache lines in bit-reversed order),
    /// not from left to right: evictions then spread evenly over the table. A left-to-right
    /// sweep under a flood leaves the region just ahead of it nearly full (it is emptied last),
    /// and linear probing degrades badly at such a load.
    pub(crate) fn sweep_step(
        &mut self,
        now: u64,
        mut full_at: impl FnMut(u64, u64) -> u64,
        mut evicting: impl FnMut(),
    ) -> Step {
        let ix = self.index;
        let mut step = Step::default();
        let mut work = 0;
        if self.meta.migration.is_some() {
            let m = self.migrate(
                STEP_WORK,
                STEP_WORK,
                Some((now, STEP_EVICTIONS)),
                &mut full_at,
                &mut evicting,
            );
            step.evicted = m.evicted;
            step.migrated = m.visited;
            work = m.visited + m.moved + m.evicted as usize;
            if self.meta.migration.is_some() || step.evicted >= STEP_EVICTIONS {
                return step;
            }
        }
        let r = ix.region();
        let mut moving = false;
        let mut evict = || {
            if !moving {
                // Lock-free misses are not trusted from here on (see `rebuilds`).
                ix.rebuilds.fetch_add(1, Ordering::SeqCst);
                moving = true;
            }
            evicting();
        };
        while work < STEP_WORK {
            let i = visit_order(self.meta.cursor, r.mask);
            let slot = &ix.slots[r.at(i)];
            let w = slot.load(Ordering::Acquire);
            work += 1;
            let mut evicted = false;
            if fp_of(w) != EMPTY {
                match evict_if_full(slot, w, now, &mut full_at, &mut evict) {
                    Ok(()) => evicted = true,
                    Err((_, at)) => self.meta.pass_min = self.meta.pass_min.min(at),
                }
            }
            if evicted {
                step.evicted += 1;
                self.meta.live -= 1;
                let (visited, landed) = self.shift_back(r, i, i, now, &mut full_at, &mut step);
                work += visited;
                // Slot `i` itself is examined again next (the cursor stays).
                work +=
                    self.evict_landed(r, i, landed & !1, now, &mut full_at, &mut evict, &mut step);
                if step.evicted >= STEP_EVICTIONS {
                    break;
                }
                // Slot `i` may now hold an entry shifted back from later in its chain.
                continue;
            }
            self.meta.cursor = (self.meta.cursor + 1) & r.mask;
            self.meta.pass_left -= 1;
            step.examined += 1;
            if self.meta.pass_left == 0 {
                step.pass_done = Some(core::mem::replace(&mut self.meta.pass_min, u64::MAX));
                self.meta.pass_left = r.len();
                // Go on into the next pass within the budget, but never examine a slot twice in
                // one step: a region of at most `STEP_WORK` slots is examined whole, at this
                // step's reading, by any step that evicts nothing.
                if step.examined > r.mask {
                    break;
                }
            }
        }
        if moving {
            ix.rebuilds.fetch_add(1, Ordering::SeqCst);
        }
        step
    }

    /// Evicts the entries that closing a gap moved back and that are full at `now`, where they
    /// landed: bit `d` of `landed` for slot `from + d` of `r` (see
    /// [`shift_back`](Locked::shift_back)). The cursor may have examined those slots already,
    /// so the sweep would otherwise miss them. The farthest first: closing the gap an eviction
    /// leaves only moves entries from later in the chain, so the nearer ones stay where they
    /// are. Up to [`STEP_EVICTIONS`] more evictions than the cursor's in one step; past that
    /// they are left and counted in `step.moved_full` (the caller then walks another pass).
    /// Returns the slots visited.
    #[allow(clippy::too_many_arguments)]
    fn evict_landed(
        &mut self,
        r: Region,
        from: usize,
        mut landed: u64,
        now: u64,
        full_at: &mut impl FnMut(u64, u64) -> u64,
        evict: &mut impl FnMut(),
        step: &mut Step,
    ) -> usize {
        let ix = self.index;
        let mut work = 0;
        while landed != 0 {
            let d = 63 - landed.leading_zeros();
            landed &= !(1 << d);
            let at = (from + d as usize) & r.mask;
            // Only the mutex holder empties a slot, and closing a later gap moves nothing into
            // or out of the slots before it: the entry recorded is still there.
            let slot = &ix.slots[r.at(at)];
            let w = slot.load(Ordering::Acquire);
            work += 1;
            if step.evicted >= 2 * STEP_EVICTIONS {
                // Past the budget: left to another pass, folded into this one's bound.
                step.moved_full += 1;
                let at = full_at(fp_of(w), state_of(w));
                self.meta.pass_min = self.meta.pass_min.min(at);
                continue;
            }
            match evict_if_full(slot, w, now, full_at, evict) {
                Ok(()) => {
                    step.evicted += 1;
                    self.meta.live -= 1;
                    let (visited, more) = self.shift_back(r, at, from, now, full_at, step);
                    work += visited;
                    landed |= more;
                }
                // Admitted since (no longer full): examined at `now`, as the pass would.
                Err((_, at)) => self.meta.pass_min = self.meta.pass_min.min(at),
            }
        }
        work
    }

    /// Closes the gap at `hole` (a slot of `r`, just emptied) by moving back each later entry of
    /// the chain whose home does not lie between the gap and it (linear probing's deletion
    /// without tombstones). Each move takes the entry out, then writes it into the gap: the key
    /// is absent in between (a lock-free miss then waits on the mutex), never present twice.
    /// Returns the slots visited, and where the entries it moved that were full at `now` landed:
    /// bit `d` for slot `origin + d` (the caller evicts them there, or leaves them to another
    /// pass and folds them into its bound). One that lands 64 slots or more from `origin` is
    /// left here, counted in `step.moved_full`. A moved entry may land in a slot this pass
    /// already examined, so the full instant of one not reported is folded into the pass's
    /// bound (`full_at`) here.
    fn shift_back(
        &mut self,
        r: Region,
        mut hole: usize,
        origin: usize,
        now: u64,
        full_at: &mut impl FnMut(u64, u64) -> u64,
        step: &mut Step,
    ) -> (usize, u64) {
        let ix = self.index;
        let mask = r.mask;
        let mut j = hole;
        let (mut visited, mut landed) = (0, 0u64);
        loop {
            j = (j + 1) & mask;
            visited += 1;
            let w = ix.slots[r.at(j)].load(Ordering::Acquire);
            let f = fp_of(w);
            if f == EMPTY {
                return (visited, landed);
            }
            let home = f as usize & mask;
            // The entry at `j` may fill the gap iff its probe from `home` passes `hole`.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                let w = take(&ix.slots[r.at(j)], w);
                ix.slots[r.at(hole)].store(w, Ordering::Release);
                let at = full_at(fp_of(w), state_of(w));
                let d = hole.wrapping_sub(origin) & mask;
                match 1u64.checked_shl(d as u32).filter(|_| at <= now) {
                    // Evicted where it landed, or left and folded in, by the caller.
                    Some(bit) => landed |= bit,
                    None => {
                        self.meta.pass_min = self.meta.pass_min.min(at);
                        step.moved_full += u64::from(at <= now);
                    }
                }
                hole = j;
            }
        }
    }
}

/// A region as a save walks it ([`Locked::scan_regions`]); opaque outside this module.
#[cfg(feature = "persist")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScanRegion(Region);

#[cfg(feature = "persist")]
impl ScanRegion {
    /// Its length in slots.
    pub(crate) fn len(self) -> usize {
        self.0.len()
    }
}

/// What a save reads (`src/keyed/persist.rs`), under the mutex, so that no entry moves while
/// it reads.
#[cfg(feature = "persist")]
impl Locked<'_> {
    /// The regions that hold entries: the one a migration is draining (if any), then the
    /// current one.
    pub(crate) fn scan_regions(&self) -> (Option<ScanRegion>, ScanRegion) {
        let cur = self.index.region();
        let old = self
            .meta
            .migration
            .map(|_| ScanRegion(self.index.old_of(cur)));
        (old, ScanRegion(cur))
    }

    /// The entry in slot `i` (modulo the length) of `r`: its fingerprint and state, or `None`
    /// for an empty slot.
    pub(crate) fn scan_slot(&self, r: ScanRegion, i: usize) -> Option<(u64, u64)> {
        let w = self.index.slots[r.0.at(i)].load(Ordering::Acquire);
        (fp_of(w) != EMPTY).then(|| (fp_of(w), state_of(w)))
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::vec;
    use std::vec::Vec;

    /// Fingerprints spread over the table (a cheap mixer; the limiter uses a seeded hash).
    fn fp(i: u64) -> u64 {
        fingerprint(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
    }

    /// A fixed-seed xorshift.
    fn rng(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Inserts `fp` with `state` (full at `state`: the tests' states are their full instants).
    fn insert(ix: &Index, fp: u64, state: u64) {
        let mut locked = ix.lock();
        assert!(!locked.contains(fp));
        locked.insert(fp, state, state);
    }

    /// Evicts the keys `evict` says, one bounded step per lock, over one whole pass (and the
    /// migration in progress, if any); returns how many, and the last pass bound seen.
    fn sweep(ix: &Index, evict: impl Fn(u64) -> bool) -> (u64, Option<u64>) {
        let (mut evicted, mut bound, mut sweep) = (0, None, Sweep::default());
        loop {
            let mut locked = ix.lock();
            sweep.before(&locked);
            let step = locked.sweep_step(5, |f, _| if evict(f) { 0 } else { 7 }, || ());
            evicted += step.evicted;
            bound = step.pass_done.or(bound);
            if sweep.after(&locked, &step) {
                return (evicted, bound);
            }
        }
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

    /// The layout's invariants with the mutex free: every slot outside the current region (and
    /// the old one, while migrating) is empty; the current region is at most half full; the
    /// live count is the number of entries.
    fn check_layout(ix: &Index) {
        let layout = ix.layout();
        let new = decode(layout);
        let old = (layout & MIGRATING != 0).then(|| ix.old_of(new));
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
        assert_eq!(fingerprint(0), 2);
        assert_eq!(fingerprint(1), 3);
        assert_eq!(fingerprint(2), 2);
        assert_eq!(fingerprint(u64::MAX), u64::MAX);
    }

    #[test]
    fn capacity_is_twice_max_keys_rounded_up_plus_half_for_migrations() {
        assert_eq!(Index::new(0).cap, 8);
        assert_eq!(Index::new(0).slots.len(), 8, "one region: no room needed");
        assert_eq!(Index::new(32).slots.len(), 64);
        assert_eq!(Index::new(33).cap, 128);
        assert_eq!(Index::new(33).slots.len(), 192);
        assert_eq!(Index::new(1 << 20).cap, 1 << 21);
        assert_eq!(Index::new(1_000_000).cap, 1 << 21);
        assert_eq!(Index::new(1_000_000).slots.len(), 3 << 20);
        assert_eq!(Index::new(1_000_000).region().len(), MIN_ACTIVE);
        assert_eq!(capacity(usize::MAX), MAX_CAPACITY);
        assert_eq!(capacity(MAX_CAPACITY), MAX_CAPACITY);
    }

    #[test]
    fn regions_alternate_between_the_front_and_the_back() {
        let cap = 1 << 10;
        let mut len = cap;
        let mut sides = Vec::new();
        while len >= 64 {
            let r = Index::region_in(cap, len);
            assert!(r.base + r.len() <= cap + cap / 2);
            sides.push(r.base);
            len /= 2;
        }
        assert_eq!(sides, [0, cap, 0, cap, 0]);
        // Layout words round-trip, at the largest table too.
        let r = Index::region_in(MAX_CAPACITY, MAX_CAPACITY / 2);
        assert_eq!(decode(encode(r, true)), r);
        assert_eq!(encode(r, true) & MIGRATING, MIGRATING);
        assert_eq!(decode(encode(r, false)), r);
    }

    /// From 64 slots to the whole table of 2^17, one key at a time: no insertion moves more
    /// than `MIGRATE_STEP` entries, the region doubles at each step, stays between ¼ and ½ full
    /// once migrations settle, never more than half full, and every key keeps its state.
    #[test]
    fn grows_from_64_slots_to_the_whole_table_with_bounded_moves_per_insert() {
        let max = 1 << 16;
        let ix = Index::new(max);
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

    /// Inserts keys until a migration is in progress with entries left in the old region;
    /// returns the keys inserted.
    fn mid_migration(ix: &Index) -> u64 {
        mid_migration_from(ix, 0)
    }

    /// [`mid_migration`] from an old region of at least `min_old` slots.
    fn mid_migration_from(ix: &Index, min_old: usize) -> u64 {
        let mut n = 0;
        loop {
            insert(ix, fp(n), n + 10);
            n += 1;
            let layout = ix.layout();
            let old = ix.old_of(decode(layout));
            if layout & MIGRATING != 0 && old.len() >= min_old && used_in(ix, old) >= 8 {
                return n;
            }
        }
    }

    #[test]
    fn lookups_during_a_migration_find_keys_in_both_regions() {
        let ix = Index::new(1 << 12);
        let n = mid_migration(&ix);
        let layout = ix.layout();
        let (new, old) = (decode(layout), ix.old_of(decode(layout)));
        assert!(used_in(&ix, new) > 0 && used_in(&ix, old) > 0);
        let region_of = |f: u64| {
            let (slot, _) = ix.find(f).unwrap();
            let i = ix
                .slots
                .iter()
                .position(|s| core::ptr::eq(s, slot))
                .unwrap();
            (new.base..new.base + new.len()).contains(&i)
        };
        let in_new = (0..n).filter(|&i| region_of(fp(i))).count();
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
        let ix = Index::new(1 << 12);
        let n = mid_migration(&ix);
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

    /// A migration that no insertion finishes: steps taken by lookups (`help_migrate`), at most
    /// `MIGRATE_STEP` moves each, drain the old region within `1.5 × old / MIGRATE_STEP`
    /// steps; then every key is on the hot path's probe again.
    #[test]
    fn lookups_help_a_migration_to_its_end() {
        let ix = Index::new(1 << 12);
        let n = mid_migration_from(&ix, 512);
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

    /// Sweep steps during a migration: the old region's full entries are evicted there (each is
    /// the last of its cluster), the others moved; evictions in the new region, with their
    /// shifts, wait until it is done; the pass that ends covers both regions' entries,
    /// including those inserted during the migration.
    #[test]
    fn sweeps_during_a_migration_evict_in_both_regions_and_bound_every_entry() {
        // An old region of 1,024 slots: drained over several steps.
        let ix = Index::new(1 << 12);
        let n = mid_migration_from(&ix, 1024);
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

    /// A pass bound with a migration finished by insertions: the pass restarted when the
    /// migration began and walks the new region only after it, so it still bounds an entry
    /// that was in the old region (examined where it landed).
    #[test]
    fn a_pass_covers_entries_moved_by_insertions() {
        let ix = Index::new(1 << 12);
        let n = mid_migration(&ix);
        // The earliest-full entry is one still in the old region.
        let layout = ix.layout();
        let old = ix.old_of(decode(layout));
        let in_old = (0..n)
            .find(|&i| {
                let (slot, _) = ix.find(fp(i)).unwrap();
                (0..old.len()).any(|j| core::ptr::eq(&ix.slots[old.at(j)], slot))
            })
            .unwrap();
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
    /// survivor is found with its state, nothing is stored twice, and slots outside the
    /// regions stay empty for reuse.
    #[test]
    fn random_operations_across_migrations_against_a_map() {
        let mut next = rng(0x1234_5678_9ABC_DEF1);
        let ix = Index::new(3000);
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

    /// Every pass bound is at most the full instant of every entry in the table (both regions),
    /// with passes restarted by migrations (the table grows from 64 slots to 4,096), insertions,
    /// decisions and lookups' migration steps between sweep steps, and evictions: random
    /// operations over six seeds with different mixes, where an entry's state is its full
    /// instant. Entries a migration moves are not folded into the bound; the pass examines them
    /// in the new region. (It fails without the insertions' fold, and without the pass restart
    /// at a migration's start.)
    #[test]
    fn every_pass_bound_holds_across_migrations() {
        let (mut passes, mut evicted, mut moved, mut mid_pass) = (0, 0, 0, 0);
        for seed in 1..=6u64 {
            let mut next = rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let ix = Index::new(1 << 12);
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
        let ix = Index::new(1000);
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
        let ix = Index::new(64); // 128 slots
        for i in 0..64 {
            insert(&ix, fp(i), i + 1);
        }
        assert_eq!(ix.region().len(), 128);
        assert_eq!(sweep(&ix, |f| (0..30).any(|i| fp(i) == f)).0, 30);
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
        assert_eq!(sweep(&ix, |f| (30..64).any(|i| fp(i) == f)).0, 34);
        for i in 100..130 {
            assert_eq!(ix.load(fp(i)), Some(i));
        }
        assert_eq!(used(&ix), 30);
        assert_eq!(ix.lock().meta.live, 30);
    }

    /// A sweep evicts every entry full at its reading in one pass, also one that an eviction's
    /// gap moves back into a slot the pass has already examined (the cursor visits cache lines
    /// in a scattered order, a chain runs left to right): such an entry is evicted where it
    /// lands. Random tables with colliding homes, a third of their entries full, fewer than
    /// `STEP_EVICTIONS` of them (so the fallback, another pass, never runs): after one pass no
    /// full entry is left. Without `evict_landed` some of these tables keep one.
    #[test]
    fn a_sweep_evicts_full_entries_moved_behind_its_cursor() {
        let mut next = rng(0x0DDB_1A5E_5EED_0001);
        let mut tables = 0;
        while tables < 2_000 {
            // 64 slots, all active; homes packed into a few lines: long chains that cross line
            // boundaries.
            let ix = Index::new(32);
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

    /// Larger tables with clusters long enough to reach both fallbacks of `evict_landed` (its
    /// eviction budget, and landings 64 slots or more from the gap): a whole sweep still
    /// evicts every full entry, keeps every survivor with its state, and leaves the live count
    /// and the layout exact.
    #[test]
    fn sweeps_of_long_clusters_evict_every_full_entry_and_keep_the_rest() {
        let mut next = rng(0x005E_ED0F_C1A5_7E25);
        let mut left = 0;
        for round in 0..300 {
            let keys = [128u64, 500][round % 2];
            let ix = Index::new(keys as usize);
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
            let mut sweep = Sweep::default();
            loop {
                let mut locked = ix.lock();
                sweep.before(&locked);
                let step = locked.sweep_step(5, |f, _| if full[&f] { 0 } else { 7 }, || ());
                left += step.moved_full;
                if sweep.after(&locked, &step) {
                    break;
                }
            }
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

    /// A migration started by insertions between two steps of a sweep restarts the pass over
    /// the new region: the sweep counts its examined slots again from there, and still evicts
    /// every full entry. Here the migration is finished by lookups (which move entries without
    /// examining them), so every full entry waits in the new region for the sweep's new pass;
    /// the rule that kept counting from before the restart stopped about 2,800 slots short of
    /// a whole pass and left the full entries there.
    #[test]
    fn a_sweep_restarted_by_a_migration_still_evicts_every_full_entry() {
        let ix = Index::new(1 << 12);
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

    /// Long colliding chains, wrapping past the end of the region: random inserts and evictions
    /// against a map, every survivor found by a lock-free probe, nothing stored twice.
    #[test]
    fn shifting_back_colliding_and_wrapping_chains() {
        let mut next = rng(0x1234_5678_9ABC_DEF1);
        let ix = Index::new(32); // 64 slots, all active
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
                let evicted = sweep(&ix, |f| f == key(victim)).0;
                assert_eq!(evicted, u64::from(model.remove(&key(victim)).is_some()));
            }
            for (&k, &v) in &model {
                assert_eq!(ix.load(k), Some(v), "round {round}");
            }
            assert_eq!(used(&ix), model.len());
        }
    }

    /// A migration draining an old region whose chains collide and wrap around its end: the
    /// walk starts from an empty slot, so every entry it takes is the last of its cluster and
    /// the others stay reachable at every step.
    #[test]
    fn draining_colliding_and_wrapping_chains_keeps_them_reachable() {
        let ix = Index::new(1 << 10);
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
        let ix = Index::new(1 << 16);
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
}
