//! `--redis`: replicas sharing one `redis-server` enforce one limit together, exactly; a
//! request is all or nothing there too; a frozen Redis (SIGSTOP) costs each call at most the
//! timeout, then the policy answers; a drain lets an in-flight call finish.

mod support;

use std::time::{Duration, Instant};
use support::*;
use tollgate_testkit::redis_server::RedisServer;

const CONFIG: &str = "domain: shared\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 20}\n  - key: tight\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";

fn start(dir: &TempDir, url: &str, extra: &[&str]) -> Proc {
    let cfg = dir.path().join("c.yaml");
    if !cfg.exists() {
        std::fs::write(&cfg, CONFIG).unwrap();
    }
    let mut args = config_args(&cfg, &["--redis", url]);
    args.extend_from_slice(extra);
    Proc::start(&args)
}

fn load(yaml: &str) -> tollgate_rls::config::Config {
    let source = (std::path::PathBuf::from("c.yaml"), yaml.to_owned());
    tollgate_rls::config::Config::from_sources(&[source]).unwrap()
}

/// The service in-process on `server` with each port's waiting budget 16 MiB and a Redis
/// timeout of 30 s, longer than every wait of the budget tests: a call waiting on a frozen
/// Redis holds its share of the budget until Redis answers.
async fn start_with_a_16_mib_budget(server: &RedisServer) -> Rls {
    let url = server.url();
    Rls::start_with(CONFIG, |o| {
        o.redis = Some(url);
        o.redis_timeout = Duration::from_secs(30);
        o.max_buffered_bytes = 16 << 20;
    })
    .await
}

/// `tight=t` admitted through `c` (its one an hour), then `user=u` with it `times` times:
/// each refused, and `user=u` still holding all 20, as it was not debited (all or nothing
/// through Redis).
async fn tight_refuses_all_or_nothing(c: &mut Client, u: &str, t: &str, times: usize) {
    let r = decide(c, req("shared", vec![desc(&[("tight", t)])])).await;
    assert_eq!(r.overall_code, OK);
    for _ in 0..times {
        let both = req("shared", vec![desc(&[("user", u)]), desc(&[("tight", t)])]);
        let r = decide(c, both).await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!(brief(&r)[0].1, 20, "{u} held and was not debited");
    }
}

