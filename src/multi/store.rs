//! Where a [`MultiBucket`](crate::MultiBucket) keeps its quotas' states, and how one decision
//! commits all of them in one atomic step: [`Pair`] (one or two quotas, one 128-bit CAS) or
//! [`Wide`] (three or four, a sequence lock).

use crate::sync::{fence, AtomicU128, AtomicU64, Backoff, Ordering};
use crossbeam_utils::CachePadded;

/// Two [`gcra`](crate::gcra) states in one word: quota 0's in bits 63..0, quota 1's (or
/// quota 0's again, for one quota) in bits 127..64.
///
/// Beside it a **mirror** each successful CAS updates with plain stores, where decisions start
/// (on x86_64 a 128-bit load right after this thread's `lock cmpxchg16b` waits for it to drain:
/// `benches/multi.rs`, `multi_floor`). Only a guess: a write commits by a CAS expecting the exact
/// guess, so a stale or torn one fails and the loop goes on from the word returned; a decision
/// that writes nothing is confirmed by one load equal to the guess (its linearization point).
///
/// Orderings: `Relaxed` everywhere. The word publishes only itself (the quotas are immutable,
/// the clock read before), and coherence orders all decisions on it.
#[derive(Debug)]
pub(crate) struct Pair {
    line: CachePadded<Line>,
}

/// The word and its mirror, on one cache line.
#[derive(Debug)]
struct Line {
    word: AtomicU128,
    mirror: [AtomicU64; 2],
}

#[inline(always)]
pub(crate) fn pack(states: [u64; 2]) -> u128 {
    u128::from(states[0]) | (u128::from(states[1]) << 64)
}

#[inline(always)]
pub(crate) fn unpack(word: u128) -> [u64; 2] {
    [word as u64, (word >> 64) as u64]
}

impl Pair {
    pub(crate) fn new(states: [u64; 2]) -> Pair {
        Pair {
            line: CachePadded::new(Line {
                word: AtomicU128::new(pack(states)),
                mirror: states.map(AtomicU64::new),
            }),
        }
    }

    /// The states now (from the word, not the mirror).
    #[inline(always)]
    pub(crate) fn load(&self) -> [u64; 2] {
        unpack(self.line.word.load(Ordering::Relaxed))
    }

    /// The mirror's guess of the word (possibly stale or torn).
    #[inline(always)]
    fn guess(&self) -> [u64; 2] {
        let m = &self.line.mirror;
        [m[0].load(Ordering::Relaxed), m[1].load(Ordering::Relaxed)]
    }

    /// Copies a value just committed into the mirror.
    #[inline(always)]
    fn remember(&self, states: [u64; 2]) {
        let m = &self.line.mirror;
        m[0].store(states[0], Ordering::Relaxed);
        m[1].store(states[1], Ordering::Relaxed);
    }

    /// The decision loop: `f(states)` returns the states to write (`None`: nothing) and the
    /// result; it is applied to the mirror's guess and committed by one CAS on that exact
    /// value, confirmed by one load if it writes nothing, and run again on the word the CAS or
    /// the load returned otherwise. `f` may run several times: no side effects.
    ///
    /// The first attempt is straight-line and the retries out of line: in one loop, the
    /// compiler hoists every product `f` computes from its captures out of it and spills them.
    #[inline(always)]
    pub(crate) fn update<R>(&self, mut f: impl FnMut([u64; 2]) -> (Option<[u64; 2]>, R)) -> R {
        let guess = self.guess();
        let g = pack(guess);
        let (next, result) = f(guess);
        let Some(next) = next else {
            let w = self.line.word.load(Ordering::Relaxed);
            return if w == g { result } else { self.retry(w, f) };
        };
        match self.commit(g, next) {
            Ok(()) => result,
            Err(actual) => self.retry(actual, f),
        }
    }

    /// One CAS from `from` to `next`, copied into the mirror if it succeeds; the word that beat
    /// it if not.
    #[inline(always)]
    fn commit(&self, from: u128, next: [u64; 2]) -> Result<(), u128> {
        self.line.word.compare_exchange_weak(
            from,
            pack(next),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )?;
        self.remember(next);
        Ok(())
    }

