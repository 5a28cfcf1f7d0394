//! The keyed limiter's index: a flat, open-addressed table of 16-byte slots that we own.
//!
//! # Layout
//!
//! One `Box<[AtomicU128]>` of `capacity = max(8, next_power_of_two(2 × max_keys))` slots,
//! allocated once, never resized. Entries live in the first `active` slots (a power of two, at
//! least 64 or the whole table), linear probing from `fingerprint & (active − 1)`. `active`
//! grows in place while it stays within [`GROW_IN_PLACE_MAX`] slots (4,096: 64 KiB, so a table
//! tracking a few thousand keys stays in cache), then takes the whole table at once; it never
//! shrinks. A slot is one 128-bit word `fingerprint << 64 | state`: the key's 64-bit fingerprint
//! (a seeded hash; `0` = empty, real hashes 0 and 1 are remapped to 2 and 3) and its
//! [`gcra`](crate::gcra) state. **Keys are not stored**: two keys with equal fingerprints share
//! one bucket (see [`KeyedLimiter`](super::KeyedLimiter)'s docs for that trade). 16 bytes per slot
//! at a load factor of at most ½: 32 to 64 bytes per unit of `max_keys` (33.6 at `max_keys` =
//! 1,000,000).
//!
//! # Protocol
//!
//! * **Lookup** (lock-free, the hot path): probe from the home slot with plain 128-bit loads
//!   until the fingerprint matches or a slot is empty. On a match the decision is a CAS of the
//!   *whole* slot from `(fp, state)` to `(fp, state')`, so it succeeds only while the slot still
//!   holds this key: no ABA through eviction, slot reuse or a move is possible, and a lookup
//!   writes nothing but the key's own slot.
//! * **Insert, evict, move** happen under one mutex, each in bounded work. An insertion
//!   re-probes under it (so a key is never inserted twice) and writes the empty slot ending its
//!   chain with one store. Eviction is a CAS from a *full* `(fp, state)` to empty: a racing
//!   admission either lands first (the eviction's CAS fails and the bucket is no longer full) or
//!   fails its own CAS, re-probes, misses and takes the insert path, which waits on the mutex.
//!   The gap is then closed by shifting the rest of the chain back (linear probing's deletion,
//!   so there are no tombstones and no rebuilds to clear them); each move takes the entry out
//!   with a CAS to empty (capturing its state: an admission that lands first is in the captured
//!   word, one that lands later fails) and then stores it in the gap.
//! * **Sweeping** is incremental: a cursor walks the active region, at most [`STEP_WORK`] slots
//!   and moves per step (one step per insertion that finds the table full, or per lock taken by
//!   [`KeyedLimiter::sweep`](super::KeyedLimiter::sweep)), evicting the full entries it meets and
//!   keeping the earliest full instant of the others; a completed pass yields a lower bound on
//!   every live entry's full instant.
//! * **Growth**: when live entries would pass half of an active region smaller than the table,
//!   the region is rebuilt under the mutex for the next power of two of `3 × live`: every live
//!   slot is taken out with a CAS to empty and put back. It moves at most 2,048 entries, since
//!   only regions of at most [`GROW_IN_PLACE_MAX`] slots are ever rebuilt.
//! * A lock-free miss while entries move (a growth, a shift) can be wrong; lookups that miss
//!   take the insert path and wait for the mutex, whose re-probe is the only thing that ever
//!   concludes "absent". The table-full refusal without the mutex trusts a miss only if the
//!   move epoch (`rebuilds`, odd while entries move) did not change around it.
//! * Probing always ends: whenever the mutex is free, either `active` < capacity and live ≤
//!   `active` / 2, or `active` = capacity and live ≤ `max_keys` ≤ capacity / 2; either way half
//!   of the active slots are empty. Lock-free probes are also capped at `active` steps (a miss
//!   then takes the insert path).
//!
//! Under `--cfg tollgate_loom` the same code runs on loom's mutex and `crate::sync`'s loom
//! `AtomicU128` (a loom mutex per word: every 128-bit load, store and CAS is one model-checked
//! step), so the loom models explore this protocol itself.

