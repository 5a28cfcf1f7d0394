//! A client that resets its connections mid-request does not change another client's
//! responses: an axum server (hyper's HTTP/1) behind the layer on the Redis backend, attackers
//! that send a request and reset the TCP connection every few milliseconds (hyper drops the
//! request's future while its Redis decision is in flight), and a victim whose requests stay
//! within its limit. The server runs in the test (not the example server) so that the limiter's
//! decision timeout can be generous: on a loaded machine a 25 ms timeout is missed now and then,
//! which is the limiter's own evidence and rightly opens the breaker.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get as route_get;
use axum::Router;
use http::{HeaderName, StatusCode};
use support::{client, get};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;
use tollgate::Quota;
use tollgate_redis::RedisLimiter;
use tollgate_testkit::redis_server::RedisServer;
use tollgate_tower::{HeaderKey, RateLimitLayer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_do_not_change_another_clients_responses() {
    let Some(redis) = RedisServer::start("connection_resets_do_not_change_another_clients") else {
        return;
    };
    let limiter = RedisLimiter::builder(&redis.url(), Quota::per_second(1000).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let layer = RateLimitLayer::new(limiter.clone())
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")));
    let app = Router::new()
        .route("/", route_get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("http://{addr}/");
    let stop = Arc::new(AtomicBool::new(false));
    let resets = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    for a in 0..4 {
        let (stop, resets) = (stop.clone(), resets.clone());
        attackers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let socket = TcpSocket::new_v4().unwrap();
                if let Ok(mut s) = socket.connect(addr).await {
                    let req =
                        format!("GET / HTTP/1.1\r\nhost: x\r\nx-api-key: attacker-{a}-{i}\r\n\r\n");
                    let _ = s.write_all(req.as_bytes()).await;
                    // Give the server time to read the request and start its decision.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    // Linger 0: closing sends a RST, not a FIN.
                    let _ = s.set_zero_linger();
                    drop(s);
                    resets.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    // The victim: one request per 5 ms (200/s, under its 1000/s limit) for about 1.5 s.
    let c = client();
    let (mut ok, mut limited, mut headerless) = (0, 0, 0);
    for _ in 0..300 {
        let (r, _) = get(&c, &url, &[("x-api-key", "victim")]).await;
        match r.status() {
            StatusCode::OK => ok += 1,
            _ => limited += 1,
        }
        // A refusal without RateLimit fields: no bucket decided (the unavailability policy).
        if r.status() != StatusCode::OK && r.headers().get("ratelimit").is_none() {
            headerless += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    let resets = resets.load(Ordering::Relaxed);
    assert!(resets > 100, "only {resets} resets");
    assert_eq!(
        (ok, limited, headerless),
        (300, 0, 0),
        "the victim's responses changed under {resets} connection resets \
         (200s, refusals, refusals without RateLimit)"
    );
    let counters = limiter.counters();
    assert_eq!(
        counters.fail_closed + counters.fail_open + counters.local_fallback,
        0,
        "the unavailability policy answered: {counters:?}"
    );
}
