//! Startup, the two listeners, hot reload, saved state and the drain.

use crate::config::{config_files, Config, ConfigError};
use crate::conn::{self, Limits, Protocol};
use crate::engine::{Backend, LocalBackend, OnRedisError, RedisBackend, RlsClock};
use crate::grpc::Grpc;
use crate::service::Service;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tonic_health::ServingStatus;

/// How long a drain waits for open connections to close, on both ports together: the drain's
/// deadline is this long after the signal, and every connection still open then is closed.
pub(crate) const DRAIN_BOUND: Duration = Duration::from_secs(10);

/// What `run` needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--config`.
    pub config: PathBuf,
    /// `--grpc`.
    pub grpc: SocketAddr,
    /// `--http`.
    pub http: SocketAddr,
    /// `--redis`.
    pub redis: Option<String>,
    /// `--shadow`.
    pub shadow: bool,
    /// `--state`.
    pub state: Option<PathBuf>,
    /// `--max-keys`.
    pub max_keys: usize,
    /// `--redis-timeout-ms`.
    pub redis_timeout: Duration,
    /// `--on-redis-error`.
    pub on_redis_error: OnRedisError,
    /// How often `--state` is written (also at exit).
    pub save_every: Duration,
    /// How often the config path is read for changes.
    pub reload_poll: Duration,
    /// `--max-connections`: the most connections each port holds open at once.
    pub max_connections: usize,
    /// `--header-timeout-ms`.
    pub header_timeout: Duration,
    /// `--body-timeout-ms`.
    pub body_timeout: Duration,
    /// `--idle-timeout-ms`.
    pub idle_timeout: Duration,
    /// `--grpc-keepalive-ms`.
    pub grpc_keepalive: Duration,
    /// `--grpc-keepalive-timeout-ms`.
    pub grpc_keepalive_timeout: Duration,
}

impl Options {
    /// The defaults of the command line, for `config`.
    pub fn new(config: PathBuf) -> Options {
        Options {
            config,
            grpc: "127.0.0.1:8081".parse().expect("an address"),
            http: "127.0.0.1:8080".parse().expect("an address"),
            redis: None,
            shadow: false,
            state: None,
            max_keys: 1_000_000,
            redis_timeout: Duration::from_millis(15),
            on_redis_error: OnRedisError::Unavailable,
            save_every: Duration::from_secs(10),
            reload_poll: Duration::from_millis(500),
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            grpc_keepalive: Duration::from_secs(60),
            grpc_keepalive_timeout: Duration::from_secs(20),
        }
    }

    /// The connection limits of both ports.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            keepalive_interval: self.grpc_keepalive,
            keepalive_timeout: self.grpc_keepalive_timeout,
        }
    }
}

/// Why `run` did not start.
#[derive(Debug)]
pub enum StartError {
    /// The config is invalid (exit status 2).
    Config(ConfigError),
    /// Anything else: a port in use, Redis unreachable (exit status 1).
    Other(String),
}

/// The running service, once both ports are bound.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The gRPC address.
    pub grpc: SocketAddr,
    /// The HTTP address.
    pub http: SocketAddr,
    /// The service (tests reload it and read its backend).
    pub service: Arc<Service>,
}

/// A future that resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called (inside the runtime), so call it before the service announces itself: a signal that
/// arrives earlier would otherwise end the process.
pub fn signals() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(term) => {}
            _ = wait(int) => {}
        }
    }
}

/// Writes one log line to stderr. A line that cannot be written (stderr a pipe whose reader
/// went away) is lost, never a panic: `eprintln!` would panic there, ending the accept loop
/// or the drain before the state is saved.
pub(crate) fn log(msg: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "tollgate-rls: {msg}");
}

