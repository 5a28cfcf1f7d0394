//! The central word: the exact [`gcra`](crate::gcra) state of the whole quota. Decisions that
//! their shard's lease cannot pay are made here with one compare-and-swap, which also hands the
//! shard a new lease when the word holds plenty.

use super::counters;
use super::lease::{Lease, Short};
use super::Earned;
use crate::error::Denied;
use crate::quota::{Scaled, HORIZON_NS};
use crate::sync::{fence, AtomicU64, Backoff, Ordering};
use core::time::Duration;

/// A bucket-wide `dry_all` instant is published only for a spell at least this far ahead of
/// its reading (1 ms), so at most once a millisecond: the read-mostly line stays shared and the
/// scan of every shard before it stays rare. Shorter spells are answered from each shard's
/// `dry_until`. Above [`ROOM_NS`], so that near leases alone never publish one.
pub(super) const DRY_ALL_NS: u64 = 1_000_000;

/// The most tokens one lease takes.
const LEASE_MAX: u64 = 1 << 16;

/// A lease takes at most `1 / (SPREAD × shards)` of what the word holds beyond the cost, so
/// that the leases of all shards together never hold more than about `1 / SPREAD` of it.
const SPREAD: u64 = 8;

/// Tokens to lease with a decision of `cost` from a word holding `held` tokens (0 under
/// `cost + SPREAD × shards`). The caller leases only above [`spread_units`].
#[inline(always)]
pub(super) fn lease_tokens(held: u64, cost: u64, shards: u64) -> u64 {
    (held.saturating_sub(cost) / (SPREAD * shards)).min(LEASE_MAX)
}

/// The largest state (states stay below [`LOCKED`](super::lease::LOCKED)).
const MAX_STATE: u64 = (1 << 63) - 1;

/// The longest backoff spin after lost CASes on the central word: 2^10 = 1,024 hints (tens of
/// µs), reached after ten losses in a row. Near the limit every shard comes back to the word
/// once per near lease; with spins of at most 64 hints, 48 to 64 cores retrying at once fill
/// the word's line with lost CASes and stay there, every thread at the word (the step model,
/// `docs/sharded.md`); longer spins let the winners through and the shards return to their
/// own lines.
const CENTRAL_SPIN_LIMIT: u32 = 10;

/// A one-token refusal of a shard whose lease holds less than a token, from a dry word, takes
/// no advance the first time: it marks the shard as waiting (`Lease::set_waiting`) and records
/// the word's instant, with no write to the central line, and the next refill of another shard
/// that looks at it hands it a near lease (`ShardedBucket::hand_off`). A later such refusal
/// takes the advance if the shard was marked and refused this recently (its `dry_until` at most
/// this far before the reading): it has waited a whole spell with no hand-off. Other shards'
/// refills look only at shards marked and refused this recently. [`ROOM_NS`]: the longest the
/// word's dry instant lies ahead near the limit.
pub(super) const HAND_OFF_NS: u64 = ROOM_NS;

/// A near lease spans at most this long of the rate ...
const NEAR_NS: u64 = 16_000;

/// ... and at most this many tokens.
const NEAR_MAX: u64 = 64;

/// The central word stands at most this long of the rate beyond the limit (and at most
/// [`near_room`]'s `shards × cap`): what a refusal can wait beyond the pooled wait.
const ROOM_NS: u64 = 250_000;

/// The most tokens a *near lease* takes (where a far lease would be empty): what the rate earns
/// in [`NEAR_NS`], at most [`NEAR_MAX`] and `burst / (8 × shards)` (all near leases together
/// hold at most an eighth of the burst). 0 (no near leases) with one shard or below 62,500
/// tokens a second, where the central word serves every decision.
pub(super) fn near_cap(quota: &crate::quota::Quota, shards: u64) -> u64 {
    if shards < 2 {
        return 0;
    }
    tokens_in(quota, NEAR_NS)
        .min(NEAR_MAX)
        .min(quota.burst() / (SPREAD * shards))
}

/// The most units the central word stands beyond the limit (`⌊earned⌋ + burst`) with near
/// leases out: `shards × cap` tokens, at most [`ROOM_NS`] of rate, one near lease at least.
pub(super) fn near_room(quota: &crate::quota::Quota, shards: u64, cap: u64) -> u64 {
    let tokens = shards
        .saturating_mul(cap)
        .min(tokens_in(quota, ROOM_NS))
        .max(cap);
    tokens.saturating_mul(quota.scale())
}

