//! Leases: tokens taken from the Redis bucket ahead of time, in one "take at most L" call, and
//! spent locally, lock-free, while the server's clock has not passed them.
//!
//! # What a lease is
//!
//! The Redis bucket is a GCRA: its state is a theoretical arrival time `z` on the server's time
//! axis, in `tollgate::gcra` units (a token is `T = scale` units, the time one token takes to
//! refill). A take of `L` tokens at server time `t0` moves the state from `z0 = max(z, t0)` to
//! `z1 = z0 + L·T`; the leased tokens are exactly the *slices* `[z0 + k·T, z0 + (k+1)·T)`. A
//! leased slice may be spent at server time `t` only while it starts at or after `t`; it
//! *expires* once the server's clock passes its start. The local state is one more GCRA over
//! the server's time axis, in one `AtomicU64`: `next`, the start of the first unspent slice;
//! spending `c` tokens at (estimated) server time `t` moves `next` to `max(next, t) + c·T` if
//! that is at most `z1`, and is refused otherwise ([`spend`]).
//!
//! # The bound: burst + rate·Δ, exactly
//!
//! A direct admission at server time `t` (the script, or a lease's take for its own cost) takes
//! units starting at or after `t` and ending at or before `t + burst·T`. A leased slice spent at
//! `t` (the spend's reading of the server's time) starts at or after `t` by the rule above, and
//! ends at or before `z1 ≤ t0 + burst·T ≤ t + burst·T`: its take was admitted at `t0 ≤ t`,
//! because a spend reads the clock only after loading the lease's `end`, which the take
//! installed after `t0` ([`Table::take_local`]). Redis never hands out a unit twice (its state
//! only grows, and a key that expires is full: every slice it handed out then starts in the
//! past), and a process never spends a slice twice (`next` only grows). So every token admitted
//! at a server time in `[t1, t2]`, by any number of processes, directly or from leases, is a
//! distinct slice of width `T` starting in `[t1, t2 + (burst − 1)·T]`: at most `burst +
//! rate·(t2 − t1)` of them. This holds for any `L`, any number of processes and any lifetime.
//!
//! # The server's time, locally
//!
//! A process never reads the server's clock directly: each take returns the server's `TIME`
//! reading `t0` (microseconds), and the process records its own monotonic clock `s` just before
//! sending the call. The script ran after `s`, so at local time `u` the server's clock reads at
//! most `t0 + 1 µs + (u − s)`; the process uses that upper bound scaled for clock-rate drift,
//! `t0 + 1 µs + (u − s)·(1 + 10⁻⁴)`, so slices expire early, never late. **The one assumption:**
//! the server's clock and the process's monotonic clock run at rates within 100 ppm of each
//! other (NTP keeps both far closer) and the server's clock does not step forward by more than
//! that; a server clock stepped *back* only makes leases expire sooner. The process's clock
//! ([`LocalClock`]) runs on while a process is descheduled, GC-paused or stopped (SIGSTOP), so a
//! lease held across such a pause lapses. On Linux and Android it is `CLOCK_BOOTTIME`, which also
//! runs while the host is suspended, so a lease held across a suspend lapses too; elsewhere it is
//! `Instant`, which on some systems stops during a suspend: a lease held across one there can be
//! spent after the server's clock passed it (at most its unspent tokens).
//!
//! # The cost: under-admission
//!
//! Slices that expire unspent are lost: the bucket had counted them as spent. At most `L` per
//! take, so `processes × L` per round of takes. A lease taken from a full bucket starts at the
//! server's present, so its slices expire one per `T` as time passes, and a process spending at
//! `r` tokens per second uses about `L·r/rate` of them (all of them when `r ≥ rate`); a lease
//! taken from a bucket that is running behind (the hot, limited case) lies in the future and is
//! spent whole. A lease is also dropped after [`Leases::lifetime`], and when a take replaces it.
//!
//! # Choosing L
//!
//! For about `k` local decisions per Redis call at a process's request rate `r` on a bucket
//! with refill rate `rate`, choose `L ≈ k·rate/r` (at least `k`): `Leases::new(256)` on a
//! 10⁶/s key serves a process doing 10⁵ requests/s about 25 decisions per call. Keep `processes
//! × L` well below the burst, or a process's unspent lease delays the others (under-admission
//! while the rate is the limit, never over-admission). Each take asks for `L` tokens (at least
//! the request's cost) and gets what the bucket holds, up to that.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tollgate::Quota;

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
    /// Take at most `max_tokens` per Redis call (at least the request's cost; see the module
    /// docs for choosing it). Defaults: a lifetime cap of 100 ms and at most 10,000 keys leased
    /// at once.
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

    /// The longest a lease is kept after its take (an upper cap: its slices usually expire
    /// sooner, as the server's clock passes them). It plays no part in the window bound.
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

