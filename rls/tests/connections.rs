//! Hostile and idle connections on both ports: a slowloris request head, a body that never
//! arrives, a kept-alive connection left idle, an HTTP/2 connection that never sends its
//! preface or goes idle after a call, and the cap on open connections. Every server runs
//! in-process on free loopback ports with short limits; every wait is bounded by a generous
//! 5 s, and a test asserts what happened (the server closed, answered, or did not answer yet),
//! never how long it took.

mod support;

use axum::body::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_rls::server::Options;

const CONFIG: &str = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";

/// The generous bound on anything the server is expected to do.
const BOUND: Duration = Duration::from_secs(5);

/// A short limit for the one behaviour under test.
const SHORT: Duration = Duration::from_millis(200);

/// Long enough never to fire during a test.
const LONG: Duration = Duration::from_secs(600);

/// Options with every connection limit long, then `tune`d.
async fn start(tune: impl FnOnce(&mut Options)) -> Rls {
    Rls::start_with(CONFIG, |o| {
        o.header_timeout = LONG;
        o.body_timeout = LONG;
        o.idle_timeout = LONG;
        tune(o);
    })
    .await
}

/// Reads (and discards) until the server closes the connection, by an orderly close or a
/// reset: whether that happened within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Reads one HTTP/1.1 response of a known short body (`Content-Length`) off a kept-alive
/// connection: its status and body.
async fn response(s: &mut TcpStream) -> (u16, String) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().unwrap())
                })
                .expect("a Content-Length");
            if body.len() >= len {
                return (text[9..12].parse().unwrap(), body.to_owned());
            }
        }
        let n = tokio::time::timeout(BOUND, s.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("a response");
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// The value of the series `name` with (at least) `labels` on the service's /metrics page, 0
/// when absent. Every test of this file shares the process's recorder, so a test asserts a
/// lower bound on what its own connections added.
async fn metric(s: &Rls, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, page) = http(s.ready.http, "GET", "/metrics", "").await;
    page.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Whether `tollgate_rls_connection_limits_total` counted `limit` on `port`.
async fn counted(s: &Rls, port: &str, limit: &str) -> bool {
    metric(
        s,
        "tollgate_rls_connection_limits_total",
        &[("port", port), ("limit", limit)],
    )
    .await
        >= 1.0
}

const HEALTH: &[u8] = b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n";

/// A kept-alive connection that has been served one request.
async fn served(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(HEALTH).await.unwrap();
    assert_eq!(response(&mut s).await, (200, "OK\n".to_owned()));
    s
}

#[tokio::test]
async fn http_a_request_head_sent_slowly_is_cut_off_at_the_header_timeout() {
    let s = start(|o| o.header_timeout = SHORT).await;
    let addr = s.ready.http;
    // Half a request line, then nothing.
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /healthcheck HT").await.unwrap();
    assert!(
        closed_within(&mut c, BOUND).await,
        "half a request line held open"
    );
    // A connection that sends nothing at all.
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut c, BOUND).await,
        "a silent connection held open"
    );
    // A head trickled one byte every 20 ms: each byte arrives well within the timeout, the
    // head as a whole does not, and the server closes before it is complete.
    let mut c = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /healthcheck HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(1_000)
    );
    let (mut rd, mut wr) = c.split();
    let trickle = async {
        for b in head.bytes() {
            if wr.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the whole head was accepted");
    };
    let mut buf = [0u8; 1024];
    let closed = async {
        if let Ok(n @ 1..) = rd.read(&mut buf).await {
            panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n]));
        }
    };
    tokio::time::timeout(BOUND, async {
        tokio::select! {
            () = trickle => {}
            () = closed => {}
        }
    })
    .await
    .expect("the trickled head was cut off");
    // A request sent at once is served.
    assert_eq!(http(addr, "GET", "/healthcheck", "").await.0, 200);
    assert!(counted(&s, "http", "header_timeout").await);
}

#[tokio::test]
async fn http_a_body_that_does_not_arrive_is_answered_408() {
    let s = start(|o| o.body_timeout = SHORT).await;
    let mut c = TcpStream::connect(s.ready.http).await.unwrap();
    c.write_all(
        b"POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"domain\":",
    )
    .await
    .unwrap();
    let (status, body) = response(&mut c).await;
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("did not arrive"), "{body}");
    assert!(closed_within(&mut c, BOUND).await, "kept open after a 408");
    assert!(counted(&s, "http", "body_timeout").await);
    // A whole body is decided as ever.
    let (status, _) = http(
        s.ready.http,
        "POST",
        "/json",
        r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}"#,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn http_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let s = start(|o| o.idle_timeout = SHORT).await;
    let mut c = served(s.ready.http).await;
    assert!(
        closed_within(&mut c, BOUND).await,
        "an idle connection held open"
    );
    assert!(counted(&s, "http", "idle_timeout").await);
}