/// Whole tokens the quota's rate earns in `ns` nanoseconds (rounded down).
fn tokens_in(quota: &crate::quota::Quota, ns: u64) -> u64 {
    quota.scaled().earned(ns).0 / quota.scale()
}

/// The size of a shard's next near lease from its last (`[frontier, top)` as its replacement
/// found it, `last` tokens, `emptied` by a scan after it lapsed): doubled up to `cap` after one
/// spent to its top, halved to one token after one that lapsed, so a quiet shard loses at most
/// its last lease.
#[inline]
pub(super) fn near_size(last: u64, emptied: bool, frontier: u64, top: u64, cap: u64) -> u64 {
    let last = last.clamp(1, cap.max(1));
    if frontier < top || emptied {
        (last / 2).max(1)
    } else if top > 0 {
        (last * 2).min(cap)
    } else {
        last
    }
}

/// A lease lives at least this long of the rate: what the rate earns in it is the smallest
/// lease taken ([`lease_min`]).
const LEASE_MIN_NS: u64 = 250;

/// The fewest tokens a lease takes: what the rate earns in [`LEASE_MIN_NS`], at least one. A
/// lease outlived by the time between its shard's decisions lapses whole; 250 ns is several
/// decisions of a busy thread (`docs/sharded.md`).
pub(super) fn lease_min(quota: &crate::quota::Quota) -> u64 {
    tokens_in(quota, LEASE_MIN_NS).max(1)
}

/// `SPREAD × shards × lease_min` tokens in units (saturating): a word holding no more beyond a
/// decision's cost leases nothing. `u64::MAX` (never) with one shard.
pub(super) fn spread_units(scale: u64, shards: u64, lease_min: u64) -> u64 {
    if shards < 2 {
        return u64::MAX;
    }
    scale
        .saturating_mul(SPREAD * shards)
        .saturating_mul(lease_min)
}

/// The word, on its own cache line.
///
/// | bits | meaning | unit | range |
/// |---|---|---|---|
/// | 63..0 | the [`gcra`](crate::gcra) state of the whole quota | `1 / quota.scale()` token since the clock's origin | 0 ..= 2^63 − 1; `0` = full |
///
/// Only ever raised (a debit with or without a lease, an advance, a drain's or a restore's
/// `fetch_max`), so the units it hands out — `[max(state, ⌈earned⌉), new state)` — never
/// overlap. `Relaxed`, but for the
/// CASes that hand out a lease or an advance (`Release`) and the fence between a decision's
/// read of the word and a `dry_all` publication from it (`Acquire`,
/// [`Central::hand_outs_after_read`]): they order a hand-out's lock and count before a
/// publication from the state it wrote or a later one.
pub(super) struct Central {
    state: AtomicU64,
    /// Leases and advances handed out so far: counted after the lease's lock and before the
    /// CAS that hands it out (both `Release`), so that a reader of the word and then, after an
    /// `Acquire` fence, of this count sees every hand-out whose CAS wrote the state it read or
    /// an earlier one, and a scan that read the count raised sees the lease's lock (loom
    /// `a_scan_never_passes_a_lease_being_handed_out`).
    hand_outs: AtomicU64,
    /// `hand_outs` as a scan that found every lease empty read it (`u64::MAX`: none yet).
    clean: AtomicU64,
    /// The shard whose lease stopped the last scan (`u64::MAX`: none), which the next scan
    /// checks first: while that lease holds units, a publication attempt reads one shard line
    /// instead of every shard's. A hint only (it can only stop a publication sooner). `Relaxed`.
    blocker: AtomicU64,
}

/// What [`Central::decide_fast`] decided, and the instant before which the word, in the state
/// it read or wrote, holds less than one token (its shard's `dry_until`, a `dry_all` candidate);
/// 0 when the word holds a token after it, or with an advance taken.
pub(super) type Decided = (Result<(), Denied>, u64);

/// What the central path decided.
pub(super) enum Outcome {
    Admitted,
    /// With the instant as in [`Decided`] (0 when the shard's lease was locked: none published).
    Refused(Denied, u64),
    /// The shard's lease changed under the decision: spend from it again.
    Retry,
}

