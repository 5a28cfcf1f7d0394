//! An axum hello-world (`GET /` → 200 `ok`) behind the rate-limit layer: the load test's and
//! the integration tests' server, and a contract for outside tests.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example server -- [flags]
//!   --listen ADDR                  default 127.0.0.1:3000 (port 0: any free port)
//!   --rate N/s|N/min|N/h           default 100/s
//!   --burst N                      default the tokens of one second of rate, at least 1
//!   --limit N/s|N/min|N/h|N/d:BURST  one quota of a policy; repeatable (one to four), all must
//!                                  hold; replaces --rate/--burst (giving both: a usage error);
//!                                  with any --key (per key, each key carries every limit)
//!   --key ip|global|header:NAME    default ip; a request whose NAME header is missing, empty,
//!                                  sent twice, holding a comma or not ASCII: 400
//!   --trusted-proxies CIDR[,CIDR…] with --key ip: the client is the rightmost untrusted
//!                                  X-Forwarded-For hop behind these proxies
//!   --redis URL                    the Redis backend (one limit shared by many servers)
//!   --unlimited                    no layer (the baseline for overhead)
//!   --metrics                      Prometheus text at GET /metrics (not rate-limited): the
//!                                  layer's decisions as limiter="http", the keyed table's
//!                                  (its own decisions, gauges) as "http-keys", the Redis
//!                                  limiter's (paths, round trips, breaker) as "http-redis"
//!   --shadow                       decide and record, but admit every request
//!   --state FILE                   restore the limiter from FILE at start (missing: start full;
//!                                  damaged: start drained; not a regular file: a usage
//!                                  error), save it there at shutdown and periodically
//!   --save-every DURATION          with --state: 10s (default), 500ms, 2min, 1h
//! ```
//!
//! Prints `listening on ADDR` (the bound address) on stdout once it accepts connections, exits 2
//! with a message on bad flags, and shuts down cleanly on SIGINT or SIGTERM (saving the state
//! last, with `--state`; `support/state.rs` says what a restart hands out).

#[path = "support/state.rs"]
mod state;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use clap::{CommandFactory, Parser};
use http::HeaderName;
use ipnet::IpNet;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tollgate::metrics::RETRY_AFTER;
use tollgate::{DefaultClock, KeyedLimiter, KeyedLimiterBuilder, Limits, Quota};
use tollgate_tower::{ClientIp, HeaderKey, KeyType, PeerIp, RateLimitLayer};

#[path = "server/limit.rs"]
mod limit;

/// The most keys a per-IP or per-header limiter tracks (bounded memory).
const MAX_KEYS: usize = 1 << 20;

/// The `tollgate_retry_after_seconds` buckets (seconds): from a millisecond to an hour.
const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0, 600.0, 3600.0,
];

#[derive(Parser, Debug)]
#[command(about = "axum hello-world behind tollgate-tower's rate-limit layer")]
struct Cli {
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The rate: N/s, N/min or N/h.
    #[arg(long, default_value = "100/s", value_parser = parse_rate)]
    rate: Rate,
    /// The burst (default: the tokens of one second of rate, at least 1).
    #[arg(long)]
    burst: Option<u64>,
    /// One quota of a policy, N/s, N/min, N/h or N/d with a burst (5/s:5); repeatable, every
    /// quota must hold. Replaces --rate and --burst.
    #[arg(
        long = "limit",
        value_name = "N/UNIT:BURST",
        value_parser = limit::parse_limit,
        conflicts_with_all = ["rate", "burst"]
    )]
    limits: Vec<Quota>,
    /// The key: ip, global or header:NAME (a request whose NAME header is missing, empty, sent
    /// twice, holding a comma or not ASCII is answered 400).
    #[arg(long, default_value = "ip", value_parser = parse_key)]
    key: KeyKind,
    /// Trusted proxies for --key ip, comma-separated CIDRs or addresses.
    #[arg(long, value_parser = parse_cidrs)]
    trusted_proxies: Option<Trusted>,
    /// The Redis backend: redis://HOST:PORT.
    #[arg(long)]
    redis: Option<String>,
    /// No rate limiting at all (the overhead baseline).
    #[arg(long)]
    unlimited: bool,
    /// Serve Prometheus metrics at GET /metrics (not counted by the limiter).
    #[arg(long)]
    metrics: bool,
    /// Shadow mode: decide and record every request, refuse none.
    #[arg(long)]
    shadow: bool,
    /// Restore the limiter from this file at start and save it there (see support/state.rs).
    #[arg(long)]
    state: Option<PathBuf>,
    /// How often to save with --state: 500ms, 10s, 2min, 1h.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    save_every: Duration,
}

