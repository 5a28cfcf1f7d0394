//! The table around the index: its counts and bounds, the insert path under the index's mutex
//! and the sweep, which locks a record before it decides to evict it.

use super::policy::Policy;
use super::KeyedMultiLimiter;
use crate::clock::Clock;
use crate::keyed::index::{self, Locked};
use crate::limits::MAX_LIMITS;
use crate::refusal::Refusal;
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::cell::Cell;
use core::hash::Hash;

/// The free records: never handed out yet from `fresh` on, and freed ones. Taken only under
/// the index's mutex (insertions and evictions both run under it).
#[derive(Default)]
pub(super) struct Free {
    pub(super) fresh: usize,
    pub(super) stack: Vec<usize>,
}

/// How an insertion attempt ended.
pub(super) enum Insert {
    Done,
    Retry,
    TableFull(core::time::Duration),
    Refused(Refusal),
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiter<K, C> {
    /// Inserts the new key `fp` already debited by `cost`, if there is room (evicting full keys
    /// to make it). The same protocol as [`KeyedLimiter`](crate::KeyedLimiter)'s insert path.
    #[cold]
    pub(super) fn insert(
        &self,
        fp: u64,
        now: u64,
        policy: &Policy,
        cost: u64,
        epoch: u64,
    ) -> Insert {
        // O(1) refusal under a flood, without the mutex (see the keyed limiter's insert path
        // for why `next_full_at` is read first and the miss is trusted only on an even,
        // unchanged epoch).
        let t = &self.table;
        if t.next_full_at.load(Ordering::SeqCst) > now
            && t.len.load(Ordering::SeqCst) >= self.max_keys
            && epoch % 2 == 0
            && self.index.rebuild_epoch() == epoch
            && !self.index.migrating()
        {
            return Insert::TableFull(self.table_full_wait(now));
        }
        let mut locked = self.index.lock();
        if locked.contains(fp) {
            return Insert::Retry;
        }
        if t.len.load(Ordering::SeqCst) >= self.max_keys {
            if t.next_full_at.load(Ordering::SeqCst) <= now || locked.migrating() {
                self.sweep_step(&mut locked, now);
            }
            if t.len.load(Ordering::SeqCst) >= self.max_keys {
                return Insert::TableFull(self.table_full_wait(now));
            }
        }
        // Read under the mutex, after any eviction that made this key miss.
        let start = policy.start(t.evicted_at.load(Ordering::SeqCst));
        let next = match policy.decide(&start, now, cost) {
            Ok(Some(next)) => next,
            Ok(None) => return Insert::Done,
            Err(refusal) => return Insert::Refused(refusal),
        };
        // `None` is unreachable: live keys never exceed `max_keys` records.
        let Some(h) = self.take_record() else {
            return Insert::TableFull(self.table_full_wait(now));
        };
        self.records.claim(h, fp, &next[..policy.len]);
        let full_at = policy.full_at(&next[..policy.len]);
        locked.insert(fp, h as u64, full_at);
        t.len.fetch_add(1, Ordering::SeqCst);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe.inserted(t.len.load(Ordering::SeqCst));
        t.next_full_at.fetch_min(full_at, Ordering::SeqCst);
        Insert::Done
    }

    /// A free record (one freed by an eviction, else one never handed out), if any (under the
    /// index's mutex).
    pub(super) fn take_record(&self) -> Option<usize> {
        let mut free = self.free.lock();
        free.stack.pop().or_else(|| {
            (free.fresh < self.records.count()).then(|| {
                free.fresh += 1;
                free.fresh - 1
            })
        })
    }

    /// The wait until a tracked key is full, within `[1 ns, the longest burst refill of any
    /// quota of any policy]`, or `Duration::MAX` when none ever will be.
    pub(super) fn table_full_wait(&self, now: u64) -> core::time::Duration {
        // A table of no keys admits none, ever: "never", so that `until_key_ready` resolves.
        if self.max_keys == 0 {
            return core::time::Duration::MAX;
        }
        self.table.full_wait(now)
    }

    /// One bounded sweep step at `now` with the index's mutex held, evicting the keys full at
    /// `now`. The index asks `full_at(fp, handle)` of each entry and, when it answers `<= now`,
    /// calls `evicting()` and empties the slot with nothing in between; so `full_at` *locks*
    /// the record before it reads it, and keeps it locked when it answers "full": no debit can
    /// land between that answer and the eviction, which frees the record under the same lock.
    /// A record it locked for an answer the index does not act on (a bound, not an eviction)
    /// is released at the next call or at the end of the step; a record a writer holds is
    /// answered "not full now" (its debit lands after) with a bound no later than the truth.
    pub(super) fn sweep_step(&self, locked: &mut Locked<'_>, now: u64) -> index::Step {
        let now = now.min(crate::quota::HORIZON_NS);
        let held: Cell<Option<(usize, u64)>> = Cell::new(None);
        let release = || {
            if let Some((h, seq)) = held.take() {
                self.records.unlock_unchanged(h, seq);
            }
        };
        let t = &self.table;
        let step = locked.sweep_step(
            now,
            |fp, h| {
                release();
                let h = h as usize;
                let policy = self.policy_of(fp);
                match self.records.try_lock(h, policy.len) {
                    // Never the case while the slot names the record (it is freed only with
                    // the slot emptied); if it were, the record is not this key's to evict.
                    Some((seq, owner, _)) if owner != fp => {
                        self.records.unlock_unchanged(h, seq);
                        u64::MAX
                    }
                    Some((seq, _, states)) => {
                        let at = policy.full_at(&states[..policy.len]);
                        if at <= now {
                            held.set(Some((h, seq)));
                        } else {
                            self.records.unlock_unchanged(h, seq);
                        }
                        at
                    }
                    None => self.optimistic_full_at(h, policy).max(now + 1),
                }
            },
            || {
                // Before the slot is emptied: whoever misses the key afterwards starts it from
                // a state at least as strict as the evicted one.
                t.evicted_at.fetch_max(now, Ordering::SeqCst);
                if let Some((h, seq)) = held.take() {
                    self.records.kill(h, seq);
                    self.free.lock().stack.push(h);
                } else {
                    debug_assert!(false, "evicting a record not locked");
                }
            },
        );
        release();
        t.len.fetch_sub(step.evicted, Ordering::SeqCst);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe
            .swept(step.evicted, t.len.load(Ordering::SeqCst));
        if let Some(next) = step.pass_done {
            t.next_full_at.store(next, Ordering::SeqCst);
        }
        if step.evicted > 0 {
            self.shards.count(|c| &c.evicted, step.evicted);
        }
        step
    }

    /// The full instant of a record a writer holds, from words read without the lock: each
    /// state is its value before or after the writer's store, and a debit only delays a
    /// quota's full instant, so this is no later than the instant after the write.
    fn optimistic_full_at(&self, h: usize, policy: &Policy) -> u64 {
        let mut states = [0u64; MAX_LIMITS];
        self.records.peek(h, &mut states[..policy.len]);
        policy.full_at(&states[..policy.len])
    }

    /// Evicts every key that is full now and returns how many, in bounded steps (the
    /// mutex released between them), as [`KeyedLimiter::sweep`](crate::KeyedLimiter::sweep).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limits = Limits::new([Quota::per_second(5).unwrap(), Quota::new(60, Duration::from_secs(60), 60).unwrap()]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 10, clock.clone());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// clock.advance(Duration::from_millis(200));
    /// assert_eq!(limiter.sweep(), 0); // the per-minute quota is not full yet
    /// clock.advance(Duration::from_millis(800));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert!(limiter.is_empty());
    /// ```
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let evicted = self.index.sweep_all(|locked| self.sweep_step(locked, now));
        usize::try_from(evicted).unwrap_or(usize::MAX)
    }
}
