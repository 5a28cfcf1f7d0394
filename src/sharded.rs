//! [`ShardedBucket`]: one exact central word and a lease per cache-padded shard.
//!
//! * **The central word** ([`central`]) is the exact [`gcra`] state of the whole quota, on its
//!   own cache line. It only ever rises, so the units it hands out never overlap.
//! * **A lease** ([`lease`]) is an interval of those units that a shard's threads spend on its
//!   own line: a *far* lease of up to 2^16 tokens while the word holds plenty, a *near* lease of
//!   up to 64 near the limit, whose units may not be earned yet, so that near the limit too a
//!   shard's threads admit and refuse on their own line.
//! * **The bound**: every admission takes units `[b, b + cost)` that nobody else takes, with
//!   `b` at or after the units earned at its reading and `b + cost` at most one burst above
//!   them — from the central word or from a lease alike. So the admissions of any window `Δ`
//!   lie in an interval of `burst + rate·Δ` and never exceed it, whatever the readings' order.
//! * **The loss**: a lease's units below the units earned lapse unspent; a lease replaced with
//!   less than a token in it loses that fraction. Both only ever refuse.
//!
//! The protocol, its proofs and its numbers on 2, 16 and 64 cores: `docs/sharded.md`.

mod central;
#[cfg_attr(not(feature = "counters"), allow(dead_code))]
pub(crate) mod counters;
mod lease;
mod limiter;
#[cfg(feature = "persist")]
mod persist;
#[cfg(test)]
mod seeded;

use self::central::{Ask, Central, Outcome};
use self::lease::{Fast, Lease};
use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::gcra;
use crate::quota::Quota;
use crate::snapshot::Snapshot;
use crate::sync::{cpu_home, AtomicU64, Backoff, Ordering, Tick};
use alloc::boxed::Box;
use core::fmt;
use core::time::Duration;
use crossbeam_utils::CachePadded;

/// The most shards a [`ShardedBucket`] uses, whatever is asked for.
const MAX_SHARDS: usize = 1024;

/// Spins ([`Backoff::spin`], doubling from one hint to 64: 127 hints in all) a decision of a
/// shard waiting for a hand-off gives a lease found locked before it decides on the central
/// word instead ([`ShardedBucket::acquire_slow`]).
const HAND_OFF_SPINS: u32 = 7;

/// The units earned from the clock's origin to a reading, rounded down and up (equal for exact
/// quotas).
#[derive(Clone, Copy)]
struct Earned {
    floor: u64,
    ceil: u64,
}

/// [`Scaled::earned`](crate::quota::Scaled::earned) for an inexact quota (a division), out
/// of the exact quotas' way: their fast path keeps `floor` and `ceil` in one register.
#[cold]
#[inline(never)]
fn earned_inexact(scaled: &crate::quota::Scaled, now: u64) -> Earned {
    let (floor, ceil) = scaled.earned(now);
    Earned { floor, ceil }
}

/// A token bucket for one global limit hit by many cores at once: one exact central word, and
/// per core a cache-padded shard that spends a lease of the central word's tokens locally.
///
/// * **Exact.** In any window Δ the total admitted never exceeds `burst + rate·Δ`, whatever the
///   interleaving and however stale the clock readings.
/// * **Local while there is plenty.** A thread spends from its shard's lease with one CAS on the
///   shard's own line. A spent lease is replaced in the CAS that decides on the central word:
///   up to `1 / (8 × shards)` of what the word holds (at most 65,536 tokens), at least what the
///   rate earns in 250 ns.
/// * **Local near the limit.** Where the word holds too little for that, a shard takes a *near*
///   lease of the next units, earned or not (one token, doubling while spent to the last, at
///   most 64, 16 µs of rate and `burst / (8 × shards)`). Its threads pay them out as the clock
///   earns them and refuse from the shard's line in between: the central word is written once
///   per near lease, mostly by the admission that spends the last one to its top. A refusal's
///   wait is this shard's next token: exact for a shard alone, otherwise later than the pooled
///   wait by at most what other shards' near leases hold (a one-token wait answered from the
///   shard's line may be early: [`try_acquire`](ShardedBucket::try_acquire)).
///   Below 62,500 tokens a second no near lease is taken (every decision near the limit is the
///   central CAS, as a [`Bucket`](crate::Bucket)'s).
/// * **Drained for a while.** A bucket found dry for 1 ms or more, once no lease can pay a
///   token before then, records when it holds one again on a read-mostly line: one-token
///   requests are refused from that line alone until then.
/// * **What leases cost.** Leased tokens serve only their shard's threads. Tokens the clock
///   passes before they are spent lapse, and a replaced lease loses its fraction of a token
///   ([`stranded_tokens`](ShardedBucket::stranded_tokens)): capacity lost, never a token made.
/// * **A shard per CPU.** On Linux a thread decides on its CPU's shard (CPUs numbered in the
///   order the process first sees them, modulo the shard count; `sched_getcpu` asked once every
///   1,023 decisions that go past a refusal from the shard's line), so a shard's line is
///   written from one core however many threads run.
///   Elsewhere and under loom the shard is the thread's slot modulo the count. Any thread may
///   use any shard: a migrated thread costs line transfers, never correctness.
///
/// The protocol, its proof and its measurements: `docs/sharded.md`.
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
    /// Read by every decision, written only by a `dry_all` publication: apart from the central
    /// word's line.
    read_mostly: CachePadded<ReadMostly<C>>,
}

/// The parts of a [`ShardedBucket`] that decisions read: never written, but for `dry_all`.
struct ReadMostly<C> {
    quota: Quota,
    clock: C,
    /// [`central::spread_units`]: below it beyond a decision's cost, no lease is taken.
    spread: u64,
    /// Maps a thread's CPU number to its shard without a division.
    shard_of: ShardOf,
    /// [`central::near_cap`]: the most tokens a near lease takes (0: none are taken).
    near_cap: u64,
    /// [`central::near_room`]: the most units the central word stands beyond the limit.
    room: u64,
    /// [`central::lease_min`] in units.
    near_min: u64,
    /// The burst less one token, in units (`burst ≥ 1`: no underflow): `⌊earned⌋` plus this
    /// is the last frontier after a spend that leaves the lease's next token earned
    /// ([`Lease::spend_fast`]).
    burst_less_one: u64,
    /// An instant before which no one-token decision can be admitted anywhere in the bucket
    /// ([`publish_dry_all`](ShardedBucket::publish_dry_all)); 0: none known; `u64::MAX` with
    /// one shard (sent to its own path by the same test). Written for dry spells of at least
    /// [`central::DRY_ALL_NS`] only, so the line stays shared. `Relaxed`.
    dry_all: AtomicU64,
}

