//! The table-wide words and policy of a [`KeyedLimiter`]: insertion of a new key, the
//! full-table refusal, eviction of full buckets (sweeps) and help with migrations.

use super::index;
use super::{KeyedLimiter, KeyedPolicy};
use crate::clock::Clock;
use crate::gcra;
use crate::sync::{AtomicU64, Ordering};

/// The table-wide words, written only under the index's mutex (when a key is inserted or
/// evicted), never on a lookup; read without it for the O(1) refusal under a flood.
pub(crate) struct Table {
    /// Live entries; never above `max_keys`.
    pub(crate) len: AtomicU64,
    /// A lower bound on the first instant at which any tracked bucket is full. Admissions only
    /// push a bucket's instant later, so the bound stays valid without being touched by them.
    pub(crate) next_full_at: AtomicU64,
    /// The latest clock reading at which a bucket was evicted (0: none yet); only grows. An
    /// evicted state was full then, so a key inserted from `earned_floor(evicted_at)` (its own
    /// quota's) starts no more lenient than any bucket the table forgot, whatever reading the
    /// inserting decision holds ([`KeyedLimiter::start_state`]).
    pub(crate) evicted_at: AtomicU64,
    /// The longest refill of a whole burst of any quota of any policy (ns, saturated): any
    /// tracked key is full this long after its last admission.
    cap: u64,
}

