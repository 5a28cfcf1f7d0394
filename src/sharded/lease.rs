//! A shard's lease: an interval of the central word's units that only this shard's threads
//! spend, with one compare-and-swap on the shard's own cache line.

use super::Earned;
use crate::sync::{AtomicU64, Ordering};

/// The frontier's value while a thread of the shard replaces the lease: spenders treat the
/// lease as empty. Above every state (states are at most 2^63 − 1).
pub(super) const LOCKED: u64 = u64::MAX;

/// The top bit of `near`: the lease lapsed and a scan emptied it (the next near lease halves).
const LAPSED: u64 = 1 << 63;

/// A bit of `near`: a one-token refusal found the lease holding less than a token and the word
/// dry, and took no advance (`Central::decide`): the shard waits for another shard's refill to
/// hand it a near lease (`ShardedBucket::hand_off`). Cleared with the next lease installed.
const WAITING: u64 = 1 << 62;

/// The units `[frontier, top)` taken from the central word and not yet spent here.
///
/// | word | meaning | unit | range |
/// |---|---|---|---|
/// | `frontier` | the lowest unit not yet spent; `LOCKED` while the lease is replaced | `1 / quota.scale()` token since the clock's origin, as the central word | 0 ..= 2^63 − 1, or `LOCKED` |
/// | `top` | the end of the lease (exclusive); written only by the thread holding `LOCKED` | same | 0 ..= 2^63 − 1 |
///
/// Both 0 at first: an empty lease. A spend is the [`gcra`](crate::gcra) debit applied to the
/// frontier, and allowed only if it stays within `top`: the units it takes,
/// `[max(frontier, ⌈earned⌉), +cost)`, lie inside the lease, at or after the units earned at
/// the spend's reading and at most one burst above them — the two conditions a debit of the
/// central word checks. Units below the earned ones lapse: they are skipped, never spent.
///
/// The frontier never falls, but across `LOCKED`: a new lease starts at or above the old one's
/// top. It returns to a value it had only as `q → LOCKED → q` ([`lock`](Lease::lock)), so a
/// spend whose CAS finds the frontier it read spends from the lease that frontier belonged to.
///
/// Orderings: a replacement stores `top` and then the frontier with `Release`; every load of
/// the frontier that goes on to read `top` is `Acquire`, so it reads the `top` of the lease
/// whose frontier it read or of a later one, and with a later one its CAS fails (the frontier
/// rose). Checked by the loom models in `loom-tests/tests/sharded_lease.rs`.
///
/// On the same line, all `Relaxed`: `dry_until`, an instant before which this shard can be
/// paid no token (true forever once true: the word only rises; a stalled writer may step it
/// back to its own, still true, instant); `near`, the size of the shard's last near lease with
/// [`LAPSED`] (sizes only, never admissions); `stranded`, units this shard lost with replaced
/// leases (here, not on the read-mostly line every decision reads).
#[derive(Default)]
pub(super) struct Lease {
    frontier: AtomicU64,
    top: AtomicU64,
    dry_until: AtomicU64,
    near: AtomicU64,
    stranded: AtomicU64,
    /// How many other shards this shard's refills have looked at for a hand-off: the next one
    /// looked at is the one after that many (`Relaxed`, written by this shard's refills only).
    peers_seen: AtomicU64,
    /// This shard's index in its bucket (never written after construction).
    index: usize,
}

/// A spend that did not happen.
#[derive(Clone, Copy)]
pub(super) enum Short {
    /// The lease is being replaced by another thread of the shard.
    Locked,
    /// The lease cannot pay: its frontier and top as read, and the units it still holds at
    /// the reading (below one cost).
    Holds { frontier: u64, top: u64, units: u64 },
}

/// What [`Lease::spend_fast`] found.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Fast {
    /// Spent, the frontier raised to `next`; `unearned`: the lease's token after it is not
    /// earned at the reading (`next + one > limit`).
    Spent { next: u64, unearned: bool },
    /// Not locked, and holding nothing at the reading.
    Empty,
    /// Anything else (holding less than the cost, locked, a lost CAS): [`Lease::spend`].
    Slow,
    /// Holding the cost, not yet earned: payable once `need − burst` units are earned (an
    /// advance, or a lease read at a reading older than its own).
    NotYet(u64),
}

impl Lease {
    /// An empty lease for the shard at `index`.
    pub(super) fn at(index: usize) -> Lease {
        Lease {
            index,
            ..Lease::default()
        }
    }

    /// The next other shard of `n >= 2` for a refill of this one to look at
    /// ([`ShardedBucket::hand_off`](super::ShardedBucket)): each other shard in turn.
    #[inline]
    pub(super) fn next_peer(&self, n: usize) -> usize {
        let seen = self.peers_seen.load(Ordering::Relaxed);
        self.peers_seen
            .store(seen.wrapping_add(1), Ordering::Relaxed);
        let others = n as u64 - 1;
        (self.index + 1 + (seen % others) as usize) % n
    }

