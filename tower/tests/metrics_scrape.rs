//! The example server's `--metrics` and `--shadow`, scraped by a real HTTP client: the scraped
//! counters equal the responses the client saw, and shadow mode counts exactly what
//! enforcement refused while answering every request with 200.

mod support;

use std::collections::BTreeMap;

use http::StatusCode;
use support::{client, get, Server};

/// One scrape: each sample line `name{labels} value`, by its `name{labels}` text.
fn scrape_of(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("`series value`");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// What the client saw and what the server's scrape said.
struct Run {
    ok: u64,
    too_many: u64,
    scrape: BTreeMap<String, f64>,
    text: String,
}

impl Run {
    fn get(&self, series: &str) -> f64 {
        self.scrape.get(series).copied().unwrap_or(0.0)
    }

    fn decisions(&self, outcome: &str) -> f64 {
        self.get(&format!(
            "tollgate_decisions_total{{limiter=\"http\",outcome=\"{outcome}\"}}"
        ))
    }
}

/// `requests` GETs with the `x-api-key` of each round-robin, then two scrapes (the second is
/// returned: the first scrape must not have been counted).
async fn run(flags: &[&str], keys: &[&str], requests: usize) -> Run {
    let server = Server::start(flags);
    let c = client();
    let (mut ok, mut too_many) = (0, 0);
    for i in 0..requests {
        let (r, _) = get(&c, &server.url(), &[("x-api-key", keys[i % keys.len()])]).await;
        match r.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => too_many += 1,
            other => panic!("unexpected {other}"),
        }
    }
    let url = format!("{}metrics", server.url());
    let (first, _) = get(&c, &url, &[]).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (r, text) = get(&c, &url, &[]).await;
    assert_eq!(r.status(), StatusCode::OK);
    Run {
        ok,
        too_many,
        scrape: scrape_of(&text),
        text,
    }
}

// 1/h: nothing refills during a test, so the admitted count is the burst, in every run.
const GLOBAL: &[&str] = &[
    "--rate",
    "1/h",
    "--burst",
    "10",
    "--key",
    "global",
    "--metrics",
];

#[tokio::test]
async fn scraped_decisions_equal_the_responses_and_the_histogram_counts_the_429s() {
    let run = run(GLOBAL, &["-"], 40).await;
    assert_eq!((run.ok, run.too_many), (10, 30), "{}", run.text);
    assert_eq!(run.decisions("admitted"), run.ok as f64, "{}", run.text);
    assert_eq!(
        run.decisions("refused"),
        run.too_many as f64,
        "{}",
        run.text
    );
    assert_eq!(run.decisions("shadow_refused"), 0.0);
    let count = "tollgate_retry_after_seconds_count{limiter=\"http\"}";
    assert_eq!(run.get(count), run.too_many as f64, "{}", run.text);
    // Each wait is under an hour (1/h refills one token per hour): all in the last bucket.
    let hour = "tollgate_retry_after_seconds_bucket{limiter=\"http\",le=\"3600\"}";
    assert_eq!(run.get(hour), run.too_many as f64, "{}", run.text);
    let minute = "tollgate_retry_after_seconds_bucket{limiter=\"http\",le=\"600\"}";
    assert_eq!(run.get(minute), 0.0, "{}", run.text);
}

/// A policy of two quotas: after three admissions the first (a burst of 3 per hour) is empty
/// while the second (a burst of 5 per day) still holds two, so every refusal is the first's.
#[tokio::test]
async fn a_policy_counts_its_refusals_by_the_quota_that_refused() {
    let flags = [
        "--limit",
        "3/h:3",
        "--limit",
        "100/d:5",
        "--key",
        "global",
        "--metrics",
    ];
    let run = run(&flags, &["-"], 12).await;
    assert_eq!((run.ok, run.too_many), (3, 9), "{}", run.text);
    assert_eq!(run.decisions("refused"), 9.0, "{}", run.text);
    let by = |q: &str| {
        run.get(&format!(
            "tollgate_policy_refusals_total{{limiter=\"http\",quota=\"{q}\"}}"
        ))
    };
    assert_eq!((by("0"), by("1")), (9.0, 0.0), "{}", run.text);
    // Only the policy's two quotas have a series: a `quota="2"` would name a quota it lacks.
    let second = "tollgate_policy_refusals_total{limiter=\"http\",quota=\"1\"}";
    assert!(run.scrape.contains_key(second), "{}", run.text);
    for absent in ["2", "3"] {
        let series = format!("quota=\"{absent}\"");
        assert!(!run.text.contains(&series), "{}", run.text);
    }
}

