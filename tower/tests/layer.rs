//! The layer through `ServiceExt::oneshot` with a `ManualClock`: exact 200/429 sequences and
//! header values (read back with a Structured Fields parser, as a client would).

mod support;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use support::{ok_service, sf_items, sf_param};
use tollgate::{Bucket, KeyedLimiter, ManualClock, Quota, ShardedBucket};
use tollgate_tower::{
    key_fn, Backend, Check, ClientIp, Decision, HeaderKey, IpGrouping, MissingKey, PeerIp,
    ProxyHeader, RateLimitHeaders, RateLimitLayer, Rejection,
};
use tower::{service_fn, Layer, Service, ServiceExt};

fn quota(tokens: u64, per: Duration, burst: u64) -> Quota {
    Quota::new(tokens, per, burst).unwrap()
}

fn req() -> Request<Body> {
    Request::new(Body::empty())
}

fn from_peer(peer: &str) -> Request<Body> {
    let mut req = req();
    req.extensions_mut()
        .insert(SocketAddr::new(peer.parse().unwrap(), 40_000));
    req
}

async fn status<S>(svc: &S, req: Request<Body>) -> StatusCode
where
    S: Service<
            Request<Body>,
            Response = Response<tollgate_tower::RateLimitBody<Full<Bytes>>>,
            Error = Infallible,
        > + Clone,
{
    svc.clone().oneshot(req).await.unwrap().status()
}

async fn body_text<B: http_body::Body>(response: Response<B>) -> String
where
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Integer parameter `key` of the list's only member.
fn param(list: &[(String, Vec<(String, i64)>)], key: &str) -> i64 {
    assert_eq!(list.len(), 1, "one policy");
    sf_param(&list[0], key)
}

fn retry_after(headers: &HeaderMap) -> i64 {
    headers["retry-after"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn exact_sequence_with_headers_from_the_same_decision() {
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 3), clock.clone());
    let svc = RateLimitLayer::new(bucket).layer(ok_service());
    for _ in 0..3 {
        assert_eq!(status(&svc, req()).await, StatusCode::OK);
    }
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = refused.headers();
    assert_eq!(retry_after(h), 1);
    let policy = sf_items(h, "ratelimit-policy");
    let limit = sf_items(h, "ratelimit");
    assert_eq!(policy[0].0, "default");
    assert_eq!(param(&policy, "q"), 3);
    assert_eq!(param(&policy, "w"), 3);
    assert_eq!(param(&limit, "r"), 0);
    assert_eq!(
        param(&limit, "t"),
        1,
        "capped at Retry-After (full again only after 3 s)"
    );
    assert!(param(&limit, "r") <= param(&policy, "q"));
    assert!(param(&limit, "t") <= retry_after(h));
    assert_eq!(h["content-type"], "text/plain; charset=utf-8");
    assert_eq!(body_text(refused).await, "Too Many Requests\n");

    clock.advance(Duration::from_millis(999));
    assert_eq!(status(&svc, req()).await, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(1));
    assert_eq!(status(&svc, req()).await, StatusCode::OK);
    assert_eq!(status(&svc, req()).await, StatusCode::TOO_MANY_REQUESTS);
    // Admitted responses carry no extra headers by default.
    clock.advance(Duration::from_secs(10));
    let ok = svc.clone().oneshot(req()).await.unwrap();
    assert!(ok.headers().is_empty());
    assert_eq!(body_text(ok).await, "ok");
}

#[tokio::test]
async fn retry_after_rounds_up_to_whole_seconds_at_least_one() {
    for (period, expected) in [
        (Duration::from_nanos(1), 1),
        (Duration::from_millis(999), 1),
        (Duration::from_secs(1), 1),
        (Duration::from_nanos(1_000_000_001), 2),
    ] {
        // One token per `period`, burst 1: after one request the wait is exactly `period`.
        let bucket = Bucket::with_clock(quota(1, period, 1), ManualClock::new());
        let svc = RateLimitLayer::new(bucket).layer(ok_service());
        assert_eq!(status(&svc, req()).await, StatusCode::OK);
        let refused = svc.clone().oneshot(req()).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = refused.headers();
        assert_eq!(retry_after(h), expected, "period {period:?}");
        let limit = sf_items(h, "ratelimit");
        let policy = sf_items(h, "ratelimit-policy");
        assert_eq!(param(&limit, "t"), expected);
        assert!(param(&limit, "t") <= retry_after(h));
        assert_eq!(
            param(&policy, "w"),
            expected,
            "w = the refill time of one burst, rounded up"
        );
        assert!(param(&limit, "r") <= param(&policy, "q"));
    }
}

