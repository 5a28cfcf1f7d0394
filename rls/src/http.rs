//! The HTTP port: `GET /metrics`, `GET /healthcheck`, `POST /json`.

use crate::conn::HandlerBudget;
use crate::grpc::result_of;
use crate::service::{Code, Descriptor, Reject, Request, Response, Service};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;

/// The largest `/json` body read.
const MAX_BODY: usize = 4 << 20;

/// The most a `/json` body may weigh in structural tokens outside strings, each `{` weighing
/// `OBJECT_WEIGHT` (8) and each `[`, `,` and `:` one. serde_json's tree costs tens of bytes
/// a value in a list or a member in a map, and a map's first node some eight times that, so a
/// body of the size limit may parse to many times its size; the bound keeps any parse within
/// a small multiple of what a request at the limits costs (1,024 descriptors of 64 entries,
/// each field under both of its names, weighs about 800,000).
pub const MAX_JSON_WEIGHT: usize = 1 << 20;

/// The weight of a `{`: a map's first node costs some 8 list values.
const OBJECT_WEIGHT: usize = 8;

#[derive(Clone)]
struct App {
    service: Arc<Service>,
    metrics: PrometheusHandle,
}

/// The HTTP app.
pub fn router(service: Arc<Service>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthcheck", get(health))
        .route("/json", post(json_call))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(App { service, metrics })
}

async fn metrics_page(State(app): State<App>) -> impl IntoResponse {
    let local = match app.service.backend() {
        crate::engine::Backend::Local(l) => Some(l),
        crate::engine::Backend::Redis(r) => r.fallback(),
        crate::engine::Backend::FixedWindow(_) => None,
    };
    if let Some(l) = local {
        crate::metrics::tracked(l.tracked());
        crate::metrics::retired(l.retired());
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}

async fn health(State(app): State<App>) -> impl IntoResponse {
    if app.service.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else {
        (StatusCode::OK, "OK\n")
    }
}

async fn json_call(
    State(app): State<App>,
    budget: Option<Extension<HandlerBudget>>,
    body: Bytes,
) -> axum::response::Response {
    let started = Instant::now();
    let req = match parse_request(&body) {
        Ok(r) => r,
        Err(e) => {
            crate::metrics::request("json", "invalid", started.elapsed());
            return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
        }
    };
    // On Redis a valid request is held while the decision waits (up to --redis-timeout-ms),
    // so it takes what it holds from the port's waiting budget until this future ends
    // (answered, or its connection gone); one the budget cannot hold now is refused rather
    // than held uncounted. The local backend decides within this turn: nothing is held while
    // others run.
    let body_len = body.len();
    drop(body);
    let r = match crate::service::validate(&req) {
        Err(e) => Err(e),
        Ok(()) => {
            let _taken = match &budget {
                Some(Extension(budget)) if app.service.backend().waits() => {
                    match budget.try_take(crate::service::held_while_waiting(&req, body_len)) {
                        Some(taken) => Some(taken),
                        None => {
                            crate::metrics::request("json", "unavailable", started.elapsed());
                            return (
                                StatusCode::SERVICE_UNAVAILABLE,
                                [(header::RETRY_AFTER, "1")],
                                "the HTTP port holds as many requests waiting on Redis as its \
                                 memory budget allows (--max-buffered-mib): retry later\n",
                            )
                                .into_response();
                        }
                    }
                }
                _ => None,
            };
            app.service.decide_valid(&req).await
        }
    };
    crate::metrics::request("json", result_of(&r), started.elapsed());
    match r {
        Ok(resp) => {
            let status = match resp.overall {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                response_json(&resp).to_string(),
            )
                .into_response()
        }
        Err(Reject::Invalid(m)) => (StatusCode::BAD_REQUEST, format!("{m}\n")).into_response(),
        Err(Reject::Unavailable(m)) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{m}\n")).into_response()
        }
    }
}

/// A field of a proto3 JSON object under its JSON name or its proto name.
fn field<'a>(o: &'a Map<String, Value>, json: &str, proto: &str) -> Option<&'a Value> {
    o.get(json)
        .or_else(|| o.get(proto))
        .filter(|v| !v.is_null())
}

/// A proto3 JSON integer: a number, or a decimal string.
fn uint(v: &Value, what: &str, max: u64) -> Result<u64, String> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse::<u64>().ok(),
        _ => None,
    };
    n.filter(|n| *n <= max)
        .ok_or_else(|| format!("{what}: not an integer in 0..={max}"))
}

/// A proto3 JSON string: absent or `null` (proto3 JSON's default) is the empty string.
fn string(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what}: not a string")),
    }
}