/// The `--trusted-proxies` networks (one flag value, comma-separated).
#[derive(Clone, Debug)]
struct Trusted(Vec<IpNet>);

#[derive(Clone, Copy, Debug)]
struct Rate {
    tokens: u64,
    per: Duration,
}

#[derive(Clone, Debug)]
enum KeyKind {
    Ip,
    Global,
    Header(HeaderName),
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    let (n, unit) = s
        .split_once('/')
        .ok_or_else(|| format!("expected N/s, N/min or N/h, got {s:?}"))?;
    let tokens: u64 = n
        .parse()
        .map_err(|_| format!("the rate's count {n:?} is not a whole number"))?;
    let per = match unit {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        other => return Err(format!("unknown unit {other:?}: use s, min or h")),
    };
    if tokens == 0 {
        return Err("the rate must be at least 1".into());
    }
    Ok(Rate { tokens, per })
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("expected a duration such as 500ms, 10s, 2min or 1h, got {s:?}"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "min" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        other => return Err(format!("unknown unit {other:?}: use ms, s, min or h")),
    };
    if d.is_zero() {
        return Err("the interval must be positive".into());
    }
    Ok(d)
}

fn parse_key(s: &str) -> Result<KeyKind, String> {
    match s {
        "ip" => Ok(KeyKind::Ip),
        "global" => Ok(KeyKind::Global),
        _ => {
            let name = s
                .strip_prefix("header:")
                .ok_or_else(|| format!("expected ip, global or header:NAME, got {s:?}"))?;
            HeaderName::try_from(name)
                .map(KeyKind::Header)
                .map_err(|_| format!("{name:?} is not a valid header name"))
        }
    }
}

fn parse_cidrs(s: &str) -> Result<Trusted, String> {
    s.split(',')
        .map(|part| {
            let part = part.trim();
            part.parse::<IpNet>()
                .or_else(|_| part.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| format!("{part:?} is not a CIDR (10.0.0.0/8) or an IP address"))
        })
        .collect::<Result<_, _>>()
        .map(Trusted)
}

/// A usage error: the message on stderr, exit status 2 (as clap does for its own errors).
fn usage(message: String) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::ValueValidation, message)
        .exit()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_burst = (u128::from(cli.rate.tokens) * 1_000_000_000 / cli.rate.per.as_nanos())
        .clamp(1, u128::from(u64::MAX)) as u64;
    let burst = cli.burst.unwrap_or(default_burst);
    let quota = Quota::new(cli.rate.tokens, cli.rate.per, burst)
        .unwrap_or_else(|e| usage(format!("invalid --rate/--burst: {e}")));
    if cli.trusted_proxies.is_some() && !matches!(cli.key, KeyKind::Ip) {
        usage("--trusted-proxies only applies to --key ip".into());
    }
    if cli.unlimited && cli.redis.is_some() {
        usage("--unlimited and --redis exclude each other".into());
    }
    if cli.unlimited && cli.shadow {
        usage("--unlimited and --shadow exclude each other".into());
    }
    if cli.state.is_some() && (cli.unlimited || cli.redis.is_some()) {
        usage("--state applies to the in-process limiters (not --unlimited or --redis)".into());
    }
    let limits = limit::limits(&cli.limits).unwrap_or_else(|e| usage(e));
    // Something other than a regular file at --state (a directory, a FIFO, a device) is refused
    // here, before the start could block on it or the saves fail on it.
    let limiters = state::Limiters::open(cli.state.clone()).unwrap_or_else(|e| usage(e));
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(serve(cli, quota, limits, limiters))
}

