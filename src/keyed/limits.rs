//! [`KeyedMultiLimiter`]: the keyed limiter of [`Limits`], a policy of one to four quotas per
//! key ("10 per second and 10,000 per day per API key").
//!
//! A key's quotas do not fit one 128-bit slot beside its fingerprint, so the index (the same
//! as for one quota) holds a handle to the key's record (`records.rs`: a sequence word, the
//! owner's fingerprint, the states), which never changes while the key is tracked. A decision
//! probes the index, reads the record consistently, decides every quota at one reading
//! ([`crate::gcra`]'s arithmetic, as [`MultiBucket`](crate::MultiBucket)) and commits by one CAS
//! of the sequence word from the value it read; the protocol and why it has no ABA:
//! `docs/guarantees.md`, "Per-key policies: the records".

use super::index::{Locked, Step};
use super::policy::sealed::Sealed;
use super::records::{Attempt, Records};
use super::KeyedLimiter;
use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::gcra::{self, all, all::Rates};
use crate::limits::{Limits, MAX_LIMITS};
use crate::multi::Snapshots;
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;
use crate::sync::{Backoff, Mutex, Ordering};
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::cell::Cell;
use core::hash::Hash;
use core::time::Duration;

/// A [`KeyedLimiter`] whose keys each carry a policy of one to four quotas ([`Limits`]) that
/// must **all** hold; all that [`KeyedLimiter`]'s docs say holds, "full" meaning every quota full.
///
/// * **Per key, exactly a [`MultiBucket`](crate::MultiBucket).** Admitted iff every quota holds
///   `cost` at the one clock reading, then every quota is debited in one step; a refusal
///   writes nothing. [`Denied::ExceedsBurst`] iff `cost` exceeds the key's smallest burst, else
///   `RetryAfter` of the slowest quota's exact wait; each quota's window bound holds under any
///   interleaving and stale reading.
/// * **Memory.** The index's 48 to 96 bytes per unit of `max_keys`, plus one record per unit
///   (32 bytes if every policy has one or two quotas, else 64), all up front.
/// * **Locking.** Lookups are lock-free; an admission is one CAS of the key's record's
///   sequence word, then its stores, so a writer preempted there delays only its own key
///   (`docs/guarantees.md`, "Per-key policies: the records").
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let per_second = Quota::per_second(10).unwrap();
/// let per_minute = Quota::new(20, Duration::from_secs(60), 20).unwrap();
/// let limiter = KeyedMultiLimiter::with_clock(Limits::new([per_second, per_minute]).unwrap(), 1000, clock.clone());
/// assert_eq!(limiter.try_acquire(&"alice", 10), Ok(()));
/// assert_eq!(limiter.try_acquire(&"alice", 1), Err(Denied::RetryAfter(Duration::from_millis(100))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(limiter.try_acquire(&"alice", 10), Ok(()));
/// // 20 per minute spent: the minute is the slowest quota now.
/// assert_eq!(limiter.try_acquire(&"alice", 1), Err(Denied::RetryAfter(Duration::from_secs(2))));
/// assert_eq!(limiter.try_acquire(&"bob", 10), Ok(()));
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub type KeyedMultiLimiter<K, C = DefaultClock> = KeyedLimiter<K, Limits, C>;

/// A policy's decision words: up to two quotas decided straight-line, three or four in a loop.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Two(Rates<2>),
    Four(Rates<4>),
}

/// [`Limits`] and what every decision on them needs.
#[derive(Clone, Debug)]
pub struct Policy {
    pub(crate) limits: Limits,
    pub(crate) len: usize,
    /// The smallest burst and its quota (the first of equals): a larger cost is refused before
    /// the clock is read.
    pub(crate) min_burst: u64,
    pub(crate) min_burst_index: usize,
    pub(crate) kind: Kind,
}

impl Policy {
    pub(crate) fn new(limits: Limits) -> Policy {
        let quotas = limits.quotas();
        let min_burst_index = (0..quotas.len())
            .min_by_key(|&i| quotas[i].burst())
            .unwrap_or(0);
        let kind = if quotas.len() <= 2 {
            Kind::Two(Rates::new(&limits))
        } else {
            Kind::Four(Rates::new(&limits))
        };
        Policy {
            len: quotas.len(),
            min_burst: quotas[min_burst_index].burst(),
            min_burst_index,
            kind,
            limits,
        }
    }

