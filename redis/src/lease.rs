//! Leases: tokens taken from the Redis bucket ahead of time, in one "take at most L" call, and
//! served from a local lock-free [`tollgate::Bucket`] until they run out or expire.
//!
//! # Correctness
//!
//! Every token is debited in Redis *before* it is spent, so the tokens spent across all
//! processes never exceed what the Redis bucket admitted. A token is spent at most
//! [`Leases::lifetime`] `T` after its debit (plus scheduling jitter), so in any window of length
//! `Δ` all processes together admit at most `burst + rate·(Δ + T)`: the plain bucket's
//! `burst + rate·Δ`, plus what refills during one lease lifetime. The cost is under-admission:
//! tokens that expire unspent are lost, at most `L` per process per lease lifetime (`processes ×
//! L` in all).
//!
//! # Choosing L
//!
//! `L ≈ per-process request rate × lifetime` serves nearly every request locally; keep
//! `processes × L` well below the burst, or the processes starve each other (the first to lease
//! holds tokens the others wait for). The take size adapts within `1 ..= L`: it doubles when a
//! lease runs dry before half its lifetime and halves when one expires with tokens left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tollgate::{Bucket, ManualClock, Quota};

/// Lease settings (opt-in): see [`RedisLimiterBuilder::leases`](crate::RedisLimiterBuilder::leases).
///
/// ```
/// use std::time::Duration;
/// let l = tollgate_redis::Leases::new(64).lifetime(Duration::from_millis(50)).max_keys(1000);
/// assert_eq!(l.max_tokens(), 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leases {
    max_tokens: u64,
    lifetime: Duration,
    max_keys: usize,
}

impl Leases {
    /// Take at most `max_tokens` per Redis call (at least the request's cost). Defaults: a
    /// lifetime of 100 ms and at most 10,000 keys leased at once.
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Leases::new(16).max_tokens(), 16);
    /// ```
    pub fn new(max_tokens: u64) -> Leases {
        Leases {
            max_tokens,
            lifetime: Duration::from_millis(100),
            max_keys: 10_000,
        }
    }

    /// How long leased tokens may be spent after their debit (the `T` in the window bound).
    ///
    /// ```
    /// use std::time::Duration;
    /// let l = tollgate_redis::Leases::new(8).lifetime(Duration::from_millis(20));
    /// assert_eq!(l.lifetime_of(), Duration::from_millis(20));
    /// ```
    pub fn lifetime(mut self, lifetime: Duration) -> Leases {
        self.lifetime = lifetime;
        self
    }

    /// The most keys holding a lease at once in this process (the memory bound). A key that
    /// finds the table full is decided in Redis without a lease.
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Leases::new(8).max_keys(3).max_keys_of(), 3);
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Leases {
        self.max_keys = max_keys;
        self
    }

    /// The largest take (`L`).
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Leases::new(8).max_tokens(), 8);
    /// ```
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// The configured lifetime.
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Leases::new(8).lifetime_of(), std::time::Duration::from_millis(100));
    /// ```
    pub fn lifetime_of(&self) -> Duration {
        self.lifetime
    }

    /// The configured key bound.
    ///
    /// ```
    /// assert_eq!(tollgate_redis::Leases::new(8).max_keys_of(), 10_000);
    /// ```
    pub fn max_keys_of(&self) -> usize {
        self.max_keys
    }

    pub(crate) fn validate(&self) -> Result<(), crate::Error> {
        if self.max_tokens == 0 || self.max_keys == 0 || self.lifetime.is_zero() {
            return Err(crate::Error::Config(
                "leases need max_tokens >= 1, max_keys >= 1 and a non-zero lifetime".into(),
            ));
        }
        Ok(())
    }
}

/// One key's lease: a local bucket that never refills by itself. Its clock (1 token per
/// nanosecond of clock) is advanced by `n` ns to deposit `n` tokens.
#[derive(Debug)]
pub(crate) struct Slot {
    bucket: Bucket<ManualClock>,
    clock: ManualClock,
    /// Nanoseconds (since the table's start) after which the tokens may not be spent.
    expires: AtomicU64,
    /// When the current lease was taken (same scale).
    taken_at: AtomicU64,
    /// The next take size (adaptive, 1 ..= L).
    take: AtomicU64,
    /// After a refused refill: refuse costs `>= denied_cost` locally until `denied_until` (same
    /// scale as `expires`; 0 = none). Tokens only come back by refilling, so this never refuses
    /// what Redis would admit for those costs — except when another quota or a restart resets
    /// the key, which it notices one wait later.
    denied_until: AtomicU64,
    denied_cost: AtomicU64,
    /// One refill at a time per key and process.
    pub(crate) refill: tokio::sync::Mutex<()>,
    /// The Redis snapshot of the last refill, and when it was taken.
    pub(crate) last: std::sync::Mutex<Option<(tollgate::Snapshot, Instant)>>,
}

/// The table of lease slots (bounded).
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) cfg: Leases,
    start: Instant,
    slots: RwLock<HashMap<Box<str>, Arc<Slot>>>,
}

