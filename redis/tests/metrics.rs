//! The `metrics` feature against a real server: every series a named limiter records agrees
//! with its own `Counters` (each path, round trips, timeouts, the breaker, lease refills).
#![cfg(feature = "metrics")]

use std::time::{Duration, Instant};

use tollgate::{Denied, Quota};
use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
use tollgate_testkit::recorder::{Recorder, Series};
use tollgate_testkit::redis_server::RedisServer;

fn path(m: &Series, limiter: &str, path: &str) -> u64 {
    m.counter(&format!(
        "tollgate_redis_decisions_total{{limiter={limiter},path={path}}}"
    ))
}

/// One test: the recorder is global (the handles are resolved inside `build`, an async call),
/// and each snapshot drains every series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_limiter_series_agree_with_its_counters() {
    let Some(server) = RedisServer::start("metrics::named_limiter_series") else {
        return;
    };
    let recorder = Recorder::new().install_global();
    let hourly = Quota::new(1, Duration::from_secs(3600), 3).unwrap();

    // Straight to Redis: three admitted, two refused with their waits.
    let plain = RedisLimiter::builder(&server.url(), hourly)
        .name("plain")
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let verdicts: Vec<_> = futures_lite(&plain, "k", 5).await;
    assert_eq!(verdicts.iter().filter(|v| v.is_ok()).count(), 3);
    assert_eq!(plain.try_acquire("k", 4).await, Err(Denied::ExceedsBurst));
    let m = recorder.snapshot();
    assert_eq!(m.decisions("plain", "admitted"), 3);
    assert_eq!(m.decisions("plain", "refused"), 2);
    assert_eq!(m.decisions("plain", "exceeds_burst"), 1);
    assert_eq!(path(&m, "plain", "redis"), plain.counters().redis);
    assert_eq!(m.samples("tollgate_retry_after_seconds{limiter=plain}"), 2);
    let calls = plain.counters().redis_calls as usize;
    assert_eq!(
        m.samples("tollgate_redis_round_trip_seconds{limiter=plain}"),
        calls
    );

    // Leases: one refill, then decisions served locally.
    let leased = RedisLimiter::builder(
        &server.url(),
        Quota::new(1, Duration::from_secs(1), 1000).unwrap(),
    )
    .name("leased")
    .leases(Leases::new(10))
    .timeout(Duration::from_secs(2))
    .build()
    .await
    .unwrap();
    let verdicts = futures_lite(&leased, "leasekey", 20).await;
    let admitted = verdicts.iter().filter(|v| v.is_ok()).count() as u64;
    let c = leased.counters();
    let m = recorder.snapshot();
    assert_eq!(path(&m, "leased", "lease"), c.leased);
    assert_eq!(path(&m, "leased", "redis"), c.redis);
    assert!(c.redis > 0, "{c:?}");
    assert_eq!(
        m.counter("tollgate_redis_lease_refills_total{limiter=leased}"),
        c.redis
    );
    assert_eq!(path(&m, "leased", "lease_denied"), c.lease_denied);
    assert_eq!(m.decisions("leased", "admitted"), admitted);
    assert_eq!(m.decisions("leased", "refused"), 20 - admitted);
    assert_eq!(c.leased + c.lease_denied + c.redis, 20, "{c:?}");

    // A frozen server: timeouts, the breaker opens, the local fallback decides; then back.
    let local = RedisLimiter::builder(&server.url(), Quota::per_second(1_000_000).unwrap())
        .name("local")
        .timeout(Duration::from_millis(25))
        .on_unavailable(OnUnavailable::LocalFallback {
            fraction: 0.5,
            max_keys: 100,
        })
        .build()
        .await
        .unwrap();
    assert_eq!(local.try_acquire("warm", 1).await, Ok(()));
    server.pause();
    for _ in 0..20 {
        assert_eq!(local.try_acquire("localkey", 1).await, Ok(()));
    }
    server.resume();
    let t0 = Instant::now();
    while local.counters().redis < 2 {
        assert!(t0.elapsed() < Duration::from_secs(2), "not back on Redis");
        let _ = local.try_acquire("probe", 1).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let c = local.counters();
    let m = recorder.snapshot();
    assert_eq!(path(&m, "local", "local_fallback"), c.local_fallback);
    assert_eq!(path(&m, "local", "redis"), c.redis);
    assert!(c.local_fallback >= 20, "{c:?}");
    assert_eq!(
        m.counter("tollgate_redis_errors_total{limiter=local}"),
        c.errors
    );
    let timeouts = m.counter("tollgate_redis_timeouts_total{limiter=local}");
    assert!(timeouts >= 1 && timeouts <= c.errors, "{timeouts} {c:?}");
    let opened = m.counter("tollgate_redis_breaker_transitions_total{limiter=local,to=open}");
    let closed = m.counter("tollgate_redis_breaker_transitions_total{limiter=local,to=closed}");
    assert_eq!((opened, closed), (1, 1), "{m:?}");
    assert_eq!(
        m.decisions("local", "admitted"),
        c.redis + c.local_fallback,
        "every decision counted once: {c:?}"
    );
    // No key in any label.
    for series in m.names() {
        assert!(
            !series.contains("=k,")
                && !series.contains("=k}")
                && !series.contains("probe")
                && !series.contains("localkey"),
            "{series}"
        );
    }
}

/// `n` sequential decisions for `key`.
async fn futures_lite(l: &RedisLimiter, key: &str, n: usize) -> Vec<Result<(), Denied>> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(l.try_acquire(key, 1).await);
    }
    v
}
