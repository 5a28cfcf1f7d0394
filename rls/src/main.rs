//! `tollgate-rls`: see the crate's README for the command line.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tollgate_rls::config::DEFAULT_MAX_DESCRIPTORS;
use tollgate_rls::conn::{MAX_PORT_MESSAGE_BYTES, MIN_PORT_MESSAGE_BYTES};
use tollgate_rls::engine::{OnRedisError, RlsClock};
use tollgate_rls::server::{run, Options, StartError};
use tollgate_rls::service::ResponseHeaders;

/// An Envoy rate-limit service with exact token buckets.
#[derive(Parser, Debug)]
#[command(name = "tollgate-rls", version, about)]
struct Cli {
    /// A YAML file, or a directory of `*.yaml`/`*.yml` files (one domain each), in
    /// envoyproxy/ratelimit's format. Reloaded when it changes, and on SIGHUP.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// The gRPC address (port 0: a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// The HTTP address: /metrics, /healthcheck, /json.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Decide on Redis (`redis://host:port`, `redis+cluster://h1:p1,h2:p2`): replicas sharing
    /// one server enforce one limit together.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// Answer OK where a limit would refuse, and count it (every limit in shadow mode).
    #[arg(long)]
    shadow: bool,
    /// Add the RateLimit headers (limit, remaining, reset of the status closest to its limit)
    /// to every response's response_headers_to_add; also on with
    /// LIMIT_RESPONSE_HEADERS_ENABLED=true. Their names: LIMIT_LIMIT_HEADER,
    /// LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER (default RateLimit-Limit,
    /// RateLimit-Remaining, RateLimit-Reset).
    #[arg(long)]
    response_headers: bool,
    /// Save the local buckets here (every 10 s and at exit) and restore them at start.
    #[arg(long, value_name = "FILE", conflicts_with = "redis")]
    state: Option<PathBuf>,
    /// The most values tracked in all, shared equally by the limits that keep a bucket per
    /// value.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 26)))]
    max_keys: u64,
    /// The most descriptors the config may define (every level, with a limit or not): a
    /// config over it is refused at start and on a reload (which keeps the old one).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DESCRIPTORS as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_descriptors: u64,
    /// Redis: the most a decision waits (milliseconds) before --on-redis-error answers.
    #[arg(long, value_name = "MS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    redis_timeout_ms: u64,
    /// Redis: what answers when Redis cannot decide in time.
    #[arg(long, value_name = "POLICY", default_value = "unavailable",
          value_parser = ["unavailable", "allow", "local"])]
    on_redis_error: String,
    /// The most connections each port holds open at once; more wait in the kernel's listen
    /// backlog until one closes.
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// A request's headers must arrive within this (milliseconds) of the connection opening
    /// or, on HTTP/1, of the previous response; the connection is closed otherwise.
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_timeout_ms: u64,
    /// A request's body must arrive within this (milliseconds) of its headers: 408, or gRPC
    /// DEADLINE_EXCEEDED, otherwise.
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    body_timeout_ms: u64,
    /// A connection with no request in flight for this long (milliseconds) is closed
    /// gracefully (HTTP/2: GOAWAY).
    #[arg(long, value_name = "MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    idle_timeout_ms: u64,
    /// gRPC port: an HTTP/2 PING after this long (milliseconds) without a frame from the peer.
    #[arg(long, value_name = "MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    grpc_keepalive_ms: u64,
    /// gRPC port: the connection is closed when a PING is not acknowledged within this
    /// (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    grpc_keepalive_timeout_ms: u64,
    /// The most memory (MiB) each port's unfinished requests hold together: gRPC messages
    /// still arriving (and the requests decoded from them), `/json` bodies still arriving and
    /// the `/json` requests waiting on Redis. Past it a gRPC message or a `/json` body waits,
    /// unread, within --body-timeout-ms, and a `/json` request about to wait on Redis is
    /// answered 503.
    #[arg(long, value_name = "MIB", default_value_t = (MAX_PORT_MESSAGE_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64)
              .range((MIN_PORT_MESSAGE_BYTES >> 20) as u64..=MAX_BUFFERED_MIB))]
    max_buffered_mib: u64,
}

