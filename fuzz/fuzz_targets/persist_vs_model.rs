//! Saved state surviving a restart (feature `persist`): a limiter driven by a manual clock
//! (advances, steps back, stale readings), saved at fuzz-chosen points with `save_at` and
//! restored with `restore_at` into a fresh limiter on a clock of its own (another origin), after
//! a downtime on the wall clock (none, short, long, a wall clock stepped back within
//! `FUTURE_TOLERANCE`, or beyond it). The restored limiter then decides, and the one saved
//! follows it in lockstep at the same instants (its clock moved on by the downtime the restore
//! counted). Checked, as `docs/guarantees.md` ("`save` → `restore`") and `src/persist.rs` promise:
//!
//! * `Bucket`, `MultiBucket` (the same quotas in any order): exact quotas decide as
//!   the saved limiter would from the restore's instant on, verdict for verdict, waits and
//!   snapshots included; inexact ones never more (an admission the saved one also admits,
//!   `available` and snapshots never above its), to within the one unit (`1 / scale` token)
//!   by which two clocks of other origins round apart (`Slack`); `Smooth` admits only what
//!   the saved limiter admits and waits no less, to within 1 µs of `f64` rounding;
//! * another quota (`Bucket`), rate (`Smooth`) or quotas (`MultiBucket`: changed, reordered) are
//!   carried over as `set_quota`/`set_rate` carry them, the saved `MultiBucket`'s quotas paired
//!   as the docs say (equal, else the only one of a period on each side, else the strictest of
//!   the unpaired) against one `gcra` reference state per quota; another number of quotas is
//!   `LimitsChanged`, and a file from further in the future than the tolerance
//!   `FromTheFuture`, both leaving the fresh limiter as built;
//! * `KeyedLimiter` (no evictions at the first size): per key, the restored table admits only
//!   what the saved one does; `ShardedBucket` (the shard chosen): right after a restore it
//!   holds no more than the saved one (leases count as spent), a save at a reading behind its
//!   state included (the debt travels). The keyed table is not saved more than a refill of
//!   the burst behind its latest admission: the restore cuts a debt beyond two refills, as
//!   documented (`a_key_saved_far_behind_its_last_admission_keeps_two_refills_of_debt`);
//! * `KeyedMultiLimiter` (1 to 6 keys in a table of 1 to as many, so full keys are evicted and
//!   untracked ones start at the floor; some keys with an override; the default and each
//!   override changed, reordered or resized across a restart as `multi` changes its policy):
//!   per key, one `gcra` reference state per quota, paired across restores as `multi` pairs
//!   them (a key full at the save, not saved, restores full under its policy here), which the
//!   table never admits beyond and never holds more than, to within `Slack`; the saved table
//!   likewise while it has neither evicted nor refused for a full table (its floor and room
//!   are its own); another quota count in any policy pair is `LimitsChanged`;
//! * both keyed tables restart, as the op byte's high part (`Onto`) picks, through the builder
//!   (the saved seed) at the saved size (kinds 5 and 6: what older inputs did), or at another
//!   `max_keys` (1 to twice the keys: saved entries beyond it raise the floor for untracked
//!   keys to their full instants), or into a limiter built with a seed of its own (no entry is
//!   found: each raises the floor; only the defaults' quota counts must match, a key whose
//!   override changed its count is held to the strictest any saved quota converts to), or
//!   not at all: the file just saved, or the one before, restored into the live table, which
//!   only withholds. The per-key bounds above (the windows; the `gcra` references) hold across
//!   all of them; the saved table bounds the restored one until it evicts or refuses for a
//!   full table itself. A `KeyedMultiLimiter`'s references take the documented cut: a key full
//!   later than two refills of the restoring table's slowest quota after the restore (a debt a
//!   conversion carried past its saved burst: `cut_at`) is held to full two refills after it,
//!   and its saved table bounds the restored one only where it holds no key past that cut
//!   (`within_cut`): the restore cuts, the saved table does not;
//! * a `KeyedMultiLimiter` also restarts (`Onto::Paired`) through the builder's
//!   `restore_paired_at` into policies of as many quotas as the pairs the input chose (quotas
//!   added, removed, moved, kept or changed; pairs `None` or naming a saved quota, and some
//!   that do not fit: too few, too many, past a saved policy's quotas, or one policy of
//!   another count, each `BadPairs` with nothing built, every field checked: `pairs` the
//!   number given, `quotas` and `saved` the quota counts here and saved of the first pair of
//!   policies they do not fit, the defaults' where they do not fit them, else some
//!   override's, whose order the restore does not fix). Right after it, per key, a paired
//!   quota holds no more than the saved one's reference converted, and an unpaired one is
//!   exactly full wherever no floor for untracked keys can apply (every table so far large
//!   enough for all keys, none of another seed); the `gcra` references (the unpaired quotas
//!   full, the documented cut taken) then bound every decision as above;
//! * per key, a quota equal on both sides of a restart whose state carries over (paired by the
//!   caller, or by the docs' pairing) keeps its windows across it: its era runs on;
//! * every quota's admissions, across every restart of the same quota, within
//!   `burst + rate·Δ` in exact rationals (per quota era where the quota changed).
//!
//! The input's first byte picks the limiter: one value in six, zero among them, a
//! `KeyedMultiLimiter`, whose bytes read as zeros past the input's end give a table of 3 keys,
//! some with an override, and whose input ends in decisions for every key and, where its word
//! says (zero bits among those), a restart between two decisions per key: through
//! `Onto::Paired` for five values in eight, zero among them, else into another seed, another
//! size or the same. So a short input already restarts a table with overrides through
//! `Onto::Paired`, and a bounded run from an empty corpus reaches that path within seconds.
//! Those short inputs keep finding new paths, which holds libFuzzer's length limit back (it
//! rises only after a stretch of runs that find nothing): `ci/fuzz.sh` runs this target with
//! `-len_control=20`, so that within 30 s the limit passes the 48 bytes the sharded and keyed
//! limiters read before their first op; do the same for a short run by hand.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, SystemTime};
use tollgate::persist::{RestoreError, FUTURE_TOLERANCE};
use tollgate::{
    gcra, Bucket, Clock, Denied, KeyedLimiter, KeyedMultiLimiter, KeyedMultiLimiterBuilder,
    Limiter, Limits, ManualClock, MultiBucket, Quota, ShardedBucket, Smooth,
};

#[path = "common/bytes.rs"]
mod bytes;
#[path = "common/multi_cost.rs"]
mod multi_cost;
#[path = "common/quota.rs"]
mod quota;
#[path = "common/units_window.rs"]
mod units_window;

use bytes::Bytes;
use multi_cost::multi_cost;
use quota::quota;

/// Global readings stay below 2^60 and a restored clock's origin below 2^59: far inside the
/// bucket's 100-year horizon, where a clock reads as stopped. A whole number of µs, so that
/// `Smooth`'s readings stay whole µs when clamped to it.
const T_MAX: u64 = (1 << 60) / 1000 * 1000;

/// Another quota derived from `q` by `x`: the same period (so that a `MultiBucket` pairs it by
/// period) with rate and burst scaled by 1/4 to 4, or one read from the input.
fn changed(q: &Quota, x: u64, b: &mut Bytes<'_>) -> Option<Quota> {
    if x & 1 == 0 {
        let tokens = (q.tokens() * (1 + (x >> 1 & 15)) / 4).clamp(1, 1 << 34);
        let burst = (q.burst() * (1 + (x >> 5 & 15)) / 4).clamp(1, 1 << 12);
        Quota::new(tokens, q.per(), burst).ok()
    } else {
        quota(b)
    }
}

/// The quota to restore into, chosen by `x`: mostly `q` itself, else one `changed` from it.
fn next_quota(q: &Quota, x: u64, b: &mut Bytes<'_>) -> Option<Quota> {
    if x >> 60 == 0 {
        changed(q, x >> 20, b)
    } else {
        Some(*q)
    }
}

/// How far a restored limiter of inexact quotas may be ahead of the one it was saved from, in
/// tokens: two buckets of an inexact quota in the same state decide apart by up to one unit
/// (`1 / scale` token) on clocks of other origins (each decision, `set_quota` and restore
/// rounds what a quota earned by its own reading: `Quota::is_exact`, and the unit of slack in
/// `units_window.rs`), so "never more" holds to within the units such roundings add up to.
/// Carried to a quota of another rate, a token's difference is that rate's time.
#[derive(Clone, Copy, Default)]
struct Slack(f64);

impl Slack {
    /// One unit of each quota given.
    fn units(quotas: &[Quota]) -> Slack {
        Slack(quotas.iter().map(|q| 1.0 / q.scale() as f64).sum())
    }

    /// The wait the slack refills under the slowest of `quotas` (ns, rounded up, plus 2 for
    /// the waits' own rounding); 0 for none.
    fn ns(self, quotas: &[Quota]) -> u64 {
        if self.0 == 0.0 {
            return 0;
        }
        let per_token = |q: &Quota| q.per().as_nanos() as f64 / q.tokens() as f64;
        let slowest = quotas.iter().map(per_token).fold(0.0, f64::max);
        (self.0 * slowest).ceil().min(1e18) as u64 + 2
    }

    /// The whole tokens `available` or a snapshot may be over by.
    fn more(self) -> u64 {
        self.0.ceil() as u64
    }
}

/// Whether a refusal is one an admission may meet across a reconfiguration's rounding.
fn within(r: Result<(), Denied>, slack_ns: u64) -> bool {
    matches!(r, Ok(()))
        || matches!(r, Err(Denied::RetryAfter(w)) if w <= Duration::from_nanos(slack_ns))
}

/// The time of one token of `q` (ns, at least 1).
fn step_of(q: &Quota) -> u64 {
    q.refill_time(1).as_nanos().clamp(1, 1 << 40) as u64
}

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

