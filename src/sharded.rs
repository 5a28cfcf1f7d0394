//! [`ShardedBucket`]: one global quota spread over cache-padded per-core sub-buckets.
//!
//! # Design
//!
//! * **Refusal, common case**: the pool's hints say the shards together hold less than one
//!   token before an instant, and the reading is earlier: a one-token request is refused with
//!   the wait until the later of the two hints after reading that one line — read-mostly,
//!   written only when a value changes, so it stays cached on every core in between. The line
//!   holds two hints: `taken_until`, published by served borrows, and `dry_until`, published
//!   by refusals that read every shard (see *Waits* for why they are apart); a refusal reads
//!   both and waits for the later one (the earlier one would send a reading older than both
//!   back too early). No scan, no search, not even the own shard: fewer instructions than a
//!   single [`Bucket`](crate::Bucket)'s refusal (callgrind, `ManualClock`,
//!   `examples/sharded_callgrind.rs refuse`: 123 per call at 2, 64 and 1,024 shards alike —
//!   both hints read, one of them a 128-bit word —, 143 for a `Bucket` in the same loop).
//! * **Admission**: otherwise one CAS on the calling thread's own shard (its own cache line).
//! * **Borrowing**: otherwise the thread takes partial amounts — fractions of a token included
//!   — from the other shards, starting with the one that last lent to its shard, then what its
//!   own shard has, and stops as soon as the cost is met. No read-only pre-scan: a borrow reads
//!   only as many shards as it needs. A borrow that had to empty every shard (one token spread
//!   over all of them, the steady state of a thread running at or above the rate) then
//!   publishes when the pool will next hold a token, so that the next callers are refused from
//!   the hint instead of finding out by failing. It computes that instant from the words its
//!   own takes left (one from every shard, summed as it goes: no second read of any shard) and
//!   publishes it in `taken_until` with a plain store, no CAS: at one thread every admitted
//!   token is such a borrow, and it costs the two takes' CASes (one per shard holding a
//!   fraction) and no third locked instruction (see *Waits* for why a store is enough). A
//!   served borrow that emptied every other shard without taking from its own reads them all
//!   instead — except with two shards, where it publishes nothing: there the other shard alone
//!   paid, and reading both lines to publish cost more under two-thread overload than the
//!   refusals it saved (the next failed borrow publishes). Every shard has the same rate, so a
//!   borrow computes the units earned at its reading once; two shards (what
//!   [`ShardedBucket::new`] picks on a 2-core host) borrow in straight-line code, in the same
//!   order as the general loop.
//! * **A failed borrow** (the shards could not pay) gives each take back with one CAS **only if
//!   the shard's word is still exactly what the take left**, and otherwise leaves the units
//!   taken (see *Give-backs* below). Then it reads every shard once, computes in closed form
//!   ([`pool`]) the first instant at which the pool holds one token and the first at which it
//!   holds `cost`, publishes the first as the new hint and refuses with the second. The closed
//!   form is one pass when every shard is below full and past empty (a drained pool), else a
//!   sort of the shards' breakpoints and one walk — never a search.
//!
//! # Waits
//!
//! `RetryAfter` is exact for the shard states it was computed from: at that wait the pool holds
//! `cost` if nothing else consumes, one nanosecond earlier it does not. A hint computed at any
//! reading is exact for every reading before it: no shard can admit anything at a reading
//! before `dry_until` (the pool is dry there), so only decisions whose clock reads later than
//! the hint — or a borrow still in flight when the hint was computed — can have changed the
//! states since. A refusal of `cost > 1` while the pool is dry reads every shard to compute its
//! exact wait (O(shards)); only cost-1 refusals are answered by the hint alone.
//!
//! A hint computed from the words a served borrow's takes left is never later than the true
//! one, whatever happened since: after a take's CAS, its shard's word never falls below what
//! the take left (every other write raises it, and a give-back only undoes a take that started
//! from that word or a later one, see *Give-backs*), and a higher word holds fewer units at
//! every reading. So that publication needs neither the `Acquire` load nor the version check
//! that protect hints computed from plain reads, and not even a CAS: any such hint, stored at
//! any time in any order, is true for every reading before it. It goes into a word of its own,
//! `taken_until`, with a plain store (only when it is later than the word's value, which a
//! publisher stalled between its load and its store can step back to its own earlier, still
//! true, hint: callers sent to the slow path early, nothing refused wrongly). A refusal reads
//! both words and refuses before the later one. Not into `dry_until`: a plain store there
//! could write back, bit for bit, a word that a refusal publishing from plain reads loaded
//! before another thread's give-back (a publisher stalled since then with an older word and the
//! same instant), so that refusal's CAS would succeed with a hint that misses the give-back —
//! too late, refusing a token that is there. The stores only ever refuse: no hint admits
//! anything, so neither word bears on the bound, only on exact waits. Checked by the loom
//! models `borrowing_while_the_owner_admits` and
//! `served_borrow_hint_stored_while_another_gives_back` (once the races are over, no hint
//! refuses a token the pool holds) and by
//! `served_borrow_hints_are_exact_for_stale_readings_and_stalled_borrowers` in
//! `tests/sharded.rs` (stale readings, a borrower stalled while another drains the pool).
//!
//! # Give-backs (issue 8, defect 6)
//!
//! Restoring `units − (word − after)⁺` — what the word seems to owe — is unsound: a decision at
//! a later reading may find the shard exactly full (`word == earned(now)`), admit `d` on top of
//! the borrowed units, and the give-back then restores `units − d`: the shard holds more than
//! its burst at that reading. The word cannot tell a debit from a refill cap. The rule here:
//! give back only with `compare_exchange(after, after − units)`. Every other write to a shard
//! only increases its word, and each successful give-back removes exactly the take it follows;
//! so, by induction over give-backs, a word equal to `after` means that nothing since the take
//! is still in it (each later increase was itself a take already given back), and `after −
//! units` is the word the take started from, capped at its reading — a state some decision at
//! that reading could have left. When the word moved, the units stay taken: capacity lost,
//! never a token created. [`ShardedBucket::stranded_tokens`] counts them.
//!
//! A borrow fails only when the shards together cannot pay at its reading: a race between
//! borrowers for the last fraction of a token, a cost above what the pool holds, or a hint
//! published before another thread consumed. A take is stranded only if another thread wrote
//! the same shard between the take and the give-back (a few hundred nanoseconds): never with
//! one thread, never on a frozen clock (a borrow only fails after emptying each shard it took
//! from, and an empty shard refuses everyone at the same reading). Measured with random stalls
//! on the real clock (4 threads, costs 1 to 24, `tests/sharded.rs`): 0 to 1 % of the admitted
//! tokens.
//!
//! # On 64 cores
//!
//! With one shard per core ([`ShardedBucket::new`]), admissions on different cores touch
//! different lines, and a refusal while the pool is dry reads only the shared hint line (its
//! two words). That line is written once per *dry period* (each time the drained pool refills
//! one token): by the borrow that drained it, with a plain store — no locked instruction, but
//! still a write that takes the line from every other core — which costs every core one cache
//! miss on its next refusal. Two borrowers storing at once may leave the earlier of their two
//! hints: both true, the later one's callers find out by failing once. When a dry period ends,
//! every core that calls at that moment may borrow: up to 64 borrows, each reading the shards
//! until it is served — one or two lines when the pool has backlog, all 64 when a single token
//! is spread over them; one is served, the others fail, give back, rescan and publish. So at a
//! low rate (dry periods of microseconds or more against calls every few nanoseconds) refusals
//! cost what a single bucket's do. Near saturation — the rate about equal to what the callers
//! ask — every token is collected from every shard: 64 CASes on 64 lines per token, about 8,580
//! instructions at 64 shards against 370 at 2 and 129 for a `Bucket` (callgrind, one thread
//! exactly at the rate, per call of `examples/sharded_callgrind.rs tight`, its loop included;
//! 10,500 and 510 before the served borrow's hint became a plain store and the units earned
//! were computed once per borrow, 12,300 and 650 before the borrow published from its own
//! takes). A thread in that state falls behind the rate, the pool builds a backlog, and
//! borrows become one CAS on one shard again, so a greedy thread still gets the rate; but near
//! saturation the bucket costs more per call than a single [`Bucket`](crate::Bucket). That is
//! the price of pooling the shards exactly: a token spread over `n` shards needs `n` CASes to
//! collect, where a `Bucket` needs one — at one thread on 2 shards, two CASes per admitted
//! token against one. Callers well above or well below the rate do not pay it. These are
//! derived from the algorithm and from instruction counts, not measured on 64 cores: the
//! machine it was written on has 2.
//!
//! The hint line stays read-only for refusals only where a 128-bit atomic load is a plain
//! load: x86_64 with AVX (a `vmovdqa`, what `portable-atomic` picks at run time) and AArch64
//! with LSE2 (ARMv8.4 and later: Graviton3, Neoverse V1/N2, Apple M1). Elsewhere — x86_64
//! without AVX, AArch64 v8.0–v8.3 such as Graviton2 — `portable-atomic`'s 128-bit load is a
//! `lock cmpxchg16b`, a `CASP` or a load/store-exclusive pair, which writes the line: every
//! refusal then takes it from the other cores, and on many cores refusals contend as
//! admissions on one `Bucket` do. (`dry_until` is 128 bits so that a stalled publisher can
//! never pass an ABA check; see its docs.)

