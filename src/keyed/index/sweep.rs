//! The incremental sweep: bounded steps that evict full buckets, and the pass bound on the
//! earliest instant any live entry is full.

use super::layout::Region;
use super::slot::{evict_if_full, fp_of, state_of, take, EMPTY};
use super::{Index, Locked};
use crate::sync::Ordering;

/// Work units (slots visited or entries moved) one sweep step may spend under the mutex.
pub(crate) const STEP_WORK: usize = 1024;

/// Evictions after which a sweep step stops (each is a CAS and a shift of its chain, under the
/// mutex insertions wait for); as many again of full entries that closing a gap moved back,
/// evicted where they land.
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
    /// A whole sweep: `step` (one bounded sweep step, returning what it did) under the mutex,
    /// the mutex released between steps so insertions wait for one step at most, never a
    /// pass, until [`Sweep`] says the pass is done. The entries evicted.
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
/// lines (4 slots) in bit-reversed order, the slots of a line in order. A permutation, so a
/// pass examines every slot once; any run of consecutive positions is spread evenly over the
/// region.
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