#[tokio::test]
async fn http_connections_beyond_the_cap_wait_until_one_closes() {
    let s = start(|o| o.max_connections = 2).await;
    let addr = s.ready.http;
    let first = served(addr).await;
    let second = served(addr).await;
    // The third connects (the kernel's backlog completes the handshake) but is not served
    // while the two are open.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(HEALTH).await.unwrap();
    let mut byte = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(500), third.peek(&mut byte))
            .await
            .is_err(),
        "a third connection was served beyond the cap of 2"
    );
    drop(first);
    assert_eq!(response(&mut third).await, (200, "OK\n".to_owned()));
    // Both closed, so that /metrics gets a slot.
    drop((second, third));
    assert!(counted(&s, "http", "max_connections").await);
}

/// The client preface of HTTP/2 and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

#[tokio::test]
async fn grpc_a_connection_without_a_request_is_closed_at_the_header_timeout() {
    let s = start(|o| o.header_timeout = SHORT).await;
    // Nothing at all.
    let mut c = TcpStream::connect(s.ready.grpc).await.unwrap();
    assert!(
        closed_within(&mut c, BOUND).await,
        "a silent connection held open"
    );
    // Half the preface.
    let mut c = TcpStream::connect(s.ready.grpc).await.unwrap();
    c.write_all(&PREFACE[..10]).await.unwrap();
    assert!(
        closed_within(&mut c, BOUND).await,
        "half a preface held open"
    );
    // The whole preface, then no request.
    let mut c = TcpStream::connect(s.ready.grpc).await.unwrap();
    c.write_all(PREFACE).await.unwrap();
    assert!(
        closed_within(&mut c, BOUND).await,
        "a preface alone held open"
    );
    assert!(counted(&s, "grpc", "header_timeout").await);
    // A client that calls once connected is served (as Envoy does: it opens a connection
    // when it has a call to make).
    let mut client = RateLimitServiceClient::connect(format!("http://{}", s.ready.grpc))
        .await
        .unwrap();
    let r = decide(&mut client, req("d", vec![desc(&[("user", "a")])])).await;
    assert_eq!(r.overall_code, OK);
}

/// A gRPC health check over a fresh HTTP/2 connection: the connection's handle (which
/// keeps it open on the client's side) and its task, which ends when the connection does.
async fn health_check(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let req = axum::http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    // An empty HealthCheckRequest: uncompressed, length 0.
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let resp = tokio::time::timeout(BOUND, resp)
        .await
        .expect("an answer in time")
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        chunk.unwrap();
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    (client, conn)
}

#[tokio::test]
async fn grpc_an_idle_connection_is_closed_after_the_idle_timeout() {
    let s = start(|o| o.idle_timeout = SHORT).await;
    let (_client, conn) = health_check(s.ready.grpc).await;
    // The server's GOAWAY ends the connection while the client still holds it open.
    tokio::time::timeout(BOUND, conn)
        .await
        .expect("an idle connection held open")
        .unwrap()
        .unwrap();
    assert!(counted(&s, "grpc", "idle_timeout").await);
}

#[tokio::test]
async fn grpc_a_stream_in_flight_keeps_its_connection_from_the_idle_timeout() {
    let s = start(|o| o.idle_timeout = SHORT).await;
    let addr = s.ready.grpc;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    // A health Watch: a call whose response streams for as long as the client keeps it.
    let req = axum::http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Watch"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (answer, mut watch_send) = client.send_request(req, false).unwrap();
    watch_send
        .send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let answer = tokio::time::timeout(BOUND, answer)
        .await
        .expect("an answer in time")
        .unwrap();
    assert_eq!(answer.status(), 200);
    let mut watch = answer.into_body();
    // The first status: SERVING (field 1, value 1).
    let first = tokio::time::timeout(BOUND, watch.data())
        .await
        .expect("a status in time")
        .expect("a status")
        .unwrap();
    assert_eq!(&first[..], &[0, 0, 0, 0, 2, 8, 1]);
    // Five idle timeouts later the call is still in flight and the connection still serves:
    // no GOAWAY was sent, a further call on it is answered.
    tokio::time::sleep(SHORT * 5).await;
    let check = axum::http::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (answer, mut send) = client
        .send_request(check, false)
        .expect("the connection still takes calls");
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let answer = tokio::time::timeout(BOUND, answer)
        .await
        .expect("an answer in time")
        .expect("the call was served");
    assert_eq!(answer.status(), 200);
    drop((answer, send));
    assert!(!conn.is_finished(), "the connection ended under a call");
    // The client cancels the Watch: the connection is idle again and closed for it.
    drop((watch, watch_send, client));
    tokio::time::timeout(BOUND, conn)
        .await
        .expect("an idle connection held open once its call ended")
        .unwrap()
        .unwrap();
}