use crate::sync::{AtomicU128, AtomicU64, Mutex, MutexGuard, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;

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

/// The smallest active region, in slots (or the whole table, if smaller).
#[cfg(not(tollgate_loom))]
const MIN_ACTIVE: usize = 64;
/// Under loom, 4: a table for 4 keys (8 slots) then grows once, so the models reach a growth.
#[cfg(tollgate_loom)]
const MIN_ACTIVE: usize = 4;

/// The largest active region grown in place; the growth past it takes the whole table. A growth
/// rebuild moves every live entry under the mutex, so this bounds its cost (at most 2,048 entries
/// and 4,096 slots): the only rebuilds ever run are these few small ones.
pub(crate) const GROW_IN_PLACE_MAX: usize = 4096;

/// Work units (slots visited or entries moved) one sweep step may spend under the mutex.
pub(crate) const STEP_WORK: usize = 1024;

/// Evictions after which a sweep step stops (each is a CAS and a shift of its chain: a step
/// evicting every full entry of 1,024 slots took over 100 µs).
pub(crate) const STEP_EVICTIONS: u64 = 16;

/// The table. Not generic: it sees only fingerprints.
pub(crate) struct Index {
    slots: Box<[AtomicU128]>,
    /// `active − 1`: entries live in the first `active` slots (a power of two). Written only by
    /// a rebuild, under the mutex.
    mask: AtomicU64,
    /// Odd while entries move (a rebuild, or an eviction shifting its chain back); incremented
    /// before and after: a lock-free miss is only trusted if this did not change around it.
    rebuilds: AtomicU64,
    /// Serializes every change of a fingerprint or of `mask`.
    lock: Mutex<Meta>,
}

/// What the mutex guards: the live count and the incremental sweep's position.
struct Meta {
    live: usize,
    /// The slot the sweep examines next.
    cursor: usize,
    /// Slots the current pass has still to examine.
    pass_left: usize,
    /// The earliest full instant of the entries this pass saw not full, or that were inserted
    /// since it began: when the pass ends, a lower bound on every live entry's full instant.
    pass_min: u64,
}

/// What one sweep step did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// Entries evicted.
    pub(crate) evicted: u64,
    /// Slots examined (and left behind by the cursor).
    pub(crate) examined: usize,
    /// `Some(bound)` when the step ended a pass: the earliest instant at which a live entry can
    /// be full (`u64::MAX` if none).
    pub(crate) pass_done: Option<u64>,
}

impl Index {
    /// A table for at most `max_keys` live entries.
    pub(crate) fn new(max_keys: usize) -> Self {
        let cap = max_keys
            .saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(1 << (usize::BITS - 1))
            .max(8);
        let active = MIN_ACTIVE.min(cap);
        Index {
            slots: (0..cap).map(|_| AtomicU128::new(0)).collect(),
            mask: AtomicU64::new((active - 1) as u64),
            rebuilds: AtomicU64::new(0),
            lock: Mutex::new(Meta {
                live: 0,
                cursor: 0,
                pass_left: active,
                pass_min: u64::MAX,
            }),
        }
    }

    /// The rebuild epoch: read it before a lock-free probe and compare after; odd or changed
    /// means the probe may have missed a present key while entries were moving.
    #[inline]
    pub(crate) fn rebuild_epoch(&self) -> u64 {
        self.rebuilds.load(Ordering::SeqCst)
    }

    /// The mask of the active region.
    #[inline]
    fn mask(&self) -> usize {
        // Never above `slots.len() - 1`, which fits a usize.
        self.mask.load(Ordering::Acquire) as usize
    }

