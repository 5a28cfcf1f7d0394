//! The layer's own cost per request, without the network: `call` + poll on an inner service that
//! answers at once, for tollgate-tower and tower_governor side by side. Benchmark only.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example layer_cost -- CASE [ITERATIONS]
//! CASE: inner | tollgate-global | tollgate-policy | tollgate-ip | governor-global | governor-ip
//! ```
//! Prints nanoseconds per request. `bash tower/bench/layer_cost.sh` runs every case under
//! callgrind and prints instructions per request (what a shared, noisy machine cannot blur).
//! Every request is built the same way in every case (a peer address and an `X-Forwarded-For`
//! from one of 10,000 clients behind a trusted loopback proxy), so case − `inner` is the layer.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderValue, Request, Response};
use tollgate::{Bucket, KeyedLimiter, Limits, MultiBucket, Quota};
use tollgate_tower::{ClientIp, RateLimitLayer};
use tower::{Layer, Service};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{GlobalKeyExtractor, SmartIpKeyExtractor};
use tower_governor::GovernorLayer;

fn inner() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = Ready<Result<Response<Body>, Infallible>>,
> + Clone {
    tower::service_fn(|_req: Request<Body>| ready(Ok(Response::new(Body::empty()))))
}

/// A waker nobody needs: every future here is ready on its first poll.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Calls `svc` `n` times (each response future polled once: everything answers at once).
/// Never inlined: `layer_cost.sh` counts instructions inside this function only.
#[inline(never)]
fn run<S, B>(mut svc: S, n: u64, xff: &[HeaderValue]) -> u64
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)));
    let mut admitted = 0;
    for i in 0..n {
        let mut req = Request::new(Body::empty());
        req.headers_mut()
            .insert("x-forwarded-for", xff[i as usize % xff.len()].clone());
        req.extensions_mut().insert(peer);
        assert!(svc.poll_ready(&mut cx).is_ready());
        let future = pin!(svc.call(req));
        match future.poll(&mut cx) {
            Poll::Ready(Ok(response)) => admitted += u64::from(response.status().is_success()),
            Poll::Ready(Err(e)) => panic!("service error: {e:?}"),
            Poll::Pending => panic!("not answered at once"),
        }
    }
    admitted
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "tollgate-global".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let xff: Vec<HeaderValue> = (0..10_000u32)
        .map(|i| HeaderValue::try_from(format!("198.18.{}.{}", i / 256, i % 256)).unwrap())
        .collect();
    // Admits everything: the cost of an admission, as under the load test.
    let quota = Quota::per_second(1_000_000_000).expect("a valid quota");
    let trusted = ["127.0.0.1/32".parse().expect("a CIDR")];
    let start = Instant::now();
    let admitted = match case.as_str() {
        "inner" => run(inner(), n, &xff),
        "tollgate-global" => run(
            RateLimitLayer::new(Bucket::new(quota)).layer(inner()),
            n,
            &xff,
        ),
        "tollgate-policy" => {
            // Two quotas, all or nothing (`MultiBucket`): one 128-bit compare-and-swap.
            let second = quota.with_burst(2_000_000_000).expect("a valid quota");
            let limits = Limits::new([quota, second]).expect("two quotas");
            let layer = RateLimitLayer::new(MultiBucket::new(limits));
            run(layer.layer(inner()), n, &xff)
        }
        "tollgate-ip" => {
            let limiter = KeyedLimiter::<IpAddr>::new(quota, 1 << 20);
            let layer = RateLimitLayer::new(limiter).key(ClientIp::new(trusted));
            run(layer.layer(inner()), n, &xff)
        }
        "governor-global" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000_000)
                .key_extractor(GlobalKeyExtractor)
                .finish()
                .expect("a valid config");
            run(GovernorLayer::new(config).layer(inner()), n, &xff)
        }
        "governor-ip" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000_000)
                .key_extractor(SmartIpKeyExtractor)
                .finish()
                .expect("a valid config");
            run(GovernorLayer::new(config).layer(inner()), n, &xff)
        }
        other => {
            eprintln!("unknown case {other:?}: inner, tollgate-global, tollgate-policy, tollgate-ip, governor-global, governor-ip");
            std::process::exit(2);
        }
    };
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(admitted, n, "everything is admitted");
    println!("{case}: {ns:.0} ns/request over {n} requests");
}