/// What a central decision needs of the quota and the shard.
pub(super) struct Ask<'a> {
    pub(super) scaled: &'a Scaled,
    pub(super) now: u64,
    pub(super) earned: Earned,
    pub(super) cost: u64,
    /// The shard count (lease size).
    pub(super) shards: u64,
    /// [`spread_units`] of the quota and shard count.
    pub(super) spread: u64,
    /// [`near_cap`] of the quota and shard count (0: no near leases).
    pub(super) near_cap: u64,
    /// [`near_room`] of the quota and shard count, in units.
    pub(super) room: u64,
    /// [`lease_min`] in units: the least time a near lease's first unit lies ahead.
    pub(super) near_min: u64,
    /// The clock, read again after a lost CAS (how stale `now` has grown).
    pub(super) clock: &'a dyn Fn() -> u64,
    /// The calling shard's lease and why it could not pay.
    pub(super) lease: (&'a Lease, Short),
}

impl Central {
    /// A word in state `state`.
    pub(super) fn new(state: u64) -> Central {
        Central {
            state: AtomicU64::new(state),
            hand_outs: AtomicU64::new(0),
            clean: AtomicU64::new(u64::MAX),
            blocker: AtomicU64::new(u64::MAX),
        }
    }

    /// Counts a lease or an advance about to be handed out: after its lock, before its CAS.
    #[inline]
    fn hand_out(&self) {
        counters::shared_write();
        self.hand_outs.fetch_add(1, Ordering::Release);
    }

    /// The hand-outs, read after the state the calling thread last read or wrote: at least
    /// those counted before every CAS that wrote that state or an earlier one (the fence, with
    /// the hand-out CASes' `Release` and the word's later writes all read-modify-writes in their
    /// release sequence); every lease lock before a count this sees happens before what the
    /// caller reads next. The fence costs no instruction on x86.
    #[inline(always)]
    pub(super) fn hand_outs_after_read(&self) -> u64 {
        fence(Ordering::Acquire);
        self.hand_outs.load(Ordering::Acquire)
    }

    /// Whether a scan found every lease empty with `hand_outs` at `n`.
    #[inline]
    pub(super) fn is_clean(&self, n: u64) -> bool {
        self.clean.load(Ordering::Relaxed) == n
    }

    /// Records a scan that found every lease empty with `hand_outs` at `n`.
    pub(super) fn set_clean(&self, n: u64) {
        counters::shared_write();
        self.clean.store(n, Ordering::Relaxed);
    }

