//! Two seqlocked parameter slots selected by an epoch bit in the owner's state word: how
//! [`Bucket`](crate::Bucket) and [`Smooth`](crate::Smooth) change their configuration atomically
//! without a lock on the decision path.
//!
//! The owner keeps one bit of its atomic state word as the *epoch*: the index of the slot that
//! holds the parameters for that state. A reconfiguration (serialized by a writer flag) writes the
//! idle slot under its seqlock, then converts the state and flips the epoch bit in one CAS. A
//! decision reads the word, then the slot its epoch names, and commits by a CAS on the exact
//! word it read, epoch bit included, then checks that the slot still holds the version it read
//! ([`EpochSlots::unchanged`], after an `Acquire` CAS): it sees the old parameters with the old
//! state or the new ones with the new state. The check must follow the CAS (why:
//! `docs/guarantees.md`, "A decision racing two reconfigurations"). Decisions never wait for a
//! writer.

use crate::sync::{fence, AtomicU32, AtomicU64, Backoff, Ordering};

/// Two slots of `W` parameter words each (a bucket's quota: 7; a smooth limiter's: 6).
#[repr(C)]
pub(crate) struct EpochSlots<const W: usize> {
    /// Seqlock counters of the two slots (odd while a slot is written).
    seqs: [AtomicU32; 2],
    slots: [[AtomicU64; W]; 2],
    /// Serializes writers: bit 0 the flag (1 while a writer runs), bits 1..64 the reading the
    /// last writer converted at (capped at 2^63 − 1 ns). After the slots, so it shares no cache
    /// line with the words decisions read.
    writer: AtomicU64,
}

/// The largest reading the writer word keeps.
const MAX_WRITER_NOW: u64 = u64::MAX >> 1;

impl<const W: usize> EpochSlots<W> {
    /// Both slots hold `raw`; either epoch is valid.
    pub(crate) fn new(raw: [u64; W]) -> Self {
        EpochSlots {
            seqs: [AtomicU32::new(0), AtomicU32::new(0)],
            slots: [raw.map(AtomicU64::new), raw.map(AtomicU64::new)],
            writer: AtomicU64::new(0),
        }
    }

    /// The parameters of `epoch` (0 or 1), or `None` while that slot is being rewritten (only
    /// possible when two reconfigurations completed since the caller read its word: reload it).
    #[inline(always)]
    pub(crate) fn read(&self, epoch: u64) -> Option<[u64; W]> {
        self.read_versioned(epoch).map(|(raw, _)| raw)
    }

    /// [`EpochSlots::read`], also returning the slot's version (its seqlock counter) for
    /// [`EpochSlots::unchanged`].
    #[inline(always)]
    pub(crate) fn read_versioned(&self, epoch: u64) -> Option<([u64; W], u32)> {
        let i = (epoch & 1) as usize;
        let seq = self.seqs[i].load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let raw = self.slots[i].each_ref().map(|a| a.load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self.seqs[i].load(Ordering::Relaxed) == seq).then_some((raw, seq))
    }

    /// The first `N` words of the slot of `epoch` and its version, or `None` while it is being
    /// rewritten: the decision path's read. The slot is chosen by a branch on the epoch bit, not
    /// by indexing with it, so the CPU predicts the branch and issues these loads before the
    /// word that holds the bit has arrived (an index would make their addresses wait for it).
    #[inline(always)]
    pub(crate) fn read_prefix<const N: usize>(&self, epoch: u64) -> Option<([u64; N], u32)> {
        if epoch & 1 == 0 {
            self.read_prefix_of::<N>(0)
        } else {
            self.read_prefix_of::<N>(1)
        }
    }

    #[inline(always)]
    fn read_prefix_of<const N: usize>(&self, i: usize) -> Option<([u64; N], u32)> {
        let seq = self.seqs[i].load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let slot = &self.slots[i];
        let raw: [u64; N] = core::array::from_fn(|k| slot[k].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self.seqs[i].load(Ordering::Relaxed) == seq).then_some((raw, seq))
    }