    /// The first instant at which every quota is full (`u64::MAX`: never within the horizon).
    pub(crate) fn full_at(&self, states: &[u64]) -> u64 {
        self.limits
            .quotas()
            .iter()
            .zip(states)
            .map(|(q, &s)| gcra::full_at(s, q))
            .max()
            .unwrap_or(0)
    }
}

/// The records beside the index, and the free ones.
pub struct RecordStore {
    records: Records,
    free: Mutex<Free>,
}

impl core::fmt::Debug for RecordStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecordStore")
            .field("records", &self.records.count())
            .finish_non_exhaustive()
    }
}

/// The free records (under the index's mutex): never handed out from `fresh` on, and freed ones.
#[derive(Default)]
struct Free {
    fresh: usize,
    stack: Vec<usize>,
}

impl RecordStore {
    /// A free record (a freed one first), if any.
    fn take(&self) -> Option<usize> {
        let mut free = self.free.lock();
        free.stack.pop().or_else(|| {
            (free.fresh < self.records.count()).then(|| {
                free.fresh += 1;
                free.fresh - 1
            })
        })
    }

    /// One attempt on record `h` for the key `fp` under `policy`.
    #[inline(always)]
    fn attempt(
        &self,
        h: usize,
        fp: u64,
        policy: &Policy,
        now: u64,
        cost: u64,
    ) -> Attempt<Result<(), Refusal>> {
        let len = policy.len;
        match &policy.kind {
            // `0 < cost <=` the smallest burst: checked before the decision.
            Kind::Two(r) => self.records.try_decide::<2>(h, fp, len, |s| {
                all::decide_pair_within(s, now, r, cost).map(Some)
            }),
            Kind::Four(r) => self
                .records
                .try_decide::<4>(h, fp, len, |s| all::decide(s, now, r, cost)),
        }
    }
}

impl Sealed for Limits {
    type Rule = Policy;
    type Store = RecordStore;
    type State = [u64; MAX_LIMITS];
    type Refusal = Refusal;
    type Snap = Snapshots;

    const NAME: &'static str = "KeyedMultiLimiter";
    const SEVERAL: bool = true;

    fn rule(self) -> Policy {
        Policy::new(self)
    }
    fn policy(rule: &Policy) -> &Limits {
        &rule.limits
    }
    fn quotas(rule: &Policy) -> &[crate::Quota] {
        rule.limits.quotas()
    }
    fn store(max_keys: usize, quotas: usize) -> RecordStore {
        RecordStore {
            records: Records::new(max_keys, quotas),
            free: Mutex::new(Free::default()),
        }
    }

    #[inline(always)]
    fn min_burst(policy: &Policy) -> u64 {
        policy.min_burst
    }
    fn exceeds(policy: &Policy) -> Refusal {
        Refusal::new(Denied::ExceedsBurst, policy.min_burst_index)
    }
    fn table_full(wait: Duration) -> Refusal {
        Refusal::new(Denied::RetryAfter(wait), 0)
    }
    #[cfg(feature = "metrics")]
    #[inline(always)]
    fn observe(
        observer: &crate::observe::KeyedObserver,
        verdict: Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        observer.decided_policy(verdict)
    }

    fn start(policy: &Policy, evicted_at: u64) -> [u64; MAX_LIMITS] {
        let q = policy.limits.quotas();
        core::array::from_fn(|i| q[i.min(policy.len - 1)].earned_floor(evicted_at))
    }
    fn decide_state(
        policy: &Policy,
        states: &[u64; MAX_LIMITS],
        now: u64,
        cost: u64,
    ) -> Result<Option<[u64; MAX_LIMITS]>, Refusal> {
        let padded = all::pad::<MAX_LIMITS>(&states[..policy.len]);
        Ok(match &policy.kind {
            Kind::Two(r) => {
                all::decide_pair([padded[0], padded[1]], now, r, cost)?.map(|[a, b]| [a, b, b, b])
            }
            Kind::Four(r) => all::decide(padded, now, r, cost)?,
        })
    }
    fn full_at(policy: &Policy, states: &[u64; MAX_LIMITS]) -> u64 {
        policy.full_at(&states[..policy.len])
    }
    fn available(policy: &Policy, states: &[u64; MAX_LIMITS], now: u64) -> u64 {
        let quotas = policy.limits.quotas().iter().zip(states);
        quotas
            .map(|(q, &s)| gcra::available(s, now, q))
            .min()
            .unwrap_or(0)
    }
    fn snapshot(policy: &Policy, states: &[u64; MAX_LIMITS], now: u64) -> Snapshots {
        let snaps: [Snapshot; MAX_LIMITS] = core::array::from_fn(|i| {
            let i = i.min(policy.len - 1);
            gcra::snapshot(states[i], now, &policy.limits.quotas()[i])
        });
        Snapshots::from_padded(snaps, policy.len)
    }
    fn snapshot_untracked(policy: &Policy, wait: Duration) -> Snapshots {
        Snapshots::from_padded([Snapshot::new(0, wait); MAX_LIMITS], policy.len)
    }
    fn refusal(refusal: Refusal) -> Refusal {
        refusal
    }
    fn snapshots(snaps: Snapshots) -> Snapshots {
        snaps
    }
    fn words(states: &[u64; MAX_LIMITS]) -> &[u64] {
        states
    }
    fn from_words(words: &[u64]) -> [u64; MAX_LIMITS] {
        all::pad(words)
    }