    /// The shard whose lease stopped the last scan (`usize::MAX`: none).
    pub(super) fn blocker(&self) -> usize {
        usize::try_from(self.blocker.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Records the shard whose lease stopped a scan.
    pub(super) fn set_blocker(&self, shard: usize) {
        counters::shared_write();
        self.blocker.store(shard as u64, Ordering::Relaxed);
    }

    /// The state (read-only).
    #[inline]
    pub(super) fn load(&self) -> u64 {
        self.state.load(Ordering::Relaxed)
    }

    /// One shard's debit: one CAS from `s` (as [`load`](Self::load) or a lost CAS found it) to
    /// `next`; `Err` carries the word that lost it. `Relaxed`: one shard hands out no lease, so
    /// the word orders nothing but itself.
    #[inline(always)]
    pub(super) fn debit(&self, s: u64, next: u64) -> Result<(), u64> {
        self.state
            .compare_exchange_weak(s, next, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }

    /// Raises the state to at least `floor` (a restore, a drain): it stays "only ever raised",
    /// so the units handed out still never overlap.
    pub(super) fn raise(&self, floor: u64) {
        counters::central_cas();
        self.state.fetch_max(floor, Ordering::Relaxed);
    }

    /// One attempt of [`decide`](Self::decide) for a shard whose lease holds nothing, in a
    /// bucket that takes no near leases ([`near_cap`] 0): one CAS that takes no lease, or a
    /// refusal (recorded in the lease's `dry_until`). `None`: [`decide`](Self::decide).
    /// `count`: whether [`counters`] count its CAS (not with one shard, a `Bucket` then).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decide_fast(
        &self,
        scaled: &Scaled,
        e: Earned,
        cost_units: u64,
        lease_room: u64,
        lease: &Lease,
        now: u64,
        count: bool,
    ) -> Option<Decided> {
        let burst_units = scaled.burst_units();
        let limit = e.floor + burst_units;
        // The lease as read before the word: an instant found from the word is recorded for
        // the shard only if the lease is still this one (`Lease::publish_dry_over`); with one
        // shard there are no leases.
        let (q, h) = lease.read();
        if q < h {
            return None;
        }
        // One shard (`!count`) records nothing: it decides on the word alone
        // (`ShardedBucket::acquire_on`).
        let record = |at: u64| {
            if !count || lease.publish_dry_over(q, h, at) {
                at
            } else {
                0
            }
        };
        let mut s = self.state.load(Ordering::Relaxed);
        // Twice at most: a CAS lost to a decision that left too little is a refusal at once,
        // with no spin and no second CAS (near the limit, the common way to lose: every shard
        // whose `dry_until` just passed reads the word at the same instant, one wins the token).
        for first in [true, false] {
            let want = s + cost_units;
            if want > limit {
                let at = scaled.instant_of(want - burst_units);
                // For one token the instant just computed.
                let dry = record(if cost_units == scaled.scale() {
                    at
                } else {
                    dry_at(scaled, s)
                });
                return Some((Err(Denied::RetryAfter(wait_until(at, now))), dry));
            }
            // Perhaps room for a lease (`decide` computes it, capped at the burst); or a
            // second lost CAS: `decide`'s loop, with its spin.
            if limit - want > lease_room || !first {
                return None;
            }
            if count {
                counters::central_cas();
            }
            match self.state.compare_exchange_weak(
                s,
                s.max(e.ceil) + cost_units,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // The token this decision took may have been the word's last: if so, its
                    // shard refuses without reading the word until the next one (else its next
                    // decision would read the word only to find that).
                    let next = s.max(e.ceil) + cost_units;
                    let mut dry = 0;
                    if next + scaled.scale() > limit {
                        dry = record(dry_at(scaled, next));
                    }
                    return Some((Ok(()), dry));
                }
                Err(actual) => s = actual,
            }
        }
        None
    }

    /// Debits the cost, with a new lease when the shard's holds under one token: far
    /// ([`lease_tokens`]) when the word holds plenty, else near ([`near_size`]). When the word
    /// alone cannot pay: the lease's units and the rest from the word; else a refusal, with a
    /// near lease taken in the same CAS when the shard's is empty (an *advance*, paid out as
    /// the clock earns it), or with the wait for the word. What a replaced lease still held
    /// goes to its `stranded`. A cost of 0 (`ShardedBucket::refill`) takes the lease alone,
    /// or writes nothing; it tries again once after a lost CAS, without a spin, then gives up.
    #[inline(never)]
    pub(super) fn decide(&self, ask: &Ask<'_>) -> Outcome {
        let scaled = ask.scaled;
        let (scale, burst_units) = (scaled.scale(), scaled.burst_units());
        let cost_units = ask.cost * scale;
        let e = ask.earned;
        let limit = e.floor + burst_units;
        let held = match ask.lease {
            (
                lease,
                Short::Holds {
                    frontier,
                    top,
                    units,
                },
            ) => Some((lease, frontier, top, units)),
            (_, Short::Locked) => None,
        };
        // The lease holds the cost, not yet earned (an advance, or a reading older than the
        // lease's): refused with the wait for its units, this shard's earliest.
        if let Some((_, frontier, _, units)) = held {
            if units >= cost_units && cost_units > 0 {
                let at = frontier + cost_units - burst_units;
                return Outcome::Refused(Denied::RetryAfter(wait(scaled, at, ask.now)), 0);
            }
        }
        // The size of a near lease that replaces this one (0: none).
        let near = match held {
            Some((lease, frontier, top, units)) if ask.near_cap > 0 && units < scale => {
                let (last, emptied) = lease.near();
                near_size(last, emptied, frontier, top, ask.near_cap)
            }
            _ => 0,
        };
        // Whether this decision holds the shard's lease (`Lease::lock`): taken before the CAS
        // that replaces or empties the lease, so that no spend races it.
        let mut locked = false;
        let release = |locked: bool| {
            if let (true, Some((lease, frontier, _, _))) = (locked, held) {
                lease.unlock(frontier);
            }
        };
        let mut s = self.state.load(Ordering::Relaxed);
        // A spin after each lost CAS, doubling from one hint to [`CENTRAL_SPIN_LIMIT`]'s, with
        // the lease unlocked: a thread descheduled in a spin leaves its shard's lease to its
        // shard's other threads.
        let mut backoff = Backoff::default();
        // Nanoseconds from the reading to the last lost CAS (0 before one).
        let mut age = 0u64;
        // A refill (cost 0) lost one CAS: it gives up at the next.
        let mut refill_lost = false;
        loop {
            // `gcra::try_acquire`'s test; `s <= 2^63 − 1`, so nothing overflows.
            let want = s + cost_units;
            let base = s.max(e.ceil);
            if want > limit {
                // The word alone cannot pay: with the lease's units `[top − units, top)` (a
                // valid take at this reading if `top` is within one burst of it)? Not for a
                // cost of 0 (a refill or a hand-off: nothing to pay).
                match held {
                    Some((lease, frontier, top, units))
                        if units > 0
                            && cost_units > units
                            && top <= limit
                            && want - units <= limit =>
                    {
                        if !locked {
                            if !lease.lock(frontier, top) {
                                return Outcome::Retry;
                            }
                            locked = true;
                        }
                        let next = base + (cost_units - units);
                        counters::central_cas();
                        match self.state.compare_exchange_weak(
                            s,
                            next,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        ) {
                            Ok(_) => {
                                lease.install(top, top);
                                return Outcome::Admitted;
                            }
                            Err(actual) => {
                                s = actual;
                                release(locked);
                                locked = false;
                                if gives_up(cost_units, &mut refill_lost, &mut backoff) {
                                    return Outcome::Retry;
                                }
                                continue;
                            }
                        }
                    }
                    _ => {}
                }
                // An advance: the next `near` tokens' units, for the shard's threads to pay
                // out as the clock earns them. Never for a cost of the whole burst (payable
                // only with the bucket full, at a reading whose earned units pass the
                // advance's first unit with an inexact quota, so that it lapses), nor one
                // above the near lease's size.
                let size = near.max(ask.cost);
                if let Some((lease, frontier, top, _)) = held {
                    let top_new = base + size * scale;
                    let may_advance = near > 0
                        && size <= ask.near_cap
                        && cost_units < burst_units
                        && top_new <= (limit + ask.room).min(MAX_STATE);
                    // A one-token refusal waits for a hand-off first ([`HAND_OFF_NS`]).
                    let waited = ask.cost != 1
                        || (lease.waiting()
                            && lease.dry_until() > ask.now.saturating_sub(HAND_OFF_NS));
                    if may_advance && !waited {
                        lease.set_waiting();
                    }
                    if may_advance && waited {
                        if !locked {
                            if !lease.lock(frontier, top) {
                                return Outcome::Retry;
                            }
                            locked = true;
                        }
                        self.hand_out();
                        // `Release`: the lock above happens before a scan that reads this state
                        // or a later one (`ShardedBucket::publish_dry_all`).
                        counters::central_cas();
                        match self.state.compare_exchange_weak(
                            s,
                            top_new,
                            Ordering::Release,
                            Ordering::Relaxed,
                        ) {
                            Ok(_) => {
                                // Sized while the lease is locked: a scan that empties the new
                                // lease (after a stall as long as its units take to lapse)
                                // marks it after, not before.
                                lease.set_near(size);
                                lease.install(base, top_new);
                                // Taken by a refusal (a refill's belongs to its admission).
                                if ask.cost > 0 {
                                    counters::advance();
                                }
                                if frontier < top {
                                    lease.add_stranded(top - frontier);
                                }
                                let at = base + cost_units - burst_units;
                                return Outcome::Refused(
                                    Denied::RetryAfter(wait(scaled, at, ask.now)),
                                    0,
                                );
                            }
                            Err(actual) => {
                                s = actual;
                                release(locked);
                                locked = false;
                                if gives_up(cost_units, &mut refill_lost, &mut backoff) {
                                    return Outcome::Retry;
                                }
                                continue;
                            }
                        }
                    }
                }
                // Recorded for the shard's one-token refusals unless its lease can pay a
                // token (a cost above what it holds was refused here).
                // Only over the lease this decision read (`Lease::publish_dry_over`): one
                // installed meanwhile may hold units payable before it.
                let mut dry = 0;
                if let Some((lease, frontier, top, units)) = held {
                    let at = dry_or_pooled_at(scaled, s, top, units);
                    if units < scale {
                        if locked {
                            lease.publish_dry(at);
                            dry = at;
                        } else if lease.publish_dry_over(frontier, top, at) {
                            dry = at;
                        }
                    }
                }
                release(locked);
                // The wait until the word pays the cost, or, sooner, until it pays what the
                // lease lacks while the lease still holds its units (they lapse once the units
                // earned pass them): the instant the pooling above admits ([`pooled_at`]).
                let mut at = scaled.instant_of(want - burst_units);
                if let Some((_, _, top, units)) = held {
                    let pooled = top.max(want - units);
                    if units > 0 {
                        if let Some(p) = pooled_at(scaled, pooled - burst_units, top - units) {
                            at = at.min(p);
                        }
                    }
                }
                let denied = Denied::RetryAfter(wait_until(at, ask.now));
                return Outcome::Refused(denied, dry);
            }
            // A lease that holds less than one token is replaced (what it holds is lost): a far
            // lease while the word holds plenty, else a near one.
            let mut leased = 0;
            if let Some((lease, frontier, top, _)) = held.filter(|h| h.3 < scale) {
                // No far lease below `cost + SPREAD × shards × lease_min` tokens held
                // (`ask.spread` units more than the cost): a compare first, the divisions only
                // when a lease is taken.
                let room = (limit - s).min(burst_units);
                let far = if room - cost_units > ask.spread {
                    // After lost CASes the reading has aged and the next CAS may wait as long
                    // again: the lease covers at least twice the age (at most half what the
                    // word holds beyond the cost), or on many cores it lapses before it is spent.
                    let by_age = if age > 0 {
                        (scaled.earned(age.saturating_mul(2)).0 / scale)
                            .min((room - cost_units) / 2 / scale)
                    } else {
                        0
                    };
                    lease_tokens(room / scale, ask.cost, ask.shards).max(by_age)
                } else {
                    0
                };
                // `want + far × scale <= limit` by the size rule; a near lease may pass the
                // limit by `ask.room` at most, and its first unit lies at least `near_min`
                // beyond the units earned (from a fuller word it would lapse at once).
                let near = if base + cost_units >= e.ceil + ask.near_min {
                    near
                } else {
                    0
                };
                let tokens = if far > 0 && want + far * scale <= limit {
                    far.max(near)
                } else {
                    near
                };
                let tokens =
                    tokens.min((limit + ask.room).saturating_sub(base + cost_units) / scale);
                if tokens > 0 && base + cost_units + tokens * scale <= MAX_STATE {
                    if !locked {
                        if !lease.lock(frontier, top) {
                            return Outcome::Retry;
                        }
                        locked = true;
                    }
                    self.hand_out();
                    leased = tokens * scale;
                }
            }
            // A refill (cost 0) that takes no lease has nothing to write.
            if cost_units == 0 && leased == 0 {
                release(locked);
                return Outcome::Retry;
            }
            let next = base + cost_units + leased;
            // `Release`: a lock taken above happens before a scan that reads this state or a
            // later one (`ShardedBucket::publish_dry_all`).
            counters::central_cas();
            match self
                .state
                .compare_exchange_weak(s, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    match held {
                        Some((lease, frontier, top, units)) if leased > 0 => {
                            // Lost: a far lease's remainder; all a near lease's shard did not
                            // spend (units that lapsed too: it sizes the next one by them).
                            let lost = if near > 0 {
                                lease.set_near(leased / scale);
                                top.saturating_sub(frontier)
                            } else {
                                units
                            };
                            lease.install(next - leased, next);
                            if lost > 0 {
                                lease.add_stranded(lost);
                            }
                        }
                        _ => release(locked),
                    }
                    return Outcome::Admitted;
                }
                Err(actual) => {
                    s = actual;
                    release(locked);
                    locked = false;
                    if gives_up(cost_units, &mut refill_lost, &mut backoff) {
                        return Outcome::Retry;
                    }
                    // How stale the reading has grown: a far lease covers twice that (a
                    // refill's one retry comes at once, so it skips the clock).
                    if cost_units > 0 {
                        age = (ask.clock)().saturating_sub(ask.now);
                    }
                }
            }
        }
    }
}

