//! The Prometheus series (through the `metrics` facade; rendered at `GET /metrics`).
//!
//! | series | kind | labels | what |
//! |---|---|---|---|
//! | `tollgate_rls_hits_total` | counter | `domain`, `descriptor` | hits of matched limits |
//! | `tollgate_rls_within_limit_total` | counter | `domain`, `descriptor` | hits admitted |
//! | `tollgate_rls_near_limit_total` | counter | `domain`, `descriptor` | hits admitted that left at most a fifth of the burst (80 % used) |
//! | `tollgate_rls_over_limit_total` | counter | `domain`, `descriptor` | hits refused by the limit (shadow mode included) |
//! | `tollgate_rls_shadow_mode_total` | counter | `domain`, `descriptor` | hits a shadow-mode limit would have refused (answered `OK`) |
//! | `tollgate_rls_requests_total` | counter | `api`, `result` | requests: `ok`, `over_limit`, `invalid`, `unavailable` |
//! | `tollgate_rls_request_duration_seconds` | histogram | `api` | time to decide a request (`grpc`, `json`) |
//! | `tollgate_rls_config_load_total` | counter | `result` | config loads: `ok`, `error` |
//! | `tollgate_rls_tracked_buckets` | gauge | | buckets the local tables track (set when /metrics is read) |
//! | `tollgate_rls_retired_tables` | gauge | | tables kept aside for limits a reload removed, so that a limit that comes back resumes (set when /metrics is read) |
//! | `tollgate_rls_retired_buckets` | gauge | | buckets those retired tables track (set when /metrics is read) |
//! | `tollgate_rls_redis_up` | gauge | | 1 after a Redis decision, 0 after a failed one |
//! | `tollgate_rls_redis_failures_total` | counter | `policy` | decisions Redis failed, by the policy that answered |
//! | `tollgate_rls_connections` | gauge | `port` | connections open (`grpc`, `http`) |
//! | `tollgate_rls_redis_waiting` | gauge | | requests waiting on a Redis decision now |
//! | `tollgate_rls_redis_waiting_bytes` | gauge | `port` | bytes the requests waiting on Redis hold of the port's waiting budget (`grpc`, `http`; each port's budget is `--max-buffered-mib`: past it a request about to wait is refused) |
//! | `tollgate_rls_connection_limits_total` | counter | `port`, `limit` | a connection limit acted: `max_connections` (the port stopped accepting at the cap), `header_timeout`, `body_timeout`, `idle_timeout` (connections closed or requests answered for it), `close_grace` (a graceful close cut short) |
//!
//! `descriptor` is the limit's path in the config (`key_value.key2`): a request's own values
//! appear only under `detailed_metric: true` or `value_to_metric: true`. tollgate-redis's
//! own series (`tollgate_redis_round_trip_seconds`, `tollgate_redis_breaker_transitions_total`,
//! ...) carry `limiter="rls"`.

use crate::engine::OnRedisError;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder once per process and returns its handle (a second call
/// returns the first's; a process with another recorder installed gets a handle that renders
/// nothing of ours).
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[
                        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
                        0.05, 0.1, 0.25, 1.0,
                    ],
                )
                .expect("non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a test harness): ours then sees
            // nothing, which only /metrics shows.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// A limit's counters, resolved once (for a limit whose labels never change).
pub struct Counters {
    hits: metrics::Counter,
    within: metrics::Counter,
    near: metrics::Counter,
    over: metrics::Counter,
    shadow: metrics::Counter,
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}

/// Which of a limit's counters a decision adds its hits to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// `hits_total` only.
    Total,
    /// Refused (`over_limit`; `shadow_mode` too when shadowed).
    Over {
        /// In shadow mode.
        shadow: bool,
    },
    /// Admitted (`within_limit`; `near_limit` too when near).
    Within {
        /// At most a fifth of the burst left.
        near: bool,
    },
}