/// A limiter's clock: its reading is the global time plus an offset (the restored process's
/// clock has an origin of its own).
struct Clocked {
    clock: ManualClock,
    offset: i128,
}

impl Clocked {
    fn at(&self, t: u64) {
        let r = i128::from(t) + self.offset;
        self.clock
            .set(Duration::from_nanos(u64::try_from(r).unwrap()));
    }
}

/// The global time (the first limiter's clock), the wall clock it maps to, and the earliest
/// reading allowed: the promises cover instants from the latest restore's on.
struct Timeline {
    t: u64,
    floor: u64,
    /// The wall time at global time `wall_t`; the wall clock moves with the global time.
    wall_ns: u64,
    wall_t: u64,
    /// µs granularity (for `Smooth`, whose readings are whole µs since its origin).
    grain: u64,
}

/// What a restore is asked to do.
enum Restart {
    /// Restored: the downtime the restore counted (0 for a wall clock stepped back), the
    /// restoring process's clock origin, and the wall time of the restore.
    Ok { down: u64, origin: u64, at: u64 },
    /// A file dated further ahead than the tolerance: `FromTheFuture`.
    Future { at: u64 },
}

impl Timeline {
    fn new(x: u64, grain: u64) -> Timeline {
        let t = (x % (1 << 50)) / grain * grain;
        Timeline {
            t,
            floor: t,
            wall_ns: 1_700_000_000_000_000_000 + (x >> 50),
            wall_t: t,
            grain,
        }
    }

    /// The wall time now (later readings move it on; a stepped-back reading moves it back).
    fn wall(&self) -> u64 {
        (i128::from(self.wall_ns) + i128::from(self.t) - i128::from(self.wall_t)) as u64
    }

    fn forward(&mut self, by: u64) {
        self.t = (self.t + by / self.grain * self.grain).min(T_MAX);
    }

    fn back(&mut self, by: u64) {
        self.t = self
            .t
            .saturating_sub(by / self.grain * self.grain)
            .max(self.floor);
    }

    /// Moves the time as op `kind` (of 12) asks, on the scale of `step` (one token's time) and
    /// `burst`: 0 and 1 on by up to 4 tokens' time, 2 by up to twice the burst's, 3 back by up
    /// to the burst's; `false` for the other ops.
    fn drift(&mut self, kind: u8, x: u64, step: u64, burst: u64) -> bool {
        match kind {
            0 | 1 => self.forward(x % (4 * step + 1)),
            2 => self.forward(x % (2 * burst * step + 1)),
            3 => self.back(x % (burst * step + 1)),
            _ => return false,
        }
        true
    }

    /// The time and clock behaviour of a restart chosen by `x` (the downtime on the scale of
    /// `step`·`burst`), after a save at the current wall time.
    fn restart(&self, x: u64, step: u64, burst: u64) -> Restart {
        let saved = self.wall();
        let tol = FUTURE_TOLERANCE.as_nanos() as u64;
        let g = self.grain;
        let origin = (x >> 40) * 0x9E37_79B9 % (1 << 59) / g * g;
        let down = |d: u64| (d / g * g).min((T_MAX - self.t) / g * g);
        match x % 8 {
            0 => Restart::Ok {
                down: 0,
                origin,
                at: saved,
            },
            1..=3 => {
                let d = down((x >> 3) % (2 * burst * step + 1));
                Restart::Ok {
                    down: d,
                    origin,
                    at: saved + d,
                }
            }
            4 => {
                let d = down((x >> 3) % (1 << 58));
                Restart::Ok {
                    down: d,
                    origin,
                    at: saved + d,
                }
            }
            5 | 6 => Restart::Ok {
                down: 0,
                origin,
                at: saved - (x >> 3) % (tol + 1),
            },
            _ => Restart::Future {
                at: saved - tol - 1 - (x >> 3) % (1 << 40),
            },
        }
    }

    /// Moves the global time over the downtime and anchors the wall clock at the restore; the
    /// restoring process's clock, reading `origin` then.
    fn restarted(&mut self, down: u64, origin: u64, at: u64) -> Clocked {
        self.t += down;
        self.floor = self.t;
        self.wall_ns = at;
        self.wall_t = self.t;
        Clocked::restarted_at(origin, self.t)
    }
}

/// The cost of a decision: mostly small, sometimes the edges (0, the burst, above it).
fn cost_of(x: u64, burst: u64) -> u64 {
    match x % 8 {
        0..=3 => 1,
        4 => 1 + (x >> 8) % burst.min(4),
        5 => (x >> 8) % (burst + 2),
        6 => burst,
        _ => [0, burst + 1, burst.min(2)][((x >> 8) % 3) as usize],
    }
}

/// A refused restore: `FromTheFuture`, or `LimitsChanged` where the quotas are `resized`; the
/// fresh limiter left as built (`available`, read after the restore, is its `burst`).
fn refused(e: RestoreError, resized: bool, available: u64, burst: u64, what: &str) {
    assert!(
        matches!(e, RestoreError::FromTheFuture { .. })
            || resized && matches!(e, RestoreError::LimitsChanged { .. }),
        "{what}: {e:?}"
    );
    assert_eq!(available, burst, "{what}: a failed restore changed it");
}

/// The admissions of one quota era, in global time, checked against its window bound.
fn check_windows(q: &Quota, admitted: &mut Vec<(u64, u64)>, what: &str) {
    if let Some(v) = units_window::violation(q, admitted, 0) {
        panic!("{what}: {q:?}: {v}");
    }
    admitted.clear();
}

/// What a keyed table restarts into, chosen by the op byte's high part (`kind / 12`, so kinds 5
/// and 6, today's restart ops, keep the restart they had):
#[derive(Clone, Copy, PartialEq, Debug)]
enum Onto {
    /// The builder's `restore_at` (the saved seed) at the size saved.
    Same,
    /// The builder's `restore_at` into a table of another `max_keys` (`other_size`), smaller
    /// or larger: saved entries beyond its `max_keys` are not tracked and raise the floor for
    /// untracked keys to their full instants, later evictions raise it to their readings.
    Resized,
    /// A limiter built with a seed of its own (`with_clock` / `build`), then `restore_at` on
    /// it: no saved entry is found, each raises the floor (converted to the key's rule here).
    OtherSeed,
    /// No restart: the file just saved, or an earlier one, restored into the live table
    /// (entries and all), which keeps the stricter of its state and the saved one.
    Live,
    /// `KeyedMultiLimiter` only: the builder's `restore_paired_at` (the saved seed) into
    /// policies of as many quotas as the pairs the input chose (`paired_plan`), whatever the
    /// saved counts; pairs that do not fit are `BadPairs`.
    Paired,
}

impl Onto {
    fn of(kind: u8) -> Onto {
        match kind / 12 % 4 {
            0 => Onto::Same,
            1 => Onto::Resized,
            2 => Onto::OtherSeed,
            _ => Onto::Live,
        }
    }
}

impl Onto {
    /// `Onto::of` for a `KeyedMultiLimiter`, where `Paired` takes 10 of the 22 values of
    /// `kind / 12` (those of `kind / 12 % 8` from 4 on): the richest restart, so the most
    /// frequent. The other 12 (`kind / 12 % 8` below 4, kinds 5 and 6 included) read as `of`
    /// reads them, three values each.
    fn of_multi(kind: u8) -> Onto {
        if kind / 12 % 8 >= 4 {
            Onto::Paired
        } else {
            Onto::of(kind)
        }
    }
}

/// A table size other than the saved one's, from 1 to twice the keys used (smaller tables
/// evict and drop saved entries, larger ones hold them all).
fn other_size(x: u64, keys: usize) -> usize {
    (x.rotate_right(23) % (2 * keys as u64)) as usize + 1
}

/// Whether a table has evicted or refused for a full table: its floor (an eviction at a later
/// reading than one stepped back to) and its room are its own, so a key's verdict there no
/// longer bounds another table's following it in lockstep.
fn table_wide(c: tollgate::KeyedCounters) -> bool {
    c.evicted > 0 || c.refused_table_full > 0
}

