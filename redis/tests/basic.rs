//! Semantics against a real server: edges, snapshots, expiry, hash tags, per-key quotas, the
//! number path, build errors.

use std::time::{Duration, Instant};
use tollgate::{Denied, Quota, Snapshot};
use tollgate_redis::{Error, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;

fn q(tokens: u64, per: Duration, burst: u64) -> Quota {
    Quota::new(tokens, per, burst).unwrap()
}

#[tokio::test]
async fn burst_then_refusal_with_exact_wait() {
    let Some(server) = RedisServer::start("basic::burst_then_refusal_with_exact_wait") else {
        return;
    };
    // One token per hour: nothing refills during the test.
    let quota = q(1, Duration::from_secs(3600), 5);
    let l = RedisLimiter::builder(&server.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    for i in 0..5 {
        let (v, s) = l.check_snapshot("k", 1).await.unwrap();
        assert_eq!(v, Ok(()));
        assert_eq!(s.remaining(), 4 - i);
    }
    match l.check("k", 1).await.unwrap() {
        // The wait is one emission interval minus the microseconds since the first admission.
        Err(Denied::RetryAfter(d)) => {
            assert!(
                d <= Duration::from_secs(3600) && d > Duration::from_secs(3590),
                "{d:?}"
            )
        }
        v => panic!("expected a refusal, got {v:?}"),
    }
    let c = l.counters();
    assert_eq!((c.redis, c.redis_calls, c.errors), (6, 6, 0));
    // Edges: no round trip.
    assert_eq!(l.check("k", 0).await.unwrap(), Ok(()));
    assert_eq!(l.check("k", 6).await.unwrap(), Err(Denied::ExceedsBurst));
    assert_eq!(l.try_acquire("k", 6).await, Err(Denied::ExceedsBurst));
    assert_eq!(l.counters().redis_calls, 6);
    // With a snapshot they read the state (and write nothing).
    let (v, s) = l.check_snapshot("k", 0).await.unwrap();
    assert_eq!((v, s.remaining()), (Ok(()), 0));
    let (v, s) = l.check_snapshot("k", 9).await.unwrap();
    assert_eq!((v, s.remaining()), (Err(Denied::ExceedsBurst), 0));
    assert!(s.until_full() > Duration::from_secs(5 * 3600 - 10));
    // A fresh key is full.
    let (v, s) = l.check_snapshot("fresh", 0).await.unwrap();
    assert_eq!((v, s), (Ok(()), Snapshot::new(5, Duration::ZERO)));
}

#[tokio::test]
async fn key_expires_when_full_again() {
    let Some(server) = RedisServer::start("basic::key_expires_when_full_again") else {
        return;
    };
    // 10 per second: 3 tokens refill in 300 ms.
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(10).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (v, s) = l.check_snapshot("ttl", 3).await.unwrap();
    assert_eq!(v, Ok(()));
    assert_eq!(s.until_full(), Duration::from_millis(300));
    let pttl: i64 = server
        .cli(&["PTTL", "tollgate:ttl"])
        .trim()
        .parse()
        .unwrap();
    // (redis-cli takes a few ms to start: the TTL is read a little later.)
    assert!((150..=303).contains(&pttl), "PTTL {pttl}");
    // Gone once full: an idle key costs nothing.
    let t0 = Instant::now();
    while server.cli(&["EXISTS", "tollgate:ttl"]).trim() == "1" {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the key never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, s) = l.check_snapshot("ttl", 0).await.unwrap();
    assert_eq!(s, Snapshot::new(10, Duration::ZERO));
}

#[tokio::test]
async fn hash_tags_prefix_and_per_key_quotas() {
    let Some(server) = RedisServer::start("basic::hash_tags_prefix_and_per_key_quotas") else {
        return;
    };
    let hour = Duration::from_secs(3600);
    let l = RedisLimiter::builder(&server.url(), q(1, hour, 2))
        .timeout(Duration::from_secs(2))
        .prefix("rl:")
        .quota_for("vip:{7}", q(1, hour, 4))
        .build()
        .await
        .unwrap();
    assert_eq!(l.quota_for("vip:{7}").burst(), 4);
    assert_eq!(l.quota_for("other").burst(), 2);
    for _ in 0..4 {
        assert_eq!(l.check("vip:{7}", 1).await.unwrap(), Ok(()));
    }
    assert!(l.check("vip:{7}", 1).await.unwrap().is_err());
    assert_eq!(l.check("plain", 2).await.unwrap(), Ok(()));
    assert!(l.check("plain", 1).await.unwrap().is_err());
    assert_eq!(server.cli(&["EXISTS", "rl:vip:{7}"]).trim(), "1");
    assert_eq!(server.cli(&["EXISTS", "rl:plain"]).trim(), "1");
    // A limiter with another quota on the same key carries the state over (it is tagged with
    // its quota): the drained bucket stays drained, a fresh key holds the new burst.
    let other = RedisLimiter::builder(&server.url(), q(1, hour, 3))
        .timeout(Duration::from_secs(2))
        .prefix("rl:")
        .build()
        .await
        .unwrap();
    assert!(other.check("plain", 1).await.unwrap().is_err());
    assert_eq!(other.check("fresh", 3).await.unwrap(), Ok(()));
    // Braces in the prefix would hijack the keys' slots.
    let e = RedisLimiter::builder(&server.url(), q(1, hour, 3))
        .timeout(Duration::from_secs(2))
        .prefix("{x}:")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

#[tokio::test]
async fn big_numbers_round_trip() {
    let Some(server) = RedisServer::start("basic::big_numbers_round_trip") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let nums = [
        0,
        1,
        100_000_000,
        (1 << 53) - 1,
        1 << 52,
        999_999_999_999_999,
    ];
    let back = l.echo(&nums).await.unwrap();
    let want: Vec<String> = nums.iter().map(u64::to_string).collect();
    assert_eq!(back, want);
    // The largest quotas the script holds work end to end: 10^9 tokens/s with a burst of 10^8,
    // and one per second with a burst of two million (2 × 10^15 units).
    for quota in [
        q(1_000_000_000, Duration::from_secs(1), 100_000_000),
        q(1, Duration::from_secs(1), 2_000_000),
    ] {
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .prefix(&format!("big{}:", quota.tokens()))
            .build()
            .await
            .unwrap();
        let burst = quota.burst();
        let (v, s) = l.check_snapshot("k", burst - 1).await.unwrap();
        assert_eq!((v, s.remaining()), (Ok(()), 1));
        assert_eq!(s.until_full(), quota.refill_time(burst - 1));
    }
}

#[tokio::test]
async fn build_errors_are_clear() {
    // A quota outside the script's range is refused before any connection is made: one per
    // second with a burst of 2^51 − 1, which even whole tokens leave beyond 2^51.
    let huge = Quota::per_second(1)
        .unwrap()
        .with_burst((1 << 51) - 1)
        .unwrap();
    let e = RedisLimiter::builder("redis://127.0.0.1:1", huge)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(e.to_string().contains("exact range"), "{e}");
    // A bad URL, and a refused connection (port 1 on loopback), within the connect timeout.
    let quota = Quota::per_second(1).unwrap();
    let e = RedisLimiter::builder("nonsense", quota)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Url(_)), "{e}");
    let t0 = Instant::now();
    let e = RedisLimiter::builder("redis://127.0.0.1:1", quota)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Connect(_) | Error::Timeout(_)), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(std::error::Error::source(&e).is_some() || matches!(e, Error::Timeout(_)));
}