/// The largest `--max-buffered-mib` (64 GiB): a rate-limit service's requests are hundreds of
/// bytes, and a larger value is a unit mistaken (bytes or KiB written as MiB).
const MAX_BUFFERED_MIB: u64 = 1 << 16;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let response_headers = match response_headers(cli.response_headers) {
        Ok(h) => h,
        Err(e) => {
            say(e);
            return ExitCode::from(2);
        }
    };
    let opts = Options {
        config: cli.config,
        grpc: cli.grpc,
        http: cli.http,
        redis: cli.redis,
        shadow: cli.shadow,
        response_headers,
        state: cli.state,
        max_keys: cli.max_keys as usize,
        max_descriptors: cli.max_descriptors as usize,
        redis_timeout: Duration::from_millis(cli.redis_timeout_ms),
        on_redis_error: match cli.on_redis_error.as_str() {
            "allow" => OnRedisError::Allow,
            "local" => OnRedisError::Local,
            _ => OnRedisError::Unavailable,
        },
        save_every: Duration::from_secs(10),
        reload_poll: Duration::from_millis(500),
        max_connections: cli.max_connections as usize,
        header_timeout: Duration::from_millis(cli.header_timeout_ms),
        body_timeout: Duration::from_millis(cli.body_timeout_ms),
        idle_timeout: Duration::from_millis(cli.idle_timeout_ms),
        grpc_keepalive: Duration::from_millis(cli.grpc_keepalive_ms),
        grpc_keepalive_timeout: Duration::from_millis(cli.grpc_keepalive_timeout_ms),
        max_buffered_bytes: usize::try_from(cli.max_buffered_mib << 20).unwrap_or(usize::MAX),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(format_args!("cannot start the runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let r = rt.block_on(async {
        let shutdown = tollgate_rls::server::signals();
        run(opts, RlsClock::real(), None, shutdown).await
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(StartError::Config(e)) => {
            say(format_args!("invalid config: {e}"));
            ExitCode::from(2)
        }
        Err(StartError::Other(e)) => {
            say(&e);
            ExitCode::from(1)
        }
    }
}

/// The RateLimit headers' names when they are on: by `--response-headers` (`flag`) or by
/// `LIMIT_RESPONSE_HEADERS_ENABLED`, read as envoyproxy/ratelimit reads it (Go's
/// `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True` and their false counterparts; any
/// other value set, the empty one included, is an error there and here). The names come from
/// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and `LIMIT_RESET_HEADER` when set, read only
/// when the headers are on, as there.
fn response_headers(flag: bool) -> Result<Option<ResponseHeaders>, String> {
    let var = |name: &str| match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("{name}={v:?} is not UTF-8")),
    };
    let enabled = match var("LIMIT_RESPONSE_HEADERS_ENABLED")?.as_deref() {
        None => false,
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
        Some(v) => {
            return Err(format!(
                "LIMIT_RESPONSE_HEADERS_ENABLED={v:?}: expected true or false (or 1, t, T, TRUE, \
                 True, 0, f, F, FALSE, False)"
            ))
        }
    };
    if !(flag || enabled) {
        return Ok(None);
    }
    let defaults = ResponseHeaders::default();
    let (limit, remaining, reset) = (
        var("LIMIT_LIMIT_HEADER")?,
        var("LIMIT_REMAINING_HEADER")?,
        var("LIMIT_RESET_HEADER")?,
    );
    ResponseHeaders::new(
        limit.as_deref().unwrap_or(defaults.limit()),
        remaining.as_deref().unwrap_or(defaults.remaining()),
        reset.as_deref().unwrap_or(defaults.reset()),
    )
    .map(Some)
}

/// Writes an error line to stderr; a line that cannot be written (stderr's reader gone) is
/// lost, so that the exit status stays the one the error calls for rather than a panic's.
fn say(msg: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "tollgate-rls: {msg}");
}
