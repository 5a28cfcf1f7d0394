//! What Redis persistence keeps across a Redis restart: with `appendonly yes` (fsync
//! `everysec`), a server killed and restarted from its append-only file hands out no fresh
//! burst — the GCRA state key and its expiry come back.

use std::time::Duration;
use tollgate::{Denied, Quota};
use tollgate_redis::RedisLimiter;
use tollgate_testkit::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aof_restarted_redis_hands_out_no_fresh_burst() {
    let Some(mut server) = RedisServer::start_with(
        "persistence::aof_restart",
        &["--appendonly", "yes", "--appendfsync", "everysec"],
    ) else {
        return;
    };
    let quota = Quota::new(1, Duration::from_secs(3600), 3).unwrap();
    let l = RedisLimiter::builder(&server.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(l.check("tenant", 1).await.unwrap(), Ok(()));
    }
    assert!(matches!(
        l.check("tenant", 1).await.unwrap(),
        Err(Denied::RetryAfter(_))
    ));
    // `everysec` fsyncs once a second: a crash loses at most the last second of writes.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    server.restart();
    let l = RedisLimiter::builder(&server.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    match l.check("tenant", 1).await.unwrap() {
        Err(Denied::RetryAfter(wait)) => {
            assert!(wait > Duration::from_secs(3500), "{wait:?}");
        }
        other => panic!("a fresh burst after the restart: {other:?}"),
    }
    // The control: without persistence the same restart forgets the key.
    let Some(mut plain) = RedisServer::start("persistence::no_aof_restart") else {
        return;
    };
    let l = RedisLimiter::builder(&plain.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        l.check("tenant", 1).await.unwrap().unwrap();
    }
    plain.restart();
    let l = RedisLimiter::builder(&plain.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert_eq!(
        l.check("tenant", 1).await.unwrap(),
        Ok(()),
        "the burst again"
    );
}
