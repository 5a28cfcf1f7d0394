//! Two discrete-event models of one limit decided by many cores: a single word (`Bucket`, the
//! harness's `cas`) against the sharded bucket's protocol (a central word, one lease per core),
//! counting cache-line transfers, central compare-and-swaps and lease sizes. Deterministic:
//! every run with the same arguments prints the same table (SplitMix64, fixed seeds).
//!
//! # The think-time model (numeric arguments)
//!
//! * **Cores** issue one-token decisions, each after an exponentially distributed think time,
//!   so that all cores together offer `load × rate` decisions per second.
//! * **Lines.** A line is held modified by one core or shared by several. A hit costs 1 ns; a
//!   miss (a read of a line another core wrote, or a write of a line other cores hold) costs
//!   `t_w`. Those from the line's writer and the writes occupy the line for `t_w`: they queue,
//!   so it serves at most `1 / t_w` of them a second; reads of a clean shared line do not. A
//!   CAS that queued behind another core's transfer of its line is counted as failed once (its
//!   reading went stale) and retried: one more transfer and one more CAS.
//! * **The protocols** are the crate's rules, on token units: GCRA on the word; a lease of
//!   `⌊(held − 1) / (8 × cores)⌋` tokens (at most 65,536) taken with a decision while the word
//!   holds more than `1 + 8 × cores × m`, `m` the smallest lease (what the rate earns in 250 ns,
//!   one token at least); `dry_until` recorded by every refusal of the central
//!   word and by an admission that took its last token, answering the core's one-token
//!   refusals before it from its own line; and **advances**: a refusal answered from
//!   `dry_until` makes the core hungry, and a hungry core that finds the word dry (and not
//!   already beyond its limit: one advance out at a time) takes in one CAS the next `ahead`
//!   tokens, not yet earned, paying them from its own line as they are earned; `ahead` starts
//!   at 1, doubles after an advance spent to its top, halves (to 1 at least) after one let
//!   tokens lapse, at most 64 and what the rate earns in 16 µs; and **`dry_all`** on the
//!   read-mostly line, which every decision reads first: a central decision that leaves the
//!   word dry for 1 ms or more, or the 64th admission from the word in a row by one core (the
//!   run counted on the central line its CAS holds), publishes the instant the word holds a
//!   token again, after a scan of every shard line (lapsed leases emptied; skipped while no
//!   lease or advance was handed out since the last scan that found them all empty; the lease
//!   that stopped the last scan read first, so that one line stops it again), and until
//!   then a one-token decision is refused from that line alone. The `no-advance` rows run the
//!   same rules without advances.
//!
//! ```text
//! cargo run --release --example sharded_sim -- [CORES] [T_W_NS] [RATE_PER_S] [BURST] [HOT_PCT] [MS]
//! ```
//! Defaults: 64 cores, 100 ns, 10,000,000/s, 10,000, and every core offering the same load.
//! `HOT_PCT` between 1 and 99: core 0 offers that percentage of the load and the others share
//! the rest (one busy core among quiet ones: the run that publishes every dry spell). Simulates
//! `MS` milliseconds per offered load (default 20, and at least 2,000 tokens' time at low
//! rates), for `cas` and for the sharded bucket with and without advances.
//!
//! # The step model (`calibrate`, `predict`, `spin`)
//!
//! Threads call `try_acquire(1)` in a loop with no think time, as `tollgate-bench compare`'s
//! do, and every line access of a decision is an event of its own, resolved in time order.
//!
//! * **A decision** costs `--local` (30 ns: the clock and the call, the same for every
//!   strategy) before its first access, a load that hits 1 ns and a locked operation (CAS,
//!   fetch-add) on a line the core holds `--atomic` (10 ns). The local cost and every transfer
//!   vary uniformly by `--jitter` percent (50) either way.
//! * **Lines.** A line is held modified by one core or shared by several. A write, or a read of
//!   a line another core holds modified, transfers it (`--t-w`, 60 ns); transfers of one line
//!   are served one at a time in the order they are issued, and the core that held it keeps it
//!   `--hold` percent (0) of the next transfer after that transfer starts. A read of a line no
//!   core holds modified copies it in parallel. The central word and the read-mostly line are
//!   such lines; a shard's line is touched only by its own core (threads are homed by CPU), so
//!   its accesses are local, but for the scans of a `dry_all` publication.
//! * **A CAS** compares the word when its access completes: one that finds the word moved
//!   fails, and the loop goes on from the value it returned — `Bucket` retries at once after
//!   its first loss and spins from its second, the sharded `decide` spins after every loss;
//!   a spin is 1, 2, 4, … 64 `pause` instructions of `--pause` (45 ns, about 140 cycles). A
//!   decision keeps its one clock reading throughout, so a starved loop ends refused once the
//!   word passes that reading's limit (burst / rate later).
//! * **Threads and cores.** Thread `i` runs on core `i mod cores` (and on that core's shard);
//!   the first thread of each core starts deciding `i × --spawn-ns` (20 µs, one thread spawn)
//!   after thread 0, as the harness starts them one by one without a barrier. With more threads than cores, the
//!   threads of a core take turns in slices of `--slice-us` (3,000 µs: Linux's base slice of
//!   0.75 ms scaled by 1 + log2(8) on 16 CPUs) with a switch of `--switch-ns` (2 µs): a thread
//!   is descheduled at its next access or decision once its slice is over — between its clock
//!   reading and its CAS, in a backoff spin, or while it holds its shard's lease `LOCKED` —
//!   and resumes there. `--no-locked-preemption` never deschedules a thread holding its lease
//!   `LOCKED` (an ablation). `--idle-at-us A --idle-us D`: every thread stops at `A` for `D`
//!   and all start again together.
//! * **Rules.** `cas`: `Bucket`'s loop — a load and the CAS; a refusal loads the word again
//!   and stands if it is unchanged; after a loss the loop goes on from the word the CAS (or
//!   that load) returned, at once after the first loss and after a spin before every later
//!   attempt, the refusal's second load included, which compares with the word from before the
//!   spin. `multi`: `MultiBucket`'s two-quota loop (the harness's policy: the regime's quota and
//!   half its rate with twice its burst; `--wide-ns`, 17, added to its local work): the same,
//!   but a refusal after the first attempt stands without a second load. `--loop bounded`: both
//!   loops as a candidate the crate does not ship (it cost two cores' `mixed` three quarters
//!   of their throughput) — a refusal on a word obtained after its quota slot was
//!   read stands without a second load, and a loss is followed by at most 7 spins (1, 2, … 64
//!   pauses, each once), then none. The parts one at a time: `--version` (that refusal rule),
//!   `--spin-rounds N`, `--spin-from N` (losses before the first spin, 2), `--spin-cap E` (the
//!   longest spin, 2^E pauses, 6), `--reload` (a load of the word after each spin, so that the
//!   CAS compares a fresh value), `--probe` (no spin after a loss that followed a spin).
//!   `--recompute` (1 ns): the work between a word and the CAS decided on it, varied by the
//!   jitter; with `--hold 30 --recompute 15` the single-word loops reproduce the 16-core
//!   measurements of `cas` (threads starved for whole rounds) and `multi` (p999 7.5 µs, 29 µs
//!   and 1.0 ms at 4, 8 and 16 threads in `mixed`; measured 7.3, 29.7 and 1,004 µs).
//!   `sharded`: the crate's current rules as in the think-time model, step by step: the
//!   read-mostly line and `dry_all`, the shard's lease (a spend, an advance's unit not yet
//!   payable, `dry_until`), `decide_fast` (one CAS, or an advance for a hungry shard:
//!   lock, count the hand-out on the central line, CAS, install), `decide` (the lease
//!   locked, the hand-out counted and the CAS made at every attempt, a spin after every lost
//!   CAS), a spender that finds the lease `LOCKED` deciding on the word alone, the run alone
//!   and `dry_all` publications (the chain that follows a run alone is not modelled: runs are
//!   counted, and none occurred in the calibration). `near`: the near leases —
//!   `F = min(64, ⌊R × 16 µs⌋, ⌊B / 8n⌋)` (`--f` replaces it); a lease empty goes to
//!   `decide`, which takes 1 + `a` tokens (`a` doubled after a lease spent to its top, halved
//!   after one that lapsed, within `[1, F]`, the far lease when it is larger; a near lease
//!   only if its first unit lies at least `lease_min` beyond the units earned) or, with the
//!   word unable to pay, an advance of `a` tokens, both as long as the word stays within
//!   `room = min(n × F, R × 250 µs)` beyond the limit; a lease holding units not yet payable
//!   refuses from the shard's line; a spender that finds its lease `LOCKED` decides on the word
//!   alone, as in the current rules. An admission that spends its lease to the top takes the
//!   shard's next near lease (a refill) unless its next token is earned and the word can pay
//!   it; a refill that loses its CAS tries once more at once, then gives up. The lease is
//!   locked for each CAS alone: a lost CAS
//!   unlocks it, spins and locks it again for the next attempt (a thread descheduled in the
//!   spin holds nothing). After a lost CAS the decision reads the clock again, and a far lease
//!   is at least what the rate earns in twice that age (reading to now), at most half of what
//!   the word holds beyond the cost. Ablations: `--locked-spin` (the lease stays locked
//!   through the spin), `--no-lease-by-wait`, `--no-near-min`, `--no-refill`,
//!   `--refill-gives-up` (at the first lost CAS); `--lease-by-wait-any` (an
//!   earlier proposal, not the crate's): every lease taken from a word holding more than it,
//!   near ones too and from the first attempt on, is at least what the rate earns in twice the
//!   decision's age, at most half of what the word holds.
//! * **Counted** (`--paths` also prints how the decisions went): decisions a second from the
//!   last thread's start, admitted / the bound (`burst + rate × T`,
//!   a drained start `rate × T`; a run that passed it would stop the program), latency
//!   percentiles of every decision, central CASes per admission (failed ones included),
//!   shared-line writes per refusal as the crate's counter counts them (by refusing
//!   decisions: the hand-out count and CAS of an advance, CAS attempts and hand-out counts
//!   that lost, a publication's scan records, emptied leases and `dry_all`; `--paths` splits
//!   them), transfers per decision, the fewest and most admissions of a thread,
//!   tokens that lapsed in leases, admissions from the word by a decision that found its
//!   lease `LOCKED`, and slices that began with the descheduled thread's lease `LOCKED`.
//!
//! ```text
//! cargo run --release --example sharded_sim -- calibrate [--ms 120] [--seeds 3] [machine options]
//! cargo run --release --example sharded_sim -- predict [--ms 40] [--short-ms 5] [machine options]
//! cargo run --release --example sharded_sim -- spin [--cores 16] [--threads 4,8,16,32]
//!     [--rules cas,sharded,near,multi] [--regime mixed|mixed-drained|deny|allow] [--ms 20]
//!     [--seed 1] [--paths] [machine options]
//! cargo run --release --example sharded_sim -- tails [--cores 16] [--threads 1,2,4,8,16]
//!     [--rules cas,multi] [--regime mixed,allow,deny] [--ms 40] [--seeds 1] [--label L]
//!     [--loop spinning|bounded] [machine options]
//! ```
//! `tails`: the single-word loops' throughput and tails, with the longest decision (those
//! still under way when the run ends included, at their age then) and the fewest and most
//! decisions of a thread.
//! `calibrate`: the current rules on 16 cores in `mixed` beside the 16-core measurements, and
//! the ablation above. `predict`: `cas`, the current rules and the near rules at 16 cores (4–32
//! threads), 64 cores (64 and 128 threads) and 2 cores (1–8), `mixed`, `deny` and `allow`, the
//! issue's targets checked, and the idle-then-all-at-once runs. Regimes as the harness's:
//! `mixed` 10 M tokens/s with a burst of 10,000 starting full, `deny` 1/s with a burst of 1,000
//! starting drained, `allow` 10^9/s with a burst of 10^9; `mixed-drained` is `mixed` starting
//! drained.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

const HIT_NS: u64 = 1;
const SPREAD: u64 = 8;
const LEASE_MAX: u64 = 1 << 16;
const ADVANCE_MAX: u64 = 64;
const ADVANCE_NS: u64 = 16_000;
const LEASE_MIN_NS: u64 = 250;
const SIM_NS: u64 = 20_000_000;
/// The crate's `DRY_ALL_NS` and `ALONE_AFTER`.
const DRY_ALL_NS: u64 = 1_000_000;
const ALONE_AFTER: u64 = 64;

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// An exponential think time of mean `mean` ns.
    fn exp(&mut self, mean: f64) -> u64 {
        let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-u.ln() * mean) as u64
    }
}

/// One cache line: its holders and when its last queued transfer ends.
#[derive(Clone, Default)]
struct Line {
    writer: Option<usize>,
    sharers: Vec<bool>,
    busy_until: u64,
}

/// Transfers and CASes counted over a run.
#[derive(Default)]
struct Counts {
    transfers: u64,
    central_cas: u64,
}

impl Line {
    fn new(cores: usize) -> Line {
        Line {
            writer: None,
            sharers: vec![false; cores],
            busy_until: 0,
        }
    }

    /// A transfer of this line to a core at `t`: when it ends, and whether it queued.
    fn transfer(&mut self, t: u64, t_w: u64, c: &mut Counts) -> (u64, bool) {
        let start = t.max(self.busy_until);
        self.busy_until = start + t_w;
        c.transfers += 1;
        (start + t_w, start > t)
    }