/// A Redis backend on `server`, in-process (no fallback: a failure is `UNAVAILABLE`).
async fn connect(server: &RedisServer) -> tollgate_rls::engine::RedisBackend {
    use tollgate_rls::engine::{OnRedisError, RedisBackend};
    RedisBackend::connect(
        &server.url(),
        Duration::from_secs(2),
        OnRedisError::Unavailable,
        None,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_admit_exactly_the_limit_between_them() {
    let Some(server) = RedisServer::start("two_replicas") else {
        return;
    };
    let dir = TempDir::new("redis-two");
    let url = server.url();
    // A generous timeout: this test is about exactness, not outages.
    let slow = ["--redis-timeout-ms", "2000"];
    let (a, b) = (start(&dir, &url, &slow), start(&dir, &url, &slow));
    let mut tasks = Vec::new();
    for p in [&a, &b] {
        for _ in 0..4 {
            let mut c = p.client().await;
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..15 {
                    let r = decide(&mut c, req("shared", vec![desc(&[("user", "x")])])).await;
                    admitted += u32::from(r.overall_code == OK);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(
        admitted, 20,
        "120 calls through two replicas, a limit of 20"
    );
    // All or nothing through Redis: `tight` refuses, so `user=y` is not debited.
    let mut c = a.client().await;
    tight_refuses_all_or_nothing(&mut c, "y", "t", 3).await;
    let mut cb = b.client().await;
    let r = decide(&mut cb, req("shared", vec![desc(&[("user", "y")])])).await;
    assert_eq!(brief(&r)[0].1, 19, "the other replica sees y's one debit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_costs_each_call_at_most_the_timeout() {
    let Some(server) = RedisServer::start("frozen_redis") else {
        return;
    };
    let dir = TempDir::new("redis-frozen");
    let url = server.url();
    let closed = start(&dir, &url, &["--redis-timeout-ms", "200"]);
    let open = start(
        &dir,
        &url,
        &["--redis-timeout-ms", "200", "--on-redis-error", "allow"],
    );
    let local = start(
        &dir,
        &url,
        &["--redis-timeout-ms", "200", "--on-redis-error", "local"],
    );
    let (mut c1, mut c2, mut c3) = (
        closed.client().await,
        open.client().await,
        local.client().await,
    );
    let call = || req("shared", vec![desc(&[("tight", "frozen")])]);
    assert_eq!(decide(&mut c1, call()).await.overall_code, OK);
    server.pause();
    let mut slowest = Duration::ZERO;
    let mut local_admitted = 0;
    for _ in 0..10 {
        let t0 = Instant::now();
        let r = c1.should_rate_limit(call()).await;
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.unwrap_err().code(), tonic::Code::Unavailable);
        let t0 = Instant::now();
        let r = decide(&mut c2, call()).await;
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.overall_code, OK, "fail open");
        let t0 = Instant::now();
        let r = decide(&mut c3, call()).await;
        slowest = slowest.max(t0.elapsed());
        local_admitted += u32::from(r.overall_code == OK);
    }
    assert_eq!(
        local_admitted, 1,
        "the local fallback's own bucket of 1 an hour"
    );
    // 200 ms, plus scheduling on a loaded 2-core machine (over a second under heavy load);
    // far from a 10 s stall.
    assert!(
        slowest < Duration::from_millis(2500),
        "slowest call {slowest:?}"
    );
    assert!(
        closed
            .metric(r#"tollgate_rls_redis_failures_total{policy="unavailable"}"#)
            .await
            >= 10
    );
    assert_eq!(closed.metric("tollgate_rls_redis_up").await, 0);
    server.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_an_in_flight_call_finish() {
    let Some(server) = RedisServer::start("drain_in_flight") else {
        return;
    };
    let dir = TempDir::new("redis-drain");
    // A Redis timeout longer than every wait below: the call waits until Redis is resumed.
    let mut p = start(&dir, &server.url(), &["--redis-timeout-ms", "30000"]);
    let mut c = p.client().await;
    server.pause();
    let call = tokio::spawn(async move {
        c.should_rate_limit(req("shared", vec![desc(&[("user", "z")])]))
            .await
            .map(|r| r.into_inner().overall_code)
    });
    let proc = &p;
    wait_until("the call waits on the frozen Redis", move || async move {
        proc.metric("tollgate_rls_redis_waiting").await == 1
    })
    .await;
    p.signal("TERM");
    // The gRPC port closes its listener once its drain began, in the step that asks its
    // connections to close.
    let grpc = p.grpc;
    wait_until("the gRPC port's drain began", move || async move {
        tokio::net::TcpStream::connect(grpc).await.is_err()
    })
    .await;
    server.resume();
    assert_eq!(
        call.await.unwrap().unwrap(),
        OK,
        "answered after Redis came back"
    );
    assert_eq!(p.wait(Duration::from_secs(10)), Some(0), "{}", p.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_requests_keys_share_one_slot() {
    let Some(cluster) = tollgate_testkit::redis_server::RedisCluster::start("rls_cluster") else {
        return;
    };
    let dir = TempDir::new("redis-cluster");
    let p = start(&dir, &cluster.url(), &["--redis-timeout-ms", "2000"]);
    let mut c = p.client().await;
    // Many users: their keys would spread over the three masters without the domain's tag.
    for i in 0..30 {
        let r = decide(
            &mut c,
            req(
                "shared",
                vec![
                    desc(&[("user", &format!("u{i}"))]),
                    desc(&[("user", &format!("v{i}"))]),
                ],
            ),
        )
        .await;
        assert_eq!(brief(&r)[0].1, 19, "{r:?}");
    }
    tight_refuses_all_or_nothing(&mut c, "w", "c", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_only_descriptor_refuses_without_debiting_through_redis() {
    let Some(server) = RedisServer::start("check_only_redis") else {
        return;
    };
    let dir = TempDir::new("redis-check");
    let p = start(&dir, &server.url(), &["--redis-timeout-ms", "2000"]);
    let mut c = p.client().await;
    let both = || {
        req(
            "shared",
            vec![desc(&[("user", "q")]), desc_hits(&[("tight", "q")], 0)],
        )
    };
    // The check holds: user debited, tight not.
    for left in [19, 18] {
        let r = decide(&mut c, both()).await;
        let b = brief(&r);
        assert_eq!((b[0].0, b[0].1), (OK, left));
        assert_eq!((b[1].0, b[1].1), (OK, 1), "checked, not debited");
    }
    // Spend tight's token; the check now refuses, and user is not debited.
    assert_eq!(
        decide(&mut c, req("shared", vec![desc(&[("tight", "q")])]))
            .await
            .overall_code,
        OK
    );
    let r = decide(&mut c, both()).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r)[0].1, 18, "user not debited");
    assert_eq!(brief(&r)[1].0, OVER);
}

/// A reload between a request's plan and its Redis call: a limit the new config no longer has
/// is decided under the rates the plan holds, never refused for being missing (its policy was
/// looked up by the new config's limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_removed_by_a_reload_mid_request_is_still_decided() {
    use tollgate_rls::engine::Demand;
    let Some(server) = RedisServer::start("reload_mid_request") else {
        return;
    };
    let old = load(CONFIG);
    let new = load("domain: shared\ndescriptors:\n  - key: tight\n    rate_limit: {unit: hour, requests_per_unit: 1}\n");
    let backend = connect(&server).await;
    backend.apply(&old);
    let m = old.lookup("shared", [("user", "x")]).unwrap();
    let demand = Demand {
        limit: m.limit,
        bucket: m.bucket,
        hits: 1,
        enforce: true,
        read: false,
    };
    backend.apply(&new); // `user` is gone
    let out = backend
        .decide("shared", std::slice::from_ref(&demand))
        .await
        .unwrap();
    assert!(out[0].holds && out[0].decided, "{:?}", out[0]);
    assert_eq!(out[0].remaining, 19);
}

/// A reload between a request's plan and its decision that lifts a limit of 0 per unit: the
/// request was planned as refused (its other buckets only read, nothing to be debited), so the
/// limit must still refuse it, on Redis and on the local fallback; decided under the new rate
/// instead, every bucket would hold and the request be answered `OK` with nothing debited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_zero_lifted_by_a_reload_mid_request_still_refuses_it() {
    use tollgate::ManualClock;
    use tollgate_rls::engine::{Demand, LocalBackend, RlsClock};
    let old = load(&CONFIG.replace(
        "{unit: hour, requests_per_unit: 1}",
        "{unit: hour, requests_per_unit: 0}",
    ));
    let new = load(CONFIG);
    // The demands as the plan makes them under `old`: `tight` blocks, so both are reads.
    let demands: Vec<Demand> = [("user", "x"), ("tight", "x")]
        .into_iter()
        .map(|e| {
            let m = old.lookup("shared", [e]).unwrap();
            Demand {
                limit: m.limit,
                bucket: m.bucket,
                hits: 1,
                enforce: true,
                read: true,
            }
        })
        .collect();
    let local = LocalBackend::new(RlsClock::manual(ManualClock::new()), 100);
    local.apply(&old);
    local.apply(&new);
    let out = local.decide(&demands);
    assert!(!out[1].holds, "local: {:?}", out[1]);
    let Some(server) = RedisServer::start("zero_lifted_mid_request") else {
        return;
    };
    let backend = connect(&server).await;
    backend.apply(&old);
    backend.apply(&new);
    let out = backend.decide("shared", &demands).await.unwrap();
    assert!(out[0].holds && out[0].remaining == 20, "{:?}", out[0]);
    assert!(!out[1].holds, "redis: {:?}", out[1]);
}

/// A reload between a request's plan and the local fallback's decision that removes a limit
/// (the Redis path plans, waits on Redis, and falls back only when Redis fails): the fallback
/// decides the limit under the rates the plan holds, from the table the reload retired (its
/// buckets kept), else from full buckets, as the Redis path decides it; never refused for
/// being missing.
#[test]
fn the_fallback_decides_a_limit_removed_mid_request_from_its_retired_table() {
    use tollgate::ManualClock;
    use tollgate_rls::engine::{Demand, LocalBackend, RlsClock, Wait};
    let old = load(CONFIG);
    let new = load("domain: shared\ndescriptors:\n  - key: tight\n    rate_limit: {unit: hour, requests_per_unit: 1}\n");
    let demand = |value: &str, hits: u64| {
        let m = old.lookup("shared", [("user", value)]).unwrap();
        Demand {
            limit: m.limit,
            bucket: m.bucket,
            hits,
            enforce: true,
            read: false,
        }
    };
    let local = LocalBackend::new(RlsClock::manual(ManualClock::new()), 100);
    local.apply(&old);
    // `user` is gone, and its table with it (every bucket full: nothing to keep aside).
    local.apply(&new);
    let out = local.decide(&[demand("fresh", 1)]);
    assert!(out[0].holds && out[0].decided, "no table: {:?}", out[0]);
    assert_eq!(out[0].remaining, 19, "a full bucket of the plan's rate");
    local.apply(&old);
    // `drained` spends its 20 an hour before the reload; `fresh` is never seen.
    assert!(local.decide(&[demand("drained", 20)])[0].holds);
    local.apply(&new); // `user` is gone: its table (one bucket not full) is retired
    let out = local.decide(&[demand("fresh", 1)]);
    assert!(out[0].holds && out[0].decided, "fresh: {:?}", out[0]);
    assert_eq!(out[0].remaining, 19, "a full bucket of the plan's rate");
    let out = local.decide(&[demand("drained", 1)]);
    assert!(!out[0].holds, "drained: {:?}", out[0]);
    assert_eq!(
        out[0].wait,
        Some(Wait::After(Duration::from_secs(180))),
        "the retired bucket's own wait (a token every 3 minutes), not never"
    );
    // Beyond the burst: never, as the plan's rate says.
    let out = local.decide(&[demand("fresh", 21)]);
    assert_eq!(out[0].wait, Some(Wait::Never), "{:?}", out[0]);
}

/// The same through the service: a call waits on a frozen Redis, a reload removes its limit
/// meanwhile, and the local fallback answers; the limit is decided as the call's plan had it,
/// so the call is admitted, not refused with a wait of one unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_falling_back_after_a_reload_removed_its_limit_is_admitted() {
    use tollgate_rls::engine::{Backend, LocalBackend, OnRedisError, RedisBackend, RlsClock};
    use tollgate_rls::service::{Code, Service};
    let Some(server) = RedisServer::start("fallback_after_reload") else {
        return;
    };
    let backend = RedisBackend::connect(
        &server.url(),
        Duration::from_millis(1500),
        OnRedisError::Local,
        Some(LocalBackend::new(RlsClock::real(), 100)),
    )
    .await
    .unwrap();
    let service = std::sync::Arc::new(Service::new(load(CONFIG), Backend::Redis(backend), false));
    let call = user_x();
    server.pause();
    let waiting = {
        let (service, call) = (service.clone(), call.clone());
        tokio::spawn(async move { service.should_rate_limit(&call).await })
    };
    // Planned under the old config, the call waits on the frozen Redis.
    let planned = &service;
    wait_until("the call waits on the frozen Redis", move || async move {
        planned.waiting_on_redis() == 1
    })
    .await;
    service.reload(load(
        "domain: shared\ndescriptors:\n  - key: tight\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    ));
    assert_eq!(
        service.waiting_on_redis(),
        1,
        "the reload came while the call waited (its Redis timeout is 1.5 s)"
    );
    let r = waiting.await.unwrap().unwrap();
    server.resume();
    assert_eq!(r.overall, Code::Ok, "{r:?}");
    assert_eq!(r.statuses[0].code, Code::Ok, "{r:?}");
    let planned = r.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit);
    assert_eq!(planned, Some(20), "planned before the reload: {r:?}");
    // Planned now, under the new config: no limit.
    let r = service.should_rate_limit(&call).await.unwrap();
    assert_eq!(
        (r.overall, r.statuses[0].current_limit.clone()),
        (Code::Ok, None)
    );
}

/// A key holding a value that is not a tollgate state: the call is refused as Redis failing
/// (`UNAVAILABLE`, 500 on `/json`), and the answer names no key, whose text is the request's
/// descriptor values (the client's, and possibly private); the operator finds the key, to
/// delete it, in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_key_is_logged_and_not_echoed_to_the_client() {
    let Some(server) = RedisServer::start("malformed_key_echo") else {
        return;
    };
    let dir = TempDir::new("redis-malformed");
    let p = start(&dir, &server.url(), &["--redis-timeout-ms", "2000"]);
    let mut c = p.client().await;
    let secret = "s3cr3t-token";
    let call = || req("shared", vec![desc(&[("user", secret)])]);
    assert_eq!(decide(&mut c, call()).await.overall_code, OK);
    // Another program's value under the key.
    let script = "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
                  redis.call('SET', k, 'not a state') n = n + 1 end return n";
    let pattern = format!("*{secret}*");
    assert_eq!(server.cli(&["EVAL", script, "0", &pattern]).trim(), "1");
    let e = c.should_rate_limit(call()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(!e.message().contains(secret), "gRPC: {:?}", e.message());
    assert!(
        e.message().contains("not a tollgate state"),
        "{:?}",
        e.message()
    );
    let body = format!(
        r#"{{"domain": "shared", "descriptors": [{{"entries": [{{"key": "user", "value": "{secret}"}}]}}]}}"#
    );
    let (status, text) = http(p.http, "POST", "/json", &body).await;
    assert_eq!(status, 500, "{text}");
    assert!(!text.contains(secret), "/json: {text:?}");
    assert!(p.logged(secret), "the key is logged: {}", p.stderr());
}

/// A rate the Redis script cannot hold in any state unit (4,294,967,291 per 30 days: even in
/// whole tokens it earns 4,294,967,291 per 2.592e12 µs, beyond 2^53). The core holds it.
const MONTHLY: &str = "domain: shared\ndescriptors:\n  - key: user\n    \
    rate_limit: {unit: month, requests_per_unit: 4294967291}\n";

/// With `--redis` (whatever `--on-redis-error`: the local fallback decides only when Redis
/// fails), a rate the script cannot hold fails the start with its line, its field and the way
/// to say "no limit". The local backend loads the same file (tests/service.rs).
#[test]
fn a_rate_the_script_cannot_hold_fails_a_start_on_redis() {
    let Some(server) = RedisServer::start("script_range_at_start") else {
        return;
    };
    let dir = TempDir::new("redis-range-start");
    let cfg = dir.write("c.yaml", MONTHLY);
    let url = server.url();
    for policy in ["unavailable", "allow", "local"] {
        let (code, err) = run_to_exit(&config_args(
            &cfg,
            &["--redis", &url, "--on-redis-error", policy],
        ));
        assert_eq!(code, Some(2), "{policy}: {err}");
        assert!(
            err.contains("c.yaml:4: descriptors[0].rate_limit: not a rate the Redis backend holds")
                && err
                    .trim_end()
                    .ends_with("; for no limit, write `unlimited: true`"),
            "{policy}: {err}"
        );
    }
}

/// On the Redis backend, a reload to a rate the script cannot hold is refused and the old
/// config keeps serving; a later valid file is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_to_a_rate_the_script_cannot_hold_keeps_the_old_config_on_redis() {
    let Some(server) = RedisServer::start("script_range_on_reload") else {
        return;
    };
    let url = server.url();
    let mut s = Rls::start_with(CONFIG, |o| {
        o.redis = Some(url);
        o.redis_timeout = Duration::from_secs(2);
        // Reloads only when the test asks.
        o.reload_poll = Duration::from_secs(3600);
    })
    .await;
    let dir = s.dir.path().to_owned();
    let rpu = |r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    std::fs::write(dir.join("config.yaml"), MONTHLY).unwrap();
    assert!(!tollgate_rls::server::reload(&dir, s.service()), "refused");
    let r = s.ok(req("shared", vec![desc(&[("user", "x")])])).await;
    assert_eq!(
        (r.overall_code, rpu(&r)),
        (OK, Some(20)),
        "the old config serves"
    );
    std::fs::write(dir.join("config.yaml"), CONFIG.replace(": 20}", ": 30}")).unwrap();
    assert!(tollgate_rls::server::reload(&dir, s.service()), "taken");
    let r = s.ok(req("shared", vec![desc(&[("user", "x")])])).await;
    assert_eq!(
        (r.overall_code, rpu(&r)),
        (OK, Some(30)),
        "the new config serves"
    );
    s.stop().await;
}

/// A `/json` body of `shared`'s `user` descriptor whose value is `len` bytes, unique by `tag`.
fn big_json(tag: usize, len: usize) -> String {
    format!(
        r#"{{"domain": "shared", "descriptors": [{{"entries": [{{"key": "user", "value": "{tag}{}"}}]}}]}}"#,
        "x".repeat(len)
    )
}

/// Sends `body` to `/json` on a fresh connection and leaves it unanswered: the connection
/// closes when the returned stream is dropped.
async fn json_left_open(addr: std::net::SocketAddr, body: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).await.unwrap();
    c.write_all(body.as_bytes()).await.unwrap();
    c
}

/// `/json` requests waiting on Redis take what they hold from the HTTP port's waiting budget
/// (`--max-buffered-mib`, 16 MiB here): a request holding a 2 MiB value takes over 6 MiB
/// (the request, and twice its body for the keys and the command built from it), so at most
/// two wait on a frozen Redis at once and a request that would wait beyond is answered 503 at
/// once, rather than each holding its request until the Redis timeout. What a request took is
/// given back when its connection closes while it waits, and when it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_requests_waiting_on_redis_take_from_the_ports_budget() {
    let Some(server) = RedisServer::start("json_budget") else {
        return;
    };
    let s = start_with_a_16_mib_budget(&server).await;
    let addr = s.ready.http;
    const VALUE: usize = 2 << 20;

    // Two requests wait on the frozen Redis (up to the 30 s Redis timeout, longer than every
    // wait here); a third is refused at once.
    server.pause();
    let waiting = [
        json_left_open(addr, &big_json(1, VALUE)).await,
        json_left_open(addr, &big_json(2, VALUE)).await,
    ];
    let service = s.service();
    wait_until(
        "two requests wait on the frozen Redis",
        move || async move { service.waiting_on_redis() == 2 },
    )
    .await;
    // What they hold, over 6 MiB each, within the port's budget.
    const WAITING_BYTES: &str = r#"tollgate_rls_redis_waiting_bytes{port="http"}"#;
    let held = metric(addr, WAITING_BYTES).await;
    assert!((12 << 20..=16 << 20).contains(&held), "{held} bytes held");
    let t0 = Instant::now();
    let (code, text) = http(addr, "POST", "/json", &big_json(3, VALUE)).await;
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("--max-buffered-mib"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Their connections close while they wait: what they took is given back at once, so two
    // more wait in their place (neither answered yet).
    drop(waiting);
    // The gauge counts what a request took until it is back in the budget. It is the
    // process's: no other test of this file waits on Redis through an in-process HTTP port.
    wait_until("what they took is given back", move || async move {
        metric(addr, WAITING_BYTES).await == 0
    })
    .await;
    let again: Vec<_> = (4..6)
        .map(|tag| {
            tokio::spawn(async move { http(addr, "POST", "/json", &big_json(tag, VALUE)).await })
        })
        .collect();
    wait_until("two more wait on the frozen Redis", move || async move {
        service.waiting_on_redis() == 2
    })
    .await;
    for a in &again {
        assert!(
            !a.is_finished(),
            "a request was answered while Redis was frozen"
        );
    }
    server.resume();
    for a in again {
        let (code, text) = a.await.unwrap();
        assert_eq!(code, 200, "{text}");
    }

    // Answered, they gave back what they took: requests one after the other are decided.
    for tag in 10..13 {
        let (code, text) = http(addr, "POST", "/json", &big_json(tag, VALUE)).await;
        assert_eq!(code, 200, "request {tag}: {text}");
    }
}

// gRPC calls waiting on Redis and the gRPC port's budget.

/// A `ShouldRateLimit` message that holds far more decoded than its size: `shared`'s `user`
/// descriptor (a value unique by `tag`, of one length for every tag) and 120 descriptors of 64
/// empty entries each (2 bytes each on the wire, two strings decoded), about 15.7 KB: one
/// DATA frame (16 KiB at most) holds it whole with the end of its stream.
fn heavy_call(tag: usize) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    let mut descriptors = vec![desc(&[("user", &format!("{tag:08}"))])];
    descriptors.extend((0..120).map(|_| RateLimitDescriptor {
        entries: vec![Entry::default(); 64],
        ..Default::default()
    }));
    req("shared", descriptors)
}

/// What a call of `message` takes from the gRPC port's budget while it waits on Redis: the
/// service's measure of the request as the server decodes it.
fn waiting_take(
    message: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest,
) -> usize {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use tonic_prost::prost::Message;
    let bytes = message.encode_to_vec();
    let decoded = RateLimitRequest::decode(&bytes[..]).unwrap();
    tollgate_rls::service::held_while_waiting(&tollgate_rls::grpc::from_proto(decoded), bytes.len())
}

/// An HTTP/2 connection to `addr`, the gRPC port.
async fn h2_connection(
    addr: std::net::SocketAddr,
) -> h2::client::SendRequest<tonic_prost::prost::bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client
}

/// Sends `message` as Envoy sends a call (the message and the end of the stream in one DATA
/// frame) and returns its answer's `grpc-status` and `grpc-message`.
async fn call_sent_at_once(
    client: h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>,
    addr: std::net::SocketAddr,
    message: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest,
) -> (String, String) {
    use tonic_prost::prost::Message;
    let mut body = vec![0u8];
    body.extend_from_slice(&(message.encoded_len() as u32).to_be_bytes());
    message.encode(&mut body).unwrap();
    assert!(
        body.len() <= 16 << 10,
        "one DATA frame: {} bytes",
        body.len()
    );
    let head = tonic::codegen::http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let mut client = client.ready().await.unwrap();
    let (resp, mut send) = client.send_request(head, false).unwrap();
    send.send_data(body.into(), true).unwrap();
    let (parts, mut body) = resp.await.unwrap().into_parts();
    let text = |m: &tonic::codegen::http::HeaderMap, name: &str| {
        m.get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    // A status answered at once comes in the headers (trailers-only), an answer in trailers.
    if parts.headers.contains_key("grpc-status") {
        return (
            text(&parts.headers, "grpc-status"),
            text(&parts.headers, "grpc-message"),
        );
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    (
        text(&trailers, "grpc-status"),
        text(&trailers, "grpc-message"),
    )
}

/// Spawns a call of `heavy_call(tag)` for each tag, over `conns` in turn; each sends its tag
/// and answer on the returned channel once answered.
fn spawn_heavy_calls(
    conns: &[h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>],
    addr: std::net::SocketAddr,
    tags: std::ops::Range<usize>,
) -> tokio::sync::mpsc::UnboundedReceiver<(usize, (String, String))> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for tag in tags {
        let (client, tx) = (conns[tag % conns.len()].clone(), tx.clone());
        tokio::spawn(async move {
            let answer = call_sent_at_once(client, addr, &heavy_call(tag)).await;
            let _ = tx.send((tag, answer));
        });
    }
    rx
}

/// The next `n` answers, each within `limit` of now.
async fn answers(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, (String, String))>,
    n: usize,
    limit: Duration,
) -> Vec<(usize, (String, String))> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(a)) => out.push(a),
            Ok(None) => panic!("a call ended unanswered"),
            Err(_) => panic!("{} of {n} answers within {limit:?}; got {out:?}", out.len()),
        }
    }
    out
}

