//! Every semantic of `ShouldRateLimit`, through a tonic client against the service in-process
//! on a `ManualClock` (time moves only when a test advances it).

mod support;

use std::time::Duration;
use support::*;

const CONFIG: &str = r#"
domain: d
descriptors:
  # A bucket per user: 3 a minute.
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: general}
  - key: route
    value: /a
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: plan
    value: gold
    rate_limits:
      - {unit: second, requests_per_unit: 10, name: per_second}
      - {unit: minute, requests_per_unit: 20, name: per_minute}
  - key: open
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: twin
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: burst
    rate_limit: {unit: minute, requests_per_unit: 60, burst: 5}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces: [{name: general}]
"#;

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

#[tokio::test]
async fn a_bucket_admits_its_burst_then_one_per_interval_and_the_named_wait_is_exact() {
    let mut s = Rls::start(CONFIG).await;
    let u = || req("d", vec![desc(&[("user", "alice")])]);
    for left in [2, 1, 0] {
        let r = s.ok(u()).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(brief(&r)[0].1, left);
    }
    let r = s.ok(u()).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r), vec![(OVER, 0, Some(20))], "one token every 20 s");
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (3, 2, "general")
    );
    // Retried 1 ns before the named wait: refused, with 1 s (rounded up) to go.
    s.clock.advance(Duration::from_secs(20) - ns(1));
    let r = s.ok(u()).await;
    assert_eq!(brief(&r), vec![(OVER, 0, Some(1))]);
    // At exactly the named wait: admitted.
    s.clock.advance(ns(1));
    let r = s.ok(u()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(brief(&r), vec![(OK, 0, Some(60))]);
    // Another user has a bucket of its own.
    assert_eq!(
        s.ok(req("d", vec![desc(&[("user", "bob")])]))
            .await
            .overall_code,
        OK
    );
}

#[tokio::test]
async fn no_double_burst_across_a_unit_boundary() {
    let mut s = Rls::start(CONFIG).await;
    // A fixed window of 60 a minute admits 60 at 0:59 and 60 more at 1:00. The bucket admits
    // its burst (5) and then one a second, whatever the wall clock's minute.
    let mut admitted = 0;
    for step in 0..120 {
        if step > 0 {
            s.clock.advance(Duration::from_millis(500));
        }
        for _ in 0..4 {
            let r = s.ok(req("d", vec![desc(&[("burst", "k")])])).await;
            admitted += usize::from(r.overall_code == OK);
        }
    }
    // 59.5 s: the burst and 59 more tokens.
    assert_eq!(admitted, 5 + 59);
}

#[tokio::test]
async fn hits_addend_per_request_and_per_descriptor() {
    let mut s = Rls::start(CONFIG).await;
    let mut r = req("d", vec![desc(&[("user", "h")])]);
    r.hits_addend = 2;
    assert_eq!(brief(&s.ok(r.clone()).await), vec![(OK, 1, Some(40))]);
    // The descriptor's own value wins over the request's.
    r.descriptors = vec![desc_hits(&[("user", "h")], 1)];
    assert_eq!(brief(&s.ok(r.clone()).await), vec![(OK, 0, Some(60))]);
    // 0: a check that takes nothing; refused while not even one hit would pass.
    let check = req("d", vec![desc_hits(&[("user", "h")], 0)]);
    let out = s.ok(check.clone()).await;
    assert_eq!(out.overall_code, OVER);
    assert_eq!(brief(&out), vec![(OVER, 0, Some(20))]);
    s.clock.advance(Duration::from_secs(20));
    for _ in 0..3 {
        assert_eq!(
            brief(&s.ok(check.clone()).await),
            vec![(OK, 1, Some(40))],
            "takes nothing"
        );
    }
    // More hits than the burst: refused, never admitted.
    let huge = req("d", vec![desc_hits(&[("user", "h2")], u64::MAX)]);
    let out = s.ok(huge).await;
    assert_eq!(out.overall_code, OVER);
    assert_eq!(
        brief(&out),
        vec![(OVER, 0, Some(60))],
        "one unit: never at these hits"
    );
    assert_eq!(
        brief(&s.ok(req("d", vec![desc(&[("user", "h2")])])).await)[0].1,
        2
    );
}