mod pool;

use crate::clock::{Clock, DefaultClock};
use crate::error::Denied;
use crate::gcra;
use crate::quota::{Quota, HORIZON_NS};
use crate::snapshot::Snapshot;
use crate::sync::{thread_slot, AtomicU128, AtomicU64, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use crossbeam_utils::CachePadded;

/// The most shards a [`ShardedBucket`] uses, whatever is asked for.
const MAX_SHARDS: usize = 1024;

/// One sub-bucket: an exact token bucket with its share of the rate and of the burst.
struct Shard {
    /// The [`gcra`] state of this sub-bucket.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..0 | the [`gcra`] state (theoretical arrival time, shifted by one burst) | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full |
    ///
    /// Every access is `Relaxed`: each shard is an independent bucket whose bound (burst +
    /// rate·Δ) follows from the coherence order of this one word; no other memory is published
    /// through it. The global bounds are sums of the per-shard bounds.
    state: AtomicU64,
    /// This shard's quota: rate `tokens / (n × per)`, burst `⌊burst / n⌋` or one more.
    quota: Quota,
    /// Where the next borrow by a thread of this shard starts among the other shards: the last
    /// shard that lent to one (it may have more), so that borrows drain the shards in turn
    /// instead of always the same ones first. Only a starting point: any value is correct.
    /// `Relaxed`, written only by borrowers from this shard (its own line).
    cursor: AtomicU64,
}

/// What the shards know together, on its own cache line: read by every refusal, written only
/// when a value changes.
struct Pool {
    /// The refusal hint.
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 127..64 | publication counter (wraps after 2^64 publications), so that republishing the same instant still fails a stale publisher's CAS | — | any |
    /// | 63..0 | an instant before which the shards together hold less than one token | ns since the clock's origin | `0` = no hint; `INSTANT` = not within the horizon |
    ///
    /// Computed from a read of every shard (by a refusal that found the pool short); true for
    /// every reading before it whatever happens later, because no shard can admit anything at
    /// such a reading and failed borrows republish after giving back. Replaced with a CAS from
    /// the word read before the shards were read, so a hint computed before another thread's
    /// give-back does not overwrite the one that thread publishes after it. Orderings: a
    /// refusal's load is `Relaxed` (it only needs the value); a publisher loads it `Acquire`
    /// and publishes `Release`, so a publisher that reads another's publication also reads the
    /// shard words that one read, its give-backs included (with `Relaxed` it could read the
    /// new word and an old shard and republish the pool as dry: found by the loom model
    /// `borrowing_while_the_owner_admits`).
    ///
    /// 128 bits, because the counter must not come back while a publisher reads the shards: with
    /// the 2-bit counter this word had when it was 64 bits, four republications of the same
    /// instant (a failed borrow gives back and republishes each time) let a publisher stalled
    /// since before the first one succeed with a hint computed while tokens were borrowed out —
    /// too late, and one-token refusals are answered from the hint alone, so nothing would
    /// correct it before its instant (loom model `stale_refusal_republishes_over_four_give_backs`).
    /// A 64-bit counter cannot come back within any stall. The refusal's load is one 128-bit
    /// load (`portable-atomic`; on x86_64 a `vmovdqa` where AVX is present, see `crate::sync`).
    dry_until: AtomicU128,
    /// The hint of served borrows, published from the words their takes left
    /// ([`ShardedBucket::publish_taken`]).
    ///
    /// | bits | meaning | unit | range |
    /// |---|---|---|---|
    /// | 63..0 | an instant before which the shards together hold less than one token | ns since the clock's origin | `0` = no hint; `INSTANT` = not within the horizon |
    ///
    /// Apart from `dry_until` because it needs none of its protocol: such a hint is true for
    /// every reading before it whatever happens later, so it is written with a plain store,
    /// not a compare-and-swap (a locked instruction less per borrow: at one thread, every
    /// admitted token is a borrow), and nothing is published through it. Only moved forward,
    /// except by a publisher stalled between its load and its store, which can step it back
    /// to an earlier hint — still true, so only callers sent to the slow path early. A
    /// refusal reads both words (one line) and refuses before the later one. `Relaxed`.
    taken_until: AtomicU64,
    /// Units taken by failed borrows that could not be given back (the shard's word had moved):
    /// capacity lost to races, for [`ShardedBucket::stranded_tokens`]. `Relaxed`, saturating.
    stranded: AtomicU64,
}

/// A token bucket for one global limit hit by many cores at once: the quota is split exactly over
/// cache-padded sub-buckets (by default one per core), so threads on different cores debit
/// different cache lines.
///
/// * **Exact split.** Shard `i` gets the rate `tokens / (n·per)` (the shard rates sum to the
///   global rate exactly) and the burst `⌊burst/n⌋`, the first `burst mod n` shards one more (the
///   shard bursts sum to the global burst exactly). Each shard is an exact [`gcra`] bucket, so in
///   any window Δ the total admitted never exceeds `burst + rate·Δ`.
/// * **Pooled.** A thread debits its own shard (one CAS). When that shard cannot pay, the thread
///   *borrows*: it takes partial amounts — fractions of a token included — from as many shards
///   as needed, and stops once served; if the shards together cannot pay, it gives its takes
///   back (all or nothing; a take whose shard another thread wrote meanwhile stays taken, see
///   [`stranded_tokens`](ShardedBucket::stranded_tokens)). So one thread alone gets the whole
///   burst and the whole rate, and on a frozen clock exactly `burst` tokens come out in total,
///   whatever the number of threads.
/// * **Cheap refusals.** A borrow that emptied every shard, and a refusal that read every
///   shard, publish when the pool will next hold a token; until then a refusal of one token
///   reads only those hints (one cache line), no shard (see the module's source docs for the
///   design, the waits and 64 cores).
/// * Threads map to shards by their thread slot modulo the shard count: a slot is taken on a
///   thread's first call, the smallest no live thread holds (a slot is reused once its thread
///   exits), so threads started together in a process spread over the shards; no syscall per
///   call. (Slots freed out of order can leave gaps: two live threads may then share a
///   shard while another has none, which costs borrows, never correctness.)
/// * **Refill to full.** When the shard count does not divide the burst, the shards with one token
///   less fill up first and then stop earning, so an emptied bucket is full again after
///   `⌈burst/n⌉·n / rate` instead of `burst / rate` (at most `n / burst` longer). The window bound
///   and the long-run rate are unaffected.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, ManualClock, Quota, ShardedBucket};
/// let clock = ManualClock::new();
/// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, clock.clone());
/// assert_eq!(bucket.try_acquire(8), Ok(())); // the whole burst, borrowed across the 4 shards
/// assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(Duration::from_millis(125))));
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(bucket.available(), 8);
/// ```
///
/// Borrowing is the slow path: it reads shards until served and writes those it takes from. A
/// bucket whose threads keep their own shards supplied (many threads, or costs well below
/// `burst / shards`) rarely borrows; one hot thread on a drained bucket borrows once per token
/// (collecting it from every shard when it is spread over all of them) and is refused from the
/// hint in between.
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
pub struct ShardedBucket<C = DefaultClock> {
    shards: Box<[CachePadded<Shard>]>,
    pool: CachePadded<Pool>,
    quota: Quota,
    clock: C,
}

impl<C: fmt::Debug> fmt::Debug for ShardedBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedBucket")
            .field("quota", &self.quota)
            .field("shards", &self.shards.len())
            .field("clock", &self.clock)
            .finish()
    }
}