/// `RateLimitRequest` from proto3 JSON (JSON names, proto names accepted too).
pub fn parse_request(body: &[u8]) -> Result<Request, String> {
    if weight_over(body, MAX_JSON_WEIGHT) {
        return Err(format!(
            "too many JSON objects, lists and members (weighing over {MAX_JSON_WEIGHT}): more \
             than a request within the limits (1,024 descriptors of 64 entries) holds"
        ));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("expected a JSON object".into());
    };
    for k in o.keys() {
        if !matches!(
            k.as_str(),
            "domain" | "descriptors" | "hitsAddend" | "hits_addend"
        ) {
            return Err(format!("unknown field {k:?}"));
        }
    }
    let domain = string(field(&o, "domain", "domain"), "domain")?;
    let hits_addend = match field(&o, "hitsAddend", "hits_addend") {
        Some(v) => uint(v, "hitsAddend", u64::from(u32::MAX))? as u32,
        None => 0,
    };
    let mut descriptors = Vec::new();
    if let Some(ds) = field(&o, "descriptors", "descriptors") {
        let Value::Array(ds) = ds else {
            return Err("descriptors: not a list".into());
        };
        for (i, d) in ds.iter().enumerate() {
            let Value::Object(d) = d else {
                return Err(format!("descriptors[{i}]: not an object"));
            };
            for k in d.keys() {
                if !matches!(
                    k.as_str(),
                    "entries"
                        | "limit"
                        | "hitsAddend"
                        | "hits_addend"
                        | "isNegativeHits"
                        | "is_negative_hits"
                ) {
                    return Err(format!("descriptors[{i}]: unknown field {k:?}"));
                }
            }
            let mut entries = Vec::new();
            if let Some(es) = field(d, "entries", "entries") {
                let Value::Array(es) = es else {
                    return Err(format!("descriptors[{i}].entries: not a list"));
                };
                for (j, e) in es.iter().enumerate() {
                    let Value::Object(e) = e else {
                        return Err(format!("descriptors[{i}].entries[{j}]: not an object"));
                    };
                    let at = format!("descriptors[{i}].entries[{j}]");
                    if let Some(k) = e.keys().find(|k| !matches!(k.as_str(), "key" | "value")) {
                        return Err(format!("{at}: unknown field {k:?}"));
                    }
                    entries.push((
                        string(e.get("key"), &format!("{at}.key"))?,
                        string(e.get("value"), &format!("{at}.value"))?,
                    ));
                }
            }
            let hits_addend = match field(d, "hitsAddend", "hits_addend") {
                // google.protobuf.UInt64Value in JSON: the bare number (or string).
                Some(v) => Some(uint(v, &format!("descriptors[{i}].hitsAddend"), u64::MAX)?),
                None => None,
            };
            let negative_hits = match field(d, "isNegativeHits", "is_negative_hits") {
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err(format!("descriptors[{i}].isNegativeHits: not a bool")),
                None => false,
            };
            descriptors.push(Descriptor {
                entries,
                hits_addend,
                limit_override: field(d, "limit", "limit").is_some(),
                negative_hits,
            });
        }
    }
    Ok(Request {
        domain,
        descriptors,
        hits_addend,
    })
}

/// Whether `body`'s structural tokens weigh more than `max` ([`MAX_JSON_WEIGHT`]), counted
/// without parsing it (a `{` in a string, or an escaped quote, is not one).
fn weight_over(body: &[u8], max: usize) -> bool {
    let (mut n, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => {
                    n += if b == b'{' { OBJECT_WEIGHT } else { 1 };
                    if n > max {
                        return true;
                    }
                }
                _ => {}
            }
        }
    }
    false
}

/// `RateLimitResponse` as proto3 JSON (default values left out, as protobuf's JSON does).
pub fn response_json(r: &Response) -> Value {
    let code = |c: Code| match c {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    };
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            o.insert("code".into(), json!(code(s.code)));
            if let Some(l) = &s.current_limit {
                let mut cl = Map::new();
                if !l.name.is_empty() {
                    cl.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    cl.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                cl.insert("unit".into(), json!(l.unit.json_name()));
                o.insert("currentLimit".into(), Value::Object(cl));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = s.duration_until_reset {
                o.insert("durationUntilReset".into(), json!(format!("{d}s")));
            }
            Value::Object(o)
        })
        .collect();
    let mut o = Map::new();
    o.insert("overallCode".into(), json!(code(r.overall)));
    o.insert("statuses".into(), Value::Array(statuses));
    if !r.headers.is_empty() {
        let headers = r
            .headers
            .iter()
            .map(|(key, value)| json!({ "key": key, "value": value }))
            .collect();
        o.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// proto3 JSON reads `null` as a field's default: an entry's `key` or `value` of `null` is
    /// the empty string, as envoyproxy/ratelimit's `protojson.Unmarshal` reads it.
    #[test]
    fn a_null_entry_key_or_value_is_the_empty_string() {
        let r = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":null},{"key":null}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            r.descriptors[0].entries,
            vec![
                ("k".to_owned(), String::new()),
                (String::new(), String::new())
            ]
        );
    }

    #[test]
    fn tokens_are_weighed_outside_strings() {
        let w = OBJECT_WEIGHT;
        assert!(!weight_over(br#"{"a":[1,2]}"#, w + 3));
        assert!(weight_over(br#"{"a":[1,2,3]}"#, w + 3));
        assert!(!weight_over(br#"{"{[,:\"{[,:":1}"#, w + 1));
        assert!(weight_over(br#"{"\\":1,"b":2}"#, w + 2));
    }
}
