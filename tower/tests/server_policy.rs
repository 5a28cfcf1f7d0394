//! The example server's `--limit` (a policy of several quotas) on a free loopback port, driven
//! by a real HTTP client: counts of 200/429, the header list, the slowest `Retry-After`, all or
//! nothing, and the flag's usage errors.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use http::StatusCode;
use support::{
    client, get, retry_after, server_binary, sf_items, sf_param, tightest, until_refused,
    until_the_minute_refuses, Server,
};
use tollgate_testkit::redis_server::RedisServer;

/// `--limit 5/s:5 --limit 20/min:20` for one client: the burst of five, then clients that sleep
/// `Retry-After` until the minute runs out; counts within both quotas' bounds.
async fn five_per_second_and_twenty_per_minute(url: &str, headers: &[(&str, &str)]) {
    let c = client();
    let start = Instant::now();
    let (first, h) = until_refused(&c, url, headers).await;
    let elapsed = start.elapsed().as_secs_f64();
    // The burst of five, plus what the second earned meanwhile (5 per second).
    assert!(
        (5..=5 + (5.0 * elapsed).ceil() as u64).contains(&first),
        "{first} admitted in {elapsed} s"
    );
    assert_eq!(
        h["ratelimit-policy"],
        "\"5-per-1s\";q=5;w=1, \"20-per-60s\";q=20;w=60"
    );
    assert_eq!(retry_after(&h), 1, "the second's wait: at most 200 ms");
    assert_eq!(tightest(&h), "5-per-1s");
    assert_eq!(sf_param(&sf_items(&h, "ratelimit")[0], "r"), 0);

    // Sleep Retry-After after each refusal until the minute refuses.
    let (more, minute) = until_the_minute_refuses(&c, url, headers, start, h).await;
    let admitted = first + more;
    let t = start.elapsed().as_secs_f64();
    // Within both bounds: the minute's 20 plus one every 3 s, the second's 5 plus 5 per second.
    assert!(admitted >= 20, "the minute's burst was reached: {admitted}");
    assert!(
        admitted as f64 <= 20.0 + t / 3.0,
        "{admitted} admitted in {t} s"
    );
    assert!(admitted as f64 <= 5.0 + 5.0 * t, "{admitted} in {t} s");
    // The minute refused: its wait (up to 3 s for one token), the second holds tokens.
    let secs = retry_after(&minute);
    assert!((1..=3).contains(&secs), "Retry-After {secs}");
    let limit = &sf_items(&minute, "ratelimit")[0];
    assert_eq!(sf_param(limit, "r"), 0);
    assert!(
        sf_param(limit, "t") as u64 <= secs,
        "t never past Retry-After"
    );
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (r, _) = get(&c, url, headers).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "admitted after the slowest wait"
    );
}

#[tokio::test]
async fn two_limits_admit_within_both_quotas_and_report_both() {
    let server = Server::start(&[
        "--limit",
        "5/s:5",
        "--limit",
        "20/min:20",
        "--key",
        "global",
    ]);
    five_per_second_and_twenty_per_minute(&server.url(), &[]).await;
}

#[tokio::test]
async fn two_limits_over_redis_give_each_api_key_both_quotas_under_one_redis_key() {
    let Some(redis) = RedisServer::start("two_limits_over_redis_per_api_key") else {
        return;
    };
    let url = redis.url();
    let server = Server::start(&[
        "--redis",
        &url,
        "--limit",
        "5/s:5",
        "--limit",
        "20/min:20",
        "--key",
        "header:x-api-key",
    ]);
    five_per_second_and_twenty_per_minute(&server.url(), &[("x-api-key", "alice")]).await;
    // Another key has both quotas of its own.
    let c = client();
    let (bob, h) = until_refused(&c, &server.url(), &[("x-api-key", "bob")]).await;
    assert!(bob >= 5, "bob's own burst: {bob}");
    assert_eq!(tightest(&h), "5-per-1s");
    // One Redis key per API key holds every quota (one script call decides them all).
    let keys = redis_keys(&url);
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// The keys the Redis server holds (`redis-cli --scan`).
fn redis_keys(url: &str) -> Vec<String> {
    let out = Command::new("redis-cli")
        .args(["-u", url, "--scan"])
        .output()
        .expect("redis-cli runs");
    let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_refusal_by_one_quota_spends_nothing_from_the_other_over_http() {
    // Both orders, so that a chain taking either quota first would be caught: every refusal
    // by the second-long quota would spend the hour's tokens, and fewer than 3 would pass.
    for flags in [
        ["--limit", "2/s:2", "--limit", "3/h:3"],
        ["--limit", "3/h:3", "--limit", "2/s:2"],
    ] {
        let server = Server::start(&[&flags[..], &["--key", "global"]].concat());
        let (c, url) = (client(), server.url());
        let (mut admitted, first) = until_refused(&c, &url, &[]).await;
        // Twenty refusals by the second-long quota.
        let mut refused = 0;
        for _ in 0..20 {
            let (r, _) = get(&c, &url, &[]).await;
            match r.status() {
                StatusCode::OK => admitted += 1,
                _ => refused += 1,
            }
        }
        assert!(refused > 0, "{flags:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (more, h) = until_refused(&c, &url, &[]).await;
        admitted += more;
        assert_eq!(admitted, 3, "the hour's three tokens, none lost: {flags:?}");
        assert_eq!(tightest(&first), "2-per-1s", "{flags:?}");
        assert_eq!(tightest(&h), "3-per-3600s", "{flags:?}");
        assert!(retry_after(&h) >= 1190, "{flags:?}: an hour's token");
    }
}

#[test]
fn limit_flag_errors_are_usage_errors_never_panics() {
    for flags in [
        &["--limit", "0/s:5"][..],
        &["--limit", "5/s:0"],
        &["--limit", "5/s"],
        &["--limit", "5/s:"],
        &["--limit", "5:5"],
        &["--limit", "5/week:5"],
        &["--limit", "-5/s:5"],
        &["--limit", "5/s:1.5"],
        &["--limit", "99999999999999999999/s:1"],
        &["--limit", "1/s:99999999999999999999"],
        &["--limit", "18446744073709551615/s:1"],
        &["--limit", "1/s:18446744073709551615"],
        &[
            "--limit", "1/s:1", "--limit", "1/s:1", "--limit", "1/s:1", "--limit", "1/s:1",
            "--limit", "1/s:1",
        ],
        &["--limit", "5/s:5", "--rate", "5/s"],
        &["--limit", "5/s:5", "--burst", "5"],
        &["--limit"],
    ] {
        let out = Command::new(server_binary()).args(flags).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(!stderr.is_empty(), "{flags:?} explains itself");
        assert!(!stderr.contains("panicked"), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{flags:?} never listens");
    }
}
