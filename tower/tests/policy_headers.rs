//! The layer over a policy of several quotas (`MultiBucket`) through `ServiceExt::oneshot` with
//! a `ManualClock`: `RateLimit-Policy` lists every quota, `RateLimit` describes the tightest,
//! `Retry-After` is the slowest wait, and a refusal spends nothing from any quota.

mod support;

use std::sync::Arc;
use std::time::Duration;
use tollgate::Limiter;

use axum::body::Body;
use http::{HeaderMap, Request, StatusCode};
use tollgate::{Bucket, Denied, Limits, ManualClock, MultiBucket, Quota, Snapshot};
use tollgate_tower::{Backend, Check, RateLimitHeaders, RateLimitLayer};
use tower::Layer;

use support::{ok_service, send, sf_items, sf_param, Svc};

fn quota(tokens: u64, per_secs: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_secs(per_secs), burst).unwrap()
}

fn policy(quotas: &[Quota], clock: &ManualClock) -> MultiBucket<ManualClock> {
    MultiBucket::with_clock(Limits::new(quotas.iter().copied()).unwrap(), clock.clone())
}

/// The layer over `backend` in front of a service that answers `ok`.
fn service<B>(backend: B, headers: RateLimitHeaders) -> Svc
where
    B: Backend<tollgate_tower::Global> + Send + Sync + 'static,
    B::Future: Send + 'static,
{
    tower::util::BoxCloneService::new(
        RateLimitLayer::new(backend)
            .headers(headers)
            .layer(ok_service()),
    )
}

/// Sends `n` requests that must all be admitted.
async fn admit(svc: &Svc, n: usize) {
    for i in 0..n {
        assert_eq!(send(svc).await.0, StatusCode::OK, "request {i} admitted");
    }
}

fn retry_after(h: &HeaderMap) -> i64 {
    h["retry-after"].to_str().unwrap().parse().unwrap()
}