    /// One lock-free probe and one attempt on the record in line; a miss, a busy record or a
    /// stale one out of line.
    #[inline]
    fn decide<K, C: Clock>(
        limiter: &KeyedLimiter<K, Limits, C>,
        fp: u64,
        policy: &Policy,
        cost: u64,
        now: impl FnOnce() -> u64,
    ) -> Result<(), Refusal> {
        // Read before the probe: the insert path trusts a miss only if no entry moved around it.
        let epoch = limiter.index.rebuild_epoch();
        let hit = limiter.index.lookup(fp);
        let now = now();
        if let Some(hit) = hit {
            let attempt = limiter
                .store
                .attempt(hit.state() as usize, fp, policy, now, cost);
            if let Attempt::Done(result) = attempt {
                return result;
            }
        }
        limiter.decide_slow(fp, policy, cost, now, epoch)
    }

    fn decide_tracked<K, C>(
        limiter: &KeyedLimiter<K, Limits, C>,
        fp: u64,
        policy: &Policy,
        cost: u64,
        now: u64,
        epoch: &mut u64,
    ) -> Option<Result<(), Refusal>> {
        let mut backoff = Backoff::default();
        loop {
            let h = limiter.index.load(fp)?;
            if limiter.index.migrating() {
                if let Some(mut locked) = limiter.index.try_lock() {
                    locked.help_migrate();
                }
            }
            match limiter.store.attempt(h as usize, fp, policy, now, cost) {
                Attempt::Done(result) => return Some(result),
                // A writer holds the record, or it was handed to another key: look again.
                Attempt::Busy | Attempt::Stale => {
                    backoff.snooze();
                    *epoch = limiter.index.rebuild_epoch();
                }
            }
        }
    }

    fn saved<K, C>(
        limiter: &KeyedLimiter<K, Limits, C>,
        fp: u64,
        h: u64,
        policy: &Policy,
    ) -> Option<[u64; MAX_LIMITS]> {
        // A key evicted between the walk and this read is skipped (it was full, and restores
        // from the floor, read after the walk), unless it was re-inserted into the same record
        // meanwhile: then its state after that is saved, no more lenient than the floor.
        let mut backoff = Backoff::default();
        loop {
            match limiter
                .store
                .records
                .read::<MAX_LIMITS>(h as usize, policy.len)
            {
                Some((_, owner, states)) => return (owner == fp).then_some(states),
                None => backoff.snooze(),
            }
        }
    }

    fn place<K, C>(
        limiter: &KeyedLimiter<K, Limits, C>,
        locked: &mut Locked<'_>,
        fp: u64,
        policy: &Policy,
        states: &[u64; MAX_LIMITS],
        full_at: u64,
    ) -> bool {
        let Some(h) = limiter.store.take() else {
            return false;
        };
        limiter.store.records.claim(h, fp, &states[..policy.len]);
        locked.insert(fp, h as u64, full_at);
        true
    }

    fn merge<K, C>(
        limiter: &KeyedLimiter<K, Limits, C>,
        fp: u64,
        policy: &Policy,
        states: &[u64; MAX_LIMITS],
    ) {
        let Some(h) = limiter.index.load(fp) else {
            return;
        };
        let (h, n, records) = (h as usize, policy.len, &limiter.store.records);
        // A restore into a live limiter meets decisions holding the record for their write
        // (never for longer: the index's own holds need its lock, which the restore has), so
        // the record is waited for, as `saved` waits for it.
        let mut backoff = Backoff::default();
        let (seq, owner, cur) = loop {
            match records.try_lock(h, n) {
                Some(held) => break held,
                None => backoff.snooze(),
            }
        };
        let mut next = cur;
        for (x, &s) in next.iter_mut().zip(&states[..n]) {
            *x = (*x).max(s);
        }
        if owner == fp {
            records.write_unlock(h, seq, &next[..n]);
        } else {
            records.unlock_unchanged(h, seq);
        }
    }

