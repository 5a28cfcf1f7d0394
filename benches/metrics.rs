//! The cost of the `metrics` feature per decision, side by side in one run with the Prometheus
//! recorder installed (the one the example server uses, without its HTTP listener): a plain
//! `Bucket` against a `Metered` one, and an unnamed `KeyedLimiter` against a named one, on the
//! admit path (one counter increment) and the refuse path (a counter and a histogram sample).
//!
//! * `cargo bench --bench metrics --features metrics` — criterion; quote ratios from one run.
//! * `BENCH=metrics FEATURES=metrics ci/callgrind.sh` — instructions per call of each scenario
//!   (`metrics list` prints them).
#![allow(missing_docs)]

use criterion::{black_box, Criterion};
use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::metrics::Metered;
use tollgate::{Bucket, DefaultClock, Denied, KeyedLimiter, Quota};
#[allow(dead_code)] // the contention helpers are not used here
mod common;

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

fn main() {
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
