//! The example server as a child process on a free loopback port, and a real HTTP client.
//! Shared by the integration tests (one home for these helpers).

#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower::{service_fn, ServiceExt};

/// The example server's binary, brought up to date once per test binary (a filtered run such as
/// `cargo test --test server` does not build examples, and a stale binary would test old code;
/// after a full `cargo test` this is a no-op).
pub(crate) fn server_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(find_or_build).clone()
}

fn find_or_build() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/examples/server
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = profile_dir
        .join("examples")
        .join(format!("server{}", std::env::consts::EXE_SUFFIX));
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-q", "-p", "tollgate-tower", "--example", "server"]);
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().expect("cargo build --example server");
    assert!(status.success(), "building the example server failed");
    assert!(binary.exists(), "no example server at {}", binary.display());
    binary
}

/// A running example server; stopped with SIGTERM (then SIGKILL) on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Server {
    /// Starts the example server on a free loopback port with these flags and waits for its
    /// `listening on ADDR` line.
    pub(crate) fn start(flags: &[&str]) -> Server {
        let mut child = Command::new(server_binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the example server starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {} // keep the pipe drained
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(line)) => line,
            other => {
                let _ = child.kill();
                panic!("the server printed no `listening on` line: {other:?}");
            }
        };
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Server { child, addr }
    }

    /// `http://ADDR/`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Sends SIGTERM and waits (at most 10 s) for the exit status.
    pub(crate) fn terminate(&mut self) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if self.terminate().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// The client the helpers drive.
pub(crate) type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A real HTTP/1.1 client (hyper's).
pub(crate) fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `GET url` with these headers: status, headers and body text.
pub(crate) async fn get(
    client: &Client<HttpConnector, Empty<Bytes>>,
    url: &str,
    headers: &[(&str, &str)],
) -> (Response<()>, String) {
    let mut req = Request::get(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .expect("the request reaches the server");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("a body").to_bytes();
    (
        Response::from_parts(parts, ()),
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Every member of a `RateLimit` / `RateLimit-Policy` list (all lines of the field), parsed as
/// a client would: (policy name, [(parameter, integer)]).
pub(crate) fn sf_items(headers: &http::HeaderMap, name: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let mut out = Vec::new();
    for line in headers.get_all(name) {
        let list: sfv::List = sfv::Parser::new(line.as_bytes())
            .parse_list()
            .unwrap_or_else(|e| panic!("{name}: not a Structured Fields list: {e}"));
        for entry in list {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("inner list in {name}")
            };
            let policy = item
                .bare_item
                .as_string()
                .expect("policy names are sf-strings");
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let v = v.as_integer().expect("integer parameters");
                    (k.as_str().to_owned(), i64::from(v))
                })
                .collect();
            out.push((policy.as_str().to_owned(), params));
        }
    }
    out
}

/// One integer parameter of a parsed list member.
pub(crate) fn sf_param(item: &(String, Vec<(String, i64)>), key: &str) -> i64 {
    item.1
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in {item:?}"))
        .1
}

/// `Retry-After` in whole seconds.
pub(crate) fn retry_after(h: &HeaderMap) -> u64 {
    h["retry-after"].to_str().unwrap().parse().unwrap()
}

/// The name of the quota `RateLimit` describes (the tightest of a policy).
pub(crate) fn tightest(h: &HeaderMap) -> String {
    let items = sf_items(h, "ratelimit");
    assert_eq!(items.len(), 1, "RateLimit describes one quota: {items:?}");
    items[0].0.clone()
}

/// Sends `GET url` with `headers` as fast as it can until the first 429 (at most 100
/// requests, each admitted one answered `ok`): (admitted, the refusal's headers).
pub(crate) async fn until_refused(
    c: &HttpClient,
    url: &str,
    headers: &[(&str, &str)],
) -> (u64, HeaderMap) {
    let mut admitted = 0;
    for _ in 0..100 {
        let (r, body) = get(c, url, headers).await;
        match r.status() {
            StatusCode::OK => {
                assert_eq!(body, "ok");
                admitted += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => return (admitted, r.headers().clone()),
            other => panic!("unexpected {other}"),
        }
    }
    panic!("100 requests admitted with {headers:?}: no limit applied");
}

/// Under `--limit 5/s:5 --limit 20/min:20`, after a refusal `last` of the second's quota:
/// sleeps `Retry-After` after each refusal and sends until refused again, until the minute's
/// quota refuses (within 20 s of `start`). Each client that slept its `Retry-After` is admitted
/// at least once (the minute held a whole token, and one second later the second holds five),
/// and every refusal before the minute's names the second's quota. Returns the requests
/// admitted meanwhile and the minute's refusal.
pub(crate) async fn until_the_minute_refuses(
    c: &HttpClient,
    url: &str,
    headers: &[(&str, &str)],
    start: Instant,
    mut last: HeaderMap,
) -> (u64, HeaderMap) {
    let mut admitted = 0;
    loop {
        assert!(start.elapsed() < Duration::from_secs(20), "bounded in time");
        tokio::time::sleep(Duration::from_secs(retry_after(&last))).await;
        let (more, refusal) = until_refused(c, url, headers).await;
        assert!(more >= 1, "a client that slept Retry-After is admitted");
        admitted += more;
        if tightest(&refusal) == "20-per-60s" {
            return (admitted, refusal);
        }
        assert_eq!(tightest(&refusal), "5-per-1s");
        last = refusal;
    }
}

/// The service behind the layer in the in-process tests: answers `ok` to every request.
pub(crate) type Inner = tower::util::ServiceFn<
    fn(Request<Body>) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>,
>;

/// [`Inner`].
pub(crate) fn ok_service() -> Inner {
    fn ok(_req: Request<Body>) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> {
        std::future::ready(Ok(Response::new(Full::from("ok"))))
    }
    service_fn(ok as fn(_) -> _)
}

/// The layer over [`ok_service`], boxed (whatever its backend and options).
pub(crate) type Svc = tower::util::BoxCloneService<
    Request<Body>,
    Response<tollgate_tower::RateLimitBody<Full<Bytes>>>,
    Infallible,
>;

/// One empty request through `svc`: its status and headers.
pub(crate) async fn send(svc: &Svc) -> (StatusCode, HeaderMap) {
    let response = svc
        .clone()
        .oneshot(Request::new(Body::empty()))
        .await
        .unwrap();
    (response.status(), response.headers().clone())
}
