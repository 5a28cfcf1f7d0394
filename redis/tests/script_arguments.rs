//! What a value or an argument the limiter did not send can do to the script, run as the
//! production script runs (`PRODUCTION_SOURCE`, loaded and called by a client of the test's
//! own, with arguments of its choice). Each test starts its own `redis-server` on a free
//! loopback port.
//!
//! The trust boundary (README, "A value the script did not write"): the quota is the client's,
//! so a client that may run commands on the server can set any key's limit — these tests pin
//! what the script guards against regardless.

use std::time::{Duration, Instant};
use tollgate::{Denied, Quota};
use tollgate_redis::{OnUnavailable, RedisLimiter, PRODUCTION_SOURCE};
use tollgate_testkit::redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);

/// A connection of its own with the production script loaded: its SHA.
async fn own_client(server: &RedisServer) -> (redis::aio::MultiplexedConnection, String) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(PRODUCTION_SOURCE)
        .query_async(&mut con)
        .await
        .unwrap();
    (con, sha)
}

/// EVALSHA on one key with raw arguments.
async fn evalsha(
    con: &mut redis::aio::MultiplexedConnection,
    sha: &str,
    key: &str,
    args: &[String],
) -> redis::RedisResult<redis::Value> {
    let mut c = redis::cmd("EVALSHA");
    c.arg(sha).arg(1).arg(key);
    for a in args {
        c.arg(a.as_str());
    }
    c.query_async(con).await
}

/// The five quota arguments the limiter sends for `key`, read back from the tag of the state
/// it wrote there (`a.b.scale.burst_units`): tag, a, b, burst units, scale.
fn quota_args(server: &RedisServer, key: &str) -> Vec<String> {
    let v = server.cli(&["GET", key]);
    let tag = v.split(' ').next().unwrap().trim().to_owned();
    let p: Vec<String> = tag.split('.').map(str::to_owned).collect();
    vec![tag, p[0].clone(), p[1].clone(), p[3].clone(), p[2].clone()]
}

/// A long value under a key — another program's, or a tag a client wrote — is refused before
/// any pattern runs over it. Guards against a pattern whose time grows with the square of the
/// value's length: 30 KB would block the server for seconds on every decision on that key, the
/// limiter's timeout would fire, and FailOpen would admit every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_value_is_refused_at_once_and_blocks_no_other_key() {
    let Some(server) = RedisServer::start("script_arguments::long_value") else {
        return;
    };
    // A timeout far above a decision's round trip, even on a loaded machine (the default 25 ms
    // is not: a decision past it was admitted by FailOpen and read as the server blocked). A
    // server blocked by a pattern is still seen: each decision is held to 500 ms below.
    let l = RedisLimiter::builder(&server.url(), Quota::new(1, HOUR, 3).unwrap())
        .on_unavailable(OnUnavailable::FailOpen)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (mut con, sha) = own_client(&server).await;
    // Planted by the script itself, from a tag argument of 30,000 bytes and a space.
    let tag = format!("{} y", "x".repeat(30_000));
    let args: Vec<String> = ["acquire", &tag, "1", "100000", "3000000", "1000000", "1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    evalsha(&mut con, &sha, "tollgate:planted", &args)
        .await
        .unwrap();
    // And written by another program: a run of non-spaces, a space, a non-digit.
    server.cli(&[
        "SET",
        "tollgate:foreign",
        &format!("{} y", "x".repeat(40_000)),
    ]);
    for key in ["planted", "foreign"] {
        let started = Instant::now();
        assert!(l.check(key, 1).await.is_err(), "{key}: malformed");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{key}: {:?}",
            started.elapsed()
        );
        assert_eq!(
            l.try_acquire(key, 1).await,
            Err(Denied::RetryAfter(tollgate_redis::MALFORMED_RETRY))
        );
    }
    let mut admitted = 0;
    for _ in 0..50 {
        admitted += u32::from(l.try_acquire("other", 1).await.is_ok());
    }
    assert_eq!(admitted, 3, "another key keeps its limit");
    assert_eq!(l.counters().fail_open, 0);
}

/// A cost below zero, fractional, not a number or beyond 2^53 is an error for the caller that
/// sent it and writes nothing. Guards against a negative cost crediting the bucket: ten calls
/// of −2 would let honest callers on a key of 1 an hour with a burst of 3 in 23 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_is_not_whole_tokens_is_an_error_and_credits_nothing() {
    let Some(server) = RedisServer::start("script_arguments::cost") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::new(1, HOUR, 3).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert_eq!(l.check("victim", 1).await.unwrap(), Ok(()));
    let mut admitted = 1;
    let args = quota_args(&server, "tollgate:victim");
    let (mut con, sha) = own_client(&server).await;
    for cost in ["-2", "-3", "0.5", "nan", "inf", "9007199254740993", "x"] {
        while l.try_acquire("victim", 1).await.is_ok() {
            admitted += 1;
        }
        let before = server.cli(&["GET", "tollgate:victim"]);
        let mut a = vec!["acquire".to_owned()];
        a.extend(args.iter().cloned());
        a.push(cost.to_owned());
        assert!(
            evalsha(&mut con, &sha, "tollgate:victim", &a)
                .await
                .is_err(),
            "cost {cost}"
        );
        assert_eq!(
            server.cli(&["GET", "tollgate:victim"]),
            before,
            "cost {cost}: nothing written"
        );
    }
    while l.try_acquire("victim", 1).await.is_ok() {
        admitted += 1;
    }
    assert_eq!(admitted, 3, "the burst, and nothing more");
}

/// The production script reads its time from `TIME`, whatever its arguments: a time two days
/// ahead in the test-time argument decides at the server's time and writes a state with a TTL.
/// Guards against a state dated two days ahead with no TTL, which every honest decision would
/// read as malformed (the key refused until an operator deleted it), and against clients
/// creating keys that never expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_production_script_ignores_a_client_time() {
    let Some(server) = RedisServer::start("script_arguments::client_time") else {
        return;
    };
    let l = RedisLimiter::builder(
        &server.url(),
        Quota::new(10, Duration::from_secs(1), 10).unwrap(),
    )
    .timeout(Duration::from_secs(2))
    .build()
    .await
    .unwrap();
    // The whole burst, so that the state read back lives a whole second (one token's state
    // expires within 100 ms, which a redis-cli on a loaded machine may take to read it).
    assert_eq!(l.check("probe", 10).await.unwrap(), Ok(()));
    let args = quota_args(&server, "tollgate:probe");
    let (mut con, sha) = own_client(&server).await;
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let mut a = vec!["acquire".to_owned()];
    a.extend(args);
    a.push("1".to_owned());
    a.push("0".to_owned());
    a.push((now_us + 2 * 86_400_000_000).to_string());
    evalsha(&mut con, &sha, "tollgate:victim", &a)
        .await
        .unwrap();
    let pttl: i64 = server
        .cli(&["PTTL", "tollgate:victim"])
        .trim()
        .parse()
        .unwrap();
    assert!((1..=2_000).contains(&pttl), "PTTL {pttl}");
    assert_eq!(
        l.check("victim", 1).await.unwrap(),
        Ok(()),
        "decided at the server's time"
    );
}