/// Runs the service until `shutdown` resolves, then drains: `/healthcheck` and gRPC health
/// answer "not serving", the listeners stop accepting, in-flight calls finish, the state is
/// saved. Prints `tollgate-rls grpc=IP:PORT http=IP:PORT` once both ports are bound.
pub async fn run(
    opts: Options,
    clock: RlsClock,
    ready: Option<oneshot::Sender<Ready>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // The digest first: a change between it and the load is seen as a change (and loaded
    // again), never missed.
    let first_digest = digest(&opts.config);
    let config = Config::load(&opts.config).map_err(StartError::Config)?;
    let handle = crate::metrics::install();
    let backend = match &opts.redis {
        None => Backend::Local(LocalBackend::new(clock.clone(), opts.max_keys)),
        Some(url) => {
            let fallback = (opts.on_redis_error == OnRedisError::Local)
                .then(|| LocalBackend::new(clock.clone(), opts.max_keys));
            Backend::Redis(
                RedisBackend::connect(url, opts.redis_timeout, opts.on_redis_error, fallback)
                    .await
                    .map_err(StartError::Other)?,
            )
        }
    };
    let service = Arc::new(Service::new(config, backend, opts.shadow));
    crate::metrics::config_load(true);
    if let (Some(path), Backend::Local(local)) = (&opts.state, service.backend()) {
        restore_state(local, path);
    }
    let grpc_listener = TcpListener::bind(opts.grpc)
        .await
        .map_err(|e| StartError::Other(format!("cannot listen on {} (gRPC): {e}", opts.grpc)))?;
    let http_listener = TcpListener::bind(opts.http)
        .await
        .map_err(|e| StartError::Other(format!("cannot listen on {} (HTTP): {e}", opts.http)))?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|e| StartError::Other(e.to_string()))?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|e| StartError::Other(e.to_string()))?;

    let (health, health_service) = tonic_health::server::health_reporter();
    for name in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let limits = opts.limits();
    let (grpc_stop_tx, grpc_stop) = oneshot::channel::<tokio::time::Instant>();
    let grpc_app = tonic::service::Routes::new(health_service)
        .add_service(Grpc::server(service.clone()))
        .prepare()
        .into_axum_router();
    let mut grpc = tokio::spawn(conn::serve(
        grpc_listener,
        grpc_app,
        Protocol::Http2,
        limits,
        conn::Tasks::new().token(),
        async {
            // `run` always sends the deadline before it drops the sender.
            grpc_stop
                .await
                .unwrap_or_else(|_| tokio::time::Instant::now())
        },
    ));
    let (http_stop_tx, http_stop) = oneshot::channel::<tokio::time::Instant>();
    let app = crate::http::router(service.clone(), handle);
    let mut http = tokio::spawn(conn::serve(
        http_listener,
        app,
        Protocol::Http1,
        limits,
        conn::Tasks::new().token(),
        async {
            // `run` always sends the deadline before it drops the sender.
            http_stop
                .await
                .unwrap_or_else(|_| tokio::time::Instant::now())
        },
    ));

    // SIGHUP's handler before the first line (its default action ends the process).
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "tollgate-rls grpc={grpc_addr} http={http_addr}");
        let _ = out.flush();
    }
    if let Some(tx) = ready {
        let _ = tx.send(Ready {
            grpc: grpc_addr,
            http: http_addr,
            service: service.clone(),
        });
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let watcher = tokio::spawn(watch_config(
        hup,
        opts.config.clone(),
        service.clone(),
        opts.reload_poll,
        first_digest,
        stop_rx.clone(),
    ));
    let saver = opts.state.clone().map(|path| {
        tokio::spawn(save_periodically(
            service.clone(),
            path,
            opts.save_every,
            stop_rx.clone(),
        ))
    });

    shutdown.await;
    log("draining");
    service.drain();
    for name in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        health
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    let _ = stop_tx.send(true);
    // In-flight calls finish; a connection still open at the drain's deadline (a peer that
    // does not answer the GOAWAY's ping, a call that does not end) is closed by its own task
    // then, which aborts its calls' tasks and waits for them. An accept loop that has not
    // returned by the deadline is aborted, which drops its connection tasks. The gRPC port
    // drains first, the HTTP port meanwhile answering `/healthcheck` with 503; one deadline bounds
    // both, so that the process exits within `DRAIN_BOUND` of the signal, not one bound per
    // port.
    let deadline = tokio::time::Instant::now() + DRAIN_BOUND;
    let _ = grpc_stop_tx.send(deadline);
    if tokio::time::timeout_at(deadline, &mut grpc).await.is_err() {
        grpc.abort();
        log("gRPC connections still open after the drain's bound: closed");
    }
    let _ = http_stop_tx.send(deadline);
    if tokio::time::timeout_at(deadline, &mut http).await.is_err() {
        http.abort();
        log("HTTP connections still open after the drain's bound: closed");
    }
    let _ = watcher.await;
    if let Some(s) = saver {
        let _ = s.await;
    }
    if let Some(path) = &opts.state {
        save_state(&service, path).await;
    }
    log("stopped");
    Ok(())
}