/// The local lease decision (pure): with the first unspent slice at `next`, the lease ending at
/// `end` and the server's clock at most at `now` (all in `tollgate::gcra` units), spending
/// `cost_units` moves `next` to the returned value, or is refused (`None`). Slices that start
/// before `now` have expired.
pub(crate) fn spend(next: u64, now: u64, cost_units: u64, end: u64) -> Option<u64> {
    let after = next.max(now).checked_add(cost_units)?;
    (after <= end).then_some(after)
}

/// `ceil(ns × mul / div)`: the units earned by `ns`, rounded up (an upper bound of the server's
/// position on the state axis), saturating.
fn units_ceil(quota: &Quota, ns: u64) -> u64 {
    let (mul, div) = quota.units_per_ns();
    let u = (u128::from(ns) * u128::from(mul)).div_ceil(u128::from(div.max(1)));
    u64::try_from(u).unwrap_or(u64::MAX)
}

/// Server time upper bound (ns) at local time `local` (ns since the table's start), given the
/// map word `c` (see `Slot::map`): `c + local·(1 + 10⁻⁴)`, rounded up.
fn server_upper(c: i64, local: u64) -> u64 {
    let v = i128::from(c) + i128::from(local) + i128::from(local.div_ceil(DRIFT));
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// Clock-rate drift covered: 1 part in `DRIFT` (100 ppm).
const DRIFT: u64 = 10_000;

/// No mapping yet (`Slot::map`).
const NO_MAP: i64 = i64::MAX;

/// A point in a lease operation where a test runs its own code on the calling thread (a
/// spender paused between its reading and its CAS, a refusal rewritten between a reader's
/// loads): the unit tests, and the end-to-end tests through `on_lease_spend` (feature
/// `test-support`). Compiled to nothing otherwise.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// [`Table::take_local`] decided at reading `now` and is about to CAS.
    Spend {
        /// The reading (read by the unit tests' hooks only).
        #[cfg_attr(not(test), allow(dead_code))]
        now: u64,
    },
    /// [`Table::denied`] between loading the refused cost and the round trip.
    Denied,
}

/// A test's code at a [`Point`].
#[cfg(any(test, feature = "test-support"))]
type Hook = Box<dyn FnMut(Point)>;

#[cfg(any(test, feature = "test-support"))]
std::thread_local! {
    static HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

#[cfg(any(test, feature = "test-support"))]
fn hook(p: Point) {
    // Taken out while it runs, so that a hook may call into the table.
    if let Some(mut h) = HOOK.with(|c| c.borrow_mut().take()) {
        h(p);
        HOOK.with(|c| *c.borrow_mut() = Some(h));
    }
}

#[cfg(not(any(test, feature = "test-support")))]
#[inline(always)]
fn hook(_: Point) {}

/// Runs `pause` on this thread at every lease spend it makes between the spend's reading of
/// the server's time and its CAS, until [`unhook`] (feature `test-support`).
#[cfg(feature = "test-support")]
pub(crate) fn hook_spends(mut pause: impl FnMut() + 'static) {
    let h: Hook = Box::new(move |p| {
        if matches!(p, Point::Spend { .. }) {
            pause();
        }
    });
    HOOK.with(|c| *c.borrow_mut() = Some(h));
}

/// Removes this thread's hook (feature `test-support`).
#[cfg(feature = "test-support")]
pub(crate) fn unhook() {
    HOOK.with(|c| *c.borrow_mut() = None);
}

/// One key's lease: the slices `[next, end)` on the server's time axis (`tollgate::gcra` units).
///
/// | field  | meaning                                                      | writers            |
/// |--------|--------------------------------------------------------------|--------------------|
/// | `next` | start of the first unspent slice                             | CAS by spenders; a take stores |
/// | `end`  | end of the lease (`0` while a take replaces it, or none)     | a take only        |
/// | `map`  | `c` with server ns ≤ `c + local·(1 + 10⁻⁴)` (`i64::MAX` none) | a take only        |
///
/// All `SeqCst`. A take stores `end = 0`, then `map`, then `next`, then `end`. A spender loads
/// `next`, then `end`, then `map` with its clock reading, and CASes `next`: its reading follows
/// the store of the `end` it spends against, so that lease's take ran before the reading. A CAS
/// that succeeds against a replaced lease is still safe, because takes are installed in state
/// order (under the refill lock), so a lease installed later starts at or after every earlier
/// lease's `end` and a stale `end` refuses. (A Redis restart
/// that forgets the state, or a quota change — the state converted into another quota's units
/// and back — can break that order; see the crate README on failover and quota changes.)
#[derive(Debug)]
pub(crate) struct Slot {
    next: AtomicU64,
    end: AtomicU64,
    map: AtomicI64,
    /// Local ns (table scale) after which the lease is dropped ([`Leases::lifetime`]).
    expires: AtomicU64,
    /// After a refused refill: refuse costs `>= denied_cost` locally until `denied_until` (same
    /// scale as `expires`; 0 = none), the refusal's wait counted from just before its call was
    /// sent. Redis ran the call later, and tokens only come back by refilling, so this never
    /// refuses what Redis would admit for those costs — except when a restart forgets the key,
    /// or a process with another, faster quota refills it faster, which it notices one wait
    /// later.
    denied_until: AtomicU64,
    denied_cost: AtomicU64,
    /// The refused call's round trip (ns from its sending to its reply): a refusal served from
    /// the cache reports its wait as counted from the reply, `denied_until + denied_lag − now`,
    /// which is never shorter than Redis's (Redis ran the call before its reply) and longer by
    /// at most this round trip.
    denied_lag: AtomicU64,
    /// The refusal fields' sequence: odd while [`Table::deny`] rewrites them. A reader that
    /// finds it even and unchanged after loading them read one refusal's fields, even if a
    /// later refusal stored the same `denied_until`.
    denied_seq: AtomicU64,
    /// One refill at a time per key and process.
    pub(crate) refill: tokio::sync::Mutex<()>,
    /// The Redis snapshot of the last refill (admitted or refused), and when it was taken.
    pub(crate) last: std::sync::Mutex<Option<(tollgate::Snapshot, Instant)>>,
}

/// The process's clock for leases: nanoseconds since it was made, on a clock that runs while
/// the process is paused or stopped and, on Linux and Android, while the host is suspended
/// (`CLOCK_BOOTTIME`; `CLOCK_MONOTONIC`, `Instant`'s clock there, stops during a suspend, so a
/// lease held across one would be spent after the server's clock passed it). Elsewhere, or where
/// the kernel has no boot clock, `Instant`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LocalClock {
    /// `CLOCK_BOOTTIME` in ns at the start.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Boot(u64),
    /// `Instant` at the start.
    Monotonic(Instant),
}