    /// The frontier (`Acquire`) and the top: what [`spend_fast`](Self::spend_fast) starts
    /// from. `frontier >= top` (`LOCKED` included) holds nothing at any reading.
    #[inline(always)]
    pub(super) fn read(&self) -> (u64, u64) {
        let q = self.frontier.load(Ordering::Acquire);
        (q, self.top.load(Ordering::Relaxed))
    }

    /// One attempt of [`spend`](Self::spend) from what [`read`](Self::read) returned, for a
    /// reading with `ceil` units earned (rounded up) and `limit` = earned rounded down + burst,
    /// given as `limit − one` with `one` the units of a token: no loop, no retry. Only for a
    /// lease read holding units, `q < h`: so `q` is not `LOCKED`, and `base + cost_units`
    /// does not overflow (`base` is a state or the units earned, at most 2^63; `cost_units`
    /// at most the burst's units, below 2^63; `limit` at most `MAX_UNITS` + the burst's).
    #[inline(always)]
    pub(super) fn spend_fast(
        &self,
        (q, h): (u64, u64),
        ceil: u64,
        limit_less_one: u64,
        one: u64,
        cost_units: u64,
    ) -> Fast {
        debug_assert!(q < h);
        let base = q.max(ceil);
        let next = base + cost_units;
        if next <= h {
            // `next + one <= limit` implies the debit's test, `q + cost <= limit` (`q <=
            // base`): far from the limit, one comparison for both.
            if next <= limit_less_one {
                return self.spend_cas(q, next, false);
            }
            // `q + cost <= limit` as `q + (cost − one) <= limit − one`: for a cost of one token
            // a comparison alone (`cost_units >= one`; below 2^63 both, no overflow).
            if q + (cost_units - one) <= limit_less_one {
                return self.spend_cas(q, next, true);
            }
            // `q + cost > limit`: the lease's units come later than this reading's.
            return Fast::NotYet(q + cost_units);
        }
        if h <= base {
            Fast::Empty
        } else {
            Fast::Slow
        }
    }

    /// [`spend_fast`](Self::spend_fast)'s CAS from `q` to `next`, at one call site per value
    /// of `unearned` (so that the caller's test of it folds away on each path).
    #[inline(always)]
    fn spend_cas(&self, q: u64, next: u64, unearned: bool) -> Fast {
        match self
            .frontier
            .compare_exchange_weak(q, next, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Fast::Spent { next, unearned },
            Err(_) => Fast::Slow,
        }
    }

    /// Spends `cost_units` at a reading with `earned` units if the lease holds them: the
    /// frontier it raised the lease to, and the lease's top as read with the frontier it
    /// raised (`next == top`: spent to its top).
    #[inline(always)]
    pub(super) fn spend(
        &self,
        e: Earned,
        burst_units: u64,
        cost_units: u64,
    ) -> Result<(u64, u64), Short> {
        let mut q = self.frontier.load(Ordering::Acquire);
        loop {
            if q == LOCKED {
                return Err(Short::Locked);
            }
            let h = self.top.load(Ordering::Relaxed);
            let base = q.max(e.ceil);
            // `q + cost <= floor + burst`: the debit's own test (an older reading than the
            // lease's may find its units more than one burst ahead).
            let fits = base + cost_units <= h && q + cost_units <= e.floor + burst_units;
            if !fits {
                return Err(Short::Holds {
                    frontier: q,
                    top: h,
                    units: h.saturating_sub(base),
                });
            }
            match self.frontier.compare_exchange_weak(
                q,
                base + cost_units,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok((base + cost_units, h)),
                Err(actual) => q = actual,
            }
        }
    }

