//! The decision of one `ShouldRateLimit` request, whatever the transport (gRPC or `/json`):
//! validation, matching, `replaces`, grouping descriptors by bucket, the backend's decision,
//! the statuses and the metrics.

use crate::config::{Config, Kind, Limit, Rate};
use crate::engine::{Backend, Demand, OnRedisError, Outcome, Wait};
use crate::metrics as m;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 1024;
/// The most entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// A request, as both transports decode it.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The domain.
    pub domain: String,
    /// The descriptors.
    pub descriptors: Vec<Descriptor>,
    /// The request's `hits_addend` (0 means 1).
    pub hits_addend: u32,
}

/// One request descriptor.
#[derive(Debug, Clone, Default)]
pub struct Descriptor {
    /// `(key, value)` entries, in order.
    pub entries: Vec<(String, String)>,
    /// The descriptor's own `hits_addend`, when set (0: check without spending).
    pub hits_addend: Option<u64>,
    /// Whether the request set the per-descriptor `limit` override (refused).
    pub limit_override: bool,
    /// `is_negative_hits` (refused).
    pub negative_hits: bool,
}

/// A descriptor status's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Within the limit (or no limit).
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit a status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: crate::config::Unit,
    /// The rate's `name`.
    pub name: String,
}

/// One descriptor's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// The limit (the tightest of several, or the refusing one).
    pub current_limit: Option<CurrentLimit>,
    /// Whole tokens left (0 on `OverLimit`; `u32::MAX` for `unlimited`).
    pub limit_remaining: u32,
    /// Whole seconds, rounded up: until the bucket is full again, or on `OverLimit` until the
    /// request would be admitted.
    pub duration_until_reset: Option<u64>,
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// `OVER_LIMIT` iff some enforced limit refused.
    pub overall: Code,
    /// One per request descriptor, in order.
    pub statuses: Vec<Status>,
    /// `response_headers_to_add`, `(name, value)` in order: the three RateLimit headers when
    /// they are on ([`Service::with_response_headers`]) and some status has a limit, else none.
    pub headers: Vec<(String, String)>,
}

/// The names of the RateLimit response headers (`--response-headers`, or
/// `LIMIT_RESPONSE_HEADERS_ENABLED` as envoyproxy/ratelimit reads it), each a valid HTTP
/// header name ([`ResponseHeaders::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHeaders {
    limit: String,
    remaining: String,
    reset: String,
}

