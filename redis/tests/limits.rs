//! Policies of several quotas on one key (`RedisLimiterBuilder::limits`): one script call
//! decides them all. The differential test runs the script at given server times against
//! `tollgate::gcra` applied to each quota (admitted iff every quota admits, then every state
//! updated; otherwise none), on random two- and three-quota policies; the others check the
//! real-time path, the build refusals and a policy's value read under one quota.

use std::time::Duration;
use tollgate::{gcra, Denied, Limits, Quota, Snapshot};
use tollgate_redis::{Error, Leases, OnUnavailable, RedisLimiter, ORIGIN_UNIX_US};
use tollgate_testkit::random_quotas::{log_uniform, quota};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::rng::Rng;

/// The quotas the script holds.
fn fits(q: Quota) -> bool {
    tollgate_redis::check_quota(q).is_ok()
}

const POLICIES: usize = 1_500;
const STEPS: usize = 8;
const DAY_US: u64 = 86_400 * 1_000_000;

/// The model: each quota's `tollgate::gcra` state; the policy's verdict, its tightest snapshot
/// and that quota.
fn model(quotas: &[Quota], schedule: &[(u64, u64)]) -> Vec<(Result<(), Denied>, Snapshot, Quota)> {
    // Each quota in the script's unit decides; the policy reports the quota as configured.
    let models: Vec<Quota> = quotas
        .iter()
        .map(|q| tollgate_redis::script_quota(*q).unwrap())
        .collect();
    let mut states = vec![gcra::FULL; quotas.len()];
    schedule
        .iter()
        .map(|&(t, c)| {
            let now = (t - ORIGIN_UNIX_US) * 1000;
            let results: Vec<_> = models
                .iter()
                .zip(&states)
                .map(|(q, s)| gcra::try_acquire(*s, now, q, c))
                .collect();
            let mut verdict = Ok(());
            for r in &results {
                verdict = match (verdict, r) {
                    (Err(Denied::ExceedsBurst), _) | (_, Err(Denied::ExceedsBurst)) => {
                        Err(Denied::ExceedsBurst)
                    }
                    (Err(Denied::RetryAfter(x)), Err(Denied::RetryAfter(y))) => {
                        Err(Denied::RetryAfter(x.max(*y)))
                    }
                    (Ok(()), Err(d)) => Err(*d),
                    (v, _) => v,
                };
            }
            if verdict.is_ok() {
                for (s, r) in states.iter_mut().zip(&results) {
                    if let Ok(Some(next)) = r {
                        *s = *next;
                    }
                }
            }
            let snaps: Vec<Snapshot> = models
                .iter()
                .zip(&states)
                .map(|(q, s)| gcra::snapshot(*s, now, q))
                .collect();
            let mut best = 0;
            for (i, s) in snaps.iter().enumerate() {
                let b = &snaps[best];
                if (s.remaining(), std::cmp::Reverse(s.until_full()))
                    < (b.remaining(), std::cmp::Reverse(b.until_full()))
                {
                    best = i;
                }
            }
            (verdict, snaps[best], quotas[best])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_equal_gcra_per_quota() {
    let Some(server) = RedisServer::start("limits::policies_equal_gcra_per_quota") else {
        return;
    };
    let mut rng = Rng(0x5eed_0023);
    let (mut admitted, mut refused) = (0u32, 0u32);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..POLICIES {
        let n = 2 + rng.below(2) as usize;
        let quotas: Vec<Quota> = (0..n).map(|_| quota(&mut rng, fits)).collect();
        let min_burst = quotas.iter().map(Quota::burst).min().unwrap();
        let mut t = ORIGIN_UNIX_US + rng.below(90 * 365 * DAY_US);
        let mut latest = t;
        let schedule: Vec<(u64, u64)> = (0..STEPS)
            .map(|_| {
                let q = &quotas[rng.below(n as u64) as usize];
                let interval = q.refill_time(1).as_micros() as u64;
                t = match rng.below(6) {
                    0 => t,
                    1 => t + rng.below(interval.saturating_mul(2).max(1)),
                    2 => t + log_uniform(&mut rng, 1 << 40),
                    // Back, at most a day behind the latest reading.
                    3 => t
                        .saturating_sub(rng.below(interval.max(2) * 2))
                        .max(latest.saturating_sub(DAY_US)),
                    _ => t + rng.below(1000),
                };
                latest = latest.max(t);
                let c = match rng.below(6) {
                    0 => 0,
                    1 => min_burst + 1,
                    2 => log_uniform(&mut rng, min_burst),
                    _ => 1 + rng.below(min_burst.min(3)),
                };
                (t, c)
            })
            .collect();
        let url = server.url();
        tasks.spawn(async move {
            let limiter = RedisLimiter::builder(&url, quotas[0])
                .limits(Limits::new(quotas.iter().copied()).unwrap())
                .timeout(Duration::from_secs(5))
                .build()
                .await
                .unwrap();
            let key = format!("p{i}");
            let want = model(&quotas, &schedule);
            let (mut a, mut r) = (0, 0);
            for (step, (&(t, c), w)) in schedule.iter().zip(&want).enumerate() {
                let got = limiter.check_limits_at(&key, c, t).await.unwrap();
                assert_eq!(
                    got, *w,
                    "{quotas:?} step {step} (t = {t} us, cost {c}) of {schedule:?}"
                );
                if got.0.is_ok() {
                    a += 1
                } else {
                    r += 1
                }
            }
            (a, r)
        });
        while tasks.len() >= 16 {
            let (a, r) = tasks.join_next().await.unwrap().unwrap();
            admitted += a;
            refused += r;
        }
    }
    while let Some(res) = tasks.join_next().await {
        let (a, r) = res.unwrap();
        admitted += a;
        refused += r;
    }
    let total = (POLICIES * STEPS) as u32;
    assert_eq!(admitted + refused, total);
    assert!(
        admitted > total / 5 && refused > total / 10,
        "{admitted} / {refused}"
    );
}

/// On the server's clock: 10/s and 3/hour on one key admit 3 (the hourly quota's burst), then
/// refuse with the hourly wait; every quota's state is written at once (one key), and a refusal
/// writes nothing. A policy's value read by a one-quota limiter of its second quota uses that
/// quota's state (its tag), not the first's.
#[tokio::test]
async fn a_policy_admits_only_what_every_quota_holds() {
    let Some(server) = RedisServer::start("limits::every_quota_holds") else {
        return;
    };
    let fast = Quota::per_second(10).unwrap();
    let hourly = Quota::new(3, Duration::from_secs(3600), 3).unwrap();
    let l = RedisLimiter::builder(&server.url(), fast)
        .limits(Limits::new([fast, hourly]).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert_eq!(l.limits_for("k"), Limits::new([fast, hourly]).unwrap());
    for _ in 0..3 {
        assert_eq!(l.try_acquire("k", 1).await, Ok(()));
    }
    let before = server.cli(&["GET", "tollgate:k"]);
    assert_eq!(before.split(' ').count(), 6, "{before:?}");
    let o = l.try_acquire_outcome("k", 1).await;
    match o.verdict {
        Err(Denied::RetryAfter(w)) => assert!(w > Duration::from_secs(1000), "{w:?}"),
        v => panic!("{v:?}"),
    }
    assert_eq!(o.quota, Some(hourly), "the tightest quota");
    assert_eq!(o.snapshot.unwrap().remaining(), 0);
    assert_eq!(
        server.cli(&["GET", "tollgate:k"]),
        before,
        "a refusal writes nothing"
    );
    assert_eq!(l.try_acquire("k", 4).await, Err(Denied::ExceedsBurst));
    assert_eq!(l.counters().redis, 4);
    // The hourly quota alone, on the same key: its state (spent), not the fast quota's.
    let single = RedisLimiter::builder(&server.url(), hourly)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert!(single.check("k", 1).await.unwrap().is_err());
}

#[tokio::test]
async fn a_policy_of_several_quotas_refuses_leases_and_local_fallback() {
    let a = Quota::per_second(10).unwrap();
    let b = Quota::new(100, Duration::from_secs(60), 100).unwrap();
    let two = Limits::new([a, b]).unwrap();
    // Refused before connecting: no server needed.
    let url = "redis://127.0.0.1:1";
    let r = RedisLimiter::builder(url, a)
        .limits(two.clone())
        .leases(Leases::new(4))
        .build()
        .await;
    assert!(matches!(r, Err(Error::Config(_))), "{r:?}");
    let r = RedisLimiter::builder(url, a)
        .limits(two)
        .on_unavailable(OnUnavailable::LocalFallback {
            fraction: 0.5,
            max_keys: 10,
        })
        .build()
        .await;
    assert!(matches!(r, Err(Error::Config(_))), "{r:?}");
}
