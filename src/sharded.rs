//! [`ShardedBucket`]: one exact central word and a lease per cache-padded shard.
//!
//! * **The central word** ([`central`]) is the exact [`gcra`] state of the whole quota, on its
//!   own cache line. It only ever rises, so the units it hands out never overlap.
//! * **A lease** ([`lease`]) is an interval of those units, taken by a shard together with one
//!   decision in the same compare-and-swap and then spent by the shard's threads on the shard's
//!   own line. Its size adapts ([`central::lease_tokens`]): up to 2^16 tokens while the word
//!   holds plenty, none near the limit, where every decision is the central CAS alone — or,
//!   for a shard whose threads ask faster than tokens come, an *advance*: up to 64 tokens not
//!   yet earned, taken in one CAS when the word is dry and paid out as the clock earns them.
//! * **The bound**: every admission takes units `[b, b + cost)` that nobody else takes, with
//!   `b` at or after the units earned at its reading and `b + cost` at most one burst above
//!   them — from the central word or from a lease alike. So the admissions of any window `Δ`
//!   lie in an interval of `burst + rate·Δ` and never exceed it, whatever the readings' order.
//! * **The loss**: a lease's units below the units earned lapse unspent; a lease replaced with
//!   less than a token in it loses that fraction. Both only ever refuse.
//!
//! The protocol, its proofs and the behaviour on 64 cores: `docs/sharded.md`.

mod central;
mod lease;
#[cfg(test)]
mod seeded;

use self::central::{Ask, Central, Outcome};
use self::lease::{Fast, Lease};
use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::gcra;
use crate::quota::Quota;
use crate::snapshot::Snapshot;
use crate::sync::{cpu_home, thread_token, AtomicU64, Ordering};
use alloc::boxed::Box;
use core::fmt;
use core::time::Duration;
use crossbeam_utils::CachePadded;

/// The most shards a [`ShardedBucket`] uses, whatever is asked for.
const MAX_SHARDS: usize = 1024;

/// The units earned from the clock's origin to a reading, rounded down and up (equal for exact
/// quotas).
#[derive(Clone, Copy)]
struct Earned {
    floor: u64,
    ceil: u64,
}

/// A token bucket for one global limit hit by many cores at once: one exact central word, and
/// per core a cache-padded shard that spends a lease of the central word's tokens locally.
///
/// * **Exact.** In any window Δ the total admitted never exceeds `burst + rate·Δ`, whatever the
///   interleaving and however stale the clock readings (see `docs/sharded.md`).
/// * **Local while there is plenty.** A thread spends from its shard's lease with one CAS on
///   the shard's own cache line. When the lease is spent, the next decision takes a new one from
///   the central word in the same CAS that decides it: up to `1 / (8 × shards)` of what the word
///   holds (at most 65,536 tokens), so the leases of all shards together hold at most about an
///   eighth of the tokens; and at least what the rate earns in 250 ns (one token at least), so
///   that a lease outlives the time between its shard's decisions instead of lapsing unspent.
/// * **One word near the limit.** When the central word holds fewer than `cost + 8 × shards ×
///   m` tokens (`m` that smallest lease), no lease is taken: a decision is one CAS on the
///   central word, as a single [`Bucket`](crate::Bucket)'s is, and a refusal reads that word and
///   the shard's line, writes nothing and scans no other shard.
/// * **Drained for a while, or by one core.** A decision that leaves the bucket dry for 1 ms or
///   more (rates below 1,000 tokens a second), or the 64th in a row from one shard to take a
///   token from the central word, records, once every lease is empty, the instant the bucket
///   holds a token again on its read-mostly line: until then a one-token request is refused
///   from that line alone, before its shard is even found.
/// * **A thread alone.** The thread whose admission ends such a run also records the word's
///   state there (a *chain*): its next admissions are one CAS of the word from that state —
///   no shard, no lease, no read of the word — each recording the state it wrote. A chain
///   whose CAS fails (the word moved) ends, and so does another's when a thread is refused by
///   the word (the chain's owner is not alone).
/// * **What leases cost.** A lease's tokens serve only its shard's threads. Tokens leased and
///   not spent before the clock passes them lapse, and a lease replaced with less than a token
///   in it loses that fraction ([`stranded_tokens`](ShardedBucket::stranded_tokens)): capacity
///   lost, never a token created. On a frozen clock nothing lapses: everything admitted plus
///   [`available`](ShardedBucket::available) is the burst.
/// * **A shard per CPU.** On Linux a thread decides on the shard of the CPU it runs on: CPUs
///   are numbered 0, 1, 2, … in the order the process first sees them (so the CPUs of a
///   pinned container are consecutive whatever their ids), and the number modulo the shard
///   count is the shard. The CPU is asked (`sched_getcpu`, no syscall) once every 1,023
///   decisions of a thread and cached in a thread-local in between. So however many threads
///   run, a shard's cache line is written from one core: threads sharing a CPU share its
///   shard and its lease, and never move its line. A thread that migrated uses its old CPU's
///   shard for at most 1,022 more decisions, which costs line transfers, never correctness:
///   any thread may use any shard. Elsewhere (and under loom) the shard is the thread's slot
///   (the smallest number no live thread holds, taken on its first call) modulo the count.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
/// let clock = ManualClock::new();
/// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock.clone());
/// assert_eq!(bucket.try_acquire(8), Ok(())); // the whole burst, from the central word
/// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(bucket.available(), 8);
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub struct ShardedBucket<C = DefaultClock> {
    central: CachePadded<Central>,
    shards: Box<[CachePadded<Lease>]>,
    /// Read by every decision, written only by a `dry_all` publication or a chain: apart from the
    /// central word's line.
    read_mostly: CachePadded<ReadMostly<C>>,
}

/// The parts of a [`ShardedBucket`] that decisions read: never written, but for `dry_all` and
/// the chain that goes with it.
struct ReadMostly<C> {
    quota: Quota,
    clock: C,
    /// [`central::spread_units`]: below it beyond a decision's cost, no lease is taken.
    spread: u64,
    /// Maps a thread's CPU number to its shard without a division.
    shard_of: ShardOf,
    /// [`central::advance_cap`]: the most tokens one advance takes (0: none are taken).
    ahead_cap: u64,
    /// An instant before which no decision of one token can be admitted anywhere in the
    /// bucket, at any reading: the central word holds less than a token before it, and no
    /// lease can pay one ([`publish_dry_all`](ShardedBucket::publish_dry_all)); 0: none known;
    /// `u64::MAX` with one shard (whose decisions the same test sends to their own path). A
    /// one-token decision at an earlier reading is refused from it before its shard is even
    /// found. Written (with the chain) at most once per [`central::DRY_ALL_NS`]
    /// (1 ms) for long dry spells, so the line stays shared, and by a shard that admits alone
    /// ([`central::ALONE_AFTER`]) at each admission that leaves the word dry. `Relaxed`.
    dry_all: AtomicU64,
    /// The *chain*: the central word's state as the last admission of a thread alone wrote it
    /// ([`NO_CHAIN`]: none), written with `dry_all`. That thread ([`chain_owner`]) decides its
    /// next admission with one CAS from it, finding neither its shard nor the word first
    /// ([`acquire_chain`](ShardedBucket::acquire_chain)). Any value is safe to CAS from (the
    /// CAS checks it); a stale one costs one failed CAS, and the chain ends. `Relaxed`.
    ///
    /// [`chain_owner`]: ReadMostly::chain_owner
    chain: AtomicU64,
    /// The [`thread_token`] of the thread the chain belongs to (0: none). `Relaxed`.
    chain_owner: AtomicU64,
}