/// A restore into the live table (`Onto::Live`): the file just saved (`older`: false), which
/// must restore, or an earlier one, which may be from the future (the wall clock stepped back
/// since) or of other quota counts; either way the table only withholds, so the reference
/// states stay what they were.
fn into_live(r: Result<(), RestoreError>, older: bool, what: &str) {
    match r {
        Ok(()) => {}
        Err(RestoreError::FromTheFuture { .. } | RestoreError::LimitsChanged { .. }) if older => {}
        Err(e) => panic!("{what}: restored into the live table: {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let head = b.u64();
    // One value in six of the first byte, zero (an empty input) among them, drives a
    // `KeyedMultiLimiter`: its paired restarts of a table with overrides are the deepest path
    // here, and a bounded run from an empty corpus must reach them within seconds.
    match head % 6 {
        1 => bucket(&mut b, head),
        2 => multi(&mut b, head),
        3 => smooth(&mut b, head),
        4 => keyed(&mut b, head),
        5 => sharded(&mut b, head),
        _ => keyed_multi(&mut b, head),
    }
});

/// The verdicts and snapshots of two buckets at one instant, `live` deciding first: equal for
/// exact quotas, else `live` never more lenient (the follower decides only what `live` admits).
fn bucket(b: &mut Bytes<'_>, head: u64) {
    let Some(mut q) = quota(b) else { return };
    let mut tl = Timeline::new(b.u64(), 1);
    let clock = Clocked::new_at(tl.t);
    let mut live = (Bucket::with_clock(q, clock.clock.clone()), clock);
    let mut follower: Option<(Bucket<ManualClock>, Clocked)> = None;
    // Whether the follower is exactly what the deciding bucket should be (exact quotas on both
    // sides of the restore), else the rounding that may set them apart.
    let (mut exact, mut slack) = (true, Slack::default());
    let mut admitted = Vec::new();
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 384 {
            break;
        }
        let x = b.u64();
        let (step, burst) = (step_of(&q), q.burst());
        if tl.drift(kind % 12, x, step, burst) {
            continue;
        }
        match kind % 12 {
            4 => {
                live.1.at(tl.t);
                let got = live.0.available();
                assert!(got <= burst, "{q:?}: {got} available");
                if let Some((f, fc)) = &follower {
                    fc.at(tl.t);
                    let want = f.available();
                    if exact {
                        assert_eq!(got, want, "{q:?}: available at {}", tl.t);
                    } else {
                        assert!(
                            got <= want + slack.more(),
                            "{q:?}: available {got} > {want} at {}",
                            tl.t
                        );
                    }
                }
            }
            5 | 6 => {
                // Save the deciding bucket, restore into a fresh one (maybe of another quota).
                let Some(new) = next_quota(&q, x, b) else {
                    continue;
                };
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                match tl.restart(x, step, burst) {
                    Restart::Future { at } => {
                        let fresh = Bucket::with_clock(new, ManualClock::new());
                        let e = fresh.restore_at(&file[..], wall(at)).unwrap_err();
                        refused(
                            e,
                            false,
                            fresh.available(),
                            new.burst(),
                            &format!("{new:?}"),
                        );
                    }
                    Restart::Ok { down, origin, at } => {
                        let clock = tl.restarted(down, origin, at);
                        let restored = Bucket::with_clock(new, clock.clock.clone());
                        restored.restore_at(&file[..], wall(at)).unwrap();
                        let old = std::mem::replace(&mut live, (restored, clock));
                        // The saved bucket lived through the downtime, then took the new
                        // quota as `set_quota` does.
                        old.1.at(tl.t);
                        if new != q {
                            old.0.set_quota(new);
                            check_windows(&q, &mut admitted, "before a quota change");
                        }
                        follower = Some(old);
                        exact = q.is_exact() && new.is_exact();
                        slack = if exact {
                            Slack::default()
                        } else {
                            Slack::units(&[q, new])
                        };
                        q = new;
                    }
                }
            }
            _ => {
                let cost = cost_of(x, burst);
                live.1.at(tl.t);
                let label = format!("{q:?}: cost {cost} at {} (input {head:x})", tl.t);
                let (got, snap) = match (x >> 32) % 3 {
                    0 => (live.0.try_acquire(cost), None),
                    1 => {
                        let (r, s) = one_snapshot(&live.0, cost);
                        (r, Some(s))
                    }
                    _ => match live.0.try_acquire_or_snapshot(cost) {
                        Ok(()) => (Ok(()), None),
                        Err((d, s)) => (Err(d), Some(s)),
                    },
                };
                if got.is_ok() && cost > 0 {
                    admitted.push((tl.t, cost));
                }
                let Some((f, fc)) = &follower else { continue };
                fc.at(tl.t);
                let (more, slack) = (slack.more(), slack.ns(&[q]));
                if exact {
                    let (want, fsnap) = one_snapshot(f, cost);
                    assert_eq!(got, want, "{label}");
                    if let Some(s) = snap {
                        assert_eq!(s, fsnap, "{label}: snapshot");
                    }
                } else if got.is_ok() {
                    let (want, fsnap) = one_snapshot(f, cost);
                    assert!(
                        within(want, slack),
                        "{label}: admitted beyond the saved bucket: {want:?}"
                    );
                    if let (Some(s), Ok(())) = (snap, want) {
                        assert!(
                            s.remaining() <= fsnap.remaining() + more,
                            "{label}: {s:?} {fsnap:?}"
                        );
                    }
                } else if let Some(s) = snap {
                    // A cost-0 decision writes nothing: the snapshot as is.
                    let fs = one_snapshot(f, 0).1;
                    assert!(
                        s.remaining() <= fs.remaining() + more,
                        "{label}: {s:?} {fs:?}"
                    );
                }
            }
        }
    }
    check_windows(&q, &mut admitted, "the last quota era");
}

/// A one-quota limiter's decision and its snapshot after it.
fn one_snapshot(l: &impl Limiter<Key = ()>, cost: u64) -> (Result<(), Denied>, tollgate::Snapshot) {
    let (r, s) = l.decide_snapshots(&(), cost);
    (r.map_err(|r| r.denied()), s.as_slice()[0])
}

impl Clocked {
    /// A fresh clock reading `t`, the global time.
    fn new_at(t: u64) -> Clocked {
        Clocked::restarted_at(t, t)
    }

    /// A fresh clock reading `origin` at global time `t`.
    fn restarted_at(origin: u64, t: u64) -> Clocked {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(origin));
        Clocked {
            clock,
            offset: i128::from(origin) - i128::from(t),
        }
    }
}

/// The docs' pairing of a restoring policy's quotas with the saved ones: an equal quota first,
/// then the only one of the same period where exactly one saved and one restoring quota of it
/// are left; `None`: unpaired (it takes the strictest of the unpaired saved states).
fn pairing(saved: &[Quota], new: &[Quota]) -> Vec<Option<usize>> {
    let mut from = vec![None; new.len()];
    let mut taken = vec![false; saved.len()];
    for (j, q) in new.iter().enumerate() {
        if let Some(i) = (0..saved.len()).find(|&i| !taken[i] && saved[i] == *q) {
            from[j] = Some(i);
            taken[i] = true;
        }
    }
    for j in 0..new.len() {
        if from[j].is_some() {
            continue;
        }
        let per = new[j].per();
        let left: Vec<usize> = (0..saved.len())
            .filter(|&i| !taken[i] && saved[i].per() == per)
            .collect();
        let rivals = (0..new.len())
            .filter(|&k| from[k].is_none() && new[k].per() == per)
            .count();
        if left.len() == 1 && rivals == 1 {
            from[j] = Some(left[0]);
            taken[left[0]] = true;
        }
    }
    from
}

/// The reference states of a restored policy (global time `t`): each restoring quota's from its
/// pair, as `set_quota` converts ([`gcra::rescale`]), the unpaired the strictest of what the
/// unpaired saved states convert to.
fn restored_reference(states: &[u64], saved: &[Quota], new: &[Quota], t: u64) -> Vec<u64> {
    let from = pairing(saved, new);
    let unpaired: Vec<usize> = (0..saved.len())
        .filter(|i| !from.contains(&Some(*i)))
        .collect();
    let convert = |i: usize, q: &Quota| converted(states[i], t, &saved[i], q);
    new.iter()
        .zip(&from)
        .map(|(q, f)| match f {
            Some(i) => convert(*i, q),
            None => unpaired
                .iter()
                .map(|&i| convert(i, q))
                .max()
                .unwrap_or(gcra::FULL),
        })
        .collect()
}

/// The reference states of a restored policy of another count (saved under another seed, where
/// only the defaults' counts must match): each restoring quota takes the strictest state any
/// saved one converts to.
fn strictest_reference(states: &[u64], saved: &[Quota], new: &[Quota], t: u64) -> Vec<u64> {
    new.iter()
        .map(|q| {
            saved
                .iter()
                .zip(states)
                .map(|(o, &s)| converted(s, t, o, q))
                .max()
                .unwrap()
        })
        .collect()
}

/// A saved quota's reference state (global time `t`) carried to quota `q`: as is where they
/// are equal, else as `set_quota` converts it ([`gcra::rescale`]).
fn converted(state: u64, t: u64, saved: &Quota, q: &Quota) -> u64 {
    if saved == q {
        state
    } else {
        gcra::rescale(state, t, saved, q)
    }
}

/// The reference states of a policy restored with the caller's pairs (`restore_paired_at`,
/// pairs that fit): quota `j` the state of the saved quota `pairs[j]` converted, `None` full.
fn paired_reference(
    states: &[u64],
    saved: &[Quota],
    new: &[Quota],
    pairs: &[Option<usize>],
    t: u64,
) -> Vec<u64> {
    new.iter()
        .zip(pairs)
        .map(|(q, p)| p.map_or(gcra::FULL, |i| converted(states[i], t, &saved[i], q)))
        .collect()
}

/// A paired restart (`Onto::Paired`): the restoring policies and the pairs given, and the
/// pairs of policies they do not fit (`BadPairs` where any).
struct PairedPlan {
    new: Policies,
    pairs: Vec<Option<usize>>,
    misfits: Misfits,
}

/// The pairs of policies a key goes through (the saved one and the one here) that a paired
/// restore's pairs do not fit (another count here than the pairs, or a pair naming a position
/// past the saved policy's quotas), each as `BadPairs` counts it: `(quotas, saved)`, the
/// quotas of the policy here and of the saved one.
#[derive(Clone, Default, Debug)]
struct Misfits {
    /// The defaults' pair, where the pairs do not fit it.
    default: Option<(usize, usize)>,
    /// Each override's pair (the same keys have one on both sides) they do not fit.
    overrides: Vec<(usize, usize)>,
}

impl Misfits {
    fn of(pol: &Policies, new: &Policies, pairs: &[Option<usize>]) -> Misfits {
        let misfit = |old: &[Quota], here: &[Quota]| {
            let fits = here.len() == pairs.len() && pairs.iter().flatten().all(|&i| i < old.len());
            (!fits).then_some((here.len(), old.len()))
        };
        let overrides = pol.overrides.iter().zip(&new.overrides);
        Misfits {
            default: misfit(&pol.default, &new.default),
            overrides: overrides
                .filter_map(|(old, here)| misfit(old.as_deref()?, here.as_deref()?))
                .collect(),
        }
    }

    fn fit(&self) -> bool {
        self.default.is_none() && self.overrides.is_empty()
    }

