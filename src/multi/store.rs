//! Where a [`MultiBucket`](crate::MultiBucket) keeps its quotas' states, and how one decision
//! reads them and commits all of them in one atomic step.
//!
//! * [`Pair`] — one or two quotas: both 64-bit states in one 128-bit word, read by one load
//!   and written by one compare-and-swap. Lock-free wherever `portable-atomic`'s `AtomicU128`
//!   is native (`cmpxchg16b` on x86_64, `CASP` or an exclusive pair on AArch64, and the other
//!   targets `src/sync.rs` lists); a short critical section elsewhere.
//! * [`Wide`] — three or four quotas: four 64-bit words under a sequence lock whose writers
//!   are serialized. No target has a lock-free 256-bit compare-and-swap, and the 63-bit states
//!   do not fit two to a word with anything to spare, so an admission takes the lock for four
//!   stores (no clock read, no allocation, nothing that can panic) and is **not lock-free**: a
//!   writer preempted inside those stores delays every decision on the policy. Refusals and
//!   `available` never write: they read the words optimistically and retry if a writer
//!   intervened, so a flood of refusals shares the line without contending on it.

use crate::sync::{fence, AtomicU128, AtomicU64, Backoff, Ordering};
use crossbeam_utils::CachePadded;

/// Two states in one word: quota 0 in the low half, quota 1 in the high half.
///
/// | bits | meaning |
/// |---|---|
/// | 63..0 | quota 0's [`gcra`](crate::gcra) state (0 ..= 2^63 − 1; 0 = full) |
/// | 127..64 | quota 1's state (a policy of one quota repeats quota 0's) |
///
/// Orderings: `Relaxed` everywhere. The word publishes nothing but itself: the quotas are
/// immutable and the clock is read before the word, and single-location coherence orders all
/// decisions on it. A refusal is linearized at its one load (no second read to validate: there
/// is no reconfiguration to race).
#[derive(Debug)]
pub(crate) struct Pair {
    word: CachePadded<AtomicU128>,
}

/// Packs two states into the pair word.
#[inline(always)]
pub(crate) fn pack(states: [u64; 2]) -> u128 {
    u128::from(states[0]) | (u128::from(states[1]) << 64)
}

/// Unpacks the pair word.
#[inline(always)]
pub(crate) fn unpack(word: u128) -> [u64; 2] {
    [word as u64, (word >> 64) as u64]
}

impl Pair {
    pub(crate) fn new(states: [u64; 2]) -> Pair {
        Pair {
            word: CachePadded::new(AtomicU128::new(pack(states))),
        }
    }

    /// The states now.
    #[inline(always)]
    pub(crate) fn load(&self) -> [u64; 2] {
        unpack(self.word.load(Ordering::Relaxed))
    }

    /// The decision loop: `f(states)` returns the states to write (`None`: nothing) and the
    /// result; it is applied to the word just loaded and committed by one CAS on that exact
    /// word, and run again on the word that beat it if the CAS fails. `f` may run several
    /// times: no side effects.
    ///
    /// The first attempt is straight-line and the retries out of line: in one loop, the
    /// compiler hoists every product `f` computes from its captures out of it and spills them.
    #[inline(always)]
    pub(crate) fn update<R>(&self, mut f: impl FnMut([u64; 2]) -> (Option<[u64; 2]>, R)) -> R {
        let w = self.word.load(Ordering::Relaxed);
        let (next, result) = f(unpack(w));
        let Some(next) = next else { return result };
        match self
            .word
            .compare_exchange_weak(w, pack(next), Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => result,
            Err(actual) => self.retry(actual, f),
        }
    }

    /// [`Pair::update`] after a failed compare-and-swap, from the word that beat it.
    #[cold]
    #[inline(never)]
    fn retry<R>(&self, mut w: u128, mut f: impl FnMut([u64; 2]) -> (Option<[u64; 2]>, R)) -> R {
        loop {
            let (next, result) = f(unpack(w));
            let Some(next) = next else { return result };
            match self.word.compare_exchange_weak(
                w,
                pack(next),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return result,
                Err(actual) => w = actual,
            }
        }
    }
}