/// [`ReadMostly::chain`] when there is none (states stay below 2^63).
const NO_CHAIN: u64 = u64::MAX;

/// A number modulo the shard count `n` (at most [`MAX_SHARDS`]) by Lemire's multiply-and-shift
/// reduction, `((m · x mod 2^64) · n) >> 64` with `m = ⌈2^64 / n⌉` (0 for `n` = 1): exact for
/// every `x` below 2^32 (and for every `x` when `n` is a power of two), where `%` would be a
/// 64-bit division on every decision (20–90 cycles); two multiplies, no branch.
#[derive(Clone, Copy)]
struct ShardOf {
    m: u64,
    n: u64,
}

impl ShardOf {
    fn new(n: usize) -> ShardOf {
        let n = n as u64;
        ShardOf {
            m: (u64::MAX / n).wrapping_add(1),
            n,
        }
    }

    /// `x mod n` for `x < 2^32`; for larger `x` (a thread slot past the owned ones) some shard
    /// below `n`, which is all a shard needs to be.
    #[inline(always)]
    fn of(self, x: usize) -> usize {
        // Ranks are consecutive from 0 and there is a shard per CPU by default: most numbers
        // are their own shard, and a compare is shorter than the two multiplies on the chain
        // from the thread-local to the shard's line.
        if (x as u64) < self.n {
            return x;
        }
        let low = self.m.wrapping_mul(u64::from(x as u32));
        ((u128::from(low) * u128::from(self.n)) >> 64) as usize
    }
}

impl<C: fmt::Debug> fmt::Debug for ShardedBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedBucket")
            .field("quota", &self.read_mostly.quota)
            .field("shards", &self.shards.len())
            .field("clock", &self.read_mostly.clock)
            .finish()
    }
}

impl ShardedBucket<DefaultClock> {
    /// A full sharded bucket on the [`DefaultClock`], with one shard per core
    /// (`std::thread::available_parallelism`).
    ///
    /// ```
    /// let bucket = tollgate::ShardedBucket::new(tollgate::Quota::per_second(100).unwrap());
    /// assert_eq!(bucket.try_acquire(100), Ok(()));
    /// ```
    pub fn new(quota: Quota) -> ShardedBucket<DefaultClock> {
        ShardedBucket::with_clock(quota, shards_per_core(), DefaultClock::default())
    }

    /// The shard count [`ShardedBucket::new`] asks for: one per core
    /// (`std::thread::available_parallelism`, 1 when unknown).
    ///
    /// ```
    /// assert!(tollgate::ShardedBucket::default_shards() >= 1);
    /// ```
    pub fn default_shards() -> usize {
        shards_per_core()
    }
}