/// `CLOCK_BOOTTIME` in ns, `None` if the kernel refuses it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

impl LocalClock {
    /// A clock starting now: the boot clock where there is one.
    pub(crate) fn start() -> LocalClock {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(ns) = boot_ns() {
            return LocalClock::Boot(ns);
        }
        LocalClock::Monotonic(Instant::now())
    }

    /// Nanoseconds since the start (saturating).
    pub(crate) fn now(&self) -> u64 {
        match *self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            // A failed read after a successful one (not expected) reads as the far future:
            // every slice lapses, so nothing is spent late.
            LocalClock::Boot(start) => boot_ns().map_or(u64::MAX, |ns| ns.saturating_sub(start)),
            LocalClock::Monotonic(start) => {
                u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }
}

/// The table of lease slots (bounded).
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) cfg: Leases,
    start: LocalClock,
    slots: RwLock<HashMap<Box<str>, Arc<Slot>>>,
}

/// What a take returned, for [`Table::deposit`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Take {
    /// The bucket's absolute state after the take (the lease's `end`).
    pub(crate) state: u64,
    /// Tokens leased beyond the request's own cost.
    pub(crate) tokens: u64,
    /// The server's `TIME` when the script ran (ns since the origin).
    pub(crate) server_ns: u64,
    /// [`Table::now`] just before the call was sent.
    pub(crate) sent: u64,
}

impl Table {
    pub(crate) fn new(cfg: Leases) -> Table {
        Table {
            cfg,
            start: LocalClock::start(),
            slots: RwLock::new(HashMap::new()),
        }
    }