    /// The slot holding `fp` and its word, if a lock-free probe finds it. A probe racing a
    /// move may miss a present key (the caller then asks again under the mutex), never find
    /// a wrong one: the fingerprint is in the word it returns.
    #[inline]
    fn find(&self, fp: u64) -> Option<(&AtomicU128, u128)> {
        let mask = self.mask();
        let mut i = fp as usize & mask;
        for _ in 0..=mask {
            let slot = &self.slots[i];
            let w = slot.load(Ordering::Acquire);
            let f = fp_of(w);
            if f == fp {
                return Some((slot, w));
            }
            if f == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The lock-free probe of the hot path: `fp`'s slot and the word read from it, if found.
    /// A miss may be wrong while entries move (the caller then takes the insert path).
    #[inline]
    pub(crate) fn lookup(&self, fp: u64) -> Option<Hit<'_>> {
        self.find(fp).map(|(slot, word)| Hit { slot, word })
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

    /// The number of active slots (one sweep pass examines this many).
    pub(crate) fn active(&self) -> usize {
        self.index.mask() + 1
    }

    /// Inserts `fp` (not tracked: checked with [`contains`](Locked::contains) under this same
    /// lock) with `state`, first full at `full_at`.
    pub(crate) fn insert(&mut self, fp: u64, state: u64, full_at: u64) {
        let ix = self.index;
        let active = ix.mask() + 1;
        // Below the full size, keep live entries to at most half the region.
        if active < ix.slots.len() && (self.meta.live + 1) * 2 > active {
            self.grow(self.meta.live + 1);
        }
        self.put(fp, state);
        self.meta.live += 1;
        self.meta.pass_min = self.meta.pass_min.min(full_at);
    }

    /// Writes `fp` into the empty slot ending its chain.
    fn put(&mut self, fp: u64, state: u64) {
        let ix = self.index;
        let mask = ix.mask();
        let mut i = fp as usize & mask;
        // At least half of the active slots are empty (module docs), so this ends.
        loop {
            let f = fp_of(ix.slots[i].load(Ordering::Acquire));
            if f == EMPTY {
                break;
            }
            debug_assert_ne!(f, fp, "inserted twice");
            i = (i + 1) & mask;
        }
        ix.slots[i].store(pack(fp, state), Ordering::Release);
    }

    /// One bounded step of the incremental sweep at reading `now`: examines slots from the
    /// cursor, at most [`STEP_WORK`] units of work (a slot examined or an entry moved), at most
    /// [`STEP_EVICTIONS`] evictions and at most one whole region, and evicts every entry it
    /// meets whose `full_at(fp, state)` is at or before `now`, calling `evicting()` before each
    /// eviction's CAS. Each eviction closes its gap by
    /// shifting the rest of its chain back (no tombstones).
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
        let mask = ix.mask();
        let mut step = Step::default();
        let mut work = 0;
        let mut moving = false;
        while work < STEP_WORK {
            let i = visit_order(self.meta.cursor, mask);
            let slot = &ix.slots[i];
            let mut w = slot.load(Ordering::Acquire);
            work += 1;
            let mut evicted = false;
            while fp_of(w) != EMPTY {
                let at = full_at(fp_of(w), state_of(w));
                if at > now {
                    self.meta.pass_min = self.meta.pass_min.min(at);
                    break;
                }
                if !moving {
                    // Lock-free misses are not trusted from here on (see `rebuilds`).
                    ix.rebuilds.fetch_add(1, Ordering::SeqCst);
                    moving = true;
                }
                evicting();
                // A racing admission either lands first (this CAS fails and the bucket is no
                // longer full) or fails its own CAS and re-probes into the insert path.
                match slot.compare_exchange_weak(w, 0, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        evicted = true;
                        break;
                    }
                    Err(actual) => w = actual,
                }
            }
            if evicted {
                step.evicted += 1;
                self.meta.live -= 1;
                work += self.shift_back(i, &mut full_at);
                if step.evicted >= STEP_EVICTIONS {
                    break;
                }
                // Slot `i` may now hold an entry shifted back from later in its chain.
                continue;
            }
            self.meta.cursor = (self.meta.cursor + 1) & mask;
            self.meta.pass_left -= 1;
            step.examined += 1;
            if self.meta.pass_left == 0 {
                step.pass_done = Some(core::mem::replace(&mut self.meta.pass_min, u64::MAX));
                self.meta.pass_left = mask + 1;
                // Go on into the next pass within the budget, but never examine a slot twice in
                // one step: a region of at most `STEP_WORK` slots is examined whole, at this
                // step's reading, by any step that evicts nothing.
                if step.examined > mask {
                    break;
                }
            }
        }
        if moving {
            ix.rebuilds.fetch_add(1, Ordering::SeqCst);
        }
        step
    }

