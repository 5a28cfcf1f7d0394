//! Startup, the two listeners, hot reload, saved state and the drain.

use crate::config::{read_sources, Config, ConfigError, LoadOptions, Target};
use crate::conn::{self, Limits, Protocol};
use crate::engine::{Backend, LocalBackend, OnRedisError, RedisBackend, RlsClock};
use crate::grpc::Grpc;
use crate::service::{ResponseHeaders, Service};
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
pub const DRAIN_BOUND: Duration = Duration::from_secs(10);

/// How long past the drain's deadline `run` waits for a port's [`conn::serve`] to return
/// before it aborts it. `serve` closes its connections at the deadline and returns once their
/// calls' tasks have ended, at their next turn: this is a backstop for a task that does not
/// end (a bug), not a bound a peer can reach.
const ABORT_AFTER: Duration = Duration::from_millis(500);

/// How long past the drain's deadline `run` waits, in all, for every task of both ports to
/// end (those of an aborted `serve` included) before it saves the state without them: the
/// process exits within `DRAIN_BOUND + DRAIN_GRACE` of the signal, plus the final save.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);

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
    /// `--response-headers` (or `LIMIT_RESPONSE_HEADERS_ENABLED`): the RateLimit headers'
    /// names; `None` adds no headers.
    pub response_headers: Option<ResponseHeaders>,
    /// `--state`.
    pub state: Option<PathBuf>,
    /// `--max-keys`.
    pub max_keys: usize,
    /// `--max-descriptors`.
    pub max_descriptors: usize,
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
    /// `--max-buffered-mib`, in bytes: what each port's unfinished requests hold together
    /// ([`Limits::max_buffered_bytes`]).
    pub max_buffered_bytes: usize,
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
            response_headers: None,
            state: None,
            max_keys: 1_000_000,
            max_descriptors: crate::config::DEFAULT_MAX_DESCRIPTORS,
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
            max_buffered_bytes: conn::MAX_PORT_MESSAGE_BYTES,
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
            max_buffered_bytes: self.max_buffered_bytes,
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

/// The names gRPC health answers for: the whole server (`""`), the rate-limit service, and
/// `ratelimit`, the one envoyproxy/ratelimit reports under, so that probes and Envoy health
/// checks written for it keep working.
const HEALTH_NAMES: [&str; 3] = [
    "",
    "envoy.service.ratelimit.v3.RateLimitService",
    "ratelimit",
];

/// Runs the service until `shutdown` resolves, then drains: `/healthcheck` and gRPC health
/// answer "not serving", the listeners stop accepting, in-flight calls finish (those still
/// running [`DRAIN_BOUND`] after `shutdown` resolved are cancelled, with their connections),
/// and once every call's task has ended the state is saved. Returns within `DRAIN_BOUND` plus
/// [`DRAIN_GRACE`] of `shutdown`, plus the final save. Prints
/// `tollgate-rls grpc=IP:PORT http=IP:PORT` once both ports are bound.
pub async fn run(
    opts: Options,
    clock: RlsClock,
    ready: Option<oneshot::Sender<Ready>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    run_with(opts, clock, ready, shutdown, Hooks::default()).await
}

/// What tests change in [`run`]: the drain's bound, and routes served on the gRPC port
/// besides the service's.
#[derive(Debug)]
struct Hooks {
    drain_bound: Duration,
    grpc_routes: Option<axum::Router>,
}

impl Default for Hooks {
    fn default() -> Hooks {
        Hooks {
            drain_bound: DRAIN_BOUND,
            grpc_routes: None,
        }
    }
}

