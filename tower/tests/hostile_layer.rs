//! The layer against hostile clients and extreme decisions: the header values a refusal
//! carries when the wait is "never", costs at the ends of `u64`, and response futures that the
//! server drops (the client went away) before or after the decision.

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::{KeyedLimiter, ManualClock, Quota};
use tollgate_tower::{HeaderKey, RateLimitHeaders, RateLimitLayer};
use tower::{service_fn, Layer, ServiceExt};

/// The largest Structured Fields integer: what the crate documents as its cap on integers.
const SF_MAX: i64 = 999_999_999_999_999;

fn ok(_req: Request<Body>) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
    std::future::ready(Ok(Response::new(Full::from("ok"))))
}

/// A refusal that no wait ends (a keyed table of no slots refuses every key with
/// `RetryAfter(Duration::MAX)`) carries a `Retry-After` within the documented integer cap: a
/// value that a signed 64-bit parser (Go's `strconv.Atoi`, Java's `Long.parseLong`) reads,
/// instead of 18446744073709551615, which such clients reject and then retry on their own
/// schedule. `RateLimit`'s `t` stays at most `Retry-After`.
#[tokio::test]
async fn a_wait_of_never_has_a_retry_after_within_the_integer_cap() {
    let limiter: KeyedLimiter<String, Quota, ManualClock> =
        KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 0, ManualClock::new());
    let svc = RateLimitLayer::new(limiter)
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .headers(RateLimitHeaders::default().legacy(true))
        .layer(service_fn(ok));
    let req = Request::builder()
        .header("x-api-key", "k")
        .body(Body::empty())
        .unwrap();
    let refused = svc.oneshot(req).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = refused.headers();
    let retry = h["retry-after"].to_str().unwrap();
    let retry: i64 = retry
        .parse()
        .expect("Retry-After fits a signed 64-bit integer");
    assert_eq!(retry, SF_MAX);
    let limit: sfv::List = sfv::Parser::new(h["ratelimit"].as_bytes())
        .parse_list()
        .unwrap();
    let sfv::ListEntry::Item(item) = &limit[0] else {
        panic!("an item")
    };
    let t = item.params.get("t").and_then(|t| t.as_integer()).unwrap();
    assert!(i64::from(t) <= retry);
}
