//! Each tracked key's record: its owner's fingerprint and its quotas' states under a sequence
//! lock with serialized writers, in one flat arena allocated up front (one record per unit of
//! `max_keys`, found through the keyed index by a handle): 32 bytes for one or two quotas,
//! 64 for three or four, never across two cache lines.
//!
//! | word | meaning |
//! |---|---|
//! | `seq` | even: no writer; odd: a writer holds the record. Stepped at lock and at unlock, never back (except an unlock that wrote nothing, which restores the value it locked) |
//! | `owner` | the fingerprint of the key the record belongs to; 0 while free (fingerprints are never 0) |
//! | `states[i]` | quota `i`'s [`gcra`](crate::gcra) state |
//!
//! * **Read**: `seq` (`Acquire`), even; `owner` and the states (`Relaxed`); an `Acquire`
//!   fence; `seq` again, unchanged: the words one writer left.
//! * **Commit**: CAS `seq` from the even value read to the next odd one, which succeeds only if
//!   no writer came since the read (an eviction or a hand-over to another key steps `seq`
//!   too), so the owner and states are the ones decided on; then a `Release` fence, the
//!   stores, and `seq + 1` stored with `Release`.
//! * **Evict**: take the lock the same way (no debit lands between the check that the record
//!   is full and its release), clear `owner`, step `seq`.

use crate::limits::MAX_LIMITS;
use crate::refusal::Refusal;
use crate::sync::{fence, AtomicU64, Ordering};
use alloc::boxed::Box;

/// Words before the states in a record.
const HEAD: usize = 2;

/// One cache line of the arena, two halves of four words: two records of one or two quotas,
/// or one of three or four. Aligned, so a decision touches one line.
#[repr(align(64))]
struct Line([[AtomicU64; 4]; 2]);

/// The arena: `1 << shift` records per line, of `8 >> shift` words each.
pub(super) struct Records {
    lines: Box<[Line]>,
    /// 1: two records of 4 words per line (up to two quotas); 0: one of 8 (three or four).
    shift: u32,
    count: usize,
}

/// One record: half `half` of its line (up to two quotas), or the whole line from half 0.
#[derive(Clone, Copy)]
struct Rec<'a> {
    line: &'a [[AtomicU64; 4]; 2],
    half: usize,
}

impl core::ops::Index<usize> for Rec<'_> {
    type Output = AtomicU64;

    /// Word `k` of the record, masked to the line (no bounds check on the hot path; callers
    /// index below the record's stride, so the masks never change an index).
    #[inline(always)]
    fn index(&self, k: usize) -> &AtomicU64 {
        &self.line[(self.half + (k >> 2)) & 1][k & 3]
    }
}

impl Rec<'_> {
    /// A consistent read: the record's `seq` (even), owner and first `len` states padded to
    /// `N`; `None` while a writer holds it or if one came during the read.
    #[inline(always)]
    fn read<const N: usize>(self, len: usize) -> Option<(u64, u64, [u64; N])> {
        let seq = self[0].load(Ordering::Acquire);
        if seq & 1 != 0 {
            return None;
        }
        let owner = self[1].load(Ordering::Relaxed);
        let states: [u64; N] =
            core::array::from_fn(|i| self[HEAD + i.min(len - 1)].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        (self[0].load(Ordering::Relaxed) == seq).then_some((seq, owner, states))
    }

    /// Takes the lock if the record's `seq` is still `seq` (even).
    #[inline(always)]
    fn try_lock_at(self, seq: u64) -> bool {
        let ok = self[0]
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if ok {
            // Orders the odd `seq` before the stores that follow.
            fence(Ordering::Release);
        }
        ok
    }

    /// Writes `states` into the record, locked from `seq`, and unlocks it.
    #[inline(always)]
    fn write_unlock(self, seq: u64, states: &[u64]) {
        for (i, &s) in states.iter().enumerate() {
            self[HEAD + i].store(s, Ordering::Relaxed);
        }
        self[0].store(seq + 2, Ordering::Release);
    }
}

/// What one optimistic attempt on a record found.
pub(super) enum Attempt<R> {
    /// Decided (and committed, if it wrote).
    Done(R),
    /// A writer holds the record, or came between the read and the commit: try again.
    Busy,
    /// The record does not belong to the key (evicted, or handed to another key): look it up
    /// again.
    Stale,
}

impl Records {
    /// `count` free records of `quotas` states each.
    pub(super) fn new(count: usize, quotas: usize) -> Records {
        let shift = u32::from(HEAD + quotas.clamp(1, MAX_LIMITS) <= 4);
        let lines = count.div_ceil(1 << shift);
        Records {
            lines: (0..lines)
                .map(|_| Line([0; 2].map(|_| [0; 4].map(AtomicU64::new))))
                .collect(),
            shift,
            count,
        }
    }

    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Words per record: 4 or 8.
    #[inline(always)]
    fn stride(&self) -> usize {
        8 >> self.shift
    }