fn names(h: &HeaderMap, field: &str) -> Vec<String> {
    sf_items(h, field)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[tokio::test]
async fn rate_limit_policy_lists_one_item_per_quota_for_one_two_and_three_quotas() {
    let cases: [(&[Quota], &str, &str); 3] = [
        (
            &[quota(5, 1, 5)],
            "\"default\";q=5;w=1",
            "\"default\";r=0;t=1",
        ),
        (
            &[quota(5, 1, 5), quota(20, 60, 20)],
            "\"5-per-1s\";q=5;w=1, \"20-per-60s\";q=20;w=60",
            "\"5-per-1s\";r=0;t=1",
        ),
        (
            // q is the burst and w the refill of a whole burst: 50 tokens at 100/h take 1800 s.
            &[quota(5, 1, 5), quota(20, 60, 20), quota(100, 3600, 50)],
            "\"5-per-1s\";q=5;w=1, \"20-per-60s\";q=20;w=60, \"50-per-1800s\";q=50;w=1800",
            "\"5-per-1s\";r=0;t=1",
        ),
    ];
    for (quotas, expected_policy, expected_limit) in cases {
        let clock = ManualClock::new();
        let svc = service(policy(quotas, &clock), RateLimitHeaders::default());
        admit(&svc, 5).await;
        let (status, h) = send(&svc).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(h["ratelimit-policy"], expected_policy, "{quotas:?}");
        assert_eq!(h["ratelimit"], expected_limit, "{quotas:?}");
        assert_eq!(retry_after(&h), 1);
        // As a client parses them: one item per quota, q required, w whole seconds.
        let items = sf_items(&h, "ratelimit-policy");
        assert_eq!(items.len(), quotas.len());
        for (item, q) in items.iter().zip(quotas) {
            assert_eq!(sf_param(item, "q"), q.burst() as i64);
            assert!(sf_param(item, "w") >= 1);
        }
        assert_eq!(sf_items(&h, "ratelimit").len(), 1, "RateLimit: one quota");
    }
}

#[tokio::test]
async fn one_quota_policy_headers_equal_a_single_buckets() {
    let q = quota(2, 1, 3);
    let headers = RateLimitHeaders::default().on_success(true).legacy(true);
    let (a, b) = (ManualClock::new(), ManualClock::new());
    let single = service(Bucket::with_clock(q, a.clone()), headers.clone());
    let multi = service(policy(&[q], &b), headers);
    for step in 0..6 {
        let (s1, h1) = send(&single).await;
        let (s2, h2) = send(&multi).await;
        assert_eq!((s1, &h1), (s2, &h2), "step {step}");
        a.advance(Duration::from_millis(300));
        b.advance(Duration::from_millis(300));
    }
}

#[tokio::test]
async fn rate_limit_describes_the_tightest_quota_ties_going_to_the_one_full_last() {
    let headers = RateLimitHeaders::default().on_success(true).legacy(true);
    let clock = ManualClock::new();

    // The second is tighter: 2 of 5 left against 17 of 20.
    let svc = service(
        policy(&[quota(5, 1, 5), quota(20, 60, 20)], &clock),
        headers.clone(),
    );
    admit(&svc, 2).await;
    let (_, h) = send(&svc).await;
    assert_eq!(h["ratelimit"], "\"5-per-1s\";r=2;t=1");
    // The legacy headers describe the same quota.
    assert_eq!(
        (
            &h["x-ratelimit-limit"],
            &h["x-ratelimit-remaining"],
            &h["x-ratelimit-reset"]
        ),
        (
            &"5".parse().unwrap(),
            &"2".parse().unwrap(),
            &"1".parse().unwrap()
        )
    );

    // The minute is tighter: 1 of 3 left (40 s until full) against 8 of 10.
    let svc = service(
        policy(&[quota(10, 1, 10), quota(3, 60, 3)], &clock),
        headers.clone(),
    );
    admit(&svc, 1).await;
    let (_, h) = send(&svc).await;
    assert_eq!(h["ratelimit"], "\"3-per-60s\";r=1;t=40");
    assert_eq!(h["x-ratelimit-limit"], "3");

    // A tie on remaining tokens (1 and 1): the one full last (30 s, not 500 ms), in either
    // order.
    for quotas in [
        [quota(2, 1, 2), quota(2, 60, 2)],
        [quota(2, 60, 2), quota(2, 1, 2)],
    ] {
        let svc = service(policy(&quotas, &clock), headers.clone());
        let (_, h) = send(&svc).await;
        assert_eq!(h["ratelimit"], "\"2-per-60s\";r=1;t=30", "{quotas:?}");
    }
}

#[tokio::test]
async fn retry_after_is_the_slowest_wait_so_a_retry_at_the_first_quotas_wait_is_refused() {
    let clock = ManualClock::new();
    // Two per second, and four per minute (one token every 15 s).
    let quotas = [quota(2, 1, 2), quota(4, 60, 4)];
    let svc = service(policy(&quotas, &clock), RateLimitHeaders::default());
    admit(&svc, 2).await;
    clock.advance(Duration::from_secs(1));
    admit(&svc, 2).await;
    // The second's wait is 500 ms; the minute holds 1/15 of a token: 14 s.
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 14, "the slowest quota's wait");
    // Both hold 0 tokens; the minute is full last, and t agrees with Retry-After.
    assert_eq!(h["ratelimit"], "\"4-per-60s\";r=0;t=14");

    // A client that waits for the per-second quota only is refused again...
    clock.advance(Duration::from_secs(1));
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 13);
    // ... one that sleeps Retry-After is admitted, to the nanosecond.
    clock.advance(Duration::from_secs(13) - Duration::from_nanos(1));
    assert_eq!(send(&svc).await.0, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(send(&svc).await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_decision_names_the_quota_that_refused() {
    let clock = ManualClock::new();
    let backend = policy(&[quota(2, 1, 2), quota(4, 60, 4)], &clock);
    let check = |cost| match Backend::<()>::check(&backend, (), cost, false) {
        Check::Ready(d) => d,
        Check::Pending(_) => unreachable!("in-process"),
    };
    let admitted = check(2);
    assert_eq!((admitted.verdict, admitted.policy), (Ok(()), None));
    // The second refuses (500 ms); the minute holds 2 and would admit.
    let refused = check(1);
    assert_eq!(
        refused.verdict,
        Err(Denied::RetryAfter(Duration::from_millis(500)))
    );
    let report = refused.policy.expect("a refusal reports every quota");
    assert_eq!(report.refused(), Some(0));
    assert_eq!(report.quotas(), &[quota(2, 1, 2), quota(4, 60, 4)]);
    assert_eq!(
        report.snapshots(),
        Some(
            &[
                Snapshot::new(0, Duration::from_secs(1)),
                Snapshot::new(2, Duration::from_secs(30)),
            ][..]
        )
    );
    assert_eq!(refused.quota, Some(quota(2, 1, 2)), "the tightest quota");
    // A cost above the smallest burst: that quota, and no wait.
    let too_big = check(3);
    assert_eq!(too_big.verdict, Err(Denied::ExceedsBurst));
    assert_eq!(too_big.policy.unwrap().refused(), Some(0));
    // Asked to report (headers on admitted responses), an admission carries the policy too.
    clock.advance(Duration::from_secs(1));
    let Check::Ready(reported) = Backend::<()>::check(&backend, (), 1, true) else {
        unreachable!()
    };
    assert_eq!(reported.verdict, Ok(()));
    assert_eq!(reported.policy.unwrap().refused(), None);
    assert_eq!(reported.policy.unwrap().len(), 2);
}

#[tokio::test]
async fn a_refused_request_spends_nothing_from_any_quota() {
    let clock = ManualClock::new();
    // Two per second, three per hour.
    let backend = Arc::new(policy(&[quota(2, 1, 2), quota(3, 3600, 3)], &clock));
    let svc: Svc = tower::util::BoxCloneService::new(
        RateLimitLayer::shared(Arc::clone(&backend)).layer(ok_service()),
    );
    let hour = |b: &MultiBucket<ManualClock>| b.decide_snapshots(&(), 0).1.as_slice()[1];
    admit(&svc, 2).await;
    assert_eq!(hour(&backend).remaining(), 1);
    // The second refuses, many times over: the hour keeps its token.
    for _ in 0..50 {
        assert_eq!(send(&svc).await.0, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(hour(&backend).remaining(), 1, "refusals spent nothing");
    clock.advance(Duration::from_secs(1));
    admit(&svc, 1).await;
    // Now the hour is empty: refused for about 20 minutes, whatever the second holds.
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(&h), 1199);
    assert_eq!(names(&h, "ratelimit"), ["3-per-3600s"]);
    assert_eq!(
        backend.decide_snapshots(&(), 0).1.as_slice()[0].remaining(),
        1,
        "the refusal by the hour left the second's token too"
    );
}

#[tokio::test]
async fn policy_and_quota_names_name_the_items() {
    let clock = ManualClock::new();
    let quotas = [quota(5, 1, 5), quota(20, 60, 20)];
    let named = RateLimitHeaders::default().policy_name("api").unwrap();
    let svc = service(policy(&quotas, &clock), named);
    admit(&svc, 5).await;
    let (_, h) = send(&svc).await;
    assert_eq!(
        names(&h, "ratelimit-policy"),
        ["api-5-per-1s", "api-20-per-60s"]
    );
    assert_eq!(names(&h, "ratelimit"), ["api-5-per-1s"]);

    let given = RateLimitHeaders::default()
        .quota_names(["per-second", "per \"minute\""])
        .unwrap();
    let svc = service(policy(&quotas, &clock), given);
    admit(&svc, 5).await;
    let (_, h) = send(&svc).await;
    assert_eq!(
        names(&h, "ratelimit-policy"),
        ["per-second", "per \"minute\""]
    );
    assert_eq!(
        h["ratelimit-policy"],
        "\"per-second\";q=5;w=1, \"per \\\"minute\\\"\";q=20;w=60"
    );
    assert_eq!(names(&h, "ratelimit"), ["per-second"]);
}

#[tokio::test]
async fn admitted_responses_carry_the_policy_list_only_when_asked() {
    let clock = ManualClock::new();
    let quotas = [quota(5, 1, 5), quota(20, 60, 20)];
    let svc = service(policy(&quotas, &clock), RateLimitHeaders::default());
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::OK);
    assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());

    let svc = service(
        policy(&quotas, &clock),
        RateLimitHeaders::default().on_success(true),
    );
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h["ratelimit-policy"],
        "\"5-per-1s\";q=5;w=1, \"20-per-60s\";q=20;w=60"
    );
    assert_eq!(h["ratelimit"], "\"5-per-1s\";r=4;t=1");
    assert!(h.get("retry-after").is_none());
}

#[tokio::test]
async fn a_cost_above_the_smallest_burst_is_refused_without_retry_after() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::new(policy(&[quota(10, 1, 10), quota(20, 60, 3)], &clock))
        .cost(|_req: &Request<Body>| 4);
    let svc = tower::util::BoxCloneService::new(layer.layer(ok_service()));
    let (status, h) = send(&svc).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(h.get("retry-after").is_none(), "no wait admits it");
    assert_eq!(
        h["ratelimit-policy"],
        "\"10-per-1s\";q=10;w=1, \"3-per-9s\";q=3;w=9"
    );
    // Nothing was spent: the tightest is the minute's full burst of 3.
    assert_eq!(h["ratelimit"], "\"3-per-9s\";r=3;t=0");
}
