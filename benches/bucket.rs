//! Single bucket, side by side in one run: tollgate's CAS bucket vs a `Mutex` with the same exact
//! arithmetic vs governor 0.10 (`RateLimiter::direct(..).check()` on its default quanta clock):
//! the allow path, the deny path (also against governor with the wait a refusal's caller needs,
//! `governor_retry_after`), the inexact quotas 3/s, 7/s and 999,999,937/s (allow and deny),
//! two threads on one bucket (allow path, slowest thread), tollgate on its coarse clock, and
//! the clock reads alone. Every limiter is called as a user calls it for one token: tollgate's
//! `try_acquire(1)` with the cost a constant the compiler sees (as it is in governor's
//! `check()`, its one-token call), and 999,999,937/s also on a clock one day past its origin
//! (`tollgate_day_old`), where its products no longer fit in 64 bits, as in a server that has
//! run for more than 18 s.
//!
//! * `cargo bench --bench bucket` — criterion; quote ratios from one run (the machines are noisy).
//! * `ci/callgrind.sh` — instructions per call of every scenario under callgrind, repeatable even
//!   on a busy machine: it runs this binary as `bucket callgrind SCENARIO N` (`bucket list`
//!   prints the scenarios).
#![allow(missing_docs)]

use common::across_threads;
use criterion::{BenchmarkId, Criterion};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;
use tollgate::{gcra, Bucket, Clock, CoarseClock, Denied, QuantaClock, Quota};
use tollgate_testkit::contention as common;

/// The baseline: a `Mutex<u64>` around the same pure decision function, on the same clock.
struct MutexBucket {
    state: Mutex<u64>,
    quota: Quota,
    clock: QuantaClock,
}

impl MutexBucket {
    fn new(quota: Quota) -> Self {
        MutexBucket {
            state: Mutex::new(gcra::FULL),
            quota,
            clock: QuantaClock::new(),
        }
    }
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let mut state = self.state.lock().unwrap();
        if let Some(next) = gcra::try_acquire(*state, now, &self.quota, cost)? {
            *state = next;
        }
        Ok(())
    }
}

type Governor = governor::DefaultDirectRateLimiter;

/// The largest burst governor takes (`u32`); no benchmark loop drains it.
const BIG_BURST: u32 = 4_000_000_000;

/// A limiter configuration: `tokens` per `per`, `burst`; drained first for the deny regime.
#[derive(Clone, Copy)]
struct Config {
    tokens: u32,
    per: Duration,
    burst: u32,
    deny: bool,
}

impl Config {
    fn quota(self) -> Quota {
        Quota::new(u64::from(self.tokens), self.per, u64::from(self.burst)).unwrap()
    }

    fn governor(self) -> Governor {
        let q = governor::Quota::with_period(self.per / self.tokens)
            .unwrap()
            .allow_burst(NonZeroU32::new(self.burst).unwrap());
        governor::RateLimiter::direct(q)
    }

    fn tollgate(self) -> Bucket<QuantaClock> {
        let b = Bucket::with_clock(self.quota(), QuantaClock::new());
        if self.deny {
            let _ = b.try_acquire(u64::from(self.burst));
        }
        b
    }

    /// On a clock that reads one day since its origin at the start (a server up for a day):
    /// the inexact quotas whose products pass 64 bits after seconds (999,999,937/s: after
    /// 18 s) take their wide path, as they do in production; a fresh clock would measure only
    /// their first seconds.
    fn tollgate_day_old(self) -> Bucket<DayOld> {
        let b = Bucket::with_clock(self.quota(), DayOld(QuantaClock::new()));
        if self.deny {
            let _ = b.try_acquire(u64::from(self.burst));
        }
        b
    }

    fn coarse(self, clock: &CoarseClock) -> Bucket<CoarseClock> {
        let b = Bucket::with_clock(self.quota(), clock.clone());
        if self.deny {
            let _ = b.try_acquire(u64::from(self.burst));
        }
        b
    }

    fn mutex(self) -> MutexBucket {
        let m = MutexBucket::new(self.quota());
        if self.deny {
            let _ = m.try_acquire(u64::from(self.burst));
        }
        m
    }

    fn gov(self) -> Governor {
        let g = self.governor();
        if self.deny {
            for _ in 0..self.burst {
                let _ = g.check();
            }
        }
        g
    }
}