#[tokio::test]
async fn a_request_is_all_or_nothing() {
    let mut s = Rls::start(CONFIG).await;
    // Drain route /a (2 a second).
    let mut r = req("d", vec![desc(&[("route", "/a")])]);
    r.hits_addend = 2;
    assert_eq!(s.ok(r).await.overall_code, OK);
    // alice and /a together: /a refuses, so alice is not debited either.
    let both = req(
        "d",
        vec![desc(&[("user", "alice")]), desc(&[("route", "/a")])],
    );
    for _ in 0..5 {
        let out = s.ok(both.clone()).await;
        assert_eq!(out.overall_code, OVER);
        assert_eq!(brief(&out), vec![(OK, 3, Some(0)), (OVER, 0, Some(1))]);
    }
    // Two per-value limits, the refusing one second.
    let mut drain = req("d", vec![desc(&[("burst", "k")])]);
    drain.hits_addend = 5;
    assert_eq!(s.ok(drain).await.overall_code, OK);
    let pair = req(
        "d",
        vec![desc(&[("user", "alice")]), desc(&[("burst", "k")])],
    );
    let out = s.ok(pair).await;
    assert_eq!(brief(&out), vec![(OK, 3, Some(0)), (OVER, 0, Some(1))]);
    // alice still holds all three.
    let mut alone = req("d", vec![desc(&[("user", "alice")])]);
    alone.hits_addend = 3;
    assert_eq!(s.ok(alone).await.overall_code, OK);
    // The same bucket twice in one request: the hits add up.
    let twice = req(
        "d",
        vec![
            desc(&[("user", "carol")]),
            desc_hits(&[("user", "carol")], 3),
        ],
    );
    let out = s.ok(twice).await;
    assert_eq!(out.overall_code, OVER, "1 + 3 hits exceed a burst of 3");
    assert_eq!(
        brief(&s.ok(req("d", vec![desc(&[("user", "carol")])])).await)[0].1,
        2
    );
}

#[tokio::test]
async fn several_rates_report_the_tightest() {
    let mut s = Rls::start(CONFIG).await;
    let gold = |h: u64| req("d", vec![desc_hits(&[("plan", "gold")], h)]);
    let out = s.ok(gold(10)).await;
    assert_eq!(out.overall_code, OK);
    let st = &out.statuses[0];
    assert_eq!(st.current_limit.as_ref().unwrap().name, "per_second");
    assert_eq!(st.limit_remaining, 0);
    s.clock.advance(Duration::from_secs(1));
    let out = s.ok(gold(10)).await;
    assert_eq!(out.overall_code, OK);
    assert_eq!(
        out.statuses[0].current_limit.as_ref().unwrap().name,
        "per_minute"
    );
    // The per-minute rate refuses now (a third of a token back): it is the one named.
    s.clock.advance(Duration::from_secs(1));
    let out = s.ok(gold(1)).await;
    assert_eq!(out.overall_code, OVER);
    let st = &out.statuses[0];
    assert_eq!(st.current_limit.as_ref().unwrap().name, "per_minute");
    assert_eq!(st.duration_until_reset.as_ref().unwrap().seconds, 1);
}

#[tokio::test]
async fn unlimited_blocked_and_unmatched() {
    let mut s = Rls::start(CONFIG).await;
    for _ in 0..10 {
        let out = s.ok(req("d", vec![desc(&[("open", "x")])])).await;
        assert_eq!(out.overall_code, OK);
        assert_eq!(out.statuses[0].limit_remaining, u32::MAX);
        assert!(out.statuses[0].current_limit.is_none());
    }
    // requests_per_unit 0 refuses every hit, with one unit to wait; the request's other
    // limits are not debited.
    let out = s
        .ok(req(
            "d",
            vec![desc(&[("blocked", "x")]), desc(&[("user", "dave")])],
        ))
        .await;
    assert_eq!(out.overall_code, OVER);
    assert_eq!(brief(&out), vec![(OVER, 0, Some(3600)), (OK, 3, Some(0))]);
    assert_eq!(
        brief(&s.ok(req("d", vec![desc(&[("user", "dave")])])).await)[0].1,
        2
    );
    // No match (unknown key, unknown domain, deeper request than config): no limit.
    for r in [
        req("d", vec![desc(&[("nothing", "x")])]),
        req("other", vec![desc(&[("user", "x")])]),
        req("d", vec![desc(&[("user", "x"), ("extra", "y")])]),
        req("d", vec![desc(&[])]),
    ] {
        let out = s.ok(r).await;
        assert_eq!(out.overall_code, OK);
        assert_eq!(brief(&out), vec![(OK, 0, None)]);
    }
}

