//! Where entries live: the regions of the buffer, the layout word that names the current one,
//! and the table's size for `max_keys`.
//!
//! One buffer, allocated once: `capacity = max(8, next_power_of_two(2 × max_keys))` slots.
//! Entries live in the *current region*, a power-of-two run of slots probed linearly from each
//! fingerprint's home, which starts at [`MIN_ACTIVE`] slots (or the whole table) and doubles as
//! keys arrive, up to `capacity`, so live entries fill about ¼ to ½ of it; it never shrinks.
//! A doubling *migrates* entries a few at a time, so successive regions are disjoint: regions of
//! `capacity / 2^k` slots lie at the front for even `k` and at the back (offset `capacity`) for
//! odd `k`, so the buffer holds `capacity + capacity / 2` slots and a region reuses only slots
//! emptied two doublings before.

/// The smallest region, in slots (or the whole table, if smaller); under loom 4, so that a
/// table for 4 keys (8 slots) migrates once.
pub(super) const MIN_ACTIVE: usize = if cfg!(tollgate_loom) { 4 } else { 64 };

/// The largest table: 2^30 slots (`max_keys` above 2^29 is clamped), so a region's offset and
/// mask fit the layout word's 31-bit fields, and the buffer's length a 32-bit `usize`.
pub(super) const MAX_CAPACITY: usize = 1 << 30;

/// A region of the buffer: `mask + 1` slots (a power of two) from `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Region {
    pub(super) base: usize,
    pub(super) mask: usize,
}

impl Region {
    /// The buffer index of the region's slot `i` (taken modulo its length).
    #[inline]
    pub(super) fn at(self, i: usize) -> usize {
        self.base + (i & self.mask)
    }

    #[inline]
    pub(super) fn len(self) -> usize {
        self.mask + 1
    }
}

/// The layout word's flag: a migration is in progress (the old region is the one of half the
/// current region's length, on the other side of the buffer).
pub(super) const MIGRATING: u64 = 1;

/// The layout word: `base << 32 | mask << 1 | migrating`.
#[inline]
pub(super) fn encode(r: Region, migrating: bool) -> u64 {
    ((r.base as u64) << 32) | ((r.mask as u64) << 1) | u64::from(migrating)
}

/// The current region named by a layout word.
#[inline]
pub(super) fn decode(layout: u64) -> Region {
    Region {
        base: (layout >> 32) as usize,
        mask: ((layout as u32) >> 1) as usize,
    }
}

/// The whole table's length for `max_keys`: twice it, rounded up to a power of two, within
/// `[8, MAX_CAPACITY]`.
pub(super) fn capacity(max_keys: usize) -> usize {
    max_keys
        .saturating_mul(2)
        .checked_next_power_of_two()
        .unwrap_or(MAX_CAPACITY)
        .clamp(8, MAX_CAPACITY)
}

/// Where the region of `len` slots lies in a table of `cap`: at the front if `cap / len` is
/// an even power of two, else at the back.
pub(super) fn region_in(cap: usize, len: usize) -> Region {
    let doublings_left = (cap / len).trailing_zeros();
    Region {
        base: if doublings_left % 2 == 1 { cap } else { 0 },
        mask: len - 1,
    }
}

/// The region a migration to `new` drains: half its length, on the other side.
#[inline]
pub(super) fn old_of(cap: usize, new: Region) -> Region {
    Region {
        base: if new.base == 0 { cap } else { 0 },
        mask: new.mask >> 1,
    }
}
