//! The script's own running time per `decide_keys` call, as Redis measures it, on a throwaway
//! `redis-server` started as the tests start theirs: before and after each call, `INFO
//! commandstats` (the `usec` total of `EVALSHA`: the call's duration, the commands the script
//! runs included) and `INFO cpu` (the CPU time of Redis's main thread, which includes reading
//! the request and, unlike the duration, does not grow while other processes hold the CPU).
//! The slow log is not used: it also logs every command the script runs, which would add its
//! own cost to the call. Prints, for 1, 32, 256 and 1024 keys, a one-quota and a two-quota
//! policy, and keys fresh (absent) or existing (a state under the same quota), the median,
//! minimum and maximum duration per call, the median per key, and the median CPU time per call
//! and per key.
//!
//! ```text
//! cargo run -p tollgate-redis --example script_time [-- REPS]
//! ```
//!
//! The script runs inside Redis, so the build profile does not matter. The numbers depend on
//! the machine and on what else it runs; compare runs on one machine.

use std::time::Duration;
use tollgate::{Limits, Quota};
use tollgate_redis::{CheckedLimits, KeyDemand, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;

/// `EVALSHA`'s total duration so far and the CPU time of Redis's main thread, both in µs.
async fn counters(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query_async(conn)
        .await
        .expect("INFO");
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("INFO has no {name}"))
    };
    // cmdstat_evalsha:calls=N,usec=U,usec_per_call=...; absent before the first call.
    let usec = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec=")))
        .map_or(0.0, |u| u.parse().expect("usec"));
    let cpu = field("used_cpu_user_main_thread") + field("used_cpu_sys_main_thread");
    (usec, cpu * 1e6)
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("REPS: a number"))
        .unwrap_or(31);
    let Some(server) = RedisServer::start("script_time") else {
        return;
    };
    let limiter = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Bursts large enough that every repetition on an existing key is admitted (and written).
    let one = CheckedLimits::new(Limits::from(
        Quota::new(100, Duration::from_secs(1), 10_000).unwrap(),
    ))
    .unwrap();
    let two = CheckedLimits::new(
        Limits::new([
            Quota::new(100, Duration::from_secs(1), 10_000).unwrap(),
            Quota::new(1000, Duration::from_secs(60), 50_000).unwrap(),
        ])
        .unwrap(),
    )
    .unwrap();
    println!(
        "redis-server {}",
        server
            .cli(&["INFO", "server"])
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
    );
    println!(
        "{reps} calls per row; microseconds per EVALSHA (INFO commandstats) and of Redis's main \
         thread's CPU (INFO cpu)"
    );
    println!(
        "{:>5} {:>7} {:>8} | {:>9} {:>9} {:>9} | {:>8} | {:>9} {:>8}",
        "keys", "quotas", "keys are", "median", "min", "max", "per key", "cpu", "per key"
    );
    let mut run = 0usize;
    for n in [1usize, 32, 256, 1024] {
        for (qname, limits) in [("1", &one), ("2", &two)] {
            for existing in [false, true] {
                run += 1;
                let names = |rep: usize| -> Vec<String> {
                    (0..n)
                        .map(|i| {
                            if existing {
                                format!("{{b}}e{run}:{i}")
                            } else {
                                format!("{{b}}f{run}:{rep}:{i}")
                            }
                        })
                        .collect()
                };
                let call = |keys: Vec<String>| {
                    let limiter = &limiter;
                    async move {
                        let demands: Vec<KeyDemand<'_>> = keys
                            .iter()
                            .map(|k| KeyDemand {
                                key: k,
                                limits,
                                cost: 1,
                                alone: false,
                                check: false,
                            })
                            .collect();
                        let out = limiter.decide_keys(&demands).await.expect("decide_keys");
                        assert!(out.iter().all(|d| d.verdict.is_ok()), "a key refused");
                    }
                };
                // Warm up (and, for existing keys, write them), then time `reps` calls.
                call(names(usize::MAX)).await;
                let (mut d, mut cpu) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
                for rep in 0..reps {
                    let (u0, c0) = counters(&mut conn).await;
                    call(names(rep)).await;
                    let (u1, c1) = counters(&mut conn).await;
                    d.push((u1 - u0).round() as u64);
                    cpu.push((c1 - c0).round() as u64);
                }
                let cpu = median(&mut cpu);
                let med = median(&mut d);
                println!(
                    "{:>5} {:>7} {:>8} | {:>9} {:>9} {:>9} | {:>8.2} | {:>9} {:>8.2}",
                    n,
                    qname,
                    if existing { "existing" } else { "fresh" },
                    med,
                    d[0],
                    d[d.len() - 1],
                    med as f64 / n as f64,
                    cpu,
                    cpu as f64 / n as f64
                );
            }
        }
    }
}