#[tokio::test]
async fn admitted_responses_carry_headers_when_asked_and_all_switch_off() {
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(10, Duration::from_secs(1), 10), clock.clone());
    let headers = RateLimitHeaders::default()
        .on_success(true)
        .legacy(true)
        .policy_name("api")
        .unwrap();
    let svc = RateLimitLayer::new(bucket)
        .headers(headers)
        .layer(ok_service());
    let ok = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let h = ok.headers();
    assert!(h.get("retry-after").is_none());
    let limit = sf_items(h, "ratelimit");
    assert_eq!(limit[0].0, "api");
    assert_eq!(param(&limit, "r"), 9);
    assert_eq!(param(&limit, "t"), 1, "100 ms until full, rounded up");
    assert_eq!(param(&sf_items(h, "ratelimit-policy"), "q"), 10);
    assert_eq!(h["x-ratelimit-limit"], "10");
    assert_eq!(h["x-ratelimit-remaining"], "9");
    assert_eq!(h["x-ratelimit-reset"], "1");

    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 1), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .headers(RateLimitHeaders::none().on_success(true))
        .layer(ok_service());
    assert!(svc
        .clone()
        .oneshot(req())
        .await
        .unwrap()
        .headers()
        .is_empty());
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers().len(), 1, "content-type only");

    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 1), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .headers(RateLimitHeaders::default().ietf(false))
        .layer(ok_service());
    svc.clone().oneshot(req()).await.unwrap();
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(retry_after(refused.headers()), 1);
    assert!(refused.headers().get("ratelimit").is_none());
}

#[tokio::test]
async fn custom_rejection_and_grpc() {
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 1), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .rejection(
            Rejection::new(HeaderValue::from_static("application/json"), r#"{"e":1}"#)
                .status(StatusCode::SERVICE_UNAVAILABLE),
        )
        .layer(ok_service());
    svc.clone().oneshot(req()).await.unwrap();
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["content-type"], "application/json");
    assert_eq!(retry_after(refused.headers()), 1);
    assert_eq!(body_text(refused).await, r#"{"e":1}"#);

    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 1), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .rejection(Rejection::grpc())
        .layer(ok_service());
    svc.clone().oneshot(req()).await.unwrap();
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::OK,
        "gRPC errors travel in grpc-status"
    );
    assert_eq!(refused.headers()["content-type"], "application/grpc");
    assert_eq!(refused.headers()["grpc-status"], "8");
    let status = tonic::Status::from_header_map(refused.headers()).expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(status.message(), "rate limited");
    assert_eq!(body_text(refused).await, "");

    // A tonic client sees a missing key as INTERNAL (the server lacks ConnectInfo).
    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(1), 1), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .key(PeerIp::new())
        .rejection(Rejection::grpc())
        .layer(ok_service());
    let response = svc.clone().oneshot(req()).await.unwrap();
    let status = tonic::Status::from_header_map(response.headers()).expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::Internal);
    assert!(status
        .message()
        .contains("into_make_service_with_connect_info"));
}

