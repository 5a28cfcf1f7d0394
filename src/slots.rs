//! Two seqlocked parameter slots selected by an epoch bit in the owner's state word: how
//! [`Bucket`](crate::Bucket) and [`Smooth`](crate::Smooth) change their configuration atomically
//! without a lock on the decision path.
//!
//! The owner keeps one bit of its atomic state word as the *epoch*: the index of the slot that
//! holds the parameters for that state. A reconfiguration (serialized by a writer flag) writes the
//! idle slot under its seqlock, then converts the state and flips the epoch bit in one CAS. A
//! decision reads the word, then the slot its epoch names, and only commits by a CAS on the exact
//! word it read, epoch bit included: it sees the old parameters with the old state or the new
//! ones with the new state, never a mix. Decisions never wait for a writer; the seqlock only
//! matters if two reconfigurations complete while a decision is between its reads.

use crate::sync::{fence, spin_loop, AtomicU32, AtomicU64, Ordering};

/// Number of `u64` parameters per slot.
pub(crate) const WORDS: usize = 6;

pub(crate) struct EpochSlots {
    /// Seqlock counters of the two slots (odd while a slot is written).
    seqs: [AtomicU32; 2],
    slots: [[AtomicU64; WORDS]; 2],
    /// Serializes writers (1 while one runs). Never touched by decisions.
    writer: AtomicU32,
}

impl EpochSlots {
    /// Both slots hold `raw`; either epoch is valid.
    pub(crate) fn new(raw: [u64; WORDS]) -> EpochSlots {
        EpochSlots {
            seqs: [AtomicU32::new(0), AtomicU32::new(0)],
            slots: [raw.map(AtomicU64::new), raw.map(AtomicU64::new)],
            writer: AtomicU32::new(0),
        }
    }

    /// The parameters of `epoch` (0 or 1), or `None` while that slot is being rewritten (only
    /// possible when two reconfigurations completed since the caller read its word: reload it).
    #[inline(always)]
    pub(crate) fn read(&self, epoch: u64) -> Option<[u64; WORDS]> {
        let i = (epoch & 1) as usize;
        let seq = self.seqs[i].load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let raw = self.slots[i].each_ref().map(|a| a.load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self.seqs[i].load(Ordering::Relaxed) == seq).then_some(raw)
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

    /// Takes the writer flag (spinning while another reconfiguration runs).
    pub(crate) fn lock(&self) -> Writer<'_> {
        while self
            .writer
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        Writer { slots: self }
    }
}

/// The writer flag, held; released on drop.
pub(crate) struct Writer<'a> {
    slots: &'a EpochSlots,
}

impl Writer<'_> {
    /// The parameters of `epoch`: consistent, since only the writer changes slots.
    pub(crate) fn get(&self, epoch: u64) -> [u64; WORDS] {
        self.slots.slots[(epoch & 1) as usize]
            .each_ref()
            .map(|a| a.load(Ordering::Relaxed))
    }

    /// Writes `raw` into the slot of `epoch`, which must be the idle one (not named by the
    /// owner's word), under its seqlock. The owner then flips its word to `epoch` by a CAS with
    /// `Release` ordering, which publishes the slot to every decision that reads that word.
    pub(crate) fn set(&self, epoch: u64, raw: [u64; WORDS]) {
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

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        self.slots.writer.store(0, Ordering::Release);
    }
}