/// Quanta's clock, one day ahead: see [`Config::tollgate_day_old`].
struct DayOld(QuantaClock);

impl Clock for DayOld {
    #[inline]
    fn now(&self) -> u64 {
        self.0.now() + 86_400_000_000_000
    }
}

/// Every call admitted: 10^9 tokens/s and a burst no loop drains.
const ALLOW: Config = Config {
    tokens: 1_000_000_000,
    per: Duration::from_secs(1),
    burst: BIG_BURST,
    deny: false,
};

/// Every call refused: one token an hour, drained first.
const DENY: Config = Config {
    tokens: 1,
    per: Duration::from_secs(3600),
    burst: 1,
    deny: true,
};

/// The inexact quotas (their unit does not divide a nanosecond): allow (a burst no loop drains)
/// and deny (burst 1, drained; not for 999,999,937/s, which refills faster than any loop calls).
fn inexact() -> Vec<(String, Config)> {
    let mut v = Vec::new();
    for tokens in [3, 7, 999_999_937] {
        for deny in [false, true] {
            if deny && tokens > 1000 {
                continue;
            }
            let burst = if deny { 1 } else { BIG_BURST };
            let regime = if deny { "deny" } else { "allow" };
            v.push((
                format!("{tokens}ps_{regime}"),
                Config {
                    tokens,
                    per: Duration::from_secs(1),
                    burst,
                    deny,
                },
            ));
        }
    }
    v
}

fn coarse_clock() -> CoarseClock {
    CoarseClock::new(Duration::from_millis(1)).expect("coarse clock's upkeep thread")
}

fn single_thread(c: &mut Criterion) {
    let clock = coarse_clock();
    let mut g = c.benchmark_group("single_thread");
    for (regime, cfg) in [("allow", ALLOW), ("deny", DENY)] {
        let (t, m, gov, co) = (cfg.tollgate(), cfg.mutex(), cfg.gov(), cfg.coarse(&clock));
        g.bench_function(BenchmarkId::new("tollgate", regime), |b| {
            b.iter(|| black_box(t.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("mutex", regime), |b| {
            b.iter(|| black_box(m.try_acquire(1)))
        });
        g.bench_function(BenchmarkId::new("governor", regime), |b| {
            b.iter(|| black_box(gov.check()))
        });
        g.bench_function(BenchmarkId::new("tollgate_coarse", regime), |b| {
            b.iter(|| black_box(co.try_acquire(1)))
        });
        if regime == "deny" {
            // What tollgate's refusal returns, from governor: the wait (for `Retry-After`).
            g.bench_function(BenchmarkId::new("governor_retry_after", regime), |b| {
                b.iter(|| black_box(governor_retry_after(&gov)))
            });
        }
    }
    g.finish();
}

/// governor's one-token call with the wait a refusal's caller needs (a `Retry-After` header, a
/// sleep): its `NotUntil` holds the earliest instant, and the wait from it costs a second clock
/// read. tollgate's refusal returns that wait itself ([`Denied::RetryAfter`]).
#[inline(always)]
fn governor_retry_after(gov: &Governor) -> Result<(), Duration> {
    use governor::clock::Clock as _;
    gov.check()
        .map_err(|not_until| not_until.wait_time_from(gov.clock().now()))
}

fn inexact_quotas(c: &mut Criterion) {
    let mut g = c.benchmark_group("inexact");
    for (name, cfg) in inexact() {
        let (t, gov) = (cfg.tollgate(), cfg.gov());
        g.bench_function(BenchmarkId::new("tollgate", &name), |b| {
            b.iter(|| black_box(t.try_acquire(1)))
        });
        if cfg.tokens > 1000 {
            let day = cfg.tollgate_day_old();
            g.bench_function(BenchmarkId::new("tollgate_day_old", &name), |b| {
                b.iter(|| black_box(day.try_acquire(1)))
            });
        }
        g.bench_function(BenchmarkId::new("governor", &name), |b| {
            b.iter(|| black_box(gov.check()))
        });
    }
    g.finish();
}

/// The clock reads alone: tollgate's `QuantaClock` (cached scale factor), governor's default
/// clock (`quanta::Clock::now` behind governor's `QuantaClock`), and the coarse clock.
fn clocks(c: &mut Criterion) {
    use governor::clock::Clock as _;
    let mut g = c.benchmark_group("clock");
    let (t, gov, co) = (
        QuantaClock::new(),
        governor::clock::QuantaClock::default(),
        coarse_clock(),
    );
    g.bench_function("tollgate_quanta", |b| b.iter(|| black_box(t.now())));
    g.bench_function("governor_quanta", |b| b.iter(|| black_box(gov.now())));
    g.bench_function("tollgate_coarse", |b| b.iter(|| black_box(co.now())));
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let clock = coarse_clock();
    let mut g = c.benchmark_group("two_threads_allow");
    let (t, m, gov, co) = (
        ALLOW.tollgate(),
        ALLOW.mutex(),
        ALLOW.gov(),
        ALLOW.coarse(&clock),
    );
    g.bench_function("tollgate", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(t.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("mutex", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(m.try_acquire(1)).ok();
            })
        })
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(gov.check()).ok();
            })
        })
    });
    g.bench_function("tollgate_coarse", |b| {
        b.iter_custom(|n| {
            across_threads(2, n, |_, _| {
                black_box(co.try_acquire(1)).ok();
            })
        })
    });
    g.finish();
}

