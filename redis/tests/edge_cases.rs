//! Edge cases, one test each: two live quotas on one key, a huge probe interval or timeout, a
//! long prime period, refusals from the lease cache, edge costs while Redis is down. Each starts
//! its own `redis-server` on a free loopback port.

use std::time::Duration;
use tollgate::{Denied, Limits, Quota};
use tollgate_redis::{CheckedLimits, KeyDemand, OnUnavailable, RedisLimiter, FAIL_CLOSED_RETRY};
use tollgate_testkit::redis_server::RedisServer;

fn q(tokens: u64, per: Duration, burst: u64) -> Quota {
    Quota::new(tokens, per, burst).unwrap()
}

/// Two limiters on `server` with `quota`: one leasing `lease` tokens at a time, one not.
async fn leasing_and_not(
    server: &RedisServer,
    quota: Quota,
    lease: u64,
) -> (RedisLimiter, RedisLimiter) {
    let limiter = |leases| async move {
        let b = RedisLimiter::builder(&server.url(), quota).timeout(Duration::from_secs(2));
        match leases {
            Some(l) => b.leases(l),
            None => b,
        }
        .build()
        .await
        .unwrap()
    };
    let leases = tollgate_redis::Leases::new(lease).lifetime(Duration::from_secs(60));
    (limiter(Some(leases)).await, limiter(None).await)
}

/// Two quotas live on one key at once (a rolling deploy that changes the limit, `quota_for` on
/// some processes only): each converts the other's state, so the limit holds. (A foreign state
/// was read as full on every call: 20 of 20 admitted on a 1/hour key with bursts 2 and 3.)
#[tokio::test]
async fn two_live_quotas_on_one_key_keep_the_limit() {
    let Some(server) = RedisServer::start("edge_cases::two_live_quotas") else {
        return;
    };
    let hour = Duration::from_secs(3600);
    let old = RedisLimiter::builder(&server.url(), q(1, hour, 2))
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let new = RedisLimiter::builder(&server.url(), q(1, hour, 3))
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut admitted = 0;
    let t0 = std::time::Instant::now();
    for i in 0..20 {
        let l = if i % 2 == 0 { &old } else { &new };
        if l.check("tenant:42", 1).await.unwrap().is_ok() {
            admitted += 1;
        }
    }
    // The bound with two live quotas: the larger burst plus the refill at the larger rate over
    // the elapsed time (well under an hour, so no token).
    let bound = 3 + t0.elapsed().as_secs() / 3600;
    assert!(
        admitted <= bound,
        "{admitted} of 20 admitted on a 1/hour key with bursts 2 and 3 (bound {bound})"
    );
    // And the carried-over token is not lost: burst 2 admits one and leaves one, which the
    // burst-3 quota takes.
    assert_eq!(
        admitted, 2,
        "the old bucket's second token was not carried over"
    );
}

/// `probe_interval(Duration::MAX)`: after the first failure, decisions apply the unavailability
/// policy. (The breaker's `last_probe + interval` overflowed: the decision panicked.)
#[tokio::test]
async fn a_huge_probe_interval_applies_the_policy() {
    let Some(server) = RedisServer::start("edge_cases::huge_probe_interval") else {
        return;
    };
    // The first decision, on a live server, must not time out on a loaded machine (where the
    // default 25 ms can pass); the later ones fail at once on the dead server's refused
    // connection.
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(10).unwrap())
        .probe_interval(Duration::MAX)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert_eq!(l.try_acquire("k", 1).await, Ok(()));
    drop(server); // killed: the next decision fails and opens the breaker
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Every decision from now on takes the default policy (fail closed), the first because the
    // dead server fails it, the later ones because the breaker never lets a probe through.
    for _ in 0..3 {
        let l = l.clone();
        let r = tokio::spawn(async move { l.try_acquire("k", 1).await }).await;
        assert_eq!(
            r.map_err(|e| e.to_string()),
            Ok(Err(Denied::RetryAfter(FAIL_CLOSED_RETRY))),
            "try_acquire panicked or did not apply the fail-closed policy"
        );
    }
    assert_eq!(l.counters().fail_closed, 3);
}

