//! An axum hello-world (`GET /` → 200 `ok`) behind the rate-limit layer: the load test's and
//! the integration tests' server, and a contract for outside tests.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example server -- [flags]
//!   --listen ADDR                  default 127.0.0.1:3000 (port 0: any free port)
//!   --rate N/s|N/min|N/h           default 100/s
//!   --burst N                      default the tokens of one second of rate, at least 1
//!   --key ip|global|header:NAME    default ip
//!   --trusted-proxies CIDR[,CIDR…] with --key ip: the client is the rightmost untrusted
//!                                  X-Forwarded-For hop behind these proxies
//!   --redis URL                    the Redis backend (one limit shared by many servers)
//!   --unlimited                    no layer (the baseline for overhead)
//! ```
//!
//! Prints `listening on ADDR` (the bound address) on stdout once it accepts connections, exits 2
//! with a message on bad flags, and shuts down cleanly on SIGINT or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use clap::{CommandFactory, Parser};
use http::HeaderName;
use ipnet::IpNet;
use tollgate::{Bucket, KeyedLimiter, Quota};
use tollgate_tower::{ClientIp, HeaderKey, PeerIp, RateLimitLayer};

/// The most keys a per-IP or per-header limiter tracks (bounded memory).
const MAX_KEYS: usize = 1 << 20;

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
    /// The key: ip, global or header:NAME.
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
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(serve(cli, quota))
}

async fn serve(cli: Cli, quota: Quota) -> ExitCode {
    let app = Router::new().route("/", get(|| async { "ok" }));
    let app = if cli.unlimited {
        app
    } else if let Some(url) = &cli.redis {
        match redis_layer(app, url, quota, &cli).await {
            Ok(app) => app,
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(1);
            }
        }
    } else {
        match (&cli.key, &cli.trusted_proxies) {
            (KeyKind::Global, _) => app.layer(RateLimitLayer::new(Bucket::new(quota))),
            (KeyKind::Ip, None) => {
                let limiter = KeyedLimiter::<IpAddr>::new(quota, MAX_KEYS);
                app.layer(RateLimitLayer::new(limiter).key(PeerIp::new()))
            }
            (KeyKind::Ip, Some(Trusted(trusted))) => {
                let limiter = KeyedLimiter::<IpAddr>::new(quota, MAX_KEYS);
                let key = ClientIp::new(trusted.iter().copied());
                app.layer(RateLimitLayer::new(limiter).key(key))
            }
            (KeyKind::Header(name), _) => {
                let limiter = KeyedLimiter::<String>::new(quota, MAX_KEYS);
                app.layer(RateLimitLayer::new(limiter).key(HeaderKey::new(name.clone())))
            }
        }
    };
    let listener = match tokio::net::TcpListener::bind(cli.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", cli.listen);
            return ExitCode::from(1);
        }
    };
    let addr = listener.local_addr().unwrap_or(cli.listen);
    // The SIGTERM handler is installed before the line that tells a supervisor it may signal.
    let shutdown = shutdown();
    println!("listening on {addr}");
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    match axum::serve(listener, service)
        .with_graceful_shutdown(shutdown)
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Resolves on SIGINT or SIGTERM; the SIGTERM handler is registered when this is called, not
/// when the future is first polled.
fn shutdown() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    async move {
        let interrupt = tokio::signal::ctrl_c();
        #[cfg(unix)]
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = interrupt.await;
    }
}

/// The Redis backend: one limit per key shared by every server on the same Redis.
async fn redis_layer(app: Router, url: &str, quota: Quota, cli: &Cli) -> Result<Router, String> {
    let limiter = tollgate_redis::RedisLimiter::builder(url, quota)
        .build()
        .await
        .map_err(|e| format!("cannot use Redis at {url}: {e}"))?;
    let layer = RateLimitLayer::new(limiter);
    Ok(match (&cli.key, &cli.trusted_proxies) {
        (KeyKind::Global, _) => app.layer(layer),
        (KeyKind::Ip, None) => app.layer(layer.key(PeerIp::new())),
        (KeyKind::Ip, Some(Trusted(trusted))) => {
            app.layer(layer.key(ClientIp::new(trusted.iter().copied())))
        }
        (KeyKind::Header(name), _) => app.layer(layer.key(HeaderKey::new(name.clone()))),
    })
}
