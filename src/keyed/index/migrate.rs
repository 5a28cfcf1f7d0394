//! Doubling the current region: entries move from the old region to the new one a few per
//! insertion (docs/guarantees.md, "The keyed index").

use super::layout::{encode, old_of, region_in, Region};
use super::slot::{evict_if_full, fp_of, pack, state_of, take, EMPTY};
use super::Locked;
use crate::sync::Ordering;

/// Old-region slots one insertion examines during a migration (moving every entry among them).
/// At least 3 keeps the new region under half full when the migration ends; 4 leaves a margin.
/// Under loom 2, so a migration of the 4-slot region spans insertions and the models see
/// lookups and decisions racing a migration in progress.
pub(crate) const MIGRATE_STEP: usize = if cfg!(tollgate_loom) { 2 } else { 4 };

/// A migration's walk down the old region.
#[derive(Clone, Copy, Debug)]
pub(super) struct Migration {
    /// The old region's slot (relative to it) visited next.
    pub(super) cursor: usize,
    /// Slots still to drain, once the walk met the empty slot it starts from; `None` while it
    /// is still looking for one.
    pub(super) left: Option<usize>,
}

/// What one migration step did.
#[derive(Debug, Default)]
pub(super) struct Migrated {
    pub(super) visited: usize,
    pub(super) moved: usize,
    pub(super) evicted: u64,
}

impl Locked<'_> {
    /// One migration step of [`MIGRATE_STEP`] old slots (evicting nothing), if a migration is
    /// in progress: how lookups help it end even if no key is inserted any more.
    pub(crate) fn help_migrate(&mut self) {
        self.migrate(
            MIGRATE_STEP,
            usize::MAX,
            None,
            &mut |_, _| u64::MAX,
            &mut || (),
        );
    }

    /// Makes the (empty) region of twice `old`'s length current and starts draining `old` into
    /// it; the sweep starts a new pass over the new region.
    pub(super) fn start_migration(&mut self, old: Region) {
        let ix = self.index;
        let new = region_in(ix.cap, old.len() * 2);
        debug_assert_eq!(old_of(ix.cap, new), old);
        self.meta.migration = Some(Migration {
            cursor: old.mask,
            left: None,
        });
        // No entry moves here: a probe that read the previous layout still finds every entry
        // in `old` until a step moves it (and bumps the epoch).
        ix.layout.store(encode(new, true), Ordering::Release);
        // The entries still in `old` are examined by this pass where they land (its cursor
        // waits for the migration).
        self.meta.cursor = 0;
        self.meta.pass_left = new.len();
        self.meta.pass_min = u64::MAX;
        self.meta.restarts += 1;
    }

    /// One step of the migration in progress: walks down at most `visits` slots of the old
    /// region within `work` units (a slot visited, an entry moved or evicted), draining each
    /// entry met after the first empty slot: evicted if `evict_at` is `Some((now, max))` and it
    /// is full at `now` (at most `max` evictions), else moved to the current region. Ends the
    /// migration when the walk is back at its empty start.
    pub(super) fn migrate(
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
        let old = old_of(ix.cap, new);
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
            // The old region is all empty: it leaves the layout.
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
    pub(super) fn put(&mut self, fp: u64, state: u64) {
        let ix = self.index;
        let r = ix.region();
        let mut i = ix.home(fp);
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
}