async fn serve(
    cli: Cli,
    quota: Quota,
    limits: Option<Limits>,
    mut limiters: state::Limiters,
) -> ExitCode {
    // Installed before any limiter is built: their metric handles are resolved at construction.
    let scrape = cli.metrics.then(install_recorder);
    let app = Router::new().route("/", get(|| async { "ok" }));
    let app = if cli.unlimited {
        app
    } else if let Some(url) = &cli.redis {
        match redis_layer(app, url, quota, limits, &cli).await {
            Ok(app) => app,
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(1);
            }
        }
    } else if let Some(limits) = limits {
        limit::layer(app, limits, &cli, &mut limiters)
    } else {
        match (&cli.key, &cli.trusted_proxies) {
            (KeyKind::Global, _) => {
                let bucket = limiters.bucket(quota);
                app.layer(observed(RateLimitLayer::shared(bucket), &cli))
            }
            (KeyKind::Ip, None) => {
                let limiter = limiters.keyed(|| keyed::<IpAddr>(quota, &cli));
                app.layer(observed(
                    RateLimitLayer::shared(limiter).key(PeerIp::new()),
                    &cli,
                ))
            }
            (KeyKind::Ip, Some(Trusted(trusted))) => {
                let limiter = limiters.keyed(|| keyed::<IpAddr>(quota, &cli));
                let key = ClientIp::new(trusted.iter().copied());
                app.layer(observed(RateLimitLayer::shared(limiter).key(key), &cli))
            }
            (KeyKind::Header(name), _) => {
                let limiter = limiters.keyed(|| keyed::<String>(quota, &cli));
                let key = HeaderKey::new(name.clone());
                app.layer(observed(RateLimitLayer::shared(limiter).key(key), &cli))
            }
        }
    };
    // Routed after the layer, so scrapes are not rate-limited (nor counted).
    let app = match scrape {
        Some(handle) => app.route("/metrics", get(move || async move { handle.render() })),
        None => app,
    };
    let listener = match tokio::net::TcpListener::bind(cli.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", cli.listen);
            return ExitCode::from(1);
        }
    };
    let addr = listener.local_addr().unwrap_or(cli.listen);
    let shutdown = shutdown();
    println!("listening on {addr}");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let saving = limiters.save_every(cli.save_every);
    let served = axum::serve(listener, service)
        .with_graceful_shutdown(shutdown)
        .await;
    if let Some(saving) = saving {
        saving.abort();
    }
    if let Err(e) = limiters.save_final() {
        eprintln!("state: save at shutdown failed: {e}");
        return ExitCode::from(1);
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Installs the Prometheus recorder as the global one; its handle renders the scrape.
fn install_recorder() -> PrometheusHandle {
    // Buckets make the waits a Prometheus histogram (the default would be a summary).
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(RETRY_AFTER.into()), WAIT_BUCKETS)
        .expect("non-empty buckets")
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder");
    handle
}

/// `--metrics` names the layer `http`; `--shadow` turns shadow mode on.
fn observed<Bk, X: KeyType, Co>(
    layer: RateLimitLayer<Bk, X, Co>,
    cli: &Cli,
) -> RateLimitLayer<Bk, X, Co> {
    let layer = layer.shadow(cli.shadow);
    if cli.metrics {
        layer.name("http")
    } else {
        layer
    }
}

/// The per-key table's builder; with `--metrics` its gauges and evictions as `http-keys`.
fn keyed<K: std::hash::Hash + Eq + Clone>(
    quota: Quota,
    cli: &Cli,
) -> KeyedLimiterBuilder<K, Quota, DefaultClock> {
    let builder = KeyedLimiter::builder(quota, MAX_KEYS, DefaultClock::default());
    if cli.metrics {
        builder.name("http-keys")
    } else {
        builder
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed here, before `listening on` is
/// printed: a signal sent right after that line must not find the default action (exit 143).
fn shutdown() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT handler");
        let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The Redis backend: one limit per key shared by every server on the same Redis (with
/// `--limit`, every quota of the policy in one script call).
async fn redis_layer(
    app: Router,
    url: &str,
    quota: Quota,
    limits: Option<Limits>,
    cli: &Cli,
) -> Result<Router, String> {
    let builder = match limits {
        Some(limits) => {
            tollgate_redis::RedisLimiter::builder(url, limits.quotas()[0]).limits(limits)
        }
        None => tollgate_redis::RedisLimiter::builder(url, quota),
    };
    let builder = if cli.metrics {
        builder.name("http-redis")
    } else {
        builder
    };
    let limiter = builder
        .build()
        .await
        .map_err(|e| format!("cannot use Redis at {url}: {e}"))?;
    let layer = observed(RateLimitLayer::new(limiter), cli);
    Ok(match (&cli.key, &cli.trusted_proxies) {
        (KeyKind::Global, _) => app.layer(layer),
        (KeyKind::Ip, None) => app.layer(layer.key(PeerIp::new())),
        (KeyKind::Ip, Some(Trusted(trusted))) => {
            app.layer(layer.key(ClientIp::new(trusted.iter().copied())))
        }
        (KeyKind::Header(name), _) => app.layer(layer.key(HeaderKey::new(name.clone()))),
    })
}