/// One shard per core: the crate's one default for how many ways to split shared state.
pub(crate) fn shards_per_core() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl<C: Clock> ShardedBucket<C> {
    /// A full sharded bucket with `shards` shards on `clock`.
    ///
    /// The number actually used ([`ShardedBucket::shards`]) is at most `shards`, at most the
    /// burst, at most 1024, and at least 1 (`0` is read as 1). With one shard there are no
    /// leases: every admission is the central word's CAS, as a [`Bucket`](crate::Bucket)'s,
    /// and nothing lapses; a one-token refusal while the word is dry reads only the shard's
    /// `dry_until` (one shard is the default on a one-CPU machine; its refusals are then a
    /// little faster than a `Bucket`'s: `docs/sharded.md`). On Linux threads decide on their
    /// CPU's shard, so shards beyond the number of CPUs the process runs on stay unused (their
    /// leases empty): more shards than CPUs buy nothing there but smaller leases.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(3).unwrap();
    /// assert_eq!(ShardedBucket::with_clock(q, 8, ManualClock::new()).shards(), 3);
    /// assert_eq!(ShardedBucket::with_clock(q, 0, ManualClock::new()).shards(), 1);
    /// ```
    pub fn with_clock(quota: Quota, shards: usize, clock: C) -> ShardedBucket<C> {
        ShardedBucket::with_state(quota, shards, clock, gcra::FULL)
    }

    /// A sharded bucket whose central word is `state` and whose leases are empty.
    fn with_state(quota: Quota, shards: usize, clock: C, state: u64) -> ShardedBucket<C> {
        let max = usize::try_from(quota.burst()).unwrap_or(usize::MAX);
        let n = shards.clamp(1, MAX_SHARDS).min(max);
        ShardedBucket {
            central: CachePadded::new(Central::new(state)),
            shards: (0..n).map(|_| CachePadded::new(Lease::default())).collect(),
            read_mostly: CachePadded::new(ReadMostly {
                spread: central::spread_units(quota.scale(), n as u64, central::lease_min(&quota)),
                shard_of: ShardOf::new(n),
                ahead_cap: central::advance_cap(&quota, n as u64),
                dry_all: AtomicU64::new(if n < 2 { u64::MAX } else { 0 }),
                chain: AtomicU64::new(NO_CHAIN),
                chain_owner: AtomicU64::new(0),
                quota,
                clock,
            }),
        }
    }

    /// The number of shards.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(100).unwrap(), 8, ManualClock::new());
    /// assert_eq!(bucket.shards(), 8);
    /// ```
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The global quota.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(100).unwrap();
    /// assert_eq!(ShardedBucket::with_clock(q, 8, ManualClock::new()).quota(), q);
    /// ```
    pub fn quota(&self) -> Quota {
        self.read_mostly.quota
    }

    /// The bucket's clock.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(1).unwrap(), 1, ManualClock::new());
    /// assert_eq!(bucket.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.read_mostly.clock
    }

    /// Takes `cost` tokens: from the calling thread's shard's lease if it holds them, else from
    /// the central word (with a new lease for the shard when the word holds plenty).
    ///
    /// `Err(RetryAfter(d))`: `d` is the smallest wait after which the central word holds `cost`
    /// if nothing else consumes (for quotas that are not [exact](Quota::is_exact) it may be
    /// rounded up by one unit's time). Tokens in leases are not counted, so when some are
    /// leased out `d` is an upper bound of the pooled wait. Near the limit no
    /// tokens are leased out and `d` is exact. `Err(ExceedsBurst)`: `cost` is above the burst.
    /// Cost 0 is always admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire(3), Ok(()));
    /// assert_eq!(bucket.try_acquire(5), Ok(()));
    /// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
    /// assert_eq!(bucket.try_acquire(9), Err(Denied::ExceedsBurst));
    /// ```
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        // Both edges in one test: `cost - 1` wraps for 0, and the burst is at least 1.
        if cost.wrapping_sub(1) >= self.read_mostly.quota.burst() {
            return if cost == 0 {
                Ok(())
            } else {
                Err(Denied::ExceedsBurst)
            };
        }
        self.acquire_at(self.read_mostly.clock.now(), cost)
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), also returning the bucket at the decision's
    /// clock reading: the whole tokens the central word and every lease hold together after
    /// it, and the time until the central word is full (every lease has lapsed by then). Read
    /// once more after the decision (at the same reading, no second clock read), so under
    /// concurrency the snapshot may already include other threads' decisions.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket, Snapshot};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire_snapshot(2), (Ok(()), Snapshot::new(6, Duration::from_millis(250))));
    /// ```
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let (now, verdict) = self.decide_now(cost);
        (verdict, self.snapshot_at(now))
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), with the [`Snapshot`] (at the decision's
    /// reading) only on refusal: an admission reads no other shard for it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, ManualClock, Quota, ShardedBucket, Snapshot};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire_or_snapshot(8), Ok(()));
    /// assert_eq!(bucket.try_acquire_or_snapshot(9), Err((Denied::ExceedsBurst, Snapshot::new(0, Duration::from_secs(1)))));
    /// ```
    pub fn try_acquire_or_snapshot(&self, cost: u64) -> Result<(), (Denied, Snapshot)> {
        let (now, verdict) = self.decide_now(cost);
        verdict.map_err(|denied| (denied, self.snapshot_at(now)))
    }

    /// Whole tokens the central word and every lease hold together now (fractions pooled).
    /// Tokens in another shard's lease serve only that shard's threads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let clock = ManualClock::new();
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(4).unwrap(), 4, clock.clone());
    /// bucket.try_acquire(4).unwrap();
    /// clock.advance(Duration::from_millis(250)); // a token refilled
    /// assert_eq!(bucket.available(), 1);
    /// assert_eq!(bucket.try_acquire(1), Ok(()));
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.read_mostly.clock.now();
        self.pooled_units(now) / self.read_mostly.quota.scale()
    }

    /// Capacity lost so far with replaced leases, in tokens (fractions included): a lease that
    /// holds less than one token at a reading is replaced by the next lease its shard takes, and
    /// what it held is lost. Tokens that lapse in a lease (the clock passed them before the
    /// shard's threads spent them) are counted only when the shard replaces that lease with an
    /// advance (near the limit: `docs/sharded.md`), or when a `dry_all` publication empties it.
    /// Zero with one shard or on a frozen clock; a diagnostic, not a bound.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// assert!(bucket.try_acquire(8).is_ok());
    /// assert!(bucket.try_acquire(8).is_err());
    /// assert_eq!(bucket.stranded_tokens(), 0.0);
    /// ```
    pub fn stranded_tokens(&self) -> f64 {
        let units = self
            .shards
            .iter()
            .fold(0u64, |sum, l| sum.saturating_add(l.stranded()));
        units as f64 / self.read_mostly.quota.scale() as f64
    }

    /// The bucket at `now` (read-only).
    fn snapshot_at(&self, now: u64) -> Snapshot {
        let quota = &self.read_mostly.quota;
        let remaining = self.pooled_units(now) / quota.scale();
        let state = self.central.load();
        let until_full = if gcra::is_full(state, now, quota) {
            Duration::ZERO
        } else {
            match gcra::full_at(state, quota) {
                u64::MAX => Duration::MAX,
                at => Duration::from_nanos(at.saturating_sub(now)),
            }
        };
        Snapshot::new(remaining, until_full)
    }

    /// Units the central word and every lease hold at `now` (read-only).
    fn pooled_units(&self, now: u64) -> u64 {
        let quota = &self.read_mostly.quota;
        let e = self.earned(now);
        let limit = e.floor + quota.burst_units();
        let central = gcra::available_units(self.central.load(), now, quota);
        let leased: u64 = if self.shards.len() > 1 {
            self.shards
                .iter()
                .fold(0u64, |sum, l| sum.saturating_add(l.units(e, limit)))
        } else {
            0
        };
        // Leases and the central word's balance are disjoint parts of one burst.
        central.saturating_add(leased).min(quota.burst_units())
    }

    /// The units earned at `now`.
    #[inline(always)]
    fn earned(&self, now: u64) -> Earned {
        let (floor, ceil) = self.read_mostly.quota.scaled().earned(now);
        Earned { floor, ceil }
    }

    /// The clock reading and the decision at it, edge costs included (for the snapshot paths,
    /// which need the reading whatever the cost).
    fn decide_now(&self, cost: u64) -> (u64, Result<(), Denied>) {
        let now = self.read_mostly.clock.now();
        (now, self.decide_on(now, cost, || self.home()))
    }

    /// The decision at `now`, edge costs included, on the shard `home` gives (the thread's; a
    /// chosen one in the tests).
    #[inline(always)]
    fn decide_on<'a>(
        &'a self,
        now: u64,
        cost: u64,
        home: impl FnOnce() -> &'a Lease,
    ) -> Result<(), Denied> {
        if cost == 0 {
            Ok(())
        } else if cost > self.read_mostly.quota.burst() {
            Err(Denied::ExceedsBurst)
        } else {
            self.acquire_on(now, cost, home)
        }
    }

    /// The decision at `now` for `0 < cost <= burst`: the shard's lease, else the central word.
    ///
    /// The two paths that need neither the central word nor another shard — a spend from the
    /// lease, a one-token refusal before the shard's `dry_until` — are inlined into the caller
    /// with few registers live; everything else is [`acquire_central`](Self::acquire_central),
    /// out of line. (Before 2026-12-03 the whole decision was one out-of-line function, whose
    /// prologue and epilogue saved six registers on every call: on an Intel Xeon guest the
    /// deny path ran at 0.78× a `Bucket`'s in the harness, `docs/sharded.md`.)
    #[inline(always)]
    fn acquire_at(&self, now: u64, cost: u64) -> Result<(), Denied> {
        self.acquire_on(now, cost, || self.home())
    }

    /// [`acquire_at`](Self::acquire_at) with the shard's lookup given (the thread's
    /// [`home`](Self::home); a chosen shard in the unit tests), called only where the decision
    /// needs the shard. Inlined with it: no closure survives.
    #[inline(always)]
    fn acquire_on<'a>(
        &'a self,
        now: u64,
        cost: u64,
        home: impl FnOnce() -> &'a Lease,
    ) -> Result<(), Denied> {
        // One test for two rare cases: one shard (`dry_all` is `u64::MAX` there), or the
        // whole bucket dry for a while yet, as an earlier decision found it (a one-token
        // decision is refused without finding its shard). A load of the line read above.
        let dry = self.read_mostly.dry_all.load(Ordering::Relaxed);
        if now < dry {
            if self.shards.len() < 2 {
                return self.acquire_one(now, cost);
            }
            if cost == 1 {
                return Err(Denied::RetryAfter(central::wait_until(dry, now)));
            }
        }
        // A thread alone takes its admissions from the word in one CAS from the state its last
        // one wrote, on the line just read: no shard, no read of the word.
        let chain = self.read_mostly.chain.load(Ordering::Relaxed);
        if chain != NO_CHAIN
            && self.read_mostly.chain_owner.load(Ordering::Relaxed) == thread_token()
            && self.acquire_chain(now, cost, chain)
        {
            return Ok(());
        }
        let lease = home();
        let (q, h) = lease.read();
        if q < h {
            let scaled = self.read_mostly.quota.scaled();
            let e = self.earned(now);
            let limit = e.floor + scaled.burst_units();
            match lease.spend_fast((q, h), e.ceil, limit, cost * scaled.scale()) {
                Fast::Spent => return Ok(()),
                // Lapsed: as an empty lease, below (the `dry_until` refusal marks the shard
                // hungry, and its next visit to a dry word replaces the lapsed lease with an
                // advance: `a_lapsed_lease_does_not_keep_its_shard_from_advances`).
                Fast::Empty => {}
                Fast::NotYet(need) => {
                    let at = scaled.instant_of(need - scaled.burst_units());
                    return Err(Denied::RetryAfter(central::wait_until(at, now)));
                }
                Fast::Slow => return self.acquire_slow(now, e, cost, lease),
            }
        } else if q == lease::LOCKED {
            return self.acquire_slow(now, self.earned(now), cost, lease);
        }
        // The lease holds nothing; the central word holds less than one token before
        // `dry`, whatever happened since: no need to read it. (The same test as
        // `acquire_one`'s, written out: through a shared helper returning an `Option`, deny
        // measured 0.90-0.91x `cas` against 0.93-0.95x on the Intel guest.)
        let dry = lease.dry_until();
        if cost == 1 && now < dry {
            lease.hungry();
            return Err(Denied::RetryAfter(central::wait_until(dry, now)));
        }
        self.acquire_central(now, cost, lease, q, h)
    }

    /// An admission of `cost` at `now` from the central word in state `chain` (the chain's:
    /// [`ReadMostly::chain`]), in one CAS that the word still holds it; the chain goes on with
    /// the state written (and `dry_all` with it, when the word is left dry). `false` (the
    /// caller decides as any thread does): the word cannot pay the cost at this reading in that
    /// state, or it is no longer in it (the chain ends).
    ///
    /// Why `dry_all` may be published from the state written without a scan: the chain began
    /// with a publication ([`publish_dry_all`](Self::publish_dry_all)) that found every lease
    /// spent for good, from a state the word held at or before the chain's first; and each
    /// link's CAS read the state the last one wrote, so no other write of the word — no lease
    /// or advance handed out — came between them in its modification order. Leases only gain
    /// units from such a write, so every lease is still spent for good; and one taken from a
    /// later state pays no token before the instant published (as in `publish_dry_all`).
    #[inline(always)]
    fn acquire_chain(&self, now: u64, cost: u64, chain: u64) -> bool {
        let rm = &self.read_mostly;
        let scaled = rm.quota.scaled();
        let e = self.earned(now);
        let limit = e.floor + scaled.burst_units();
        let cost_units = cost * scaled.scale();
        if chain + cost_units > limit {
            return false;
        }
        let next = chain.max(e.ceil) + cost_units;
        if !self.central.chain_cas(chain, next) {
            rm.chain.store(NO_CHAIN, Ordering::Relaxed);
            return false;
        }
        if next + scaled.scale() > limit {
            rm.dry_all
                .store(central::dry_at(scaled, next), Ordering::Relaxed);
        }
        rm.chain.store(next, Ordering::Relaxed);
        true
    }

    /// Ends another thread's chain: this thread was refused by the word, so the chain's owner
    /// does not have the bucket to itself (it won the tokens this thread asked for: a thread
    /// whose admissions are one CAS would otherwise win nearly every race, keep its chain,
    /// and write the line every decision reads at each admission while others are refused).
    /// The owner's shard's run is not ended (a refusal does not count in runs): its next
    /// admission, decided the ordinary way, is again the last of a run alone and starts a new
    /// chain. So each race another thread loses to a chain costs the owner one ordinary
    /// admission, and the next token's race is between two ordinary paths.
    #[inline(always)]
    fn end_others_chain(&self) {
        let rm = &self.read_mostly;
        if rm.chain.load(Ordering::Relaxed) != NO_CHAIN
            && rm.chain_owner.load(Ordering::Relaxed) != thread_token()
        {
            rm.chain.store(NO_CHAIN, Ordering::Relaxed);
        }
    }

    /// [`acquire_at`](Self::acquire_at) with one shard, which never holds a lease: a one-token
    /// refusal before its `dry_until`, else [`acquire_central`](Self::acquire_central). Out of
    /// line, so that the shards' fast paths, inlined into every caller, do not grow for it.
    #[inline(never)]
    fn acquire_one(&self, now: u64, cost: u64) -> Result<(), Denied> {
        let lease = &self.shards[0];
        let dry = lease.dry_until();
        if cost == 1 && now < dry {
            return Err(Denied::RetryAfter(central::wait_until(dry, now)));
        }
        self.acquire_central(now, cost, lease, 0, 0)
    }

    /// [`acquire_at`](Self::acquire_at) where the shard's lease (`home`, with the frontier `q`
    /// and top `h` read) holds nothing: one CAS on the central word that takes no lease, or a
    /// refusal; the rest in [`acquire_slow`](Self::acquire_slow). Scalars only, so that every
    /// argument travels in a register.
    #[inline(never)]
    fn acquire_central(
        &self,
        now: u64,
        cost: u64,
        home: &Lease,
        q: u64,
        h: u64,
    ) -> Result<(), Denied> {
        let earned = self.earned(now);
        let scaled = self.read_mostly.quota.scaled();
        match self.central.decide_fast(
            scaled,
            now,
            earned,
            cost * scaled.scale(),
            self.read_mostly.spread,
            (home, (q, h)),
            self.read_mostly.ahead_cap,
        ) {
            Some((verdict, dry)) => {
                if verdict.is_err() {
                    self.end_others_chain();
                }
                self.note_dry(now, earned, verdict.is_ok(), home, dry);
                verdict
            }
            None => self.acquire_slow(now, earned, cost, home),
        }
    }

    /// After a central decision (`admitted`: an admission from the word without a lease, which
    /// counts towards its shard's run) that found or left the word dry until `dry` (as
    /// [`central::Decided`]: from a state this thread read or wrote) ahead of the reading,
    /// tries to publish the whole bucket's dry instant if the spell lasts at least
    /// [`DRY_ALL_NS`](central::DRY_ALL_NS), or if this shard has the word to itself (an
    /// admission, the last [`ALONE_AFTER`](central::ALONE_AFTER) from the word all its own).
    #[inline(always)]
    fn note_dry(&self, now: u64, earned: Earned, admitted: bool, home: &Lease, dry: u64) {
        // One shard keeps `dry_all` at `u64::MAX` and counts no runs.
        if dry <= now || self.shards.len() < 2 {
            return;
        }
        let alone = admitted && self.central.admitted_alone(self.index_of(home));
        if alone || dry - now >= central::DRY_ALL_NS {
            self.publish_dry_all(earned, dry, alone);
        }
    }

    /// Publishes `dry_all` (two shards or more, a spell long enough or a shard alone:
    /// [`note_dry`](Self::note_dry)): `at`, the instant before which the central word, in the
    /// state this thread's decision just read or wrote, holds less than one token — if it is
    /// later than the one published and no lease can pay a token at any reading before it.
    ///
    /// Why that holds for every reading before it, and stays so:
    /// * the word only rises, so it holds less than a token before that instant forever;
    /// * every lease was found spent to its top, or lapsed at a reading and emptied
    ///   ([`Lease::spent_for_good`]), by a scan, and no lease was handed out from an earlier
    ///   state than the one read here since: the hand-outs count is unchanged. A hand-out
    ///   locks its lease, then is counted (`Release`), then CASes the word (`Release`); the
    ///   decision read the word, and this reads the count after an `Acquire` fence
    ///   ([`hand_outs_after_read`](central::Central::hand_outs_after_read), `Acquire` too). So
    ///   a lease taken from an earlier state shows in the count, and a scan that read a count
    ///   including a hand-out sees its lock or its lease, never the empty lease before it;
    /// * no lease taken from a later state can pay a token before that instant: an ordinary
    ///   lease is taken only from a word holding plenty, which it does not before then; an
    ///   advance's units lie at or above the state read here, and a token of them is payable
    ///   only once the word, in that state, would have held one.
    ///
    /// A concurrent publication may store an earlier instant over a later one: still true.
    /// Inline (the scan is out of line): a shard alone publishes at every admission, and the
    /// call measured one-thread mixed 0.97–0.99× `cas` against 1.00–1.01× inline.
    ///
    /// `alone` (the publishing thread's admission is the last of its shard's run): the thread
    /// also starts a [chain](ReadMostly::chain) from the word's state, read again before the
    /// hand-outs count (so that count covers every hand-out written before it) — unless another
    /// thread's chain is in place: the run is its shard's, and two threads of one shard (two
    /// CPUs on one shard, or two threads taking turns on one CPU) continue each other's runs, so
    /// the chain would change hands at nearly every admission, each change costing the last
    /// owner a failed CAS. That thread is not alone: its chain and the run end, and the next
    /// chain needs a new run of [`ALONE_AFTER`](central::ALONE_AFTER) (a review's finding,
    /// 2026-12-04: `a_chain_does_not_change_hands_between_threads_of_one_shard`).
    #[inline(always)]
    fn publish_dry_all(&self, earned: Earned, at: u64, alone: bool) {
        let rm = &self.read_mostly;
        if at <= rm.dry_all.load(Ordering::Relaxed) {
            return;
        }
        let state = if alone { self.central.load() } else { NO_CHAIN };
        let hand_outs = self.central.hand_outs_after_read();
        if !self.central.is_clean(hand_outs) {
            if !self.leases_spent(earned.ceil) {
                return;
            }
            self.central.set_clean(hand_outs);
        }
        rm.dry_all.store(at, Ordering::Relaxed);
        if state != NO_CHAIN {
            let me = thread_token();
            if rm.chain.load(Ordering::Relaxed) != NO_CHAIN
                && rm.chain_owner.load(Ordering::Relaxed) != me
            {
                // Another thread of this shard admitted alone just before: neither is.
                rm.chain.store(NO_CHAIN, Ordering::Relaxed);
                self.central.end_run();
            } else {
                rm.chain_owner.store(me, Ordering::Relaxed);
                rm.chain.store(state, Ordering::Relaxed);
            }
        }
    }

    /// Whether every lease is spent for good at a reading with `ceil` units earned
    /// ([`Lease::spent_for_good`]; lapsed ones are emptied): one line per shard, the lease that
    /// stopped the last scan first ([`Central::blocker`](central::Central::blocker)), so that
    /// while it holds units an attempt reads one line. On 64 cores a busy shard alone, while a
    /// quiet shard's advance holds units (up to a burst's time, until they lapse), would
    /// otherwise read 64 lines at every admission (`examples/sharded_sim.rs` with `HOT_PCT`).
    #[cold]
    #[inline(never)]
    fn leases_spent(&self, ceil: u64) -> bool {
        let first = self.central.blocker();
        if let Some(lease) = self.shards.get(first) {
            if !lease.spent_for_good(ceil) {
                return false;
            }
        }
        match self.shards.iter().position(|l| !l.spent_for_good(ceil)) {
            Some(shard) => {
                self.central.set_blocker(shard);
                false
            }
            None => true,
        }
    }

    /// [`acquire_at`](Self::acquire_at) in general: every case, retried until decided.
    #[inline(never)]
    fn acquire_slow(
        &self,
        now: u64,
        earned: Earned,
        cost: u64,
        home: &Lease,
    ) -> Result<(), Denied> {
        let scaled = self.read_mostly.quota.scaled();
        loop {
            let lease = match home.spend(earned, scaled.burst_units(), cost * scaled.scale()) {
                Ok(()) => return Ok(()),
                Err(short) => (home, short),
            };
            let ask = Ask {
                scaled,
                now,
                earned,
                cost,
                shards: self.shards.len() as u64,
                spread: self.read_mostly.spread,
                lease,
            };
            match self.central.decide(&ask) {
                Outcome::Admitted => return Ok(()),
                Outcome::Refused(denied, dry) => {
                    self.end_others_chain();
                    self.note_dry(now, earned, false, home, dry);
                    return Err(denied);
                }
                Outcome::Retry => {}
            }
        }
    }

    /// The index of the shard whose lease is `lease` (a subtraction and a shift).
    #[inline(always)]
    fn index_of(&self, lease: &Lease) -> usize {
        let from = self.shards.as_ptr() as usize;
        (lease as *const Lease as usize - from) / core::mem::size_of::<CachePadded<Lease>>()
    }

    /// The calling thread's shard: its CPU's ([`cpu_home`]) modulo the shard count (with one
    /// shard, always the one).
    #[inline(always)]
    fn home(&self) -> &Lease {
        &self.shards[self.read_mostly.shard_of.of(cpu_home())]
    }

    // ---- the narrow interface that saving and restoring use (`src/persist/sharded.rs`) ----

    /// The units the whole bucket holds at `now` (the central word's: tokens leased to shards
    /// count as spent), the scale of that unit (units per token), and the most it holds (the
    /// burst, in that unit).
    #[cfg(feature = "persist")]
    pub(crate) fn held_units(&self, now: u64) -> (u128, u64, u128) {
        let q = &self.read_mostly.quota;
        let held = gcra::available_units(self.central.load(), now, q);
        (u128::from(held), q.scale(), u128::from(q.burst_units()))
    }

    /// Lowers what the central word holds at `now` to at most `max` units (of
    /// [`held_units`](ShardedBucket::held_units)): raises its state to the one holding `max`
    /// then (rounded toward fewer), never lowers it, so it only ever removes tokens.
    #[cfg(feature = "persist")]
    pub(crate) fn limit_held(&self, now: u64, max: u128) {
        let q = &self.read_mostly.quota;
        let max = u64::try_from(max).map_or(q.burst_units(), |m| m.min(q.burst_units()));
        self.central
            .raise(q.earned_ceil(now) + (q.burst_units() - max));
    }
}

