//! The Redis backend: the example server with `--redis` against a real `redis-server` on a free
//! loopback port (the redis crate's test-support helper starts it; without `redis-server` the
//! test says loudly that it skipped, and fails under `CI=true`).

mod support;

use http::StatusCode;
use support::{client, get, Server};
use tollgate_testkit::redis_server::RedisServer;

#[tokio::test]
async fn two_servers_share_one_limit_through_redis() {
    let Some(mut redis) = RedisServer::start("two_servers_share_one_limit_through_redis") else {
        return;
    };
    let url = redis.url();
    let flags = [
        "--redis",
        &url,
        "--rate",
        "1/h",
        "--burst",
        "3",
        "--key",
        "header:x-api-key",
    ];
    let a = Server::start(&flags);
    let b = Server::start(&flags);
    let c = client();
    let alice = [("x-api-key", "alice")];
    for (server, expected) in [
        (&a, StatusCode::OK),
        (&b, StatusCode::OK),
        (&a, StatusCode::OK),
        (&b, StatusCode::TOO_MANY_REQUESTS),
        (&a, StatusCode::TOO_MANY_REQUESTS),
    ] {
        let (r, _) = get(&c, &server.url(), &alice).await;
        assert_eq!(r.status(), expected, "one limit across both servers");
        if expected == StatusCode::TOO_MANY_REQUESTS {
            let h = r.headers();
            let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
            assert!(
                (3590..=3600).contains(&retry),
                "one token per hour: {retry}"
            );
            let limit: sfv::List = sfv::Parser::new(h["ratelimit"].as_bytes())
                .parse_list()
                .unwrap();
            let sfv::ListEntry::Item(item) = &limit[0] else {
                panic!("an item")
            };
            assert_eq!(
                item.params
                    .get("r")
                    .and_then(|v| v.as_integer())
                    .map(i64::from),
                Some(0)
            );
            assert_eq!(h["ratelimit-policy"], "\"default\";q=3;w=10800");
        }
    }
    let (r, _) = get(&c, &b.url(), &[("x-api-key", "bob")]).await;
    assert_eq!(r.status(), StatusCode::OK, "another key has its own limit");

    // Redis gone: the limiter's policy (fail closed by default) answers, within its timeout,
    // with a Retry-After and no RateLimit fields (no limiter knew the bucket).
    redis.kill();
    let (r, _) = get(&c, &a.url(), &[("x-api-key", "carol")]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_some());
    assert!(r.headers().get("ratelimit").is_none());
}