/// [`run`], with `hooks`.
async fn run_with(
    opts: Options,
    clock: RlsClock,
    ready: Option<oneshot::Sender<Ready>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    hooks: Hooks,
) -> Result<(), StartError> {
    // The digest of the text loaded: a file that differs from it later is a change.
    let (first_digest, sources) = read_config(&opts.config);
    let target = match opts.redis {
        Some(_) => Target::Redis,
        None => Target::Local,
    };
    let load = LoadOptions {
        target,
        max_descriptors: opts.max_descriptors,
    };
    let config = sources
        .and_then(|s| Config::from_sources_with(&s, load))
        .map_err(StartError::Config)?;
    log_warnings(&config);
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
    let mut service =
        Service::new(config, backend, opts.shadow).with_max_descriptors(opts.max_descriptors);
    if let Some(h) = &opts.response_headers {
        service = service.with_response_headers(h.clone());
    }
    let service = Arc::new(service);
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
    for name in HEALTH_NAMES {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let limits = opts.limits();
    let grpc_budget = conn::HandlerBudget::for_port(&limits, Protocol::Http2);
    let mut grpc_app = tonic::service::Routes::new(health_service)
        .add_service(Grpc::server(service.clone()).with_budget(grpc_budget.clone()))
        .prepare()
        .into_axum_router();
    if let Some(routes) = hooks.grpc_routes {
        grpc_app = grpc_app.merge(routes);
    }
    let grpc = Port::serve(
        "gRPC",
        grpc_listener,
        grpc_app,
        Protocol::Http2,
        limits,
        grpc_budget,
    );
    let app = crate::http::router(service.clone(), handle);
    let http = Port::serve(
        "HTTP",
        http_listener,
        app,
        Protocol::Http1,
        limits,
        conn::HandlerBudget::for_port(&limits, Protocol::Http1),
    );

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
    for name in HEALTH_NAMES {
        health
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    let _ = stop_tx.send(true);
    // In-flight calls finish; a connection still open at the drain's deadline (a peer that
    // does not answer the GOAWAY's ping, a call that does not end) is closed by its own task
    // then, which aborts its calls' tasks and waits for them. The gRPC port drains first, the
    // HTTP port meanwhile answering `/healthcheck` with 503; one deadline bounds both, so that
    // the process exits within `DRAIN_BOUND` (and the backstop's grace) of the signal, not one
    // bound per port.
    let deadline = tokio::time::Instant::now() + hooks.drain_bound;
    let grpc_ended = grpc.drain(deadline).await;
    let http_ended = http.drain(deadline).await;
    let _ = watcher.await;
    if let Some(s) = saver {
        let _ = s.await;
    }
    if let Some(path) = &opts.state {
        // Only once no call can still decide (a handler of the local backend decides within
        // one turn, so none is half-made once its task ended): every decision is in the file.
        if !(grpc_ended && http_ended) {
            log(
                "saving the state while some calls' tasks still run: their decisions may be \
                 missing from it",
            );
        }
        save_state(&service, path).await;
    }
    log("stopped");
    Ok(())
}

/// One port's accept loop, as [`run`] drains it.
struct Port {
    name: &'static str,
    serve: tokio::task::JoinHandle<()>,
    tasks: conn::Tasks,
    stop: oneshot::Sender<tokio::time::Instant>,
}

impl Port {
    /// Spawns [`conn::serve_with_budget`] on `listener`.
    fn serve(
        name: &'static str,
        listener: TcpListener,
        app: axum::Router,
        protocol: Protocol,
        limits: conn::Limits,
        budget: conn::HandlerBudget,
    ) -> Port {
        let tasks = conn::Tasks::new();
        let (stop, stopped) = oneshot::channel();
        let serve = tokio::spawn(conn::serve_with_budget(
            listener,
            app,
            protocol,
            limits,
            budget,
            tasks.token(),
            // `run` always sends the deadline before it drops the sender.
            async {
                stopped
                    .await
                    .unwrap_or_else(|_| tokio::time::Instant::now())
            },
        ));
        Port {
            name,
            serve,
            tasks,
            stop,
        }
    }

    /// Drains the port with `deadline` as its connections' close bound and returns whether
    /// every task of the port (its accept loop, connections, calls) has ended. `serve`
    /// returns by itself shortly after the deadline; past `ABORT_AFTER` it is aborted, and
    /// its tasks, aborted with it, are waited for until `DRAIN_GRACE` past the deadline.
    async fn drain(self, deadline: tokio::time::Instant) -> bool {
        let Port {
            name,
            mut serve,
            tasks,
            stop,
        } = self;
        let _ = stop.send(deadline);
        if tokio::time::timeout_at(deadline + ABORT_AFTER, &mut serve)
            .await
            .is_err()
        {
            serve.abort();
            log(format_args!(
                "{name} connections still open {ABORT_AFTER:?} after the drain's deadline: aborted"
            ));
            // The aborted task's future (its connection tasks' set) is dropped at its next
            // turn; its connections' and calls' tasks end at theirs.
            let _ = tokio::time::timeout_at(deadline + DRAIN_GRACE, serve).await;
        }
        if tokio::time::timeout_at(deadline + DRAIN_GRACE, tasks.ended())
            .await
            .is_err()
        {
            log(format_args!(
                "{name} port: {} tasks (accept loop, connections, calls) still running \
                 {DRAIN_GRACE:?} after the drain's deadline: no longer waited for",
                tasks.running()
            ));
            return false;
        }
        true
    }
}

/// The config path's files, read once: their digest (names and contents, to notice any
/// change: an edit, a rename over a file, a ConfigMap's `..data` link swapped) and the text
/// itself, so that what is loaded is what the digest describes.
fn read_config(path: &Path) -> (u64, Result<Vec<(PathBuf, String)>, ConfigError>) {
    let sources = read_sources(path);
    let mut h = DefaultHasher::new();
    match &sources {
        Ok(files) => files.hash(&mut h),
        Err(e) => e.to_string().hash(&mut h),
    }
    (h.finish(), sources)
}

/// Loads the config into the service, counting and logging the result; an invalid config
/// leaves the old one serving.
pub fn reload(path: &Path, service: &Service) -> bool {
    load_into(path, read_config(path).1, service)
}

fn load_into(
    path: &Path,
    sources: Result<Vec<(PathBuf, String)>, ConfigError>,
    service: &Service,
) -> bool {
    // The config must suit the backend serving, as at start, within the same bounds.
    match sources.and_then(|s| Config::from_sources_with(&s, service.load_options())) {
        Ok(c) => {
            log_warnings(&c);
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

/// The most of a config's warnings logged one a line; the rest are counted in one line.
const MAX_WARNINGS_LOGGED: usize = 10;

/// Logs what a config's load ignored or replaced ([`Config::warnings`]).
fn log_warnings(config: &Config) {
    let w = config.warnings();
    for e in w.iter().take(MAX_WARNINGS_LOGGED) {
        log(format!("config warning: {e}"));
    }
    let more = w.len().saturating_sub(MAX_WARNINGS_LOGGED) + config.warnings_not_kept();
    if more > 0 {
        log(format!("config warning: {more} more warnings"));
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
        // The files read once: what is loaded is what the digest describes, so that a file
        // that later differs from it (one read mid-rewrite) is a change at the next poll.
        let p = path.clone();
        let Ok((now, sources)) = tokio::task::spawn_blocking(move || read_config(&p)).await else {
            continue;
        };
        if forced || now != last {
            last = now;
            let (p, s) = (path.clone(), service.clone());
            let _ = tokio::task::spawn_blocking(move || load_into(&p, sources, &s)).await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const CONFIG: &str = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n";

    /// Whether `service` has a limit on `(key, value)` in domain `d`.
    fn limited(service: &Service, key: &str) -> bool {
        let req = crate::service::Request {
            domain: "d".into(),
            descriptors: vec![crate::service::Descriptor {
                entries: vec![(key.into(), "x".into())],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let r = rt.block_on(service.should_rate_limit(&req)).unwrap();
        r.statuses[0].current_limit.is_some()
    }

    /// One poll of `watch_config` (the files read and digested, then loaded when changed)
    /// while a writer rewrites the file just read (truncated, then written again with the same
    /// text: a config sync rewriting files in place, an editor saving twice), so that the
    /// file holds a valid prefix of itself for a moment and then again what the poll read.
    /// The watcher converges on the file: it loads what it digested, so the digest it keeps
    /// describes the config serving and the next poll sees any difference from it.
    #[test]
    fn a_poll_loads_the_text_it_digested() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, CONFIG).unwrap();
        let backend = Backend::Local(LocalBackend::new(RlsClock::real(), 1_000));
        let service = Service::new(Config::load(&path).unwrap(), backend, false);
        let last = read_config(&path).0;
        // The edit: a limit on `path` added.
        let edited = format!(
            "{CONFIG}  - key: path\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
        );
        std::fs::write(&path, &edited).unwrap();
        // The poll reads the edit...
        let (now, sources) = read_config(&path);
        assert_ne!(now, last);
        // ...a writer rewrites the file meanwhile: it holds its first part (valid YAML,
        // without the `path` limit) when the poll loads...
        std::fs::write(&path, CONFIG).unwrap();
        assert!(load_into(&path, sources, &service));
        // ...and the writer ends: the file is what the poll read.
        std::fs::write(&path, &edited).unwrap();
        assert!(
            limited(&service, "path") || read_config(&path).0 != now,
            "the file limits `path`, the service does not, and the next poll's digest equals \
             the one kept: the watcher never reloads"
        );
        // A poll that reads the file mid-rewrite loads that, and keeps its digest: the file's
        // end state is a change.
        std::fs::write(&path, CONFIG).unwrap();
        let (mid, sources) = read_config(&path);
        assert!(load_into(&path, sources, &service));
        assert!(!limited(&service, "path"));
        std::fs::write(&path, &edited).unwrap();
        assert_ne!(read_config(&path).0, mid);
        assert!(reload(&path, &service));
        assert!(limited(&service, "path"));
    }

    /// A call's handler, alive until its future is dropped. Its release takes a while, as a
    /// handler's cleanup may, and then records whether the state file existed by then.
    struct Handler {
        state: PathBuf,
        saw: Arc<Mutex<Option<bool>>>,
    }

    impl Drop for Handler {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(200));
            *self.saw.lock().unwrap() = Some(self.state.exists());
        }
    }

    /// A call still in its handler at the drain's deadline is cancelled with its connection,
    /// and `run` saves the state only once the call's task has ended, its handler dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_state_is_saved_once_every_call_has_ended() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, CONFIG).unwrap();
        let state = dir.path().join("state");
        let mut opts = Options::new(config);
        opts.grpc = "127.0.0.1:0".parse().unwrap();
        opts.http = "127.0.0.1:0".parse().unwrap();
        opts.state = Some(state.clone());
        // Only the final save writes the file.
        opts.save_every = Duration::from_secs(600);
        let saw = Arc::new(Mutex::new(None));
        let (began_tx, mut began) = tokio::sync::mpsc::unbounded_channel::<()>();
        let routes = axum::Router::new().route(
            "/test.Stuck/Call",
            axum::routing::post({
                let (state, saw) = (state.clone(), saw.clone());
                move || {
                    let handler = Handler {
                        state: state.clone(),
                        saw: saw.clone(),
                    };
                    let began = began_tx.clone();
                    async move {
                        let _handler = handler;
                        let _ = began.send(());
                        std::future::pending::<&'static str>().await
                    }
                }
            }),
        );
        let hooks = Hooks {
            drain_bound: Duration::from_millis(500),
            grpc_routes: Some(routes),
        };
        let (ready_tx, ready) = oneshot::channel();
        let (stop_tx, stop) = oneshot::channel::<()>();
        let server = tokio::spawn(run_with(
            opts,
            RlsClock::real(),
            Some(ready_tx),
            async {
                let _ = stop.await;
            },
            hooks,
        ));
        let ready = tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .expect("ready in time")
            .expect("ready");

        let tcp = tokio::net::TcpStream::connect(ready.grpc).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        let req = axum::http::Request::post(format!("http://{}/test.Stuck/Call", ready.grpc))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (_answer, _) = client.send_request(req, true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), began.recv())
            .await
            .expect("the handler ran in time")
            .unwrap();

        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("run still ran 5 s after the signal, its drain's bound 500 ms")
            .expect("ran without a panic")
            .expect("started");
        conn.abort();
        let saw = *saw.lock().unwrap();
        match saw {
            None => panic!("a call's handler still ran when run returned"),
            Some(true) => panic!("the state was saved before a call's handler had ended"),
            Some(false) => {}
        }
        assert!(state.exists(), "the state was not saved");
    }

    /// Sets its flag once dropped, after a while (as a handler's cleanup may take).
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            std::thread::sleep(Duration::from_millis(100));
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A port whose accept loop ignores its stop: aborted past `ABORT_AFTER`, and drained once
    /// its future has been dropped, within `DRAIN_GRACE` of the deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_port_that_does_not_return_is_aborted_and_waited_for() {
        let tasks = conn::Tasks::new();
        let (stop, _stopped) = oneshot::channel();
        let (token, dropped) = (tasks.token(), Arc::default());
        let guard = Dropped(Arc::clone(&dropped));
        let serve = tokio::spawn(async move {
            let _token = token;
            let _guard = guard;
            std::future::pending::<()>().await
        });
        let port = Port {
            name: "test",
            serve,
            tasks,
            stop,
        };
        let deadline = tokio::time::Instant::now();
        let ended =
            tokio::time::timeout(DRAIN_GRACE + Duration::from_secs(2), port.drain(deadline))
                .await
                .expect("the drain still ran 2 s past its grace");
        assert!(ended, "the aborted task was given up");
        assert!(
            dropped.load(std::sync::atomic::Ordering::SeqCst),
            "drained before the aborted task's future was dropped"
        );
    }

    /// A task of the port that does not end, even once its accept loop is aborted (its place
    /// held elsewhere here): the drain gives it up at `DRAIN_GRACE` past the deadline.
    #[tokio::test]
    async fn a_port_whose_task_does_not_end_is_given_up_past_the_grace() {
        let tasks = conn::Tasks::new();
        let _stuck = tasks.token();
        let (stop, _stopped) = oneshot::channel();
        let token = tasks.token();
        let serve = tokio::spawn(async move {
            let _token = token;
            std::future::pending::<()>().await
        });
        let port = Port {
            name: "test",
            serve,
            tasks,
            stop,
        };
        let deadline = tokio::time::Instant::now();
        let ended =
            tokio::time::timeout(DRAIN_GRACE + Duration::from_secs(2), port.drain(deadline))
                .await
                .expect("the drain still ran 2 s past its grace");
        assert!(!ended, "a task still running was said to have ended");
        assert!(
            tokio::time::Instant::now() >= deadline + DRAIN_GRACE,
            "given up before the grace ended"
        );
    }
}
