//! The headers of the local fallback report the quota that decided, and an unbalanced quote in
//! a `Forwarded` line cannot pick the client key.

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::Quota;
use tollgate_redis::{OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_tower::{RateLimitHeaders, RateLimitLayer};
use tower::{service_fn, Layer, ServiceExt};

/// `RateLimit-Policy: q=Q;w=W` promises that "a client that sends at most `q` requests per `w`
/// seconds is never refused". When Redis is down and `OnUnavailable::LocalFallback` decides,
/// the policy is the local bucket's (burst 25), not the Redis quota's (burst 100). (It was the
/// Redis one: the 26th request in a second was refused under a policy that said 100 per second
/// were fine, and `RateLimit: r`, from the local snapshot, disagreed with `q`.)
#[tokio::test]
async fn local_fallback_headers_report_the_quota_that_decided() {
    let Some(server) = RedisServer::start("fallback_and_forwarded::local_fallback_headers") else {
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

/// `Forwarded` spoofing through an unbalanced quote. The client sends
/// `Forwarded: for=6.6.6.N;x="`; a trusted proxy that appends to the existing line (RFC 7239
/// §4 allows it; e.g. nginx's documented `$proxy_add_forwarded` pattern) makes the line
/// `for=6.6.6.N;x=", for=203.0.113.7`. The key must be the proxy's `for=`. (Split left to
/// right, the client's open quote swallowed the comma and its `for=6.6.6.N` became the key: a
/// fresh key per request, 20 of 20 admitted on a per-client limit with burst 1.)
#[tokio::test]
async fn a_forwarded_unbalanced_quote_cannot_pick_the_key() {
    use std::net::{IpAddr, SocketAddr};
    use tollgate::KeyedLimiter;
    use tollgate_tower::{ClientIp, KeyExtractor, ProxyHeader};

    let key = ClientIp::new(["10.0.0.0/8".parse().unwrap()]).header(ProxyHeader::Forwarded);
    let request = |n: u8| {
        let line = format!("for=6.6.6.{n};x=\", for=203.0.113.7");
        let mut req = Request::builder()
            .header("forwarded", line)
            .body(Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(SocketAddr::from(([10, 0, 0, 1], 40000)));
        req
    };
    let hour = std::time::Duration::from_secs(3600);
    let per_client: KeyedLimiter<IpAddr> = KeyedLimiter::new(Quota::new(1, hour, 1).unwrap(), 1000);
    let svc = RateLimitLayer::new(per_client)
        .key(key.clone())
        .layer(service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }));
    let mut admitted = 0;
    for n in 0..20 {
        let r = svc.clone().oneshot(request(n)).await.unwrap();
        if r.status() == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(
        KeyExtractor::<Body>::extract(&key, &request(1)),
        Some(IpAddr::from([203, 0, 113, 7])),
        "the key must be the address our proxy wrote (or at worst the proxy's own); \
         {admitted} of 20 requests of one client admitted at burst 1"
    );
    assert!(
        admitted <= 1,
        "{admitted} of 20 admitted for one client, burst 1"
    );
}
