//! Plain hyper (no axum): insert the connection's `SocketAddr` as a request extension and the
//! per-IP key finds it.
//!
//! `cargo run -p tollgate-tower --example hyper` (listens on 127.0.0.1:3002), then
//! `curl -i localhost:3002/` three times: the third answer is a 429.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tollgate::{KeyedLimiter, Quota};
use tollgate_tower::{PeerIp, RateLimitLayer};
use tower::{Layer, ServiceExt};

#[tokio::main]
async fn main() {
    let quota = Quota::new(2, Duration::from_secs(10), 2).expect("a valid quota");
    let layer = RateLimitLayer::new(KeyedLimiter::<IpAddr>::new(quota, 100_000)).key(PeerIp::new());
    let app = tower::service_fn(|_req: Request<Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let limited = layer.layer(app); // clones share the limit: one per connection is fine

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3002")
        .await
        .expect("127.0.0.1:3002 is free");
    println!("listening on {}", listener.local_addr().expect("bound"));
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        // What axum's `into_make_service_with_connect_info` does: record the peer per request.
        let service = limited
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert::<SocketAddr>(peer);
                req
            });
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            if let Err(e) = connection.await {
                eprintln!("connection from {peer}: {e}");
            }
        });
    }
}
