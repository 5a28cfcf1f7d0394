//! The example server's `--limit` with `--key` in process: each API key carries both quotas of
//! `--limit 5/s:5 --limit 20/min:20` (a `KeyedMultiLimiter`), isolated from every other key,
//! with the policy headers of a policy's decision (one `RateLimit-Policy` item per quota,
//! `RateLimit` for the tightest, `Retry-After` the slowest wait rounded up).

mod support;

use std::time::Instant;

use support::{
    client, retry_after, sf_items, sf_param, tightest, until_refused, until_the_minute_refuses,
    Server,
};

const POLICY: &str = "\"5-per-1s\";q=5;w=1, \"20-per-60s\";q=20;w=60";

#[tokio::test]
async fn each_api_key_carries_both_limits_in_process() {
    let server = Server::start(&[
        "--limit",
        "5/s:5",
        "--limit",
        "20/min:20",
        "--key",
        "header:x-api-key",
    ]);
    let (c, url) = (client(), server.url());
    let start = Instant::now();
    let (alice, h) = until_refused(&c, &url, &[("x-api-key", "alice")]).await;
    let bound = |t: Instant| 5 + (5.0 * t.elapsed().as_secs_f64()).ceil() as u64;
    assert!((5..=bound(start)).contains(&alice), "alice: {alice}");
    assert_eq!(h["ratelimit-policy"], POLICY);
    assert_eq!(tightest(&h), "5-per-1s");
    assert_eq!(retry_after(&h), 1, "the second's wait, rounded up");
    // Bob has both quotas of his own: his whole burst while alice is refused.
    let bob_start = Instant::now();
    let (bob, hb) = until_refused(&c, &url, &[("x-api-key", "bob")]).await;
    assert!((5..=bound(bob_start)).contains(&bob), "bob: {bob}");
    assert_eq!(hb["ratelimit-policy"], POLICY);
    // Alice's minute: sleep Retry-After after each refusal until the minute refuses.
    let alice_key = [("x-api-key", "alice")];
    let (more, minute) = until_the_minute_refuses(&c, &url, &alice_key, start, h).await;
    let admitted = alice + more;
    let t = start.elapsed().as_secs_f64();
    assert!(admitted >= 20, "alice reached her minute: {admitted}");
    assert!(admitted as f64 <= 20.0 + t / 3.0, "{admitted} in {t} s");
    let secs = retry_after(&minute);
    assert!((1..=3).contains(&secs), "the minute's wait: {secs}");
    assert_eq!(sf_param(&sf_items(&minute, "ratelimit")[0], "r"), 0);
    // Bob's minute is his own: after a second he holds five again.
    let (bob_again, hb) = until_refused(&c, &url, &[("x-api-key", "bob")]).await;
    assert!(
        bob_again >= 5,
        "bob after alice spent her minute: {bob_again}"
    );
    assert_eq!(tightest(&hb), "5-per-1s");
}