#[cfg(test)]
mod tests {
    use super::{Lease, ShardOf, ShardedBucket, MAX_SHARDS};
    use crate::clock::ManualClock;
    use crate::error::Denied;
    use crate::quota::Quota;
    use crate::sync::Ordering;
    use core::time::Duration;

    const MS: u64 = 1_000_000;

    fn dry_all(bucket: &ShardedBucket<ManualClock>) -> u64 {
        bucket.read_mostly.dry_all.load(Ordering::Relaxed)
    }

    /// `lease`'s shard drains the full word at `from`, then takes one token every `step` ns:
    /// [`ALONE_AFTER`](super::central::ALONE_AFTER) admissions from the word in a row, each
    /// leaving it dry; `dry_all` is checked unchanged until the last, which publishes when its
    /// shard started the run here. The last admission's reading.
    fn drain_alone(
        bucket: &ShardedBucket<ManualClock>,
        lease: &Lease,
        from: u64,
        step: u64,
    ) -> u64 {
        let before = dry_all(bucket);
        let burst = bucket.quota().burst();
        assert_eq!(bucket.acquire_central(from, burst, lease, 0, 0), Ok(()));
        let run = super::central::ALONE_AFTER;
        for k in 1..run {
            assert_eq!(dry_all(bucket), before, "admission {k} of the run");
            assert_eq!(
                bucket.acquire_central(from + k * step, 1, lease, 0, 0),
                Ok(())
            );
        }
        from + (run - 1) * step
    }