#[tokio::test]
async fn replaces_leaves_the_replaced_limit_out() {
    let mut s = Rls::start(CONFIG).await;
    let both = req(
        "d",
        vec![desc(&[("user", "erin")]), desc(&[("vip", "erin")])],
    );
    for _ in 0..10 {
        let out = s.ok(both.clone()).await;
        assert_eq!(out.overall_code, OK);
        assert!(
            out.statuses[0].current_limit.is_none(),
            "general is replaced"
        );
        assert_eq!(
            out.statuses[1]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            100
        );
    }
    // erin's general bucket was never touched.
    let mut r = req("d", vec![desc(&[("user", "erin")])]);
    r.hits_addend = 3;
    assert_eq!(s.ok(r).await.overall_code, OK);
}

fn metric(page: &str, name: &str, labels: &str) -> u64 {
    let prefix = format!("{name}{{{labels}}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

const SHADOW: &str = r#"
domain: shadow
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: twin
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

#[tokio::test]
async fn shadow_mode_answers_ok_counts_what_an_enforcing_twin_refuses_and_blocks_nothing() {
    let mut s = Rls::start(SHADOW).await;
    let mut twin_refusals = 0;
    for i in 0..12 {
        if i % 4 == 0 {
            s.clock.advance(Duration::from_secs(25));
        }
        let sh = s.ok(req("shadow", vec![desc(&[("shadowed", "k")])])).await;
        assert_eq!(sh.overall_code, OK);
        assert_eq!(sh.statuses[0].code, OK);
        let tw = s.ok(req("shadow", vec![desc(&[("twin", "k")])])).await;
        twin_refusals += u64::from(tw.overall_code == OVER);
    }
    assert!(twin_refusals > 3);
    let (_, page) = http(s.ready.http, "GET", "/metrics", "").await;
    let tracked: f64 = page
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_rls_tracked_buckets "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(tracked >= 2.0, "{tracked}");
    // Set by every read of the page (any test's, in this process): present, whatever values.
    for series in [
        "tollgate_rls_retired_tables ",
        "tollgate_rls_retired_buckets ",
    ] {
        assert!(page.lines().any(|l| l.starts_with(series)), "{series}");
    }
    let labels = r#"domain="shadow",descriptor="shadowed""#;
    assert_eq!(
        metric(&page, "tollgate_rls_shadow_mode_total", labels),
        twin_refusals
    );
    assert_eq!(
        metric(
            &page,
            "tollgate_rls_over_limit_total",
            r#"domain="shadow",descriptor="twin""#
        ),
        twin_refusals
    );
    // A shadowed limit that would refuse does not stop an enforced one from being debited...
    let out = s
        .ok(req(
            "shadow",
            vec![desc(&[("shadowed", "k")]), desc(&[("tight", "a")])],
        ))
        .await;
    assert_eq!(out.overall_code, OK);
    assert_eq!(
        s.ok(req("shadow", vec![desc(&[("tight", "a")])]))
            .await
            .overall_code,
        OVER,
        "tight was debited"
    );
    // ...and one that holds is debited even when an enforced limit refuses the request.
    let out = s
        .ok(req(
            "shadow",
            vec![desc(&[("shadowed", "fresh")]), desc(&[("tight", "a")])],
        ))
        .await;
    assert_eq!(out.overall_code, OVER);
    let out = s
        .ok(req("shadow", vec![desc_hits(&[("shadowed", "fresh")], 2)]))
        .await;
    assert_eq!(
        out.statuses[0].limit_remaining, 0,
        "the shadowed bucket lost one"
    );
    s.stop().await;
}

/// A shadow-mode limit of 0 per unit answers `OK` with the reset an enforcing one names (one
/// unit), as envoyproxy/ratelimit names the window's end: never a reset of 0 s, which would
/// tell a client reading Envoy's `x-ratelimit-reset` that the limit resets now.
#[tokio::test]
async fn a_shadowed_limit_of_zero_names_one_unit_as_its_reset() {
    let mut s = Rls::start(
        "domain: z\ndescriptors:\n  - key: shadowed\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 0}\n  - key: enforced\n    rate_limit: {unit: hour, requests_per_unit: 0}\n",
    )
    .await;
    let out = s.ok(req("z", vec![desc(&[("shadowed", "k")])])).await;
    assert_eq!(out.overall_code, OK);
    assert_eq!(brief(&out), vec![(OK, 0, Some(3600))]);
    let out = s.ok(req("z", vec![desc(&[("enforced", "k")])])).await;
    assert_eq!(brief(&out), vec![(OVER, 0, Some(3600))]);
    s.stop().await;
}

#[tokio::test]
async fn global_shadow_answers_ok_and_counts() {
    let mut s = Rls::start_with(
        &SHADOW.replace("domain: shadow", "domain: global_shadow"),
        |o| o.shadow = true,
    )
    .await;
    for _ in 0..5 {
        let out = s
            .ok(req("global_shadow", vec![desc(&[("tight", "x")])]))
            .await;
        assert_eq!(out.overall_code, OK);
    }
    let (_, page) = http(s.ready.http, "GET", "/metrics", "").await;
    assert_eq!(
        metric(
            &page,
            "tollgate_rls_shadow_mode_total",
            r#"domain="global_shadow",descriptor="tight""#
        ),
        4
    );
}

#[tokio::test]
async fn bad_requests_get_a_clear_status_and_big_ones_an_ordinary_decision() {
    let mut s = Rls::start_with(CONFIG, |o| o.max_keys = 10_000).await;
    let invalid = |r: Result<_, tonic::Status>| match r {
        Err(st) => st.code() == tonic::Code::InvalidArgument,
        Ok(_) => false,
    };
    assert!(invalid(s.call(req("", vec![desc(&[("user", "x")])])).await));
    assert!(invalid(s.call(req("d", vec![])).await));
    let mut neg = desc(&[("user", "x")]);
    neg.is_negative_hits = true;
    assert!(invalid(s.call(req("d", vec![neg])).await));
    let mut over = desc(&[("user", "x")]);
    over.limit = Some(Default::default());
    assert!(invalid(s.call(req("d", vec![over])).await));
    let many: Vec<_> = (0..1025)
        .map(|i| desc(&[("user", &i.to_string())]))
        .collect();
    assert!(invalid(s.call(req("d", many)).await));
    // A 60 KB value: its own bucket, decided as any other.
    let big = "v".repeat(60 * 1024);
    let out = s.ok(req("d", vec![desc(&[("user", &big)])])).await;
    assert_eq!(brief(&out), vec![(OK, 2, Some(20))]);
    // A thousand descriptors: an ordinary decision (each its own user).
    let thousand: Vec<_> = (0..1000)
        .map(|i| desc(&[("user", &format!("t{i}"))]))
        .collect();
    let out = s.ok(req("d", thousand)).await;
    assert_eq!(out.overall_code, OK);
    assert_eq!(out.statuses.len(), 1000);
    // Garbage bytes on the gRPC port do not hurt the service.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(s.ready.grpc).await.unwrap();
        let mut rng = tollgate_testkit::rng::Rng(7);
        let junk: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
        let _ = c.write_all(&junk).await;
        let mut buf = [0u8; 256];
        let _ = tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await;
    }
    assert_eq!(
        s.ok(req("d", vec![desc(&[("user", "after")])]))
            .await
            .overall_code,
        OK
    );
}

#[tokio::test]
async fn a_full_table_follows_the_keyed_limiters_rule() {
    // Five limits keep a bucket per value: two values each.
    let mut s = Rls::start_with(CONFIG, |o| o.max_keys = 10).await;
    let drain = |u: &'static str| {
        let mut r = req("d", vec![desc(&[("user", u)])]);
        r.hits_addend = 3;
        r
    };
    assert_eq!(s.ok(drain("a")).await.overall_code, OK);
    assert_eq!(s.ok(drain("b")).await.overall_code, OK);
    // Two values tracked, neither full: a third is refused until one is full again.
    let out = s.ok(req("d", vec![desc(&[("user", "c")])])).await;
    assert_eq!(out.overall_code, OVER);
    s.clock.advance(Duration::from_secs(60));
    assert_eq!(
        s.ok(req("d", vec![desc(&[("user", "c")])]))
            .await
            .overall_code,
        OK
    );
}