    fn read(&mut self, core: usize, t: u64, t_w: u64, c: &mut Counts) -> u64 {
        if self.writer == Some(core) || self.sharers[core] {
            return t + HIT_NS;
        }
        self.sharers[core] = true;
        match self.writer.take() {
            // From the core that wrote it: one transfer at a time.
            Some(w) => {
                self.sharers[w] = true;
                self.transfer(t, t_w, c).0
            }
            // A copy of a clean line (another cache or the L3): in parallel with other reads.
            None => {
                c.transfers += 1;
                t + t_w
            }
        }
    }

    /// A CAS by `core` at `t` (retried once if it queued): when it ends.
    fn cas(&mut self, core: usize, t: u64, t_w: u64, c: &mut Counts, central: bool) -> u64 {
        let others = self
            .sharers
            .iter()
            .enumerate()
            .any(|(i, &s)| s && i != core);
        let local = self.writer == Some(core) || (self.writer.is_none() && !others);
        self.sharers.iter_mut().for_each(|s| *s = false);
        self.writer = Some(core);
        c.central_cas += u64::from(central);
        if local {
            return t + HIT_NS;
        }
        let (end, queued) = self.transfer(t, t_w, c);
        if !queued {
            return end;
        }
        c.central_cas += u64::from(central);
        self.transfer(end, t_w, c).0
    }
}

/// A shard's lease in token units: `[frontier, top)` of the central word's units.
#[derive(Clone, Copy, Default)]
struct Lease {
    frontier: u64,
    top: u64,
    dry_until: u64,
    /// The tokens of the core's next advance (0: not hungry).
    ahead: u64,
    /// A scan emptied the lease after it lapsed: the next advance halves (the crate's mark in
    /// `ahead`).
    emptied: bool,
}

/// The state of one simulated limiter. Units: 1 token = `1e9` units, `rate` units earned per ns.
struct Model {
    sharded: bool,
    /// The most tokens an advance takes (0: no advances).
    ahead_cap: u64,
    /// The fewest tokens a lease takes (the crate's `lease_min`).
    lease_min: u64,
    cores: usize,
    t_w: u64,
    rate: u64,
    burst: u64,
    state: u64,
    leases: Vec<Lease>,
    central: Line,
    shard_lines: Vec<Line>,
    /// The bucket's read-mostly line (quota, clock, `dry_all`).
    read_mostly: Line,
    /// The instant before which a one-token decision is refused from the read-mostly line.
    dry_all: u64,
    /// Leases and advances handed out; its value at the last scan that found every lease empty.
    hand_outs: u64,
    clean: u64,
    /// The shard whose lease stopped the last scan (`usize::MAX`: none).
    blocker: usize,
    /// The core that made the last admissions from the word without a lease, and how many in a
    /// row before the last.
    run: (usize, u64),
    publications: u64,
    /// Shard lines read by the scans before publications.
    scan_lines: u64,
    dry_all_refusals: u64,
    counts: Counts,
    leases_taken: u64,
    lease_tokens: u64,
    advances: u64,
    lapsed_units: u64,
}

const UNIT: u64 = 1_000_000_000;

impl Model {
    fn earned(&self, t: u64) -> u64 {
        t * self.rate
    }

    /// One decision of `core` at `t`: whether admitted, and when it ends.
    fn decide(&mut self, core: usize, t: u64) -> (bool, u64) {
        let (e, burst) = (self.earned(t), self.burst * UNIT);
        let limit = e + burst;
        let mut now = t;
        if self.sharded {
            now = self.read_mostly.read(core, now, self.t_w, &mut self.counts);
            if t < self.dry_all {
                self.dry_all_refusals += 1;
                return (false, now);
            }
            let l = self.leases[core];
            now = self.shard_lines[core].read(core, now, self.t_w, &mut self.counts);
            let base = l.frontier.max(e);
            if base + UNIT <= l.top {
                if l.frontier + UNIT <= limit {
                    self.leases[core].frontier = base + UNIT;
                    let end =
                        self.shard_lines[core].cas(core, now, self.t_w, &mut self.counts, false);
                    return (true, end);
                }
                // An advance's next token, not yet earned: refused from the core's own line.
                return (false, now);
            }
            if t < l.dry_until {
                if self.ahead_cap > 0 && l.ahead == 0 {
                    self.leases[core].ahead = 1;
                }
                return (false, now);
            }
        }
        now = self.central.read(core, now, self.t_w, &mut self.counts);
        let s = self.state;
        if s + UNIT <= limit {
            let held = (limit - s).min(burst) / UNIT;
            let lease = if self.sharded && held > 1 + SPREAD * self.cores as u64 * self.lease_min {
                ((held - 1) / (SPREAD * self.cores as u64)).min(LEASE_MAX)
            } else {
                0
            };
            let next = s.max(e) + UNIT + lease * UNIT;
            self.state = next;
            let end = self
                .central
                .cas(core, now, self.t_w, &mut self.counts, true);
            if lease > 0 {
                self.hand_outs += 1;
                let l = &mut self.leases[core];
                (l.frontier, l.top) = (next - lease * UNIT, next);
                self.leases_taken += 1;
                self.lease_tokens += lease;
                let end = self.shard_lines[core].cas(core, end, self.t_w, &mut self.counts, false);
                return (true, end);
            }
            if self.sharded && next + UNIT > limit {
                // The word's last token: the core refuses from its own line until the next.
                let dry = (next + UNIT - burst).div_ceil(self.rate);
                self.leases[core].dry_until = dry;
                return (true, self.note_dry(core, end, t, e, true, dry));
            }
            return (true, end);
        }
        if !self.sharded {
            return (false, now);
        }
        if let Some(end) = self.advance(core, now, e, s) {
            return (false, end);
        }
        // The instant the word holds one token again.
        let dry = (s + UNIT - burst).div_ceil(self.rate);
        if dry > self.leases[core].dry_until {
            self.leases[core].dry_until = dry;
            now = self.shard_lines[core].cas(core, now, self.t_w, &mut self.counts, false);
        }
        (false, self.note_dry(core, now, t, e, false, dry))
    }

    /// After a central decision at reading `t` that found or left the word dry until `dry`
    /// (`admitted`: one that took a token and no lease): publishes `dry_all` if the spell is
    /// 1 ms or more, or the core has made the last 64 such admissions. When it ends.
    fn note_dry(&mut self, core: usize, now: u64, t: u64, e: u64, admitted: bool, dry: u64) -> u64 {
        if dry <= t {
            return now;
        }
        let alone = admitted && {
            let (who, n) = self.run;
            if who != core {
                self.run = (core, 0);
                false
            } else {
                self.run.1 = (n + 1).min(ALONE_AFTER - 1);
                n + 1 >= ALONE_AFTER - 1
            }
        };
        if !alone && dry - t < DRY_ALL_NS || dry <= self.dry_all {
            return now;
        }
        let mut now = now;
        if self.clean != self.hand_outs {
            // The lease that stopped the last scan first (`blocker`): one line while it holds.
            let order = std::iter::once(self.blocker).chain(0..self.cores);
            for c in order.filter(|&c| c < self.cores) {
                self.scan_lines += 1;
                now = self.shard_lines[c].read(core, now, self.t_w, &mut self.counts);
                let l = self.leases[c];
                if l.frontier >= l.top {
                    continue;
                }
                if l.top > e {
                    self.blocker = c;
                    return now; // a lease holds units: its shard spends them first
                }
                // Lapsed: emptied (a lock and a store on its line), its units stranded.
                self.lapsed_units += l.top - l.frontier;
                self.leases[c].frontier = l.top;
                self.leases[c].emptied = l.ahead > 0;
                now = self.shard_lines[c].cas(core, now, self.t_w, &mut self.counts, false);
            }
            self.clean = self.hand_outs;
        }
        self.dry_all = dry;
        self.publications += 1;
        self.read_mostly
            .cas(core, now, self.t_w, &mut self.counts, false)
    }

    /// A hungry core's advance, with the word dry at its reading (state `s`, `e` earned): the
    /// end of the decision if it took one.
    fn advance(&mut self, core: usize, now: u64, e: u64, s: u64) -> Option<u64> {
        let l = self.leases[core];
        if l.ahead == 0 || self.ahead_cap == 0 {
            return None;
        }
        let (size, lapsed) = if l.frontier < l.top || l.emptied {
            ((l.ahead / 2).max(1), l.top - l.frontier)
        } else if l.top > 0 {
            ((l.ahead * 2).min(self.ahead_cap), 0)
        } else {
            (l.ahead.min(self.ahead_cap), 0)
        };
        // One advance out at a time: a word beyond its limit is not raised further.
        if s > e + self.burst * UNIT {
            return None;
        }
        let base = s.max(e);
        let top = base + size * UNIT;
        self.state = top;
        self.hand_outs += 1;
        let end = self
            .central
            .cas(core, now, self.t_w, &mut self.counts, true);
        let l = &mut self.leases[core];
        (l.frontier, l.top, l.ahead, l.emptied) = (base, top, size, false);
        self.advances += 1;
        self.lapsed_units += lapsed;
        Some(self.shard_lines[core].cas(core, end, self.t_w, &mut self.counts, false))
    }
}

/// The simulated time at `rate_per_s`: `ms` milliseconds, or 2,000 tokens' time if longer.
fn sim_ns(rate_per_s: u64, ms: u64) -> u64 {
    (ms * 1_000_000).max(2_000 * 1_000_000_000 / rate_per_s)
}

/// What one run measured.
struct Run {
    decisions: u64,
    admitted: u64,
    transfers: u64,
    central_cas: u64,
    p99_ns: u64,
    mean_lease: f64,
    advances: u64,
    lapsed_tokens: f64,
    /// Decisions refused from `dry_all`, its publications, and the shard lines their scans read.
    dry_all_refusals: u64,
    publications: u64,
    scan_lines: u64,
}

/// One run: `cas` (`sharded` false), or the sharded bucket with or without advances.
fn run(
    (sharded, advances): (bool, bool),
    cores: usize,
    t_w: u64,
    (rate_per_s, burst): (u64, u64),
    load: f64,
    (hot, sim_ns): (u64, u64),
) -> Run {
    let rate = rate_per_s; // units per ns: (tokens/s × 1e9 units) / 1e9 ns
    let mut m = Model {
        sharded,
        // What the rate earns in 16 µs, at most 64 tokens (the crate's `advance_cap`).
        ahead_cap: if sharded && advances {
            (rate_per_s * ADVANCE_NS / 1_000_000_000).min(ADVANCE_MAX)
        } else {
            0
        },
        // What the rate earns in 250 ns, one token at least (the crate's `lease_min`).
        lease_min: (rate_per_s * LEASE_MIN_NS / 1_000_000_000).max(1),
        cores,
        t_w,
        rate,
        burst,
        state: 0,
        leases: vec![Lease::default(); cores],
        central: Line::new(cores),
        shard_lines: vec![Line::new(cores); cores],
        read_mostly: Line::new(cores),
        dry_all: 0,
        hand_outs: 0,
        clean: u64::MAX,
        blocker: usize::MAX,
        run: (usize::MAX, 0),
        publications: 0,
        scan_lines: 0,
        dry_all_refusals: 0,
        counts: Counts::default(),
        leases_taken: 0,
        lease_tokens: 0,
        advances: 0,
        lapsed_units: 0,
    };
    let mut rng = Rng(1);
    // Mean think times so that all cores offer `load × rate` decisions per second: core 0
    // `hot` % of them if `hot` is set, the others an equal share of the rest.
    let offered = load * rate_per_s as f64;
    let means: Vec<f64> = if (1..100).contains(&hot) {
        let h = hot as f64 / 100.0;
        (0..cores)
            .map(|c| match c {
                0 => 1e9 / (h * offered),
                _ => (cores - 1) as f64 * 1e9 / ((1.0 - h) * offered),
            })
            .collect()
    } else {
        vec![cores as f64 * 1e9 / offered; cores]
    };
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..cores)
        .map(|c| Reverse((rng.exp(means[c]), c)))
        .collect();
    let (mut decisions, mut admitted) = (0u64, 0u64);
    let mut latencies = Vec::new();
    while let Some(Reverse((t, core))) = heap.pop() {
        if t >= sim_ns {
            continue;
        }
        let (ok, end) = m.decide(core, t);
        decisions += 1;
        admitted += u64::from(ok);
        latencies.push(end - t);
        heap.push(Reverse((end + rng.exp(means[core]), core)));
    }
    latencies.sort_unstable();
    let p99 = latencies
        .get(latencies.len() * 99 / 100)
        .copied()
        .unwrap_or(0);
    Run {
        decisions,
        admitted,
        transfers: m.counts.transfers,
        central_cas: m.counts.central_cas,
        p99_ns: p99,
        mean_lease: if m.leases_taken == 0 {
            0.0
        } else {
            m.lease_tokens as f64 / m.leases_taken as f64
        },
        advances: m.advances,
        lapsed_tokens: m.lapsed_units as f64 / UNIT as f64,
        dry_all_refusals: m.dry_all_refusals,
        publications: m.publications,
        scan_lines: m.scan_lines,
    }
}

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    if words
        .first()
        .is_some_and(|w| w.starts_with(|c: char| c.is_ascii_alphabetic()))
    {
        cli::main(&words);
        return;
    }
    let mut args = words.iter().map(|a| a.parse::<u64>().expect("a number"));
    let cores = args.next().unwrap_or(64) as usize;
    let t_w = args.next().unwrap_or(100);
    let rate = args.next().unwrap_or(10_000_000);
    let burst = args.next().unwrap_or(10_000);
    let hot = args.next().unwrap_or(0);
    let ms = args.next().unwrap_or(SIM_NS / 1_000_000);
    assert!((2..=4096).contains(&cores) && t_w > 0 && rate > 0 && burst > 0 && hot < 100);
    assert!((1..=100_000).contains(&ms));
    let sim_ns = sim_ns(rate, ms);
    let share = if hot > 0 {
        format!("core 0 offering {hot} % of the load")
    } else {
        "every core offering the same load".to_owned()
    };
    println!(
        "{cores} cores, t_w {t_w} ns, rate {rate}/s, burst {burst}, {share}, {} ms simulated per \
         row; load = offered decisions / rate",
        sim_ns / 1_000_000
    );
    println!(
        "load  strategy      decisions M/s  admitted M/s  transfers/decision  \
         central CAS/admission  p99 ns  mean lease  advances/ms  lapsed tokens  \
         dry_all refusals  publications/ms  scan lines/ms"
    );
    let strategies = [
        ("cas", (false, false)),
        ("sharded", (true, true)),
        ("no-advance", (true, false)),
    ];
    for load in [0.5, 1.0, 2.0, 10.0] {
        for (name, kind) in strategies {
            let r = run(kind, cores, t_w, (rate, burst), load, (hot, sim_ns));
            println!(
                "{load:>4}  {name:<12}  {:>13.2}  {:>12.2}  {:>18.2}  {:>21.2}  {:>6}  {:>10.1}  {:>11.1}  {:>13.0}  {:>15.1}%  {:>15.2}  {:>13.1}",
                r.decisions as f64 * 1e3 / sim_ns as f64,
                r.admitted as f64 * 1e3 / sim_ns as f64,
                r.transfers as f64 / r.decisions as f64,
                r.central_cas as f64 / r.admitted.max(1) as f64,
                r.p99_ns,
                r.mean_lease,
                r.advances as f64 * 1e6 / sim_ns as f64,
                r.lapsed_tokens,
                r.dry_all_refusals as f64 * 100.0 / r.decisions.max(1) as f64,
                r.publications as f64 * 1e6 / sim_ns as f64,
                r.scan_lines as f64 * 1e6 / sim_ns as f64,
            );
        }
    }
}