/// The shard quotas for `n` shards, or `None` if `n` shards cannot split `quota` exactly with one
/// unit for all (a period times `n` beyond `u64` nanoseconds, or a rate so close to the 63-bit
/// range that the two shard bursts get different units).
fn split(quota: &Quota, n: usize) -> Option<Vec<Quota>> {
    if n <= 1 {
        return Some(alloc::vec![*quota]);
    }
    let n64 = n as u64;
    let per_ns = u64::try_from(quota.per().as_nanos()).ok()?;
    let period = Duration::from_nanos(per_ns.checked_mul(n64)?);
    let (lo, rem) = (quota.burst() / n64, quota.burst() % n64);
    if lo == 0 {
        return None;
    }
    let low = Quota::new(quota.tokens(), period, lo).ok()?;
    let hi = if rem > 0 {
        let hi = Quota::new(quota.tokens(), period, lo + 1).ok()?;
        if hi.scale() != low.scale() {
            return None;
        }
        hi
    } else {
        low
    };
    Some((0..n64).map(|i| if i < rem { hi } else { low }).collect())
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
        ShardedBucket::with_clock(quota, default_shards(), DefaultClock::default())
    }

    /// The shard count [`ShardedBucket::new`] asks for: one per core
    /// (`std::thread::available_parallelism`, 1 when unknown).
    ///
    /// ```
    /// assert!(tollgate::ShardedBucket::default_shards() >= 1);
    /// ```
    pub fn default_shards() -> usize {
        default_shards()
    }
}