    #[inline(always)]
    fn record(&self, h: usize) -> Rec<'_> {
        Rec {
            line: &self.lines[h >> self.shift].0,
            // Two records to a line (`shift` 1): the handle's low bit; one: half 0.
            half: h & self.shift as usize,
        }
    }

    /// A consistent read of record `h` (see [`Rec::read`]).
    #[inline(always)]
    pub(super) fn read<const N: usize>(
        &self,
        h: usize,
        len: usize,
    ) -> Option<(u64, u64, [u64; N])> {
        debug_assert!(HEAD + len <= self.stride());
        self.record(h).read(len)
    }

    /// One decision attempt on record `h` for the key `fp` with `len` quotas: a consistent
    /// read, `decide` on its states, and for an admission one CAS of `seq` and the stores.
    #[inline(always)]
    pub(super) fn try_decide<const N: usize>(
        &self,
        h: usize,
        fp: u64,
        len: usize,
        decide: impl FnOnce([u64; N]) -> Result<Option<[u64; N]>, Refusal>,
    ) -> Attempt<Result<(), Refusal>> {
        debug_assert!(len <= N && HEAD + N <= self.stride());
        let r = self.record(h);
        let Some((seq, owner, states)) = r.read::<N>(len) else {
            return Attempt::Busy;
        };
        if owner != fp {
            return Attempt::Stale;
        }
        match decide(states) {
            Err(refusal) => Attempt::Done(Err(refusal)),
            Ok(None) => Attempt::Done(Ok(())),
            Ok(Some(next)) => {
                if r.try_lock_at(seq) {
                    // All `N` words (unrolled), not `len`: `HEAD + N` is within the stride for
                    // every policy decided with `N`, and a word past `len` is never read.
                    r.write_unlock(seq, &next);
                    Attempt::Done(Ok(()))
                } else {
                    Attempt::Busy
                }
            }
        }
    }

    /// Writes `states` into record `h`, locked from `seq`, and unlocks it.
    #[inline(always)]
    pub(super) fn write_unlock(&self, h: usize, seq: u64, states: &[u64]) {
        debug_assert!(HEAD + states.len() <= self.stride());
        self.record(h).write_unlock(seq, states);
    }

    /// Locks record `h` (if no writer holds it now) and returns the `seq` it locked, the owner
    /// and the first `len` states. For the sweep, which holds it while it decides to evict.
    pub(super) fn try_lock(&self, h: usize, len: usize) -> Option<(u64, u64, [u64; MAX_LIMITS])> {
        let r = self.record(h);
        let (seq, owner, states) = r.read::<MAX_LIMITS>(len)?;
        r.try_lock_at(seq).then_some((seq, owner, states))
    }

    /// The first `out.len()` states of record `h` as they are now, without the lock (each word
    /// is one writer's, not necessarily the same writer's).
    pub(super) fn peek(&self, h: usize, out: &mut [u64]) {
        let r = self.record(h);
        debug_assert!(HEAD + out.len() <= self.stride());
        for (i, o) in out.iter_mut().enumerate() {
            *o = r[HEAD + i].load(Ordering::Relaxed);
        }
    }

    /// Releases a lock taken by [`try_lock`](Records::try_lock) without writing: `seq` goes
    /// back to the value it was locked from (the words are the ones readers saw then).
    pub(super) fn unlock_unchanged(&self, h: usize, seq: u64) {
        self.record(h)[0].store(seq, Ordering::Release);
    }

    /// Frees record `h`, locked from `seq` by [`try_lock`](Records::try_lock): no owner, and a
    /// `seq` no reader or writer of its previous life can still match.
    pub(super) fn kill(&self, h: usize, seq: u64) {
        let r = self.record(h);
        r[1].store(0, Ordering::Relaxed);
        r[0].store(seq + 2, Ordering::Release);
    }

    /// Gives free record `h` to the key `fp` with `states`, under the index's mutex (no other
    /// writer can hold a free record: a commit needs the owner to match).
    pub(super) fn claim(&self, h: usize, fp: u64, states: &[u64]) {
        let r = self.record(h);
        let seq = r[0].load(Ordering::Relaxed);
        debug_assert!(seq & 1 == 0 && r[1].load(Ordering::Relaxed) == 0);
        r[0].store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        r[1].store(fp, Ordering::Relaxed);
        self.write_unlock(h, seq, states);
    }
}