// ---- instruction counts (callgrind) ----

/// The measured loop: `n` calls of `f`. Never inlined, so callgrind can collect exactly this
/// function (`--toggle-collect`) and the setup is left out.
#[inline(never)]
fn callgrind_loop<R>(n: u64, f: impl Fn() -> R) {
    for _ in 0..n {
        black_box(f());
    }
}

/// Runs scenario `name` `n` times (after a warm-up outside the measured loop).
fn callgrind(name: &str, n: u64) -> Result<(), String> {
    let (limiter, config) = name
        .split_once('/')
        .ok_or_else(|| format!("{name}: expected LIMITER/CONFIG"))?;
    fn run<R>(n: u64, f: impl Fn() -> R) {
        for _ in 0..1000 {
            black_box(f());
        }
        callgrind_loop(n, f);
    }
    if limiter == "clock" {
        use governor::clock::Clock as _;
        match config {
            "tollgate_quanta" => {
                let c = QuantaClock::new();
                run(n, || c.now());
            }
            "governor_quanta" => {
                let c = governor::clock::QuantaClock::default();
                run(n, || c.now());
            }
            "tollgate_coarse" => {
                let c = coarse_clock();
                run(n, || c.now());
            }
            other => return Err(format!("{other}: no such clock")),
        }
        return Ok(());
    }
    let cfg = match config {
        "allow" => ALLOW,
        "deny" => DENY,
        other => inexact()
            .into_iter()
            .find(|(n, _)| n == other)
            .map(|(_, c)| c)
            .ok_or_else(|| format!("{other}: no such configuration"))?,
    };
    match limiter {
        "tollgate" => {
            let t = cfg.tollgate();
            run(n, || t.try_acquire(1));
        }
        "tollgate_day_old" => {
            let t = cfg.tollgate_day_old();
            run(n, || t.try_acquire(1));
        }
        "tollgate_coarse" => {
            let clock = coarse_clock();
            let t = cfg.coarse(&clock);
            run(n, || t.try_acquire(1));
        }
        "mutex" => {
            let m = cfg.mutex();
            run(n, || m.try_acquire(1));
        }
        "governor" => {
            let g = cfg.gov();
            run(n, || g.check());
        }
        "governor_retry_after" => {
            let g = cfg.gov();
            run(n, || governor_retry_after(&g));
        }
        other => return Err(format!("{other}: no such limiter")),
    }
    Ok(())
}

fn scenarios() -> Vec<String> {
    let mut v = Vec::new();
    for l in ["tollgate", "mutex", "governor", "tollgate_coarse"] {
        for c in ["allow", "deny"] {
            v.push(format!("{l}/{c}"));
        }
    }
    v.push("governor_retry_after/deny".to_string());
    for (c, cfg) in inexact() {
        for l in ["tollgate", "governor"] {
            v.push(format!("{l}/{c}"));
        }
        if cfg.tokens > 1000 {
            v.push(format!("tollgate_day_old/{c}"));
        }
    }
    for c in ["tollgate_quanta", "governor_quanta", "tollgate_coarse"] {
        v.push(format!("clock/{c}"));
    }
    v
}

fn main() {
    if common::callgrind_cli("bucket", scenarios, callgrind) {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    single_thread(&mut c);
    inexact_quotas(&mut c);
    two_threads(&mut c);
    clocks(&mut c);
    c.final_summary();
}