    /// Local ns since the table's start ([`LocalClock`]).
    pub(crate) fn now(&self) -> u64 {
        self.start.now()
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
            // Only slots nobody else holds and whose lease was dropped (dropping them loses
            // nothing that may still be spent).
            slots
                .retain(|_, s| Arc::strong_count(s) > 1 || s.expires.load(Ordering::Acquire) > now);
            if slots.len() >= self.cfg.max_keys {
                return None;
            }
        }
        let slot = Arc::new(Slot {
            next: AtomicU64::new(0),
            end: AtomicU64::new(0),
            map: AtomicI64::new(NO_MAP),
            expires: AtomicU64::new(0),
            denied_until: AtomicU64::new(0),
            denied_cost: AtomicU64::new(u64::MAX),
            denied_lag: AtomicU64::new(0),
            denied_seq: AtomicU64::new(0),
            refill: tokio::sync::Mutex::new(()),
            last: std::sync::Mutex::new(None),
        });
        slots.insert(key.into(), slot.clone());
        Some(slot)
    }

    /// The upper bound of the server's position on the state axis now, if the lease is live.
    fn server_units(&self, slot: &Slot, quota: &Quota) -> Option<u64> {
        let local = self.now();
        if slot.expires.load(Ordering::SeqCst) <= local {
            return None;
        }
        let c = slot.map.load(Ordering::SeqCst);
        (c != NO_MAP).then(|| units_ceil(quota, server_upper(c, local)))
    }

    /// Serves `cost` from the key's lease if it holds enough slices that have not expired.
    ///
    /// The spend is decided at a reading of the server's time taken after loading the lease's
    /// `next` and `end`: the take that installed that `end` ran before the reading (`t0 ≤ t`),
    /// so the slices spent start at or after the reading and end within one burst of it, the
    /// window bound's two conditions (module docs). A CAS that fails reloads `end` and reads
    /// the clock again only if `end` changed (a take replaced the lease; ends only grow, so
    /// an equal `end` is the same lease): one clock read per spend otherwise. A spender paused
    /// between its reading and its CAS still spends at its reading, and may take slices the
    /// server's clock has passed by then; that admission is counted at its reading, where the
    /// slices lie ahead of it, as a core bucket counts a stale reading.
    pub(crate) fn take_local(&self, slot: &Slot, quota: &Quota, cost: u64) -> bool {
        let Some(cost_units) = cost.checked_mul(quota.scale()) else {
            return false;
        };
        let mut next = slot.next.load(Ordering::SeqCst);
        let mut end = slot.end.load(Ordering::SeqCst);
        // The `end` that the reading `now` was taken after (none yet): one call site for the
        // reading keeps the spend's code small.
        let mut read_after = None;
        let mut now = 0;
        loop {
            if read_after != Some(end) {
                let Some(n) = self.server_units(slot, quota) else {
                    return false;
                };
                (now, read_after) = (n, Some(end));
            }
            hook(Point::Spend { now });
            let Some(after) = spend(next, now, cost_units, end) else {
                return false;
            };
            match slot
                .next
                .compare_exchange_weak(next, after, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(cur) => {
                    next = cur;
                    end = slot.end.load(Ordering::SeqCst);
                }
            }
        }
    }

    /// The wait to report if a recent refusal covers `cost` (see `Slot::denied_until`): the
    /// refusal covers it until its wait, counted from the refused call's sending, has passed;
    /// the wait reported is counted from its reply (`Slot::denied_lag`), so that it is never
    /// shorter than Redis's. For a cost above the refused one it is lengthened by the refill
    /// time of the difference, which is what the bucket Redis refused from needs for it (a wait
    /// grows by exactly that with the cost, rounded up here), so that no client is told to come
    /// back before its cost can be held. `None` also while [`deny`](Self::deny) rewrites the
    /// fields: the sequence (`Slot::denied_seq`) read even and unchanged around the loads dates
    /// the until, the cost and the round trip to one refusal.
    pub(crate) fn denied(&self, slot: &Slot, quota: &Quota, cost: u64) -> Option<Duration> {
        let seq = slot.denied_seq.load(Ordering::Acquire);
        let until = slot.denied_until.load(Ordering::Acquire);
        let refused = slot.denied_cost.load(Ordering::Acquire);
        hook(Point::Denied);
        let lag = slot.denied_lag.load(Ordering::Acquire);
        // The loads above are Acquire, so this one cannot move before them; a rewrite whose
        // fields they saw has made the sequence odd before storing them (Release).
        if seq % 2 == 1 || slot.denied_seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let now = self.now();
        (until > now && cost >= refused).then(|| {
            Duration::from_nanos((until - now).saturating_add(lag))
                .saturating_add(quota.refill_time(cost - refused))
        })
    }

    /// Remembers a refusal of `cost` with `wait` by the call sent at `sent` ([`now`](Self::now)
    /// just before sending it; its reply is now), and the refused refill's `snapshot` (Redis's
    /// view of the bucket then: the refusals served from this cache report it, not the last
    /// successful refill's). Call with the refill lock held (one writer at a time: the sequence
    /// `Slot::denied_seq` is odd during the rewrite).
    pub(crate) fn deny(
        &self,
        slot: &Slot,
        cost: u64,
        wait: Duration,
        sent: u64,
        snapshot: tollgate::Snapshot,
    ) {
        let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        let reply = self.now();
        slot.denied_seq.fetch_add(1, Ordering::AcqRel);
        slot.denied_until.store(0, Ordering::Release);
        slot.denied_cost.store(cost, Ordering::Release);
        slot.denied_lag
            .store(reply.saturating_sub(sent), Ordering::Release);
        slot.denied_until
            .store(sent.saturating_add(wait), Ordering::Release);
        slot.denied_seq.fetch_add(1, Ordering::AcqRel);
        *slot.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((snapshot, Instant::now()));
    }

    /// Whole tokens left in the key's lease that have not expired.
    pub(crate) fn local_available(&self, slot: &Slot, quota: &Quota) -> u64 {
        let Some(now) = self.server_units(slot, quota) else {
            return 0;
        };
        let next = slot.next.load(Ordering::SeqCst).max(now);
        slot.end.load(Ordering::SeqCst).saturating_sub(next) / quota.scale().max(1)
    }

    /// How many tokens the next take asks for: `L`, at least `cost`.
    pub(crate) fn next_take(&self, cost: u64) -> u64 {
        self.cfg.max_tokens.max(cost)
    }

    /// Replaces the key's lease with the slices of `take` beyond the request's own cost (already
    /// debited in Redis). Call with the refill lock held. The previous lease's unspent slices are
    /// dropped (under-admission, never over-admission).
    pub(crate) fn deposit(
        &self,
        slot: &Slot,
        quota: &Quota,
        take: Take,
        snapshot: tollgate::Snapshot,
    ) {
        // Clears the refusal cache outside its sequence (`Slot::denied_seq`), which keeps a
        // reader from mixing two refusals' fields; this store writes no refusal. A reader that
        // loads this 0 serves nothing. One that loaded the until before it read one refusal
        // whole ([`Table::denied`] checks the sequence) and serves it at its own later reading,
        // where that refusal still holds: its wait, counted from its reply, is never shorter
        // than Redis's, and until it passes Redis admits no cost it covers (tokens come back
        // only by refilling; this refill was for a smaller cost, or is one of the exceptions
        // on `Slot::denied_until`). A reader done just before this store would serve the same.
        // A sequence here would not close the overlap: a reader may check it just before this
        // store and return after it.
        slot.denied_until.store(0, Ordering::Release);
        // server ≤ t0 + 1 µs + (u − sent)·(1 + 1/DRIFT) = c + u·(1 + 1/DRIFT), with
        // c = t0 + 1 µs − sent − sent/DRIFT (rounded down, so the bound only grows).
        let c = i128::from(take.server_ns) + 1000
            - i128::from(take.sent)
            - i128::from(take.sent / DRIFT);
        let c = i64::try_from(c).unwrap_or(NO_MAP - 1);
        let start = take
            .tokens
            .checked_mul(quota.scale())
            .and_then(|u| take.state.checked_sub(u));
        slot.end.store(0, Ordering::SeqCst);
        if let Some(start) = start {
            slot.map.store(c, Ordering::SeqCst);
            slot.next.store(start, Ordering::SeqCst);
            slot.end.store(take.state, Ordering::SeqCst);
        }
        let lifetime = u64::try_from(self.cfg.lifetime.as_nanos()).unwrap_or(u64::MAX);
        slot.expires
            .store(take.sent.saturating_add(lifetime), Ordering::SeqCst);
        *slot.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((snapshot, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On Linux and Android the lease clock is the boot clock, which runs while the host is
    /// suspended (`CLOCK_MONOTONIC` stops there, so a lease would be spent late after a resume):
    /// the table's readings lie between two readings of `CLOCK_BOOTTIME` taken around them.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_lease_clock_is_the_boot_clock() {
        let before = boot_ns().expect("a boot clock");
        let clock = LocalClock::start();
        let LocalClock::Boot(start) = clock else {
            panic!("not the boot clock: {clock:?}");
        };
        assert!(before <= start);
        std::thread::sleep(Duration::from_millis(2));
        let a = boot_ns().unwrap();
        let now = clock.now();
        let b = boot_ns().unwrap();
        assert!(
            a - start <= now && now <= b - start,
            "{a} {now} {b} {start}"
        );
        assert!(now >= 2_000_000);
        assert_eq!(LocalClock::Boot(u64::MAX).now(), 0, "saturates");
        let table = Table::new(Leases::new(1));
        assert!(
            matches!(table.start, LocalClock::Boot(_)),
            "{:?}",
            table.start
        );
    }
    #[test]
    fn spend_is_a_gcra_over_server_time() {
        // Lease [100, 160), T = 10.
        assert_eq!(spend(100, 0, 10, 160), Some(110));
        assert_eq!(spend(110, 95, 50, 160), Some(160));
        assert_eq!(spend(160, 0, 10, 160), None, "all spent");
        // Time passed the first slices: they expired.
        assert_eq!(spend(100, 135, 10, 160), Some(145));
        assert_eq!(spend(100, 135, 30, 160), None, "only 2.5 slices left");
        assert_eq!(spend(100, 150, 10, 160), Some(160));
        assert_eq!(spend(100, 151, 10, 160), None, "the last slice started");
        // Edges: zero cost, huge values never wrap.
        assert_eq!(spend(100, 0, 0, 160), Some(100));
        assert_eq!(spend(u64::MAX - 1, 0, 10, u64::MAX), None);
        assert_eq!(spend(0, u64::MAX, 1, u64::MAX), None);
    }

    #[test]
    fn server_time_bound_rounds_up_and_covers_drift() {
        // c = 5000 ns; at local 10^6 ns the bound is 5000 + 10^6 + 100.
        assert_eq!(server_upper(5000, 1_000_000), 1_005_100);
        assert_eq!(server_upper(5000, 1), 5002);
        assert_eq!(server_upper(-10, 0), 0, "clamped at the origin");
        assert_eq!(server_upper(i64::MAX - 1, u64::MAX), u64::MAX);
        let q = Quota::new(3, Duration::from_nanos(7), 10).unwrap();
        let (mul, div) = q.units_per_ns();
        assert_eq!(units_ceil(&q, 1), mul.div_ceil(div));
        assert_eq!(units_ceil(&q, 0), 0);
    }

    fn table_with_lease(tokens: u64, quota: &Quota) -> (Table, Arc<Slot>) {
        let t = Table::new(Leases::new(10).lifetime(Duration::from_secs(3600)));
        let s = t.slot("k").unwrap();
        // A lease far in the server's future: the local clock cannot reach it in the test.
        let take = Take {
            state: units_ceil(quota, 3_600_000_000_000),
            tokens,
            server_ns: 0,
            sent: t.now(),
        };
        t.deposit(&s, quota, take, tollgate::Snapshot::new(0, Duration::ZERO));
        (t, s)
    }

    #[test]
    fn deposit_take_and_replace() {
        let q = Quota::per_second(1).unwrap();
        let t = Table::new(Leases::new(10));
        let s = t.slot("k").unwrap();
        assert!(!t.take_local(&s, &q, 1), "no lease yet");
        let (t, s) = table_with_lease(3, &q);
        assert_eq!(t.local_available(&s, &q), 3);
        assert!(t.take_local(&s, &q, 2));
        assert!(!t.take_local(&s, &q, 2));
        assert!(t.take_local(&s, &q, 1));
        assert!(!t.take_local(&s, &q, 1));
        assert!(t.take_local(&s, &q, 0), "cost 0 needs no slice");
        assert!(
            !t.take_local(&s, &q, u64::MAX),
            "a huge cost is refused, not wrapped"
        );
    }

    #[test]
    fn slices_expire_as_the_server_clock_passes_them() {
        // 1 token per second; the lease holds the slices starting at 1 s, 2 s and 3 s.
        let q = Quota::per_second(1).unwrap();
        let deposit_at = |server_ns: u64| {
            let t = Table::new(Leases::new(10).lifetime(Duration::from_secs(3600)));
            let s = t.slot("k").unwrap();
            let take = Take {
                state: units_ceil(&q, 4_000_000_000),
                tokens: 3,
                server_ns,
                sent: t.now(),
            };
            t.deposit(&s, &q, take, tollgate::Snapshot::new(0, Duration::ZERO));
            (t, s)
        };
        let (t, s) = deposit_at(0);
        assert_eq!(t.local_available(&s, &q), 3, "all slices lie ahead");
        let (t, s) = deposit_at(2_500_000_000);
        assert_eq!(
            t.local_available(&s, &q),
            1,
            "the slices at 1 s and 2 s expired"
        );
        assert!(t.take_local(&s, &q, 1));
        assert!(!t.take_local(&s, &q, 1));
        // The reading is rounded down to a microsecond: half a microsecond before a slice starts, it is
        // already treated as passed.
        let (t, s) = deposit_at(2_999_999_500);
        assert_eq!(t.local_available(&s, &q), 0);
        let (t, s) = deposit_at(2_900_000_000);
        assert_eq!(t.local_available(&s, &q), 1);
    }

    #[test]
    fn concurrent_spenders_share_the_lease_exactly() {
        let q = Quota::per_second(1).unwrap();
        let (t, s) = table_with_lease(1000, &q);
        let spent = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for _ in 0..8 {
                sc.spawn(|| {
                    for _ in 0..500 {
                        if t.take_local(&s, &q, 1) {
                            spent.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(spent.load(Ordering::Relaxed), 1000);
        assert_eq!(t.local_available(&s, &q), 0);
    }

    #[test]
    fn a_lifetime_drops_the_lease() {
        let q = Quota::per_second(1).unwrap();
        let t = Table::new(Leases::new(10).lifetime(Duration::from_nanos(1)));
        let s = t.slot("k").unwrap();
        let take = Take {
            state: units_ceil(&q, 4_000_000_000),
            tokens: 3,
            server_ns: 0,
            sent: t.now(),
        };
        t.deposit(&s, &q, take, tollgate::Snapshot::new(0, Duration::ZERO));
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(t.local_available(&s, &q), 0);
        assert!(!t.take_local(&s, &q, 1));
    }

    #[test]
    fn bounded_keys() {
        let t = Table::new(Leases::new(4).max_keys(2));
        let a = t.slot("a").unwrap();
        let _b = t.slot("b").unwrap();
        assert!(t.slot("c").is_none(), "held slots are not evicted");
        drop(a);
        assert!(
            t.slot("c").is_some(),
            "an unheld slot without a lease makes room"
        );
    }

    /// A cached refusal ends once its wait has passed since the refused call was sent (Redis
    /// ran it later, so it admits no sooner), and reports its wait counted from the reply
    /// (never shorter than Redis's): with a 10 ms round trip and a 30 ms wait, a request right
    /// after the reply is told about 30 ms, and one 21 ms after the reply is not refused.
    #[test]
    fn a_cached_refusal_ends_from_the_sending_and_reports_from_the_reply() {
        let q = Quota::per_second(1).unwrap();
        let t = Table::new(Leases::new(1));
        let s = t.slot("k").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let sent = t.now() - 10_000_000;
        let wait = Duration::from_millis(30);
        let replied = Instant::now();
        t.deny(
            &s,
            2,
            wait,
            sent,
            tollgate::Snapshot::new(0, Duration::ZERO),
        );
        assert_eq!(t.denied(&s, &q, 1), None, "a smaller cost is not covered");
        let told = t.denied(&s, &q, 2).expect("refused");
        let since = replied.elapsed();
        assert!(
            told <= wait && told + since >= wait,
            "told {told:?} {since:?} after the reply"
        );
        let larger = t.denied(&s, &q, 3).expect("refused");
        assert!(
            larger > Duration::from_secs(1) && larger <= told + Duration::from_secs(1),
            "one more token: a second more, {larger:?}"
        );
        std::thread::sleep(Duration::from_millis(21).saturating_sub(replied.elapsed()));
        assert_eq!(t.denied(&s, &q, 2), None, "30 ms after the sending");
    }

    /// Installs `h` as this thread's hook (see [`Point`]) until the guard drops.
    fn with_hook(h: impl FnMut(Point) + 'static) -> impl Drop {
        struct Unhook;
        impl Drop for Unhook {
            fn drop(&mut self) {
                HOOK.with(|c| *c.borrow_mut() = None);
            }
        }
        HOOK.with(|c| *c.borrow_mut() = Some(Box::new(h)));
        Unhook
    }

    /// A spender paused between its reading and its CAS while a refill replaces the lease with
    /// one taken after that reading. Counted at the readings the spends were decided at (the
    /// window bound's terms, as the core counts a stale reading), the window never holds more
    /// than `burst + rate·Δ`: the spend is decided at a reading taken after the lease it spends
    /// from was installed, never at one taken before it.
    #[test]
    fn a_paused_spender_never_spends_a_later_lease_at_its_earlier_reading() {
        use std::sync::mpsc;
        use tollgate_testkit::window::WindowChecker;
        // 1 token per second, burst 3: a unit is a nanosecond of the server's clock.
        let q = Quota::new(1, Duration::from_secs(1), 3).unwrap();
        assert_eq!(q.scale(), 1_000_000_000);
        let sec = |n: u64| n * 1_000_000_000;
        let t = Table::new(Leases::new(3).lifetime(Duration::from_secs(3600)));
        let s = t.slot("k").unwrap();
        let window = WindowChecker::new();
        let snap = tollgate::Snapshot::new(0, Duration::ZERO);
        // Server time 0, a full bucket: a take of 3 admits its own token and leases the slices
        // at 1 s and 2 s.
        let take = |state: u64, server_ns: u64| Take {
            state,
            tokens: 2,
            server_ns,
            sent: t.now(),
        };
        t.deposit(&s, &q, take(sec(3), 0), snap);
        window.admit(0, 1);
        let (reached, at_gate) = mpsc::channel();
        let (open, gate) = mpsc::channel::<()>();
        let (tr, sr, qr) = (&t, &s, &q);
        std::thread::scope(|sc| {
            let spender = sc.spawn(move || {
                let last = std::rc::Rc::new(std::cell::Cell::new(None));
                let seen = last.clone();
                let mut first = true;
                let _h = with_hook(move |p| {
                    if let Point::Spend { now } = p {
                        seen.set(Some(now));
                        if std::mem::take(&mut first) {
                            reached.send(now).unwrap();
                            gate.recv().unwrap();
                        }
                    }
                });
                tr.take_local(sr, qr, 1).then(|| last.get().unwrap())
            });
            let paused_at = at_gate.recv().unwrap();
            assert!(
                paused_at < sec(1),
                "the spender read the server's time near 0"
            );
            // The lease's two slices are spent at once (readings near 0): the burst is used.
            for _ in 0..2 {
                let at = std::rc::Rc::new(std::cell::Cell::new(None));
                let seen = at.clone();
                let h = with_hook(move |p| {
                    if let Point::Spend { now } = p {
                        seen.set(Some(now));
                    }
                });
                assert!(t.take_local(&s, &q, 1));
                drop(h);
                window.admit(at.get().unwrap(), 1);
            }
            // At server time 3 s the bucket is full again: a take of 3 admits its own token
            // and leases the slices at 4 s and 5 s.
            t.deposit(&s, &q, take(sec(6), sec(3)), snap);
            window.admit(sec(3), 1);
            open.send(()).unwrap();
            if let Some(at) = spender.join().unwrap() {
                window.admit(at, 1);
            }
        });
        assert_eq!(
            window.check(&q),
            Ok(()),
            "a spend counted at a reading taken before its lease"
        );
    }

    /// A refill that succeeds while a reader is between its loads of a cached refusal (the
    /// cache cleared outside the refusal's sequence): the reader serves the refusal it read,
    /// whole, its wait counted from that refusal's reply at the reader's own reading; the next
    /// reader finds the cache cleared.
    #[test]
    fn a_refill_during_a_cached_refusal_read_serves_that_refusal_whole() {
        let q = Quota::per_second(1).unwrap();
        let t = std::rc::Rc::new(Table::new(
            Leases::new(1).lifetime(Duration::from_secs(3600)),
        ));
        let s = t.slot("k").unwrap();
        let snap = tollgate::Snapshot::new(0, Duration::ZERO);
        let ms = |n: u64| n * 1_000_000;
        std::thread::sleep(Duration::from_millis(110));
        // A refusal of cost 2 with a 100 ms round trip and a 10 s wait from its sending.
        let sent = t.now() - ms(100);
        let until = sent + ms(10_000);
        t.deny(&s, 2, Duration::from_nanos(until - sent), sent, snap);
        let lag = s.denied_lag.load(Ordering::Acquire);
        assert!(lag >= ms(100));
        let refilled = std::rc::Rc::new(std::cell::Cell::new(false));
        let (t2, s2, done) = (t.clone(), s.clone(), refilled.clone());
        let h = with_hook(move |p| {
            if matches!(p, Point::Denied) && !done.replace(true) {
                let take = Take {
                    state: units_ceil(&q, 3_600_000_000_000),
                    tokens: 1,
                    server_ns: 0,
                    sent: t2.now(),
                };
                t2.deposit(&s2, &q, take, snap);
            }
        });
        let before = t.now();
        let got = t.denied(&s, &q, 3);
        let after = t.now();
        drop(h);
        assert!(refilled.get(), "the refill ran between the reader's loads");
        let w = got.expect("the refusal read before the refill, whole");
        // Cost 3 is one token above the refused 2: one second more than the refusal's wait.
        let lo = Duration::from_nanos(until + lag - after) + Duration::from_secs(1);
        let hi = Duration::from_nanos(until + lag - before) + Duration::from_secs(1);
        assert!(lo <= w && w <= hi, "{w:?} not in [{lo:?}, {hi:?}]");
        assert_eq!(t.denied(&s, &q, 3), None, "the refill cleared the cache");
    }

    /// A cached refusal read while another refusal with the same `until` rewrites the fields
    /// is either refusal's, never the first one's cost with the second one's round trip: that
    /// mix reports a wait shorter than the later refusal's (and than Redis's, which may have run
    /// the call as late as its reply).
    #[test]
    fn a_cached_refusal_never_mixes_two_refusals() {
        let q = Quota::per_second(1).unwrap();
        let t = std::rc::Rc::new(Table::new(Leases::new(1)));
        let s = t.slot("k").unwrap();
        let snap = tollgate::Snapshot::new(0, Duration::ZERO);
        let ms = |n: u64| n * 1_000_000;
        std::thread::sleep(Duration::from_millis(110));
        // Refusal 1: cost 3, answered at once, until U.
        let sent1 = t.now();
        let until = sent1 + ms(10_000);
        t.deny(&s, 3, Duration::from_nanos(until - sent1), sent1, snap);
        let lag1 = s.denied_lag.load(Ordering::Acquire);
        // Refusal 2 (between the reader's loads): cost 1, a 100 ms round trip, the same U.
        let lag2 = Duration::from_millis(100);
        let rewritten = std::rc::Rc::new(std::cell::Cell::new(false));
        let (t2, s2, done) = (t.clone(), s.clone(), rewritten.clone());
        let h = with_hook(move |p| {
            if matches!(p, Point::Denied) && !done.replace(true) {
                let sent2 = t2.now() - ms(100);
                t2.deny(&s2, 1, Duration::from_nanos(until - sent2), sent2, snap);
            }
        });
        let before = t.now();
        let got = t.denied(&s, &q, 3);
        let after = t.now();
        drop(h);
        assert!(
            rewritten.get(),
            "the refusal was rewritten between the loads"
        );
        if let Some(w) = got {
            // Refusal 1 read whole: at most U + lag1 − before. Refusal 2 read whole: cost 3 is
            // two tokens above its cost, so at least U + lag2 + 2 s − after.
            let first = Duration::from_nanos(until + lag1 - before);
            let second = Duration::from_nanos(until - after) + lag2 + Duration::from_secs(2);
            assert!(
                w <= first || w >= second,
                "{w:?}: neither refusal 1's ({first:?} at most) nor refusal 2's ({second:?} at least)"
            );
        }
    }
}
