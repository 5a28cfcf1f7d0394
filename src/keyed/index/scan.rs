//! A save's walk over every entry (`src/keyed/persist.rs`, whose module docs argue that it
//! misses none): chunks of slots read under the mutex, so that no entry moves while one is read.

use super::layout::{old_of, Region};
use super::slot::{fp_of, state_of, EMPTY};
use super::{Index, Locked};
use crate::sync::Ordering;
use alloc::vec::Vec;

impl Index {
    /// Walks every entry: `on_chunk` receives the `(fingerprint, word)` entries (states, or
    /// record handles) of each chunk of about `chunk` slots, read under the mutex, and runs
    /// without it. A migration's old region first, then the current one, then every region
    /// that became current meanwhile.
    pub(crate) fn walk<E>(
        &self,
        chunk: usize,
        mut on_chunk: impl FnMut(&[(u64, u64)]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut entries = Vec::new();
        let (mut done, mut queue) = (Vec::new(), Vec::new());
        self.queue_regions(&done, &mut queue);
        while !queue.is_empty() {
            let r = queue.remove(0);
            let mut walk = Walk {
                chunk,
                ..Walk::default()
            };
            while walk.pos.is_none() || walk.left > 0 {
                entries.clear();
                walk.step(r, &self.lock(), &mut entries);
                on_chunk(&entries)?;
            }
            done.push(r);
            if queue.is_empty() {
                self.queue_regions(&done, &mut queue);
            }
        }
        Ok(())
    }

    /// Appends to `queue` the regions holding entries now (a migration's old region first)
    /// that are not in `done`.
    fn queue_regions(&self, done: &[Region], queue: &mut Vec<Region>) {
        let locked = self.lock();
        let cur = self.region();
        let old = locked.migrating().then(|| old_of(self.cap, cur));
        for r in old.into_iter().chain([cur]) {
            if !done.contains(&r) && !queue.contains(&r) {
                queue.push(r);
            }
        }
    }
}

/// A walk over one region, in chunks: from the slot after an empty one, once around.
#[derive(Default)]
struct Walk {
    /// Slots to read at least per chunk.
    chunk: usize,
    /// The next slot; `None` before the first chunk found the empty slot to start after.
    pos: Option<usize>,
    /// Slots still to read.
    left: usize,
}

impl Walk {
    /// One chunk, under the mutex: at least `self.chunk` slots (all that are left, if fewer),
    /// ending after an empty slot; its entries go to `out`.
    fn step(&mut self, r: Region, locked: &Locked<'_>, out: &mut Vec<(u64, u64)>) {
        let slot = |i: usize| locked.index.slots[r.at(i)].load(Ordering::Acquire);
        let len = r.len();
        let mut pos = match self.pos {
            Some(pos) => pos,
            None => {
                // Under the same lock as the first chunk: the start stays empty while it reads.
                // (A region at most half full always has an empty slot; if none were found the
                // walk reads every slot from 0 in this one chunk.)
                let start = (0..len).find(|&i| fp_of(slot(i)) == EMPTY);
                self.left = len - usize::from(start.is_some());
                start.map_or(0, |s| s + 1)
            }
        };
        let mut read = 0;
        while self.left > 0 {
            let w = slot(pos);
            pos = (pos + 1) % len;
            self.left -= 1;
            read += 1;
            if fp_of(w) != EMPTY {
                out.push((fp_of(w), state_of(w)));
            } else if read >= self.chunk {
                break;
            }
        }
        self.pos = Some(pos);
    }
}