    /// Whether the slot of `epoch` still holds the version `seq` that
    /// [`EpochSlots::read_versioned`] or [`EpochSlots::read_prefix`] returned.
    ///
    /// Call it after the write's `Acquire` CAS on `w`, or, for a read-only result, after loading
    /// the word again with `Acquire` and finding `w`: the load then sees the version of the era
    /// the word was in (why: `docs/guarantees.md`, "A decision racing two reconfigurations").
    #[inline(always)]
    pub(crate) fn unchanged(&self, epoch: u64, seq: u32) -> bool {
        self.seqs[(epoch & 1) as usize].load(Ordering::Relaxed) == seq
    }

    /// The generation of `epoch`'s slot: its seqlock counter, which every rewrite of the slot
    /// changes (odd while it is written). A reconfiguration rewrites the idle slot and flips the
    /// epoch, so between two observations of the same epoch bit *any* reconfiguration changed
    /// either the bit or this counter (up to a wrap after 2^31 rewrites of one slot).
    ///
    /// Read it after loading the owner's word (`Acquire`): every reconfiguration whose flip that
    /// load observed is then counted.
    pub(crate) fn generation(&self, epoch: u64) -> u32 {
        self.seqs[(epoch & 1) as usize].load(Ordering::Acquire)
    }

    /// Takes the writer flag, waiting with back-off (spin, then yield the thread) while another
    /// reconfiguration runs. `now` is the caller's clock reading, taken **before** calling:
    /// the user's clock is never called while the flag is held, so a slow or re-entrant clock
    /// cannot stall (or deadlock) other writers.
    ///
    /// The writer converts at `max(now, previous writer's reading)` ([`Writer::now`]), so
    /// writers' readings are monotone in the order they hold the flag, as if each had read the
    /// clock while holding it.
    pub(crate) fn lock(&self, now: u64) -> Writer<'_, W> {
        let mut backoff = Backoff::default();
        let mut word = self.writer.load(Ordering::Relaxed);
        loop {
            if word & 1 != 0 {
                backoff.snooze();
                word = self.writer.load(Ordering::Relaxed);
                continue;
            }
            match self.writer.compare_exchange_weak(
                word,
                word | 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        Writer {
            slots: self,
            now: now.max(word >> 1),
        }
    }
}

/// The writer flag, held; released on drop.
pub(crate) struct Writer<'a, const W: usize> {
    slots: &'a EpochSlots<W>,
    now: u64,
}

impl<const W: usize> Writer<'_, W> {
    /// The clock reading to convert the state at: the caller's, raised to the previous
    /// writer's if that was later (see [`EpochSlots::lock`]).
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// The parameters of `epoch`: consistent, since only the writer changes slots.
    pub(crate) fn get(&self, epoch: u64) -> [u64; W] {
        self.slots.slots[(epoch & 1) as usize]
            .each_ref()
            .map(|a| a.load(Ordering::Relaxed))
    }

    /// Writes `raw` into the slot of `epoch`, which must be the idle one (not named by the
    /// owner's word), under its seqlock. The owner then flips its word to `epoch` by a CAS with
    /// `Release` ordering, which publishes the slot to every decision that reads that word.
    pub(crate) fn set(&self, epoch: u64, raw: [u64; W]) {
        let i = (epoch & 1) as usize;
        let seqs = &self.slots.seqs[i];
        let seq = seqs.load(Ordering::Relaxed);
        seqs.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (slot, value) in self.slots.slots[i].iter().zip(raw) {
            slot.store(value, Ordering::Relaxed);
        }
        seqs.store(seq.wrapping_add(2), Ordering::Release);
    }
}

impl<const W: usize> Drop for Writer<'_, W> {
    fn drop(&mut self) {
        // Releases the flag and leaves this writer's reading for the next one.
        self.slots
            .writer
            .store(self.now.min(MAX_WRITER_NOW) << 1, Ordering::Release);
    }
}
