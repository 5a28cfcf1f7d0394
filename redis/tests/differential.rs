//! Differential test: the script, run at a given server time (the test-only time argument),
//! against `tollgate::gcra` on at least 10,000 random quotas, each with a random schedule of
//! costs and clock readings (forward, across period boundaries, idle gaps, steps back):
//! identical verdicts, waits, remaining tokens and times until full. A quarter of the steps
//! are lease takes ("at most L, at least the cost"): the same, plus the tokens taken.

use std::time::Duration;
use tollgate::{gcra, Denied, Quota, Snapshot};
use tollgate_redis::{RedisLimiter, ORIGIN_UNIX_US};
use tollgate_testkit::random_quotas::{edge_quota, log_uniform, quota};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::rng::Rng;

/// The quotas the script holds.
fn fits(q: Quota) -> bool {
    tollgate_redis::check_quota(q).is_ok()
}

const CASES: usize = 10_000;
const STEPS: usize = 6;
/// Keys per limiter (each limiter holds its keys' quotas).
const BATCH: usize = 500;
const TASKS: usize = 16;

/// The largest step back of the server's clock the script tolerates (one day).
const STEP_BACK_US: u64 = 86_400 * 1_000_000;

/// The last reading the schedules use: 99 years after the origin, inside tollgate's horizon.
const LAST_US: u64 = ORIGIN_UNIX_US + 99 * 365 * 86_400 * 1_000_000;

/// The next clock reading in µs since the Unix epoch (at most `LAST_US`).
fn step(rng: &mut Rng, t: u64, q: &Quota) -> u64 {
    step_unclamped(rng, t, q).min(LAST_US)
}

fn step_unclamped(rng: &mut Rng, t: u64, q: &Quota) -> u64 {
    let interval_us = q.refill_time(1).as_micros() as u64;
    let full_us = q.refill_time(q.burst()).as_micros() as u64;
    let dt = match rng.below(8) {
        0 => 0,
        1 => rng.below(3),
        2 => rng.below(interval_us.saturating_mul(2).max(1)),
        3 => rng.below(full_us.saturating_mul(2).max(1)),
        4 => log_uniform(rng, 1 << 40),
        5 => interval_us,
        // The clock steps back (a failover to a host whose clock is behind).
        6 => {
            return t
                .saturating_sub(rng.below(interval_us.max(2) * 3))
                .max(ORIGIN_UNIX_US)
        }
        _ => rng.below(1000),
    };
    t + dt
}

fn cost(rng: &mut Rng, q: &Quota) -> u64 {
    let b = q.burst();
    match rng.below(8) {
        0 => 0,
        1 => b,
        2 => b + 1 + rng.below(3),
        3 => log_uniform(rng, b),
        _ => 1 + rng.below(b.min(3)),
    }
}

#[derive(Clone)]
struct Case {
    key: String,
    quota: Quota,
    /// (server time in Unix µs, cost, lease maximum: 0 = a plain decision)
    schedule: Vec<(u64, u64, u64)>,
}

fn cases(seed: u64) -> Vec<Case> {
    let mut rng = Rng(seed);
    (0..CASES)
        .map(|i| {
            // One case in eight at an end of the range: the largest bursts the script holds.
            let q = if rng.below(8) == 0 {
                edge_quota(&mut rng, fits)
            } else {
                quota(&mut rng, fits)
            };
            // Anywhere in 2020..2110.
            let mut t = ORIGIN_UNIX_US + rng.below(90 * 365 * 86_400 * 1_000_000);
            let mut latest = t;
            let schedule = (0..STEPS)
                .map(|_| {
                    // The clock steps back at most a day behind the latest reading: a state
                    // dated further ahead of the server's time is malformed by design
                    // (`tests/hostile_clients.rs`), where the model would keep it.
                    t = step(&mut rng, t, &q).max(latest.saturating_sub(STEP_BACK_US));
                    latest = latest.max(t);
                    let c = cost(&mut rng, &q);
                    // One step in four is a lease take ("at most L, at least the cost").
                    let lease = if (1..=q.burst()).contains(&c) && rng.below(4) == 0 {
                        c + log_uniform(&mut rng, q.burst())
                    } else {
                        0
                    };
                    (t, c, lease)
                })
                .collect();
            Case {
                key: format!("d{i}"),
                quota: q,
                schedule,
            }
        })
        .collect()
}