    /// Takes the lease for replacement if it is still `[frontier, top)` as the caller read it.
    ///
    /// The frontier alone does not say so: a lease spent to its top while the central word
    /// stood there is replaced by an advance from that very unit (`q → LOCKED → q`, a new top),
    /// which a stalled thread that read the old lease would otherwise discard
    /// (`a_stalled_replacement_never_discards_an_advance`). So the top is checked once the
    /// lock is held (nothing changes it then): `Acquire` on
    /// success pairs with [`install`](Self::install)'s `Release` store of the frontier, so a
    /// lock that succeeds on a frontier an install wrote reads that install's top. Otherwise
    /// the frontier never falls: a new lease starts at or above the old one's top.
    #[inline]
    pub(super) fn lock(&self, frontier: u64, top: u64) -> bool {
        if self
            .frontier
            .compare_exchange(frontier, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if self.top.load(Ordering::Relaxed) != top {
            self.unlock(frontier);
            return false;
        }
        true
    }

    /// Ends a replacement with the lease `[from, to)`: `from` at or above every unit of the old
    /// one, so that the frontier never falls (`to, to` empties the lease).
    #[inline]
    pub(super) fn install(&self, from: u64, to: u64) {
        self.top.store(to, Ordering::Relaxed);
        self.frontier.store(from, Ordering::Release);
    }

    /// Ends a replacement that found nothing to lease: the old lease, unchanged.
    #[inline]
    pub(super) fn unlock(&self, frontier: u64) {
        self.frontier.store(frontier, Ordering::Release);
    }

    /// The instant before which the central word holds less than one token, as this shard last
    /// found it (0: none known).
    #[inline(always)]
    pub(super) fn dry_until(&self) -> u64 {
        self.dry_until.load(Ordering::Relaxed)
    }

    /// Records `at`, an instant found from the central word, if the lease is still `[frontier,
    /// top)` as the caller read it before the word: locked meanwhile, so that no lease taken
    /// from an earlier state of the word (whose units could be payable before `at`) is
    /// installed under the record. `false` (nothing recorded) if the lease changed.
    pub(super) fn publish_dry_over(&self, frontier: u64, top: u64, at: u64) -> bool {
        if !self.lock(frontier, top) {
            return false;
        }
        self.publish_dry(at);
        self.unlock(frontier);
        true
    }

    /// Records that the central word holds less than one token before `at`.
    #[inline]
    pub(super) fn publish_dry(&self, at: u64) {
        if self.dry_until.load(Ordering::Relaxed) < at {
            self.dry_until.store(at, Ordering::Relaxed);
        }
    }

    /// The size of this shard's last near lease (0: none yet), and whether a scan emptied it
    /// after it lapsed ([`LAPSED`]).
    #[inline(always)]
    pub(super) fn near(&self) -> (u64, bool) {
        let a = self.near.load(Ordering::Relaxed);
        (a & !(LAPSED | WAITING), a & LAPSED != 0)
    }

    /// Whether the shard waits for a hand-off ([`WAITING`]).
    #[inline]
    pub(super) fn waiting(&self) -> bool {
        self.near.load(Ordering::Relaxed) & WAITING != 0
    }

    /// Marks the shard as waiting for a hand-off ([`WAITING`]): a hint, read for sizes and
    /// hand-offs only, never for an admission (a mark that lands after a lease was installed
    /// costs one advance at most). A read-modify-write: a scan's [`LAPSED`] or a hand-off's
    /// size written meanwhile from another core is kept.
    #[inline]
    pub(super) fn set_waiting(&self) {
        self.near.fetch_or(WAITING, Ordering::Relaxed);
    }

    /// Sets the size of the near lease being installed (and clears the [`LAPSED`] and
    /// [`WAITING`] marks).
    #[inline]
    pub(super) fn set_near(&self, tokens: u64) {
        self.near.store(tokens, Ordering::Relaxed);
    }

    /// Adds units lost with a replaced lease.
    #[inline]
    pub(super) fn add_stranded(&self, units: u64) {
        self.stranded.fetch_add(units, Ordering::Relaxed);
    }

    /// Units this shard lost with replaced leases so far.
    pub(super) fn stranded(&self) -> u64 {
        self.stranded.load(Ordering::Relaxed)
    }

    /// Whether the lease can pay nothing at any reading, however old, and stays so until its
    /// shard takes a new lease: spent to its top, or lapsed at a reading with `ceil` units
    /// earned (rounded up) and then emptied here (`[top, top)`, its units counted as
    /// stranded: no current reading could spend them, and now no older one either; and, for a
    /// shard that takes advances, marked [`LAPSED`], while the lease is locked). `false` while
    /// it is locked, holds units at that reading, or changed under the call.
    pub(super) fn spent_for_good(&self, ceil: u64) -> bool {
        let (q, h) = self.read();
        if q == LOCKED || (q < h && h > ceil) {
            return false;
        }
        if q >= h {
            return true;
        }
        super::counters::shared_write();
        if !self.lock(q, h) {
            return false;
        }
        let a = self.near.load(Ordering::Relaxed);
        if a != 0 {
            self.near.store(a | LAPSED, Ordering::Relaxed);
        }
        self.install(h, h);
        self.add_stranded(h - q);
        true
    }

    /// Empties the lease (`[top, top)`, its unspent units counted as stranded), waiting out a
    /// replacement in progress so that a lease taken from the central word before the caller
    /// lowered it is emptied too (with [`Backoff::snooze`](crate::sync::Backoff::snooze): the
    /// replacing thread may be preempted while it holds the lease). The frontier never falls.
    pub(super) fn empty(&self) {
        let mut backoff = crate::sync::Backoff::default();
        loop {
            let (q, h) = self.read();
            if q == LOCKED {
                backoff.snooze();
                continue;
            }
            if q >= h {
                return;
            }
            if self.lock(q, h) {
                self.install(h, h);
                self.add_stranded(h - q);
                return;
            }
        }
    }

    /// Units the lease can pay at a reading with `earned` units, at most `limit` = earned
    /// rounded down + burst (an advance's later units are not held yet; read-only; 0 while
    /// locked).
    pub(super) fn units(&self, e: Earned, limit: u64) -> u64 {
        let q = self.frontier.load(Ordering::Acquire);
        if q == LOCKED {
            return 0;
        }
        self.top
            .load(Ordering::Relaxed)
            .min(limit)
            .saturating_sub(q.max(e.ceil))
    }
}