#[tokio::test]
async fn spoofed_x_forwarded_for_never_changes_the_key() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let key = ClientIp::new(["10.0.0.0/8".parse().unwrap()]);
    let svc = RateLimitLayer::new(limiter).key(key).layer(ok_service());
    let via_proxy = |xff: &str| {
        let mut req = from_peer("10.0.0.1");
        req.headers_mut()
            .insert("x-forwarded-for", xff.parse().unwrap());
        req
    };
    assert_eq!(
        status(&svc, via_proxy("6.6.6.6, 203.0.113.7")).await,
        StatusCode::OK
    );
    // The client rotates its own (leftmost) entries: same key, refused.
    for spoof in [
        "7.7.7.7, 203.0.113.7",
        "1.1.1.1, 2.2.2.2, 203.0.113.7",
        "203.0.113.7",
    ] {
        assert_eq!(
            status(&svc, via_proxy(spoof)).await,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // Another client behind the proxy has its own limit.
    assert_eq!(status(&svc, via_proxy("203.0.113.8")).await, StatusCode::OK);
    // A client connecting directly cannot choose its key with the header.
    let mut direct = from_peer("198.51.100.1");
    direct
        .headers_mut()
        .insert("x-forwarded-for", "203.0.113.99".parse().unwrap());
    assert_eq!(status(&svc, direct).await, StatusCode::OK);
    let mut direct = from_peer("198.51.100.1");
    direct
        .headers_mut()
        .insert("x-forwarded-for", "203.0.113.100".parse().unwrap());
    assert_eq!(status(&svc, direct).await, StatusCode::TOO_MANY_REQUESTS);

    // The same through RFC 7239 `Forwarded`.
    let limiter: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let key = ClientIp::new(["10.0.0.0/8".parse().unwrap()]).header(ProxyHeader::Forwarded);
    let svc = RateLimitLayer::new(limiter).key(key).layer(ok_service());
    let forwarded = |value: &'static str| {
        let mut req = from_peer("10.0.0.1");
        req.headers_mut()
            .insert("forwarded", HeaderValue::from_static(value));
        req
    };
    assert_eq!(
        status(&svc, forwarded(r#"for=6.6.6.6, for="[2001:db8::7]:4711""#)).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, forwarded(r#"for=1.1.1.1, for="[2001:db8::7]""#)).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn ipv6_addresses_are_grouped_by_prefix() {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let svc = RateLimitLayer::new(limiter)
        .key(PeerIp::new())
        .layer(ok_service());
    assert_eq!(
        status(&svc, from_peer("2001:db8:0:0::1")).await,
        StatusCode::OK
    );
    // Same /64: one host rotating addresses gets no fresh limit.
    assert_eq!(
        status(&svc, from_peer("2001:db8::ffff:ffff:ffff:ffff")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&svc, from_peer("2001:db8:0:1::1")).await,
        StatusCode::OK
    );
    // IPv4 and its IPv4-mapped IPv6 form are one key.
    assert_eq!(status(&svc, from_peer("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(
        status(&svc, from_peer("::ffff:192.0.2.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A /48 grouping merges the two /64s above.
    let limiter: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let key = PeerIp::new().grouping(IpGrouping::new(32, 48).unwrap());
    let svc = RateLimitLayer::new(limiter).key(key).layer(ok_service());
    assert_eq!(
        status(&svc, from_peer("2001:db8:0:0::1")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, from_peer("2001:db8:0:1::1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn missing_peer_address_under_each_policy() {
    let clock = ManualClock::new();
    let limiter = || {
        KeyedLimiter::<IpAddr, _, _>::with_clock(
            quota(1, Duration::from_secs(60), 1),
            100,
            clock.clone(),
        )
    };

    // Default: reject, with a 500 that says how to fix the server (never a panic).
    let svc = RateLimitLayer::new(limiter())
        .key(PeerIp::new())
        .layer(ok_service());
    let response = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body_text(response)
        .await
        .contains("into_make_service_with_connect_info"));
    // A present peer still works.
    assert_eq!(status(&svc, from_peer("192.0.2.1")).await, StatusCode::OK);

    // Shared key: all keyless requests count against one limit.
    let shared = IpAddr::from([0, 0, 0, 0]);
    let svc = RateLimitLayer::new(limiter())
        .key(ClientIp::new(["10.0.0.0/8".parse().unwrap()]))
        .missing_key(MissingKey::Shared(shared))
        .layer(ok_service());
    assert_eq!(status(&svc, req()).await, StatusCode::OK);
    assert_eq!(status(&svc, req()).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(&svc, from_peer("192.0.2.1")).await, StatusCode::OK);

    // Allow: keyless requests pass unlimited.
    let svc = RateLimitLayer::new(limiter())
        .key(PeerIp::new())
        .missing_key(MissingKey::Allow)
        .layer(ok_service());
    for _ in 0..5 {
        assert_eq!(status(&svc, req()).await, StatusCode::OK);
    }
    assert_eq!(status(&svc, from_peer("192.0.2.1")).await, StatusCode::OK);
    assert_eq!(
        status(&svc, from_peer("192.0.2.1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A missing header key is the client's fault: 400.
    let limiter: KeyedLimiter<String, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let svc = RateLimitLayer::new(limiter)
        .key(HeaderKey::new(http::HeaderName::from_static("x-api-key")))
        .layer(ok_service());
    assert_eq!(status(&svc, req()).await, StatusCode::BAD_REQUEST);
    let with_key = |k: &'static str| {
        let mut r = req();
        r.headers_mut()
            .insert("x-api-key", HeaderValue::from_static(k));
        r
    };
    assert_eq!(status(&svc, with_key("a")).await, StatusCode::OK);
    assert_eq!(
        status(&svc, with_key("a")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&svc, with_key("b")).await, StatusCode::OK);

    // Shadow mode refuses nothing, a request without a key included (no 400); keyed ones are
    // decided and pass.
    let limiter: KeyedLimiter<String, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 1), 100, clock.clone());
    let svc = RateLimitLayer::new(limiter)
        .key(HeaderKey::new(http::HeaderName::from_static("x-api-key")))
        .shadow(true)
        .layer(ok_service());
    for _ in 0..3 {
        assert_eq!(status(&svc, req()).await, StatusCode::OK);
        assert_eq!(status(&svc, with_key("a")).await, StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_share_one_limit_under_1500_concurrent_requests() {
    // Burst 5 and a rate that cannot refill during the test (the clock never moves).
    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(3600), 5), ManualClock::new());
    let svc = RateLimitLayer::new(bucket).layer(ok_service());
    let tasks: Vec<_> = (0..1500)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { svc.oneshot(req()).await.unwrap().status() })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(admitted, 5);
}

#[tokio::test]
async fn cost_from_a_closure_and_costs_above_the_burst() {
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota(10, Duration::from_secs(1), 10), clock.clone());
    let svc = RateLimitLayer::new(bucket)
        .cost(|req: &Request<Body>| match *req.method() {
            Method::GET => 1,
            Method::POST => 4,
            _ => 11,
        })
        .layer(ok_service());
    let with = |m: Method| Request::builder().method(m).body(Body::empty()).unwrap();
    assert_eq!(status(&svc, with(Method::POST)).await, StatusCode::OK); // 6 left
    assert_eq!(status(&svc, with(Method::POST)).await, StatusCode::OK); // 2 left
    let refused = svc.clone().oneshot(with(Method::POST)).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after(refused.headers()), 1); // 200 ms for 2 more tokens
    assert_eq!(param(&sf_items(refused.headers(), "ratelimit"), "r"), 2);
    assert_eq!(status(&svc, with(Method::GET)).await, StatusCode::OK);
    // A cost above the burst can never pass: refused, without a Retry-After to wait for.
    clock.advance(Duration::from_secs(5));
    let never = svc.clone().oneshot(with(Method::DELETE)).await.unwrap();
    assert_eq!(never.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(never.headers().get("retry-after").is_none());
    assert_eq!(status(&svc, with(Method::GET)).await, StatusCode::OK);
}

#[tokio::test]
async fn sharded_keyed_by_closure_and_shared_backends() {
    let clock = ManualClock::new();
    let sharded = ShardedBucket::with_clock(quota(1, Duration::from_secs(60), 4), 2, clock.clone());
    let svc = RateLimitLayer::new(sharded).layer(ok_service());
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += usize::from(status(&svc, req()).await == StatusCode::OK);
    }
    assert_eq!(admitted, 4);

    // Keyed by the first path segment, through a closure; the limiter shared with the caller.
    let limiter: Arc<KeyedLimiter<String, _, _>> = Arc::new(KeyedLimiter::with_clock(
        quota(1, Duration::from_secs(60), 1),
        100,
        clock.clone(),
    ));
    let key = key_fn(|req: &Request<Body>| req.uri().path().split('/').nth(1).map(str::to_owned));
    let svc = RateLimitLayer::shared(Arc::clone(&limiter))
        .key(key)
        .layer(ok_service());
    let to = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    assert_eq!(status(&svc, to("/a/1")).await, StatusCode::OK);
    assert_eq!(
        status(&svc, to("/a/2")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&svc, to("/b")).await, StatusCode::OK);
    assert_eq!(limiter.len(), 2);
}

/// An asynchronous backend (as a remote limiter is): the decision comes from a future.
struct Slow(Bucket<ManualClock>);

impl<K> Backend<K> for Slow {
    type Future = Pin<Box<dyn Future<Output = Decision> + Send>>;

    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future> {
        let Check::Ready(decision) = Backend::<K>::check(&self.0, key, cost, report) else {
            unreachable!("a bucket decides at once")
        };
        Check::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            decision
        }))
    }
}

#[tokio::test]
async fn asynchronous_backends_hold_the_request_until_the_decision() {
    let bucket = Bucket::with_clock(quota(1, Duration::from_secs(2), 2), ManualClock::new());
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let inner = service_fn(move |_req: Request<Body>| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Full::<Bytes>::from("ok"))) }
    });
    let svc = RateLimitLayer::new(Slow(bucket))
        .headers(RateLimitHeaders::default().on_success(true))
        .layer(inner);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = svc.clone().oneshot(req()).await.unwrap();
        statuses.push((
            response.status(),
            response.headers().get("ratelimit").cloned(),
        ));
    }
    assert_eq!(statuses[0].0, StatusCode::OK);
    assert_eq!(statuses[0].1.as_ref().unwrap(), "\"default\";r=1;t=2");
    assert_eq!(statuses[1].0, StatusCode::OK);
    assert_eq!(statuses[2].0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses[2].1.as_ref().unwrap(), "\"default\";r=0;t=2");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "refused requests never reach the service"
    );
}

