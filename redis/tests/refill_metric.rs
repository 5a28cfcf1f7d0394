//! `tollgate_redis_lease_refills_total` counts the lease refills sent to Redis, not those the open
//! breaker refused before any call. Alone in its test binary: it installs the global metrics
//! recorder.
#![cfg(feature = "metrics")]

use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::{Error, Leases, RedisLimiter};
use tollgate_testkit::recorder::Recorder;
use tollgate_testkit::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refill_metric_counts_only_refills_sent() {
    let Some(server) = RedisServer::start("refill_metric::sent") else {
        return;
    };
    let recorder = Recorder::new().install_global();
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1000).unwrap())
        .name("rm")
        .leases(Leases::new(4).lifetime(Duration::from_millis(1)))
        .timeout(Duration::from_millis(50))
        .probe_interval(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    server.pause();
    assert!(matches!(l.check("k", 1).await, Err(Error::Timeout(_))));
    server.resume();
    for _ in 0..10 {
        assert!(matches!(l.check("k", 1).await, Err(Error::Unavailable)));
    }
    let m = recorder.snapshot();
    let refills = m.counter("tollgate_redis_lease_refills_total{limiter=rm}");
    let c = l.counters();
    println!("refills metric {refills}; counters {c:?}");
    assert_eq!(
        refills, c.redis_calls,
        "refills 'sent to Redis' vs script calls actually sent"
    );
}