/// The first reading at which a word in state `s` holds one token: before it, this state and
/// every later one (the word only rises) hold less.
#[inline(always)]
pub(super) fn dry_at(scaled: &Scaled, s: u64) -> u64 {
    (s + scaled.scale())
        .checked_sub(scaled.burst_units())
        .map_or(0, |need| scaled.instant_of(need))
}

/// The shard's next one-token instant after a refusal that read the word at `s` and the
/// shard's lease holding `units` below its `top`: [`dry_at`], or sooner, while the lease's
/// units last, the instant at which they and the word's pay one token together (the pooling
/// of [`Central::decide`]), so that `dry_until` never refuses a token the pooling pays.
/// After a lost CAS on the word: a refill (`cost_units == 0`) tries once more, at once, from the
/// word the lost CAS returned, then gives up (`true`): the admission it follows is made, and a
/// spin would only delay it; the shard's next decision takes the lease (an advance, if it is a
/// refusal). Any other decision spins, longer after each loss, and tries again.
#[inline(always)]
fn gives_up(cost_units: u64, refill_lost: &mut bool, backoff: &mut Backoff) -> bool {
    if cost_units == 0 {
        return core::mem::replace(refill_lost, true);
    }
    backoff.spin_up_to(CENTRAL_SPIN_LIMIT);
    false
}

