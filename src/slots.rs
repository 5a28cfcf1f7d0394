//! Two seqlocked parameter slots selected by an epoch bit of the owner's state word, how
//! [`Bucket`](crate::Bucket) and [`Smooth`](crate::Smooth) reconfigure with no lock on decisions:
//! a writer (one at a time) fills the idle slot, then converts the state and flips the bit in one
//! CAS; a decision reads the word, then its slot, CASes the exact word read, and only then checks
//! the slot's version ([`EpochSlots::unchanged`]; why after: `docs/guarantees.md`, "A decision
//! racing two reconfigurations"), so it sees old parameters with old state or new with new.

use crate::sync::{fence, AtomicU32, AtomicU64, Backoff, Ordering};

/// Two slots of `W` parameter words each.
#[repr(C)]
pub(crate) struct EpochSlots<const W: usize> {
    /// Seqlock counters of the two slots (odd while a slot is written).
    seqs: [AtomicU32; 2],
    slots: [[AtomicU64; W]; 2],
    /// Serializes writers: bit 0 the flag (1 while a writer runs), bits 1..64 the reading the
    /// last writer converted at (capped at 2^63 − 1 ns). After the slots, off their line.
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

    /// The parameters of `epoch` and the slot's version (its seqlock counter, for
    /// [`EpochSlots::unchanged`]), or `None` while the slot is rewritten (possible only after two
    /// reconfigurations since the caller read its word: reload it).
    #[inline(always)]
    pub(crate) fn read_versioned(&self, epoch: u64) -> Option<([u64; W], u32)> {
        self.read_prefix::<W>(epoch)
    }

    /// [`EpochSlots::read_versioned`] of the first `N` words. The slot is chosen by a branch on
    /// the epoch bit, not an index, so the CPU predicts it and issues the loads before the word
    /// that holds the bit has arrived.
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

    /// Whether the slot of `epoch` still holds the version `seq` read. Call it after the write's
    /// `Acquire` CAS on `w`, or after an `Acquire` load that finds `w` again: it then sees the
    /// version of the word's era (`docs/guarantees.md`, "A decision racing two reconfigurations").
    #[inline(always)]
    pub(crate) fn unchanged(&self, epoch: u64, seq: u32) -> bool {
        self.seqs[(epoch & 1) as usize].load(Ordering::Relaxed) == seq
    }

    /// The generation of `epoch`'s slot: its seqlock counter. Between two observations of the
    /// same epoch bit, any reconfiguration changed the bit or this (up to a wrap after 2^31
    /// rewrites of one slot). Read it after the `Acquire` load of the owner's word.
    pub(crate) fn generation(&self, epoch: u64) -> u32 {
        self.seqs[(epoch & 1) as usize].load(Ordering::Acquire)
    }

    /// Takes the writer flag, backing off while another reconfiguration runs. `now` is the
    /// caller's clock reading, taken **before**: a slow or re-entrant clock never runs under the
    /// flag. The writer converts at `max(now, previous writer's reading)` ([`Writer::now`]), so
    /// readings are monotone in the order writers hold the flag.
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
    /// The reading to convert the state at (see [`EpochSlots::lock`]).
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// The parameters of `epoch`: consistent, since only the writer changes slots.
    pub(crate) fn get(&self, epoch: u64) -> [u64; W] {
        self.slots.slots[(epoch & 1) as usize]
            .each_ref()
            .map(|a| a.load(Ordering::Relaxed))
    }

    /// Writes `raw` into the idle slot `epoch` under its seqlock; the owner's `Release` CAS that
    /// flips its word to `epoch` then publishes it.
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