    /// `full_at` *locks* the record before it reads it and keeps it locked when it answers
    /// "full", so no debit lands between that answer and the eviction (`evicting()`, which frees
    /// it); a lock the index does not act on is released at the next call or the step's end. A
    /// record a writer holds is "not full now" (its debit lands after), with a bound no later
    /// than the truth.
    fn sweep_step<K, C>(
        limiter: &KeyedLimiter<K, Limits, C>,
        locked: &mut Locked<'_>,
        now: u64,
    ) -> Step {
        let store = &limiter.store;
        let held: Cell<Option<(usize, u64)>> = Cell::new(None);
        let release = || {
            if let Some((h, seq)) = held.take() {
                store.records.unlock_unchanged(h, seq);
            }
        };
        let step = locked.sweep_step(
            now,
            |fp, h| {
                release();
                let h = h as usize;
                let policy = limiter.rule_of(fp);
                match store.records.try_lock(h, policy.len) {
                    // Never the case while the slot names the record (it is freed only with
                    // the slot emptied); if it were, the record is not this key's to evict.
                    Some((seq, owner, _)) if owner != fp => {
                        store.records.unlock_unchanged(h, seq);
                        u64::MAX
                    }
                    Some((seq, _, states)) => {
                        let at = policy.full_at(&states[..policy.len]);
                        if at <= now {
                            held.set(Some((h, seq)));
                        } else {
                            store.records.unlock_unchanged(h, seq);
                        }
                        at
                    }
                    // A writer holds it: each word read without the lock is its value before
                    // or after the write, and a debit only delays a full instant.
                    None => {
                        let mut states = [0u64; MAX_LIMITS];
                        store.records.peek(h, &mut states[..policy.len]);
                        policy.full_at(&states[..policy.len]).max(now + 1)
                    }
                }
            },
            || {
                // Before the slot is emptied: whoever misses the key afterwards starts it from
                // a state at least as strict as the evicted one.
                limiter.table.evicted_at.fetch_max(now, Ordering::SeqCst);
                if let Some((h, seq)) = held.take() {
                    store.records.kill(h, seq);
                    store.free.lock().stack.push(h);
                } else {
                    debug_assert!(false, "evicting a record not locked");
                }
            },
        );
        release();
        step
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, Limits, C> {
    /// [`Limiter::decide`](crate::Limiter::decide): the decision naming the quota that refused.
    #[deprecated(note = "use `Limiter::decide(&limiter, &key, cost)`")]
    pub fn try_acquire_detailed<Q>(&self, key: &Q, cost: u64) -> Result<(), Refusal>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.acquire(key, cost)
    }

    /// [`Limiter::decide_snapshots`](crate::Limiter::decide_snapshots): the decision with every quota's snapshot.
    #[deprecated(note = "use `Limiter::decide_snapshots(&limiter, &key, cost)`")]
    pub fn try_acquire_snapshots<Q>(&self, key: &Q, cost: u64) -> (Result<(), Refusal>, Snapshots)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decide_then(key, cost, |v, snap| (v, snap()))
    }

    /// [`Limiter::decide_or_snapshots`](crate::Limiter::decide_or_snapshots): every quota's snapshot on refusal only.
    #[deprecated(note = "use `Limiter::decide_or_snapshots(&limiter, &key, cost)`")]
    #[allow(clippy::result_large_err)]
    pub fn try_acquire_or_snapshots<Q>(
        &self,
        key: &Q,
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decide_then(key, cost, |v, snap| v.map_err(|r| (r, snap())))
    }

    /// The policy of `key`: its override, or the default.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::from(Quota::per_second(5).unwrap());
    /// let limiter = KeyedMultiLimiter::<u8, _>::with_clock(limits.clone(), 10, ManualClock::new());
    /// assert_eq!(limiter.limits_for(&1), &limits);
    /// ```
    pub fn limits_for<Q>(&self, key: &Q) -> &Limits
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        &self.rule_of(self.fingerprint(key)).limits
    }

    /// The default policy.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::from(Quota::per_second(5).unwrap());
    /// assert_eq!(KeyedMultiLimiter::<u8, _>::with_clock(limits.clone(), 10, ManualClock::new()).limits(), &limits);
    /// ```
    pub fn limits(&self) -> &Limits {
        &self.rule.limits
    }
}