    /// A drained bucket dry for 1 ms or more publishes the instant it holds a token again, and
    /// a one-token decision before it is refused with the exact wait; one dry for less does not
    /// (its refusals come from the shards' `dry_until`); one shard keeps `u64::MAX` there.
    #[test]
    fn a_long_dry_spell_is_published_for_the_whole_bucket() {
        let clock = ManualClock::new();
        let bucket = ShardedBucket::with_clock(Quota::per_second(10).unwrap(), 4, clock.clone());
        assert_eq!(dry_all(&bucket), 0);
        assert_eq!(bucket.try_acquire(10), Ok(()));
        assert_eq!(dry_all(&bucket), 100 * MS);
        clock.advance(Duration::from_millis(40));
        let wait = Denied::RetryAfter(Duration::from_millis(60));
        assert_eq!(bucket.try_acquire(1), Err(wait));
        assert_eq!(
            bucket.try_acquire(2),
            Err(Denied::RetryAfter(Duration::from_millis(160)))
        );
        clock.advance(Duration::from_millis(60));
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(dry_all(&bucket), 200 * MS, "the next dry spell");

        // 10,000 tokens a second: dry for 100 µs at most.
        let fast = ShardedBucket::with_clock(
            Quota::new(10_000, Duration::from_secs(1), 10).unwrap(),
            4,
            clock.clone(),
        );
        assert_eq!(fast.try_acquire(10), Ok(()));
        assert!(fast.try_acquire(1).is_err());
        assert_eq!(dry_all(&fast), 0);

        let one = ShardedBucket::with_clock(Quota::per_second(10).unwrap(), 1, clock);
        assert_eq!(one.try_acquire(10), Ok(()));
        assert_eq!(dry_all(&one), u64::MAX);
        assert_eq!(
            one.try_acquire(1),
            Err(Denied::RetryAfter(Duration::from_millis(100)))
        );
    }