    /// Whether `e` is the `BadPairs` a restore given `n` pairs owes: `pairs` the `n` given,
    /// `quotas` and `saved` the counts of the first pair of policies they do not fit. The
    /// restore checks the defaults' pair first, so theirs where it does not fit; else the
    /// overrides' pairs come in the order of the table's hash map (not fixed), so any one's
    /// that does not fit.
    fn owed(&self, e: &RestoreError, n: usize) -> bool {
        let &RestoreError::BadPairs {
            pairs,
            quotas,
            saved,
        } = e
        else {
            return false;
        };
        pairs == n
            && match self.default {
                Some(d) => (quotas, saved) == d,
                None => self.overrides.contains(&(quotas, saved)),
            }
    }
}

/// A paired restart's policies and pairs from the input (`None`: an invalid quota read). One
/// `u64` picks the count here (1 to 4; 2 where its bits are zero), each pair (a quarter
/// `None`, else a position every saved policy has: zero bits name the first saved quotas in
/// reverse), and one time in eight pairs that do not fit (never for zero bits, so that an
/// input read past its end restores): one pair too few or too many, a position past some
/// saved policy's quotas (past the shortest only, or past all), or one policy here of another
/// count. Each policy here takes one `u64` more:
/// quota `j` is the saved quota its pair names (without one, the saved quota at `j`, wrapped),
/// kept or `changed` (its period kept, or one read from the input). A quota kept but unpaired
/// tells a restore that pairs by equality (wrong here) from one that follows the pairs.
fn paired_plan(pol: &Policies, b: &mut Bytes<'_>) -> Option<PairedPlan> {
    let y = b.u64();
    let saved: Vec<usize> = pol.lists().map(<[Quota]>::len).collect();
    let (least, most) = (*saved.iter().min()?, *saved.iter().max()?);
    let n = (y.wrapping_add(1) % 4 + 1) as usize;
    let mut pairs: Vec<Option<usize>> = (0..n)
        .map(|j| {
            let v = y >> (2 + 4 * j) & 15;
            (v % 4 != 3).then_some((n - 1 - j + (v >> 2) as usize) % least)
        })
        .collect();
    let bad = y >> 20 & 7 == 7;
    if bad && (y >> 23) % 3 == 1 {
        let past = match (y >> 27) % 4 {
            0 if least < most => least,
            3 => usize::MAX,
            _ => most + (y >> 29) as usize % 2,
        };
        pairs[(y >> 25) as usize % n] = Some(past);
    }
    let policy = |old: &[Quota], b: &mut Bytes<'_>| -> Option<Vec<Quota>> {
        let z = b.u64();
        (0..n)
            .map(|j| {
                let base = old[pairs[j].unwrap_or(j) % old.len()];
                if z >> (40 + j) & 1 == 1 {
                    Some(base)
                } else {
                    changed(&base, z >> (10 * j), b)
                }
            })
            .collect()
    };
    let mut new = Policies {
        default: policy(&pol.default, b)?,
        overrides: Vec::with_capacity(pol.overrides.len()),
    };
    for o in &pol.overrides {
        new.overrides.push(match o {
            Some(v) => Some(policy(v, b)?),
            None => None,
        });
    }
    if bad && (y >> 23).is_multiple_of(3) {
        if n > 1 && y >> 25 & 1 == 1 {
            pairs.pop();
        } else {
            pairs.push(None);
        }
    }
    if bad && (y >> 23) % 3 == 2 {
        let mut here: Vec<&mut Vec<Quota>> = new.overrides.iter_mut().flatten().collect();
        let at = (y >> 25) as usize % (here.len() + 1);
        let v = match here.get_mut(at) {
            Some(v) => &mut **v,
            None => &mut new.default,
        };
        if v.len() < 4 && (v.len() == 1 || y >> 30 & 1 == 0) {
            v.push(v[0]);
        } else {
            v.pop();
        }
    }
    // Every pair of policies a key goes through: the default's, and each key's override's (set
    // on both sides: the same keys keep an override across restarts).
    let misfits = Misfits::of(pol, &new, &pairs);
    Some(PairedPlan {
        new,
        pairs,
        misfits,
    })
}

/// One key's window eras (where in its admissions each quota's windows begin) across a restart
/// that gives quota `j` here the state of saved quota `from[j]`: a quota equal on both sides
/// carries its state as is, so its windows run on from its saved era (admissions before and
/// after the restart against one bound); any other starts a new era at the restart, bounded
/// from there on its own. Each saved era that ends is checked now.
fn carried_eras(
    old: &[Quota],
    new: &[Quota],
    from: &[Option<usize>],
    eras: &[usize],
    admitted: &[(u64, u64)],
) -> Vec<usize> {
    let carried = |j: usize| from[j].filter(|&i| old[i] == new[j]);
    for (i, q) in old.iter().enumerate() {
        if !(0..new.len()).any(|j| carried(j) == Some(i)) {
            check_windows(
                q,
                &mut admitted[eras[i]..].to_vec(),
                "before a policy change",
            );
        }
    }
    (0..new.len())
        .map(|j| carried(j).map_or(admitted.len(), |i| eras[i]))
        .collect()
}

fn padded(states: &[u64]) -> [u64; 4] {
    let mut out = [gcra::FULL; 4];
    out[..states.len()].copy_from_slice(states);
    out
}

/// A restoring policy made from `quotas` by `x` (`j` the quota to change alone).
enum Reshape {
    To(Vec<Quota>),
    /// An invalid quota read: skip this restart.
    Skip,
    /// An invalid quota read among several: end the input.
    Stop,
}

/// The restoring policy: the same, reordered, one or more quotas changed, or another number of
/// quotas (an error to restore into).
fn reshaped(quotas: &[Quota], j: usize, x: u64, b: &mut Bytes<'_>) -> Reshape {
    let mut new = quotas.to_vec();
    match (x >> 20) % 6 {
        0 | 1 => {}
        2 => {
            let by = 1 + (x >> 24) as usize % new.len();
            new.rotate_left(by);
        }
        3 => {
            let Some(c) = changed(&new[j], x >> 28, b) else {
                return Reshape::Skip;
            };
            new[j] = c;
        }
        4 => {
            for (i, q) in new.iter_mut().enumerate() {
                if x >> (40 + i) & 1 == 1 {
                    let Some(c) = changed(q, x >> (28 + 3 * i), b) else {
                        return Reshape::Stop;
                    };
                    *q = c;
                }
            }
            new.swap(0, (x >> 24) as usize % quotas.len());
        }
        _ => {
            if new.len() < 4 && x >> 24 & 1 == 0 {
                new.push(new[0]);
            } else if new.len() > 1 {
                new.pop();
            } else {
                return Reshape::Skip;
            }
        }
    }
    Reshape::To(new)
}

/// Whether two policies hold the same quotas in some order.
fn same_quotas(a: &[Quota], b: &[Quota]) -> bool {
    let key = |v: &[Quota]| {
        let mut v: Vec<String> = v.iter().map(|q| format!("{q:?}")).collect();
        v.sort();
        v
    };
    key(a) == key(b)
}