#[tokio::test]
async fn axum_router_with_connect_info_and_per_route_limits() {
    use axum::extract::connect_info::MockConnectInfo;
    use axum::routing::get;
    use axum::Router;

    let clock = ManualClock::new();
    let per_ip: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota(1, Duration::from_secs(60), 2), 100, clock.clone());
    let login = Bucket::with_clock(quota(1, Duration::from_secs(60), 1), clock.clone());
    // Per-route limits: /login has its own (stricter, global) limit on top of the per-IP one.
    let app = Router::new()
        .route("/login", get(|| async { "login" }))
        .route_layer(RateLimitLayer::new(login))
        .merge(Router::new().route("/", get(|| async { "ok" })))
        .layer(RateLimitLayer::new(per_ip).key(PeerIp::new()))
        .layer(MockConnectInfo(SocketAddr::from(([192, 0, 2, 1], 1234))));
    let get_ = |path: &str| Request::get(path).body(Body::empty()).unwrap();
    let s = |r: Response<Body>| r.status();
    assert_eq!(
        s(app.clone().oneshot(get_("/login")).await.unwrap()),
        StatusCode::OK
    );
    assert_eq!(
        s(app.clone().oneshot(get_("/login")).await.unwrap()),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        s(app.clone().oneshot(get_("/")).await.unwrap()),
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        s(app.clone().oneshot(get_("/")).await.unwrap()),
        StatusCode::OK
    );
    let missing = Router::new().route("/", get(|| async { "ok" })).layer(
        RateLimitLayer::new(Bucket::with_clock(
            quota(1, Duration::from_secs(1), 1),
            clock.clone(),
        ))
        .key(PeerIp::new()),
    );
    assert_eq!(
        s(missing.oneshot(get_("/")).await.unwrap()),
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

/// Nested layers: an inner refusal keeps its own legacy headers under an outer layer that
/// admitted the request and adds its own (the outer layer's `X-RateLimit-Remaining: 98` does
/// not replace the inner 429's 0); the `RateLimit` lists combine.
#[tokio::test]
async fn an_inner_refusal_keeps_its_legacy_headers_under_an_outer_layer() {
    let clock = ManualClock::new();
    let outer = RateLimitLayer::new(Bucket::with_clock(
        quota(100, Duration::from_secs(1), 100),
        clock.clone(),
    ))
    .headers(
        RateLimitHeaders::default()
            .on_success(true)
            .legacy(true)
            .policy_name("outer")
            .unwrap(),
    );
    let inner = RateLimitLayer::new(Bucket::with_clock(
        quota(1, Duration::from_secs(60), 1),
        clock.clone(),
    ))
    .headers(
        RateLimitHeaders::default()
            .legacy(true)
            .policy_name("inner")
            .unwrap(),
    );
    let svc = outer.layer(inner.layer(ok_service()));
    assert_eq!(
        svc.clone().oneshot(req()).await.unwrap().status(),
        StatusCode::OK
    );
    let refused = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = refused.headers();
    assert_eq!(h["x-ratelimit-limit"], "1");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["retry-after"], "60");
    let lists: Vec<_> = h.get_all("ratelimit").iter().collect();
    assert_eq!(lists.len(), 2, "{h:?}");
}