fn dry_or_pooled_at(scaled: &Scaled, s: u64, top: u64, units: u64) -> u64 {
    let alone = dry_at(scaled, s);
    let (scale, burst_units) = (scaled.scale(), scaled.burst_units());
    if units == 0 || units >= scale {
        return alone;
    }
    // `units < scale <= s + scale`: no underflow.
    let pooled = top.max(s + scale - units);
    match pooled.checked_sub(burst_units) {
        // The refusal's rule ([`pooled_at`]): a one-token refusal from `dry_until` names it as
        // its wait, so it must be an instant at which a retry is admitted.
        Some(need) => pooled_at(scaled, need, top - units).map_or(alone, |p| alone.min(p)),
        None => 0,
    }
}

/// The first reading at which a lease whose first unit held is `first`, pooled with the word,
/// pays where the word's part needs the units earned to reach `need` (the pooling of
/// [`Central::decide`]: `s + cost − units <= ⌊earned⌋ + burst`, `units` what the lease holds
/// at that reading, `top − max(frontier, ⌈earned⌉)`); `None` if `need > first`: the lease
/// lapses as fast as the limit rises, so the pooled sum never reaches the cost. The caller
/// takes the sooner of this and the word's own instant, when the lease has lapsed whole.
/// Below `first`: the instant `need` is earned. At `first` exactly, the sum is short by the
/// rounding of the units earned (their ceiling lapses the lease's units, their floor sets the
/// limit): it pays at a reading whose units earned are whole, every reading of an exact quota
/// but only every `div`-th nanosecond of an inexact one.
fn pooled_at(scaled: &Scaled, need: u64, first: u64) -> Option<u64> {
    match need.cmp(&first) {
        core::cmp::Ordering::Less => Some(scaled.instant_of(need)),
        core::cmp::Ordering::Equal => Some(scaled.whole_from(scaled.instant_of(need))),
        core::cmp::Ordering::Greater => None,
    }
}