/// A `MultiBucket` against one `gcra` reference state per quota (what the saved policy holds at
/// the same instant, its quotas converted and paired as the docs say), and the saved bucket
/// itself where the restoring quotas are the saved ones in some order.
fn multi(b: &mut Bytes<'_>, head: u64) {
    let mut quotas = Vec::new();
    for _ in 0..(head >> 8) % 4 + 1 {
        let Some(q) = quota(b) else { return };
        quotas.push(q);
    }
    let mut tl = Timeline::new(b.u64(), 1);
    let clock = Clocked::new_at(tl.t);
    let limits = Limits::new(quotas.iter().copied()).unwrap();
    let mut live = (MultiBucket::with_clock(limits, clock.clock.clone()), clock);
    let mut states = vec![gcra::FULL; quotas.len()];
    // Whether the reference is exactly the deciding bucket (every quota ever held exact, or no
    // restore yet): else the bucket is never more lenient than it.
    let mut exact = true;
    // The rounding of every restore that met an inexact quota, added up.
    let mut slack = Slack::default();
    let mut follower: Option<(MultiBucket<ManualClock>, Clocked)> = None;
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 384 {
            break;
        }
        let x = b.u64();
        let j = (x >> 56) as usize % quotas.len();
        let (step, burst) = (step_of(&quotas[j]), quotas[j].burst());
        if tl.drift(kind % 12, x, step, burst) {
            continue;
        }
        let smallest = quotas.iter().map(Quota::burst).min().unwrap();
        let limits = Limits::new(quotas.iter().copied()).unwrap();
        let label = format!("{quotas:?} at {} (input {head:x})", tl.t);
        match kind % 12 {
            4 => {
                live.1.at(tl.t);
                let got = live.0.available();
                let want = states
                    .iter()
                    .zip(&quotas)
                    .map(|(s, q)| gcra::available(*s, tl.t, q))
                    .min()
                    .unwrap();
                if exact {
                    assert_eq!(got, want, "{label}: available");
                } else {
                    let more = slack.more();
                    assert!(got <= want + more, "{label}: available {got} > {want}");
                }
                if let Some((f, fc)) = &follower {
                    fc.at(tl.t);
                    let (want, more) = (f.available(), slack.more());
                    assert!(
                        got <= want + more,
                        "{label}: available {got} > the saved {want}"
                    );
                }
            }
            5 | 6 => {
                // The restoring policy: the same, reordered, one or more quotas changed, or
                // another number of quotas (an error).
                let new = match reshaped(&quotas, j, x, b) {
                    Reshape::To(new) => new,
                    Reshape::Skip => continue,
                    Reshape::Stop => return,
                };
                let new_limits = Limits::new(new.iter().copied()).unwrap();
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                let resized = new.len() != quotas.len();
                match tl.restart(x, step, burst) {
                    Restart::Ok { down, origin, at } if !resized => {
                        let clock = tl.restarted(down, origin, at);
                        let restored = MultiBucket::with_clock(new_limits, clock.clock.clone());
                        restored.restore_at(&file[..], wall(at)).unwrap();
                        let old = std::mem::replace(&mut live, (restored, clock));
                        old.1.at(tl.t);
                        let same = same_quotas(&quotas, &new);
                        follower = same.then_some(old);
                        let all: Vec<Quota> = quotas.iter().chain(&new).copied().collect();
                        if !all.iter().all(Quota::is_exact) {
                            exact = false;
                            slack.0 += Slack::units(&all).0;
                        }
                        states = restored_reference(&states, &quotas, &new, tl.t);
                        if !same {
                            for q in &quotas {
                                check_windows(q, &mut admitted.clone(), "before a policy change");
                            }
                            admitted.clear();
                        }
                        quotas = new;
                    }
                    // Another number of quotas, or a file from the future: refused, the fresh
                    // bucket left as built.
                    Restart::Ok { at, .. } | Restart::Future { at } => {
                        let fresh = MultiBucket::with_clock(new_limits, ManualClock::new());
                        let e = fresh.restore_at(&file[..], wall(at)).unwrap_err();
                        let burst = new.iter().map(Quota::burst).min().unwrap();
                        refused(e, resized, fresh.available(), burst, &label);
                    }
                }
            }
            _ => {
                let cost = multi_cost(x, smallest, burst);
                live.1.at(tl.t);
                let label = format!("{label}: cost {cost}");
                let expected = gcra::try_acquire_all(padded(&states), tl.t, &limits, cost);
                let (got, snaps) = match (x >> 32) % 3 {
                    0 => (live.0.try_acquire(cost).map_err(|d| (d, None)), None),
                    1 => (
                        live.0.decide(&(), cost).map_err(|r| (r.denied(), Some(r))),
                        None,
                    ),
                    _ => {
                        let (r, s) = live.0.decide_snapshots(&(), cost);
                        (r.map_err(|r| (r.denied(), Some(r))), Some(s))
                    }
                };
                if exact {
                    let want = expected.map(|_| ()).map_err(|r| r.denied());
                    assert_eq!(got.map_err(|e| e.0), want, "{label}");
                    if let (Err((_, Some(r))), Err(w)) = (got, expected) {
                        assert_eq!(r, w, "{label}: the refusal");
                    }
                } else if got.is_ok() {
                    let want = expected.map(|_| ()).map_err(|r| r.denied());
                    assert!(
                        within(want, slack.ns(&quotas)),
                        "{label}: admitted beyond the saved policy: {expected:?}"
                    );
                }
                let after = match expected {
                    Ok(Some(s)) if got.is_ok() => s[..quotas.len()].to_vec(),
                    _ => states.clone(),
                };
                if let Some(s) = snaps {
                    for (i, (st, q)) in after.iter().zip(&quotas).enumerate() {
                        let (have, want) = (s.as_slice()[i], gcra::snapshot(*st, tl.t, q));
                        if exact {
                            assert_eq!(have, want, "{label}: quota {i}'s snapshot");
                        } else {
                            let more = slack.more();
                            assert!(
                                have.remaining() <= want.remaining() + more,
                                "{label}: quota {i}'s snapshot {have:?} {want:?}"
                            );
                        }
                    }
                }
                if got.is_ok() && cost > 0 {
                    admitted.push((tl.t, cost));
                    if let Some((f, fc)) = &follower {
                        fc.at(tl.t);
                        let want = f.try_acquire(cost);
                        assert!(
                            within(want, slack.ns(&quotas)),
                            "{label}: the saved bucket: {want:?}"
                        );
                    }
                }
                states = after;
            }
        }
    }
    for q in &quotas {
        check_windows(q, &mut admitted.clone(), "the last policy");
    }
}

/// `Smooth` (bursty or warming up), readings in whole µs since each limiter's origin: the
/// restored limiter admits only what the saved one (its rate changed by `set_rate` where the
/// restore changed it) admits at the same instant, and waits no less, each to within 1 µs.
/// Guava's arithmetic is in `f64` and path-dependent: a limiter idle since before the restored
/// one's origin is brought up to date at the restore (as `resync` would at that reading) and
/// again at its next decision, where the saved one adds the whole idle time at once, and the
/// two sums may round a wait to µs apart (as would a `set_rate` against the restore's rescale).
fn smooth(b: &mut Bytes<'_>, head: u64) {
    let x = b.u64();
    let rate = |x: u64| match x % 4 {
        0 => (x >> 2) % 1000 + 1,
        1 => (x >> 2) % 1_000_000 + 1,
        _ => (x >> 2) % 20 + 1,
    } as f64
        / [1.0, 10.0, 3.0, 1000.0][(x >> 40) as usize % 4];
    let mut r = rate(x);
    let warming = head >> 8 & 1 == 1;
    let burst_s = Duration::from_micros((x >> 44) % 5_000_000);
    let (warmup, cold) = (
        Duration::from_micros((x >> 44) % 5_000_000 + 1),
        1.0 + ((x >> 32) % 8) as f64,
    );
    let build = |r: f64, clock: ManualClock| {
        if warming {
            Smooth::warming_up_with_clock(r, warmup, cold, clock)
        } else {
            Smooth::bursty_with_clock(r, burst_s, clock)
        }
    };
    let mut tl = Timeline::new(b.u64(), 1000);
    let clock = Clocked::new_at(tl.t);
    let Ok(l) = build(r, clock.clock.clone()) else {
        return;
    };
    let mut live = (l, clock);
    let mut follower: Option<(Smooth<ManualClock>, Clocked)> = None;
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 256 {
            break;
        }
        let x = b.u64();
        let step = (1e9 / r) as u64 + 1000;
        let label = format!("rate {r} warming {warming} at {} (input {head:x})", tl.t);
        match kind % 10 {
            0 | 1 => tl.forward(x % (4 * step + 1)),
            2 => tl.forward(x % (40 * step + 1)),
            3 => tl.back(x % (8 * step + 1)),
            4 => {
                let new = if x >> 60 == 0 { rate(x >> 20) } else { r };
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                match tl.restart(x, step, 8) {
                    Restart::Future { at } => {
                        let fresh = build(new, ManualClock::new()).unwrap();
                        let e = fresh.restore_at(&file[..], wall(at)).unwrap_err();
                        assert!(matches!(e, RestoreError::FromTheFuture { .. }), "{e:?}");
                    }
                    Restart::Ok { down, origin, at } => {
                        let clock = tl.restarted(down, origin, at);
                        let Ok(restored) = build(new, clock.clock.clone()) else {
                            continue;
                        };
                        restored.restore_at(&file[..], wall(at)).unwrap();
                        let old = std::mem::replace(&mut live, (restored, clock));
                        old.1.at(tl.t);
                        if new != r {
                            old.0.set_rate(new).unwrap();
                        }
                        follower = Some(old);
                        r = new;
                    }
                }
            }
            _ => {
                let permits = [1, 1, 2, 0, 5, (x >> 8) % 100][(x >> 4) as usize % 6];
                let timeout = Duration::from_micros((x >> 16) % (4 * step / 1000 + 1));
                live.1.at(tl.t);
                let got = live.0.try_acquire(permits, timeout);
                let after = (i128::from(live.0.clock().now()) - live.1.offset) as u64;
                let Some((f, fc)) = &follower else {
                    tl.t = after.min(T_MAX);
                    continue;
                };
                let label = format!("{label}: {permits} permits within {timeout:?}");
                assert_eq!(live.0.rate(), f.rate(), "{label}: the rate");
                // The saved limiter decides only what the restored one admitted (a refusal
                // changes nothing), given 1 µs more: the reservation does not depend on it.
                if got {
                    fc.at(tl.t);
                    let want = f.try_acquire(permits, timeout + Duration::from_micros(1));
                    let f_after = (i128::from(f.clock().now()) - fc.offset) as u64;
                    assert!(want, "{label}: admitted beyond the saved limiter");
                    assert!(
                        after + 1000 >= f_after,
                        "{label}: slept to {after}, the saved limiter to {f_after}"
                    );
                }
                tl.t = after.min(T_MAX);
            }
        }
    }
}

