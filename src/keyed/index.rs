//! The keyed limiter's index: a flat, open-addressed table of 16-byte slots that we own.
//!
//! # Layout
//!
//! One `Box<[AtomicU128]>` of `capacity = max(8, next_power_of_two(2 × max_keys))` slots,
//! allocated once, never resized. Entries live in the first `active` slots (a power of two, at
//! least 64 or the whole table), linear probing from `fingerprint & (active − 1)`; `active` grows
//! (by an in-place rebuild) as keys arrive, so a table sized for a million keys that tracks ten
//! thousand touches only a few hundred KiB: its lookups stay in cache and in the TLB. A slot is one 128-bit word `fingerprint << 64 |
//! state`: the key's 64-bit fingerprint (a seeded hash; `0` = empty, `1` = tombstone, real
//! hashes 0 and 1 are remapped to 2 and 3) and its [`gcra`](crate::gcra) state. **Keys are not
//! stored**: two keys with equal fingerprints share one bucket (see
//! [`KeyedLimiter`](super::KeyedLimiter)'s docs for that trade). 16 bytes per slot at a load
//! factor of at most ½: 32 to 64 bytes per unit of `max_keys` (33.6 at `max_keys` = 1,000,000).
//!
//! # Protocol
//!
//! * **Lookup** (lock-free, the hot path): probe from the home slot with plain 128-bit loads
//!   until the fingerprint matches or a slot is empty. On a match the decision is a CAS of the
//!   *whole* slot from `(fp, state)` to `(fp, state')`, so it succeeds only while the slot still
//!   holds this key: no ABA through eviction, slot reuse or rebuild is possible, and a lookup
//!   writes nothing but the key's own slot.
//! * **Insert, evict, sweep, rebuild** happen under one mutex. An insertion re-probes under it
//!   (so a key is never inserted twice) and writes its slot with one store (into the first
//!   tombstone of the chain, else the empty slot ending it). Eviction is a CAS from a *full*
//!   `(fp, state)` to a tombstone: a racing admission either lands first (the eviction's CAS
//!   fails and the bucket is no longer full) or fails its own CAS, re-probes, misses and takes
//!   the insert path, which waits on the mutex.
//! * **Rebuild**: when tombstones exceed a quarter of the active slots, or when live entries and
//!   tombstones would pass half of an active region smaller than the table, the table is rebuilt
//!   in place under the mutex, its active region sized to the next power of two of `3 × live`
//!   (at least 64 slots, at most the table): every live slot is taken out with a CAS to empty (capturing its state, so
//!   no admission is lost: one that lands first is in the captured value, one that lands later
//!   fails), every slot is cleared, and the captured entries are put back. Lookups that miss
//!   meanwhile take the insert path and wait for the mutex; the insert path's re-probe under the
//!   mutex is the only thing that ever concludes "absent".
//! * Probing always ends: whenever the mutex is free, either `active` < capacity and live +
//!   tombstones ≤ `active` / 2, or `active` = capacity, live ≤ `max_keys` ≤ capacity / 2 and
//!   tombstones ≤ capacity / 4; either way a quarter of the active slots are empty. Lock-free
//!   probes are also capped at `active` steps (a miss then takes the insert path).
//!
//! Under `--cfg tollgate_loom` the same code runs on loom's mutex and `crate::sync`'s loom
//! `AtomicU128` (a loom mutex per word: every 128-bit load, store and CAS is one model-checked
//! step), so the loom models explore this protocol itself.