/// A digest of the config path's files (names and contents), to notice any change: an edit,
/// a rename over a file, a ConfigMap's `..data` link swapped.
fn digest(path: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    match config_files(path) {
        Ok(files) => {
            for f in files {
                f.hash(&mut h);
                match std::fs::read(&f) {
                    Ok(bytes) => bytes.hash(&mut h),
                    Err(e) => e.kind().hash(&mut h),
                }
            }
        }
        Err(e) => e.message.hash(&mut h),
    }
    h.finish()
}

/// Loads the config into the service, counting and logging the result; an invalid config
/// leaves the old one serving.
pub fn reload(path: &Path, service: &Service) -> bool {
    match Config::load(path) {
        Ok(c) => {
            let limits = c.limits().len();
            service.reload(c);
            crate::metrics::config_load(true);
            log(format!(
                "config reloaded from {} ({limits} limits)",
                path.display()
            ));
            true
        }
        Err(e) => {
            crate::metrics::config_load(false);
            log(format!(
                "config reload failed, the previous config keeps serving: {e}"
            ));
            false
        }
    }
}

async fn watch_config(
    mut hup: Option<tokio::signal::unix::Signal>,
    path: PathBuf,
    service: Arc<Service>,
    every: Duration,
    mut last: u64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let forced = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
            _ = stop.changed() => return,
        };
        let p = path.clone();
        let now = tokio::task::spawn_blocking(move || digest(&p))
            .await
            .unwrap_or(0);
        if forced || now != last {
            last = now;
            let (p, s) = (path.clone(), service.clone());
            let _ = tokio::task::spawn_blocking(move || reload(&p, &s)).await;
        }
    }
}

async fn save_periodically(
    service: Arc<Service>,
    path: PathBuf,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => save_state(&service, &path).await,
            _ = stop.changed() => return,
        }
    }
}

async fn save_state(service: &Arc<Service>, path: &Path) {
    let (s, p) = (service.clone(), path.to_owned());
    let r = tokio::task::spawn_blocking(move || match s.backend() {
        Backend::Local(l) => write_state(l, &p),
        Backend::Redis(_) | Backend::FixedWindow(_) => Ok(()),
    })
    .await;
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log(format!("cannot save the state to {}: {e}", path.display())),
        Err(e) => log(format!("the state save failed: {e}")),
    }
}

/// Writes the state next to `path` (a temporary file in its directory), syncs it, renames it
/// over `path` and syncs the directory: a crash leaves the old file or the new one, never a
/// torn one.
pub fn write_state(local: &LocalBackend, path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        local.save(&mut w)?;
        w.flush()?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(&dir)?.sync_all()
}

/// Restores the local backend from `path`: no file is a first start (buckets full), a damaged
/// one starts every bucket drained; a log line either way.
pub fn restore_state(local: &LocalBackend, path: &Path) {
    match std::fs::File::open(path) {
        Ok(f) => match local.restore(std::io::BufReader::new(f)) {
            crate::engine::Restored::Ok {
                tables,
                drained,
                retired,
            } => {
                let mut line = format!("state restored from {} ({tables} limits", path.display());
                if drained > 0 {
                    line += &format!(
                        "; {drained} with another number of rates than saved, in records \
                         without their rates (an earlier build's), start drained"
                    );
                }
                if retired > 0 {
                    line += &format!(
                        "; {retired} tables of limits not configured kept aside, resumed if \
                         their limits come back"
                    );
                }
                log(line + ")");
            }
            crate::engine::Restored::Damaged(why) => log(format!(
                "the state file {} is damaged ({why}): every bucket starts drained",
                path.display()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => log(format!(
            "no state file at {}: a first start, every bucket starts full",
            path.display()
        )),
        Err(e) => {
            local.restore(&b""[..]);
            log(format!(
                "cannot read the state file {} ({e}): every bucket starts drained",
                path.display()
            ))
        }
    }
}
