//! A client that resets its connections mid-request does not change another client's
//! responses: the example server on the Redis backend, an attacker that sends a request and
//! resets the TCP connection every few milliseconds (hyper drops the request's future while its
//! Redis decision is in flight), and a victim whose requests stay within its limit.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use support::{client, get, Server};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;
use tollgate_redis::test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_do_not_change_another_clients_responses() {
    let Some(redis) = RedisServer::start("connection_resets_do_not_change_another_clients") else {
        return;
    };
    let url = redis.url();
    let server = Server::start(&[
        "--redis",
        &url,
        "--rate",
        "1000/s",
        "--key",
        "header:x-api-key",
    ]);
    let addr = server.addr;
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
        let (r, _) = get(&c, &server.url(), &[("x-api-key", "victim")]).await;
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
}