/// `check_quota` on a valid quota with a long prime period (about 146 years) is an error, not a
/// panic. (The range check's u128 product overflowed.)
#[test]
fn check_quota_on_a_long_prime_period_is_an_error() {
    let quota = q(1, Duration::from_nanos((1 << 62) + 135), 1);
    let r = std::panic::catch_unwind(|| tollgate_redis::check_quota(quota).is_err());
    assert_eq!(r.ok(), Some(true), "check_quota({quota:?}) panicked");
}

/// A refusal served from the lease table's refusal cache reports Redis's bucket as the refused
/// refill found it. (It reported the last successful refill's: `remaining() == 8`, and through
/// the tower layer a `429` with `RateLimit: r=8`, right after the refusal itself reported 0.)
#[tokio::test]
async fn lease_cache_refusals_report_the_refused_refill() {
    let Some(server) = RedisServer::start("edge_cases::lease_refusal_snapshot") else {
        return;
    };
    let quota = q(1, Duration::from_secs(3600), 10);
    let (a, b) = leasing_and_not(&server, quota, 2).await;
    // A takes 2 (its request and one leased token): Redis holds 8.
    let (v, s) = a.try_acquire_snapshot("k", 1).await;
    assert_eq!((v, s.map(|s| s.remaining())), (Ok(()), Some(9)));
    // B drains the bucket.
    for _ in 0..8 {
        assert_eq!(b.try_acquire("k", 1).await, Ok(()));
    }
    // A spends its leased token, then its refill is refused (by Redis: remaining 0).
    assert_eq!(a.try_acquire("k", 1).await, Ok(()));
    let (v, s) = a.try_acquire_snapshot("k", 1).await;
    assert!(v.is_err());
    assert_eq!(s.unwrap().remaining(), 0, "the refused refill itself");
    // The next refusal comes from the refusal cache.
    let (v, s) = a.try_acquire_snapshot("k", 1).await;
    assert!(v.is_err(), "{v:?}");
    assert_eq!(a.counters().lease_denied, 1);
    let r = s.unwrap().remaining();
    assert_eq!(r, 0, "a cost-1 request refused with {r} tokens remaining");
}

/// `timeout(Duration::MAX)` (and `connect_timeout(Duration::MAX)`): no timeout of its own, every
/// call decides (a deadline of `now + timeout` unchecked would overflow and panic).
#[tokio::test]
async fn a_huge_timeout_decides() {
    let Some(server) = RedisServer::start("edge_cases::huge_timeout") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), q(2, Duration::from_secs(3600), 2))
        .timeout(Duration::MAX)
        .connect_timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    let limits = CheckedLimits::new(Limits::from(Quota::per_second(5).unwrap())).unwrap();
    let task = tokio::spawn(async move {
        let first = l.try_acquire("k", 1).await;
        let second = l.check("k", 1).await.ok();
        let third = l.check_snapshot("k", 1).await.ok().map(|(v, _)| v);
        let keys = l
            .decide_keys(&[KeyDemand {
                key: "other",
                limits: &limits,
                cost: 1,
                alone: false,
                check: false,
            }])
            .await
            .ok()
            .map(|out| out[0].verdict.is_ok());
        (first, second, third.map(|v| v.is_err()), keys)
    });
    let got = task.await.map_err(|e| e.to_string());
    assert_eq!(got, Ok((Ok(()), Some(Ok(())), Some(true), Some(true))));
}