/// gRPC health answers `SERVING` for the whole server (`""`), the rate-limit service's full
/// name, and `ratelimit`, the name envoyproxy/ratelimit reports its health under (a probe or an
/// Envoy health check written for it names that one).
#[tokio::test]
async fn grpc_health_answers_for_every_name() {
    let s = Rls::start(CONFIG).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.ready.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    for name in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "ratelimit",
    ] {
        let r = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: name.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"))
            .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{name:?}"
        );
    }
}

#[tokio::test]
async fn json_port_answers_as_envoyproxy_ratelimit_does() {
    let s = Rls::start(CONFIG).await;
    let body = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "json"}]}], "hitsAddend": 2}"#;
    let (code, text) = http(s.ready.http, "POST", "/json", body).await;
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["limitRemaining"], 1);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(v["statuses"][0]["durationUntilReset"], "40s");
    // snake_case accepted; over the limit is 429.
    let snake = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "json"}], "hits_addend": "2"}]}"#;
    let (code, text) = http(s.ready.http, "POST", "/json", snake).await;
    assert_eq!(code, 429, "{text}");
    assert!(text.contains(r#""overallCode":"OVER_LIMIT""#));
    for bad in [
        "{",
        "[]",
        r#"{"domain": "d"}"#,
        r#"{"domain": "", "descriptors": [{}]}"#,
        r#"{"domian": "d"}"#,
    ] {
        let (code, _) = http(s.ready.http, "POST", "/json", bad).await;
        assert_eq!(code, 400, "{bad}");
    }
    let (code, text) = http(s.ready.http, "GET", "/healthcheck", "").await;
    assert_eq!((code, text.trim()), (200, "OK"));
    s.service().drain();
    let (code, _) = http(s.ready.http, "GET", "/healthcheck", "").await;
    assert_eq!(code, 503);
}

/// `response_headers_to_add` as `(name, value)` pairs.
fn headers(
    r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse,
) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// The three RateLimit headers under their default names.
fn rate_limit(limit: u32, remaining: u32, reset: u64) -> Vec<(String, String)> {
    vec![
        ("RateLimit-Limit".into(), limit.to_string()),
        ("RateLimit-Remaining".into(), remaining.to_string()),
        ("RateLimit-Reset".into(), reset.to_string()),
    ]
}

/// The RateLimit headers (`--response-headers`) are envoyproxy/ratelimit's: the status with a
/// limit and the fewest tokens left (the first of a tie), or the last refusing one; its
/// `requests_per_unit`, whole tokens left, and its reset in whole seconds (until the bucket is
/// full, or the request's wait); none without a limit; on `/json` as on gRPC.
#[tokio::test]
async fn response_headers_describe_the_status_closest_to_its_limit() {
    use tollgate_rls::service::ResponseHeaders;
    let mut s = Rls::start_with(CONFIG, |o| {
        o.response_headers = Some(ResponseHeaders::default());
    })
    .await;
    // 3 a minute, one hit: 2 left, full again in 20 s.
    let r = s.ok(req("d", vec![desc(&[("user", "a")])])).await;
    assert_eq!(headers(&r), rate_limit(3, 2, 20));
    // No limit, unlimited: nothing to describe.
    let r = s
        .ok(req(
            "d",
            vec![desc(&[("open", "x")]), desc(&[("nothing", "x")])],
        ))
        .await;
    assert_eq!(headers(&r), vec![]);
    // The fewest left wins, whatever its place; 2 a second is full again in 0.5 s: 1 s.
    let r = s
        .ok(req(
            "d",
            vec![
                desc(&[("open", "x")]),
                desc(&[("user", "b")]),
                desc(&[("route", "/a")]),
            ],
        ))
        .await;
    assert_eq!(headers(&r), rate_limit(2, 1, 1));
    // A tie: the first of them (1 left of 3 a minute, 40 s; 1 left of 2 a minute, 30 s).
    let r = s
        .ok(req(
            "d",
            vec![desc_hits(&[("user", "c")], 2), desc(&[("twin", "c")])],
        ))
        .await;
    assert_eq!(headers(&r), rate_limit(3, 1, 40));
    let r = s
        .ok(req(
            "d",
            vec![desc(&[("twin", "d")]), desc_hits(&[("user", "d")], 2)],
        ))
        .await;
    assert_eq!(headers(&r), rate_limit(2, 1, 30));
    // Both drained (a tie at 0: the first), then both refusing: the last of them, with the
    // request's wait (30 s, the longer), where the first with the fewest left would be the
    // first.
    let both = |u, t| {
        req(
            "d",
            vec![
                desc_hits(&[("user", "e")], u),
                desc_hits(&[("twin", "e")], t),
            ],
        )
    };
    let r = s.ok(both(3, 2)).await;
    assert_eq!(headers(&r), rate_limit(3, 0, 60));
    let r = s.ok(both(1, 1)).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(brief(&r), vec![(OVER, 0, Some(30)), (OVER, 0, Some(30))]);
    assert_eq!(headers(&r), rate_limit(2, 0, 30));
    // A shadow-mode limit that would refuse reads 0 left: described before an enforced one
    // with tokens left (its reset: until its bucket is full, 60 s).
    for _ in 0..2 {
        s.ok(req("d", vec![desc(&[("shadowed", "f")])])).await;
    }
    let r = s
        .ok(req(
            "d",
            vec![desc(&[("user", "f")]), desc(&[("shadowed", "f")])],
        ))
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(headers(&r), rate_limit(2, 0, 60));
    // The same on /json, as envoyproxy/ratelimit's protojson writes the field.
    let body = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "g"}]}]}"#;
    let (code, text) = http(s.ready.http, "POST", "/json", body).await;
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["responseHeadersToAdd"],
        serde_json::json!([
            {"key": "RateLimit-Limit", "value": "3"},
            {"key": "RateLimit-Remaining", "value": "2"},
            {"key": "RateLimit-Reset", "value": "20"},
        ])
    );
    // Refused on /json: 429, the headers of the refusing limit.
    let body = concat!(
        r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "g"}]}], "#,
        r#""hitsAddend": 3}"#
    );
    let (code, text) = http(s.ready.http, "POST", "/json", body).await;
    assert_eq!(code, 429, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["responseHeadersToAdd"][1]["value"], "0");
    assert_eq!(v["responseHeadersToAdd"][2]["value"], "20");
    // 10 s and 1 ns after the first hit on "a", a second: 1 whole token left, full again in
    // 30 s less 1 ns, rounded up.
    s.clock.advance(Duration::from_secs(10) + ns(1));
    let r = s.ok(req("d", vec![desc(&[("user", "a")])])).await;
    assert_eq!(headers(&r), rate_limit(3, 1, 30));
}

