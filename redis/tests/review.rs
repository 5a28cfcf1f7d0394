//! Adversarial review (branch review-s17): each test here demonstrates a suspected defect and
//! FAILS on the reviewed code. See the commit messages for the analysis and suggested fixes.

use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::test_support::RedisServer;
use tollgate_redis::RedisLimiter;

fn q(tokens: u64, per: Duration, burst: u64) -> Quota {
    Quota::new(tokens, per, burst).unwrap()
}

/// The README promises that a key whose state was written under another quota "is read as
/// full: at most one extra burst". While two quotas are live on the same key at once (a rolling
/// deploy that changes the limit, or `quota_for` configured on some processes only), each
/// process reads the other's state as foreign, i.e. full, on *every* call: the limit is gone
/// for as long as both run. One token per hour, bursts 2 and 3: alternating 20 requests admits
/// all 20, where at most 2 + 3 may pass.
#[tokio::test]
async fn review_two_live_quotas_on_one_key_admit_without_bound() {
    let Some(server) = RedisServer::start("review::two_live_quotas") else {
        return;
    };
    let hour = Duration::from_secs(3600);
    let old = RedisLimiter::builder(&server.url(), q(1, hour, 2))
        .build()
        .await
        .unwrap();
    let new = RedisLimiter::builder(&server.url(), q(1, hour, 3))
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

/// `probe_interval(Duration::MAX)` is accepted by `build`, but after the first failure the
/// breaker computes `last_probe + interval_ns` unchecked: the next decision panics (debug
/// builds) instead of applying the unavailability policy.
#[tokio::test]
async fn review_huge_probe_interval_panics_on_the_decision_path() {
    let Some(server) = RedisServer::start("review::huge_probe_interval") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(10).unwrap())
        .probe_interval(Duration::MAX)
        .build()
        .await
        .unwrap();
    assert_eq!(l.try_acquire("k", 1).await, Ok(()));
    drop(server); // killed: the next decision fails and opens the breaker
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..3 {
        let l = l.clone();
        let r = tokio::spawn(async move { l.try_acquire("k", 1).await }).await;
        assert!(
            r.is_ok(),
            "try_acquire panicked: {:?}",
            r.err().map(|e| e.to_string())
        );
    }
}

/// `check_quota` (public) on a valid quota with a long prime period panics with a u128
/// multiply overflow in `Params::new` instead of returning `Error::Config`.
#[test]
fn review_check_quota_on_a_long_prime_period_does_not_panic() {
    let quota = q(1, Duration::from_nanos((1 << 62) + 135), 1);
    let r = std::panic::catch_unwind(|| tollgate_redis::check_quota(quota).is_err());
    assert_eq!(r.ok(), Some(true), "check_quota({quota:?}) panicked");
}

/// A refusal served from the lease table's refusal cache (`lease_denied`) reports the snapshot
/// of the last *successful* refill (`Slot::last` is not updated when a refill is refused): after
/// another process drained the bucket, a cost-1 request is refused with `remaining() == 8`
/// (and the tower layer sends `429` with `RateLimit: r=8`), right after the refill refusal
/// itself reported 0.
#[tokio::test]
async fn review_lease_refusal_reports_a_stale_remaining() {
    let Some(server) = RedisServer::start("review::lease_refusal_snapshot") else {
        return;
    };
    let quota = q(1, Duration::from_secs(3600), 10);
    let a = RedisLimiter::builder(&server.url(), quota)
        .leases(tollgate_redis::Leases::new(2).lifetime(Duration::from_secs(60)))
        .build()
        .await
        .unwrap();
    let b = RedisLimiter::builder(&server.url(), quota)
        .build()
        .await
        .unwrap();
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