impl Table {
    /// An empty table's words, for keys whose slowest quota refills a whole burst in `cap`.
    pub(crate) fn new(cap: core::time::Duration) -> Table {
        Table {
            len: AtomicU64::new(0),
            next_full_at: AtomicU64::new(u64::MAX),
            evicted_at: AtomicU64::new(0),
            cap: u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Makes every key the table does not track start full `cap` after `now`: holding nothing
    /// now, in any quota (`drain`).
    pub(crate) fn drain(&self, now: u64) {
        let floor = now.saturating_add(self.cap).min(crate::quota::HORIZON_NS);
        self.evicted_at.fetch_max(floor, Ordering::SeqCst);
    }

    /// The latest instant at which this table's states can be full, as of `now` (what a restore
    /// clamps a saved state or floor to): a drained floor, plus one more `cap` for a cost taken
    /// from it; at the horizon at the latest.
    #[cfg(feature = "persist")]
    pub(crate) fn latest_full(&self, now: u64) -> u64 {
        let span = self.cap.saturating_mul(2);
        now.saturating_add(span).min(crate::quota::HORIZON_NS)
    }

    /// The wait a new key refused by the full table is told at `now`: until the first tracked
    /// bucket is full, within `[1 ns, cap]`, or `Duration::MAX` when none ever will be (an
    /// empty table answers `cap`).
    pub(crate) fn full_wait(&self, now: u64) -> core::time::Duration {
        let at = self.next_full_at.load(Ordering::SeqCst);
        if at == u64::MAX && self.len.load(Ordering::SeqCst) > 0 {
            return core::time::Duration::MAX;
        }
        gcra::to_duration(at.saturating_sub(now).max(1).min(self.cap))
    }
}

/// How an insertion attempt ended.
pub(super) enum Insert<R> {
    Done,
    Retry,
    TableFull(core::time::Duration),
    Refused(R),
}

impl<K, P: KeyedPolicy, C: Clock> KeyedLimiter<K, P, C> {
    /// Evicts every key whose bucket (every quota) is full now and returns how many. Never
    /// needed for the bound (insertions evict lazily); it only returns memory early, e.g. from
    /// a periodic task. It walks one whole pass over the active slots (first finishing a
    /// doubling in progress) in bounded steps, releasing the mutex between them, so insertions
    /// wait for one step at most. The sweep's position is shared: steps taken meanwhile by
    /// another `sweep` or by an insertion into a full table examine slots at their own
    /// readings, and a bucket not full yet at an earlier one is left for the next sweep.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 10, clock.clone());
    /// limiter.try_acquire(&1, 1).unwrap();
    /// assert_eq!(limiter.sweep(), 0);
    /// clock.advance(Duration::from_millis(200));
    /// assert_eq!(limiter.sweep(), 1);
    /// assert!(limiter.is_empty());
    /// ```
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let evicted = self.index.sweep_all(|locked| self.sweep_step(locked, now));
        usize::try_from(evicted).unwrap_or(usize::MAX)
    }

    /// Makes every key the table does not track hold no tokens now, in any quota (they start
    /// full one burst's refill of the slowest quota of any policy from now; a faster quota
    /// starts a little in debt): what a process that cannot restore its state should do
    /// instead of starting full. Tracked keys keep their state: call it on a new limiter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 100, ManualClock::new());
    /// limiter.drain();
    /// assert_eq!(limiter.available(&"anyone"), 0);
    /// assert_eq!(limiter.try_acquire(&"anyone", 1), Err(Denied::RetryAfter(Duration::from_millis(100))));
    /// ```
    pub fn drain(&self) {
        self.table.drain(self.clock.now());
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiter<K, P, C> {
    /// Inserts a new key already debited by `cost`, if there is room (evicting full buckets to
    /// make it).
    #[cold]
    pub(super) fn insert(
        &self,
        fp: u64,
        now: u64,
        rule: &P::Rule,
        cost: u64,
        epoch: u64,
    ) -> Insert<P::Refusal> {
        // O(1) refusal under a flood, without the mutex: the table is full and no bucket can be
        // full before `next_full_at`. That bound is read first: a sweep lowers `len` before it
        // stores a later bound, so seeing the bound implies seeing the room. The miss that
        // brought us here is trusted only if no entry moved around it (`epoch` even and
        // unchanged). During a migration the mutex is taken instead, so that its sweep step
        // drains the old region: a table that stays full still finishes it.
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
            // Inserted by another thread meanwhile (or moved): decide on its slot.
            return Insert::Retry;
        }
        if t.len.load(Ordering::SeqCst) >= self.max_keys {
            if t.next_full_at.load(Ordering::SeqCst) <= now || locked.migrating() {
                // One bounded step; the pass goes on at the next insertion.
                self.sweep_step(&mut locked, now);
            }
            if t.len.load(Ordering::SeqCst) >= self.max_keys {
                return Insert::TableFull(self.table_full_wait(now));
            }
        }
        // The start state is read under the mutex, after any eviction that made this key miss
        // (evictions raise `evicted_at` under the same mutex, before their CAS).
        let state = match P::decide_state(rule, &self.start_state(rule), now, cost) {
            Ok(Some(state)) => state,
            Ok(None) => return Insert::Done,
            Err(refusal) => return Insert::Refused(refusal),
        };
        let full_at = P::full_at(rule, &state);
        if !P::place(self, &mut locked, fp, rule, &state, full_at) {
            // Unreachable: live keys never exceed the storage for `max_keys`.
            return Insert::TableFull(self.table_full_wait(now));
        }
        t.len.fetch_add(1, Ordering::SeqCst);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe.inserted(t.len.load(Ordering::SeqCst));
        t.next_full_at.fetch_min(full_at, Ordering::SeqCst);
        Insert::Done
    }

    /// [`Table::full_wait`], or `Duration::MAX` for a table of no keys.
    pub(super) fn table_full_wait(&self, now: u64) -> core::time::Duration {
        // It admits none, ever: `until_key_ready` must resolve, not poll on.
        if self.max_keys == 0 {
            return core::time::Duration::MAX;
        }
        self.table.full_wait(now)
    }

    /// One migration step, if the index's mutex is free (never waits): lookups drain the old
    /// region, so a migration ends even when no new key arrives.
    #[cold]
    #[inline(never)]
    pub(super) fn help_migrate(&self) {
        if let Some(mut locked) = self.index.try_lock() {
            locked.help_migrate();
        }
    }

    /// One bounded sweep step at reading `now`, with the index's mutex held: evicts the full
    /// buckets it meets; when it ends a pass, stores the pass's bound in `next_full_at`.
    pub(super) fn sweep_step(&self, locked: &mut index::Locked<'_>, now: u64) -> index::Step {
        // Past the horizon the clock is read as stopped there, and `full_at` says `u64::MAX`
        // for "never full": compared with a reading of `u64::MAX` itself, that sentinel would
        // read as "full now" and evict a bucket that never refills (a fresh burst each time).
        let now = now.min(crate::quota::HORIZON_NS);
        let step = P::sweep_step(self, locked, now);
        let t = &self.table;
        // `len` first, then the bound: see the lock-free refusal in `insert`.
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
}
