//! The lock-free side: probes of the current region (and of the old one during a migration),
//! and [`Hit`], the CAS on a found slot.

use super::layout::{decode, old_of, Region, MIGRATING};
use super::slot::{fp_of, pack, state_of, EMPTY};
use super::Index;
use crate::sync::{AtomicU128, Backoff, Ordering};

impl Index {
    /// The rebuild epoch: read it before a lock-free probe and compare after; odd or changed
    /// means the probe may have missed a present key while entries were moving.
    #[inline]
    pub(crate) fn rebuild_epoch(&self) -> u64 {
        self.rebuilds.load(Ordering::SeqCst)
    }

    #[inline]
    pub(super) fn layout(&self) -> u64 {
        self.layout.load(Ordering::Acquire)
    }

    #[inline]
    pub(super) fn region(&self) -> Region {
        decode(self.layout())
    }

    /// Whether a migration is in progress (a hint without the mutex).
    #[inline]
    pub(crate) fn migrating(&self) -> bool {
        self.layout() & MIGRATING != 0
    }

    /// The slot holding `fp` and its word, if a lock-free probe finds it. A probe racing a
    /// move may miss a present key, never find a wrong one (the word holds the fingerprint).
    #[inline]
    pub(super) fn find(&self, fp: u64) -> Option<(&AtomicU128, u128)> {
        let layout = self.layout();
        match self.probe(decode(layout), fp) {
            None if layout & MIGRATING != 0 => self.find_old(layout, fp),
            found => found,
        }
    }

    /// [`find`](Index::find)'s probe of the old region, during a migration.
    #[inline(never)]
    pub(super) fn find_old(&self, layout: u64, fp: u64) -> Option<(&AtomicU128, u128)> {
        self.probe(old_of(self.cap, decode(layout)), fp)
    }

    /// Linear probing for `fp` in `r`, from its home slot to the first empty one (at most the
    /// whole region).
    #[inline]
    pub(super) fn probe(&self, r: Region, fp: u64) -> Option<(&AtomicU128, u128)> {
        // One bounds check for the region, none per step (the index is masked to it).
        let region = &self.slots[r.base..r.base + r.len()];
        let mask = region.len() - 1;
        let home = self.home(fp);
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
    /// Always `None` during a migration: the slow path then probes both regions
    /// ([`apply`](Index::apply)) and helps the migration along. A miss may be wrong while
    /// entries move (the caller then takes the insert path).
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
        // A short spin after each lost CAS, as in `Bucket`'s retry loop (a hot key's slot).
        let mut backoff = Backoff::default();
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
                    Err(actual) => {
                        w = actual;
                        backoff.spin();
                    }
                },
                Ok(None) => return Some(Ok(())),
                Err(e) => return Some(Err(e)),
            }
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

    /// One weak CAS of the whole slot from the word read to `(fp, next)`: fails if anything
    /// changed it since (a decision, an eviction, a move), never writes another key's slot.
    /// `Relaxed` on failure: the caller probes again ([`Index::apply`]) without the value.
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