/// The step model: every core (or thread) spins on one-token decisions, each a sequence of
/// cache-line accesses resolved in time order (see the module docs).
mod spin {
    use super::Rng;
    use hdrhistogram::Histogram;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    const UNIT: u64 = super::UNIT;
    /// A lease's frontier while a thread replaces it.
    const LOCKED: u64 = u64::MAX;
    /// A load that hits.
    const LOAD_NS: u64 = 1;
    /// The line ids: the central word, the read-mostly line; shard lines are not modelled as
    /// lines (only their own core touches them, but for scans, costed as transfers).
    const CENTRAL: usize = 0;
    const RM: usize = 1;
    /// No line: a step that only waits (a backoff spin), where the thread can be descheduled.
    const NO_LINE: usize = usize::MAX;
    /// What a refusing decision's shared-line writes were: the hand-out count and CAS of the
    /// advance it took, attempts (CAS and hand-out count) that lost to another core, the
    /// writes of a `dry_all` publication (scan records, emptied leases, `dry_all` itself).
    const W_ADVANCE: usize = 0;
    const W_LOST: usize = 1;
    const W_PUBLISH: usize = 2;
    const SPREAD: u64 = 8;
    const LEASE_MAX: u64 = 1 << 16;
    const LEASE_MIN_NS: u64 = 250;
    const ADVANCE_NS: u64 = 16_000;
    const ADVANCE_MAX: u64 = 64;
    const ROOM_NS: u64 = 250_000;
    const DRY_ALL_NS: u64 = 1_000_000;
    const ALONE_AFTER: u64 = 64;
    /// `Backoff::spin`: 1, 2, 4, … 64 pause instructions.
    const SPIN_LIMIT: u32 = 6;