/// Whether `answer` is the refusal of a call the gRPC port's budget cannot hold:
/// `UNAVAILABLE` (Envoy's `failure_mode_deny` decides), naming the flag that sizes it.
fn refused_for_budget((status, message): &(String, String)) -> bool {
    status == "14" && message.contains("max-buffered-mib")
}

/// Every key a decision on Redis builds starts with the domain's hash tag and the domain, held
/// in the key and again in the Redis command's copy while the call waits: a request of many
/// descriptors on a long domain holds that domain once per descriptor, twice, and takes it
/// from the port's budget.
#[test]
fn what_a_call_waiting_on_redis_holds_counts_the_domain_in_each_key() {
    use tollgate_rls::service::{held_while_waiting, Descriptor, Request};
    const DESCRIPTORS: usize = 100;
    let request = |domain_len: usize| Request {
        domain: "d".repeat(domain_len),
        descriptors: vec![
            Descriptor {
                entries: vec![("user".into(), "x".into())],
                ..Default::default()
            };
            DESCRIPTORS
        ],
        hits_addend: 0,
    };
    // The source (a message or a body) holds the domain once, beside the same entries.
    let held = |domain_len: usize| held_while_waiting(&request(domain_len), domain_len + 1_000);
    let grown = held(1_001) - held(1);
    assert!(grown >= 2 * DESCRIPTORS * 1_000, "{grown}");
}