/// A `KeyedLimiter` of at most as many keys as its capacity (no evictions): per key, the
/// restored table admits only what the saved one admits at the same instant, and holds no more.
fn keyed(b: &mut Bytes<'_>, head: u64) {
    let Some(q) = quota(b) else { return };
    let keys = (head >> 8) % 6 + 1;
    // The table's size, from `keys` on (no evictions) until a restart picks another.
    let mut max_keys = (keys + (head >> 12) % 3) as usize;
    let mut tl = Timeline::new(b.u64(), 1);
    let clock = Clocked::new_at(tl.t);
    let mut live = (
        KeyedLimiter::with_clock(q, max_keys, clock.clock.clone()),
        clock,
    );
    let mut follower: Option<(KeyedLimiter<u64, Quota, ManualClock>, Clocked)> = None;
    let mut admitted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); keys as usize];
    let (step, burst) = (step_of(&q), q.burst());
    // Inexact quotas: within a unit of rounding (`Slack`).
    let slack = if q.is_exact() {
        Slack::default()
    } else {
        Slack::units(&[q])
    };
    let (slack, more) = (slack.ns(&[q]), slack.more());
    // The latest reading (global) of an admission, and a refill of the burst: a key is full
    // that long after its last admission.
    let mut latest = 0;
    let refill = q.refill_time(burst).as_nanos().min(u128::from(T_MAX)) as u64;
    // The latest file saved (restored again into a live table: `Onto::Live`).
    let mut prev: Option<Vec<u8>> = None;
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 384 {
            break;
        }
        let x = b.u64();
        if tl.drift(kind % 12, x, step, burst) {
            continue;
        }
        let key = (x >> 56) % keys;
        let label = format!("{q:?}: key {key} at {} (input {head:x})", tl.t);
        match kind % 12 {
            4 => {
                live.1.at(tl.t);
                let got = live.0.available(&key);
                assert!(got <= burst, "{label}: {got} available");
                if let Some((f, fc)) = follower.as_ref().filter(|f| !table_wide(f.0.counters())) {
                    fc.at(tl.t);
                    let want = f.available(&key);
                    assert!(
                        got <= want + more,
                        "{label}: available {got} > the saved {want}"
                    );
                }
            }
            5 | 6 => {
                // A save more than a refill of the burst behind the latest admission holds a
                // key in debt beyond what the restore's clamp (`Table::latest_full`) keeps, a
                // documented cut (`tests/persist_keyed.rs`,
                // `a_key_saved_far_behind_its_last_admission_keeps_two_refills_of_debt`).
                if latest > tl.t.saturating_add(refill) {
                    continue;
                }
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                let onto = Onto::of(kind);
                if onto == Onto::Live {
                    let older = prev.as_ref().filter(|_| x >> 39 & 1 == 1);
                    let r = live
                        .0
                        .restore_at(&older.unwrap_or(&file)[..], wall(tl.wall()));
                    into_live(r, older.is_some(), &label);
                    // The promises run from the latest restore's reading on.
                    tl.floor = tl.t;
                    prev = Some(file);
                    continue;
                }
                let size = match onto {
                    Onto::Same => max_keys,
                    Onto::Resized => other_size(x, keys as usize),
                    _ if x >> 38 & 1 == 1 => other_size(x, keys as usize),
                    _ => max_keys,
                };
                // The builder's restore (the saved seed), or one into a limiter of a seed of
                // its own.
                let restore = |c: ManualClock, at: u64| {
                    if onto == Onto::OtherSeed {
                        let l = KeyedLimiter::with_clock(q, size, c);
                        l.restore_at(&file[..], wall(at)).map(|()| l)
                    } else {
                        KeyedLimiter::<u64, Quota, _>::builder(q, size, c)
                            .restore_at(&file[..], wall(at))
                    }
                };
                match tl.restart(x, step, burst) {
                    Restart::Future { at } => {
                        let e = restore(ManualClock::new(), at);
                        assert!(
                            matches!(e, Err(RestoreError::FromTheFuture { .. })),
                            "{label}: {onto:?}"
                        );
                    }
                    Restart::Ok { down, origin, at } => {
                        let clock = tl.restarted(down, origin, at);
                        let restored = restore(clock.clock.clone(), at)
                            .unwrap_or_else(|e| panic!("{label}: {onto:?}: {e:?}"));
                        let old = std::mem::replace(&mut live, (restored, clock));
                        old.1.at(tl.t);
                        follower = Some(old);
                        max_keys = size;
                        prev = Some(file);
                    }
                }
            }
            _ => {
                let cost = cost_of(x, burst);
                live.1.at(tl.t);
                let label = format!("{label}: cost {cost}");
                let got = if x >> 32 & 1 == 0 {
                    live.0.try_acquire(&key, cost)
                } else {
                    live.0
                        .decide_snapshots(&key, cost)
                        .0
                        .map_err(|r| r.denied())
                };
                if got.is_ok() && cost > 0 {
                    admitted[key as usize].push((tl.t, cost));
                    latest = latest.max(tl.t);
                    if let Some((f, fc)) = &follower {
                        fc.at(tl.t);
                        let want = f.try_acquire(&key, cost);
                        if table_wide(f.counters()) {
                            follower = None;
                        } else {
                            assert!(within(want, slack), "{label}: the saved table: {want:?}");
                        }
                    }
                }
                if let Err(Denied::ExceedsBurst) = got {
                    assert!(cost > burst, "{label}");
                }
            }
        }
    }
    for a in &mut admitted {
        check_windows(&q, a, "a key");
    }
}

/// A `ShardedBucket` (shard chosen per decision): right after a restore it holds no more than
/// the saved one at that instant (its leases counted as spent, a downtime refilling at most a
/// burst); every window across restarts within the bound.
fn sharded(b: &mut Bytes<'_>, head: u64) {
    let Some(mut q) = quota(b) else { return };
    let shards = |x: u64| (x % 4 + 1) as usize;
    let mut tl = Timeline::new(b.u64(), 1);
    let clock = Clocked::new_at(tl.t);
    let mut live = (
        ShardedBucket::with_clock(q, shards(head >> 8), clock.clock.clone()),
        clock,
    );
    let mut admitted = Vec::new();
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 384 {
            break;
        }
        let x = b.u64();
        let (step, burst) = (step_of(&q), q.burst());
        if tl.drift(kind % 12, x, step, burst) {
            continue;
        }
        match kind % 12 {
            4 => {
                live.1.at(tl.t);
                let got = live.0.available();
                assert!(got <= burst, "{q:?}: {got} available");
            }
            5 | 6 => {
                let Some(new) = next_quota(&q, x, b) else {
                    continue;
                };
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                let n = shards(x >> 32);
                match tl.restart(x, step, burst) {
                    Restart::Future { at } => {
                        let fresh = ShardedBucket::with_clock(new, n, ManualClock::new());
                        let e = fresh.restore_at(&file[..], wall(at)).unwrap_err();
                        refused(
                            e,
                            false,
                            fresh.available(),
                            new.burst(),
                            &format!("{new:?}"),
                        );
                    }
                    Restart::Ok { down, origin, at } => {
                        let clock = tl.restarted(down, origin, at);
                        let restored = ShardedBucket::with_clock(new, n, clock.clock.clone());
                        restored.restore_at(&file[..], wall(at)).unwrap();
                        let old = std::mem::replace(&mut live, (restored, clock));
                        old.1.at(tl.t);
                        let held = live.0.available();
                        assert!(held <= new.burst(), "{new:?}: {held} held after a restore");
                        // Saved at a reading behind an admission, the bucket owes tokens there:
                        // the file carries the debt.
                        if new == q {
                            let saved = old.0.available();
                            assert!(
                                held <= saved,
                                "{q:?}: restored {held} > the saved {saved} at {} (input {head:x})",
                                tl.t
                            );
                        } else {
                            check_windows(&q, &mut admitted, "before a quota change");
                        }
                        q = new;
                    }
                }
            }
            _ => {
                let cost = cost_of(x, burst);
                live.1.at(tl.t);
                let now = live.0.clock().now();
                let got = live.0.fuzz_acquire_on_shard((x >> 32) as usize, now, cost);
                if got.is_ok() && cost > 0 {
                    admitted.push((tl.t, cost));
                }
            }
        }
    }
    check_windows(&q, &mut admitted, "the last quota era");
}

/// The policies of a keyed table: the default and, for some keys, an override.
#[derive(Clone)]
struct Policies {
    default: Vec<Quota>,
    overrides: Vec<Option<Vec<Quota>>>,
}

impl Policies {
    fn of(&self, key: usize) -> &[Quota] {
        self.overrides[key].as_deref().unwrap_or(&self.default)
    }

    /// The default's quotas, then each override's.
    fn lists(&self) -> impl Iterator<Item = &[Quota]> {
        std::iter::once(&self.default[..]).chain(self.overrides.iter().flatten().map(|v| &v[..]))
    }

    fn all(&self) -> impl Iterator<Item = &Quota> {
        self.default
            .iter()
            .chain(self.overrides.iter().flatten().flatten())
    }

    fn builder(
        &self,
        max_keys: usize,
        clock: ManualClock,
    ) -> KeyedMultiLimiterBuilder<u64, ManualClock> {
        let limits = |v: &[Quota]| Limits::new(v.iter().copied()).unwrap();
        let mut b = KeyedMultiLimiter::builder(limits(&self.default), max_keys, clock);
        for (k, o) in self.overrides.iter().enumerate() {
            if let Some(o) = o {
                b = b.override_quota(k as u64, limits(o));
            }
        }
        b
    }
}

/// The crate's horizon (100 years): readings past it read as stopped.
const HORIZON_NS: u64 = 3_155_760_000_000_000_000;

/// The units quota `q` has earned by `at` ns, rounded down: a state full at `at`.
fn earned_floor(q: &Quota, at: u64) -> u64 {
    let (mul, div) = q.units_per_ns();
    (u128::from(at.min(HORIZON_NS)) * u128::from(mul) / u128::from(div)) as u64
}

/// Where a restore at `t` (global time) into a table of the policies `new` cuts a key's debt:
/// docs/guarantees.md ("`save` → `restore`"), "a key the save found full later than two whole
/// refills after its reading (... refills of the restoring table's slowest quota, the new one
/// where the restore changes quotas) restores full two such refills after the restore". A
/// conversion can carry a debt past that though no admission was that far ahead (an inexact
/// quota's rounding debt of one unit, carried as a balance into a quota a thousand times
/// slower, then kept by its due instant into a fast one). `None` where two refills reach past
/// 2^61 ns: the restoring clock's horizon may clamp the cut there (the reference stays strict).
fn cut_at(new: &Policies, t: u64) -> Option<u64> {
    let cap = new
        .all()
        .map(|q| q.refill_time(q.burst()).as_nanos())
        .max()
        .unwrap();
    let span = u64::try_from(2 * cap).ok().filter(|&d| d < 1 << 61)?;
    Some(t + span)
}