    /// Which limiter the threads call.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(crate) enum Rules {
        /// `Bucket`: one CAS loop on one word.
        Cas,
        /// The sharded bucket's current rules (leases, `dry_until`, advances, `dry_all`).
        Today,
        /// The sharded bucket with near leases (`F`, sizes per shard, `room`).
        Near,
        /// `MultiBucket` of two quotas (the harness's `multi`: the regime's quota and half its
        /// rate with twice its burst): one CAS loop on one 128-bit word, decided from a mirror
        /// on the word's line.
        Multi,
    }

    impl Rules {
        pub(crate) fn name(self) -> &'static str {
            match self {
                Rules::Cas => "cas",
                Rules::Today => "sharded",
                Rules::Near => "near",
                Rules::Multi => "multi",
            }
        }
    }

    /// The machine: cores, costs, the scheduler.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Machine {
        pub(crate) cores: usize,
        /// One cache-line transfer between cores, ns.
        pub(crate) t_w: u64,
        /// The instructions of a decision outside its line accesses (clock, call), ns.
        pub(crate) local: u64,
        /// A locked read-modify-write (CAS, fetch_add) on a line the core holds, ns.
        pub(crate) atomic: u64,
        /// One `pause` instruction, ns.
        pub(crate) pause: u64,
        /// A time slice with more threads than cores, ns.
        pub(crate) slice: u64,
        /// A context switch, ns.
        pub(crate) switch: u64,
        /// Thread `i` starts deciding `i` times this (the harness spawns them one by one), ns.
        pub(crate) spawn: u64,
        /// Every thread stops deciding at `idle.0` ns for `idle.1` ns (the bucket refills), then
        /// all start again together (0: never).
        pub(crate) idle: (u64, u64),
        /// Never deschedule a thread while it holds its shard's lease `LOCKED` (the slice ends
        /// once it lets go): what the loss with more threads than cores owes to that.
        pub(crate) no_locked_preemption: bool,
        /// Near rules: `F` instead of the rule's (0: the rule's).
        pub(crate) f: u64,
        /// Near rules: after a lost CAS, a far lease is at least what the rate earns in twice
        /// the decision's age (its reading to the clock read again after the spin), at most half
        /// of what the word holds beyond the cost (the crate's rule; `--no-lease-by-wait` turns
        /// it off).
        pub(crate) lease_by_wait: bool,
        /// Near rules: the lease stays `LOCKED` through the backoff spin after a lost CAS
        /// (`--locked-spin`; the crate unlocks it before the spin and locks it again after).
        pub(crate) locked_spin: bool,
        /// Near rules: a near lease is taken however close its first unit lies to the units
        /// earned (`--no-near-min`; the crate takes one only `lease_min` ahead).
        pub(crate) no_near_min: bool,
        /// Near rules: the earlier proposal instead of the crate's rule — every lease taken
        /// from a word holding more than it (near ones too, and from the first attempt on) is
        /// at least what the rate earns in twice the decision's age, at most half the word
        /// (`--lease-by-wait-any`).
        pub(crate) lease_by_wait_any: bool,
        /// Near rules: no refill — the admission that spends its shard's near lease to the top
        /// takes no next one, so the shard's next refusal takes it as an advance
        /// (`--no-refill`; the crate's admission takes it when the next token is unearned or
        /// the word cannot pay it).
        pub(crate) no_refill: bool,
        /// Near rules: a refill that loses its CAS gives up at once (`--refill-gives-up`; the
        /// crate's tries once more, without a spin, from the word the lost CAS returned).
        pub(crate) refill_gives_up: bool,
        /// Near rules: the longest backoff spin after lost CASes on the central word, 2^this
        /// pauses (`--central-spin-cap`; the crate's `CENTRAL_SPIN_LIMIT`, 10: 1,024 pauses).
        pub(crate) central_spin_cap: u32,

        /// Each transfer and each decision's local work take between `1 - jitter` and
        /// `1 + jitter` times their cost (uniform), in percent.
        pub(crate) jitter: u64,
        /// How long the core that held a line keeps it after the next transfer starts, in
        /// percent of that transfer.
        pub(crate) hold: u64,
        /// How `cas` and `multi` retry after a lost attempt.
        pub(crate) retry: Retry,
        /// What a `multi` decision costs beyond a `cas` one outside its line accesses (two
        /// quotas, a 128-bit CAS), ns.
        pub(crate) wide: u64,
        /// `cas`, `multi`: the work between obtaining a word (a load, a lost CAS) and the CAS
        /// decided on it (the decision again), ns, varied by the jitter (`--recompute`, 1).
        pub(crate) recompute: u64,
    }

    /// How a single-word loop (`cas`, `multi`) retries. The defaults are the crate's loops
    /// (`Bucket::retry`, `Pair::retry`); the rest are candidates.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Retry {
        /// Lost attempts (CASes lost, and refusals whose second load found the word moved)
        /// before the first spin: 2, a spin after every loss but the first (`--spin-from`).
        pub(crate) spin_from: u32,
        /// The longest spin, 2^`spin_cap` pauses: 6 (`--spin-cap`).
        pub(crate) spin_cap: u32,
        /// After a spin, load the word and decide on it, so that the CAS compares a value read
        /// just before it (the crate's loops CAS the value from before the spin) (`--reload`).
        pub(crate) reload: bool,
        /// A refusal on a word obtained after the quota slot was read needs no second load
        /// (validated by the slot's version; the crate's `Bucket::retry` loads the word again
        /// after every refusal, and spins first when it moved) (`--version`). `multi` always
        /// does this after its first attempt: its quotas never change.
        pub(crate) version: bool,
        /// After a spin and the CAS lost right after it, retry at once with the value that
        /// CAS returned, without a spin (`--probe`): the CAS after a spin fetches the line and
        /// the word, the one after it uses them.
        pub(crate) probe: bool,
        /// After this many spins, no more: every later loss retries at once with the word the
        /// CAS returned (`--spin-rounds`; 0: no limit, the crate's loops).
        pub(crate) spin_rounds: u32,
        /// Load the word after a spin of the longest length, so that the CAS after it compares
        /// a fresh value; the shorter spins are followed by a CAS of the word from before them
        /// (`--reload-at-cap`).
        pub(crate) reload_at_cap: bool,
    }

    /// The quota and how the bucket starts.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Regime {
        pub(crate) name: &'static str,
        pub(crate) rate: u64,
        pub(crate) burst: u64,
        pub(crate) drained: bool,
    }

    pub(crate) const MIXED: Regime = Regime {
        name: "mixed",
        rate: 10_000_000,
        burst: 10_000,
        drained: false,
    };
    /// `mixed`, starting drained.
    pub(crate) const MIXED_DRAINED: Regime = Regime {
        name: "mixed-drained",
        rate: 10_000_000,
        burst: 10_000,
        drained: true,
    };
    pub(crate) const DENY: Regime = Regime {
        name: "deny",
        rate: 1,
        burst: 1_000,
        drained: true,
    };
    pub(crate) const ALLOW: Regime = Regime {
        name: "allow",
        rate: 1_000_000_000,
        burst: 1_000_000_000,
        drained: false,
    };

    /// `x` varied uniformly by `jitter` percent either way.
    fn vary(x: u64, jitter: u64, rng: &mut Rng) -> u64 {
        if jitter == 0 {
            return x;
        }
        let span = x * jitter / 100;
        x - span + rng.next() % (2 * span + 1)
    }

    /// One cache line. Transfers are served one at a time in the order they are issued, each
    /// taking `t_w` from its start (when the previous one arrived, or when issued) to its
    /// arrival; the core that held the line keeps it until the next transfer's request reaches
    /// it, half a transfer after that transfer starts, and hits until then. A read of a line no
    /// core holds modified copies it in parallel with other reads.
    #[derive(Clone)]
    struct Line {
        /// When the last transfer arrives: the next one starts then at the earliest.
        busy: u64,
        /// The holders in time order: core, arrival, departure (`u64::MAX`: still there),
        /// modified (else shared).
        ten: Vec<(u32, u64, u64, bool)>,
        sharers: [u64; 4],
    }

    impl Line {
        fn new() -> Line {
            Line {
                busy: 0,
                ten: Vec::new(),
                sharers: [0; 4],
            }
        }
        fn shares(&self, c: usize) -> bool {
            self.sharers[c / 64] >> (c % 64) & 1 == 1
        }
        /// Whether core `c` holds the line at `t` (modified, if `write`).
        fn has_at(&self, c: usize, t: u64, write: bool) -> bool {
            let modified = self.ten.last().is_some_and(|x| x.3);
            if !write && !modified && self.shares(c) {
                return true;
            }
            self.ten
                .iter()
                .rev()
                .any(|&(k, a, l, w)| k == c as u32 && a <= t && t < l && (w || !write))
        }
        /// Whether core `c` could read the line without a transfer now (a hint for paths
        /// that skip an event for a line nobody writes).
        fn has(&self, c: usize) -> bool {
            let modified = self.ten.last().is_some_and(|x| x.3);
            (!modified && self.shares(c))
                || self
                    .ten
                    .last()
                    .is_some_and(|x| x.0 == c as u32 && x.2 == u64::MAX)
        }
        /// An access issued by core `c` at `t`: when it completes.
        fn access(
            &mut self,
            c: usize,
            t: u64,
            write: bool,
            m: &Machine,
            n: &mut Counts,
            rng: &mut Rng,
        ) -> u64 {
            let t_w = vary(m.t_w, m.jitter, rng);
            if self.ten.len() > 8 {
                let keep = self
                    .ten
                    .iter()
                    .position(|x| x.2 > t)
                    .unwrap_or(self.ten.len() - 1);
                self.ten.drain(..keep.min(self.ten.len() - 1));
            }
            let hit = if write { m.atomic } else { LOAD_NS };
            if self.has_at(c, t, write) {
                return t + hit;
            }
            n.transfers += 1;
            let modified = self.ten.last().is_some_and(|x| x.3);
            if !write && !modified {
                self.sharers[c / 64] |= 1 << (c % 64);
                return t + t_w;
            }
            if write && !modified && self.ten.is_empty() && self.sharers.iter().all(|&w| w == 0) {
                self.ten.push((c as u32, t + t_w, u64::MAX, true));
                self.busy = t + t_w;
                return t + t_w + hit;
            }
            let start = t.max(self.busy);
            let arrive = start + t_w;
            if let Some(last) = self.ten.last_mut() {
                last.2 = last.2.min((start + t_w * m.hold / 100).max(last.1));
                if !write && last.3 {
                    let w = last.0 as usize;
                    self.sharers[w / 64] |= 1 << (w % 64);
                }
            }
            self.busy = arrive;
            if write {
                self.sharers = [0; 4];
            } else {
                self.sharers[c / 64] |= 1 << (c % 64);
            }
            self.ten.push((c as u32, arrive, u64::MAX, write));
            arrive + hit
        }
    }

    /// A shard's lease (token units as the central word's).
    #[derive(Clone, Copy, Default)]
    struct Lease {
        frontier: u64,
        top: u64,
        dry_until: u64,
        /// Today: the next advance's size (0: not hungry). Near: the last near lease's size.
        size: u64,
        /// A scan emptied it after it lapsed.
        emptied: bool,
    }

    /// A single word as a decision saw it: the states of quota 0 and (`multi`) quota 1, and
    /// how many writes it had had (what a CAS compares).
    #[derive(Clone, Copy, Debug)]
    struct Seen {
        s: u64,
        s2: u64,
        ver: u64,
    }

    /// What a shard's decision knows of its lease when it goes to the central word.
    #[derive(Clone, Copy, Debug)]
    struct Ctx {
        /// The lease as read (frontier, top, units payable), `None` when found locked.
        held: Option<(u64, u64, u64)>,
        locked: bool,
        losses: u32,
        /// The near lease's size (0: none).
        near: u64,
    }

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Plain,
        Lease,
        Pool,
        Advance,
    }

    /// Where a thread's decision resumes when its line access completes.
    #[derive(Clone, Copy, Debug)]
    enum Pc {
        Start,
        /// `cas`, `multi`: after a load of the word (the first, or one after a spin).
        WLoaded {
            losses: u32,
            first: bool,
        },
        /// After a refusal's second load of the word.
        WCheck {
            seen: Seen,
            losses: u32,
        },
        /// After a CAS of the word from `seen` to `next`; `spun`: a spin came before it.
        WCas {
            seen: Seen,
            next: (u64, u64),
            losses: u32,
            spun: bool,
        },
        AfterRm,
        FastLoaded,
        FastCas {
            seen: u64,
            next: u64,
        },
        AdvHandOut {
            seen: u64,
            base: u64,
            top: u64,
            size: u64,
            q: u64,
            h: u64,
        },
        AdvCas {
            seen: u64,
            base: u64,
            top: u64,
            size: u64,
            q: u64,
            h: u64,
        },
        Decide {
            ctx: Ctx,
        },
        HandOut {
            ctx: Ctx,
            seen: u64,
            next: u64,
            leased: u64,
            kind: Kind,
        },
        DecideCas {
            ctx: Ctx,
            seen: u64,
            next: u64,
            leased: u64,
            kind: Kind,
        },
        /// After the backoff spin of a lost `decide` CAS, the lease unlocked: the loop again
        /// from the word the CAS returned.
        Spun {
            ctx: Ctx,
            seen: u64,
        },
        /// An admission that spent its shard's near lease `[_, h)` to the top, after a load of
        /// the word: the crate's `ShardedBucket::refill` (a `decide` of cost 0).
        Refill {
            h: u64,
            /// After the refill's first lost CAS: its one retry, from the word as loaded again.
            again: bool,
        },
        /// The refill's hand-out count, then its CAS of the word from `seen` to `top`.
        RefillHandOut {
            seen: u64,
            base: u64,
            top: u64,
            size: u64,
            h: u64,
            again: bool,
        },
        RefillCas {
            seen: u64,
            base: u64,
            top: u64,
            size: u64,
            h: u64,
            again: bool,
        },
    }

    enum Step {
        Access {
            line: usize,
            write: bool,
            delay: u64,
            pc: Pc,
        },
        Done {
            admitted: bool,
            delay: u64,
        },
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Parked {
        No,
        Start,
        Issue,
    }

    struct Thread {
        core: usize,
        shard: usize,
        pc: Pc,
        line: usize,
        write: bool,
        reading: u64,
        started: u64,
        decisions: u64,
        admitted: u64,
        /// Shared-line writes in the current decision, by kind (`W_*`).
        shared_writes: [u64; 3],
        parked: Parked,
        /// A decision is under way (started, not done).
        busy: bool,
    }

    /// What a run counts.
    #[derive(Default, Clone, Copy)]
    pub(crate) struct Counts {
        pub(crate) transfers: u64,
        /// CAS attempts on the central word's state (failed ones included).
        pub(crate) central_cas: u64,
        pub(crate) failed_cas: u64,
        pub(crate) spends: u64,
        pub(crate) not_yet: u64,
        pub(crate) dry_until_refusals: u64,
        pub(crate) rm_refusals: u64,
        pub(crate) central_refusals: u64,
        pub(crate) word_admissions: u64,
        /// Admissions from the word by a decision that found its shard's lease `LOCKED`.
        pub(crate) locked_admissions: u64,
        pub(crate) found_locked: u64,
        pub(crate) leases: u64,
        pub(crate) advances: u64,
        /// Near leases taken by admissions (refills).
        pub(crate) refills: u64,
        pub(crate) publications: u64,
        pub(crate) alone_publications: u64,
        pub(crate) shared_writes_refusing: u64,
        /// The same by kind (`W_*`).
        pub(crate) refusing_writes: [u64; 3],
        pub(crate) refusals: u64,
        /// Units the clock passed unspent in leases.
        pub(crate) lapsed_units: u64,
        /// Time slices that began with the shard's lease `LOCKED` by a descheduled thread.
        pub(crate) locked_slices: u64,
        pub(crate) slices: u64,
    }

    /// The result of one run.
    pub(crate) struct Run {
        pub(crate) decisions: u64,
        pub(crate) late_decisions: u64,
        pub(crate) ramp: u64,
        pub(crate) admitted: u64,
        pub(crate) bound: f64,
        pub(crate) sim_ns: u64,
        pub(crate) p50: u64,
        pub(crate) p99: u64,
        pub(crate) p999: u64,
        pub(crate) min_adm: u64,
        pub(crate) max_adm: u64,
        /// The fewest and most decisions of a thread.
        pub(crate) min_dec: u64,
        pub(crate) max_dec: u64,
        /// The longest decision, those still under way at the end included (their age then).
        pub(crate) max_ns: u64,
        pub(crate) c: Counts,
    }

    impl Run {
        /// Decisions a second once every thread has started.
        pub(crate) fn mops(&self) -> f64 {
            self.late_decisions as f64 * 1e3 / (self.sim_ns - self.ramp) as f64
        }
        pub(crate) fn share(&self) -> f64 {
            self.admitted as f64 / self.bound
        }
    }

    struct Sim {
        rules: Rules,
        m: Machine,
        rate: u64,
        burst: u64,
        n: u64,
        state: u64,
        /// `multi`: quota 1's state and burst, in units of `2 × UNIT` a token, so that it
        /// earns as many units as quota 0 at any reading (half the rate).
        state2: u64,
        burst2: u64,
        /// Successful writes of the single word (`cas`, `multi`).
        ver: u64,
        hand_outs: u64,
        clean: u64,
        blocker: usize,
        run: (usize, u64),
        dry_all: u64,
        spread: u64,
        /// `lease_min` in units: the least a near lease's first unit lies beyond those earned.
        near_min: u64,
        /// Today: the most tokens an advance takes. Near: `F`.
        cap: u64,
        room: u64,
        leases: Vec<Lease>,
        lines: Vec<Line>,
        threads: Vec<Thread>,
        queue: Vec<Vec<usize>>,
        running: Vec<usize>,
        slice_end: Vec<u64>,
        heap: BinaryHeap<Reverse<(u64, u64, u32, u8)>>,
        seq: u64,
        c: Counts,
        hist: Histogram<u64>,
        rng: Rng,
        /// When the last thread has started: decisions a second count from then.
        ramp: u64,
        late_decisions: u64,
    }

    /// Whether a thread whose decision resumes at `pc` holds its shard's lease `LOCKED`.
    fn holds_lock(pc: Pc) -> bool {
        match pc {
            Pc::AdvHandOut { .. } | Pc::AdvCas { .. } => true,
            Pc::Decide { ctx } | Pc::HandOut { ctx, .. } | Pc::DecideCas { ctx, .. } => ctx.locked,
            _ => false,
        }
    }

    const START: u8 = 0;
    const ISSUE: u8 = 1;
    const COMPLETE: u8 = 2;

    /// What the rate earns in `ns`, in whole tokens.
    fn tokens_in(rate: u64, ns: u64) -> u64 {
        ((rate as u128 * ns as u128) / 1_000_000_000) as u64
    }

    /// `F` of the near rules: at most 64, what the rate earns in 16 µs and burst / (8 n).
    pub(crate) fn near_cap(rate: u64, burst: u64, n: u64) -> u64 {
        if n < 2 {
            return 0;
        }
        tokens_in(rate, ADVANCE_NS)
            .min(ADVANCE_MAX)
            .min(burst / (SPREAD * n))
    }

    impl Sim {
        fn new(rules: Rules, m: Machine, g: Regime, threads: usize, rng: &mut Rng) -> Sim {
            let n = m.cores as u64;
            let lease_min = tokens_in(g.rate, LEASE_MIN_NS).max(1);
            let cap = match rules {
                Rules::Cas | Rules::Multi => 0,
                Rules::Today => tokens_in(g.rate, ADVANCE_NS).min(ADVANCE_MAX),
                Rules::Near if m.f > 0 => m.f,
                Rules::Near => near_cap(g.rate, g.burst, n),
            };
            let room = if rules == Rules::Near {
                (n * cap).min(tokens_in(g.rate, ROOM_NS)).max(cap) * UNIT
            } else {
                0
            };
            let mut queue = vec![Vec::new(); m.cores];
            let ths = (0..threads)
                .map(|i| {
                    queue[i % m.cores].push(i);
                    Thread {
                        core: i % m.cores,
                        shard: i % m.cores,
                        pc: Pc::Start,
                        line: 0,
                        write: false,
                        reading: 0,
                        started: 0,
                        decisions: 0,
                        admitted: 0,
                        shared_writes: [0; 3],
                        parked: Parked::Start,
                        busy: false,
                    }
                })
                .collect();
            let slice_end = queue
                .iter()
                .map(|q| {
                    if q.len() > 1 {
                        rng.next() % m.slice.max(1)
                    } else {
                        u64::MAX
                    }
                })
                .collect();
            let mut s = Sim {
                rules,
                m,
                rate: g.rate,
                burst: g.burst * UNIT,
                n,
                state: if g.drained { g.burst * UNIT } else { 0 },
                state2: if g.drained { 2 * g.burst * 2 * UNIT } else { 0 },
                burst2: 2 * g.burst * 2 * UNIT,
                ver: 0,
                hand_outs: 0,
                clean: u64::MAX,
                blocker: usize::MAX,
                run: (usize::MAX, 0),
                dry_all: 0,
                spread: SPREAD * n * lease_min * UNIT,
                near_min: lease_min * UNIT,
                cap,
                room,
                leases: vec![Lease::default(); m.cores],
                lines: vec![Line::new(); 2],
                threads: ths,
                running: vec![0; m.cores],
                queue,
                slice_end,
                heap: BinaryHeap::new(),
                seq: 0,
                c: Counts::default(),
                hist: Histogram::new(3).expect("a histogram"),
                rng: Rng(rng.next()),
                ramp: (threads.min(m.cores) as u64).saturating_sub(1) * m.spawn,
                late_decisions: 0,
            };
            for core in 0..m.cores {
                if let Some(&th) = s.queue[core].first() {
                    s.threads[th].parked = Parked::No;
                    let at = th as u64 * m.spawn + rng.next() % 64;
                    s.push(at, th, START);
                }
            }
            s
        }

        fn push(&mut self, t: u64, th: usize, kind: u8) {
            self.seq += 1;
            self.heap.push(Reverse((t, self.seq, th as u32, kind)));
        }

        fn earned(&self, t: u64) -> u64 {
            t * self.rate
        }

        /// The first reading at which the word in state `s` holds one token.
        fn dry_at(&self, s: u64) -> u64 {
            (s + UNIT).saturating_sub(self.burst).div_ceil(self.rate)
        }

        fn simulate(&mut self, end: u64) {
            while let Some(Reverse((t, _, th, kind))) = self.heap.pop() {
                if t >= end {
                    continue;
                }
                let th = th as usize;
                match kind {
                    START | ISSUE => {
                        let core = self.threads[th].core;
                        if t >= self.slice_end[core]
                            && !(self.m.no_locked_preemption && holds_lock(self.threads[th].pc))
                        {
                            self.switch(core, th, t, kind);
                            continue;
                        }
                        let (at, span) = self.m.idle;
                        if kind == START && span > 0 && (at..at + span).contains(&t) {
                            let again = at + span + self.rng.next() % 64;
                            self.push(again, th, START);
                            continue;
                        }
                        if kind == START {
                            let t0 = &mut self.threads[th];
                            (t0.started, t0.reading, t0.shared_writes) = (t, t, [0; 3]);
                            t0.busy = true;
                            let step = self.program(th, t, Pc::Start);
                            self.handle(th, t, step);
                        } else if self.threads[th].line == NO_LINE {
                            self.push(t, th, COMPLETE);
                        } else {
                            let (line, write) = (self.threads[th].line, self.threads[th].write);
                            let done = self.lines[line].access(
                                core,
                                t,
                                write,
                                &self.m,
                                &mut self.c,
                                &mut self.rng,
                            );
                            self.push(done, th, COMPLETE);
                        }
                    }
                    _ => {
                        let step = self.program(th, t, self.threads[th].pc);
                        self.handle(th, t, step);
                    }
                }
            }
        }

        /// Core `core`'s slice ended: `th` (about to start a decision or an access) is
        /// descheduled, and the core's next thread resumes where it was descheduled.
        fn switch(&mut self, core: usize, th: usize, t: u64, kind: u8) {
            self.threads[th].parked = if kind == START {
                Parked::Start
            } else {
                Parked::Issue
            };
            let q = &self.queue[core];
            self.running[core] = (self.running[core] + 1) % q.len();
            let next = q[self.running[core]];
            let at = t + self.m.switch;
            self.slice_end[core] = at + self.m.slice;
            self.c.slices += 1;
            if self.leases[self.threads[th].shard].frontier == LOCKED {
                self.c.locked_slices += 1;
            }
            let resume = match self.threads[next].parked {
                Parked::Issue => ISSUE,
                _ => START,
            };
            self.threads[next].parked = Parked::No;
            self.push(at, next, resume);
        }

        fn handle(&mut self, th: usize, t: u64, step: Step) {
            match step {
                Step::Access {
                    line,
                    write,
                    delay,
                    pc,
                } => {
                    let x = &mut self.threads[th];
                    (x.pc, x.line, x.write) = (pc, line, write);
                    self.push(t + delay, th, ISSUE);
                }
                Step::Done { admitted, delay } => {
                    let end = t + delay;
                    self.late_decisions += u64::from(t >= self.ramp);
                    let x = &mut self.threads[th];
                    x.decisions += 1;
                    x.admitted += u64::from(admitted);
                    if !admitted {
                        self.c.refusals += 1;
                        for (k, w) in x.shared_writes.iter().enumerate() {
                            self.c.shared_writes_refusing += w;
                            self.c.refusing_writes[k] += w;
                        }
                    }
                    x.busy = false;
                    let _ = self.hist.record((end - x.started).max(1));
                    self.push(end, th, START);
                }
            }
        }

        fn program(&mut self, th: usize, now: u64, pc: Pc) -> Step {
            match (self.rules, pc) {
                (Rules::Cas | Rules::Multi, Pc::Start) => {
                    let mut d = vary(self.m.local, self.m.jitter, &mut self.rng);
                    if self.rules == Rules::Multi {
                        d += self.m.wide;
                    }
                    // `Bucket`: the word; `multi`: the mirror on the word's line.
                    Step::Access {
                        line: CENTRAL,
                        write: false,
                        delay: d,
                        pc: Pc::WLoaded {
                            losses: 0,
                            first: true,
                        },
                    }
                }
                (_, Pc::WLoaded { losses, first }) => {
                    // The first attempt's word was loaded before its quota slot was read: a
                    // refusal on it is checked by a second load. One loaded after a spin
                    // follows the slot read (the candidate rules).
                    let validated = !first && self.m.retry.version;
                    self.w_decide(th, self.w_word(), losses, validated, !first, 0)
                }
                (_, Pc::WCheck { seen, losses }) => {
                    if self.ver == seen.ver {
                        return Step::Done {
                            admitted: false,
                            delay: 0,
                        };
                    }
                    // The word moved: decided again on the word this load returned, with the slot
                    // read before it (`multi`, `--version`: a refusal then stands).
                    let validated = self.rules == Rules::Multi || self.m.retry.version;
                    // The crate's loops spin after it (`Bucket::retry` today); the candidate
                    // counts only lost CASes.
                    let losses = losses + u32::from(!self.m.retry.version);
                    self.w_decide(th, self.w_word(), losses, validated, false, 0)
                }
                (
                    _,
                    Pc::WCas {
                        seen,
                        next,
                        losses,
                        spun,
                    },
                ) => {
                    self.c.central_cas += 1;
                    if self.ver == seen.ver {
                        (self.state, self.state2) = next;
                        self.ver += 1;
                        self.c.word_admissions += 1;
                        return Step::Done {
                            admitted: true,
                            delay: 0,
                        };
                    }
                    self.c.failed_cas += 1;
                    // The word the CAS returned (read after the slot, as the retry loops do).
                    let validated = self.rules == Rules::Multi || self.m.retry.version;
                    let no_spin = self.m.retry.probe && spun;
                    self.w_decide(th, self.w_word(), losses + 1, validated, no_spin, 0)
                }
                (_, Pc::Start) => {
                    let core = self.threads[th].core;
                    let d = vary(self.m.local, self.m.jitter, &mut self.rng);
                    if self.lines[RM].has(core) {
                        self.after_rm(th, now, d + LOAD_NS)
                    } else {
                        Step::Access {
                            line: RM,
                            write: false,
                            delay: d,
                            pc: Pc::AfterRm,
                        }
                    }
                }
                (_, Pc::AfterRm) => self.after_rm(th, now, 0),
                (_, Pc::FastLoaded) => self.fast(th, now, self.state, true, 0),
                (_, Pc::FastCas { seen, next }) => {
                    self.c.central_cas += 1;
                    if self.state != seen {
                        self.c.failed_cas += 1;
                        self.threads[th].shared_writes[W_LOST] += 1;
                        return self.fast(th, now, self.state, false, 0);
                    }
                    self.state = next;
                    self.c.word_admissions += 1;
                    let limit = self.earned(self.threads[th].reading) + self.burst;
                    let mut d = 0;
                    let mut dry = 0;
                    if next + UNIT > limit {
                        dry = self.dry_at(next);
                        d += self.publish_dry(th, dry);
                    }
                    d += self.note_dry(th, now + d, true, dry);
                    Step::Done {
                        admitted: true,
                        delay: d,
                    }
                }
                (
                    _,
                    Pc::AdvHandOut {
                        seen,
                        base,
                        top,
                        size,
                        q,
                        h,
                    },
                ) => {
                    self.hand_outs += 1;
                    Step::Access {
                        line: CENTRAL,
                        write: true,
                        delay: LOAD_NS,
                        pc: Pc::AdvCas {
                            seen,
                            base,
                            top,
                            size,
                            q,
                            h,
                        },
                    }
                }
                (
                    _,
                    Pc::AdvCas {
                        seen,
                        base,
                        top,
                        size,
                        q,
                        h,
                    },
                ) => {
                    self.c.central_cas += 1;
                    let shard = self.threads[th].shard;
                    if self.state == seen {
                        self.threads[th].shared_writes[W_ADVANCE] += 2;
                        self.state = top;
                        self.c.advances += 1;
                        let e = self.earned(self.threads[th].reading);
                        self.c.lapsed_units += h.min(e).saturating_sub(q);
                        let l = &mut self.leases[shard];
                        (l.frontier, l.top, l.size, l.emptied) = (base, top, size, false);
                        return Step::Done {
                            admitted: false,
                            delay: 2 * LOAD_NS,
                        };
                    }
                    self.c.failed_cas += 1;
                    self.threads[th].shared_writes[W_LOST] += 2;
                    self.leases[shard].frontier = q;
                    let dry = self.dry_at(seen);
                    self.c.central_refusals += 1;
                    let mut d = self.publish_dry(th, dry);
                    d += self.note_dry(th, now + d, false, dry);
                    Step::Done {
                        admitted: false,
                        delay: d + LOAD_NS,
                    }
                }
                (_, Pc::Decide { ctx }) => self.decide(th, now, ctx, self.state, 0),
                (
                    _,
                    Pc::HandOut {
                        ctx,
                        seen,
                        next,
                        leased,
                        kind,
                    },
                ) => {
                    self.hand_outs += 1;
                    Step::Access {
                        line: CENTRAL,
                        write: true,
                        delay: LOAD_NS,
                        pc: Pc::DecideCas {
                            ctx,
                            seen,
                            next,
                            leased,
                            kind,
                        },
                    }
                }
                (
                    _,
                    Pc::DecideCas {
                        mut ctx,
                        seen,
                        next,
                        leased,
                        kind,
                    },
                ) => {
                    self.c.central_cas += 1;
                    // The CAS, and the hand-out count before it.
                    let writes = 1 + u64::from(matches!(kind, Kind::Lease | Kind::Advance));
                    if self.state != seen {
                        self.c.failed_cas += 1;
                        self.threads[th].shared_writes[W_LOST] += writes;
                        ctx.losses += 1;
                        let spin = self.m.pause << (ctx.losses - 1).min(self.central_cap());
                        if self.rules != Rules::Near || self.m.locked_spin || !ctx.locked {
                            return self.decide(th, now, ctx, self.state, spin);
                        }
                        // The crate's rule: the lock spans the CAS alone. Unlocked before the
                        // spin (a store on the shard's line), locked again by the next attempt.
                        if let Some((q, ..)) = ctx.held {
                            self.leases[self.threads[th].shard].frontier = q;
                        }
                        ctx.locked = false;
                        return Step::Access {
                            line: NO_LINE,
                            write: false,
                            delay: LOAD_NS + spin,
                            pc: Pc::Spun {
                                ctx,
                                seen: self.state,
                            },
                        };
                    }
                    if matches!(kind, Kind::Advance) {
                        self.threads[th].shared_writes[W_ADVANCE] += writes;
                    }
                    self.state = next;
                    self.finish(th, ctx, next, leased, kind)
                }
                (_, Pc::Spun { ctx, seen }) => self.decide(th, now, ctx, seen, 0),
                (_, Pc::Refill { h, again }) => self.refill(th, h, again),
                (
                    _,
                    Pc::RefillHandOut {
                        seen,
                        base,
                        top,
                        size,
                        h,
                        again,
                    },
                ) => {
                    self.hand_outs += 1;
                    Step::Access {
                        line: CENTRAL,
                        write: true,
                        delay: LOAD_NS,
                        pc: Pc::RefillCas {
                            seen,
                            base,
                            top,
                            size,
                            h,
                            again,
                        },
                    }
                }
                (
                    _,
                    Pc::RefillCas {
                        seen,
                        base,
                        top,
                        size,
                        h,
                        again,
                    },
                ) => {
                    self.c.central_cas += 1;
                    let shard = self.threads[th].shard;
                    // The hand-out count and the CAS: the admission's writes.
                    self.threads[th].shared_writes[W_ADVANCE] += 2;
                    if self.state == seen {
                        self.state = top;
                        self.c.refills += 1;
                        let l = &mut self.leases[shard];
                        (l.frontier, l.top, l.size, l.emptied) = (base, top, size, false);
                        return Step::Done {
                            admitted: true,
                            delay: 2 * LOAD_NS,
                        };
                    }
                    // Lost: unlocked; tried once more at once from the word the CAS returned,
                    // then given up (the crate's refill does not spin for an admission already
                    // made).
                    self.c.failed_cas += 1;
                    self.leases[shard].frontier = h;
                    if !again && !self.m.refill_gives_up {
                        return self.refill(th, h, true);
                    }
                    Step::Done {
                        admitted: true,
                        delay: LOAD_NS,
                    }
                }
            }
        }

        /// The longest spin after lost CASes on the central word: the near rules' own cap, the
        /// crate's `Backoff` cap for the others.
        fn central_cap(&self) -> u32 {
            if self.rules == Rules::Near {
                self.m.central_spin_cap
            } else {
                SPIN_LIMIT
            }
        }

        /// The single word now.
        fn w_word(&self) -> Seen {
            Seen {
                s: self.state,
                s2: self.state2,
                ver: self.ver,
            }
        }

        /// The spin before the attempt after `losses` lost ones.
        fn w_spin(&self, losses: u32) -> u64 {
            let r = self.m.retry;
            if r.spin_rounds > 0 && losses >= r.spin_from + r.spin_rounds {
                return 0;
            }
            if losses >= r.spin_from {
                self.m.pause << (losses - r.spin_from).min(r.spin_cap)
            } else {
                0
            }
        }

        /// A `cas` or `multi` attempt on the word as `seen`, after `losses` lost attempts:
        /// `validated`, a refusal needs no second load; `no_spin`, no spin before this attempt
        /// (it follows one, or a probe).
        fn w_decide(
            &mut self,
            th: usize,
            seen: Seen,
            losses: u32,
            validated: bool,
            no_spin: bool,
            d: u64,
        ) -> Step {
            let e = self.earned(self.threads[th].reading);
            let multi = self.rules == Rules::Multi;
            let ok = seen.s + UNIT <= e + self.burst
                && (!multi || seen.s2 + 2 * UNIT <= e + self.burst2);
            let spin = if no_spin { 0 } else { self.w_spin(losses) };
            if !ok {
                if validated {
                    return Step::Done {
                        admitted: false,
                        delay: d,
                    };
                }
                // The crate's loop spins before every attempt after a loss, the second load
                // of a refusal included, and compares it with the word from before the spin.
                return Step::Access {
                    line: CENTRAL,
                    write: false,
                    delay: d + LOAD_NS + spin,
                    pc: Pc::WCheck { seen, losses },
                };
            }
            let longest = self.m.pause << self.m.retry.spin_cap;
            if spin > 0 && (self.m.retry.reload || (self.m.retry.reload_at_cap && spin >= longest))
            {
                return Step::Access {
                    line: CENTRAL,
                    write: false,
                    delay: d + spin,
                    pc: Pc::WLoaded {
                        losses,
                        first: false,
                    },
                };
            }
            let next = (
                seen.s.max(e) + UNIT,
                if multi { seen.s2.max(e) + 2 * UNIT } else { 0 },
            );
            let work = if self.m.recompute > LOAD_NS {
                vary(self.m.recompute, self.m.jitter, &mut self.rng)
            } else {
                LOAD_NS
            };
            Step::Access {
                line: CENTRAL,
                write: true,
                delay: d + work + spin,
                pc: Pc::WCas {
                    seen,
                    next,
                    losses,
                    spun: spin > 0,
                },
            }
        }

        /// After the read-mostly line: `dry_all`, then the shard's own line.
        fn after_rm(&mut self, th: usize, now: u64, mut d: u64) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            if r < self.dry_all {
                self.c.rm_refusals += 1;
                return Step::Done {
                    admitted: false,
                    delay: d,
                };
            }
            d += LOAD_NS;
            let e = self.earned(r);
            let limit = e + self.burst;
            let l = self.leases[shard];
            let (q, h) = (l.frontier, l.top);
            if q != LOCKED && q < h {
                let base = q.max(e);
                if base + UNIT <= h && q + UNIT <= limit {
                    self.leases[shard].frontier = base + UNIT;
                    self.c.spends += 1;
                    // Spent to its top near the limit: the crate's refill, after a load of the
                    // word (whether it can pay the next token, or the refill's own `decide`).
                    if base + UNIT == h
                        && self.rules == Rules::Near
                        && self.cap > 0
                        && !self.m.no_refill
                    {
                        return Step::Access {
                            line: CENTRAL,
                            write: false,
                            delay: d + self.m.atomic,
                            pc: Pc::Refill { h, again: false },
                        };
                    }
                    return Step::Done {
                        admitted: true,
                        delay: d + self.m.atomic,
                    };
                }
                if h > base {
                    if base + UNIT <= h {
                        self.c.not_yet += 1;
                        return Step::Done {
                            admitted: false,
                            delay: d,
                        };
                    }
                    return self.acquire_slow(th, now, d);
                }
            } else if q == LOCKED {
                self.c.found_locked += 1;
                return self.acquire_slow(th, now, d);
            }
            if r < l.dry_until {
                self.c.dry_until_refusals += 1;
                if self.rules == Rules::Today && self.cap > 0 && l.size == 0 {
                    self.leases[shard].size = 1;
                    d += LOAD_NS;
                }
                return Step::Done {
                    admitted: false,
                    delay: d,
                };
            }
            if self.rules == Rules::Near && self.cap > 0 {
                return self.acquire_slow(th, now, d);
            }
            Step::Access {
                line: CENTRAL,
                write: false,
                delay: d,
                pc: Pc::FastLoaded,
            }
        }

        /// The crate's `decide_fast` from the word `s`: one CAS, a refusal, an advance.
        fn fast(&mut self, th: usize, now: u64, s: u64, first: bool, d: u64) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let limit = e + self.burst;
            let want = s + UNIT;
            if want > limit {
                let at = self.dry_at(s);
                if first && self.cap > 0 && self.rules == Rules::Today {
                    if let Some(step) = self.try_advance(th, s, d) {
                        return step;
                    }
                }
                self.c.central_refusals += 1;
                let mut d = d + self.publish_dry(th, at);
                d += self.note_dry(th, now + d, false, at);
                let _ = shard;
                return Step::Done {
                    admitted: false,
                    delay: d,
                };
            }
            if limit - want > self.spread || !first {
                return self.acquire_slow(th, now, d);
            }
            Step::Access {
                line: CENTRAL,
                write: true,
                delay: d + LOAD_NS,
                pc: Pc::FastCas {
                    seen: s,
                    next: s.max(e) + UNIT,
                },
            }
        }

        /// Today's advance: `None` when the shard takes none.
        fn try_advance(&mut self, th: usize, s: u64, d: u64) -> Option<Step> {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let l = self.leases[shard];
            if l.size == 0 || l.frontier == LOCKED {
                return None;
            }
            let (q, h) = (l.frontier, l.top);
            let size = if q < h || l.emptied {
                (l.size / 2).max(1)
            } else if q == h && h > 0 {
                (l.size * 2).min(self.cap)
            } else {
                l.size.min(self.cap)
            };
            if s > e + self.burst {
                return None;
            }
            let base = s.max(e);
            self.leases[shard].frontier = LOCKED;
            Some(Step::Access {
                line: CENTRAL,
                write: true,
                delay: d + self.m.atomic,
                pc: Pc::AdvHandOut {
                    seen: s,
                    base,
                    top: base + size * UNIT,
                    size,
                    q,
                    h,
                },
            })
        }

        /// The crate's `ShardedBucket::refill` from the word as loaded now, after an admission
        /// that spent its shard's near lease to `h`: nothing while the word can pay the next
        /// token earned, or if the lease changed; else the next near lease (doubled, as after
        /// one spent to its top), within the room and, from a word that can pay, `near_min`
        /// beyond the units earned.
        fn refill(&mut self, th: usize, h: u64, again: bool) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let limit = e + self.burst;
            let l = self.leases[shard];
            let s = self.state;
            let done = Step::Done {
                admitted: true,
                delay: 0,
            };
            if l.frontier != h || l.top != h || (!again && h + UNIT <= limit && s + UNIT <= limit) {
                return done;
            }
            let size = (l.size.max(1) * 2).min(self.cap);
            let base = s.max(e);
            let tokens = if s > limit {
                if base + size * UNIT <= limit + self.room {
                    size
                } else {
                    0
                }
            } else if self.m.no_near_min || base >= e + self.near_min {
                size.min((limit + self.room).saturating_sub(base) / UNIT)
            } else {
                0
            };
            if tokens == 0 {
                return done;
            }
            self.leases[shard].frontier = LOCKED;
            Step::Access {
                line: CENTRAL,
                write: true,
                delay: self.m.atomic,
                pc: Pc::RefillHandOut {
                    seen: s,
                    base,
                    top: base + tokens * UNIT,
                    size: tokens,
                    h,
                    again,
                },
            }
        }

        /// `acquire_slow`: the lease again (its own line), then the central word.
        fn acquire_slow(&mut self, th: usize, _now: u64, mut d: u64) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let limit = e + self.burst;
            d += LOAD_NS;
            let l = self.leases[shard];
            let held = if l.frontier == LOCKED {
                None
            } else {
                let (q, h) = (l.frontier, l.top);
                let base = q.max(e);
                if base + UNIT <= h && q + UNIT <= limit {
                    self.leases[shard].frontier = base + UNIT;
                    self.c.spends += 1;
                    return Step::Done {
                        admitted: true,
                        delay: d + self.m.atomic,
                    };
                }
                Some((q, h, h.saturating_sub(base)))
            };
            let mut near = 0;
            if self.rules == Rules::Near {
                if let Some((q, h, units)) = held {
                    if units >= UNIT {
                        self.c.not_yet += 1;
                        return Step::Done {
                            admitted: false,
                            delay: d,
                        };
                    }
                    if self.cap > 0 {
                        let last = l.size.clamp(1, self.cap);
                        near = if q < h || l.emptied {
                            (last / 2).max(1)
                        } else if h > 0 {
                            (last * 2).min(self.cap)
                        } else {
                            last
                        };
                    }
                }
            }
            let ctx = Ctx {
                held,
                locked: false,
                losses: 0,
                near,
            };
            Step::Access {
                line: CENTRAL,
                write: false,
                delay: d,
                pc: Pc::Decide { ctx },
            }
        }

        /// Locks the lease for a replacement: `false` if it changed since it was read.
        fn lock(&mut self, shard: usize, (q, h): (u64, u64)) -> bool {
            let l = &mut self.leases[shard];
            if l.frontier != q || l.top != h {
                return false;
            }
            l.frontier = LOCKED;
            true
        }

        /// The crate's `decide` loop body from the word `s`, `d` ns from now.
        fn decide(&mut self, th: usize, now: u64, mut ctx: Ctx, s: u64, mut d: u64) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let limit = e + self.burst;
            let want = s + UNIT;
            let base = s.max(e);
            if want > limit {
                if let Some((q, h, units)) = ctx.held {
                    if units > 0 && h <= limit && want - units <= limit {
                        if !ctx.locked {
                            if !self.lock(shard, (q, h)) {
                                return self.acquire_slow(th, now, d);
                            }
                            ctx.locked = true;
                            d += self.m.atomic;
                        }
                        return Step::Access {
                            line: CENTRAL,
                            write: true,
                            delay: d + LOAD_NS,
                            pc: Pc::DecideCas {
                                ctx,
                                seen: s,
                                next: base + (UNIT - units),
                                leased: 0,
                                kind: Kind::Pool,
                            },
                        };
                    }
                    let size = ctx.near.max(1);
                    let top = base + size * UNIT;
                    if ctx.near > 0 && size <= self.cap && top <= limit + self.room {
                        if !ctx.locked {
                            if !self.lock(shard, (q, h)) {
                                return self.acquire_slow(th, now, d);
                            }
                            ctx.locked = true;
                            d += self.m.atomic;
                        }
                        return Step::Access {
                            line: CENTRAL,
                            write: true,
                            delay: d + LOAD_NS,
                            pc: Pc::HandOut {
                                ctx,
                                seen: s,
                                next: top,
                                leased: size * UNIT,
                                kind: Kind::Advance,
                            },
                        };
                    }
                }
                let mut dry = 0;
                if let Some((q, ..)) = ctx.held {
                    dry = self.dry_at(s);
                    d += self.publish_dry(th, dry);
                    if ctx.locked {
                        self.leases[shard].frontier = q;
                        d += LOAD_NS;
                    }
                }
                self.c.central_refusals += 1;
                d += self.note_dry(th, now + d, false, dry);
                return Step::Done {
                    admitted: false,
                    delay: d,
                };
            }
            if let Some((q, h, units)) = ctx.held.filter(|x| x.2 < UNIT) {
                let room = (limit - s).min(self.burst);
                let far = if room - UNIT > self.spread {
                    ((room / UNIT - 1) / (SPREAD * self.n)).min(LEASE_MAX)
                } else {
                    0
                };
                // After a lost CAS (the clock read again after the spin), a far lease covers
                // twice the decision's age, at most half the word beyond the cost.
                let far = if far > 0
                    && self.rules == Rules::Near
                    && self.m.lease_by_wait
                    && !self.m.lease_by_wait_any
                    && ctx.losses > 0
                {
                    let age = (now + d).saturating_sub(r);
                    let by_age = (2 * age * self.rate / UNIT).min((room - UNIT) / 2 / UNIT);
                    far.max(by_age)
                } else {
                    far
                };
                let fits = far > 0 && want + far * UNIT <= limit;
                let tokens = match self.rules {
                    Rules::Near => {
                        // A near lease only with its first unit `lease_min` beyond the units
                        // earned.
                        let near = if self.m.no_near_min || base + UNIT >= e + self.near_min {
                            ctx.near
                        } else {
                            0
                        };
                        let mut t = if fits { far.max(near) } else { near };
                        if self.m.lease_by_wait_any {
                            let age = (now + d).saturating_sub(r);
                            t = t.max((2 * age * self.rate / UNIT).min(room / UNIT / 2));
                        }
                        t.min((limit + self.room).saturating_sub(base + UNIT) / UNIT)
                    }
                    _ if fits => far,
                    _ => 0,
                };
                let _ = units;
                if tokens > 0 {
                    if !ctx.locked {
                        if !self.lock(shard, (q, h)) {
                            return self.acquire_slow(th, now, d);
                        }
                        ctx.locked = true;
                        d += self.m.atomic;
                    }
                    return Step::Access {
                        line: CENTRAL,
                        write: true,
                        delay: d + LOAD_NS,
                        pc: Pc::HandOut {
                            ctx,
                            seen: s,
                            next: base + UNIT + tokens * UNIT,
                            leased: tokens * UNIT,
                            kind: Kind::Lease,
                        },
                    };
                }
            }
            Step::Access {
                line: CENTRAL,
                write: true,
                delay: d + LOAD_NS,
                pc: Pc::DecideCas {
                    ctx,
                    seen: s,
                    next: base + UNIT,
                    leased: 0,
                    kind: Kind::Plain,
                },
            }
        }

        /// A central CAS of `decide` succeeded: install what it took.
        fn finish(&mut self, th: usize, ctx: Ctx, next: u64, leased: u64, kind: Kind) -> Step {
            let (r, shard) = (self.threads[th].reading, self.threads[th].shard);
            let e = self.earned(r);
            let old = ctx.held.map(|(q, h, _)| (q, h));
            let lapse = |s: &mut Sim| {
                if let Some((q, h)) = old {
                    s.c.lapsed_units += h.min(e).saturating_sub(q);
                }
            };
            match kind {
                Kind::Plain => {
                    if ctx.locked {
                        if let Some((q, _)) = old {
                            self.leases[shard].frontier = q;
                        }
                    }
                    self.c.word_admissions += 1;
                    if ctx.held.is_none() {
                        self.c.locked_admissions += 1;
                    }
                    Step::Done {
                        admitted: true,
                        delay: if ctx.locked { LOAD_NS } else { 0 },
                    }
                }
                Kind::Lease => {
                    lapse(self);
                    self.c.leases += 1;
                    let l = &mut self.leases[shard];
                    (l.frontier, l.top) = (next - leased, next);
                    if self.rules == Rules::Near && ctx.near > 0 {
                        (l.size, l.emptied) = (leased / UNIT, false);
                    }
                    Step::Done {
                        admitted: true,
                        delay: 2 * LOAD_NS,
                    }
                }
                Kind::Pool => {
                    self.c.word_admissions += 1;
                    if let Some((_, h)) = old {
                        let l = &mut self.leases[shard];
                        (l.frontier, l.top) = (h, h);
                    }
                    Step::Done {
                        admitted: true,
                        delay: 2 * LOAD_NS,
                    }
                }
                Kind::Advance => {
                    lapse(self);
                    self.c.advances += 1;
                    let l = &mut self.leases[shard];
                    (l.frontier, l.top, l.size, l.emptied) =
                        (next - leased, next, leased / UNIT, false);
                    Step::Done {
                        admitted: false,
                        delay: 2 * LOAD_NS,
                    }
                }
            }
        }

        /// Raises the shard's `dry_until` (its own line): the ns it took.
        fn publish_dry(&mut self, th: usize, at: u64) -> u64 {
            let l = &mut self.leases[self.threads[th].shard];
            if l.dry_until < at {
                l.dry_until = at;
            }
            LOAD_NS
        }

        /// The run alone and `dry_all` (`note_dry`, `publish_dry_all`): the ns it took.
        fn note_dry(&mut self, th: usize, now: u64, admitted: bool, dry: u64) -> u64 {
            let (r, shard, core) = (
                self.threads[th].reading,
                self.threads[th].shard,
                self.threads[th].core,
            );
            if dry <= r {
                return 0;
            }
            let alone = admitted && {
                let (who, k) = self.run;
                if who != shard {
                    self.run = (shard, 0);
                    false
                } else {
                    self.run.1 = (k + 1).min(ALONE_AFTER - 1);
                    k + 1 >= ALONE_AFTER - 1
                }
            };
            if (!alone && dry - r < DRY_ALL_NS) || dry <= self.dry_all {
                return 0;
            }
            let e = self.earned(r);
            let mut t = now;
            if self.clean != self.hand_outs {
                let order = std::iter::once(self.blocker).chain(0..self.m.cores);
                for (k, i) in order.enumerate().filter(|&(_, i)| i < self.m.cores) {
                    t += if i == shard { LOAD_NS } else { self.m.t_w };
                    self.c.transfers += u64::from(i != shard);
                    let l = self.leases[i];
                    if l.frontier == LOCKED || (l.frontier < l.top && l.top > e) {
                        // The crate records the blocker when the full scan finds it.
                        self.threads[th].shared_writes[W_PUBLISH] += u64::from(k > 0);
                        self.blocker = i;
                        return t - now;
                    }
                    if l.frontier < l.top {
                        self.threads[th].shared_writes[W_PUBLISH] += 1;
                        self.c.lapsed_units += l.top - l.frontier;
                        let l = &mut self.leases[i];
                        l.frontier = l.top;
                        l.emptied = l.size > 0;
                    }
                }
                self.clean = self.hand_outs;
                self.threads[th].shared_writes[W_PUBLISH] += 1;
            }
            self.dry_all = dry;
            self.c.publications += 1;
            self.c.alone_publications += u64::from(alone);
            self.threads[th].shared_writes[W_PUBLISH] += 1;
            let m = self.m;
            let end = self.lines[RM].access(core, t, true, &m, &mut self.c, &mut self.rng);
            end - now
        }
    }

    /// One run of `threads` threads on the machine for `sim_ns`.
    pub(crate) fn run(
        rules: Rules,
        m: Machine,
        g: Regime,
        threads: usize,
        sim_ns: u64,
        seed: u64,
    ) -> Run {
        let mut rng = Rng(seed);
        let mut s = Sim::new(rules, m, g, threads, &mut rng);
        s.simulate(sim_ns);
        let e = s.earned(sim_ns);
        for l in &s.leases {
            if l.frontier != LOCKED {
                s.c.lapsed_units += l.top.min(e).saturating_sub(l.frontier);
            }
        }
        let decisions = s.threads.iter().map(|t| t.decisions).sum();
        let admitted = s.threads.iter().map(|t| t.admitted).sum();
        let mut bound = if g.drained {
            g.rate as f64 * sim_ns as f64 / 1e9
        } else {
            g.burst as f64 + g.rate as f64 * sim_ns as f64 / 1e9
        };
        if rules == Rules::Multi {
            // Quota 1: half the rate, twice the burst.
            let half = g.rate as f64 * sim_ns as f64 / 2e9;
            bound = bound.min(if g.drained {
                half
            } else {
                2.0 * g.burst as f64 + half
            });
        }
        assert!(
            admitted as f64 <= bound + 1.0,
            "the model admitted past the bound"
        );
        assert!(
            s.ramp < sim_ns,
            "the run ends before every thread has started"
        );
        Run {
            decisions,
            late_decisions: s.late_decisions,
            ramp: s.ramp,
            admitted,
            bound,
            sim_ns,
            p50: s.hist.value_at_quantile(0.5),
            p99: s.hist.value_at_quantile(0.99),
            p999: s.hist.value_at_quantile(0.999),
            min_adm: s.threads.iter().map(|t| t.admitted).min().unwrap_or(0),
            max_adm: s.threads.iter().map(|t| t.admitted).max().unwrap_or(0),
            min_dec: s.threads.iter().map(|t| t.decisions).min().unwrap_or(0),
            max_dec: s.threads.iter().map(|t| t.decisions).max().unwrap_or(0),
            max_ns: s
                .threads
                .iter()
                .filter(|t| t.busy)
                .map(|t| sim_ns.saturating_sub(t.started))
                .chain([s.hist.max()])
                .max()
                .unwrap_or(0),
            c: s.c,
        }
    }
}

