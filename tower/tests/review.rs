//! Adversarial review (branch review-s17): each test here demonstrates a suspected defect and
//! FAILS on the reviewed code. See the commit messages for the analysis and suggested fixes.

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::Quota;
use tollgate_redis::test_support::RedisServer;
use tollgate_redis::{OnUnavailable, RedisLimiter};
use tollgate_tower::{RateLimitHeaders, RateLimitLayer};
use tower::{service_fn, Layer, ServiceExt};

/// `RateLimit-Policy: q=Q;w=W` promises that "a client that sends at most `q` requests per `w`
/// seconds is never refused". When Redis is down and `OnUnavailable::LocalFallback` decides,
/// the Redis backend still reports the Redis quota (burst 100) while the local bucket that
/// decides holds a quarter of it (burst 25): the 26th request in a second is refused under a
/// policy that says 100 per second are fine, and `RateLimit: r` (from the local snapshot)
/// disagrees with `q`.
#[tokio::test]
async fn review_local_fallback_headers_report_the_quota_that_decided() {
    let Some(server) = RedisServer::start("review::local_fallback_headers") else {
        return;
    };
    let limiter = RedisLimiter::builder(&server.url(), Quota::per_second(100).unwrap())
        .on_unavailable(OnUnavailable::LocalFallback {
            fraction: 0.25,
            max_keys: 100,
        })
        .build()
        .await
        .unwrap();
    drop(server); // Redis is gone: the local fallback decides from now on
    let svc = RateLimitLayer::new(limiter)
        .headers(RateLimitHeaders::default().on_success(true))
        .layer(service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }));
    let mut first_refusal = None;
    for i in 0..100 {
        let r = svc
            .clone()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            first_refusal = Some((i, r.headers().clone()));
            break;
        }
    }
    let (i, h) = first_refusal.expect("the fallback refuses at some point");
    let policy = h["ratelimit-policy"].to_str().unwrap().to_owned();
    let q: u64 = policy
        .split(';')
        .find_map(|p| p.strip_prefix("q="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        i >= q as usize,
        "request {} refused within one second while RateLimit-Policy says {policy} \
         (RateLimit: {:?})",
        i + 1,
        h.get("ratelimit")
    );
}
