//! The cost of the `metrics` feature per decision, side by side in one run with the Prometheus
//! recorder installed (the one the example server uses, without its HTTP listener): a plain
//! `Bucket` against a `Metered` one, and an unnamed `KeyedLimiter` against a named one, on the
//! admit path (one counter increment) and the refuse path (a counter and a histogram sample).
//!
//! * `cargo bench --bench metrics --features metrics` — criterion; quote ratios from one run.
//! * `BENCH=metrics FEATURES=metrics ci/callgrind.sh` — instructions per call of each scenario
//!   (`metrics list` prints them).
//! * `metrics cpu [ROUNDS] [N]` (the bench binary) — ns per call by thread CPU time, the
//!   scenarios interleaved per round: what a loaded machine's wall-clock timings hide.
#![allow(missing_docs)]

use criterion::{black_box, Criterion};
use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::metrics::Metered;
use tollgate::{Bucket, DefaultClock, Denied, KeyedLimiter, Quota};
use tollgate_testkit::contention as common;

/// A rate and burst no benchmark loop drains: every call is admitted.
fn open() -> Quota {
    Quota::new(
        1_000_000_000,
        std::time::Duration::from_secs(1),
        4_000_000_000,
    )
    .unwrap()
}

/// One token an hour, drained: every call is refused.
fn shut() -> Quota {
    Quota::new(1, std::time::Duration::from_secs(3600), 1).unwrap()
}

/// Every scenario's limiter, built after the recorder is installed (their handles are its).
struct Limiters {
    plain: Bucket,
    metered: Metered<Bucket>,
    keyed: KeyedLimiter<u64>,
    named: KeyedLimiter<u64>,
    plain_shut: Bucket,
    metered_shut: Metered<Bucket>,
}

impl Limiters {
    fn new() -> Limiters {
        metrics::set_global_recorder(PrometheusBuilder::new().build_recorder())
            .expect("the only recorder");
        let l = Limiters {
            plain: Bucket::new(open()),
            metered: Metered::new("bench", Bucket::new(open())),
            keyed: KeyedLimiter::new(open(), 1024),
            named: KeyedLimiter::builder(open(), 1024, DefaultClock::default())
                .name("bench-keyed")
                .build()
                .unwrap(),
            plain_shut: Bucket::new(shut()),
            metered_shut: Metered::new("bench-refused", Bucket::new(shut())),
        };
        let _ = (l.plain_shut.try_acquire(1), l.metered_shut.try_acquire(1));
        let _ = (l.keyed.try_acquire(&7, 1), l.named.try_acquire(&7, 1));
        l
    }

    /// Scenario `name`'s call, boxed: every scenario pays the same indirect call.
    #[allow(clippy::type_complexity)]
    fn pick(&self, name: &str) -> Option<Box<dyn Fn() -> Result<(), Denied> + '_>> {
        Some(match name {
            "admitted/bucket" => Box::new(|| self.plain.try_acquire(1)),
            "admitted/bucket_metered" => Box::new(|| self.metered.try_acquire(1)),
            "admitted/keyed" => Box::new(|| self.keyed.try_acquire(&7, 1)),
            "admitted/keyed_named" => Box::new(|| self.named.try_acquire(&7, 1)),
            "refused/bucket" => Box::new(|| self.plain_shut.try_acquire(1)),
            "refused/bucket_metered" => Box::new(|| self.metered_shut.try_acquire(1)),
            _ => return None,
        })
    }
}

const SCENARIOS: [&str; 6] = [
    "admitted/bucket",
    "admitted/bucket_metered",
    "admitted/keyed",
    "admitted/keyed_named",
    "refused/bucket",
    "refused/bucket_metered",
];

/// The measured loop (collected alone by callgrind's `--toggle-collect`).
#[inline(never)]
fn callgrind_loop(n: u64, f: &dyn Fn() -> Result<(), Denied>) {
    for _ in 0..n {
        let _ = black_box(f());
    }
}

/// This thread's CPU time in nanoseconds: the work a loop did, without the time its thread
/// spent descheduled on a busy machine.
#[cfg(unix)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant libc defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Elsewhere: wall-clock time (a loaded machine's descheduling included).
#[cfg(not(unix))]
fn thread_cpu_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// `metrics cpu ROUNDS N`: each scenario `N` calls per round, the scenarios interleaved in
/// every round, timed by thread CPU time; prints each scenario's median ns per call and the
/// median of the per-round differences against its plain counterpart.
fn cpu_time(rounds: usize, n: u64) {
    let l = Limiters::new();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); SCENARIOS.len()];
    for _ in 0..rounds {
        for (i, name) in SCENARIOS.iter().enumerate() {
            let f = l.pick(name).expect("a scenario");
            let t0 = thread_cpu_ns();
            callgrind_loop(n, &f);
            times[i].push((thread_cpu_ns() - t0) as f64 / n as f64);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    for (i, name) in SCENARIOS.iter().enumerate() {
        // Scenarios come in pairs: plain, then metered.
        let extra = if i % 2 == 1 {
            let d = times[i]
                .iter()
                .zip(&times[i - 1])
                .map(|(m, p)| m - p)
                .collect();
            format!("  (+{:.1} ns per call, median of the rounds)", median(d))
        } else {
            String::new()
        };
        println!("{name:<26} {:6.1} ns{extra}", median(times[i].clone()));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("cpu") {
        let arg = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
        cpu_time(arg(1, 11) as usize, arg(2, 2_000_000));
        return;
    }
    if common::callgrind_cli(
        "metrics",
        || SCENARIOS.map(String::from).to_vec(),
        |name, n| {
            let l = Limiters::new();
            let f = l.pick(name).ok_or_else(|| format!("no scenario {name}"))?;
            callgrind_loop(n, &f);
            Ok(())
        },
    ) {
        return;
    }
    let l = Limiters::new();
    let mut c = Criterion::default().configure_from_args();
    for scenario in SCENARIOS {
        let f = l.pick(scenario).expect("a scenario");
        c.bench_function(&format!("metrics/{scenario}"), |b| {
            b.iter(|| black_box(f()))
        });
    }
    c.final_summary();
}