/// gRPC calls waiting on Redis take what they hold from the gRPC port's waiting budget
/// (`--max-buffered-mib`, 16 MiB here), also calls sent at once (whose streams take nothing):
/// with Redis frozen, as many calls as the budget holds wait, and every call beyond is
/// answered `UNAVAILABLE` at once rather than each holding its decoded request until the
/// Redis timeout; once Redis answers, the waiting ones are decided and what they took is given
/// back, so that as many wait again (and one more is refused). Every answer that comes while
/// Redis is frozen is one that did not wait on it; the bounds on them only end a failing run
/// (the Redis timeout is longer, so that the waiting calls are decided, not timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_waiting_on_redis_take_from_the_ports_budget() {
    let Some(server) = RedisServer::start("grpc_budget") else {
        return;
    };
    let s = start_with_a_16_mib_budget(&server).await;
    let addr = s.ready.grpc;
    // Each call takes at least what its decoded entries hold (7,680 entries of two empty
    // strings, 48 bytes each), so no more than 45 fit the budget.
    let take = waiting_take(&heavy_call(0));
    assert!(take >= 7_680 * 48, "{take}");
    let fits = (16 << 20) / take;
    const CALLS: usize = 60;
    assert!((2..CALLS).contains(&fits), "{fits} calls fit");
    // Three connections, each warmed by a call (its settings and windows exchanged), so that
    // every call below goes out in one DATA frame.
    let mut conns = Vec::new();
    for tag in 0..3 {
        let c = h2_connection(addr).await;
        let (status, message) = call_sent_at_once(c.clone(), addr, &heavy_call(tag)).await;
        assert_eq!(status, "0", "{message}");
        conns.push(c);
    }

    server.pause();
    let mut rx = spawn_heavy_calls(&conns, addr, 100..100 + CALLS);
    // Redis answers nothing: every answer now is a refusal at once, and the calls that fit
    // are left waiting.
    let refused = answers(&mut rx, CALLS - fits, Duration::from_secs(10)).await;
    for (tag, answer) in &refused {
        assert!(refused_for_budget(answer), "call {tag}: {answer:?}");
    }
    server.resume();
    for (tag, (status, message)) in answers(&mut rx, fits, Duration::from_secs(10)).await {
        assert_eq!(status, "0", "call {tag} waited and was decided: {message}");
    }

    // Answered, they gave back what they took: as many wait again, and one more is refused.
    server.pause();
    let mut rx = spawn_heavy_calls(&conns, addr, 200..201 + fits);
    let [(tag, answer)] = &answers(&mut rx, 1, Duration::from_secs(10)).await[..] else {
        unreachable!()
    };
    assert!(refused_for_budget(answer), "call {tag}: {answer:?}");
    server.resume();
    for (tag, (status, message)) in answers(&mut rx, fits, Duration::from_secs(10)).await {
        assert_eq!(status, "0", "call {tag} waited and was decided: {message}");
    }
}