/// One shard per core: the crate's one default for how many ways to split shared state.
pub(crate) fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl<C: Clock> ShardedBucket<C> {
    /// A full sharded bucket with `shards` sub-buckets on `clock`.
    ///
    /// The number actually used ([`ShardedBucket::shards`]) is at most `shards`, at most the
    /// burst (every shard needs a burst of at least one token), at most 1024, and at least 1
    /// (`0` is read as 1); it is lowered further only for periods of centuries, where `shards ×
    /// per` would not fit 64-bit nanoseconds.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let q = Quota::per_second(3).unwrap();
    /// assert_eq!(ShardedBucket::with_clock(q, 8, ManualClock::new()).shards(), 3);
    /// assert_eq!(ShardedBucket::with_clock(q, 0, ManualClock::new()).shards(), 1);
    /// ```
    pub fn with_clock(quota: Quota, shards: usize, clock: C) -> ShardedBucket<C> {
        let max = usize::try_from(quota.burst()).unwrap_or(usize::MAX);
        let mut n = shards.clamp(1, MAX_SHARDS).min(max);
        let quotas = loop {
            if let Some(q) = split(&quota, n) {
                break q;
            }
            // n = 1 always splits: the shard quota is the global quota itself.
            n /= 2;
        };
        let shards = quotas
            .into_iter()
            .map(|quota| {
                CachePadded::new(Shard {
                    state: AtomicU64::new(gcra::FULL),
                    quota,
                    cursor: AtomicU64::new(0),
                })
            })
            .collect();
        ShardedBucket {
            shards,
            pool: CachePadded::new(Pool {
                dry_until: AtomicU128::new(0),
                taken_until: AtomicU64::new(0),
                stranded: AtomicU64::new(0),
            }),
            quota,
            clock,
        }
    }

    /// The number of sub-buckets.
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
        self.quota
    }

    /// The bucket's clock.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(1).unwrap(), 1, ManualClock::new());
    /// assert_eq!(bucket.clock().now(), 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Takes `cost` tokens if the shards together hold them now.
    ///
    /// First one CAS on the calling thread's own shard; if that shard cannot pay, the cost is
    /// borrowed from the others (see the type's docs), all or nothing. `Err(RetryAfter(d))`: `d`
    /// is the smallest wait after which the shards together hold `cost` if nothing else consumes
    /// (for quotas that are not [exact](Quota::is_exact) it may be rounded up by one unit's
    /// time), computed from the shards as the last refusal that read them all found them: a
    /// thread whose clock reads later may have consumed since. `Err(ExceedsBurst)`: `cost` is
    /// above the global burst. Cost 0 is always admitted.
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
        if cost == 0 {
            return Ok(());
        }
        if cost > self.quota.burst() {
            return Err(Denied::ExceedsBurst);
        }
        self.acquire_at(self.clock.now(), cost)
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), also returning the pooled bucket at the
    /// decision's clock reading: the whole tokens the shards hold together after it, and the
    /// time until every shard is full. The shards are read once more after the decision (at the
    /// same reading, no second clock read), so under concurrency the snapshot may already
    /// include other threads' decisions.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket, Snapshot};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 2, ManualClock::new());
    /// assert_eq!(bucket.try_acquire_snapshot(2), (Ok(()), Snapshot::new(6, Duration::from_millis(500))));
    /// ```
    pub fn try_acquire_snapshot(&self, cost: u64) -> (Result<(), Denied>, Snapshot) {
        let (now, verdict) = self.decide_now(cost);
        (verdict, self.snapshot_at(now))
    }

    /// [`try_acquire`](ShardedBucket::try_acquire), with the pooled [`Snapshot`] (at the
    /// decision's reading) only on refusal: an admission reads no other shard for it.
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

    /// The pooled bucket at `now` (read-only).
    fn snapshot_at(&self, now: u64) -> Snapshot {
        let mut units = 0u128;
        let mut full_at = now;
        for s in self.shards.iter() {
            let state = s.state.load(Ordering::Relaxed);
            units += u128::from(gcra::available_units(state, now, &s.quota));
            if !gcra::is_full(state, now, &s.quota) {
                full_at = full_at.max(gcra::full_at(state, &s.quota));
            }
        }
        let remaining =
            u64::try_from(units / u128::from(self.shards[0].quota.scale())).unwrap_or(u64::MAX);
        let until_full = match full_at {
            u64::MAX => Duration::MAX,
            at => Duration::from_nanos(at - now),
        };
        Snapshot::new(remaining, until_full)
    }

    /// The clock reading and the decision at it, edge costs included (for the snapshot paths,
    /// which need the reading whatever the cost).
    fn decide_now(&self, cost: u64) -> (u64, Result<(), Denied>) {
        let now = self.clock.now();
        let verdict = if cost == 0 {
            Ok(())
        } else if cost > self.quota.burst() {
            Err(Denied::ExceedsBurst)
        } else {
            self.acquire_at(now, cost)
        };
        (now, verdict)
    }

    /// The decision at `now` for `0 < cost <= burst`.
    #[inline]
    fn acquire_at(&self, now: u64, cost: u64) -> Result<(), Denied> {
        // While the shards together hold less than one token, a refusal reads nothing else:
        // the later of the two hints (one line), both true for every reading before them. The
        // later one, not the first that refuses: a reading older than both (a stale clock, a
        // thread stalled since its reading) must get the wait to the later one, which is when
        // the pool next holds a token as the last publisher found it.
        let taken = self.pool.taken_until.load(Ordering::Relaxed);
        let dry = taken.max(self.pool.dry_until.load(Ordering::Relaxed) as u64);
        if now < dry {
            return if cost == 1 {
                Err(Denied::RetryAfter(wait(now, dry)))
            } else {
                self.refuse_dry(now, cost)
            };
        }
        let home = self.home();
        let shard = &self.shards[home];
        if cost <= shard.quota.burst() {
            let mut state = shard.state.load(Ordering::Relaxed);
            while let Some(next) = gcra::debit(state, now, &shard.quota, cost) {
                match shard.state.compare_exchange_weak(
                    state,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(()),
                    Err(actual) => state = actual,
                }
            }
        }
        self.borrow(home, now, cost, true)
    }

    /// Whole tokens the shards hold together now (fractions pooled across shards).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let clock = ManualClock::new();
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(4).unwrap(), 4, clock.clone());
    /// bucket.try_acquire(4).unwrap();
    /// clock.advance(Duration::from_millis(250)); // each shard has refilled a quarter token
    /// assert_eq!(bucket.available(), 1);
    /// assert_eq!(bucket.try_acquire(1), Ok(()));
    /// ```
    pub fn available(&self) -> u64 {
        let now = self.clock.now();
        let units = self.units_at(now);
        u64::try_from(units / u128::from(self.shards[0].quota.scale())).unwrap_or(u64::MAX)
    }

    /// The calling thread's shard.
    #[inline]
    fn home(&self) -> usize {
        let n = self.shards.len();
        let slot = thread_slot();
        if n.is_power_of_two() {
            slot & (n - 1)
        } else {
            slot % n
        }
    }

    /// Units available in all shards together at `t` (read-only).
    fn units_at(&self, t: u64) -> u128 {
        self.shards
            .iter()
            .map(|s| {
                u128::from(gcra::available_units(
                    s.state.load(Ordering::Relaxed),
                    t,
                    &s.quota,
                ))
            })
            .sum()
    }

    /// Capacity lost so far to failed borrows that could not give back what they took, in
    /// tokens (fractions included). A borrow that cannot be completed returns each partial take
    /// only if no other decision touched that shard in between (anything else could create a
    /// token, see the module's docs); otherwise those units stay taken. Zero for a bucket used
    /// by one thread; under contention, a diagnostic of how much of the rate races cost.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let bucket = ShardedBucket::with_clock(Quota::per_second(8).unwrap(), 4, ManualClock::new());
    /// assert!(bucket.try_acquire(8).is_ok());
    /// assert!(bucket.try_acquire(8).is_err());
    /// assert_eq!(bucket.stranded_tokens(), 0.0);
    /// ```
    pub fn stranded_tokens(&self) -> f64 {
        let units = self.pool.stranded.load(Ordering::Relaxed);
        units as f64 / self.shards[0].quota.scale() as f64
    }

    /// A refusal of `cost > 1` while the pool is dry: the exact wait needs every shard.
    #[cold]
    fn refuse_dry(&self, now: u64, cost: u64) -> Result<(), Denied> {
        self.borrow(self.home(), now, cost, false)
    }

    /// The slow path, when the own shard cannot pay: pool the shards (`take`: the pool is not
    /// known to be dry), else refuse with the exact wait. Out of line, but not `#[cold]`: at
    /// one thread on a drained pool, every admission comes here.
    #[inline(never)]
    fn borrow(&self, home: usize, now: u64, cost: u64, mut take: bool) -> Result<(), Denied> {
        // All shards share one unit (`split` guarantees it). 128 bits: the global burst in the
        // shards' unit can exceed 64 (each shard's burst fits its own range, not their sum).
        let token = self.shards[0].quota.scale();
        let need = u128::from(cost) * u128::from(token);
        // A second round only if the shards, read after a failed borrow, could pay after all
        // (another borrow gave back meanwhile, or the hint was older than a give-back).
        for _ in 0..2 {
            let mut gave_back = false;
            if take {
                match self.take_pooled(home, now, need) {
                    Ok(false) => return Ok(()),
                    Ok(true) => {
                        // Served with the last of some shards but not from words of all of
                        // them: read them all to tell the next callers when the pool holds a
                        // token again, so that they need not find out by failing.
                        self.read_pool(u128::from(token), false);
                        return Ok(());
                    }
                    Err(restored) => gave_back = restored,
                }
            }
            let ready = self.read_pool(need, gave_back);
            // `u64::MAX`: never within the horizon, even for a reading at or past it.
            if ready > now || ready == u64::MAX {
                return Err(Denied::RetryAfter(wait(now, ready)));
            }
            take = true;
        }
        Err(Denied::RetryAfter(Duration::from_nanos(1)))
    }

    /// Takes `need` units from the shards — the others first, from the shard where this
    /// shard's last borrow stopped (the own shard's fraction is left to grow into a whole
    /// token), the own shard last — and stops once served: `Ok(drained)`, `drained` if it
    /// emptied every other shard but left less than a token in the last and could not publish
    /// the hint itself (the pool may be dry now: the caller reads every shard). All or nothing:
    /// on failure every take is given back where that is sound; `Err(true)` if anything was
    /// given back.
    fn take_pooled(&self, home: usize, now: u64, need: u128) -> Result<bool, bool> {
        let n = self.shards.len();
        // Every shard has the same rate and unit (`split`): the units earned are the same.
        let rate = self.shards[0].quota.scaled();
        let (token, earned) = (rate.scale(), rate.earned(now));
        if let (2, Ok(need)) = (n, u64::try_from(need)) {
            if let Some(served) = self.take_pair(home, earned, need) {
                return served;
            }
        }
        let cursor = &self.shards[home].cursor;
        let first = cursor.load(Ordering::Relaxed) as usize;
        let mut j = if first < n { first } else { 0 };
        let mut takes = Takes::default();
        let mut left = need;
        for visited in 1..n {
            if j == home {
                j = if j + 1 == n { 0 } else { j + 1 };
            }
            if let Some(rest) = self.take_from(j, earned, &mut left, &mut takes) {
                if j != first {
                    cursor.store(j as u64, Ordering::Relaxed);
                }
                return Ok(visited + 1 == n && rest < token);
            }
            j = if j + 1 == n { 0 } else { j + 1 };
        }
        match self.take_from(home, earned, &mut left, &mut takes) {
            // Every shard paid part: the words the takes left are a view of the whole pool
            // that stays true (see `publish_taken`).
            Some(rest) if rest < token => {
                Ok(takes.len + 1 != n || !self.publish_taken(&takes.linear))
            }
            Some(_) => Ok(false),
            None => Err(self.give_back(&takes)),
        }
    }

    /// Publishes the hint from the words a served borrow's takes left — one take from every
    /// shard, as `linear` summed them — without reading any shard again, into `taken_until`
    /// with a plain store. Sound without the version protocol of [`read_pool`](Self::read_pool)
    /// and without a CAS (see the module's *Waits*): after a take's CAS, its shard's
    /// word never falls below what the take left (every other write raises it, and a give-back
    /// only undoes a take that started from this word or a later one), and a higher word means
    /// fewer units at every reading; so the first instant at which these words hold a token is
    /// never later than the one any later state of the shards gives, and a hint that is early
    /// only sends callers to the slow path. `false` when the one-pass form does not apply (the
    /// caller reads every shard instead).
    #[inline(always)]
    fn publish_taken(&self, linear: &pool::Linear) -> bool {
        let token = u128::from(self.shards[0].quota.scale());
        let Some(units) = linear.first_reaching(token) else {
            return false;
        };
        let dry = self.instant(Some(units)).min(INSTANT);
        // A later hint already there stays (it is as true), and an equal one is not written
        // again (the line stays shared in the other cores' caches).
        if self.pool.taken_until.load(Ordering::Relaxed) < dry {
            self.pool.taken_until.store(dry, Ordering::Relaxed);
        }
        true
    }

    /// [`take_pooled`](Self::take_pooled) for two shards, in straight-line code (the same
    /// order: the other shard, then the own one), except that a take from the other shard
    /// alone never asks the caller to read the pool: `None` if the other shard holds nothing
    /// (the general loop takes over, and finds the same).
    #[inline(always)]
    fn take_pair(&self, home: usize, earned: (u64, u64), need: u64) -> Option<Result<bool, bool>> {
        let token = self.shards[0].quota.scale();
        let lender = 1 - home;
        let (l, l_burst) = self.take_one(lender, earned, need)?;
        if l.taken == need {
            // Served by the other shard alone. The own shard's word is not known, and reading
            // both to publish a hint when this take drained the other one costs more than it
            // saves: under two-thread overload the other core's next writes to both lines (and
            // to the hint's, when it changes) must then take them back, for a hint the next
            // failed borrow publishes anyway (harness, mixed regime: sharded/cas 0.85 → 0.93
            // at two threads, median of nine paired runs; unchanged at one).
            return Some(Ok(false));
        }
        let left = need - l.taken;
        let own = self.take_one(home, earned, left);
        Some(match own {
            Some((h, h_burst)) if h.taken == left => {
                let mut linear = pool::Linear::default();
                linear.add(l.after, l_burst);
                linear.add(h.after, h_burst);
                Ok(h.rest < token && !self.publish_taken(&linear))
            }
            own => {
                let mut takes = Takes::default();
                for (t, shard) in [(Some((l, l_burst)), lender), (own, home)] {
                    if let Some((t, _)) = t {
                        takes.push(Take {
                            shard,
                            after: t.after,
                            units: t.taken,
                        });
                    }
                }
                Err(self.give_back(&takes))
            }
        })
    }

    /// Takes up to `max` units from shard `j` (one CAS, retried while the word moves but the
    /// shard still holds something), at a reading where the shards have `earned` units
    /// (rounded down and up): what it took, and the shard's burst in units; `None` if the
    /// shard holds nothing.
    #[inline(always)]
    fn take_one(&self, j: usize, earned: (u64, u64), max: u64) -> Option<(Taken, u64)> {
        let shard = &self.shards[j];
        let burst = shard.quota.burst_units();
        let mut state = shard.state.load(Ordering::Relaxed);
        while let Some((after, taken, rest)) = gcra::take_units(state, earned, burst, max) {
            match shard.state.compare_exchange_weak(
                state,
                after,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((Taken { after, taken, rest }, burst)),
                Err(actual) => state = actual,
            }
        }
        None
    }

    /// Takes up to `left` units from shard `j` ([`take_one`](Self::take_one)), and adds the
    /// word it left to `takes.linear`. Once `left` reaches 0: `Some(units the shard still
    /// holds)`; before, the take is recorded in `takes`.
    #[inline(always)]
    fn take_from(
        &self,
        j: usize,
        earned: (u64, u64),
        left: &mut u128,
        takes: &mut Takes,
    ) -> Option<u64> {
        let max = u64::try_from(*left).unwrap_or(u64::MAX);
        let (t, burst) = self.take_one(j, earned, max)?;
        takes.linear.add(t.after, burst);
        *left -= u128::from(t.taken);
        if *left == 0 {
            return Some(t.rest);
        }
        takes.push(Take {
            shard: j,
            after: t.after,
            units: t.taken,
        });
        None
    }

    /// Undoes the takes of a failed borrow where that is sound: one CAS from the word the take
    /// left to the word it started from (see the module's docs). A shard whose word has moved
    /// keeps the units. Returns whether anything was given back.
    #[cold]
    fn give_back(&self, takes: &Takes) -> bool {
        let (mut lost, mut restored_any) = (0u64, false);
        takes.for_each(|t| {
            let shard = &self.shards[t.shard];
            let restored = shard.state.compare_exchange(
                t.after,
                t.after - t.units,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            match restored {
                Ok(_) => restored_any = true,
                Err(_) => lost = lost.saturating_add(t.units),
            }
        });
        if lost > 0 {
            let _ = self
                .pool
                .stranded
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some(s.saturating_add(lost))
                });
        }
        restored_any
    }

    /// Reads every shard once and returns the first instant at which the shards together hold
    /// `need` units (`u64::MAX`: not within the horizon), and publishes the first instant at
    /// which they hold one token as the hint: if it changed, or always after a give-back
    /// (`gave_back`), so that a hint computed from shards read before the give-back, by a
    /// thread that read the hint before this publication, fails its CAS and reads again.
    #[inline(never)]
    fn read_pool(&self, need: u128, gave_back: bool) -> u64 {
        let scale = u128::from(self.shards[0].quota.scale());
        let n = self.shards.len();
        loop {
            // Acquire: if `seen` is another thread's publication, the shard words read below are
            // at least those it read — its own give-backs included.
            let seen = self.pool.dry_until.load(Ordering::Acquire);
            let shards = || {
                self.shards
                    .iter()
                    .map(|s| (s.state.load(Ordering::Relaxed), s.quota.burst_units()))
            };
            // The one-pass form (a drained pool) first, the general one where it does not apply
            // (its breakpoints on the stack up to 16 shards, in the thread's buffers beyond).
            let first = |need: u128| {
                pool::first_reaching_linear(shards(), need).or_else(|| {
                    if n <= 16 {
                        let (mut starts, mut ends) = ([0i64; 16], [0i64; 16]);
                        let (starts, ends) = (&mut starts[..n], &mut ends[..n]);
                        pool::breakpoints(shards(), starts, ends);
                        pool::first_reaching(starts, ends, need)
                    } else {
                        scratch::with_breakpoints(n, |starts, ends| {
                            pool::breakpoints(shards(), starts, ends);
                            pool::first_reaching(starts, ends, need)
                        })
                    }
                })
            };
            let dry = self.instant(first(scale));
            let ready = if need == scale {
                dry
            } else {
                self.instant(first(need))
            };
            let hint = dry.min(INSTANT);
            let next = (seen >> 64).wrapping_add(1) << 64 | u128::from(hint);
            // Weak: a spurious failure only reads the pool again, as a real one does.
            if (seen as u64 == hint && !gave_back)
                || self
                    .pool
                    .dry_until
                    .compare_exchange_weak(seen, next, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                return ready;
            }
            // Another thread published meanwhile, perhaps from states read after a give-back
            // that ours missed: read again.
        }
    }

    /// The first clock reading at which the shards have earned `units` (`u64::MAX`: never
    /// within the horizon, or never at all).
    #[inline]
    fn instant(&self, units: Option<u64>) -> u64 {
        match units.map(|u| self.shards[0].quota.instant_of(u)) {
            Some(at) if at <= HORIZON_NS => at,
            _ => u64::MAX,
        }
    }

    // ---- the narrow interface that saving and restoring use (`src/persist/sharded.rs`) ----

    /// The units the whole bucket holds at `now` (tokens lent out count as spent), the scale of
    /// that unit (units per token), and the most it holds (the burst, in that unit).
    #[cfg(feature = "persist")]
    pub(crate) fn held_units(&self, now: u64) -> (u128, u64, u128) {
        let cap = self
            .shards
            .iter()
            .map(|s| u128::from(s.quota.burst_units()))
            .sum();
        (self.units_at(now), self.shards[0].quota.scale(), cap)
    }

    /// Lowers what the whole bucket holds at `now` to at most `max` units (of
    /// [`held_units`](ShardedBucket::held_units)): takes the excess from the shards in turn, each
    /// with a CAS that raises its state (a take, as a borrow's), so it only ever removes tokens
    /// and racing decisions keep their own. The pool's hints stay true: they bound when the
    /// shards hold a token, and the shards then hold less.
    #[cfg(feature = "persist")]
    pub(crate) fn limit_held(&self, now: u64, max: u128) {
        let earned = self.shards[0].quota.scaled().earned(now);
        let mut budget = max;
        for s in self.shards.iter() {
            let mut st = s.state.load(Ordering::Relaxed);
            loop {
                let held = u128::from(gcra::available_units(st, now, &s.quota));
                let keep = held.min(budget);
                let excess = (held - keep) as u64;
                let next = match gcra::take_units(st, earned, s.quota.burst_units(), excess) {
                    Some((next, _, _)) if excess > 0 => next,
                    _ => {
                        budget -= keep;
                        break;
                    }
                };
                match s
                    .state
                    .compare_exchange_weak(st, next, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        budget -= keep;
                        break;
                    }
                    Err(actual) => st = actual,
                }
            }
        }
    }
}

