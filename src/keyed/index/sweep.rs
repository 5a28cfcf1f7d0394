//! The incremental sweep: bounded steps that evict full buckets, and the pass bound on the
//! earliest instant any live entry is full.

use super::layout::Region;
use super::slot::{evict_if_full, fp_of, state_of, take, EMPTY};
use super::{Index, Locked};
use crate::sync::Ordering;

/// Work units (slots visited or entries moved) one sweep step may spend under the mutex.
pub(crate) const STEP_WORK: usize = 1024;

/// Evictions after which a sweep step stops (each a CAS and a shift of its chain); as many
/// again of full entries that closing a gap moved back, evicted where they land.
pub(crate) const STEP_EVICTIONS: u64 = 16;

/// What one sweep step did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Entries evicted.
    pub(crate) evicted: u64,
    /// Slots of the current region examined (and left behind by the cursor).
    pub(crate) examined: usize,
    /// Slots of an old region drained by the migration in progress.
    pub(crate) migrated: usize,
    /// Full entries that closing a gap moved back and the step left where they landed (past
    /// its eviction budget, or 64 slots or more from the gap): such an entry may sit behind the
    /// cursor, so a caller that must evict every full entry walks another pass.
    pub(crate) moved_full: u64,
    /// `Some(bound)` when the step ended a pass: the earliest instant at which a live entry can
    /// be full (`u64::MAX` if none).
    pub(crate) pass_done: Option<u64>,
}

/// A whole sweep's progress over its steps ([`Sweep::before`] and [`Sweep::after`] under each
/// step's lock): done after a region's worth of slots examined with no old region to drain.
/// The count starts again when a migration restarts the pass ([`Locked::restarts`], at most
/// once per doubling) or a step leaves a full entry behind the cursor ([`Step::moved_full`],
/// only after evictions: a sweep goes on only while it finds full entries).
#[derive(Debug, Default)]
pub(super) struct Sweep {
    pub(super) examined: usize,
    restarts: Option<u64>,
}

impl Sweep {
    /// Before a step, under its lock.
    pub(super) fn before(&mut self, locked: &Locked<'_>) {
        let seen = locked.restarts();
        if self.restarts.replace(seen) != Some(seen) {
            self.examined = 0;
        }
    }

    /// After the step, under the same lock: whether the sweep is done.
    pub(super) fn after(&mut self, locked: &Locked<'_>, step: &Step) -> bool {
        self.examined = if step.moved_full > 0 {
            0
        } else {
            self.examined + step.examined
        };
        self.examined >= locked.active() && !locked.migrating()
    }
}

impl Index {
    /// A whole sweep: `step` (one bounded step) under the mutex, released between steps, until
    /// [`Sweep`] says it is done; returns the entries evicted.
    pub(crate) fn sweep_all(&self, mut step: impl FnMut(&mut Locked<'_>) -> Step) -> u64 {
        let (mut evicted, mut sweep) = (0u64, Sweep::default());
        loop {
            let mut locked = self.lock();
            sweep.before(&locked);
            let done = step(&mut locked);
            evicted += done.evicted;
            if sweep.after(&locked, &done) {
                return evicted;
            }
        }
    }
}

/// The slot the sweep examines at position `cursor` of its pass over `mask + 1` slots: cache
/// lines (4 slots) in bit-reversed order, the slots of a line in order. A permutation that
/// spreads any run of consecutive positions evenly over the region.
#[inline]
pub(super) fn visit_order(cursor: usize, mask: usize) -> usize {
    pub(super) const LINE: usize = 4;
    let lines = (mask + 1) / LINE;
    if lines <= 1 {
        return cursor;
    }
    let bits = lines.trailing_zeros();
    let line = (cursor / LINE).reverse_bits() >> (usize::BITS - bits);
    line * LINE + cursor % LINE
}

impl Locked<'_> {
    /// One bounded step of the incremental sweep at reading `now`: from the cursor, at most
    /// [`STEP_WORK`] units of work (a slot examined or an entry moved; [`evict_landed`]'s shifts
    /// may go past it), [`STEP_EVICTIONS`] evictions and one whole region, evicting every entry
    /// whose `full_at(fp, state)` is at or before `now` (`evicting()` before each eviction's
    /// CAS) and closing each gap with [`shift_back`]. During a migration it first drains the
    /// old region (same budget). The cursor follows [`visit_order`]: a left-to-right sweep under
    /// a flood leaves the region just ahead of it nearly full, where linear probing degrades.
    ///
    /// [`evict_landed`]: Locked::evict_landed
    /// [`shift_back`]: Locked::shift_back
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
                // On into the next pass within the budget, never a slot twice in one step: a
                // region of at most `STEP_WORK` slots is examined whole by a step evicting nothing.
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

    /// Evicts, where they landed, the entries that closing a gap moved back and that are full
    /// at `now` (the cursor may have passed them): bit `d` of `landed` for slot `from + d` of
    /// `r` ([`shift_back`](Locked::shift_back)). The farthest first: closing a gap only moves
    /// entries from later in the chain, so the nearer ones stay put. Up to [`STEP_EVICTIONS`]
    /// more evictions in one step; past that they are left and counted in `step.moved_full`.
    /// Returns the slots visited.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evict_landed(
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
            // Only the mutex holder moves entries, and closing a later gap moves nothing before
            // it: the entry recorded is still there.
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
    /// Returns the slots visited, and where the moved entries full at `now` landed: bit `d` for
    /// slot `origin + d`, for the caller. A moved entry may land behind the cursor, so one not
    /// reported (64 slots or more from `origin`, counted in `step.moved_full` if full) has its
    /// full instant folded into the pass's bound here.
    pub(super) fn shift_back(
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
            let home = ix.home(f) & mask;
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