/// The model: `(verdict, snapshot, now, tokens taken)` per step, applying `tollgate::gcra` on
/// the script's quota to its own state. A lease takes `clamp(available, cost, max)` tokens when `cost` fits.
fn model(case: &Case) -> Vec<(Result<(), Denied>, Snapshot, u64, u64)> {
    // The quota in the script's unit: the one the limiter's decisions are `gcra` on.
    let q = &tollgate_redis::script_quota(case.quota).unwrap();
    let mut state = gcra::FULL;
    case.schedule
        .iter()
        .map(|&(t, c, lease)| {
            let now = (t - ORIGIN_UNIX_US) * 1000;
            let take = if lease > 0 {
                gcra::available(state, now, q).min(lease).max(c)
            } else {
                c
            };
            match gcra::try_acquire(state, now, q, c)
                .and_then(|_| gcra::try_acquire(state, now, q, take))
            {
                Ok(next) => {
                    state = next.unwrap_or(state);
                    (Ok(()), gcra::snapshot(state, now, q), now, take)
                }
                Err(d) => (Err(d), gcra::snapshot(state, now, q), now, 0),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_equals_gcra_on_10000_random_quotas() {
    let Some(server) = RedisServer::start("differential::script_equals_gcra") else {
        return;
    };
    let all = cases(0x5eed_0001);
    let (mut admitted, mut refused, mut inexact) = (0u64, 0u64, 0u64);
    for batch in all.chunks(BATCH) {
        let mut b = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
            .timeout(Duration::from_secs(5));
        for c in batch {
            b = b.quota_for(&c.key, c.quota);
            inexact += u64::from(!c.quota.is_exact());
        }
        let limiter = b.build().await.unwrap();
        let per_task = batch.len().div_ceil(TASKS);
        let mut tasks = tokio::task::JoinSet::new();
        for chunk in batch.chunks(per_task) {
            let (limiter, chunk) = (limiter.clone(), chunk.to_vec());
            tasks.spawn(async move {
                let (mut a, mut r) = (0u64, 0u64);
                for case in &chunk {
                    let want = model(case);
                    for (i, (&(t, c, lease), w)) in case.schedule.iter().zip(&want).enumerate() {
                        let got = if lease > 0 {
                            let (v, taken, s) =
                                limiter.lease_at(&case.key, c, lease, t).await.unwrap();
                            (v, s, w.2, taken)
                        } else {
                            let (v, s, now) = limiter.check_at(&case.key, c, t).await.unwrap();
                            (v, s, now, if v.is_ok() { c } else { 0 })
                        };
                        let v = got.0;
                        assert_eq!(
                            got, *w,
                            "{:?} step {i} (t = {t} us, cost {c}) of {:?}",
                            case.quota, case.schedule
                        );
                        if v.is_ok() {
                            a += 1
                        } else {
                            r += 1
                        }
                    }
                }
                (a, r)
            });
        }
        while let Some(res) = tasks.join_next().await {
            let (a, r) = res.unwrap();
            admitted += a;
            refused += r;
        }
    }
    // The schedules exercise both outcomes and inexact quotas substantially.
    let total = (CASES * STEPS) as u64;
    assert_eq!(admitted + refused, total);
    assert!(
        admitted > total / 5 && refused > total / 10,
        "{admitted} / {refused}"
    );
    assert!(
        inexact > (CASES / 10) as u64,
        "only {inexact} inexact quotas"
    );
}
