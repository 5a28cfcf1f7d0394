//! One slot: the 128-bit word `fingerprint << 64 | state`, and the CASes that take an entry
//! out of it.

use crate::sync::{AtomicU128, Ordering};

/// Fingerprint of a free slot.
pub(super) const EMPTY: u64 = 0;

/// Maps a 64-bit hash to a fingerprint: its low bit set, so never [`EMPTY`] (63 bits of the
/// hash identify a key). Under loom, whose models are written against their keys' whole
/// hashes, 0 and 1 become 2 and 3 and every other hash is its own fingerprint.
#[inline]
pub(crate) fn fingerprint(hash: u64) -> u64 {
    if !cfg!(tollgate_loom) {
        hash | 1
    } else if hash < 2 {
        hash + 2
    } else {
        hash
    }
}

/// Whether some hash has fingerprint `fp` ([`fingerprint`]): what a restore checks of every
/// fingerprint it reads.
#[cfg(feature = "persist")]
pub(crate) fn is_fingerprint(fp: u64) -> bool {
    fingerprint(fp) == fp
}

/// A keyed table's fingerprint hasher: foldhash's `fast` variant, its shared seed (the words
/// its multiplications xor with the input) drawn from the table's seed rather than foldhash's
/// fixed one, whose words are public: over those, a key whose second word equals one of them
/// makes a product 0 whatever the per-hasher seed, so keys built that way would share a
/// fingerprint in every table (the index's home slots add a keyed mix of their own:
/// [`Index::home`](super::Index::home)). Under loom, the `quality` variant with its fixed
/// seed, whose slots the models are written against.
pub(crate) struct Hasher {
    #[cfg(not(tollgate_loom))]
    seed: u64,
    #[cfg(not(tollgate_loom))]
    shared: foldhash::SharedSeed,
    #[cfg(tollgate_loom)]
    fixed: foldhash::quality::SeedableRandomState,
}

impl Hasher {
    /// The key's 64-bit hash under this table's seeds.
    #[inline]
    pub(crate) fn hash_one<Q: core::hash::Hash + ?Sized>(&self, key: &Q) -> u64 {
        #[cfg(not(tollgate_loom))]
        {
            use core::hash::Hasher as _;
            let mut h = foldhash::fast::FoldHasher::with_seed(self.seed, &self.shared);
            key.hash(&mut h);
            h.finish()
        }
        #[cfg(tollgate_loom)]
        {
            core::hash::BuildHasher::hash_one(&self.fixed, key)
        }
    }
}

/// A keyed table's fingerprint hasher and its seed: `seed` (a restore's) or 64 random bits,
/// from which the shared seed is derived too, so that the seed alone finds a saved table's keys
/// again. Fixed (seed 0) under loom, whose models replay the same slots.
pub(crate) fn seeded_hasher(seed: Option<u64>) -> (u64, Hasher) {
    #[cfg(not(tollgate_loom))]
    {
        use core::hash::BuildHasher;
        let seed = seed.unwrap_or_else(|| foldhash::quality::RandomState::default().hash_one(0u8));
        let shared = foldhash::SharedSeed::from_u64(seed);
        (seed, Hasher { seed, shared })
    }
    #[cfg(tollgate_loom)]
    {
        let _ = seed;
        (
            0,
            Hasher {
                fixed: foldhash::quality::SeedableRandomState::fixed(),
            },
        )
    }
}

#[inline]
pub(super) fn pack(fp: u64, state: u64) -> u128 {
    (u128::from(fp) << 64) | u128::from(state)
}

#[inline]
pub(super) fn fp_of(word: u128) -> u64 {
    (word >> 64) as u64
}

#[inline]
pub(super) fn state_of(word: u128) -> u64 {
    word as u64
}

/// Takes the entry out of `slot` (a CAS to empty, retried while admissions change it) and
/// returns its word: an admission landing first is in it, one landing later fails and re-probes.
pub(super) fn take(slot: &AtomicU128, mut w: u128) -> u128 {
    loop {
        match slot.compare_exchange_weak(w, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return w,
            Err(actual) => w = actual,
        }
    }
}

/// Evicts the entry in `slot` (whose word `w` was read, not empty) if it is full at `now`:
/// `evicting()`, then a CAS to empty, retried with the new word while admissions change it (a
/// racing admission either lands first, or fails its own CAS and re-probes into the insert
/// path). `Ok(())` once evicted; else `Err((word, at))`: the latest word, not full before
/// `at > now` (`u64::MAX` for an empty slot, which callers never pass).
pub(super) fn evict_if_full(
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
        // Strong: a spurious failure would run `evicting()` twice for one eviction.
        match slot.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(actual) => w = actual,
        }
    }
}