/// Off unless asked for: no RateLimit headers on either port.
#[tokio::test]
async fn response_headers_are_off_by_default() {
    let mut s = Rls::start(CONFIG).await;
    let r = s.ok(req("d", vec![desc(&[("user", "a")])])).await;
    assert_eq!(headers(&r), vec![]);
    let body = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}"#;
    let (code, text) = http(s.ready.http, "POST", "/json", body).await;
    assert_eq!(code, 200, "{text}");
    assert!(!text.contains("responseHeadersToAdd"), "{text}");
}

/// The gRPC port bounds the streams one HTTP/2 connection may hold open: each open stream may
/// buffer a message of up to 4 MiB while it arrives, so without a bound one client connection
/// could make the process buffer without limit (tonic's builder, left unset, turns off
/// hyper's default of 200).
#[tokio::test]
async fn the_grpc_port_bounds_the_streams_of_a_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Rls::start(CONFIG).await;
    let mut c = tokio::net::TcpStream::connect(s.ready.grpc).await.unwrap();
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    // The server's first SETTINGS frame (not an ACK): its entries, (id, value).
    let settings = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut head = [0u8; 9];
            c.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut body = vec![0u8; len];
            c.read_exact(&mut body).await.unwrap();
            if head[3] == 0x4 && head[4] & 0x1 == 0 {
                return body
                    .chunks_exact(6)
                    .map(|e| {
                        (
                            u16::from_be_bytes([e[0], e[1]]),
                            u32::from_be_bytes([e[2], e[3], e[4], e[5]]),
                        )
                    })
                    .collect::<Vec<_>>();
            }
        }
    })
    .await
    .expect("the server's SETTINGS in time");
    // SETTINGS_MAX_CONCURRENT_STREAMS is 0x3.
    let max = settings.iter().find(|(id, _)| *id == 0x3).map(|(_, v)| *v);
    assert!(
        matches!(max, Some(1..=1024)),
        "max concurrent streams: {max:?} in {settings:?}"
    );
}