/// The wait from `now` until the units earned reach `need` (above those earned at `now`).
#[inline(always)]
fn wait(scaled: &Scaled, need: u64, now: u64) -> Duration {
    wait_until(scaled.instant_of(need), now)
}

/// The wait from `now` until the reading `at`, at least 1 ns: `Duration::MAX` past the horizon,
/// where nothing refills.
#[inline(always)]
pub(super) fn wait_until(at: u64, now: u64) -> Duration {
    if at > HORIZON_NS {
        Duration::MAX
    } else {
        crate::gcra::to_duration(at.saturating_sub(now).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::{
        lease_min, lease_tokens, near_cap, near_room, near_size, spread_units, LEASE_MAX, SPREAD,
    };
    use crate::quota::Quota;
    use core::time::Duration;

    /// The smallest lease is what the rate earns in 250 ns, one token at least; a word that
    /// holds more than the spread beyond the cost leases at least that.
    #[test]
    fn no_lease_is_shorter_than_the_floor() {
        let q = |per_s: u64, burst: u64| Quota::new(per_s, Duration::from_secs(1), burst).unwrap();
        for (quota, floor) in [
            (q(1, 1), 1),
            (q(1_000_000, 64), 1),
            (q(4_000_000, 4_000), 1),
            (q(10_000_000, 10_000), 2),
            (q(40_000_000, 64), 10),
            (q(1_000_000_000, 1_000_000_000), 250),
            (Quota::new(7, Duration::from_nanos(3), 100).unwrap(), 583),
        ] {
            assert_eq!(lease_min(&quota), floor, "{quota:?}");
            for shards in [2u64, 64, 1024] {
                let spread = spread_units(quota.scale(), shards, floor);
                assert_eq!(spread, quota.scale() * SPREAD * shards * floor);
                // Just above the spread (a cost of one token), the lease is the floor.
                let held = spread / quota.scale() + 2;
                assert_eq!(lease_tokens(held, 1, shards), floor.min(LEASE_MAX));
            }
        }
        assert_eq!(spread_units(u64::MAX, 1024, 250), u64::MAX);
        assert_eq!(spread_units(1, 1, 1), u64::MAX, "one shard leases nothing");
    }

    #[test]
    fn leases_shrink_to_nothing_near_the_limit() {
        for shards in [2u64, 64, 1024] {
            assert_eq!(lease_tokens(0, 1, shards), 0);
            assert_eq!(lease_tokens(SPREAD * shards, 1, shards), 0);
            assert_eq!(lease_tokens(SPREAD * shards + 1, 1, shards), 1);
            assert_eq!(lease_tokens(u64::MAX, 1, shards), LEASE_MAX);
            // With the cost, never more than the word holds.
            for held in [1u64, 10, 1_000, 1 << 40] {
                for cost in [1u64, 5, held] {
                    let t = lease_tokens(held, cost, shards);
                    assert!(cost > held || cost + t <= held, "{held} {cost} {shards}");
                }
            }
        }
    }

    /// Near leases: at most 64 tokens, 16 µs of rate and an eighth of the burst over the
    /// shards; none with one shard or below 62,500 tokens a second; the word at most `shards ×
    /// cap` tokens (and 250 µs of rate) ahead.
    #[test]
    fn near_leases_are_capped_by_rate_burst_and_shards() {
        let q = |per_s: u64, burst: u64| Quota::new(per_s, Duration::from_secs(1), burst).unwrap();
        for (quota, shards, cap, room) in [
            (q(10_000_000, 10_000), 2, 64, 128),
            (q(10_000_000, 10_000), 16, 64, 1_024),
            (q(10_000_000, 10_000), 64, 19, 1_216),
            (q(10_000_000, 10_000), 1_024, 1, 1_024),
            (q(1_000_000, 1_000), 2, 16, 32),
            (q(62_500, 10_000), 2, 1, 2),
            (q(62_499, 10_000), 2, 0, 0),
            (q(1_000_000_000, 1_000_000_000), 1_024, 64, 65_536),
            (q(10_000_000, 15), 2, 0, 0),
            (q(10_000_000, 10_000), 1, 0, 0),
            (q(4_000, 100), 16, 0, 0),
        ] {
            let c = near_cap(&quota, shards);
            assert_eq!(c, cap, "{quota:?}, {shards} shards");
            let r = if c == 0 {
                0
            } else {
                near_room(&quota, shards, c)
            };
            assert_eq!(r, room * quota.scale(), "{quota:?}, {shards} shards");
        }
        // 62,500/s over 1,024 shards: the room is 250 µs of rate, not 1,024 tokens.
        let slow = q(62_500, 100_000);
        assert_eq!(near_room(&slow, 1_024, 1), 15 * slow.scale());
    }

    /// A shard's next near lease doubles after one spent to its top, halves after one that
    /// lapsed or that a scan emptied, stays within `[1, cap]`, and starts at one.
    #[test]
    fn near_lease_sizes_adapt() {
        assert_eq!(near_size(0, false, 0, 0, 64), 1, "the first");
        assert_eq!(near_size(1, false, 10, 10, 64), 2, "spent to its top");
        assert_eq!(near_size(64, false, 10, 10, 64), 64, "at the cap");
        assert_eq!(near_size(40, false, 10, 10, 64), 64);
        assert_eq!(near_size(8, false, 5, 10, 64), 4, "lapsed");
        assert_eq!(near_size(1, false, 5, 10, 64), 1, "never below one");
        assert_eq!(near_size(8, true, 10, 10, 64), 4, "emptied by a scan");
        assert_eq!(near_size(100, false, 10, 10, 16), 16, "a cap lowered");
    }
}
