//! `Retry-After` and `RateLimit`'s `t` of an inexact quota and right after a `Bucket::set_quota`,
//! through the layer on a `ManualClock`: both are the limiter's real wait rounded up to whole
//! seconds, `w + 1` where the limiter's rounding leaves it past `w`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{HeaderMap, Request, StatusCode};
use tollgate::{Bucket, ManualClock, Quota};
use tollgate_tower::{RateLimitHeaders, RateLimitLayer};
use tower::Layer;

use support::{ok_service, send, sf_items, sf_param, Svc};

/// The layer over `bucket` (shared, so the test reconfigures it), each request costing `cost`,
/// headers on every response.
fn service(bucket: &Arc<Bucket<ManualClock>>, cost: u64) -> Svc {
    let headers = RateLimitHeaders::default().on_success(true);
    tower::util::BoxCloneService::new(
        RateLimitLayer::new(Arc::clone(bucket))
            .cost(move |_: &Request<Body>| cost)
            .headers(headers)
            .layer(ok_service()),
    )
}

/// `Retry-After` (if any), and `t` and `w` of the single-quota IETF fields.
fn read(h: &HeaderMap) -> (Option<i64>, i64, i64) {
    let retry = h
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let t = sf_param(&sf_items(h, "ratelimit")[0], "t");
    let w = sf_param(&sf_items(h, "ratelimit-policy")[0], "w");
    (retry, t, w)
}

/// An inexact quota (3/s: its state counts half-nanoseconds of refill) rounds toward refusing:
/// a burst taken at a reading off its grid is back a nanosecond after `w`. The headers say what
/// the limiter does, rounded up to whole seconds as documented: `t`, and `Retry-After` for the
/// whole burst, read `w + 1`, and a client that comes back after `w` alone is refused. Right
/// after a `set_quota` out of that state into an exact quota, the rounding carries: the new
/// quota's `t` reads its `w + 1` too, and the bucket is full that much after `w`, not before.
#[tokio::test]
async fn an_inexact_quota_s_rounding_reads_w_plus_one_and_the_limiter_waits_that_long() {
    let three = Quota::new(3, Duration::from_secs(1), 3).unwrap();
    let tens = Quota::new(10, Duration::from_secs(100), 10).unwrap();
    assert!(!three.is_exact() && tens.is_exact());
    let clock = ManualClock::new();
    let bucket = Arc::new(Bucket::with_clock(tens, clock.clone()));
    bucket.set_quota(three);
    let (one, burst) = (service(&bucket, 1), service(&bucket, 3));
    clock.set(Duration::from_nanos(1_000_000_001)); // off the 2-ns grid of 3/s
    let (status, h) = send(&burst).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read(&h), (None, 2, 1), "full again in 1 s and 1 ns");
    let (status, h) = send(&one).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(read(&h), (Some(1), 1, 1), "one token: a third of a second");
    let (status, h) = send(&burst).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(read(&h), (Some(2), 2, 1), "the burst: 1 s and 1 ns");
    clock.advance(Duration::from_secs(1));
    let (status, h) = send(&burst).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "after w alone");
    assert_eq!(read(&h), (Some(1), 1, 1), "1 ns left");
    clock.advance(Duration::from_nanos(1));
    assert_eq!(send(&burst).await.0, StatusCode::OK);

    clock.advance(Duration::from_nanos(2_000_000_001)); // full, and off the grid again
    assert_eq!(send(&burst).await.0, StatusCode::OK);
    bucket.set_quota(tens);
    let until_full = |b: &Bucket<ManualClock>| {
        let (_, snapshots) = tollgate::Limiter::decide_snapshots(b, &(), 0);
        snapshots.tightest().1.until_full()
    };
    let w = Duration::from_secs(100);
    let past_w = until_full(&bucket) - w;
    assert!(
        Duration::ZERO < past_w && past_w < Duration::from_micros(1),
        "{past_w:?}"
    );
    let (status, h) = send(&one).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        read(&h),
        (Some(11), 11, 100),
        "a token in 10 s and {past_w:?}"
    );
    let (status, h) = send(&burst).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        read(&h),
        (Some(31), 31, 100),
        "three in 30 s and {past_w:?}"
    );
    clock.advance(w);
    assert_eq!(until_full(&bucket), past_w);
    clock.advance(past_w);
    assert_eq!(until_full(&bucket), Duration::ZERO);
}