/// Whether `saved`, the table a restore at global time `t` read its file from (its clock at
/// `t`, the downtime lived through), holds each of keys `0..keys` (an untracked one at its
/// floor) full under every quota no later than where that restore cuts a debt (`cut_at`;
/// where that has none, at least 2^61 ns on: two refills of the restoring table's slowest
/// quota reach past that, and the restoring clock's horizon lies further). Only then does
/// the saved table, which cuts nothing, bound the restored one: a key held past the cut
/// restores full at the cut, as documented, and the saved table goes on withholding more.
/// Admissions alone leave no such debt (a save far behind the latest admission is skipped:
/// see the restart arm), but a conversion at an earlier restore can carry one past a burst
/// without any admission: into another seed, an untracked key's floor is raised to the
/// strictest any saved policy converts to under any policy here (a state of a small burst
/// carried into a large one lacks most of the large one), and a later restore of that floor
/// into smaller bursts cuts it, while the saved table holds every untracked key to it.
fn within_cut(
    saved: &KeyedMultiLimiter<u64, ManualClock>,
    keys: usize,
    t: u64,
    cut: Option<u64>,
) -> bool {
    let span = cut.map_or(1 << 61, |c| c - t);
    (0..keys as u64).all(|k| {
        // A cost-0 decision writes nothing (nor inserts the key).
        let (_, snaps) = saved.decide_snapshots(&k, 0);
        let until = |s: &tollgate::Snapshot| s.until_full().as_nanos();
        snaps
            .as_slice()
            .iter()
            .all(|s| until(s) <= u128::from(span))
    })
}

/// An override's quotas from one `u64` of the input (1 to 4 of them; 2 where its bits are
/// zero): a quarter of the time each read from the input, else each `changed` from the
/// default's quota at its position (wrapped) by its own bits, the period kept, reading
/// nothing more (so that a short input already holds overrides).
fn override_policy(default: &[Quota], b: &mut Bytes<'_>) -> Option<Vec<Quota>> {
    let z = b.u64();
    let n = ((z >> 2) + 1) % 4 + 1;
    (0..n)
        .map(|j| {
            let base = &default[j as usize % default.len()];
            if z & 3 == 3 {
                quota(b)
            } else {
                changed(base, z >> (8 + 10 * j) << 1, b)
            }
        })
        .collect()
}

/// The ops a `KeyedMultiLimiter`'s input ends with (read where it runs out), so that an input
/// of any length decides for every key and, one time in four (bits 59 and 60 of `end` zero, as
/// in a short input), restarts and decides across it, in two parts. The first: each of the
/// `keys` decides (cost 1), then the table restarts as `end` (an op's `x`) and its top three
/// bits choose: `Onto::Paired` for five of their eight values, zero among them (the pairs by
/// `end` rotated by 32 bits as `paired_plan` reads them, each policy here `changed` from the
/// quotas its pairs name: the input's zeros), else into another seed, another size or the
/// same (reshaped by `end`, as an op's `x` reshapes). The second, read from its start whatever
/// the restart read: each key's `available`, then (after a restart) each key decides again.
fn ending(keys: usize, end: u64) -> [Vec<u8>; 2] {
    let op = |out: &mut Vec<u8>, kind: u8, k: usize| {
        out.push(kind);
        out.extend(((k as u64) << 56).to_le_bytes());
    };
    let restart = end >> 59 & 3 == 0;
    let mut first = Vec::new();
    (0..keys).for_each(|k| op(&mut first, 7, k));
    if restart {
        first.push(match end >> 61 {
            5 => 2 * 12 + 5,
            6 => 12 + 5,
            7 => 5,
            _ => 4 * 12 + 5,
        });
        first.extend(end.to_le_bytes());
        first.extend(end.rotate_left(32).to_le_bytes());
    }
    let mut second = Vec::new();
    (0..keys).for_each(|k| op(&mut second, 4, k));
    if restart {
        (0..keys).for_each(|k| op(&mut second, 7, k));
    }
    [first, second]
}