/// The step model's command line.
mod cli {
    use crate::spin::{self, Machine, Regime, Rules};

    fn opt(words: &[String], name: &str) -> Option<String> {
        words
            .iter()
            .position(|w| w == name)
            .and_then(|i| words.get(i + 1).cloned())
    }

    fn num(words: &[String], name: &str, default: u64) -> u64 {
        opt(words, name).map_or(default, |v| v.parse().expect("a number"))
    }

    fn list(words: &[String], name: &str, default: &str) -> Vec<String> {
        opt(words, name)
            .unwrap_or_else(|| default.to_owned())
            .split(',')
            .map(str::to_owned)
            .collect()
    }

    /// `spin`'s `LOAD_NS`: the default work between a word and its CAS.
    const LOAD_NS_CLI: u64 = 1;

    /// The calibrated machine (the module docs say where each number comes from), with any
    /// option given.
    pub(crate) fn machine(words: &[String], cores: usize) -> Machine {
        Machine {
            cores,
            t_w: num(words, "--t-w", 60),
            local: num(words, "--local", 30),
            atomic: num(words, "--atomic", 10),
            pause: num(words, "--pause", 45),
            slice: num(words, "--slice-us", 3_000) * 1_000,
            switch: num(words, "--switch-ns", 2_000),
            spawn: num(words, "--spawn-ns", 20_000),
            idle: (
                num(words, "--idle-at-us", 0) * 1_000,
                num(words, "--idle-us", 0) * 1_000,
            ),
            no_locked_preemption: words.iter().any(|w| w == "--no-locked-preemption"),
            f: num(words, "--f", 0),
            lease_by_wait: !words.iter().any(|w| w == "--no-lease-by-wait"),
            locked_spin: words.iter().any(|w| w == "--locked-spin"),
            no_near_min: words.iter().any(|w| w == "--no-near-min"),
            lease_by_wait_any: words.iter().any(|w| w == "--lease-by-wait-any"),
            no_refill: words.iter().any(|w| w == "--no-refill"),
            refill_gives_up: words.iter().any(|w| w == "--refill-gives-up"),
            central_spin_cap: num(words, "--central-spin-cap", 10).min(20) as u32,

            jitter: num(words, "--jitter", 50),
            hold: num(words, "--hold", 0),
            retry: {
                // `--loop bounded`: the candidate (a refusal validated by the slot version read
                // before its word, at most 7 spins); `--loop spinning` (the default): the
                // crate's loops (a second load of the word for every refusal, a spin before
                // every attempt after the first loss, without end).
                let bounded = opt(words, "--loop").is_some_and(|l| l == "bounded");
                spin::Retry {
                    spin_from: num(words, "--spin-from", 2) as u32,
                    spin_cap: num(words, "--spin-cap", 6) as u32,
                    reload: words.iter().any(|w| w == "--reload"),
                    version: bounded || words.iter().any(|w| w == "--version"),
                    probe: words.iter().any(|w| w == "--probe"),
                    spin_rounds: num(words, "--spin-rounds", if bounded { 7 } else { 0 }) as u32,
                    reload_at_cap: words.iter().any(|w| w == "--reload-at-cap"),
                }
            },
            wide: num(words, "--wide-ns", 17),
            recompute: num(words, "--recompute", LOAD_NS_CLI),
        }
    }

