//! The example server on a free loopback port, driven by a real HTTP client.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use http::StatusCode;
use support::{client, get, server_binary, Server};

#[tokio::test]
async fn per_key_limits_by_header_and_by_client_ip_behind_a_trusted_proxy() {
    let server = Server::start(&["--rate", "1/h", "--burst", "2", "--key", "header:x-api-key"]);
    let c = client();
    let url = server.url();
    let status = |r: &http::Response<()>| r.status();
    for expected in [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        let (r, _) = get(&c, &url, &[("x-api-key", "alice")]).await;
        assert_eq!(status(&r), expected);
    }
    let (r, body) = get(&c, &url, &[("x-api-key", "bob")]).await;
    assert_eq!((status(&r), body.as_str()), (StatusCode::OK, "ok"));
    let (r, _) = get(&c, &url, &[]).await;
    assert_eq!(
        status(&r),
        StatusCode::BAD_REQUEST,
        "no key: rejected, not limited"
    );
    // Two key lines a proxy merged into one: no key, whichever key holds a budget.
    let (r, _) = get(&c, &url, &[("x-api-key", "bob, alice")]).await;
    assert_eq!(status(&r), StatusCode::BAD_REQUEST, "a merged key line");
    drop(server);

    // The test client is the trusted proxy (loopback); X-Forwarded-For names the clients.
    let server = Server::start(&[
        "--rate",
        "1/h",
        "--burst",
        "1",
        "--trusted-proxies",
        "127.0.0.1/32,::1",
    ]);
    let url = server.url();
    let (r, _) = get(&c, &url, &[("x-forwarded-for", "6.6.6.6, 203.0.113.1")]).await;
    assert_eq!(status(&r), StatusCode::OK);
    let (r, _) = get(&c, &url, &[("x-forwarded-for", "7.7.7.7, 203.0.113.1")]).await;
    assert_eq!(
        status(&r),
        StatusCode::TOO_MANY_REQUESTS,
        "a spoofed leftmost entry changes nothing"
    );
    let (r, _) = get(&c, &url, &[("x-forwarded-for", "203.0.113.2")]).await;
    assert_eq!(status(&r), StatusCode::OK);
    // Without the header the client is the proxy itself.
    let (r, _) = get(&c, &url, &[]).await;
    assert_eq!(status(&r), StatusCode::OK);
    let (r, _) = get(&c, &url, &[]).await;
    assert_eq!(status(&r), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_client_that_sleeps_its_retry_after_is_admitted() {
    let server = Server::start(&["--rate", "2/s", "--burst", "2", "--key", "global"]);
    let c = client();
    let url = server.url();
    let mut admitted = 0;
    let mut slept = Duration::ZERO;
    let start = Instant::now();
    while admitted < 5 {
        let (r, _) = get(&c, &url, &[]).await;
        match r.status() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let secs: u64 = r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(secs >= 1, "Retry-After is never 0");
                let limit = r.headers()["ratelimit"].to_str().unwrap().to_owned();
                let list: sfv::List = sfv::Parser::new(&limit).parse_list().unwrap();
                assert_eq!(list.len(), 1);
                tokio::time::sleep(Duration::from_secs(secs)).await;
                slept += Duration::from_secs(secs);
                // After sleeping Retry-After the very next request must pass.
                let (again, _) = get(&c, &url, &[]).await;
                assert_eq!(again.status(), StatusCode::OK, "admitted after Retry-After");
                admitted += 1;
            }
            other => panic!("unexpected {other}"),
        }
        assert!(start.elapsed() < Duration::from_secs(20), "bounded in time");
    }
    assert!(
        slept >= Duration::from_secs(1),
        "the burst of 2 ran out at least once"
    );
}

#[test]
fn bad_flags_exit_2_and_sigterm_exits_cleanly() {
    for flags in [
        &["--rate", "ten/s"][..],
        &["--rate", "10/day"],
        &["--burst", "0"],
        &["--key", "cookie"],
        &["--key", "header:bad name"],
        &["--trusted-proxies", "10.0.0.0/33"],
        &["--listen", "localhost"],
        &["--state", "/"],
        &["--no-such-flag"],
    ] {
        let out = Command::new(server_binary()).args(flags).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(!out.stderr.is_empty(), "{flags:?} explains itself");
        assert!(out.stdout.is_empty(), "{flags:?} never listens");
    }
    let mut server = Server::start(&["--unlimited"]);
    let status = server.terminate().expect("exits after SIGTERM");
    assert!(status.success(), "{status:?}");
}