    /// A lease on another shard that still holds tokens stops the publication: its shard's
    /// threads spend them first. Once it is spent, the next refusal publishes.
    #[test]
    fn a_lease_holding_tokens_stops_the_publication() {
        let clock = ManualClock::new();
        let quota = Quota::per_second(100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock);
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        // The other shard takes 1 and a lease of ⌊98 / 16⌋ = 6 tokens from the full word.
        assert_eq!(bucket.acquire_central(0, 1, other, 0, 0), Ok(()));
        let (q, h) = other.read();
        assert_eq!(h - q, 6 * quota.scale());
        // This shard drains the word (93 tokens): dry for 10 ms, but the lease holds 6.
        assert_eq!(bucket.acquire_central(0, 93, mine, 0, 0), Ok(()));
        assert!(mine.dry_until() >= 10 * MS);
        assert_eq!(dry_all(&bucket), 0);
        assert!(bucket.acquire_central(0, 1, mine, 0, 0).is_err());
        assert_eq!(dry_all(&bucket), 0);
        assert_eq!(
            bucket.central.blocker(),
            1,
            "checked first by the next scan"
        );
        let e = bucket.earned(0);
        for _ in 0..6 {
            assert_eq!(bucket.acquire_slow(0, e, 1, other), Ok(()));
        }
        assert_eq!(bucket.available(), 0);
        assert!(bucket.acquire_central(0, 1, mine, 0, 0).is_err());
        assert_eq!(dry_all(&bucket), 10 * MS);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// A shard that makes [`ALONE_AFTER`](super::central::ALONE_AFTER) admissions from the word
    /// in a row publishes every dry spell it leaves, however short; another shard's admission
    /// ends the run (the instant published stays: still true).
    #[test]
    fn a_shard_alone_publishes_every_dry_spell() {
        let clock = ManualClock::new();
        let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock.clone());
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        let t = drain_alone(&bucket, mine, 0, 100) + 100;
        assert_eq!(dry_all(&bucket), t);
        clock.set(Duration::from_nanos(t - 50));
        assert_eq!(
            bucket.try_acquire(1),
            Err(Denied::RetryAfter(Duration::from_nanos(50)))
        );
        assert_eq!(bucket.acquire_central(t, 1, other, 0, 0), Ok(()));
        assert_eq!(bucket.acquire_central(t + 100, 1, mine, 0, 0), Ok(()));
        assert_eq!(dry_all(&bucket), t, "the run ended");
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    fn chain(bucket: &ShardedBucket<ManualClock>) -> u64 {
        bucket.read_mostly.chain.load(Ordering::Relaxed)
    }

    /// A thread whose shard's admission is the last of a run alone starts a chain from the
    /// word's state; its next admissions are one CAS each from the state the last one wrote,
    /// publishing `dry_all` as they go, and its shard's line is not touched (its `dry_until`
    /// stays). Every verdict is the word's: admissions at each token, exact waits between.
    #[test]
    fn a_thread_alone_admits_through_its_chain() {
        let clock = ManualClock::new();
        let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock.clone());
        let mine = &bucket.shards[0];
        assert_eq!(chain(&bucket), super::NO_CHAIN);
        let t = drain_alone(&bucket, mine, 0, 100) + 100;
        assert_eq!(chain(&bucket), bucket.central.load());
        assert_eq!(
            bucket.read_mostly.chain_owner.load(Ordering::Relaxed),
            crate::sync::thread_token()
        );
        let dry_until = mine.dry_until();
        for k in 0..100 {
            let now = t + k * 100;
            clock.set(Duration::from_nanos(now));
            assert_eq!(bucket.try_acquire(1), Ok(()), "token {k}");
            assert_eq!(chain(&bucket), bucket.central.load());
            assert_eq!(dry_all(&bucket), now + 100);
            clock.set(Duration::from_nanos(now + 30));
            assert_eq!(
                bucket.try_acquire(1),
                Err(Denied::RetryAfter(Duration::from_nanos(70)))
            );
        }
        assert_eq!(mine.dry_until(), dry_until, "the shard's line untouched");
        // A cost the word cannot pay goes the ordinary way, and is refused exactly.
        clock.set(Duration::from_nanos(t + 100 * 100));
        assert_eq!(
            bucket.try_acquire(2),
            Err(Denied::RetryAfter(Duration::from_nanos(100)))
        );
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// A chain ends when the word moves under it (another thread's admission: the owner's next
    /// CAS fails, and it decides the ordinary way, exactly), and when another thread is refused
    /// by the word (the owner won the token it asked for: it is not alone) — for one admission:
    /// the run goes on, and the owner's next admission from the word starts a chain again.
    #[test]
    fn a_chain_ends_when_another_thread_decides() {
        let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        let on_other_thread = |now: u64, cost: u64| {
            std::thread::scope(|s| {
                s.spawn(|| bucket.decide_on(now, cost, || other))
                    .join()
                    .unwrap()
            })
        };
        let t = drain_alone(&bucket, mine, 0, 100) + 100;
        assert_ne!(chain(&bucket), super::NO_CHAIN);
        // At `t` the word holds one token: another thread takes it. The owner's CAS from its
        // chain fails, and it is refused the ordinary way, exactly.
        assert_eq!(on_other_thread(t, 1), Ok(()));
        assert_ne!(chain(&bucket), super::NO_CHAIN, "stale, not yet found");
        let wait = Err(Denied::RetryAfter(Duration::from_nanos(100)));
        assert_eq!(bucket.decide_on(t, 1, || mine), wait);
        assert_eq!(chain(&bucket), super::NO_CHAIN, "the owner's CAS failed");
        assert_eq!(bucket.decide_on(t + 100, 1, || mine), Ok(()));

        // A new run alone, a new chain; then another thread asks for 2 where the word holds 1:
        // refused by the word, it ends the chain.
        let run = super::central::ALONE_AFTER;
        for k in 2..=run {
            assert_eq!(chain(&bucket), super::NO_CHAIN, "admission {k} of the run");
            assert_eq!(bucket.decide_on(t + k * 100, 1, || mine), Ok(()));
        }
        assert_eq!(chain(&bucket), bucket.central.load());
        let t = t + (run + 1) * 100;
        assert_eq!(on_other_thread(t, 2), wait);
        assert_eq!(chain(&bucket), super::NO_CHAIN);
        assert_eq!(bucket.decide_on(t, 1, || mine), Ok(()));
        // A refusal does not end the shard's run: the owner's next admission, the ordinary way,
        // starts a chain again (until a review of 2026-12-04 the docs said a new run of 64).
        assert_eq!(chain(&bucket), bucket.central.load(), "a chain again");
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// Two threads of one shard continue each other's run: an admission of either is the last
    /// of a run alone. Until a review (2026-12-04) the other thread then took the chain over at
    /// once, and the owner's next chain CAS failed: two threads on two CPUs deciding on one
    /// shard at 10 M tokens a second started 0.45–0.49 M chains and failed 0.24–0.27 M chain
    /// CASes a second. Now a thread that finds another's chain in place when its run ends ends
    /// that chain and the run, and the next chain needs a new run of 64 (0.16 M chains started,
    /// 0.09 M CASes failed; `docs/sharded.md`).
    #[test]
    fn a_chain_does_not_change_hands_between_threads_of_one_shard() {
        let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let mine = &bucket.shards[0];
        let t = drain_alone(&bucket, mine, 0, 100) + 100;
        let me = crate::sync::thread_token();
        assert_eq!(chain(&bucket), bucket.central.load());
        assert_eq!(bucket.read_mostly.chain_owner.load(Ordering::Relaxed), me);
        // Another thread of the same shard takes the token of `t`: the run goes on, but the
        // chain is not handed over; it ends, with the run.
        let theirs =
            std::thread::scope(|s| s.spawn(|| bucket.decide_on(t, 1, || mine)).join().unwrap());
        assert_eq!(theirs, Ok(()));
        assert_eq!(chain(&bucket), super::NO_CHAIN, "handed over");
        assert_eq!(dry_all(&bucket), t + 100, "still published");
        // This thread's next admissions are the ordinary way, a new run; its last, a chain.
        let run = super::central::ALONE_AFTER;
        for k in 1..run {
            assert_eq!(bucket.decide_on(t + k * 100, 1, || mine), Ok(()));
            assert_eq!(
                chain(&bucket),
                super::NO_CHAIN,
                "admission {k} of the new run"
            );
        }
        assert_eq!(bucket.decide_on(t + run * 100, 1, || mine), Ok(()));
        assert_eq!(chain(&bucket), bucket.central.load());
        assert_eq!(bucket.read_mostly.chain_owner.load(Ordering::Relaxed), me);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// While a shard publishes alone with the scan skipped, a lease handed out to another
    /// shard changes the count: the next publication scans, finds the lease holding tokens, and
    /// does not publish; once it is spent, the next one does.
    #[test]
    fn a_lease_handed_out_since_the_last_scan_is_scanned_for() {
        let clock = ManualClock::new();
        let quota = Quota::new(10_000, Duration::from_secs(1), 100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock.clone());
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        let token = 100_000; // ns
        let published = drain_alone(&bucket, mine, 0, token) + token;
        assert_eq!(dry_all(&bucket), published, "alone, after a scan");
        // 51 tokens later the other shard takes 1 and a lease of ⌊50 / 16⌋ = 3.
        let now = published + 50 * token;
        assert_eq!(bucket.acquire_central(now, 1, other, 0, 0), Ok(()));
        let (q, h) = other.read();
        assert_eq!(h - q, 3 * quota.scale());
        // This shard, still alone in its run, drains the word: dry, but not published.
        clock.set(Duration::from_nanos(now));
        let word = bucket.available() - 3;
        assert_eq!(bucket.acquire_central(now, word, mine, 0, 0), Ok(()));
        assert!(mine.dry_until() > now);
        assert_eq!(dry_all(&bucket), published, "published over a lease of 3");
        let e = bucket.earned(now);
        for _ in 0..3 {
            assert_eq!(bucket.acquire_slow(now, e, 1, other), Ok(()));
        }
        assert_eq!(bucket.acquire_central(now + token, 1, mine, 0, 0), Ok(()));
        assert_eq!(dry_all(&bucket), now + 2 * token, "the lease spent");
    }

    /// An advance that lapsed and was emptied by another shard's scan counts as lapsed: its
    /// shard's next advance halves. Emptied, the lease looks spent to its top, and until
    /// 2026-12-03 the next advance doubled (here 4 tokens instead of 1), so a quiet shard's
    /// advances grew to the cap and lapsed whole (`examples/sharded_sim.rs`, `HOT_PCT`).
    #[test]
    fn an_advance_a_scan_emptied_halves_the_next() {
        let clock = ManualClock::new();
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock);
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        let us = 1_000; // a token
                        // The other shard drains the word (its only admission) and takes advances.
        assert_eq!(bucket.acquire_central(0, 1_000, other, 0, 0), Ok(()));
        other.hungry();
        let ask = |now: u64| {
            let (q, h) = other.read();
            bucket.acquire_central(now, 1, other, q, h)
        };
        assert_eq!(ask(0), Err(Denied::RetryAfter(Duration::from_micros(1))));
        assert_eq!(other.ahead(), (1, false), "an advance of 1");
        assert_eq!(bucket.acquire_slow(us, bucket.earned(us), 1, other), Ok(()));
        assert!(ask(us).is_err());
        assert_eq!(other.ahead(), (2, false), "spent to its top: doubled");
        // 1,003 µs: the advance's units lapsed. This shard drains the word and admits alone,
        // and its publication's scan empties the advance.
        let last = drain_alone(&bucket, mine, 1_003 * us, us);
        assert_eq!(dry_all(&bucket), last + us);
        assert_eq!(bucket.stranded_tokens(), 2.0);
        assert_eq!(other.ahead(), (2, true), "emptied after it lapsed");
        assert!(ask(last).is_err());
        assert_eq!(other.ahead(), (1, false), "halved, not doubled");
    }

    /// A lease that lapsed at the publishing reading is emptied (its units counted as
    /// stranded), so that no older reading can spend it after the publication either.
    #[test]
    fn a_lapsed_lease_is_emptied_for_the_publication() {
        let clock = ManualClock::new();
        let quota = Quota::per_second(100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock);
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        assert_eq!(bucket.acquire_central(0, 1, other, 0, 0), Ok(()));
        // At 80 ms, 8 tokens earned: the lease's units (tokens 1 to 7) lapsed.
        let now = 80 * MS;
        assert_eq!(bucket.acquire_central(now, 100, mine, 0, 0), Ok(()));
        let (q, h) = other.read();
        assert_eq!(q, h, "emptied");
        assert_eq!(bucket.stranded_tokens(), 6.0);
        assert_eq!(dry_all(&bucket), 90 * MS);
        // A reading older than the publication is refused too: the lease is gone.
        let e = bucket.earned(10 * MS);
        assert!(bucket.acquire_slow(10 * MS, e, 1, other).is_err());
    }

    /// A decision of `bucket` at `now` on shard `i` (the public path with the shard chosen).
    fn on(
        bucket: &ShardedBucket<ManualClock>,
        i: usize,
        now: u64,
        cost: u64,
    ) -> Result<(), Denied> {
        bucket.acquire_on(now, cost, || &bucket.shards[i])
    }

    /// Shard 1 becomes hungry on a drained word at `t`: a refusal from the word, then one from
    /// its `dry_until`.
    fn make_hungry(bucket: &ShardedBucket<ManualClock>, t: u64) {
        assert!(on(bucket, 1, t, 1).is_err());
        assert!(on(bucket, 1, t, 1).is_err());
        assert_eq!(bucket.shards[1].ahead(), (1, false));
    }

    /// A one-token refusal answered from a shard's `dry_until` does not see an advance another
    /// shard took since: it waits the pooled wait (the token it counts is in that advance),
    /// earlier than the word's by at most the advance; retried then, it is refused with the
    /// word's wait, and the advance's holder takes the token (a review's finding, 2026-12-04:
    /// documented in `docs/guarantees.md`, not changed — the refusal reads no central line).
    #[test]
    fn a_refusal_from_dry_until_waits_the_pooled_wait_past_an_advance() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 20).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let t0 = 1_000 * MS;
        assert_eq!(on(&bucket, 0, t0, 20), Ok(()));
        assert!(on(&bucket, 0, t0, 1).is_err());
        assert_eq!(bucket.shards[0].dry_until(), t0 + 1_000);
        make_hungry(&bucket, t0);
        let s = bucket.central.load();
        assert!(on(&bucket, 1, t0 + 500, 2).is_err());
        assert_eq!(
            bucket.central.load(),
            s + quota.scale(),
            "an advance of one token"
        );
        let pooled = Denied::RetryAfter(Duration::from_nanos(500));
        assert_eq!(on(&bucket, 0, t0 + 500, 1), Err(pooled));
        let word = Denied::RetryAfter(Duration::from_nanos(1_000));
        assert_eq!(
            on(&bucket, 0, t0 + 1_000, 1),
            Err(word),
            "one advance later"
        );
        assert_eq!(on(&bucket, 1, t0 + 1_000, 1), Ok(()), "the advance's token");
    }