/// A `KeyedMultiLimiter` of 1 to 6 keys in a table of 1 to as many (full keys evicted, an
/// untracked key starting at the floor), some keys with an override, every policy changed,
/// reordered or resized (`LimitsChanged`, nothing built) across restarts as `multi` changes
/// its one: per key, one `gcra` reference state per quota, paired across restores as the docs
/// say (`restored_reference`), which the table never admits beyond (it may refuse more: the
/// floor, a full table); where every policy keeps its quotas, the saved table too; per key and
/// quota, the windows across restarts.
fn keyed_multi(b: &mut Bytes<'_>, head: u64) {
    // The ending's restart, read first so that the shortest inputs choose it.
    let end = b.u64();
    // Zero bits (a short input, read past its end as zeros) give a rich table: 3 keys, room
    // for all, a default of 2 quotas and an override of 2 on each even key.
    let keys = ((head >> 8) + 2) as usize % 6 + 1;
    let mut max_keys = keys - (head >> 12) as usize % keys;
    let count = |n: u64| ((n + 1) % 4 + 1) as usize;
    let default: Option<Vec<Quota>> = (0..count(head >> 20)).map(|_| quota(b)).collect();
    let Some(default) = default else {
        return;
    };
    let mut overrides = vec![None; keys];
    for (k, o) in overrides.iter_mut().enumerate() {
        if (head >> (40 + k) ^ k as u64) & 1 == 0 {
            let Some(v) = override_policy(&default, b) else {
                return;
            };
            *o = Some(v);
        }
    }
    let mut pol = Policies { default, overrides };
    let mut tl = Timeline::new(b.u64(), 1);
    let clock = Clocked::new_at(tl.t);
    let mut live = (
        pol.builder(max_keys, clock.clock.clone()).build().unwrap(),
        clock,
    );
    let mut follower: Option<(KeyedMultiLimiter<u64, ManualClock>, Clocked)> = None;
    let mut states: Vec<Vec<u64>> = (0..keys)
        .map(|k| vec![gcra::FULL; pol.of(k).len()])
        .collect();
    let mut slack = Slack::default();
    // Each key's admissions, and where each quota's windows begin in them (its era).
    let mut admitted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); keys];
    let mut eras: Vec<Vec<usize>> = (0..keys).map(|k| vec![0; pol.of(k).len()]).collect();
    // Whether no table so far can have a floor for untracked keys ahead of its reading: every
    // table large enough for all keys (no eviction, every saved entry tracked), no restore
    // into another seed (its entries only raise the floor). Then a paired restore starts each
    // unpaired quota exactly full for every key.
    let mut floorless = max_keys >= keys;
    // Whether the table is exactly its references: every quota ever held exact (no `Slack`),
    // no earlier file restored into the live table (which may withhold more), every restore's
    // cut taken (`cut_at`), and `floorless`.
    let mut tight = true;
    // The latest reading of an admission: saves far behind it are skipped (the documented cut
    // of a debt beyond two refills, as in `keyed`).
    let mut latest = 0;
    // The latest file saved (restored again into a live table: `Onto::Live`).
    let mut prev: Option<Vec<u8>> = None;
    // Where the input ends, the ops read on from the `ending`'s two parts (once each).
    let ending = ending(keys, end);
    let mut parts = ending.iter();
    let mut rest = Bytes(b.0);
    let b = &mut rest;
    let mut ops = 0;
    loop {
        let Some(kind) = b.u8() else {
            match parts.next() {
                Some(part) => *b = Bytes(part),
                None => break,
            }
            continue;
        };
        ops += 1;
        if ops > 384 {
            break;
        }
        let x = b.u64();
        let key = (x >> 56) as usize % keys;
        let quotas = pol.of(key).to_vec();
        let j = (x >> 52) as usize % quotas.len();
        let (step, burst) = (step_of(&quotas[j]), quotas[j].burst());
        if tl.drift(kind % 12, x, step, burst) {
            continue;
        }
        let smallest = quotas.iter().map(Quota::burst).min().unwrap();
        let label = format!("key {key} of {quotas:?} at {} (input {head:x})", tl.t);
        match kind % 12 {
            4 => {
                live.1.at(tl.t);
                let got = live.0.available(&(key as u64));
                let want = states[key]
                    .iter()
                    .zip(&quotas)
                    .map(|(s, q)| gcra::available(*s, tl.t, q))
                    .min()
                    .unwrap();
                let more = slack.more();
                assert!(got <= want + more, "{label}: available {got} > {want}");
                if let Some((f, fc)) = follower.as_ref().filter(|f| !table_wide(f.0.counters())) {
                    fc.at(tl.t);
                    let want = f.available(&(key as u64));
                    assert!(
                        got <= want + more,
                        "{label}: available {got} > the saved {want}"
                    );
                }
            }
            5 | 6 => {
                let onto = Onto::of_multi(kind);
                // Each policy reshaped by its own bits of `x`, or (`Paired`) the policies and
                // pairs read from the input after it.
                let mut new = pol.clone();
                let mut pairs = None;
                let mut misfits = Misfits::default();
                if onto == Onto::Paired {
                    let Some(plan) = paired_plan(&pol, b) else {
                        return;
                    };
                    (new, pairs, misfits) = (plan.new, Some(plan.pairs), plan.misfits);
                } else {
                    let reshape = |v: &mut Vec<Quota>, x: u64, b: &mut Bytes<'_>| {
                        match reshaped(v, (x >> 52) as usize % v.len(), x, b) {
                            Reshape::To(n) => *v = n,
                            Reshape::Skip => {}
                            Reshape::Stop => return false,
                        }
                        true
                    };
                    if !reshape(&mut new.default, x, b) {
                        return;
                    }
                    for (k, o) in new.overrides.iter_mut().enumerate() {
                        if let Some(v) = o {
                            if !reshape(v, x.rotate_left(7 * (k as u32 + 1)), b) {
                                return;
                            }
                        }
                    }
                }
                // The cut is of a debt beyond two refills of the restoring table's slowest
                // quota: skipped where the latest admission is more than a refill of the
                // fastest, saved or restoring, past the save's reading, so that the saved
                // table (which cuts nothing) still bounds the restored one. A conversion can
                // still carry a debt past that (`cut_at`): the references take the cut then,
                // and the saved table no longer bounds the restored one (`within_cut`).
                let refill = pol
                    .all()
                    .chain(new.all())
                    .map(|q| q.refill_time(q.burst()).as_nanos().min(u128::from(T_MAX)) as u64)
                    .min()
                    .unwrap();
                if latest > tl.t.saturating_add(refill) {
                    continue;
                }
                live.1.at(tl.t);
                let mut file = Vec::new();
                live.0.save_at(&mut file, wall(tl.wall())).unwrap();
                if onto == Onto::Live {
                    // The policies here stay `pol` (`new` only read its bytes).
                    let older = prev.as_ref().filter(|_| x >> 39 & 1 == 1);
                    let r = live
                        .0
                        .restore_at(&older.unwrap_or(&file)[..], wall(tl.wall()));
                    into_live(r, older.is_some(), &label);
                    tight &= older.is_none();
                    tl.floor = tl.t;
                    prev = Some(file);
                    continue;
                }
                // Another count is refused: in any pair of policies a key may go through,
                // under the saved seed; under another, in the defaults alone. Pairs given
                // take any counts, and must fit instead.
                let resized = pairs.is_none()
                    && (new.default.len() != pol.default.len()
                        || onto != Onto::OtherSeed
                            && (0..keys).any(|k| new.of(k).len() != pol.of(k).len()));
                let size = match onto {
                    Onto::Same => max_keys,
                    Onto::Resized => other_size(x, keys),
                    _ if x >> 38 & 1 == 1 => other_size(x, keys),
                    _ => max_keys,
                };
                let restore = |c: ManualClock, at: u64| {
                    if let Some(pairs) = &pairs {
                        new.builder(size, c)
                            .restore_paired_at(&file[..], wall(at), pairs)
                    } else if onto == Onto::OtherSeed {
                        let l = new.builder(size, c).build().unwrap();
                        l.restore_at(&file[..], wall(at)).map(|()| l)
                    } else {
                        new.builder(size, c).restore_at(&file[..], wall(at))
                    }
                };
                let r = tl.restart(x, step, burst);
                match r {
                    Restart::Ok { down, origin, at } if !resized && misfits.fit() => {
                        let clock = tl.restarted(down, origin, at);
                        let restored = restore(clock.clock.clone(), at)
                            .unwrap_or_else(|e| panic!("{label}: {onto:?} {pairs:?}: {e:?}"));
                        max_keys = size;
                        floorless &= size >= keys && onto != Onto::OtherSeed;
                        let old = std::mem::replace(&mut live, (restored, clock));
                        old.1.at(tl.t);
                        let cut = cut_at(&new, tl.t);
                        // The saved table bounds the restored one where every key keeps its
                        // quotas and states (pairs may give one saved state to two equal
                        // quotas) and the restore cuts no debt the saved table holds.
                        let same = (0..keys).all(|k| same_quotas(pol.of(k), new.of(k)));
                        follower = (same && pairs.is_none() && within_cut(&old.0, keys, tl.t, cut))
                            .then_some(old);
                        let all: Vec<Quota> = pol.all().chain(new.all()).copied().collect();
                        if !all.iter().all(Quota::is_exact) {
                            slack.0 += Slack::units(&all).0;
                        }
                        tight &= slack.0 == 0.0 && cut.is_some();
                        for k in 0..keys {
                            // A key full at the save (every quota) is not saved: it
                            // restores untracked, full under its policy here (within the
                            // rounding, taken toward full: the reference only grows lenient).
                            let full = states[k].iter().zip(pol.of(k)).all(|(s, q)| {
                                gcra::available(*s, tl.t - down, q) + slack.more() >= q.burst()
                            });
                            states[k] = if full {
                                vec![gcra::FULL; new.of(k).len()]
                            } else if let Some(pairs) = &pairs {
                                paired_reference(&states[k], pol.of(k), new.of(k), pairs, tl.t)
                            } else if pol.of(k).len() != new.of(k).len() {
                                // Another count (an override, into another seed): no quota
                                // paired, each here the strictest any saved one converts to.
                                strictest_reference(&states[k], pol.of(k), new.of(k), tl.t)
                            } else {
                                restored_reference(&states[k], pol.of(k), new.of(k), tl.t)
                            };
                            if let Some(at) = cut {
                                for (s, q) in states[k].iter_mut().zip(new.of(k)) {
                                    *s = (*s).min(earned_floor(q, at));
                                }
                            }
                            // Which saved quota each quota here took its state from: the
                            // pairs given, else the docs' pairing (none across counts).
                            let (old, here) = (pol.of(k), new.of(k));
                            let from = match &pairs {
                                Some(p) => p.clone(),
                                None if old.len() == here.len() => pairing(old, here),
                                None => vec![None; here.len()],
                            };
                            eras[k] = carried_eras(old, here, &from, &eras[k], &admitted[k]);
                        }
                        if let Some(pairs) = &pairs {
                            let hold = match floorless && !table_wide(live.0.counters()) {
                                true if tight => Hold::Exact,
                                true => Hold::Floorless,
                                false => Hold::AtMost,
                            };
                            live.1.at(tl.t);
                            let at = (tl.t, slack);
                            paired_holds(&live.0, &states, &new, pairs, at, hold, &label);
                        }
                        pol = new;
                        prev = Some(file);
                    }
                    // Another number of quotas, pairs that do not fit, or a file from the
                    // future: refused, nothing built (the live table goes on).
                    Restart::Ok { at, .. } | Restart::Future { at } => {
                        let Err(e) = restore(ManualClock::new(), at) else {
                            panic!("{label}: {onto:?} {pairs:?}: restored");
                        };
                        let future = matches!(r, Restart::Future { .. });
                        let n = pairs.as_ref().map_or(0, Vec::len);
                        assert!(
                            future && matches!(e, RestoreError::FromTheFuture { .. })
                                || resized && matches!(e, RestoreError::LimitsChanged { .. })
                                || !misfits.fit() && misfits.owed(&e, n),
                            "{label}: {onto:?} {pairs:?} {misfits:?}: {e:?}"
                        );
                    }
                }
            }
            _ => {
                let cost = multi_cost(x, smallest, burst);
                live.1.at(tl.t);
                let label = format!("{label}: cost {cost}");
                let limits = Limits::new(quotas.iter().copied()).unwrap();
                let expected = gcra::try_acquire_all(padded(&states[key]), tl.t, &limits, cost);
                let k = key as u64;
                let (got, snaps) = match (x >> 32) % 3 {
                    0 => (live.0.try_acquire(&k, cost), None),
                    1 => (live.0.decide(&k, cost).map_err(|r| r.denied()), None),
                    _ => {
                        let (r, s) = live.0.decide_snapshots(&k, cost);
                        (r.map_err(|r| r.denied()), Some(s))
                    }
                };
                if let Err(Denied::ExceedsBurst) = got {
                    assert!(cost > smallest, "{label}");
                }
                if got.is_err() {
                    continue;
                }
                let want = expected.map(|_| ()).map_err(|r| r.denied());
                assert!(
                    within(want, slack.ns(&quotas)),
                    "{label}: admitted beyond the saved policy: {expected:?}"
                );
                if let Ok(Some(s)) = expected {
                    states[key] = s[..quotas.len()].to_vec();
                }
                if let Some(s) = snaps {
                    for (i, (st, q)) in states[key].iter().zip(&quotas).enumerate() {
                        let (have, want) = (s.as_slice()[i], gcra::snapshot(*st, tl.t, q));
                        assert!(
                            have.remaining() <= want.remaining() + slack.more(),
                            "{label}: quota {i}'s snapshot {have:?} {want:?}"
                        );
                    }
                }
                if cost > 0 {
                    admitted[key].push((tl.t, cost));
                    latest = latest.max(tl.t);
                    if let Some((f, fc)) = &follower {
                        fc.at(tl.t);
                        let want = f.try_acquire(&k, cost);
                        if table_wide(f.counters()) {
                            follower = None;
                        } else {
                            assert!(
                                within(want, slack.ns(&quotas)),
                                "{label}: the saved table: {want:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    for (k, a) in admitted.iter().enumerate() {
        for (q, &era) in pol.of(k).iter().zip(&eras[k]) {
            check_windows(q, &mut a[era..].to_vec(), "a key's last policy");
        }
    }
}

/// How closely a table holds to its references right after a paired restore.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Hold {
    /// No more than the references, to within `Slack` (a floor for untracked keys, a full
    /// table, rounding or an earlier file restored into the live table may withhold more).
    AtMost,
    /// No floor for untracked keys can apply: an unpaired quota exactly full, a paired one
    /// no more than its reference.
    Floorless,
    /// Exactly the references, snapshot for snapshot (`tight`): a paired quota its saved
    /// state refilled over the downtime and converted, an unpaired one full.
    Exact,
}

/// Right after a paired restore (`Onto::Paired`, at global time `t` with the arm's `slack`),
/// per key, a cost-0 decision's snapshots (it writes nothing) against the references, as
/// `hold` says.
fn paired_holds(
    live: &KeyedMultiLimiter<u64, ManualClock>,
    states: &[Vec<u64>],
    new: &Policies,
    pairs: &[Option<usize>],
    (t, slack): (u64, Slack),
    hold: Hold,
    what: &str,
) {
    for (k, st) in states.iter().enumerate() {
        let (_, snaps) = live.decide_snapshots(&(k as u64), 0);
        for (j, (q, s)) in new.of(k).iter().zip(st).enumerate() {
            let have = snaps.as_slice()[j];
            let want = gcra::snapshot(*s, t, q);
            let what =
                format!("{what}: after a paired restore {pairs:?} ({hold:?}), key {k} quota {j}");
            match hold {
                Hold::Exact => assert_eq!(have, want, "{what}"),
                Hold::Floorless if pairs[j].is_none() => {
                    assert_eq!(have.remaining(), q.burst(), "{what}: {have:?}, not full");
                }
                _ => assert!(
                    have.remaining() <= want.remaining() + slack.more(),
                    "{what}: {have:?} > {want:?}"
                ),
            }
        }
    }
}