/// A config of rates the core holds inexactly (`Quota::is_exact`): 7 and 31 per month, 7 per
/// year.
const INEXACT: &str = "domain: d\ndescriptors:\n  \
    - {key: m7, rate_limit: {unit: month, requests_per_unit: 7}}\n  \
    - {key: m31, rate_limit: {unit: month, requests_per_unit: 31}}\n  \
    - {key: y7, rate_limit: {unit: year, requests_per_unit: 7}}\n";

/// `(key, requests_per_unit, unit in seconds, unit in the proto)` of `INEXACT`.
const INEXACT_RATES: [(&str, u32, u64, i32); 3] = [
    ("m7", 7, 30 * 86_400, 5),
    ("m31", 31, 30 * 86_400, 5),
    ("y7", 7, 365 * 86_400, 6),
];

/// Inexact rates load on the local backend and are served under their own rate.
#[tokio::test]
async fn inexact_rates_are_served_on_the_local_backend() {
    let mut s = Rls::start(INEXACT).await;
    for (key, n, _, unit) in INEXACT_RATES {
        let r = s.ok(req("d", vec![desc(&[(key, "x")])])).await;
        assert_eq!(r.overall_code, OK, "{key}");
        let limit = r.statuses[0].current_limit.clone().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (n, unit), "{key}");
    }
}