/// A number modulo the shard count `n` (at most [`MAX_SHARDS`]) by Lemire's multiply-and-shift
/// reduction, `((m · x mod 2^64) · n) >> 64` with `m = ⌈2^64 / n⌉`: exact for every `x` below
/// 2^32, two multiplies where `%` would be a 64-bit division on every decision.
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
        // A shard per CPU by default: most numbers are their own shard.
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
    /// (`std::thread::available_parallelism`, read once per process).
    ///
    /// ```
    /// let bucket = tollgate::ShardedBucket::new(tollgate::Quota::per_second(100).unwrap());
    /// assert_eq!(bucket.try_acquire(100), Ok(()));
    /// ```
    pub fn new(quota: Quota) -> ShardedBucket<DefaultClock> {
        ShardedBucket::with_clock(quota, shards_per_core(), DefaultClock::default())
    }

    /// The shard count [`ShardedBucket::new`] asks for: one per core
    /// (`std::thread::available_parallelism`, read once per process, 1 when unknown).
    ///
    /// ```
    /// assert!(tollgate::ShardedBucket::default_shards() >= 1);
    /// ```
    pub fn default_shards() -> usize {
        shards_per_core()
    }
}

/// One shard per core: the crate's one default for how many ways to split shared state.
/// Read once per process: on Linux `available_parallelism` reads the cgroup's files at each
/// call, a cost every keyed table's and sharded bucket's build would otherwise pay.
pub(crate) fn shards_per_core() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl<C: Clock> ShardedBucket<C> {
    /// A full sharded bucket with `shards` shards on `clock`.
    ///
    /// The number actually used ([`ShardedBucket::shards`]) is `shards` clamped to 1..=1024 and
    /// to the burst. One shard takes no leases: it decides as a [`Bucket`](crate::Bucket) does
    /// (the same decision, one CAS on one word, no CPU lookup), and nothing lapses. On Linux
    /// shards beyond the CPUs the process runs on stay unused: more shards than CPUs buy
    /// nothing but smaller leases.
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
            shards: (0..n).map(|i| CachePadded::new(Lease::at(i))).collect(),
            read_mostly: CachePadded::new(ReadMostly {
                spread: central::spread_units(quota.scale(), n as u64, central::lease_min(&quota)),
                shard_of: ShardOf::new(n),
                near_cap: central::near_cap(&quota, n as u64),
                room: central::near_room(&quota, n as u64, central::near_cap(&quota, n as u64)),
                near_min: central::lease_min(&quota).saturating_mul(quota.scale()),
                burst_less_one: quota.burst_units() - quota.scale(),
                dry_all: AtomicU64::new(if n < 2 { u64::MAX } else { 0 }),
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
    /// the central word (with a new lease for the shard).
    ///
    /// `Err(RetryAfter(d))`: the smallest wait after which this thread's shard can pay `cost`
    /// (from its lease, the word, or both) if nothing else consumes, up to one unit's time more
    /// for quotas that are not [exact](Quota::is_exact); exact with one shard active, else later
    /// than the pooled wait by at most what other shards' near leases hold (`docs/sharded.md`).
    /// A one-token refusal answered from the shard's own line names the instant an earlier
    /// decision found, which may be early: by less than one token's time where another shard
    /// has since paid a token with its lease's last fraction and the word's, and at a reading
    /// behind the latest decision's. Never late; a retry at an early wait is refused with the
    /// rest (`docs/guarantees.md`). One shard decides on the word alone: a `Bucket`'s waits.
    /// `Err(ExceedsBurst)`: `cost` above the burst. Cost 0 is always admitted.
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
        // The common cost, on a copy of the path with it constant (no edge to test, no
        // multiply; a refusal from the shard's line needs it): the burst is at least 1.
        if cost == 1 {
            return self.acquire_on(self.read_mostly.clock.now(), 1, || self.home());
        }
        // Both edges in one test: `cost - 1` wraps for 0, and the burst is at least 1.
        if cost.wrapping_sub(1) >= self.read_mostly.quota.burst() {
            return if cost == 0 {
                Ok(())
            } else {
                Err(Denied::ExceedsBurst)
            };
        }
        self.acquire_on(self.read_mostly.clock.now(), cost, || self.home())
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), also returning the bucket at the decision's
    /// reading: the whole tokens the word and every lease hold after it, and the time until the
    /// word is full. Read after the decision, so it may include other threads' decisions.
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

    /// The decision at reading `now` on shard `shard` (modulo the shard count), edge costs
    /// included: [`try_acquire`](ShardedBucket::try_acquire)'s path with the shard chosen, for
    /// the fuzz targets (a fuzzer cannot choose the CPU a thread runs on). Exists only when
    /// built with `--cfg fuzzing` (as `cargo fuzz` builds every crate); not part of the API.
    #[cfg(fuzzing)]
    #[doc(hidden)]
    pub fn fuzz_acquire_on_shard(&self, shard: usize, now: u64, cost: u64) -> Result<(), Denied> {
        let lease = &self.shards[shard % self.shards.len()];
        self.decide_on(now, cost, || (lease, None))
    }

    /// Capacity lost so far in tokens (fractions included): what a lease held when replaced
    /// with less than a token, what lapsed in a near lease replaced or a lease emptied by a
    /// `dry_all` publication, and what a [`drain`](ShardedBucket::drain) or a restore emptied.
    /// Zero with one shard, or on a frozen clock with neither; a diagnostic, not a bound.
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
        let scaled = self.read_mostly.quota.scaled();
        match scaled.exact_earned(now) {
            Some(e) => Earned { floor: e, ceil: e },
            None => earned_inexact(scaled, now),
        }
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
        home: impl FnOnce() -> (&'a Lease, Option<Tick>),
    ) -> Result<(), Denied> {
        if cost == 0 {
            Ok(())
        } else if cost > self.read_mostly.quota.burst() {
            Err(Denied::ExceedsBurst)
        } else {
            self.acquire_on(now, cost, home)
        }
    }

    /// The decision at `now` for `0 < cost <= burst` on the shard `home` gives (the thread's
    /// [`home`](Self::home), called only where needed; a chosen one in tests): the lease, else
    /// the central word. The paths that need neither the word nor another shard are inlined
    /// into the caller; the rest is out of line, so that they save no registers for it.
    #[inline(always)]
    fn acquire_on<'a>(
        &'a self,
        now: u64,
        cost: u64,
        home: impl FnOnce() -> (&'a Lease, Option<Tick>),
    ) -> Result<(), Denied> {
        // One test for two rare cases: one shard (`dry_all` is `u64::MAX` there), or the
        // whole bucket dry for a while yet, as an earlier decision found it (a one-token
        // decision is refused without finding its shard). A load of the line read above.
        let dry = self.read_mostly.dry_all.load(Ordering::Relaxed);
        if now < dry {
            if self.shards.len() < 2 {
                return self.acquire_alone(now, cost);
            }
            if cost == 1 {
                return Err(Denied::RetryAfter(central::wait_until(dry, now)));
            }
        }
        let (lease, tick) = home();
        // No token for this shard before `dry`, whatever happened since (from its lease or the
        // word: [`Lease::dry_until`]): no need to read either.
        let dry = lease.dry_until();
        if cost == 1 && now < dry {
            return Err(Denied::RetryAfter(central::wait_until(dry, now)));
        }
        // Only the decisions that go on count towards the next look at the CPU: a refusal
        // above stores nothing. (A chosen shard, in the tests, counts nothing.)
        if let Some(tick) = tick {
            tick.tick();
        }
        let (q, h) = lease.read();
        if q < h {
            let scaled = self.read_mostly.quota.scaled();
            let e = self.earned(now);
            let one = scaled.scale();
            // `limit − one`: `e.floor + burst_units − one`, from the stored difference.
            let limit_less_one = e.floor + self.read_mostly.burst_less_one;
            match lease.spend_fast((q, h), e.ceil, limit_less_one, one, cost * one) {
                Fast::Spent { next, unearned } => {
                    self.spent(now, e, lease, (next, h), unearned);
                    return Ok(());
                }
                // Lapsed: as an empty lease, below.
                Fast::Empty => {}
                Fast::NotYet(need) => {
                    let at = scaled.instant_of(need - scaled.burst_units());
                    // The lease's first unit, not yet earned: this shard's next token (the
                    // word's units lie above the lease's), so its next one-token refusals read
                    // only `dry_until`.
                    if cost == 1 {
                        lease.publish_dry(at);
                    }
                    return Err(Denied::RetryAfter(central::wait_until(at, now)));
                }
                Fast::Slow => return self.acquire_slow(now, e, cost, lease),
            }
        } else if q == lease::LOCKED {
            return self.acquire_slow(now, self.earned(now), cost, lease);
        }
        self.acquire_central(now, cost, lease)
    }

    /// After an admission at `now` that raised `lease`'s frontier to `next` (`top`: the
    /// lease's end as read with the frontier it raised); `unearned`: the lease's next token is
    /// not earned at the reading (`next + one > ⌊earned⌋ + burst`). The fast path and the
    /// general one alike, so that a spend after a lost CAS leaves the shard as a first try
    /// would.
    #[inline(always)]
    fn spent(&self, now: u64, e: Earned, lease: &Lease, (next, top): (u64, u64), unearned: bool) {
        let rm = &*self.read_mostly;
        // The lease's next token is not yet earned (an advance paid out as the clock earns
        // it): recorded now, so that this shard's one-token refusals until then read only
        // `dry_until`. The word's units lie above the lease's, so no token comes to this shard
        // sooner from anywhere. `next + one − burst_units`, as `next − (burst_units − one)`:
        // positive, since `next + one > limit >= burst_units`.
        if unearned {
            lease.publish_dry(rm.quota.scaled().instant_of(next - rm.burst_less_one));
        }
        // Spent to its top near the limit — its next token unearned, or earned (its threads
        // came back behind the clock) with the word unable to pay it (`word + one > limit`):
        // this admission takes the shard's next near lease, so that no refusal of its shard
        // has to. A word that can pay is left to the next decision, an admission.
        if next == top
            && rm.near_cap > 0
            && (unearned || self.central.load() > e.floor + rm.burst_less_one)
        {
            self.refill(now, e, lease, next);
        }
    }

    /// [`acquire_on`](Self::acquire_on) with one shard: the central word decides alone, by
    /// [`gcra::try_acquire_scaled`] (the decision a [`Bucket`](crate::Bucket) applies to its
    /// word) and one CAS, inlined; a lost CAS in [`retry_alone`](Self::retry_alone). So its
    /// verdicts and waits are a `Bucket`'s at every reading, stale ones included: it holds no
    /// lease and records no `dry_until` (an instant recorded before a later admission would
    /// name too early a wait at such a reading). It finds no shard (no CPU lookup) and counts
    /// nothing for the harness: one shard writes only what a `Bucket` writes.
    #[inline(always)]
    fn acquire_alone(&self, now: u64, cost: u64) -> Result<(), Denied> {
        let scaled = self.read_mostly.quota.scaled();
        let s = self.central.load();
        match gcra::try_acquire_scaled(s, now, scaled, cost)? {
            Some(next) => match self.central.debit(s, next) {
                Ok(()) => Ok(()),
                Err(actual) => self.retry_alone(actual, now, cost),
            },
            None => Ok(()),
        }
    }

    /// [`acquire_alone`](Self::acquire_alone) after a lost CAS, from the word `s` that won it,
    /// at the same reading: the decision again on each newer word, with a spin after every
    /// further loss ([`Backoff::spin`], as `Bucket`'s loop).
    #[cold]
    #[inline(never)]
    fn retry_alone(&self, mut s: u64, now: u64, cost: u64) -> Result<(), Denied> {
        let scaled = self.read_mostly.quota.scaled();
        let mut backoff = Backoff::default();
        loop {
            let Some(next) = gcra::try_acquire_scaled(s, now, scaled, cost)? else {
                return Ok(());
            };
            match self.central.debit(s, next) {
                Ok(()) => return Ok(()),
                Err(actual) => {
                    s = actual;
                    backoff.spin();
                }
            }
        }
    }

    /// [`acquire_on`](Self::acquire_on) where the shard's lease (`home`, with the frontier `q`
    /// and top `h` read) holds nothing: one CAS on the central word that takes no lease, or a
    /// refusal; the rest in [`acquire_slow`](Self::acquire_slow). Scalars only, so that every
    /// argument travels in a register.
    #[inline(never)]
    fn acquire_central(&self, now: u64, cost: u64, home: &Lease) -> Result<(), Denied> {
        let earned = self.earned(now);
        let rm = &*self.read_mostly;
        // Near leases are taken in `Central::decide` (a lock of the lease, then the CAS).
        if rm.near_cap > 0 {
            return self.acquire_slow(now, earned, cost, home);
        }
        let scaled = rm.quota.scaled();
        // One shard comes here only at a reading of `u64::MAX` (not before its `dry_all`):
        // a `Bucket` still, nothing to count for the harness's scaling columns.
        let count = self.shards.len() > 1;
        match self.central.decide_fast(
            scaled,
            earned,
            cost * scaled.scale(),
            rm.spread,
            home,
            now,
            count,
        ) {
            Some((verdict, dry)) => {
                self.note_dry(now, earned, dry);
                if count {
                    counters::settle(verdict.is_ok());
                }
                verdict
            }
            None => self.acquire_slow(now, earned, cost, home),
        }
    }

    /// After a central decision that found or left the word dry until `dry` (as
    /// [`central::Decided`]: from a state this thread read or wrote) ahead of the reading,
    /// tries to publish the whole bucket's dry instant if the spell lasts at least
    /// [`DRY_ALL_NS`](central::DRY_ALL_NS).
    #[inline(always)]
    fn note_dry(&self, now: u64, earned: Earned, dry: u64) {
        // One shard keeps `dry_all` at `u64::MAX`.
        if dry > now && dry - now >= central::DRY_ALL_NS && self.shards.len() > 1 {
            self.publish_dry_all(earned, dry);
        }
    }

    /// Publishes `dry_all` (two shards or more, a spell long enough: [`note_dry`](Self::note_dry)):
    /// `at`, the instant before which the central word, in the state this thread's decision
    /// read or wrote, holds less than one token — if later than the one published and no lease
    /// can pay a token before it: every lease found spent for good by a scan
    /// ([`Lease::spent_for_good`]) with no hand-out since (the count, read after an `Acquire`
    /// fence: [`hand_outs_after_read`](central::Central::hand_outs_after_read)); leases taken
    /// from later states lie above the state read. The argument in full: `docs/sharded.md`.
    /// A concurrent publication may store an earlier instant over a later one: still true.
    #[cold]
    #[inline(never)]
    fn publish_dry_all(&self, earned: Earned, at: u64) {
        let rm = &self.read_mostly;
        if at <= rm.dry_all.load(Ordering::Relaxed) {
            return;
        }
        let hand_outs = self.central.hand_outs_after_read();
        if !self.central.is_clean(hand_outs) {
            if !self.leases_spent(earned.ceil) {
                return;
            }
            self.central.set_clean(hand_outs);
        }
        counters::shared_write();
        rm.dry_all.store(at, Ordering::Relaxed);
    }

    /// Whether every lease is spent for good at a reading with `ceil` units earned
    /// ([`Lease::spent_for_good`]; lapsed ones are emptied): one line per shard, the lease that
    /// stopped the last scan first ([`Central::blocker`](central::Central::blocker)), so that
    /// while it holds units an attempt reads one line, not one per shard.
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

    /// After an admission that spent the shard's lease to `top` near the limit: the shard's
    /// next near lease ([`Central::decide`] at cost 0), so that no refusal of the shard takes
    /// it. Nothing if the lease changed meanwhile or no near lease may be taken now (its first
    /// unit too close to the units earned, or beyond the room); a `dry_until` from the word
    /// if the word is dry and the lease unchanged.
    #[cold]
    #[inline(never)]
    fn refill(&self, now: u64, earned: Earned, lease: &Lease, top: u64) {
        // A shard refused while it waited gets the next units first: its refusal named the
        // instant they are earned.
        self.hand_off(now, earned, lease);
        self.replace(now, earned, lease, (top, top, 0));
        // Its writes belong to the admission that triggered it.
        counters::settle(true);
    }

    /// A replacement of `lease`, `[frontier, top)` holding `units` as read, at cost 0
    /// ([`Central::decide`]): a refill's or a hand-off's.
    fn replace(
        &self,
        now: u64,
        earned: Earned,
        lease: &Lease,
        (frontier, top, units): (u64, u64, u64),
    ) {
        let rm = &*self.read_mostly;
        let ask = Ask {
            scaled: rm.quota.scaled(),
            now,
            earned,
            cost: 0,
            shards: self.shards.len() as u64,
            spread: rm.spread,
            near_cap: rm.near_cap,
            room: rm.room,
            near_min: rm.near_min,
            clock: &|| rm.clock.now(),
            lease: (
                lease,
                lease::Short::Holds {
                    frontier,
                    top,
                    units,
                },
            ),
        };
        let _ = self.central.decide(&ask);
    }

    /// At a refill of `lease` (near the limit, so two shards or more): one other shard in turn
    /// ([`Lease::next_peer`]) gets its next near lease from this refill if it is waiting for
    /// one ([`Lease::waiting`]: a one-token refusal found its lease empty and the word dry and
    /// took no advance), was refused within [`HAND_OFF_NS`](central::HAND_OFF_NS) (its
    /// `dry_until` is that recent) and its lease holds less than a token: a shard whose chain
    /// of near leases broke gets back in line without a write of its own to the central word.
    /// The same replacement as the shard's own refill ([`Central::decide`] at cost 0), from
    /// another thread (any thread may replace any shard's lease); nothing if that lease changed
    /// meanwhile.
    #[cold]
    #[inline(never)]
    fn hand_off(&self, now: u64, earned: Earned, lease: &Lease) {
        let rm = &*self.read_mostly;
        let peer = &self.shards[lease.next_peer(self.shards.len())];
        let (q, h) = peer.read();
        let units = h.saturating_sub(q.max(earned.ceil));
        if q == lease::LOCKED
            || units >= rm.quota.scale()
            || !peer.waiting()
            || peer.dry_until() <= now.saturating_sub(central::HAND_OFF_NS)
        {
            return;
        }
        // The lock of another shard's line, if the replacement gets that far.
        counters::shared_write();
        self.replace(now, earned, peer, (q, h, units));
    }

    /// [`acquire_on`](Self::acquire_on) in general: every case, retried until decided.
    #[inline(never)]
    fn acquire_slow(
        &self,
        now: u64,
        earned: Earned,
        cost: u64,
        home: &Lease,
    ) -> Result<(), Denied> {
        let scaled = self.read_mostly.quota.scaled();
        // A waiting shard's lease found locked: most likely another shard's refill handing it
        // its next near lease (`hand_off`), running on another core. A few short spins for
        // the install, then the central word as for any locked lease (its holder may be off
        // its core).
        let mut handed = Backoff::default();
        let mut spins = if home.waiting() { HAND_OFF_SPINS } else { 0 };
        loop {
            let lease = match home.spend(earned, scaled.burst_units(), cost * scaled.scale()) {
                Ok((next, top)) => {
                    let unearned = next > earned.floor + self.read_mostly.burst_less_one;
                    self.spent(now, earned, home, (next, top), unearned);
                    // Writes of an attempt that came back with `Retry` are this admission's.
                    counters::settle(true);
                    return Ok(());
                }
                Err(lease::Short::Locked) if spins > 0 => {
                    spins -= 1;
                    handed.spin();
                    continue;
                }
                Err(short) => (home, short),
            };
            let ask = Ask {
                scaled,
                now,
                earned,
                cost,
                shards: self.shards.len() as u64,
                spread: self.read_mostly.spread,
                near_cap: self.read_mostly.near_cap,
                room: self.read_mostly.room,
                near_min: self.read_mostly.near_min,
                clock: &|| self.read_mostly.clock.now(),
                lease,
            };
            match self.central.decide(&ask) {
                Outcome::Admitted => {
                    counters::settle(true);
                    return Ok(());
                }
                Outcome::Refused(denied, dry) => {
                    self.note_dry(now, earned, dry);
                    counters::settle(false);
                    return Err(denied);
                }
                Outcome::Retry => {}
            }
        }
    }

    /// The calling thread's shard: its CPU's ([`cpu_home`]) modulo the shard count (with one
    /// shard, always the one), and the [`Tick`] that counts this use of the CPU number (ticked
    /// by a decision that goes past a refusal from `dry_until`).
    #[inline(always)]
    fn home(&self) -> (&Lease, Option<Tick>) {
        let (x, tick) = cpu_home();
        // Tested against the slice's own length (the count `shard_of` reduces by): a number
        // below it indexes without a bounds check. A shard per CPU by default, so this is the
        // common case; the rest is reduced.
        let shards = &*self.shards;
        if x < shards.len() {
            return (&shards[x], Some(tick));
        }
        (&shards[self.read_mostly.shard_of.of(x)], Some(tick))
    }

    // ---- the narrow interface that saving, restoring and draining use (`persist.rs`,
    // `limiter.rs`) ----

    /// The units the whole bucket holds at `now` (the central word's: tokens leased to shards
    /// count as spent), the scale of that unit (units per token), and the most it holds (the
    /// burst, in that unit).
    #[cfg(feature = "persist")]
    pub(crate) fn held_units(&self, now: u64) -> (u128, u64, u128) {
        let (held, _, scale, burst) = self.held_and_owed(now);
        (held, scale, burst)
    }

    /// [`held_units`](Self::held_units), with the units the central word stands beyond empty
    /// at `now` as well (the second value; then the first is 0): near leases taken ahead of
    /// the clock, or a reading behind the word's latest decision. From one load of the word.
    #[cfg(feature = "persist")]
    pub(crate) fn held_and_owed(&self, now: u64) -> (u128, u128, u64, u128) {
        let q = &self.read_mostly.quota;
        let state = self.central.load();
        let held = gcra::available_units(state, now, q);
        let owed = state.saturating_sub(q.earned_floor(now).saturating_add(q.burst_units()));
        (
            u128::from(held),
            u128::from(owed),
            q.scale(),
            u128::from(q.burst_units()),
        )
    }

    /// Raises the central word to stand `owed` units (of `held_units`) beyond empty at `now`:
    /// a debt carried by a restore; capped at the largest state.
    #[cfg(feature = "persist")]
    pub(crate) fn owe(&self, now: u64, owed: u128) {
        let q = &self.read_mostly.quota;
        let owed = u64::try_from(owed).unwrap_or(u64::MAX);
        let floor = q
            .earned_ceil(now)
            .saturating_add(q.burst_units())
            .saturating_add(owed)
            .min(crate::quota::MAX_UNITS);
        self.central.raise(floor);
    }

    /// Empties every shard's lease (a restore or a drain: a lease this bucket holds would pay
    /// tokens beyond the total the central word was lowered to). Call after lowering the
    /// central word: a lease installed from the word before that is waited for and emptied,
    /// one taken after holds only what the lowered word handed out.
    pub(crate) fn empty_leases(&self) {
        // A lease taken from the word before the lowering: its shard locked, then its
        // `Release` CAS of the word, which the lowering (an RMW) read or followed in the word's
        // modification order. This fence makes that lock happen before the loads below, so they
        // find the lease locked or installed, never as it was before.
        crate::sync::fence(Ordering::Acquire);
        for lease in self.shards.iter() {
            lease.empty();
        }
    }

    /// Lowers what the central word holds at `now` to at most `max` units (of
    /// `held_units`): raises its state to the one holding `max`
    /// then (rounded toward fewer), never lowers it, so it only ever removes tokens.
    pub(crate) fn limit_held(&self, now: u64, max: u128) {
        let q = &self.read_mostly.quota;
        let max = u64::try_from(max).map_or(q.burst_units(), |m| m.min(q.burst_units()));
        self.central
            .raise(q.earned_ceil(now) + (q.burst_units() - max));
    }
}

#[cfg(test)]
mod tests {
    use super::{central, ShardOf, ShardedBucket, MAX_SHARDS};
    use crate::clock::ManualClock;
    use crate::error::Denied;
    use crate::quota::Quota;
    use crate::sync::Ordering;
    use core::time::Duration;

    const MS: u64 = 1_000_000;

    fn wait_us(n: u64) -> Result<(), Denied> {
        Err(Denied::RetryAfter(Duration::from_micros(n)))
    }

    fn wait_ms(n: u64) -> Result<(), Denied> {
        Err(Denied::RetryAfter(Duration::from_millis(n)))
    }

    fn dry_all(bucket: &ShardedBucket<ManualClock>) -> u64 {
        bucket.read_mostly.dry_all.load(Ordering::Relaxed)
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
        assert_eq!(bucket.try_acquire(1), wait_ms(60));
        assert_eq!(bucket.try_acquire(2), wait_ms(160));
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
        assert_eq!(one.try_acquire(1), wait_ms(100));
    }

    /// One shard after a lost CAS decides again, at the same reading, on the word that won it:
    /// admitted where that word pays the cost, else refused with its wait, as `Bucket`'s loop.
    #[test]
    fn one_shard_decides_again_on_the_word_that_won_its_cas() {
        let quota = Quota::per_second(10).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 1, ManualClock::new());
        let full = bucket.central.load();
        assert_eq!(bucket.try_acquire(4), Ok(()));
        // Threads that read the full word, on which their decisions admit, and lost the CAS.
        assert_eq!(bucket.retry_alone(full, 0, 4), Ok(()));
        assert_eq!(bucket.available(), 2);
        assert_eq!(bucket.retry_alone(full, 0, 7), wait_ms(500));
        assert_eq!(bucket.available(), 2);
        assert_eq!(dry_all(&bucket), u64::MAX);
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
        assert_eq!(bucket.acquire_central(0, 1, other), Ok(()));
        let (q, h) = other.read();
        assert_eq!(h - q, 6 * quota.scale());
        // This shard drains the word (93 tokens): dry for 10 ms, but the lease holds 6.
        assert_eq!(bucket.acquire_central(0, 93, mine), Ok(()));
        assert!(mine.dry_until() >= 10 * MS);
        assert_eq!(dry_all(&bucket), 0);
        assert!(bucket.acquire_central(0, 1, mine).is_err());
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
        assert!(bucket.acquire_central(0, 1, mine).is_err());
        assert_eq!(dry_all(&bucket), 10 * MS);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// After a publication that found every lease empty, the next skips its scan while no
    /// lease was handed out; a lease handed out to another shard changes the count: the next
    /// publication scans, finds the lease holding tokens, and does not publish; once it is
    /// spent, the next one does.
    #[test]
    fn a_lease_handed_out_since_the_last_scan_is_scanned_for() {
        let quota = Quota::new(100, Duration::from_secs(1), 1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        let token = 10 * MS;
        assert_eq!(bucket.acquire_central(0, 1_000, mine), Ok(()));
        assert_eq!(dry_all(&bucket), token, "published after a scan");
        // 60 tokens later the other shard takes 1 and a lease of ⌊59 / 16⌋ = 3.
        let now = 60 * token;
        assert_eq!(bucket.acquire_central(now, 1, other), Ok(()));
        let (q, h) = other.read();
        assert_eq!(h - q, 3 * quota.scale());
        // This shard drains the word: dry for a token's time, but not published.
        assert_eq!(bucket.acquire_central(now, 56, mine), Ok(()));
        assert!(mine.dry_until() > now);
        assert_eq!(dry_all(&bucket), token, "not published over a lease of 3");
        let e = bucket.earned(now);
        for _ in 0..3 {
            assert_eq!(bucket.acquire_slow(now, e, 1, other), Ok(()));
        }
        assert!(bucket.acquire_central(now, 1, mine).is_err());
        assert_eq!(dry_all(&bucket), now + token, "the lease spent");
    }

    /// A shard's near leases double while its threads spend them to their top, and halve
    /// after one lapsed — also when a publication's scan emptied it (emptied, it looks spent to
    /// its top, and would double).
    #[test]
    fn near_leases_double_when_spent_and_halve_when_lapsed() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        assert_eq!(bucket.read_mostly.near_cap, 16, "16 µs of rate");
        let other = &bucket.shards[1];
        let us = 1_000; // a token
        let size = || other.read().1 - other.read().0;
        // The other shard drains the word, with a near lease of one token.
        assert_eq!(on(&bucket, 1, 0, 1_000), Ok(()));
        assert_eq!((other.near(), size()), ((1, false), quota.scale()));
        // Its token comes at 1 µs: refused before, from its own line, with the exact wait.
        assert_eq!(on(&bucket, 1, 0, 1), wait_us(1));
        assert_eq!(on(&bucket, 1, us, 1), Ok(()));
        // Spent to its top by that admission, which took the next near lease, twice the
        // size: its first token is not earned before 2 µs (refused from the shard's line).
        assert_eq!((other.near(), size()), ((2, false), 2 * quota.scale()));
        assert_eq!(on(&bucket, 1, us, 1), wait_us(1));
        assert_eq!(on(&bucket, 1, 2 * us, 1), Ok(()));
        assert_eq!(on(&bucket, 1, 3 * us, 1), Ok(()));
        assert_eq!(
            (other.near(), size()),
            ((4, false), 4 * quota.scale()),
            "doubled again"
        );
        // 1,010 µs: those 4 lapsed unspent. The next halves.
        assert_eq!(on(&bucket, 1, 1_010 * us, 1_000), Ok(()));
        assert_eq!(other.near(), (2, false), "halved");
        assert_eq!(bucket.stranded_tokens(), 4.0);
        // A scan that empties a lapsed near lease marks it: the next halves again.
        let t = 3_000 * us;
        let dry = super::central::dry_at(quota.scaled(), bucket.central.load());
        bucket.publish_dry_all(bucket.earned(t), dry);
        assert_eq!(dry_all(&bucket), dry);
        assert_eq!(other.near(), (2, true), "emptied after it lapsed");
        assert_eq!(bucket.stranded_tokens(), 6.0);
        assert_eq!(on(&bucket, 1, t, 1_000), Ok(()));
        assert_eq!(other.near(), (1, false), "halved, not doubled");
    }

    /// The general path (a spend after a lost CAS on the lease, or after finding it locked)
    /// leaves the shard as the fast path does: an admission that spends the near lease to its
    /// top takes the next one and records the shard's dry instant, so that the shard's next
    /// refusals write no shared line.
    #[test]
    fn a_spend_to_the_top_on_the_general_path_takes_the_next_near_lease() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let c = &bucket.shards[1];
        let (us, unit) = (1_000, quota.scale());
        let t0 = 1_000 * MS;
        assert_eq!(
            on(&bucket, 1, t0, 1_000),
            Ok(()),
            "drained, a near lease of one token"
        );
        assert_eq!(c.read().1 - c.read().0, unit);
        let e1 = bucket.earned(t0 + us);
        assert_eq!(bucket.acquire_slow(t0 + us, e1, 1, c), Ok(()));
        let (q, h) = c.read();
        assert_eq!(
            (c.near(), h - q),
            ((2, false), 2 * unit),
            "the next, twice the size"
        );
        assert_eq!(c.dry_until(), t0 + 2 * us, "its first token's instant");
        let word = bucket.central.load();
        assert_eq!(on(&bucket, 1, t0 + us, 1), wait_us(1));
        assert_eq!(bucket.central.load(), word, "refused from the shard's line");
        assert_eq!(on(&bucket, 1, t0 + 2 * us, 1), Ok(()));
    }

    /// Near the limit the admission that spends its shard's near lease to the top takes the
    /// next one: with two shards taking turns, where a shard's next token is often in the
    /// other's lease, no refusal writes the central word, and every token earned is admitted.
    /// Also when the shards take turns in runs of decisions, so that a shard comes back behind
    /// the clock: its lease's units are earned before its threads spend them, and the admission
    /// that spends it to the top finds its next token earned but the word unable to pay it (the
    /// other shard's near leases lie above it); that admission takes the next near lease too.
    #[test]
    fn near_the_limit_refusals_leave_the_central_word_alone() {
        for (rate, step) in [(1_000_000, 250), (10_000_000, 30), (4_000_000, 70)] {
            for run in [1, 9, 40, 300] {
                let quota = Quota::new(rate, Duration::from_secs(1), 1_000).unwrap();
                let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
                let mut t = 1_000 * MS;
                assert_eq!(on(&bucket, 1, t, 1_000), Ok(()), "drained");
                let (mut admitted, mut refused) = (0u64, 0u64);
                for i in 0..20_000 {
                    t += step;
                    let shard = (i / run) % 2;
                    let before = bucket.central.load();
                    let first = bucket.shards[shard].near().0 == 0;
                    match on(&bucket, shard, t, 1) {
                        Ok(()) => admitted += 1,
                        // A shard's first visit near the limit takes its first near lease with
                        // whatever decision it makes.
                        Err(_) if first => {}
                        Err(_) => {
                            refused += 1;
                            assert_eq!(
                                bucket.central.load(),
                                before,
                                "a refusal wrote, {rate}/s, runs of {run}, at {t}"
                            );
                        }
                    }
                }
                // In runs, what the shard out of its turn still holds at the end is in the
                // bucket, not lost.
                let earned = 20_000 * step * rate / 1_000_000_000;
                let held = if run == 1 {
                    0
                } else {
                    bucket.pooled_units(t) / quota.scale()
                };
                assert!(
                    refused > 0 && admitted + held + 1 >= earned && admitted <= earned,
                    "{admitted} + {held} of {earned}, runs of {run}"
                );
            }
        }
    }

    /// A lease that lapsed at the publishing reading is emptied (its units counted as
    /// stranded), so that no older reading can spend it after the publication either.
    #[test]
    fn a_lapsed_lease_is_emptied_for_the_publication() {
        let clock = ManualClock::new();
        let quota = Quota::per_second(100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, clock);
        let (mine, other) = (&bucket.shards[0], &bucket.shards[1]);
        assert_eq!(bucket.acquire_central(0, 1, other), Ok(()));
        // At 80 ms, 8 tokens earned: the lease's units (tokens 1 to 7) lapsed.
        let now = 80 * MS;
        assert_eq!(bucket.acquire_central(now, 100, mine), Ok(()));
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
        bucket.acquire_on(now, cost, || (&bucket.shards[i], None))
    }

    /// A refusal beside a lease that holds less than the cost names the pooled instant also
    /// when that is the instant the units earned reach the lease's first unit: with an exact
    /// quota the reading there holds the lease's units whole, and the pooling admits. 1,000
    /// tokens/s (no near leases), burst 50, two shards: shard 0 keeps one token of a far lease;
    /// shard 1 takes the word to 48 tokens above the lease's top; a cost of 2 on shard 0 is
    /// refused with the wait until the lease's first unit (1 ms), not until the word alone
    /// pays both (2 ms); a retry then is admitted, one nanosecond sooner refused.
    #[test]
    fn a_pooled_wait_at_the_leases_first_unit_is_exact() {
        let quota = Quota::new(1_000, Duration::from_secs(1), 50).unwrap();
        assert!(quota.is_exact());
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let (unit, burst) = (quota.scale(), quota.burst_units());
        assert_eq!(bucket.acquire_central(0, 1, &bucket.shards[0]), Ok(()));
        let (q, h) = bucket.shards[0].read();
        let lease = (h - q) / unit;
        assert!(lease >= 2, "{lease}");
        for _ in 1..lease {
            assert_eq!(on(&bucket, 0, 0, 1), Ok(()));
        }
        let (q, h) = bucket.shards[0].read();
        assert_eq!(h - q, unit);
        // The word to 48 tokens above the lease's top, at the reading whose limit that is.
        let word = h + burst - 2 * unit;
        let t1 = quota.scaled().instant_of(word - burst);
        let take = (word - bucket.central.load()) / unit;
        assert_eq!(on(&bucket, 1, t1, take), Ok(()));
        assert_eq!(bucket.central.load(), word);
        assert_eq!(on(&bucket, 0, t1, 2), wait_ms(1));
        assert!(on(&bucket, 0, t1 + MS - 1, 2).is_err());
        assert_eq!(on(&bucket, 0, t1 + MS, 2), Ok(()));
    }

    /// Near the limit each shard waits for its own near lease: a refusal's wait is the instant
    /// its shard's next token is earned, later than the pooled wait by at most the other
    /// shards' leases, and a retry at it is admitted. A shard's first one-token refusal from a
    /// dry word writes nothing to the word: the other shard's refill hands it its next token.
    #[test]
    fn each_shard_waits_for_its_own_near_lease() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 20).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        assert_eq!(
            bucket.read_mostly.near_cap, 1,
            "an eighth of the burst over 2 shards"
        );
        let t0 = 1_000 * MS;
        // Shard 0 drains the word and takes the next token as a near lease.
        assert_eq!(on(&bucket, 0, t0, 20), Ok(()));
        assert_eq!(on(&bucket, 0, t0, 1), wait_us(1));
        assert_eq!(bucket.shards[0].dry_until(), t0 + 1_000);
        // Shard 1 waits for the token after it, without writing to the word.
        let word = bucket.central.load();
        assert_eq!(on(&bucket, 1, t0, 1), wait_us(2));
        assert_eq!(bucket.central.load(), word);
        assert!(bucket.shards[1].waiting());
        // A cost above its lease: the lease's token pooled with the word's next.
        assert_eq!(on(&bucket, 1, t0, 2), wait_us(3));
        // Shard 0 spends its token: its refill hands shard 1 the next one, then takes its own.
        assert_eq!(on(&bucket, 0, t0 + 1_000, 1), Ok(()));
        assert!(!bucket.shards[1].waiting());
        // Shard 0's `dry_until`, recorded by its spend before the hand-off, names token 21's
        // instant: early by the token handed (a refusal, never an admission); its lease then
        // names token 22's.
        assert_eq!(on(&bucket, 0, t0 + 1_000, 1), wait_us(1));
        assert_eq!(on(&bucket, 0, t0 + 2_000, 1), wait_us(1));
        assert_eq!(
            on(&bucket, 1, t0 + 1_999, 1),
            Err(Denied::RetryAfter(Duration::from_nanos(1)))
        );
        assert_eq!(on(&bucket, 1, t0 + 2_000, 1), Ok(()));
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// No advance for a cost of the whole burst: with an inexact quota its first units would
    /// lapse at the instant the cost becomes payable from them (the earned units, rounded up,
    /// pass them), and the holder retrying at its wait would be refused again. Refused from the
    /// word, every such wait is exact: each retry at it is admitted.
    #[test]
    fn a_cost_of_the_whole_burst_takes_no_advance_and_waits_exactly() {
        let quota = Quota::new(1_000_003, Duration::from_millis(1_001), 97).unwrap();
        assert!(!quota.is_exact());
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let mut t = 1_000 * MS + 123;
        assert_eq!(on(&bucket, 0, t, 97), Ok(()));
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
            // Keep the word drained, with near leases out.
            let _ = on(&bucket, 0, t, 97);
            let _ = on(&bucket, 1, t, 1);
        }
        assert!(retried > 100, "{retried}");
    }

    /// A replacement that read its lease empty and stalled never discards an advance another
    /// thread of its shard installed from the same frontier meanwhile: a lease spent to its top
    /// with the word still there is replaced by an advance that starts at that very unit, so
    /// the frontier comes back to the value the stalled thread read (`q → LOCKED → q`). Its
    /// lock checks the top as well, and it retries.
    #[test]
    fn a_stalled_replacement_never_discards_an_advance() {
        use super::central::{Ask, Outcome};
        use super::lease::Short;
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 100).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let c = &bucket.shards[1];
        let t0 = 1_000 * MS;
        // A near lease of one token with the drain, spent to its top at 1 µs by a spender
        // that stalls before taking the next near lease (the admission's refill: a
        // replacement from the same frontier too, guarded the same way).
        assert_eq!(on(&bucket, 1, t0, 100), Ok(()));
        let e1 = bucket.earned(t0 + 1_000);
        assert!(
            matches!(c.spend(e1, quota.burst_units(), quota.scale()), Ok((n, top)) if n == top),
            "spent to its top"
        );
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
            near_cap: bucket.read_mostly.near_cap,
            room: bucket.read_mostly.room,
            near_min: bucket.read_mostly.near_min,
            clock: &|| tx,
            lease: (c, short),
        };
        assert!(matches!(bucket.central.decide(&ask), Outcome::Retry));
        assert_eq!(c.read(), advance, "the advance is kept");
        // Retried, X spends from it.
        assert_eq!(on(&bucket, 1, tx, 1), Ok(()));
        assert_eq!(c.read(), (q + quota.scale(), advance.1));
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// A decision that read its shard's lease empty, then stalled while another thread of the
    /// shard installed a lease from an earlier state of the word, records no `dry_until` from
    /// the word it reads afterwards: that instant is not true for the new lease, whose tokens
    /// would be refused until it. Both ways such a decision ends: a refusal of one token at
    /// its stale reading, and the next near lease an admission takes (`refill`).
    #[test]
    fn a_stalled_decision_records_no_dry_spell_over_a_lease_installed_meanwhile() {
        use super::central::Ask;
        use super::lease::Short;
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 100).unwrap();
        for refill in [false, true] {
            let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
            let c = &bucket.shards[1];
            let t0 = 1_000 * MS;
            // Drained, its near lease spent to the top at 1 µs by a spender that stalls before
            // its refill: empty.
            assert_eq!(on(&bucket, 1, t0, 100), Ok(()));
            let e1 = bucket.earned(t0 + 1_000);
            assert!(c.spend(e1, quota.burst_units(), quota.scale()).is_ok());
            let (q, h) = c.read();
            assert_eq!(q, h);
            // X read it empty at 1 µs and stalls. Another thread of the shard, at 100 µs,
            // takes 30 tokens and a lease of more.
            assert_eq!(on(&bucket, 1, t0 + 100_000, 30), Ok(()));
            let (q2, h2) = c.read();
            assert!(h2 > q2, "a lease installed");
            let before = c.dry_until();
            // X goes on at its reading of 1 µs, on the word as it is now.
            if refill {
                bucket.refill(t0 + 1_000, e1, c, h);
            } else {
                let ask = Ask {
                    scaled: quota.scaled(),
                    now: t0 + 1_000,
                    earned: e1,
                    cost: 1,
                    shards: 2,
                    spread: bucket.read_mostly.spread,
                    near_cap: bucket.read_mostly.near_cap,
                    room: bucket.read_mostly.room,
                    near_min: bucket.read_mostly.near_min,
                    clock: &|| t0 + 1_000,
                    lease: (
                        c,
                        Short::Holds {
                            frontier: q,
                            top: h,
                            units: 0,
                        },
                    ),
                };
                assert!(matches!(
                    bucket.central.decide(&ask),
                    super::central::Outcome::Refused(..)
                ));
            }
            assert_eq!(c.dry_until(), before, "refill {refill}: nothing recorded");
            // The lease's tokens are payable at 32 µs already, from the shard's own path.
            assert_eq!(on(&bucket, 1, t0 + 32_000, 1), Ok(()), "refill {refill}");
        }
    }

    /// A shard that waited a whole spell with no hand-off takes an advance. 1 M tokens/s, burst
    /// 24, three shards (near leases of one token): shard 0 drains the bucket with a near lease
    /// of token 24; shard 2 is refused for token 25 (2 µs) without writing to the word; at 1 µs
    /// shard 0 spends token 24 and its refill looks at shard 1 (the next in turn, not waiting)
    /// and takes token 25 for itself; at 2 µs shard 2, still waiting and refused 1 µs ago, finds
    /// the word dry again and takes an advance of token 26, admitted at its wait.
    #[test]
    fn a_shard_that_waited_a_whole_spell_takes_an_advance() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 24).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 3, ManualClock::new());
        assert_eq!(bucket.read_mostly.near_cap, 1);
        let t0 = 1_000 * MS;
        assert_eq!(on(&bucket, 0, t0, 24), Ok(()));
        let word = bucket.central.load();
        assert_eq!(on(&bucket, 2, t0, 1), wait_us(2));
        assert_eq!(
            bucket.central.load(),
            word,
            "a first refusal writes nothing"
        );
        assert_eq!(on(&bucket, 0, t0 + 1_000, 1), Ok(()));
        assert!(
            bucket.shards[2].waiting(),
            "shard 0's refill looked at shard 1"
        );
        let word = bucket.central.load();
        assert_eq!(on(&bucket, 2, t0 + 2_000, 1), wait_us(1));
        assert!(bucket.central.load() > word, "an advance");
        assert_eq!(on(&bucket, 0, t0 + 2_000, 1), Ok(()));
        assert_eq!(
            on(&bucket, 2, t0 + 2_999, 1),
            Err(Denied::RetryAfter(Duration::from_nanos(1)))
        );
        assert_eq!(on(&bucket, 2, t0 + 3_000, 1), Ok(()));
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }

    /// A hand-off goes only to a shard refused within `HAND_OFF_NS` whose lease is empty: one
    /// whose threads stopped asking gets none (its lease would lapse unspent), nor one that
    /// holds a lease.
    #[test]
    fn a_hand_off_goes_only_to_a_shard_still_waiting() {
        let quota = Quota::new(1_000_000, Duration::from_secs(1), 1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        let t0 = 1_000 * MS;
        assert_eq!(on(&bucket, 0, t0, 1_000), Ok(()));
        assert!(on(&bucket, 1, t0, 1).is_err());
        let waiting = &bucket.shards[1];
        assert!(waiting.waiting());
        let dry = waiting.dry_until();
        let (q, h) = waiting.read();
        assert!(q >= h, "no lease");
        // Refused more than `HAND_OFF_NS` ago: nothing handed.
        let late = dry + central::HAND_OFF_NS;
        bucket.hand_off(late, bucket.earned(late), &bucket.shards[0]);
        assert_eq!(waiting.read(), (q, h));
        // Refused within it: the next near lease, and the mark cleared.
        let now = t0 + 500;
        bucket.hand_off(now, bucket.earned(now), &bucket.shards[0]);
        let (q2, h2) = waiting.read();
        assert!(q2 < h2, "a lease handed");
        assert!(!waiting.waiting());
        // Holding a lease: nothing more.
        let word = bucket.central.load();
        bucket.hand_off(now, bucket.earned(now), &bucket.shards[0]);
        assert_eq!((bucket.central.load(), waiting.read()), (word, (q2, h2)));
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

    /// A refusal beside a lease whose first unit held is exactly where the pooled payment
    /// needs the units earned (an inexact quota, a far lease lapsing) names, and records in
    /// `dry_until`, a reading whose units earned are whole (or the word's own instant): off the
    /// unit grid the lease lapses as fast as the limit rises and the pooling stays one unit
    /// short, so a one-token refusal from a `dry_until` at the instant the units are earned
    /// would name a wait at which the retry is refused again. 1,280 tokens per 377.957121793 s
    /// (inexact), burst 36, three shards, all on shard 0 (sharded_vs_model's input): a far
    /// lease of one token, 35 tokens from the word, a cost of 36 refused; a cost of 1 is then
    /// refused with a wait at which it is admitted, and not a nanosecond sooner.
    #[test]
    fn a_refusal_beside_a_lapsing_lease_names_a_wait_that_admits() {
        let quota = Quota::new(1_280, Duration::from_nanos(377_957_121_793), 36).unwrap();
        assert!(!quota.is_exact());
        let bucket = ShardedBucket::with_clock(quota, 3, ManualClock::new());
        let (t0, t1) = (110_382_367_637_516, 110_382_948_951_811);
        assert_eq!(on(&bucket, 0, t0, 1), Ok(()));
        assert_eq!(on(&bucket, 0, t1, 35), Ok(()));
        let (q, h) = bucket.shards[0].read();
        assert_eq!(h - q, quota.scale(), "a far lease of one token, lapsing");
        assert!(on(&bucket, 0, t1, 36).is_err());
        let Err(Denied::RetryAfter(d)) = on(&bucket, 0, t1, 1) else {
            panic!("admitted at {t1}");
        };
        let at = t1 + d.as_nanos() as u64;
        assert_eq!(quota.scaled().whole_from(at), at, "{d:?}: a whole reading");
        assert!(on(&bucket, 0, at - 1, 1).is_err());
        assert_eq!(on(&bucket, 0, at, 1), Ok(()), "retried at {d:?}");
    }
}