impl Default for ResponseHeaders {
    /// envoyproxy/ratelimit's names: `RateLimit-Limit`, `RateLimit-Remaining`,
    /// `RateLimit-Reset`.
    fn default() -> ResponseHeaders {
        ResponseHeaders {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

impl ResponseHeaders {
    /// The headers named `limit`, `remaining` and `reset`: each must be an HTTP header name
    /// (one or more of the token characters of RFC 9110: letters, digits and
    /// ``!#$%&'*+-.^_`|~``), or the error names the one that is not, with the variable that
    /// names it (`LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`).
    pub fn new(limit: &str, remaining: &str, reset: &str) -> Result<ResponseHeaders, String> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        for (what, name) in [("limit", limit), ("remaining", remaining), ("reset", reset)] {
            if name.is_empty() || !name.bytes().all(token) {
                let var = format!("LIMIT_{}_HEADER", what.to_ascii_uppercase());
                return Err(format!(
                    "the {what} header's name ({var}) {name:?} is not an HTTP header name \
                     (letters, digits and !#$%&'*+-.^_`|~, at least one)"
                ));
            }
        }
        Ok(ResponseHeaders {
            limit: limit.into(),
            remaining: remaining.into(),
            reset: reset.into(),
        })
    }

    /// The limit header's name.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// The remaining header's name.
    pub fn remaining(&self) -> &str {
        &self.remaining
    }

    /// The reset header's name.
    pub fn reset(&self) -> &str {
        &self.reset
    }

    /// The headers for `statuses`, as envoyproxy/ratelimit chooses and writes them: the
    /// status closest to its limit, that is the first with a limit and the fewest tokens
    /// remaining, unless some status is `OVER_LIMIT`, when the last of those; none when no
    /// status has a limit (no limit matched, `unlimited`) or a decided reset (a failed Redis
    /// decision answered by `--on-redis-error allow`). The values are the status's
    /// `requests_per_unit`, `limit_remaining` and `duration_until_reset` in whole seconds,
    /// as decimal integers.
    pub fn for_statuses(&self, statuses: &[Status]) -> Vec<(String, String)> {
        let mut chosen: Option<(&CurrentLimit, u32, u64)> = None;
        let mut fewest = u32::MAX;
        for s in statuses {
            let (Some(limit), Some(reset)) = (&s.current_limit, s.duration_until_reset) else {
                continue;
            };
            if s.code == Code::OverLimit || s.limit_remaining < fewest {
                chosen = Some((limit, s.limit_remaining, reset));
                fewest = s.limit_remaining;
            }
        }
        let Some((limit, remaining, reset)) = chosen else {
            return Vec::new();
        };
        vec![
            (self.limit.clone(), limit.requests_per_unit.to_string()),
            (self.remaining.clone(), remaining.to_string()),
            (self.reset.clone(), reset.to_string()),
        ]
    }
}

/// A request the service does not decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reject {
    /// A malformed request (gRPC `INVALID_ARGUMENT`, HTTP 400).
    Invalid(String),
    /// The backend could not decide (gRPC `UNAVAILABLE`, HTTP 500).
    Unavailable(String),
}

/// The service: the current config, the backend, the global shadow flag.
#[derive(Debug)]
pub struct Service {
    config: RwLock<Arc<Config>>,
    /// Held by a reload from start to end: reloads run one at a time.
    reloads: Mutex<()>,
    backend: Backend,
    shadow: bool,
    draining: AtomicBool,
    /// Requests planned and waiting on a Redis decision (see [`Service::waiting_on_redis`]).
    waiting: AtomicUsize,
    /// What a reload loads under: the backend's target and `--max-descriptors`.
    max_descriptors: usize,
    /// The RateLimit response headers, when on.
    headers: Option<ResponseHeaders>,
}

/// One request in [`Service::waiting_on_redis`] and the `tollgate_rls_redis_waiting` gauge,
/// from its creation to its drop (also when the request's future is dropped mid-wait).
struct WaitingOnRedis<'a>(&'a AtomicUsize);

impl<'a> WaitingOnRedis<'a> {
    fn new(count: &'a AtomicUsize) -> WaitingOnRedis<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        m::redis_waiting(1.0);
        WaitingOnRedis(count)
    }
}

impl Drop for WaitingOnRedis<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        m::redis_waiting(-1.0);
    }
}

/// A descriptor's place in the decision.
enum Plan {
    /// No limit applies (no match, or replaced).
    NoLimit,
    /// `unlimited`.
    Unlimited,
    /// Demand `usize` of the request.
    Demand(usize),
}

/// A descriptor's match that goes to a demand.
struct Matched {
    limit: Arc<Limit>,
    metric: String,
    hits: u64,
}

impl Service {
    /// A service on `backend` with `config` applied.
    pub fn new(config: Config, backend: Backend, shadow: bool) -> Service {
        let s = Service {
            config: RwLock::new(Arc::new(Config::default())),
            reloads: Mutex::new(()),
            backend,
            shadow,
            draining: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            max_descriptors: crate::config::DEFAULT_MAX_DESCRIPTORS,
            headers: None,
        };
        s.reload(config);
        s
    }

    /// The service, adding the RateLimit headers named by `headers` to every response that
    /// has a limit to describe (`--response-headers`; see [`ResponseHeaders::for_statuses`]).
    pub fn with_response_headers(mut self, headers: ResponseHeaders) -> Service {
        self.headers = Some(headers);
        self
    }

    /// The service, with the configs it reloads bounded to `n` descriptors
    /// (`--max-descriptors`; see [`LoadOptions`](crate::config::LoadOptions)).
    pub fn with_max_descriptors(mut self, n: usize) -> Service {
        self.max_descriptors = n;
        self
    }