impl Table {
    pub(crate) fn new(cfg: Leases) -> Table {
        Table {
            cfg,
            start: Instant::now(),
            slots: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The key's slot, created if the table has room (after dropping expired slots).
    pub(crate) fn slot(&self, key: &str) -> Option<Arc<Slot>> {
        if let Some(s) = self
            .slots
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
        {
            return Some(s.clone());
        }
        let mut slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(key) {
            return Some(s.clone());
        }
        if slots.len() >= self.cfg.max_keys {
            let now = self.now();
            // Only slots nobody else holds and whose tokens expired (dropping them loses
            // nothing that may still be spent).
            slots
                .retain(|_, s| Arc::strong_count(s) > 1 || s.expires.load(Ordering::Acquire) > now);
            if slots.len() >= self.cfg.max_keys {
                return None;
            }
        }
        // 1 token per ns, burst L: depositing n tokens = advancing the clock by n ns.
        let quota = Quota::new(1, Duration::from_nanos(1), self.cfg.max_tokens).ok()?;
        let clock = ManualClock::new();
        let bucket = Bucket::with_initial_tokens(quota, 0, clock.clone()).ok()?;
        let slot = Arc::new(Slot {
            bucket,
            clock,
            expires: AtomicU64::new(0),
            taken_at: AtomicU64::new(0),
            take: AtomicU64::new(self.cfg.max_tokens.div_ceil(4).max(1)),
            denied_until: AtomicU64::new(0),
            denied_cost: AtomicU64::new(u64::MAX),
            refill: tokio::sync::Mutex::new(()),
            last: std::sync::Mutex::new(None),
        });
        slots.insert(key.into(), slot.clone());
        Some(slot)
    }

    /// Serves `cost` from the key's lease if it is valid and holds enough.
    pub(crate) fn take_local(&self, slot: &Slot, cost: u64) -> bool {
        slot.expires.load(Ordering::Acquire) > self.now() && slot.bucket.try_acquire(cost).is_ok()
    }

    /// The rest of a recent refusal's wait if it covers `cost` (see `Slot::denied_until`).
    pub(crate) fn denied(&self, slot: &Slot, cost: u64) -> Option<Duration> {
        let until = slot.denied_until.load(Ordering::Acquire);
        let now = self.now();
        (until > now && cost >= slot.denied_cost.load(Ordering::Acquire))
            .then(|| Duration::from_nanos(until - now))
    }

    /// Remembers a refusal of `cost` with `wait`. Call with the refill lock held.
    pub(crate) fn deny(&self, slot: &Slot, cost: u64, wait: Duration) {
        let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        slot.denied_until.store(0, Ordering::Release);
        slot.denied_cost.store(cost, Ordering::Release);
        slot.denied_until
            .store(self.now().saturating_add(wait), Ordering::Release);
    }

    /// Tokens left in the key's valid lease.
    pub(crate) fn local_available(&self, slot: &Slot) -> u64 {
        if slot.expires.load(Ordering::Acquire) > self.now() {
            slot.bucket.available()
        } else {
            0
        }
    }

    /// How many tokens the next refill should take (at least `cost`), adapting the take size.
    /// Call with the refill lock held.
    pub(crate) fn next_take(&self, slot: &Slot, cost: u64) -> u64 {
        let now = self.now();
        let l = self.cfg.max_tokens;
        let mut take = slot.take.load(Ordering::Relaxed);
        let taken_at = slot.taken_at.load(Ordering::Relaxed);
        if taken_at != 0 {
            let left = self.local_available(slot);
            let lifetime = u64::try_from(self.cfg.lifetime.as_nanos()).unwrap_or(u64::MAX);
            if slot.expires.load(Ordering::Acquire) <= now && left > 0 {
                take = (take / 2).max(1);
            } else if now.saturating_sub(taken_at) < lifetime / 2 {
                take = take.saturating_mul(2).min(l);
            }
            slot.take.store(take, Ordering::Relaxed);
        }
        take.max(cost)
    }

    /// Replaces the key's lease with `tokens` (already debited in Redis). Call with the refill
    /// lock held. Leftover tokens of the previous lease are dropped (under-admission, never
    /// over-admission).
    pub(crate) fn deposit(&self, slot: &Slot, tokens: u64, snapshot: tollgate::Snapshot) {
        // Mark expired first so that no taker trusts the bucket while it is refilled.
        slot.expires.store(0, Ordering::Release);
        slot.denied_until.store(0, Ordering::Release);
        loop {
            let left = slot.bucket.available();
            if left == 0 || slot.bucket.try_acquire(left).is_ok() {
                break;
            }
        }
        slot.clock.advance(Duration::from_nanos(tokens));
        let now = self.now();
        slot.taken_at.store(now.max(1), Ordering::Relaxed);
        let lifetime = u64::try_from(self.cfg.lifetime.as_nanos()).unwrap_or(u64::MAX);
        slot.expires
            .store(now.saturating_add(lifetime), Ordering::Release);
        *slot.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((snapshot, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deposit_take_expire() {
        let t = Table::new(Leases::new(10).lifetime(Duration::from_millis(200)));
        let s = t.slot("k").unwrap();
        assert!(!t.take_local(&s, 1), "no lease yet");
        t.deposit(&s, 3, tollgate::Snapshot::new(0, Duration::ZERO));
        assert_eq!(t.local_available(&s), 3);
        assert!(t.take_local(&s, 2));
        assert!(!t.take_local(&s, 2));
        assert!(t.take_local(&s, 1));
        assert!(!t.take_local(&s, 1));
        // A new deposit drops leftovers and never exceeds L.
        t.deposit(&s, 25, tollgate::Snapshot::new(0, Duration::ZERO));
        assert_eq!(t.local_available(&s), 10);
    }

    #[test]
    fn bounded_keys() {
        let t = Table::new(Leases::new(4).max_keys(2));
        let a = t.slot("a").unwrap();
        let _b = t.slot("b").unwrap();
        assert!(t.slot("c").is_none(), "held slots are not evicted");
        drop(a);
        assert!(t.slot("c").is_some(), "an expired, unheld slot makes room");
    }
}