/// While Redis cannot decide, a cost above the burst is still refused for good and a cost of 0
/// still admitted, under every policy and on every call (`try_acquire_outcome` is what the
/// tower layer calls): no policy applies to them, so a fail open admits no cost above the burst
/// and a fail closed names no wait for it nor refuses a cost of 0. Under a local fallback, a
/// cost above the share's burst but within the key's is refused with the fail-closed wait, not
/// for good.
#[tokio::test]
async fn edge_costs_keep_their_answer_while_redis_is_down() {
    let Some(server) = RedisServer::start("edge_cases::edges_in_outage") else {
        return;
    };
    let quota = q(10, Duration::from_secs(1), 10);
    let policy = Limits::new([quota, q(100, Duration::from_secs(60), 20)]).unwrap();
    let mut limiters = Vec::new();
    for on in [
        OnUnavailable::FailOpen,
        OnUnavailable::FailClosed,
        OnUnavailable::LocalFallback {
            fraction: 0.25,
            max_keys: 16,
        },
    ] {
        let one = RedisLimiter::builder(&server.url(), quota)
            .on_unavailable(on)
            .build()
            .await
            .unwrap();
        // A policy of several quotas takes no local fallback.
        let two = match on {
            OnUnavailable::LocalFallback { .. } => None,
            _ => Some(
                RedisLimiter::builder(&server.url(), quota)
                    .limits(policy.clone())
                    .on_unavailable(on)
                    .build()
                    .await
                    .unwrap(),
            ),
        };
        limiters.push((on, one, two));
    }
    drop(server);
    for (on, one, two) in &limiters {
        for l in std::iter::once(one).chain(two) {
            for _ in 0..2 {
                let o = l.try_acquire_outcome("k", 11).await;
                assert_eq!(o.verdict, Err(Denied::ExceedsBurst), "{on:?}, cost 11");
                assert_eq!(
                    l.try_acquire("k", 11).await,
                    Err(Denied::ExceedsBurst),
                    "{on:?}"
                );
                let o = l.try_acquire_outcome("k", 0).await;
                assert_eq!(o.verdict, Ok(()), "{on:?}, cost 0");
                let (v, s) = l.try_acquire_snapshot("k", 0).await;
                assert_eq!((v, s), (Ok(()), None), "{on:?}, cost 0");
            }
        }
    }
    // The local share holds 2 of the key's 10: a cost of 5 waits for Redis.
    let (_, local, _) = &limiters[2];
    let o = local.try_acquire_outcome("k", 5).await;
    assert_eq!(o.verdict, Err(Denied::RetryAfter(FAIL_CLOSED_RETRY)));
    assert_eq!(
        local.try_acquire("k", 5).await,
        Err(Denied::RetryAfter(FAIL_CLOSED_RETRY))
    );
    assert_eq!(local.try_acquire("k", 2).await, Ok(()));
}

/// A refusal served from the lease table's refusal cache to a larger cost than the refused one
/// names that cost's wait, not the refused cost's (a client retrying at the shorter wait would
/// be refused again).
#[tokio::test]
async fn lease_cache_refusals_wait_for_the_larger_cost() {
    let Some(server) = RedisServer::start("edge_cases::lease_refusal_larger_cost") else {
        return;
    };
    let quota = q(1, Duration::from_secs(1), 10);
    let (a, b) = leasing_and_not(&server, quota, 1).await;
    assert_eq!(a.try_acquire("k", 10).await, Ok(()));
    assert!(a.try_acquire("k", 1).await.is_err(), "the drained bucket");
    let cached = a.try_acquire("k", 10).await;
    assert_eq!(a.counters().lease_denied, 1, "served by the refusal cache");
    let truth = b.check("k", 10).await.unwrap();
    let (Err(Denied::RetryAfter(got)), Err(Denied::RetryAfter(want))) = (cached, truth) else {
        panic!("{cached:?} {truth:?}")
    };
    // Redis answered after the cache did: its wait is the shorter by the time between.
    assert!(
        got >= want && got <= want + Duration::from_millis(500),
        "told {got:?}, Redis needs {want:?}"
    );
}