    /// How a config for this service is loaded: for its backend (with `--redis`, the Redis
    /// script's range too) and within its descriptors bound.
    pub fn load_options(&self) -> crate::config::LoadOptions {
        crate::config::LoadOptions {
            target: match &self.backend {
                Backend::Redis(_) => crate::config::Target::Redis,
                Backend::Local(_) | Backend::FixedWindow(_) => crate::config::Target::Local,
            },
            max_descriptors: self.max_descriptors,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Swaps in `config`: the backend's tables follow it (kept, converted, added, retired).
    /// What the config needs is built while decisions go on (`LocalBackend::prepare`); the
    /// config and the tables are swapped together, holding the config's write lock only for
    /// the swap, so that a decision sees the old config and tables or the new ones. Reloads
    /// run one at a time.
    pub fn reload(&self, config: Config) {
        let _serial = self.reloads.lock().unwrap_or_else(PoisonError::into_inner);
        let config = Arc::new(config);
        let old = match &self.backend {
            Backend::Local(l) => {
                let prepared = l.prepare(&config);
                let mut slot = self.config.write().unwrap_or_else(PoisonError::into_inner);
                let retiring = l.commit(prepared);
                let old = std::mem::replace(&mut *slot, config);
                drop(slot);
                retiring.finish();
                old
            }
            Backend::Redis(r) => {
                let prepared = r.prepare(&config);
                let mut slot = self.config.write().unwrap_or_else(PoisonError::into_inner);
                let swapped = r.commit(prepared);
                let old = std::mem::replace(&mut *slot, config);
                drop(slot);
                swapped.finish();
                old
            }
            Backend::FixedWindow(_) => std::mem::replace(
                &mut *self.config.write().unwrap_or_else(PoisonError::into_inner),
                config,
            ),
        };
        // The old config is dropped here, not under the lock.
        drop(old);
    }

    /// Marks the service draining (`/healthcheck` answers 503).
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the service is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// How many requests are waiting on a Redis decision now: each counts from after its
    /// plan (its descriptors matched under the config of that moment) until Redis answered,
    /// failed or timed out, or its future was dropped (on both backends that wait on Redis:
    /// [`Backend::waits`]). Always 0 on the local backend. The process's sum over its services
    /// is the `tollgate_rls_redis_waiting` gauge.
    pub fn waiting_on_redis(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Decides `req`.
    pub async fn should_rate_limit(&self, req: &Request) -> Result<Response, Reject> {
        validate(req)?;
        self.decide_valid(req).await
    }

    /// Decides `req`, which [`validate`] accepted (the handlers that size a request before
    /// it waits validate it first).
    pub(crate) async fn decide_valid(&self, req: &Request) -> Result<Response, Reject> {
        match &self.backend {
            Backend::Local(local) => {
                // Decisions hold the config's read lock: a reload swaps the tables between them.
                let config = self.config.read().unwrap_or_else(PoisonError::into_inner);
                let (plans, matched, demands) = self.plan(&config, req);
                let outcomes = local.decide(&demands);
                Ok(self.respond(&plans, &matched, &demands, &outcomes))
            }
            Backend::Redis(redis) => {
                let config = self
                    .config
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let (plans, matched, demands) = self.plan(&config, req);
                let outcomes = if demands.is_empty() {
                    Vec::new()
                } else {
                    let waiting = WaitingOnRedis::new(&self.waiting);
                    let decided = redis.decide(&req.domain, &demands).await;
                    drop(waiting);
                    match decided {
                        Ok(o) => {
                            m::redis_up(true);
                            o
                        }
                        Err(e) => {
                            m::redis_up(false);
                            m::redis_failure(redis.on_error());
                            match redis.on_error() {
                                OnRedisError::Unavailable => {
                                    return Err(Reject::Unavailable(format!(
                                        "redis could not decide: {}",
                                        e.0
                                    )))
                                }
                                OnRedisError::Allow => {
                                    crate::engine::RedisBackend::allow_all(&demands)
                                }
                                OnRedisError::Local => match redis.fallback() {
                                    Some(f) => {
                                        let _g = self
                                            .config
                                            .read()
                                            .unwrap_or_else(PoisonError::into_inner);
                                        f.decide(&demands)
                                    }
                                    None => crate::engine::RedisBackend::allow_all(&demands),
                                },
                            }
                        }
                    }
                };
                Ok(self.respond(&plans, &matched, &demands, &outcomes))
            }
            Backend::FixedWindow(fixed) => {
                let config = self
                    .config
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let (plans, matched, demands) = self.plan(&config, req);
                let waiting = WaitingOnRedis::new(&self.waiting);
                let decided = fixed.decide(&req.domain, &demands).await;
                drop(waiting);
                let outcomes = decided.map_err(|e| Reject::Unavailable(e.0))?;
                Ok(self.respond(&plans, &matched, &demands, &outcomes))
            }
        }
    }

    /// Matches every descriptor, applies `replaces`, and groups the rest by bucket.
    fn plan(
        &self,
        config: &Config,
        req: &Request,
    ) -> (Vec<Plan>, Vec<Option<Matched>>, Vec<Demand>) {
        let hits_default = u64::from(req.hits_addend.max(1));
        let found: Vec<Option<crate::config::Match>> = req
            .descriptors
            .iter()
            .map(|d| {
                config.lookup(
                    &req.domain,
                    d.entries.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )
            })
            .collect();
        let replaced: HashSet<String> = found
            .iter()
            .flatten()
            .flat_map(|m| m.limit.replaces.iter().cloned())
            .collect();
        let mut plans = Vec::with_capacity(found.len());
        let mut matched = Vec::with_capacity(found.len());
        let mut demands: Vec<Demand> = Vec::new();
        // Descriptors that land on one bucket share a demand: found by a scan for a few, by a
        // map for many.
        let many = req.descriptors.len() > 16;
        let mut groups: HashMap<(String, String), usize> = HashMap::new();
        for (d, f) in req.descriptors.iter().zip(found) {
            let hits = d.hits_addend.unwrap_or(hits_default);
            let Some(f) = f else {
                plans.push(Plan::NoLimit);
                matched.push(None);
                continue;
            };
            if matches!(f.limit.kind, Kind::Unlimited) {
                plans.push(Plan::Unlimited);
                matched.push(None);
                continue;
            }
            if !replaced.is_empty() && f.limit.names.iter().any(|n| replaced.contains(n)) {
                plans.push(Plan::NoLimit);
                matched.push(None);
                continue;
            }
            let enforce = !(self.shadow || f.limit.shadow);
            let existing = if many {
                groups.get(&(f.limit.id.clone(), f.bucket.clone())).copied()
            } else {
                demands
                    .iter()
                    .position(|x| Arc::ptr_eq(&x.limit, &f.limit) && x.bucket == f.bucket)
            };
            let i = match existing {
                Some(i) => {
                    demands[i].hits = demands[i].hits.saturating_add(hits);
                    i
                }
                None => {
                    if many {
                        groups.insert((f.limit.id.clone(), f.bucket.clone()), demands.len());
                    }
                    demands.push(Demand {
                        limit: f.limit.clone(),
                        bucket: f.bucket,
                        hits,
                        enforce,
                        read: false,
                    });
                    demands.len() - 1
                }
            };
            plans.push(Plan::Demand(i));
            matched.push(Some(Matched {
                limit: f.limit,
                metric: f.metric,
                hits,
            }));
        }
        // A limit of 0 per unit refuses whatever the state: the request's other enforced
        // buckets are then only read.
        if demands
            .iter()
            .any(|d| d.enforce && d.limit.blocking_rate().is_some())
        {
            for d in demands.iter_mut().filter(|d| d.enforce) {
                d.read = true;
            }
        }
        (plans, matched, demands)
    }

    /// The statuses and the metrics.
    fn respond(
        &self,
        plans: &[Plan],
        matched: &[Option<Matched>],
        demands: &[Demand],
        outcomes: &[Outcome],
    ) -> Response {
        let refused = demands
            .iter()
            .zip(outcomes)
            .any(|(d, o)| d.enforce && !o.holds);
        // The request's wait: the longest among its refusing enforced buckets.
        let wait = demands
            .iter()
            .zip(outcomes)
            .filter(|(d, o)| d.enforce && !o.holds)
            .map(|(d, o)| match o.wait {
                Some(Wait::After(w)) => w,
                _ => rate_at(&d.limit, o.rate).map_or(Duration::ZERO, |r| r.unit.duration()),
            })
            .max()
            .unwrap_or(Duration::ZERO);
        let statuses = plans
            .iter()
            .zip(matched)
            .map(|(p, mt)| match p {
                Plan::NoLimit => Status {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: 0,
                    duration_until_reset: None,
                },
                Plan::Unlimited => Status {
                    code: Code::Ok,
                    current_limit: None,
                    limit_remaining: u32::MAX,
                    duration_until_reset: None,
                },
                Plan::Demand(i) => {
                    let (d, o) = (&demands[*i], &outcomes[*i]);
                    let current_limit = rate_at(&d.limit, o.rate).map(|r| CurrentLimit {
                        requests_per_unit: r.requests_per_unit,
                        unit: r.unit,
                        name: r.name.clone(),
                    });
                    let over = d.enforce && !o.holds;
                    if let Some(mt) = mt {
                        self.count(mt, d, o, refused);
                    }
                    if over {
                        Status {
                            code: Code::OverLimit,
                            current_limit,
                            limit_remaining: 0,
                            duration_until_reset: Some(ceil_secs(wait).max(1)),
                        }
                    } else if !o.decided {
                        Status {
                            code: Code::Ok,
                            current_limit,
                            limit_remaining: 0,
                            duration_until_reset: None,
                        }
                    } else {
                        Status {
                            code: Code::Ok,
                            current_limit,
                            limit_remaining: if o.holds {
                                o.remaining.min(u64::from(u32::MAX)) as u32
                            } else {
                                0
                            },
                            duration_until_reset: Some(ceil_secs(o.until_full)),
                        }
                    }
                }
            })
            .collect::<Vec<_>>();
        Response {
            overall: if refused { Code::OverLimit } else { Code::Ok },
            headers: self
                .headers
                .as_ref()
                .map_or_else(Vec::new, |h| h.for_statuses(&statuses)),
            statuses,
        }
    }

    fn count(&self, mt: &Matched, d: &Demand, o: &Outcome, refused: bool) {
        let hit = if !o.holds {
            m::Hit::Over { shadow: !d.enforce }
        } else if !d.enforce || !refused {
            let burst = rate_at(&mt.limit, o.rate).map_or(0, |r| r.burst);
            // Near the limit: at most a fifth of the burst left after the hits.
            m::Hit::Within {
                near: o.decided && o.remaining.saturating_mul(5) <= burst,
            }
        } else {
            m::Hit::Total
        };
        m::hits(&mt.limit, &mt.metric, hit, mt.hits);
    }
}

/// The rate at `index` of a limit.
fn rate_at(limit: &Limit, index: usize) -> Option<&Rate> {
    match &limit.kind {
        Kind::Rates(r) => r.get(index).or(r.first()),
        Kind::Unlimited => None,
    }
}

/// Whole seconds, rounded up (`u64::MAX` for a wait that rounds past it).
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// What a valid request holds while its decision waits on Redis, read from a message or body
/// of `source_len` bytes: the request itself (its strings and vectors at their capacities),
/// and the bucket keys and the Redis command the decision builds from its entries: their
/// buckets, each at most `source_len` (every key and value it copies is among the source's
/// bytes), and per descriptor (at most one key each: descriptors on one bucket share it) the
/// key's fixed part, its hash tag and domain, in the key and again, with the key prefix, in
/// the command's copy, and the fixed part of the decision's table entries for it. Both ports
/// take this from their budget ([`crate::conn::HandlerBudget`], `--max-buffered-mib`) for as
/// long as the request waits: `/json` with its body's length, gRPC with its message's encoded
/// length (what the decoded message encodes to: what it holds, not the padding or the unknown
/// fields a hostile encoding may add, which decoding drops). Not counted: what tollgate-redis
/// builds for a call it sends (its names, tables and command, and the script's source for an
/// EVAL when its reload failed or the script was lost again before its re-run; the reload
/// itself, one `SCRIPT LOAD` per limiter, is one copy), which exists for at most its in-flight
/// cap of calls at once (4,096): a call past the cap fails at once.
pub fn held_while_waiting(req: &Request, source_len: usize) -> usize {
    let entries: usize = req
        .descriptors
        .iter()
        .map(|d| {
            d.entries.capacity() * std::mem::size_of::<(String, String)>()
                + d.entries
                    .iter()
                    .map(|(k, v)| k.capacity() + v.capacity())
                    .sum::<usize>()
        })
        .sum();
    let keys = req
        .descriptors
        .len()
        .saturating_mul(crate::engine::key_fixed_bytes(req.domain.len()));
    std::mem::size_of::<Request>()
        + req.domain.capacity()
        + req.descriptors.capacity() * std::mem::size_of::<Descriptor>()
        + entries
        + keys
        + source_len.saturating_mul(2)
}

pub(crate) fn validate(req: &Request) -> Result<(), Reject> {
    check_request(req.domain.is_empty(), req.descriptors.len())?;
    for (i, d) in req.descriptors.iter().enumerate() {
        check_descriptor(i, d.entries.len(), d.limit_override, d.negative_hits)?;
    }
    Ok(())
}

/// The request-wide half of the validation: the gRPC decoder refuses an oversized message
/// with it before building the message, so both answer the same.
pub(crate) fn check_request(domain_empty: bool, descriptors: usize) -> Result<(), Reject> {
    let bad = |s: String| Err(Reject::Invalid(s));
    if domain_empty {
        return bad("the domain is empty".into());
    }
    if descriptors == 0 {
        return bad("no descriptors".into());
    }
    if descriptors > MAX_DESCRIPTORS {
        return bad(format!(
            "{descriptors} descriptors: at most {MAX_DESCRIPTORS}"
        ));
    }
    Ok(())
}

/// The validation of descriptor `i`, in the order `validate` applies it (shared with the gRPC
/// decoder as `check_request` is).
pub(crate) fn check_descriptor(
    i: usize,
    entries: usize,
    limit_override: bool,
    negative_hits: bool,
) -> Result<(), Reject> {
    let bad = |s: String| Err(Reject::Invalid(s));
    if entries > MAX_ENTRIES {
        return bad(format!(
            "descriptor {i}: {entries} entries, at most {MAX_ENTRIES}"
        ));
    }
    if limit_override {
        return bad(format!(
            "descriptor {i}: the per-descriptor limit override is not supported"
        ));
    }
    if negative_hits {
        return bad(format!(
            "descriptor {i}: is_negative_hits (giving tokens back) is not supported"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, rpu: u32, remaining: u32, reset: Option<u64>) -> Status {
        Status {
            code,
            current_limit: Some(CurrentLimit {
                requests_per_unit: rpu,
                unit: crate::config::Unit::Year,
                name: String::new(),
            }),
            limit_remaining: remaining,
            duration_until_reset: reset,
        }
    }

    /// A wait of `Duration::MAX` rounds to `u64::MAX` seconds, never past it.
    #[test]
    fn whole_seconds_saturate() {
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
        assert_eq!(ceil_secs(Duration::from_secs(u64::MAX)), u64::MAX);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::ZERO), 0);
    }

    /// The largest values are written whole; a status at `u32::MAX` tokens left is not closer
    /// to its limit than none (envoyproxy/ratelimit starts its search there), and one without
    /// a decided reset says nothing.
    #[test]
    fn header_values_at_the_ends_of_their_ranges() {
        let h = ResponseHeaders::default();
        let top = status(Code::OverLimit, u32::MAX, 0, Some(u64::MAX));
        assert_eq!(
            h.for_statuses(&[top]),
            vec![
                ("RateLimit-Limit".into(), "4294967295".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), "18446744073709551615".into()),
            ]
        );
        let full = status(Code::Ok, u32::MAX, u32::MAX, Some(0));
        assert_eq!(h.for_statuses(std::slice::from_ref(&full)), vec![]);
        let near = status(Code::Ok, 7, u32::MAX - 1, Some(0));
        assert_eq!(h.for_statuses(&[full, near])[1].1, "4294967294");
        let undecided = status(Code::Ok, 7, 0, None);
        assert_eq!(h.for_statuses(&[undecided]), vec![]);
    }

    /// Header names are HTTP tokens; anything else is refused with the name quoted.
    #[test]
    fn header_names_must_be_tokens() {
        let h = ResponseHeaders::new("X-Limit", "x_remaining", "reset!").unwrap();
        assert_eq!(
            (h.limit(), h.remaining(), h.reset()),
            ("X-Limit", "x_remaining", "reset!")
        );
        for (l, m, r, what) in [
            ("", "b", "c", "limit"),
            ("a", "b c", "c", "remaining"),
            ("a", "b", "c:", "reset"),
            ("a", "b", "c\n", "reset"),
            ("a", "é", "c", "remaining"),
        ] {
            let e = ResponseHeaders::new(l, m, r).unwrap_err();
            assert!(e.starts_with(&format!("the {what} header's name")), "{e}");
        }
    }
}