/// A call on a new HTTP/2 connection to the gRPC port whose message announces `len` bytes and
/// sends `sent` of them, its stream left open (returned, with its connection, to keep it so).
/// Returns once HTTP/2's flow control let all `sent` bytes go: with windows of 1 MiB, a `sent`
/// beyond 2 MiB means the server read past the message's first frames, which it does only once
/// the stream has taken what the message may hold from the port's budget.
async fn unfinished_call(
    addr: std::net::SocketAddr,
    len: usize,
    sent: usize,
) -> (
    h2::client::SendRequest<tonic_prost::prost::bytes::Bytes>,
    h2::SendStream<tonic_prost::prost::bytes::Bytes>,
    h2::client::ResponseFuture,
) {
    let client = h2_connection(addr).await;
    let head = tonic::codegen::http::Request::post(format!(
        "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let mut ready = client.clone().ready().await.unwrap();
    let (resp, mut send) = ready.send_request(head, false).unwrap();
    let mut body = vec![0u8];
    body.extend_from_slice(&(len as u32).to_be_bytes());
    body.resize(5 + sent, 0);
    let mut body = tonic_prost::prost::bytes::Bytes::from(body);
    while !body.is_empty() {
        send.reserve_capacity(body.len());
        let granted = tokio::time::timeout(
            Duration::from_secs(10),
            std::future::poll_fn(|cx| send.poll_capacity(cx)),
        )
        .await
        .expect("the server reads the unfinished message")
        .expect("the stream is open")
        .unwrap();
        let chunk = body.split_to(granted.min(body.len()));
        send.send_data(chunk, false).unwrap();
    }
    (client, send, resp)
}

/// Unfinished messages that hold the gRPC port's whole budget (16 MiB here: two streams
/// announcing messages of 4 MiB, each holding 8 MiB, what such a message and its decoded
/// request may hold) make no call that waits on Redis refused: calls take what they hold while
/// they wait from a second budget of the port, so that a client cannot make the calls Envoy
/// sends at once refused (and `failure_mode_deny` decide them) by holding the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_messages_holding_the_grpc_budget_refuse_no_call_on_redis() {
    let Some(server) = RedisServer::start("grpc_budget_apart") else {
        return;
    };
    let url = server.url();
    let s = Rls::start_with(CONFIG, |o| {
        o.redis = Some(url);
        o.redis_timeout = Duration::from_secs(2);
        o.max_buffered_bytes = 16 << 20;
        o.body_timeout = Duration::from_secs(60);
    })
    .await;
    let addr = s.ready.grpc;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(unfinished_call(addr, 4 << 20, 3 << 20).await);
    }
    let conn = h2_connection(addr).await;
    for tag in 0..3 {
        let (status, message) = call_sent_at_once(conn.clone(), addr, &heavy_call(tag)).await;
        assert_eq!(status, "0", "call {tag}: {message}");
    }
    drop(held);
}