    fn regime(name: &str) -> Regime {
        match name {
            "mixed" => spin::MIXED,
            "mixed-drained" => spin::MIXED_DRAINED,
            "deny" => spin::DENY,
            "allow" => spin::ALLOW,
            _ => panic!("regimes: mixed, mixed-drained, deny, allow"),
        }
    }

    fn rules(name: &str) -> Rules {
        match name {
            "cas" => Rules::Cas,
            "sharded" => Rules::Today,
            "near" => Rules::Near,
            "multi" => Rules::Multi,
            _ => panic!("rules: cas, sharded, near, multi"),
        }
    }

    fn header() {
        println!(
            "| regime | strategy | threads | Mops/s | admitted / bound | p50 | p99 | p999 | central CAS / admission | shared writes / refusal | transfers / decision | min / max admitted per thread | lapsed tokens | word admissions with the lease locked | advances / ms | slices begun with the lease locked |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }

    fn ns(x: u64) -> String {
        match x {
            0..=9_999 => format!("{x} ns"),
            10_000..=999_999 => format!("{:.1} µs", x as f64 / 1e3),
            _ => format!("{:.2} ms", x as f64 / 1e6),
        }
    }

    fn row(g: Regime, r: Rules, threads: usize, x: &spin::Run) {
        row_named(g, r.name(), threads, x);
    }

    fn row_named(g: Regime, name: &str, threads: usize, x: &spin::Run) {
        let c = &x.c;
        let adm = x.admitted.max(1) as f64;
        println!(
            "| {} | {} | {} | {:.2} | {:.1} % | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.0} | {:.1} % | {:.1} | {} / {} |",
            g.name,
            name,
            threads,
            x.mops(),
            x.share() * 100.0,
            ns(x.p50),
            ns(x.p99),
            ns(x.p999),
            c.central_cas as f64 / adm,
            c.shared_writes_refusing as f64 / c.refusals.max(1) as f64,
            c.transfers as f64 / x.decisions.max(1) as f64,
            x.min_adm as f64 / x.max_adm.max(1) as f64,
            c.lapsed_units as f64 / 1e9,
            c.locked_admissions as f64 * 100.0 / adm,
            c.advances as f64 * 1e6 / x.sim_ns as f64,
            c.locked_slices,
            c.slices,
        );
    }

    /// The 16-core measurements (`tollgate-bench compare`, `mixed`; 4–16 threads: medians of
    /// 10 rounds of 200 ms, 32 threads: of 5 rounds of 120 ms): strategy, threads, Mops/s,
    /// admitted / bound, p99 ns, min / max operations per thread.
    const MEASURED: [(&str, usize, f64, f64, u64, f64); 8] = [
        ("cas", 4, 16.56, 99.5, 320, 0.30),
        ("cas", 8, 10.76, 98.5, 446, 0.03),
        ("cas", 16, 5.83, 56.8, 533, 0.00),
        ("cas", 32, 5.82, 52.1, 807, 0.00),
        ("sharded", 4, 30.40, 99.5, 811, 0.76),
        ("sharded", 8, 10.23, 99.0, 2_475, 0.07),
        ("sharded", 16, 10.22, 97.6, 54_751, 0.46),
        ("sharded", 32, 6.74, 62.9, 1_743, 0.06),
    ];

    /// Today's rules on 16 cores, `mixed`, beside the measurements: the mean of `--seeds`
    /// runs of `--ms` (the harness's rounds are 120–200 ms).
    fn calibrate(words: &[String]) {
        let m = machine(words, 16);
        let ms = num(words, "--ms", 120);
        let seeds = num(words, "--seeds", 3);
        println!("{m:?}; {ms} ms simulated, {seeds} seeds, mean (p99: median)\n");
        println!("| strategy | threads | Mops/s measured | model | admitted / bound measured | model | p99 measured | model | model p999 | min / max per thread measured (ops) | model (admissions) | model: word admissions with the lease locked | model: slices begun with the lease locked |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (name, threads, mops, share, p99, fair) in MEASURED {
            let runs: Vec<spin::Run> = (1..=seeds)
                .map(|seed| spin::run(rules(name), m, spin::MIXED, threads, ms * 1_000_000, seed))
                .collect();
            let k = runs.len() as f64;
            let mean = |f: &dyn Fn(&spin::Run) -> f64| runs.iter().map(f).sum::<f64>() / k;
            let mut p = runs.iter().map(|r| r.p99).collect::<Vec<_>>();
            p.sort_unstable();
            let locked: u64 = runs.iter().map(|r| r.c.locked_slices).sum();
            let slices: u64 = runs.iter().map(|r| r.c.slices).sum();
            println!(
                "| {name} | {threads} | {mops:.2} | {:.2} | {share:.1} % | {:.1} % | {} | {} | {} | {fair:.2} | {:.2} | {:.0} % | {locked} / {slices} |",
                mean(&|r| r.mops()),
                mean(&|r| r.share() * 100.0),
                ns(p99),
                ns(p[p.len() / 2]),
                ns(runs.iter().map(|r| r.p999).max().unwrap_or(0)),
                mean(&|r| r.min_adm as f64 / r.max_adm.max(1) as f64),
                mean(&|r| r.c.locked_admissions as f64 * 100.0 / r.admitted.max(1) as f64),
            );
        }
        ablation(words, ms, seeds);
    }

    /// Today's rules, 32 threads on 16 cores, with no thread descheduled while it holds its
    /// shard's lease `LOCKED`: what the loss owes to that.
    fn ablation(words: &[String], ms: u64, seeds: u64) {
        let mut w = words.to_vec();
        w.push("--no-locked-preemption".to_owned());
        let m = machine(&w, 16);
        let runs: Vec<spin::Run> = (1..=seeds)
            .map(|seed| spin::run(Rules::Today, m, spin::MIXED, 32, ms * 1_000_000, seed))
            .collect();
        let k = runs.len() as f64;
        println!(
            "\nThe same 32 threads, no thread descheduled while it holds its shard's lease LOCKED: {:.2} Mops/s, {:.1} % of the bound admitted.",
            runs.iter().map(spin::Run::mops).sum::<f64>() / k,
            runs.iter().map(|r| r.share() * 100.0).sum::<f64>() / k,
        );
    }

    /// One table of runs.
    fn table(m: Machine, cells: &[(Regime, Rules, usize, u64)]) -> Vec<spin::Run> {
        header();
        cells
            .iter()
            .map(|&(g, r, threads, ms)| {
                let x = spin::run(r, m, g, threads, ms * 1_000_000, 1);
                row(g, r, threads, &x);
                x
            })
            .collect()
    }

    /// The near rules against today's and `cas` at 16 and 64 cores, and the issue's targets.
    fn predict(words: &[String]) {
        let ms = num(words, "--ms", 40);
        let short = num(words, "--short-ms", 5);
        for cores in [16usize, 64, 2] {
            let m = machine(words, cores);
            println!("\n{cores} cores: {m:?}\n");
            let threads = match cores {
                16 => vec![4, 8, 16, 32],
                2 => vec![1, 2, 4, 8],
                _ => vec![cores, 2 * cores],
            };
            let mut cells = Vec::new();
            for &t in &threads {
                for r in [Rules::Cas, Rules::Today, Rules::Near] {
                    cells.push((spin::MIXED, r, t, ms));
                }
            }
            for g in [spin::DENY, spin::ALLOW] {
                for &t in &threads {
                    for r in [Rules::Today, Rules::Near] {
                        cells.push((g, r, t, short));
                    }
                }
            }
            let runs = table(m, &cells);
            println!();
            for (i, &(g, r, t, _)) in cells.iter().enumerate() {
                if g.name != "mixed" || r != Rules::Near {
                    continue;
                }
                let x = &runs[i];
                let cas = &runs[i - 2];
                let deny = cells
                    .iter()
                    .position(|c| c.0.name == "deny" && c.1 == Rules::Near && c.2 == t)
                    .map(|j| runs[j].mops());
                let ok = |b: bool| if b { "meets" } else { "MISSES" };
                if cores == 2 {
                    println!(
                        "- 2 cores, {t} threads: near {:.1} Mops/s = {:.1} × cas ({}); p99 {} against cas's {} ({}); admitted {:.1} % ({}); central CAS / admission {:.3}{}; shared writes / refusal {} ({})",
                        x.mops(),
                        x.mops() / cas.mops(),
                        ok(x.mops() >= cas.mops()),
                        ns(x.p99),
                        ns(cas.p99),
                        ok(x.p99 <= cas.p99),
                        x.share() * 100.0,
                        ok(x.share() >= 0.99),
                        x.c.central_cas as f64 / x.admitted.max(1) as f64,
                        if t == 2 {
                            format!(" ({})", ok(x.c.central_cas * 8 <= x.admitted))
                        } else {
                            String::new()
                        },
                        writes(x),
                        ok(x.c.shared_writes_refusing == 0),
                    );
                    continue;
                }
                println!(
                    "- {cores} cores, {t} threads: near {:.0} Mops/s = {} × its deny ({}), {:.0} × cas ({}); p99 {} ({}); admitted {:.1} % ({}); central CAS / admission {:.3}; shared writes / refusal {}",
                    x.mops(),
                    deny.map_or("?".to_owned(), |d| format!("{:.2}", x.mops() / d)),
                    ok(deny.is_some_and(|d| x.mops() >= 0.25 * d)),
                    x.mops() / cas.mops(),
                    ok(x.mops() >= 10.0 * cas.mops()),
                    ns(x.p99),
                    if t > cores {
                        "oversubscribed: no target"
                    } else {
                        ok(x.p99 <= 2_000)
                    },
                    x.share() * 100.0,
                    ok(x.share() >= 0.99),
                    x.c.central_cas as f64 / x.admitted.max(1) as f64,
                    writes(x),
                );
            }
        }
        // After an idle spell longer than the burst's time, every thread starts again at once
        // on a full word.
        let (burst, rate) = (spin::MIXED.burst as f64, spin::MIXED.rate as f64);
        let bound = burst + rate * ms as f64 / 1e3;
        let ceiling = (bound - (rate * 2e-3 - burst)) / bound;
        println!(
            "\nAll threads idle from 5 ms to 7 ms, then all start again at once ({ms} ms; {:.1} % of the bound is all an idle spell of 2 ms leaves); the near rules, then without the far lease by age (`--no-lease-by-wait`):\n",
            ceiling * 100.0
        );
        let mut w = words.to_vec();
        w.extend(["--idle-at-us", "5000", "--idle-us", "2000"].map(str::to_owned));
        header();
        for (extra, label) in [
            (None, "near"),
            (Some("--no-lease-by-wait"), "near --no-lease-by-wait"),
        ] {
            for cores in [16usize, 32, 48, 64] {
                let mut v = w.clone();
                v.extend(extra.map(str::to_owned));
                let m = machine(&v, cores);
                let x = spin::run(Rules::Near, m, spin::MIXED, cores, ms * 1_000_000, 1);
                row_named(spin::MIXED, label, cores, &x);
            }
        }
        // 48 and 64 cores with slower transfers and with every thread starting at once, the
        // near rules with and without each of their three newest rules.
        println!("\n48 and 64 cores, one thread per core: t_w 75 and 90 ns; every thread starting at once (`--spawn-ns 0`); the near rules, each without one rule, and with the earlier proposal for the far lease by age ({ms} ms):\n");
        header();
        for extra in [["--t-w", "75"], ["--t-w", "90"], ["--spawn-ns", "0"]] {
            for cores in [48usize, 64] {
                for off in [
                    "",
                    "--no-lease-by-wait",
                    "--locked-spin",
                    "--no-near-min",
                    "--lease-by-wait-any",
                ] {
                    let mut v = words.to_vec();
                    v.extend(extra.map(str::to_owned));
                    if !off.is_empty() {
                        v.push(off.to_owned());
                    }
                    let m = machine(&v, cores);
                    let x = spin::run(Rules::Near, m, spin::MIXED, cores, ms * 1_000_000, 1);
                    let label = format!("near {} {} {off}", extra[0], extra[1]);
                    row_named(spin::MIXED, label.trim_end(), cores, &x);
                }
            }
        }
    }

    /// How the decisions of a run went (`spin --paths`).
    fn paths(x: &spin::Run) {
        let c = &x.c;
        println!(
            "|  | spends {}, refused not yet payable {}, from `dry_until` {}, from `dry_all` {}, by the word {}; word admissions {} (lease locked {}); leases {}, advances {}, refills {}; central CAS {} ({} failed); publications {} ({} by a run alone); shared writes / refusal {} |",
            c.spends,
            c.not_yet,
            c.dry_until_refusals,
            c.rm_refusals,
            c.central_refusals,
            c.word_admissions,
            c.locked_admissions,
            c.leases,
            c.advances,
            c.refills,
            c.central_cas,
            c.failed_cas,
            c.publications,
            c.alone_publications,
            writes(x),
        );
    }

    /// Shared-line writes per refusal and what they are.
    fn writes(x: &spin::Run) -> String {
        let c = &x.c;
        let per = |w: u64| w as f64 / c.refusals.max(1) as f64;
        format!(
            "{:.2e} = advances {:.2e} + lost attempts {:.2e} + publications {:.2e} ({} advances, {} refills by admissions, {} refusals)",
            per(c.shared_writes_refusing),
            per(c.refusing_writes[0]),
            per(c.refusing_writes[1]),
            per(c.refusing_writes[2]),
            c.advances,
            c.refills,
            c.refusals,
        )
    }

    /// `cas` and `multi` under the retry rules given (`tails`): the tails and throughput of
    /// one word's loop.
    fn tails(words: &[String]) {
        let cores = num(words, "--cores", 16) as usize;
        let m = machine(words, cores);
        let ms = num(words, "--ms", 40);
        let seeds = num(words, "--seeds", 1);
        let label = opt(words, "--label").unwrap_or_else(|| "today".to_owned());
        println!(
            "{m:?}, {ms} ms simulated per row, seeds 1..={seeds} (p99, p999: the worst seed)\n"
        );
        tails_header();
        for g in list(words, "--regime", "mixed,allow,deny") {
            for r in list(words, "--rules", "cas,multi") {
                for t in list(words, "--threads", "1,2,4,8,16") {
                    let t: usize = t.parse().expect("a number");
                    let runs: Vec<spin::Run> = (1..=seeds)
                        .map(|seed| spin::run(rules(&r), m, regime(&g), t, ms * 1_000_000, seed))
                        .collect();
                    tails_row(regime(&g), &r, &label, t, &runs);
                }
            }
        }
    }

    pub(crate) fn tails_header() {
        println!("| regime | strategy | retry | threads | Mops/s | admitted / bound | p50 | p99 | p999 | longest | CAS / decision | min / max decisions per thread |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    }

    /// One row of `tails`: the mean of the runs' rates, their worst tails.
    pub(crate) fn tails_row(
        g: Regime,
        rules: &str,
        label: &str,
        threads: usize,
        runs: &[spin::Run],
    ) {
        let k = runs.len() as f64;
        let mean = |f: &dyn Fn(&spin::Run) -> f64| runs.iter().map(f).sum::<f64>() / k;
        let worst = |f: &dyn Fn(&spin::Run) -> u64| runs.iter().map(f).max().unwrap_or(0);
        println!(
            "| {} | {rules} | {label} | {threads} | {:.2} | {:.1} % | {} | {} | {} | {} | {:.2} | {:.2} |",
            g.name,
            mean(&|r| r.mops()),
            mean(&|r| r.share() * 100.0),
            ns(worst(&|r| r.p50)),
            ns(worst(&|r| r.p99)),
            ns(worst(&|r| r.p999)),
            ns(worst(&|r| r.max_ns)),
            mean(&|r| r.c.central_cas as f64 / r.decisions.max(1) as f64),
            mean(&|r| r.min_dec as f64 / r.max_dec.max(1) as f64),
        );
    }

    pub(crate) fn main(words: &[String]) {
        match words[0].as_str() {
            "calibrate" => calibrate(words),
            "tails" => tails(words),
            "predict" => predict(words),
            "spin" => {
                let cores = num(words, "--cores", 16) as usize;
                let m = machine(words, cores);
                let ms = num(words, "--ms", 20);
                let seed = num(words, "--seed", 1);
                println!("{m:?}, {ms} ms simulated per row, seed {seed}\n");
                header();
                for g in list(words, "--regime", "mixed") {
                    for r in list(words, "--rules", "cas,sharded,near") {
                        for t in list(words, "--threads", "4,8,16,32") {
                            let t: usize = t.parse().expect("a number");
                            let x = spin::run(rules(&r), m, regime(&g), t, ms * 1_000_000, seed);
                            row(regime(&g), rules(&r), t, &x);
                            if words.iter().any(|w| w == "--paths") {
                                paths(&x);
                            }
                        }
                    }
                }
            }
            w => panic!("{w}: the commands are calibrate, predict, spin (or the think-time model's numbers)"),
        }
    }
}