    /// Closes the gap at `hole` (just emptied) by moving back each later entry of the chain whose
    /// home does not lie between the gap and it (linear probing's deletion without tombstones).
    /// Each move takes the entry out, then writes it into the gap: the key is absent in between
    /// (a lock-free miss then waits on the mutex), never present twice. Returns the slots visited.
    /// A moved entry may land in a slot this pass already examined, so its full instant is
    /// folded into the pass's bound (`full_at`) here.
    fn shift_back(&mut self, mut hole: usize, full_at: &mut impl FnMut(u64, u64) -> u64) -> usize {
        let ix = self.index;
        let mask = ix.mask();
        let mut j = hole;
        let mut visited = 0;
        loop {
            j = (j + 1) & mask;
            visited += 1;
            let w = ix.slots[j].load(Ordering::Acquire);
            let f = fp_of(w);
            if f == EMPTY {
                return visited;
            }
            let home = f as usize & mask;
            // The entry at `j` may fill the gap iff its probe from `home` passes `hole`.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                let w = take(&ix.slots[j], w);
                ix.slots[hole].store(w, Ordering::Release);
                self.meta.pass_min = self.meta.pass_min.min(full_at(fp_of(w), state_of(w)));
                hole = j;
            }
        }
    }

    /// Grows the active region for `want` live entries at a load of at most ⅓ (so the next growth
    /// is at least `active / 6` inserts away), in place while it stays within
    /// [`GROW_IN_PLACE_MAX`] slots, else to the whole table: every live entry is taken out with a
    /// CAS (capturing its state), the old region cleared, and the entries put back.
    fn grow(&mut self, want: usize) {
        let ix = self.index;
        let mut active = want
            .saturating_mul(3)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .max(MIN_ACTIVE);
        if active > GROW_IN_PLACE_MAX {
            active = ix.slots.len();
        }
        let active = active.min(ix.slots.len());
        ix.rebuilds.fetch_add(1, Ordering::SeqCst);
        let mut live = Vec::with_capacity(self.meta.live);
        for slot in ix.slots[..=ix.mask()].iter() {
            let w = slot.load(Ordering::Acquire);
            if fp_of(w) != EMPTY {
                live.push(take(slot, w));
            }
        }
        ix.mask.store((active - 1) as u64, Ordering::Release);
        for w in live {
            self.put(fp_of(w), state_of(w));
        }
        // A new pass over the new region (the old bound stays valid until it ends).
        self.meta.cursor = 0;
        self.meta.pass_left = active;
        self.meta.pass_min = u64::MAX;
        ix.rebuilds.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::vec;

    /// Fingerprints spread over the table (a cheap mixer; the limiter uses a seeded hash).
    fn fp(i: u64) -> u64 {
        fingerprint(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
    }

    /// Evicts the keys `evict` says, one bounded step per lock, over one whole pass; returns how
    /// many, and the last pass bound seen.
    fn sweep(ix: &Index, evict: impl Fn(u64) -> bool) -> (u64, Option<u64>) {
        let (mut evicted, mut examined, mut bound) = (0, 0, None);
        loop {
            let mut locked = ix.lock();
            let step = locked.sweep_step(5, |f, _| if evict(f) { 0 } else { 7 }, || ());
            evicted += step.evicted;
            examined += step.examined;
            bound = step.pass_done.or(bound);
            if examined >= locked.active() {
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
    fn capacity_is_twice_max_keys_rounded_up() {
        assert_eq!(Index::new(0).slots.len(), 8);
        assert_eq!(Index::new(5).slots.len(), 16);
        assert_eq!(Index::new(1 << 20).slots.len(), 1 << 21);
        assert_eq!(Index::new(1_000_000).slots.len(), 1 << 21);
        assert_eq!(Index::new(1_000_000).mask() + 1, MIN_ACTIVE);
    }

    #[test]
    fn grows_in_place_up_to_the_limit_then_takes_the_whole_table() {
        let ix = Index::new(1_000_000);
        let mut sizes = vec![ix.mask() + 1];
        for i in 0..3_000 {
            ix.lock().insert(fp(i), i + 10, 0);
            if ix.mask() + 1 != *sizes.last().unwrap() {
                sizes.push(ix.mask() + 1);
            }
        }
        assert_eq!(sizes, [64, 128, 256, 512, 1024, 2048, 4096, 1 << 21]);
        for i in 0..3_000 {
            assert_eq!(ix.load(fp(i)), Some(i + 10));
        }
    }

    #[test]
    fn grows_keeps_every_state_and_decides_in_place() {
        let ix = Index::new(1000);
        for i in 0..1000 {
            assert!(!ix.lock().contains(fp(i)));
            ix.lock().insert(fp(i), i + 10, 0);
        }
        assert_eq!(ix.mask() + 1, 2048, "grew to the whole table");
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
            ix.lock().insert(fp(i), i + 1, 0);
        }
        assert_eq!(ix.mask() + 1, 128);
        assert_eq!(sweep(&ix, |f| (0..30).any(|i| fp(i) == f)).0, 30);
        for i in 0..30 {
            assert_eq!(ix.load(fp(i)), None);
        }
        for i in 30..64 {
            assert_eq!(ix.load(fp(i)), Some(i + 1));
        }
        assert_eq!(used(&ix), 34, "no markers left behind");
        for i in 100..130 {
            ix.lock().insert(fp(i), i, 0);
        }
        assert_eq!(sweep(&ix, |f| (30..64).any(|i| fp(i) == f)).0, 34);
        for i in 100..130 {
            assert_eq!(ix.load(fp(i)), Some(i));
        }
        assert_eq!(used(&ix), 30);
        assert_eq!(ix.lock().meta.live, 30);
    }

    /// Long colliding chains, wrapping past the end of the region: random inserts and evictions
    /// against a map, every survivor found by a lock-free probe, nothing stored twice.
    #[test]
    fn shifting_back_colliding_and_wrapping_chains() {
        let mut rng = 0x1234_5678_9ABC_DEF1u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let ix = Index::new(32); // 64 slots, all active
        assert_eq!(ix.mask(), 63);
        // Homes 61..=63 and 0..=1 only: chains collide and wrap around the end.
        let key = |k: u64| (k << 8) | [61, 62, 63, 0, 1][(k % 5) as usize] | 0x1_0000_0000;
        let mut model: HashMap<u64, u64> = HashMap::new();
        for round in 0..2_000u64 {
            if model.len() < 32 && next() % 3 != 0 {
                let k = key(next() % 200);
                if !ix.lock().contains(k) {
                    ix.lock().insert(k, round, 0);
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

    #[test]
    fn a_step_does_bounded_work_and_a_pass_yields_the_earliest_full_instant() {
        let ix = Index::new(1 << 16);
        for i in 0..30_000 {
            ix.lock().insert(fp(i), i, 100);
        }
        let active = ix.mask() + 1;
        assert_eq!(active, 1 << 17);
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