/// A gRPC call waiting on Redis that its client cancels (its stream reset) counts in neither
/// gauge once its future is dropped: `tollgate_rls_redis_waiting` and what it held of the
/// gRPC port's budget read 0 again while Redis is still frozen (a process of its own: the
/// gauges are the process's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_waiting_on_redis_leaves_the_gauges_at_0() {
    let Some(server) = RedisServer::start("cancel_gauges") else {
        return;
    };
    let dir = TempDir::new("redis-cancel-gauges");
    let p = start(&dir, &server.url(), &["--redis-timeout-ms", "30000"]);
    let mut c = p.client().await;
    server.pause();
    let call = tokio::spawn(async move {
        c.should_rate_limit(req("shared", vec![desc(&[("user", "cancelled")])]))
            .await
    });
    const BYTES: &str = r#"tollgate_rls_redis_waiting_bytes{port="grpc"}"#;
    let proc = &p;
    wait_until("the call waits on the frozen Redis", move || async move {
        proc.metric("tollgate_rls_redis_waiting").await == 1 && proc.metric(BYTES).await > 0
    })
    .await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    wait_until(
        "the cancelled call is counted in neither gauge",
        move || async move {
            proc.metric("tollgate_rls_redis_waiting").await == 0 && proc.metric(BYTES).await == 0
        },
    )
    .await;
    server.resume();
}

