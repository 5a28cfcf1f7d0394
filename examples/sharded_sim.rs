//! A discrete-event model of one limit decided by many cores: a single word (`Bucket`, the
//! harness's `cas`) against the sharded bucket's protocol (a central word, one lease per core),
//! counting cache-line transfers, central compare-and-swaps and lease sizes. Deterministic:
//! every run with the same arguments prints the same table (SplitMix64, seed 1).
//!
//! * **Cores** issue one-token decisions, each after an exponentially distributed think time,
//!   so that all cores together offer `load × rate` decisions per second.
//! * **Lines.** A line is held modified by one core or shared by several. A hit costs 1 ns; a
//!   miss (a read of a line another core wrote, or a write of a line other cores hold) costs
//!   `t_w`. Those from the line's writer and the writes occupy the line for `t_w`: they queue,
//!   so it serves at most `1 / t_w` of them a second; reads of a clean shared line do not. A CAS that queued behind another core's transfer of its line is counted as
//!   failed once (its reading went stale) and retried: one more transfer and one more CAS.
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
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
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