    /// The same through `dry_all`, published by a shard alone before the other's advance.
    #[test]
    fn a_refusal_from_dry_all_waits_the_pooled_wait_past_an_advance() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 20).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let t0 = 1_000 * MS;
        assert_eq!(
            bucket.acquire_central(t0, 20, &bucket.shards[0], 0, 0),
            Ok(())
        );
        make_hungry(&bucket, t0);
        let mut last = t0;
        for _ in 0..super::central::ALONE_AFTER {
            last += 1_000;
            assert_eq!(
                bucket.acquire_central(last, 1, &bucket.shards[0], 0, 0),
                Ok(())
            );
        }
        assert_eq!(dry_all(&bucket), last + 1_000, "published alone");
        let s = bucket.central.load();
        assert!(on(&bucket, 1, last + 400, 2).is_err());
        assert!(bucket.central.load() > s, "an advance");
        let pooled = Denied::RetryAfter(Duration::from_nanos(600));
        assert_eq!(on(&bucket, 0, last + 400, 1), Err(pooled));
        assert!(
            on(&bucket, 0, last + 1_000, 1).is_err(),
            "the token is the advance's"
        );
    }

    /// No advance for a cost of the whole burst: with an inexact quota its first units lapse
    /// at the instant the cost becomes payable from them (the earned units, rounded up, pass
    /// them), so the holder retrying at its wait was refused again, by the advance's size (a
    /// review's finding, 2026-12-04). Refused from the word, every such wait is exact: each
    /// retry at it is admitted.
    #[test]
    fn a_cost_of_the_whole_burst_takes_no_advance_and_waits_exactly() {
        let quota = Quota::new(1_000_003, Duration::from_millis(1_001), 97).unwrap();
        assert!(!quota.is_exact());
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let mut t = 1_000 * MS + 123;
        assert_eq!(on(&bucket, 0, t, 97), Ok(()));
        make_hungry(&bucket, t);
        let mut retried = 0;
        for k in 0..200u64 {
            t += 1_000 + k % 7;
            let s = bucket.central.load();
            if let Err(Denied::RetryAfter(d)) = on(&bucket, 1, t, 97) {
                assert_eq!(bucket.central.load(), s, "no advance at {t}");
                t += d.as_nanos() as u64;
                assert_eq!(on(&bucket, 1, t, 97), Ok(()), "retried at its wait, {t}");
                retried += 1;
            }
            // Keep the word drained and the shard hungry.
            let _ = on(&bucket, 0, t, 97);
            let _ = on(&bucket, 1, t, 1);
        }
        assert!(retried > 100, "{retried}");
    }

    /// A replacement that read its lease empty and stalled never discards an advance another
    /// thread of its shard installed from the same frontier meanwhile: a lease spent to its top
    /// with the word still there is replaced by an advance that starts at that very unit, so
    /// the frontier comes back to the value the stalled thread read (`q → LOCKED → q`). Its
    /// lock now checks the top as well, and it retries (a review's finding, 2026-12-04: before,
    /// it replaced the advance, its units counted nowhere).
    #[test]
    fn a_stalled_replacement_never_discards_an_advance() {
        use super::central::{Ask, Outcome};
        use super::lease::Short;
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let c = &bucket.shards[1];
        let t0 = 1_000 * MS;
        assert_eq!(on(&bucket, 0, t0, 100), Ok(()));
        make_hungry(&bucket, t0);
        assert!(on(&bucket, 1, t0, 2).is_err(), "an advance of one token");
        assert_eq!(on(&bucket, 1, t0 + 1_000, 1), Ok(()), "spent to its top");
        let (q, h) = c.read();
        assert_eq!((q, h), (bucket.central.load(), bucket.central.load()));
        // X reads the empty lease at a later reading (the word holds plenty there) and stalls
        // before deciding.
        let tx = t0 + 60_000;
        let ex = bucket.earned(tx);
        let short = match c.spend(ex, quota.burst_units(), quota.scale()) {
            Err(short @ Short::Holds { units: 0, .. }) => short,
            _ => panic!("an empty lease"),
        };
        // Y, at its own reading, takes the next advance: from the same unit.
        assert!(on(&bucket, 1, t0 + 1_000, 2).is_err());
        let advance = c.read();
        assert_eq!(advance.0, q, "the frontier is back at q");
        assert!(advance.1 > q);
        let ask = Ask {
            scaled: quota.scaled(),
            now: tx,
            earned: ex,
            cost: 1,
            shards: 2,
            spread: bucket.read_mostly.spread,
            lease: (c, short),
        };
        assert!(matches!(bucket.central.decide(&ask), Outcome::Retry));
        assert_eq!(c.read(), advance, "the advance is kept");
        // Retried, X spends from it.
        assert_eq!(on(&bucket, 1, tx, 1), Ok(()));
        assert_eq!(c.read(), (q + quota.scale(), advance.1));
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// The multiply-and-shift reduction is `%` for every shard count and every number below
    /// 2^32 tried, and stays below the count above it.
    #[test]
    fn a_shard_is_the_number_modulo_the_count() {
        for n in 1..=MAX_SHARDS {
            let of = ShardOf::new(n);
            let edges = (0..3 * n).chain((u32::MAX as usize - 2 * n)..=u32::MAX as usize);
            for x in edges {
                assert_eq!(of.of(x), x % n, "{x} mod {n}");
            }
            for x in [1usize << 32, usize::MAX >> 1, usize::MAX] {
                assert!(of.of(x) < n, "{x} mod {n}");
            }
        }
    }
}