/// A hint's "never": above every instant within the horizon (which fit in 62 bits).
const INSTANT: u64 = (1 << 62) - 1;

/// The wait from `now` until `at` (`INSTANT` or more: never), at least one nanosecond.
#[inline]
fn wait(now: u64, at: u64) -> Duration {
    if at >= INSTANT {
        Duration::MAX
    } else {
        gcra::to_duration(at.saturating_sub(now).max(1))
    }
}

/// One successful take: the word it left, the units it took, the units the shard still holds.
#[derive(Clone, Copy)]
struct Taken {
    after: u64,
    taken: u64,
    rest: u64,
}

/// A partial take to give back if the whole cost cannot be met.
#[derive(Clone, Copy, Default)]
struct Take {
    shard: usize,
    /// The shard's word right after the take.
    after: u64,
    units: u64,
}

/// Buffers for the borrows and exact waits that need room for every shard (a borrow that
/// takes from more than 4 shards, the waits of a pool of more than 16): one set per thread,
/// lent to a call and returned, so that a thread allocates them once, the first time it needs
/// that much room, not on every call (at 64 shards near saturation every borrow takes from
/// every shard). A call made while the thread's buffers are lent (a clock that calls back into
/// a sharded bucket) gets fresh ones.
mod scratch {
    use super::Take;
    use alloc::vec::Vec;
    use core::cell::Cell;