/// The fixed-window baseline waits on Redis too: a call to a frozen Redis counts in
/// `waiting_on_redis` (and the `tollgate_rls_redis_waiting` gauge) until it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_window_call_waiting_on_redis_is_counted() {
    use tollgate_rls::engine::{Backend, FixedWindowBackend};
    use tollgate_rls::service::{Code, Service};
    let Some(server) = RedisServer::start("fixed_window_waiting") else {
        return;
    };
    let backend = FixedWindowBackend::connect(&server.url()).await.unwrap();
    let service = std::sync::Arc::new(Service::new(
        load(CONFIG),
        Backend::FixedWindow(backend),
        false,
    ));
    let call = user_x();
    server.pause();
    let waiting = {
        let service = service.clone();
        tokio::spawn(async move { service.should_rate_limit(&call).await })
    };
    let planned = &service;
    wait_until("the call waits on the frozen Redis", move || async move {
        planned.waiting_on_redis() == 1
    })
    .await;
    server.resume();
    let r = waiting.await.unwrap().unwrap();
    assert_eq!(r.overall, Code::Ok, "{r:?}");
    assert_eq!(service.waiting_on_redis(), 0);
}

/// One hit of `user: x` in domain `shared` (a limit of `CONFIG`).
fn user_x() -> tollgate_rls::service::Request {
    tollgate_rls::service::Request {
        domain: "shared".into(),
        descriptors: vec![tollgate_rls::service::Descriptor {
            entries: vec![("user".into(), "x".into())],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}
