//! The layer against hostile clients and extreme decisions: the header values a refusal
//! carries when the wait is "never", costs at the ends of `u64`, and response futures that the
//! server drops (the client went away) before or after the decision.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tollgate::{
    Bucket, KeyedLimiter, Limits, ManualClock, MultiBucket, Quota, ShardedBucket, Smooth,
};
use tollgate_tower::{
    Backend, Check, Decision, Global, HeaderKey, KeyExtractor, MissingKey, RateLimitHeaders,
    RateLimitLayer,
};
use tower::{service_fn, Layer, Service, ServiceExt};

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

/// A service that takes a permit in `poll_ready` (as tower's `ConcurrencyLimit` does) and
/// hands it to its response future: `held` counts the permits not yet given back.
struct Permits {
    held: Arc<AtomicUsize>,
    mine: bool,
}

impl Clone for Permits {
    fn clone(&self) -> Self {
        Permits {
            held: Arc::clone(&self.held),
            mine: false,
        }
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if self.mine {
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A permit given back when the response future that holds it is dropped.
struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Service<Request<Body>> for Permits {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if !self.mine {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.mine = true;
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        assert!(self.mine, "called without poll_ready");
        self.mine = false;
        let permit = Permit(Arc::clone(&self.held));
        Box::pin(async move {
            let _permit = permit;
            tokio::task::yield_now().await;
            Ok(Response::new(Full::from("ok")))
        })
    }
}

/// A remote-like backend: the bucket decides when the future is first polled (as a Redis
/// script runs only once its future is polled); `decisions` counts them.
struct Remote {
    bucket: Arc<Bucket<ManualClock>>,
    decisions: Arc<AtomicUsize>,
}

impl<K: Send + 'static> Backend<K> for Remote {
    type Future = Pin<Box<dyn Future<Output = Decision> + Send>>;

    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future> {
        let (bucket, decisions) = (Arc::clone(&self.bucket), Arc::clone(&self.decisions));
        Check::Pending(Box::pin(async move {
            decisions.fetch_add(1, Ordering::SeqCst);
            let Check::Ready(decision) = Backend::<K>::check(&*bucket, key, cost, report) else {
                unreachable!("a bucket decides at once")
            };
            tokio::task::yield_now().await;
            decision
        }))
    }
}

/// A response future dropped (the client went away) before its decision, after it, or while
/// the inner service runs: each request is decided at most once, a request dropped before its
/// decision spends nothing, and the permit the inner service took in `poll_ready` is given
/// back every time.
#[tokio::test]
async fn dropped_response_futures_spend_at_most_once_and_give_permits_back() {
    let bucket = Arc::new(Bucket::with_clock(
        Quota::new(1, Duration::from_secs(60), 3).unwrap(),
        ManualClock::new(),
    ));
    let decisions = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::new(Remote {
        bucket: Arc::clone(&bucket),
        decisions: Arc::clone(&decisions),
    });
    let mut svc = layer.layer(Permits {
        held: Arc::clone(&held),
        mine: false,
    });
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let available = || bucket.available();

    // Dropped before the first poll: no decision, nothing spent, the permit back.
    svc.ready().await.unwrap();
    assert_eq!(held.load(Ordering::SeqCst), 1);
    drop(svc.call(Request::new(Body::empty())));
    assert_eq!(held.load(Ordering::SeqCst), 0);
    assert_eq!((decisions.load(Ordering::SeqCst), available()), (0, 3));

    // Dropped while deciding (polled once): decided once, spent once.
    svc.ready().await.unwrap();
    let mut fut = Box::pin(svc.call(Request::new(Body::empty())));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(fut);
    assert_eq!(held.load(Ordering::SeqCst), 0);
    assert_eq!((decisions.load(Ordering::SeqCst), available()), (1, 2));

    // Dropped while the inner service runs: no second decision, the permit back.
    svc.ready().await.unwrap();
    let mut fut = Box::pin(svc.call(Request::new(Body::empty())));
    // The decision's yield, then the inner service's.
    for _ in 0..2 {
        assert!(fut.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(held.load(Ordering::SeqCst), 1, "the inner future holds it");
    drop(fut);
    assert_eq!(held.load(Ordering::SeqCst), 0);
    assert_eq!((decisions.load(Ordering::SeqCst), available()), (2, 1));

    // Completed: once more; then refused, and the ready service's permit is given back with
    // the refused request's future.
    svc.ready().await.unwrap();
    let response = svc.call(Request::new(Body::empty())).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    svc.ready().await.unwrap();
    let refused = svc.call(Request::new(Body::empty())).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(held.load(Ordering::SeqCst), 0);
    assert_eq!((decisions.load(Ordering::SeqCst), available()), (4, 0));
}

/// Costs at the ends of `u64`, from a closure a client drives (here a header): 0 is admitted
/// and spends nothing, `u64::MAX` is refused without `Retry-After` and spends nothing, for
/// every backend with a burst. `Smooth` (Guava's "pay later", documented on `Cost`) admits it
/// and shuts the limiter until its 285-year clock saturates: capped in the closure, it does not.
#[tokio::test]
async fn client_driven_costs_at_the_ends_of_u64() {
    fn cost_of(req: &Request<Body>) -> u64 {
        req.headers()["x-cost"].to_str().unwrap().parse().unwrap()
    }
    fn with_cost(cost: u64) -> Request<Body> {
        Request::builder()
            .header("x-cost", cost.to_string())
            .body(Body::empty())
            .unwrap()
    }
    let limits = Limits::new([
        Quota::per_second(5).unwrap(),
        Quota::new(20, Duration::from_secs(60), 20).unwrap(),
    ])
    .unwrap();
    let keyed: KeyedLimiter<Global, Quota, ManualClock> =
        KeyedLimiter::with_clock(Quota::per_second(5).unwrap(), 16, ManualClock::new());
    let quota = Quota::per_second(5).unwrap();
    type Local = Arc<dyn Backend<Global, Future = std::future::Ready<Decision>> + Send + Sync>;
    let backends: [Local; 4] = [
        Arc::new(Bucket::with_clock(quota, ManualClock::new())),
        Arc::new(ShardedBucket::with_clock(quota, 4, ManualClock::new())),
        Arc::new(MultiBucket::with_clock(limits, ManualClock::new())),
        Arc::new(keyed),
    ];
    for backend in backends {
        let layer = RateLimitLayer::new(backend);
        let svc = layer
            .headers(RateLimitHeaders::default().on_success(true))
            .cost(cost_of)
            .layer(service_fn(ok));
        for cost in [u64::MAX, u64::MAX / 2, 1 << 62, 6] {
            let refused = svc.clone().oneshot(with_cost(cost)).await.unwrap();
            assert_eq!(
                refused.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "cost {cost}"
            );
            assert!(refused.headers().get("retry-after").is_none());
        }
        let free = svc.clone().oneshot(with_cost(0)).await.unwrap();
        assert_eq!(free.status(), StatusCode::OK);
        // Nothing spent: the whole burst of 5 is still there.
        let five = svc.clone().oneshot(with_cost(5)).await.unwrap();
        assert_eq!(five.status(), StatusCode::OK);
    }

    let smooth =
        || Smooth::bursty_with_clock(5.0, Duration::from_secs(1), ManualClock::new()).unwrap();
    let open = RateLimitLayer::new(smooth())
        .cost(cost_of)
        .layer(service_fn(ok));
    let huge = open.clone().oneshot(with_cost(u64::MAX)).await.unwrap();
    assert_eq!(huge.status(), StatusCode::OK);
    let next = open.clone().oneshot(with_cost(1)).await.unwrap();
    assert_eq!(next.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(next.headers()["retry-after"], "9007199255"); // 2^53 µs
                                                             // No quota to describe: `Retry-After` alone (the README says so).
    let names = ["ratelimit", "ratelimit-policy", "x-ratelimit-limit"];
    assert!(names.iter().all(|n| next.headers().get(*n).is_none()));
    let capped = RateLimitLayer::new(smooth())
        .cost(|req: &Request<Body>| cost_of(req).min(5))
        .layer(service_fn(ok));
    let huge = capped.clone().oneshot(with_cost(u64::MAX)).await.unwrap();
    assert_eq!(huge.status(), StatusCode::OK);
    let next = capped.clone().oneshot(with_cost(1)).await.unwrap();
    assert_eq!(next.headers()["retry-after"], "1");
}

/// A key header sent more than once is no key (400 under the default policy): with two lines,
/// either choice lets one sender override the other. A gateway that appends its own header
/// (Envoy's `request_headers_to_add` appends by default) after the client's line would
/// otherwise key the request by the client's line, the first: the client picks whose limit it
/// spends (a victim's) and escapes its own by rotating values.
#[tokio::test]
async fn a_key_header_sent_twice_is_no_key() {
    let limiter: KeyedLimiter<String, Quota, ManualClock> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
    let name = HeaderName::from_static("x-user-id");
    let svc = RateLimitLayer::new(limiter)
        .key(HeaderKey::new(name.clone()))
        .layer(service_fn(ok));
    let with = |values: &[&'static str]| key_lines(&name, values);
    let status = |req| async { svc.clone().oneshot(req).await.unwrap().status() };
    assert_eq!(status(with(&["victim"])).await, StatusCode::OK);
    for values in [
        &["victim", "attacker"][..],
        &["rotating-1", "attacker"],
        &["attacker", "attacker"],
    ] {
        assert_eq!(
            status(with(values)).await,
            StatusCode::BAD_REQUEST,
            "{values:?}"
        );
    }
    // One line is one key.
    assert_eq!(status(with(&["attacker"])).await, StatusCode::OK);
    assert_eq!(
        status(with(&["victim"])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A request with one `name` line per value.
fn key_lines(name: &HeaderName, values: &[&'static str]) -> Request<Body> {
    let mut req = Request::new(Body::empty());
    for v in values {
        req.headers_mut()
            .append(name.clone(), http::HeaderValue::from_static(v));
    }
    req
}

/// Two key lines that a proxy merged into one (`victim, attacker`: RFC 9110 §5.3 joins them
/// with a comma) are no key either (400), however the merge or the client spells the commas:
/// otherwise the client's line and the gateway's make a fresh key the client picked, once per
/// value it rotates. Quoted strings are not parsed: a client's `"a` and a gateway's `b"` merge
/// into `"a, b"`. With `allow_commas` (a header whose values the client picks anyway), a value
/// with commas is one key; two lines still are none.
#[tokio::test]
async fn a_key_header_merged_into_one_line_is_no_key() {
    let name = HeaderName::from_static("x-user-id");
    let layer = |key: HeaderKey| {
        let limiter: KeyedLimiter<String, Quota, ManualClock> =
            KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
        RateLimitLayer::new(limiter).key(key).layer(service_fn(ok))
    };
    let with = |values: &[&'static str]| key_lines(&name, values);
    let svc = layer(HeaderKey::new(name.clone()));
    let status = |req| async { svc.clone().oneshot(req).await.unwrap().status() };
    assert_eq!(status(with(&["victim"])).await, StatusCode::OK);
    for value in [
        "victim, attacker",
        "rotating-1,attacker",
        "rotating-2 ,attacker",
        "rotating-3 , attacker",
        "rotating-4,",
        ",rotating-5",
        ",",
        " , ",
        "\"rotating-6, attacker\"",
        "\"a,b\"",
        "a,,b",
    ] {
        let response = svc.clone().oneshot(with(&[value])).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{value:?}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            body.ends_with(b"merged into one by a comma) or not ASCII\n"),
            "{body:?}"
        );
    }
    assert_eq!(
        status(with(&["victim"])).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Legitimate keys: API keys, tenant ids, spaces inside.
    for value in ["k-123", "tenant_42", "key.with.dots", "a b", "A+/=="] {
        assert_eq!(status(with(&[value])).await, StatusCode::OK, "{value:?}");
    }
    let ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)";
    let user_agent = layer(HeaderKey::new(name.clone()).allow_commas(true));
    let status = |req| async { user_agent.clone().oneshot(req).await.unwrap().status() };
    assert_eq!(status(with(&[ua])).await, StatusCode::OK);
    assert_eq!(status(with(&[ua])).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(with(&["a, b"])).await, StatusCode::OK);
    // Two lines are no key; the 400 names what this key refuses, not the comma it allows.
    let response = user_agent.clone().oneshot(with(&["a", "b"])).await;
    let response = response.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        "rate limiting: the header that carries the rate-limit key is missing, empty, repeated \
         (on two lines) or not ASCII\n"
    );
}

/// An empty key header (or one of only spaces and tabs) is no key, as an absent one is: 400
/// under the default policy, and under `MissingKey::Allow` it passes as an absent header does,
/// instead of every client that sends it sharing (and spending) one limit.
#[tokio::test]
async fn an_empty_key_header_is_no_key() {
    let name = HeaderName::from_static("x-api-key");
    let with = |value: Option<&'static str>| {
        let mut req = Request::new(Body::empty());
        if let Some(v) = value {
            req.headers_mut()
                .insert(name.clone(), http::HeaderValue::from_static(v));
        }
        req
    };
    let layer = |missing| {
        let limiter: KeyedLimiter<String, Quota, ManualClock> =
            KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
        RateLimitLayer::new(limiter)
            .key(HeaderKey::new(name.clone()))
            .missing_key(missing)
            .layer(service_fn(ok))
    };
    let blanks = [None, Some(""), Some(" "), Some("\t \t")];

    let reject = layer(MissingKey::Reject);
    let status = |req| async { reject.clone().oneshot(req).await.unwrap().status() };
    for value in blanks {
        for _ in 0..2 {
            assert_eq!(
                status(with(value)).await,
                StatusCode::BAD_REQUEST,
                "{value:?}"
            );
        }
    }
    assert_eq!(status(with(Some("k"))).await, StatusCode::OK);
    assert_eq!(status(with(Some("k"))).await, StatusCode::TOO_MANY_REQUESTS);

    let allow = layer(MissingKey::Allow);
    let status = |req| async { allow.clone().oneshot(req).await.unwrap().status() };
    for value in blanks {
        for _ in 0..3 {
            assert_eq!(status(with(value)).await, StatusCode::OK, "{value:?}");
        }
    }
}

/// Clones of one service on a multi-threaded runtime (real threads, not one thread's tasks),
/// against a policy of three quotas (the sequence-locked store) and a per-key policy of two,
/// with costs 1 and 2 mixed: a refused request debits no quota and an admitted one every quota,
/// so each quota is down by exactly the admitted tokens, which never exceed the smallest
/// burst. The clock never moves: nothing refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_on_many_threads_debit_a_policy_all_or_nothing() {
    let hour = |burst| Quota::new(1, Duration::from_secs(3600), burst).unwrap();
    let cost_of = |req: &Request<Body>| u64::from(req.headers().contains_key("x-double")) + 1;
    let request = |i: usize| {
        let mut req = Request::builder().header("x-key", ["a", "b", "c"][i % 3]);
        if i % 5 == 0 {
            req = req.header("x-double", "1");
        }
        req.body(Body::empty()).unwrap()
    };
    /// Sends 600 requests through clones of `svc` on the runtime's threads; the admitted
    /// tokens per key (`x-key`).
    async fn flood<S, B>(svc: S, request: impl Fn(usize) -> Request<Body>) -> [u64; 3]
    where
        S: Service<Request<Body>, Response = Response<B>, Error = Infallible>,
        S: Clone + Send + 'static,
        S::Future: Send,
        B: Send + 'static,
    {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..600 {
            let (svc, req) = (svc.clone(), request(i));
            let key = i % 3;
            let cost = if i % 5 == 0 { 2 } else { 1 };
            tasks.spawn(async move {
                match svc.oneshot(req).await.unwrap().status() {
                    StatusCode::OK => (key, cost),
                    StatusCode::TOO_MANY_REQUESTS => (key, 0),
                    other => panic!("unexpected {other}"),
                }
            });
        }
        let mut admitted = [0; 3];
        while let Some(done) = tasks.join_next().await {
            let (key, tokens) = done.unwrap();
            admitted[key] += tokens;
        }
        admitted
    }

    let bursts = [40, 25, 30];
    let limits = Limits::new(bursts.map(hour)).unwrap();
    let policy = Arc::new(MultiBucket::with_clock(limits, ManualClock::new()));
    let svc = RateLimitLayer::new(Arc::clone(&policy))
        .cost(cost_of)
        .layer(service_fn(ok));
    let admitted: u64 = flood(svc, request).await.iter().sum();
    assert!((24..=25).contains(&admitted), "{admitted} tokens admitted");
    let (_, snaps) = tollgate::Limiter::decide_snapshots(&*policy, &(), 0);
    let left: Vec<u64> = snaps.as_slice().iter().map(|s| s.remaining()).collect();
    assert_eq!(
        left,
        bursts.map(|b| b - admitted),
        "{admitted} tokens admitted"
    );

    let bursts = [9, 12];
    let limits = Limits::new(bursts.map(hour)).unwrap();
    let per_key = Arc::new(tollgate::KeyedMultiLimiter::with_clock(
        limits,
        16,
        ManualClock::new(),
    ));
    let svc = RateLimitLayer::new(Arc::clone(&per_key))
        .key(HeaderKey::new(HeaderName::from_static("x-key")))
        .cost(cost_of)
        .layer(service_fn(ok));
    for (key, admitted) in ["a", "b", "c"].into_iter().zip(flood(svc, request).await) {
        assert!(
            (8..=9).contains(&admitted),
            "{key}: {admitted} tokens admitted"
        );
        let (_, snaps) = tollgate::Limiter::decide_snapshots(&*per_key, &key.to_owned(), 0);
        let left: Vec<u64> = snaps.as_slice().iter().map(|s| s.remaining()).collect();
        assert_eq!(left, bursts.map(|b| b - admitted), "{key}");
    }
}

/// A key header's value with spaces or tabs around it is the same key (RFC 9110 §5.5: a field
/// value excludes leading and trailing whitespace). HTTP/1 parsers strip them on the wire, but
/// HTTP/2 (hyper's `h2`, so every tonic server) delivers them as sent: if they counted, one
/// client could spend an unbounded number of fresh limits under one key (` k`, `k\t`, `  k`, …),
/// each of which an authentication layer that compares field values as RFC 9110 defines them
/// accepts as `k`. Blanks inside the value are part of it.
#[tokio::test]
async fn blanks_around_a_key_header_value_are_the_same_key() {
    let name = HeaderName::from_static("x-api-key");
    let limiter: KeyedLimiter<String, Quota, ManualClock> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 100, ManualClock::new());
    let svc = RateLimitLayer::new(limiter)
        .key(HeaderKey::new(name.clone()))
        .layer(service_fn(ok));
    let with = |value: &'static str| {
        let mut req = Request::new(Body::empty());
        req.headers_mut()
            .insert(name.clone(), http::HeaderValue::from_static(value));
        req
    };
    let status = |req| async { svc.clone().oneshot(req).await.unwrap().status() };
    assert_eq!(status(with("k")).await, StatusCode::OK);
    for spelling in [" k", "k ", "\tk", "k\t", " \t k \t "] {
        assert_eq!(
            status(with(spelling)).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{spelling:?}"
        );
    }
    assert_eq!(
        HeaderKey::new(name.clone()).extract(&with("\t k 1 ")),
        Some("k 1".to_owned())
    );
    assert_eq!(status(with("\t k 1 ")).await, StatusCode::OK);
    assert_eq!(status(with("k 1")).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(with("k  1")).await, StatusCode::OK);
}