/// Four states under a sequence lock with serialized writers.
///
/// | word | meaning |
/// |---|---|
/// | `seq` | even: no writer; odd: a writer holds the lock. Stepped by one at lock and at unlock, so a reader that sees the same even value before and after its reads read the words one writer left |
/// | `states[i]` | quota `i`'s [`gcra`](crate::gcra) state; a policy of three repeats quota 2's in `states[3]` |
///
/// Protocol:
///
/// * **Read** (every decision first): load `seq` (`Acquire`, pairing with the last unlock's
///   `Release`) and wait while it is odd; load the four words (`Relaxed`); an `Acquire` fence;
///   load `seq` again. Equal to the first: the four values are the ones the writer that
///   released that `seq` left (a value of a later writer would be ordered, by its `Release`
///   fence and this `Acquire` fence, before a later `seq`, so the second load would differ).
/// * **Commit** (an admission): CAS `seq` from the even value read to the next odd value.
///   It succeeds only if no writer took the lock since the read (`seq` only grows), so the
///   states are still those decided on; a failure means another admission came between: read
///   and decide again. Then a `Release` fence (orders the odd `seq` before the stores), the
///   four stores (`Relaxed`), and `seq` + 1 stored with `Release` (publishes them).
///
/// A 64-bit `seq` stepping by 2 per admission does not wrap within centuries at any rate.
#[derive(Debug)]
pub(crate) struct Wide {
    seq: CachePadded<AtomicU64>,
    states: [AtomicU64; 4],
}

impl Wide {
    pub(crate) fn new(states: [u64; 4]) -> Wide {
        Wide {
            seq: CachePadded::new(AtomicU64::new(0)),
            states: states.map(AtomicU64::new),
        }
    }

    /// A consistent read: the states one writer left, and the `seq` that names them.
    #[inline]
    fn read(&self) -> ([u64; 4], u64) {
        let mut backoff = Backoff::default();
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            if seq & 1 == 0 {
                let states = [0, 1, 2, 3].map(|i| self.states[i].load(Ordering::Relaxed));
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == seq {
                    return (states, seq);
                }
            }
            backoff.snooze();
        }
    }

    /// The states now (a consistent read).
    #[inline]
    pub(crate) fn load(&self) -> [u64; 4] {
        self.read().0
    }

    /// The decision loop, as [`Pair::update`]: `f` on a consistent read; a write commits under
    /// the lock only if no writer came since that read. The first attempt straight-line, the
    /// retries out of line, as there.
    #[inline]
    pub(crate) fn update<R>(&self, mut f: impl FnMut([u64; 4]) -> (Option<[u64; 4]>, R)) -> R {
        let (states, seq) = self.read();
        let (next, result) = f(states);
        let Some(next) = next else { return result };
        if self.commit(seq, next) {
            return result;
        }
        self.retry(f)
    }

    /// [`Wide::update`] after a writer came between its read and its commit.
    #[cold]
    #[inline(never)]
    fn retry<R>(&self, mut f: impl FnMut([u64; 4]) -> (Option<[u64; 4]>, R)) -> R {
        loop {
            let (states, seq) = self.read();
            let (next, result) = f(states);
            let Some(next) = next else { return result };
            if self.commit(seq, next) {
                return result;
            }
        }
    }

    /// Writes `next` if no writer took the lock since the read that returned `seq`; `false`
    /// (nothing written) if one did.
    #[inline(always)]
    fn commit(&self, seq: u64, next: [u64; 4]) -> bool {
        if self
            .seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        fence(Ordering::Release);
        for (word, value) in self.states.iter().zip(next) {
            word.store(value, Ordering::Relaxed);
        }
        self.seq.store(seq + 2, Ordering::Release);
        true
    }
}