    /// [`Pair::update`] from a value the word held (after a failed compare-and-swap, or a
    /// guess the word's load did not confirm): no guesses from here on, and a short spin
    /// ([`Backoff::spin`]) after each CAS lost to another thread. Without it two threads on
    /// two cores trade the 16-byte line with mostly failed CASes, no faster than a mutex around
    /// both words and with a far worse p99 (`docs/benchmarks.md`).
    #[cold]
    #[inline(never)]
    fn retry<R>(&self, mut w: u128, mut f: impl FnMut([u64; 2]) -> (Option<[u64; 2]>, R)) -> R {
        let mut backoff = Backoff::default();
        loop {
            let (next, result) = f(unpack(w));
            let Some(next) = next else { return result };
            match self.commit(w, next) {
                Ok(()) => return result,
                Err(actual) => {
                    w = actual;
                    backoff.spin();
                }
            }
        }
    }
}

/// Four states under a sequence lock with serialized writers (63-bit states do not fit two to a
/// word, and no target has a 256-bit CAS). An admission holds the lock for four stores and is
/// **not lock-free**: a writer preempted there delays every decision. Refusals never write.
///
/// `seq` is even with no writer, odd while one holds the lock (a 64-bit count that does not
/// wrap within centuries); `states[i]` is quota `i`'s state (three quotas repeat the last).
///
/// * **Read** (every decision first): load `seq` (`Acquire`, pairing with the last unlock's
///   `Release`), waiting while it is odd; the four words (`Relaxed`); an `Acquire` fence; `seq`
///   again. Equal: the values are the ones the writer that released that `seq` left (a later
///   writer's would be ordered, by its `Release` fence and this fence, before a later `seq`).
/// * **Commit** (an admission): CAS `seq` from the even value read to the next odd one, which
///   fails if any writer came since the read (then read and decide again); a `Release` fence
///   (the odd `seq` before the stores), the four stores (`Relaxed`), and `seq + 1` stored with
///   `Release` (publishing them).
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

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// "Spend 1 from quota 0 if it has spent less than 3", recording every value it sees.
    fn spend(seen: &mut Vec<[u64; 2]>) -> impl FnMut([u64; 2]) -> (Option<[u64; 2]>, u64) + '_ {
        move |s| {
            seen.push(s);
            if s[0] < 3 {
                (Some([s[0] + 1, s[1]]), s[0])
            } else {
                (None, s[0])
            }
        }
    }

    /// Whatever the mirror holds — current, stale, torn, more or less spent, garbage — every
    /// decision's result is the one decided on the word itself.
    #[test]
    fn a_wrong_mirror_never_decides() {
        for guess in [[0, 0], [1, 7], [2, 0], [3, 7], [9, 9], [u64::MAX, 0]] {
            let pair = Pair::new([2, 7]);
            pair.line.mirror[0].store(guess[0], Ordering::Relaxed);
            pair.line.mirror[1].store(guess[1], Ordering::Relaxed);
            let mut seen = Vec::new();
            // The word holds 2: admitted, from 2, whatever the guess.
            assert_eq!(pair.update(spend(&mut seen)), 2, "guess {guess:?}");
            assert_eq!(pair.load(), [3, 7]);
            assert_eq!(seen.last(), Some(&[2, 7]));
            // Now 3: refused, from 3, and the mirror caught up on the admission.
            assert_eq!(pair.guess(), [3, 7]);
            pair.line.mirror[0].store(guess[0], Ordering::Relaxed);
            let mut seen = Vec::new();
            assert_eq!(pair.update(spend(&mut seen)), 3, "guess {guess:?}");
            assert_eq!(pair.load(), [3, 7]);
        }
    }

    /// A guess equal to the word costs no second run of the decision.
    #[test]
    fn a_right_mirror_decides_once() {
        let pair = Pair::new([0, 0]);
        for expected in 0..3 {
            let mut seen = Vec::new();
            assert_eq!(pair.update(spend(&mut seen)), expected);
            assert_eq!(seen.len(), 1);
        }
        let mut seen = Vec::new();
        assert_eq!(pair.update(spend(&mut seen)), 3);
        assert_eq!(seen, [[3, 0]]);
    }
}