/// A single-quota layer registers no per-quota series.
#[tokio::test]
async fn a_single_quota_layer_has_no_policy_series() {
    let run = run(GLOBAL, &["-"], 12).await;
    assert!(
        !run.text.contains("tollgate_policy_refusals_total"),
        "{}",
        run.text
    );
}

#[tokio::test]
async fn shadow_answers_200_and_counts_what_enforcement_refused() {
    let enforced = run(GLOBAL, &["-"], 40).await;
    let shadow_flags = [GLOBAL, &["--shadow"]].concat();
    let shadow = run(&shadow_flags, &["-"], 40).await;
    assert_eq!((shadow.ok, shadow.too_many), (40, 0), "{}", shadow.text);
    assert_eq!(shadow.decisions("shadow_refused"), enforced.too_many as f64);
    assert_eq!(shadow.decisions("admitted"), enforced.ok as f64);
    assert_eq!(shadow.decisions("refused"), 0.0);
    // The waits it would have sent.
    let count = "tollgate_retry_after_seconds_count{limiter=\"http\"}";
    assert_eq!(shadow.get(count), enforced.too_many as f64);
}

#[tokio::test]
async fn per_key_table_gauges_and_no_key_in_any_label() {
    let flags = [
        "--rate",
        "1/h",
        "--burst",
        "4",
        "--key",
        "header:x-api-key",
        "--metrics",
    ];
    let keys = ["alice", "bob", "carol"];
    let run = run(&flags, &keys, 30).await;
    assert_eq!((run.ok, run.too_many), (12, 18), "{}", run.text);
    assert_eq!(run.decisions("admitted"), 12.0);
    assert_eq!(run.decisions("refused"), 18.0);
    assert_eq!(
        run.get("tollgate_keys{limiter=\"http-keys\"}"),
        3.0,
        "{}",
        run.text
    );
    assert_eq!(
        run.get("tollgate_keys_capacity{limiter=\"http-keys\"}"),
        (1u64 << 20) as f64
    );
    for key in keys {
        assert!(!run.text.contains(key), "{key} leaked into {}", run.text);
    }
}

/// `--limit` per key: the table of policies has the same gauges under `http-keys` as a table of
/// one quota (the README's `--metrics` contract), and no key in any label either.
#[tokio::test]
async fn per_key_policy_table_gauges_and_no_key_in_any_label() {
    let flags = [
        "--limit",
        "3/h:3",
        "--limit",
        "100/d:5",
        "--key",
        "header:x-api-key",
        "--metrics",
    ];
    let keys = ["alice", "bob"];
    let run = run(&flags, &keys, 10).await;
    assert_eq!((run.ok, run.too_many), (6, 4), "{}", run.text);
    assert_eq!(run.decisions("refused"), 4.0, "{}", run.text);
    assert_eq!(
        run.get("tollgate_keys{limiter=\"http-keys\"}"),
        2.0,
        "{}",
        run.text
    );
    assert_eq!(
        run.get("tollgate_keys_capacity{limiter=\"http-keys\"}"),
        (1u64 << 20) as f64,
        "{}",
        run.text
    );
    for key in keys {
        assert!(!run.text.contains(key), "{key} leaked into {}", run.text);
    }
}

#[tokio::test]
async fn without_metrics_there_is_no_metrics_route() {
    let server = Server::start(&["--rate", "1/h", "--burst", "1", "--key", "global"]);
    let c = client();
    let (r, _) = get(&c, &format!("{}metrics", server.url()), &[]).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}
