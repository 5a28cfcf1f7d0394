//! What a save reads (`src/keyed/persist.rs`), under the mutex, so that no entry moves while it
//! reads: the regions that hold entries, and one slot at a time.

use super::layout::{old_of, Region};
use super::slot::{fp_of, state_of, EMPTY};
use super::Locked;
use crate::sync::Ordering;

/// A region as a save walks it ([`Locked::scan_regions`]); opaque outside the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScanRegion(Region);

impl ScanRegion {
    /// Its length in slots.
    pub(crate) fn len(self) -> usize {
        self.0.len()
    }
}

impl Locked<'_> {
    /// The regions that hold entries: the one a migration is draining (if any), then the
    /// current one.
    pub(crate) fn scan_regions(&self) -> (Option<ScanRegion>, ScanRegion) {
        let cur = self.index.region();
        let old = self
            .meta
            .migration
            .map(|_| ScanRegion(old_of(self.index.cap, cur)));
        (old, ScanRegion(cur))
    }

    /// The entry in slot `i` (modulo the length) of `r`: its fingerprint and state, or `None`
    /// for an empty slot.
    pub(crate) fn scan_slot(&self, r: ScanRegion, i: usize) -> Option<(u64, u64)> {
        let w = self.index.slots[r.0.at(i)].load(Ordering::Acquire);
        (fp_of(w) != EMPTY).then(|| (fp_of(w), state_of(w)))
    }
}