use crate::sync::{AtomicU128, AtomicU64, Mutex, MutexGuard, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// Fingerprint of a never-used slot.
const EMPTY: u64 = 0;
/// Fingerprint of a slot whose entry was evicted.
const TOMBSTONE: u64 = 1;

/// Maps a 64-bit hash to a fingerprint (never [`EMPTY`] or [`TOMBSTONE`]).
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
const MIN_ACTIVE: usize = 64;

/// The table. Not generic: it sees only fingerprints.
pub(crate) struct Index {
    slots: Box<[AtomicU128]>,
    /// `active − 1`: entries live in the first `active` slots (a power of two). Written only by
    /// a rebuild, under the mutex.
    mask: AtomicU64,
    /// Odd while a rebuild runs (it is incremented before the slots are cleared and after they
    /// are refilled): a lock-free miss is only trusted if this did not change around it.
    rebuilds: AtomicU64,
    /// Serializes every change of a fingerprint or of `mask`.
    lock: Mutex<Meta>,
}

/// The counts the mutex guards.
struct Meta {
    live: usize,
    tombstones: usize,
}

impl Index {
    /// A table for at most `max_keys` live entries.
    pub(crate) fn new(max_keys: usize) -> Self {
        let cap = max_keys
            .saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(1 << (usize::BITS - 1))
            .max(8);
        Index {
            slots: (0..cap).map(|_| AtomicU128::new(0)).collect(),
            mask: AtomicU64::new((MIN_ACTIVE.min(cap) - 1) as u64),
            rebuilds: AtomicU64::new(0),
            lock: Mutex::new(Meta {
                live: 0,
                tombstones: 0,
            }),
        }
    }

    /// The rebuild epoch: read it before a lock-free probe and compare after; odd or changed
    /// means the probe may have missed a present key while the table was being rebuilt.
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
    /// rebuild may miss a present key (the caller then asks again under the mutex), never find
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

    /// The state of `fp`, if tracked (lock-free).
    pub(crate) fn load(&self, fp: u64) -> Option<u64> {
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
                // Evicted or moved by a rebuild: the insert path decides under the mutex.
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

    /// Takes the mutex: the only way to insert or remove.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            index: self,
            meta: self.lock.lock(),
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

    /// Inserts `fp` (not tracked: checked with [`contains`](Locked::contains) under this same
    /// lock) with `state`.
    pub(crate) fn insert(&mut self, fp: u64, state: u64) {
        let ix = self.index;
        let active = ix.mask() + 1;
        // Below the full size, keep live entries and tombstones to at most half the region.
        if active < ix.slots.len() && (self.meta.live + self.meta.tombstones + 1) * 2 > active {
            self.rebuild(self.meta.live + 1);
        }
        self.put(fp, state);
        self.meta.live += 1;
    }

    /// Writes `fp` into its chain (the first tombstone, else the empty slot ending it).
    fn put(&mut self, fp: u64, state: u64) {
        let ix = self.index;
        let mask = ix.mask();
        let mut i = fp as usize & mask;
        let mut tomb = None;
        // At least a quarter of the slots are empty (module docs), so this ends.
        loop {
            let f = fp_of(ix.slots[i].load(Ordering::Acquire));
            if f == EMPTY {
                break;
            }
            if f == TOMBSTONE && tomb.is_none() {
                tomb = Some(i);
            }
            debug_assert_ne!(f, fp, "inserted twice");
            i = (i + 1) & mask;
        }
        if let Some(t) = tomb {
            i = t;
            self.meta.tombstones -= 1;
        }
        ix.slots[i].store(pack(fp, state), Ordering::Release);
    }

    /// Evicts every entry full at `now` (`quota_of` gives an entry's quota from its
    /// fingerprint), rebuilding the table if tombstones pile up. Returns how many were evicted
    /// and the earliest instant at which a remaining entry is full (`u64::MAX` if none).
    pub(crate) fn sweep(
        &mut self,
        mut is_full: impl FnMut(u64, u64) -> Result<(), u64>,
    ) -> (u64, u64) {
        let ix = self.index;
        let mut evicted = 0;
        let mut next = u64::MAX;
        for slot in ix.slots[..=ix.mask()].iter() {
            let mut w = slot.load(Ordering::Acquire);
            while fp_of(w) > TOMBSTONE {
                if let Err(at) = is_full(fp_of(w), state_of(w)) {
                    next = next.min(at);
                    break;
                }
                // A racing admission either lands first (this CAS fails and the bucket is no
                // longer full) or fails its own CAS and re-probes into the insert path.
                match slot.compare_exchange_weak(
                    w,
                    pack(TOMBSTONE, 0),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        evicted += 1;
                        self.meta.live -= 1;
                        self.meta.tombstones += 1;
                        break;
                    }
                    Err(actual) => w = actual,
                }
            }
        }
        if self.meta.tombstones > (ix.mask() + 1) / 4 {
            self.rebuild(self.meta.live);
        }
        (evicted, next)
    }

    /// Rebuilds the table in place without tombstones, its active region sized for `want` live
    /// entries at a load of at most ⅓ (so the next rebuild is at least `active / 6` inserts
    /// away: growth costs O(1) amortized per insert).
    fn rebuild(&mut self, want: usize) {
        let ix = self.index;
        ix.rebuilds.fetch_add(1, Ordering::SeqCst);
        let mut live = Vec::with_capacity(self.meta.live);
        for slot in ix.slots[..=ix.mask()].iter() {
            let mut w = slot.load(Ordering::Acquire);
            loop {
                if fp_of(w) <= TOMBSTONE {
                    slot.store(0, Ordering::Release);
                    break;
                }
                // Captures the latest state: admissions after this CAS fail theirs and wait on
                // the mutex in the insert path.
                match slot.compare_exchange_weak(w, 0, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        live.push(w);
                        break;
                    }
                    Err(actual) => w = actual,
                }
            }
        }
        self.meta.tombstones = 0;
        let active = want
            .saturating_mul(3)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .max(MIN_ACTIVE)
            .min(ix.slots.len());
        ix.mask.store((active - 1) as u64, Ordering::Release);
        for w in live {
            self.put(fp_of(w), state_of(w));
        }
        ix.rebuilds.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    /// Fingerprints spread over the table (a cheap mixer; the limiter uses a seeded hash).
    fn fp(i: u64) -> u64 {
        fingerprint(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
    }

    /// Evicts the keys `evict` says, via a sweep; returns how many.
    fn sweep(ix: &Index, evict: impl Fn(u64) -> bool) -> u64 {
        ix.lock()
            .sweep(|f, _| if evict(f) { Ok(()) } else { Err(7) })
            .0
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
    fn grows_keeps_every_state_and_decides_in_place() {
        let ix = Index::new(1000);
        for i in 0..1000 {
            assert!(!ix.lock().contains(fp(i)));
            ix.lock().insert(fp(i), i + 10);
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
    fn tombstones_are_reused_and_rebuilds_keep_the_survivors() {
        let ix = Index::new(64); // 128 slots
        for i in 0..64 {
            ix.lock().insert(fp(i), i + 1);
        }
        assert_eq!(ix.mask() + 1, 128);
        // 30 tombstones: not yet a quarter of 128.
        assert_eq!(sweep(&ix, |f| (0..30).any(|i| fp(i) == f)), 30);
        assert_eq!(ix.lock().meta.tombstones, 30);
        for i in 0..30 {
            assert_eq!(ix.load(fp(i)), None);
        }
        // Re-inserting through the chains reuses tombstones (never more slots than keys + 30).
        for i in 100..130 {
            ix.lock().insert(fp(i), i);
        }
        let meta = ix.lock();
        assert!(meta.meta.tombstones < 30, "some tombstones reused");
        assert_eq!(meta.meta.live, 64);
        drop(meta);
        // 40 more evictions: tombstones pass a quarter of the slots, so the table is rebuilt.
        assert_eq!(sweep(&ix, |f| (30..64).any(|i| fp(i) == f)), 34);
        assert_eq!(ix.lock().meta.tombstones, 0, "rebuilt");
        for i in 100..130 {
            assert_eq!(ix.load(fp(i)), Some(i));
        }
        for i in 30..64 {
            assert_eq!(ix.load(fp(i)), None);
        }
        let used = ix
            .slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count();
        assert_eq!(used, 30, "no tombstones left behind");
    }
}