    std::thread_local! {
        static TAKES: Cell<Vec<Take>> = const { Cell::new(Vec::new()) };
        static BREAKPOINTS: Cell<(Vec<i64>, Vec<i64>)> = const { Cell::new((Vec::new(), Vec::new())) };
    }

    /// The thread's take buffer, empty (a new one while it is lent, or as the thread exits).
    pub(super) fn takes() -> Vec<Take> {
        let mut v = TAKES.try_with(Cell::take).unwrap_or_default();
        v.clear();
        v
    }

    /// Returns a buffer from [`takes`].
    pub(super) fn return_takes(v: Vec<Take>) {
        let _ = TAKES.try_with(|c| c.set(v));
    }

    /// Runs `f` on the thread's two breakpoint buffers, `n` zeros each.
    pub(super) fn with_breakpoints<R>(n: usize, f: impl FnOnce(&mut [i64], &mut [i64]) -> R) -> R {
        let (mut starts, mut ends) = BREAKPOINTS.try_with(Cell::take).unwrap_or_default();
        starts.clear();
        starts.resize(n, 0);
        ends.clear();
        ends.resize(n, 0);
        let r = f(&mut starts, &mut ends);
        let _ = BREAKPOINTS.try_with(|c| c.set((starts, ends)));
        r
    }
}

/// The takes of one borrow: inline for up to 4 shards, beyond that in the thread's buffer
/// ([`scratch`]).
#[derive(Default)]
struct Takes {
    inline: [Take; 4],
    /// The number of takes recorded.
    len: usize,
    spill: Vec<Take>,
    /// The words the borrow's successful takes left, the last one included, for
    /// [`ShardedBucket::publish_taken`].
    linear: pool::Linear,
}

impl Takes {
    #[inline]
    fn push(&mut self, t: Take) {
        if self.len < self.inline.len() {
            self.inline[self.len] = t;
        } else {
            if self.spill.capacity() == 0 {
                self.spill = scratch::takes();
            }
            self.spill.push(t);
        }
        self.len += 1;
    }

    fn for_each(&self, mut f: impl FnMut(&Take)) {
        self.inline[..self.len.min(self.inline.len())]
            .iter()
            .for_each(&mut f);
        self.spill.iter().for_each(f);
    }
}

impl Drop for Takes {
    fn drop(&mut self) {
        if self.spill.capacity() > 0 {
            scratch::return_takes(core::mem::take(&mut self.spill));
        }
    }
}