/// The same rates are decided as the core decides them, never above the rate. Their quotas
/// are not exact (`Quota::is_exact`: the reduced rate does not fit 100 years at nanosecond
/// precision), so depending on the clock reading a full bucket may sit less than one state
/// unit below the burst, rounding toward refusing: the burst's last token then waits for that
/// fraction (a wait reported as 1 s). Within that second the whole burst is admitted; each
/// later token comes one interval (the unit over the rate) after the one before, to the
/// second.
#[tokio::test]
async fn inexact_rates_are_decided_on_the_local_backend() {
    let mut s = Rls::start(INEXACT).await;
    for (key, n, unit_s, _) in INEXACT_RATES {
        let u = || req("d", vec![desc(&[(key, "x")])]);
        let mut admitted = 0;
        let refused = loop {
            let r = s.ok(u()).await;
            if r.overall_code != OK {
                break r;
            }
            admitted += 1;
        };
        assert!(admitted == n || admitted == n - 1, "{key}: {admitted}");
        if admitted < n {
            assert_eq!(brief(&refused), vec![(OVER, 0, Some(1))], "{key}");
            s.clock.advance(Duration::from_secs(1));
            assert_eq!(s.ok(u()).await.overall_code, OK, "{key}: the last token");
        }
        let interval = unit_s.div_ceil(u64::from(n));
        let r = s.ok(u()).await;
        let (code, _, wait) = brief(&r)[0];
        let wait = wait.unwrap() as u64;
        assert!(
            code == OVER && wait.abs_diff(interval) <= 1,
            "{key}: {wait}"
        );
        s.clock.advance(Duration::from_secs(wait - 1));
        assert_eq!(s.ok(u()).await.overall_code, OVER, "{key}: a second early");
        s.clock.advance(Duration::from_secs(1));
        assert_eq!(s.ok(u()).await.overall_code, OK, "{key}: at the wait");
        assert_eq!(
            s.ok(u()).await.overall_code,
            OVER,
            "{key}: one token earned"
        );
    }
}