impl Counters {
    fn new(labels: &[(&'static str, String); 2]) -> Counters {
        let c = |name: &'static str| metrics::counter!(name, &labels[..]);
        Counters {
            hits: c("tollgate_rls_hits_total"),
            within: c("tollgate_rls_within_limit_total"),
            near: c("tollgate_rls_near_limit_total"),
            over: c("tollgate_rls_over_limit_total"),
            shadow: c("tollgate_rls_shadow_mode_total"),
        }
    }

    fn add(&self, hit: Hit, n: u64) {
        // A client's hits_addend is any u64: counted up to u32::MAX a call, so that the
        // counters (which wrap) cannot be wrapped by a few requests.
        let n = n.min(u64::from(u32::MAX));
        self.hits.increment(n);
        match hit {
            Hit::Total => {}
            Hit::Over { shadow } => {
                self.over.increment(n);
                if shadow {
                    self.shadow.increment(n);
                }
            }
            Hit::Within { near } => {
                self.within.increment(n);
                if near {
                    self.near.increment(n);
                }
            }
        }
    }
}

/// Counts a decision's hits for `limit` under the label `descriptor`: through the limit's
/// cached counters when its label is fixed, else resolved for this label.
pub(crate) fn hits(limit: &crate::config::Limit, descriptor: &str, hit: Hit, n: u64) {
    let labels = || {
        [
            ("domain", limit.domain.clone()),
            ("descriptor", descriptor.to_owned()),
        ]
    };
    if limit.fixed_metric {
        limit
            .counters
            .get_or_init(|| Counters::new(&labels()))
            .add(hit, n);
    } else if value_series(descriptor) {
        Counters::new(&labels()).add(hit, n);
    } else {
        // Past the bound: counted under the limit's own path.
        let labels = [
            ("domain", limit.domain.clone()),
            ("descriptor", format!("{}_{OTHER}", limit.path)),
        ];
        Counters::new(&labels).add(hit, n);
    }
}

/// The most series labelled with a request's values (`detailed_metric`, `value_to_metric`)
/// a process creates, and the longest such label: past them a hit is counted under the limit's
/// path with the suffix [`OTHER`], so that clients sending ever new (or 60 KB) values cannot
/// grow the registry without bound.
const VALUE_SERIES: usize = 10_000;
const VALUE_LABEL_BYTES: usize = 256;

/// The suffix of the series that counts values past [`VALUE_SERIES`] or [`VALUE_LABEL_BYTES`].
const OTHER: &str = "other_values";

/// Whether a label with a request's values may have its own series: it is short enough, and
/// it has one already or there is room for one more.
fn value_series(label: &str) -> bool {
    static SEEN: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
        std::sync::Mutex::new(None);
    if label.len() > VALUE_LABEL_BYTES {
        return false;
    }
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = seen.get_or_insert_with(Default::default);
    if seen.contains(label) {
        return true;
    }
    if seen.len() >= VALUE_SERIES {
        return false;
    }
    seen.insert(label.to_owned());
    true
}

/// The request series of one `api`, resolved once (at the first request, after
/// [`install`]).
struct RequestSeries {
    results: [metrics::Counter; 4],
    duration: metrics::Histogram,
}

static GRPC: OnceLock<RequestSeries> = OnceLock::new();
static JSON: OnceLock<RequestSeries> = OnceLock::new();

/// Counts a request's result (`ok`, `over_limit`, `invalid`, `unavailable`) and records its
/// duration.
pub(crate) fn request(api: &'static str, result: &'static str, took: Duration) {
    let cell = if api == "grpc" { &GRPC } else { &JSON };
    let s = cell.get_or_init(|| RequestSeries {
        results: ["ok", "over_limit", "invalid", "unavailable"]
            .map(|r| metrics::counter!("tollgate_rls_requests_total", "api" => api, "result" => r)),
        duration: metrics::histogram!("tollgate_rls_request_duration_seconds", "api" => api),
    });
    let i = match result {
        "ok" => 0,
        "over_limit" => 1,
        "invalid" => 2,
        _ => 3,
    };
    s.results[i].increment(1);
    s.duration.record(took.as_secs_f64());
}

/// Counts a config load.
pub(crate) fn config_load(ok: bool) {
    let result = if ok { "ok" } else { "error" };
    metrics::counter!("tollgate_rls_config_load_total", "result" => result).increment(1);
}

/// Sets the number of buckets the local tables track.
pub(crate) fn tracked(n: usize) {
    metrics::gauge!("tollgate_rls_tracked_buckets").set(n as f64);
}

/// Sets the number of retired tables and of the buckets they track.
pub(crate) fn retired((tables, buckets): (usize, usize)) {
    metrics::gauge!("tollgate_rls_retired_tables").set(tables as f64);
    metrics::gauge!("tollgate_rls_retired_buckets").set(buckets as f64);
}

/// Records whether Redis answered.
pub(crate) fn redis_up(up: bool) {
    metrics::gauge!("tollgate_rls_redis_up").set(if up { 1.0 } else { 0.0 });
}

/// Counts a decision Redis failed.
pub(crate) fn redis_failure(policy: OnRedisError) {
    let p = match policy {
        OnRedisError::Unavailable => "unavailable",
        OnRedisError::Allow => "allow",
        OnRedisError::Local => "local",
    };
    metrics::counter!("tollgate_rls_redis_failures_total", "policy" => p).increment(1);
}

/// Adds `delta` to the bytes held of `port`'s waiting budget.
pub(crate) fn waiting_bytes(port: &'static str, delta: f64) {
    metrics::gauge!("tollgate_rls_redis_waiting_bytes", "port" => port).increment(delta);
}

/// Adds `delta` (1 or -1) to the requests waiting on a Redis decision.
pub(crate) fn redis_waiting(delta: f64) {
    metrics::gauge!("tollgate_rls_redis_waiting").increment(delta);
}

/// One open connection of `port` in `tollgate_rls_connections`, from its creation to its
/// drop (also when its task is aborted).
#[derive(Debug)]
pub(crate) struct OpenConnection(&'static str);

impl OpenConnection {
    pub(crate) fn new(port: &'static str) -> OpenConnection {
        metrics::gauge!("tollgate_rls_connections", "port" => port).increment(1.0);
        OpenConnection(port)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!("tollgate_rls_connections", "port" => self.0).decrement(1.0);
    }
}

/// Counts a connection limit acting on `port` (`max_connections`, `header_timeout`,
/// `body_timeout`, `idle_timeout`, `close_grace`).
pub(crate) fn connection_limit(port: &'static str, limit: &'static str) {
    metrics::counter!("tollgate_rls_connection_limits_total", "port" => port, "limit" => limit)
        .increment(1);
}

#[cfg(test)]
mod tests {
    /// Labels with a request's values get their own series up to the bound, in number and in
    /// length; a label that has one keeps it.
    #[test]
    fn series_of_request_values_are_bounded() {
        assert!(!super::value_series(
            &"v".repeat(super::VALUE_LABEL_BYTES + 1)
        ));
        assert!(super::value_series("bounded_test_first"));
        let mut created = 0;
        while super::value_series(&format!("bounded_test_{created}")) {
            created += 1;
            assert!(created <= super::VALUE_SERIES, "no bound");
        }
        assert!(super::value_series("bounded_test_first"), "kept");
    }
}