/// A `ShouldRateLimit` call whose message announces 100 bytes and sends 3, with the stream
/// left open: the `grpc-status` it is answered with.
async fn partial_call(addr: SocketAddr, grpc_timeout: Option<&str>) -> String {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut req = axum::http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    if let Some(t) = grpc_timeout {
        req = req.header("grpc-timeout", t);
    }
    let (resp, mut send) = client.send_request(req.body(()).unwrap(), false).unwrap();
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 100, 10, 1, b'd']), false)
        .unwrap();
    let resp = tokio::time::timeout(BOUND, resp)
        .await
        .expect("an answer in time")
        .unwrap();
    // A status without a message comes in the headers (trailers-only), else in the trailers.
    if let Some(s) = resp.headers().get("grpc-status") {
        return s.to_str().unwrap().to_owned();
    }
    let mut body = resp.into_body();
    while let Some(chunk) = body.data().await {
        chunk.unwrap();
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    trailers["grpc-status"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn grpc_a_body_that_does_not_arrive_is_deadline_exceeded() {
    let s = start(|o| o.body_timeout = SHORT).await;
    assert_eq!(
        partial_call(s.ready.grpc, None).await,
        "4",
        "DEADLINE_EXCEEDED"
    );
    assert!(counted(&s, "grpc", "body_timeout").await);
}

#[tokio::test]
async fn grpc_the_clients_deadline_bounds_a_call() {
    // As tonic's own server answers a call past its `grpc-timeout`: CANCELLED.
    let s = start(|_| {}).await;
    assert_eq!(
        partial_call(s.ready.grpc, Some("200m")).await,
        "1",
        "CANCELLED"
    );
}

#[tokio::test]
async fn grpc_connections_beyond_the_cap_wait_until_one_closes() {
    // The helper's client holds one of the two connections.
    let s = start(|o| o.max_connections = 2).await;
    let (second, second_conn) = health_check(s.ready.grpc).await;
    let addr = s.ready.grpc;
    let third = tokio::spawn(async move { health_check(addr).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served beyond the cap of 2"
    );
    drop(second);
    second_conn.abort();
    let (_c, _conn) = tokio::time::timeout(BOUND, third)
        .await
        .expect("the third served once the second closed")
        .unwrap();
    assert!(counted(&s, "grpc", "max_connections").await);
}

#[tokio::test]
async fn a_drain_closes_idle_connections_without_waiting_for_its_bound() {
    let s = start(|_| {}).await;
    let mut http = served(s.ready.http).await;
    let (_client, grpc) = health_check(s.ready.grpc).await;
    // The helper's client and this one.
    let open = metric(&s, "tollgate_rls_connections", &[("port", "grpc")]).await;
    assert!(open >= 2.0, "{open}");
    // Within 5 s, well inside the drain's bound of 10 s: the idle connections were closed,
    // not waited for.
    tokio::time::timeout(BOUND, s.stop())
        .await
        .expect("stopped without waiting for idle connections");
    assert!(
        closed_within(&mut http, BOUND).await,
        "HTTP connection left open"
    );
    tokio::time::timeout(BOUND, grpc)
        .await
        .expect("gRPC connection left open")
        .unwrap()
        .unwrap();
}

/// A `POST /json` whose body announces 100 bytes and sends 10, left open.
async fn stalled_post(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        b"POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"domain\":",
    )
    .await
    .unwrap();
    c
}

#[tokio::test]
async fn a_drain_ends_within_its_bound_with_calls_stalled_on_both_ports() {
    // The drain's deadline is `DRAIN_BOUND` after the stop for the whole process, both ports
    // together; past it `run` waits at most `DRAIN_GRACE` for the calls' tasks to end.
    use tollgate_rls::server::{DRAIN_BOUND, DRAIN_GRACE};
    let dir = support::TempDir::new("drain-bound");
    let state = dir.path().join("state");
    let s = start(|o| o.state = Some(state.clone())).await;
    // A gRPC call whose message never completes (the body deadline is long): its connection
    // stays open through the GOAWAY until the drain's bound.
    let tcp = TcpStream::connect(s.ready.grpc).await.unwrap();
    let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let req = axum::http::Request::post(format!(
        "http://{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        s.ready.grpc
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (_answer, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 100, 10, 1, b'd']), false)
        .unwrap();
    // An HTTP request whose body never completes, likewise.
    let mut http = stalled_post(s.ready.http).await;
    // Both in flight: their headers were read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    // A generous margin over the bound and its grace, far short of twice the bound.
    tokio::time::timeout(DRAIN_BOUND + DRAIN_GRACE + Duration::from_secs(3), s.stop())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "still draining {:?} after the stop, past the bound of {DRAIN_BOUND:?}",
                started.elapsed()
            )
        });
    assert!(
        closed_within(&mut http, BOUND).await,
        "HTTP connection left open"
    );
    assert!(state.exists(), "the state was not saved after the drain");
}
