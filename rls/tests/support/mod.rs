//! Shared by the integration tests: an in-process service on a `ManualClock`, a tonic client,
//! request builders, a plain HTTP client, and the binary.
#![allow(dead_code, unreachable_pub)]

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tollgate::ManualClock;
use tollgate_rls::engine::RlsClock;
use tollgate_rls::server::{run, Options, Ready};
use tollgate_rls::service::Service;

pub type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "tollgate-rls-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An in-process service on a manual clock, stopped on drop.
pub struct Rls {
    pub clock: ManualClock,
    pub ready: Ready,
    pub client: Client,
    pub dir: TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Rls {
    /// A service with `yaml` as its one config file (`config.yaml` in a fresh directory).
    pub async fn start(yaml: &str) -> Rls {
        Rls::start_with(yaml, |_| {}).await
    }

    pub async fn start_with(yaml: &str, tune: impl FnOnce(&mut Options)) -> Rls {
        let dir = TempDir::new("inproc");
        dir.write("config.yaml", yaml);
        let mut opts = Options::new(dir.path().to_owned());
        opts.grpc = "127.0.0.1:0".parse().unwrap();
        opts.http = "127.0.0.1:0".parse().unwrap();
        opts.max_keys = 1000;
        opts.reload_poll = Duration::from_millis(50);
        tune(&mut opts);
        let clock = ManualClock::new();
        // A reading far from 0, so that waits never clamp at the origin.
        clock.advance(Duration::from_secs(1_000_000));
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let c = RlsClock::manual(clock.clone());
        let task = tokio::spawn(async move {
            run(opts, c, Some(ready_tx), async {
                let _ = stop_rx.await;
            })
            .await
            .expect("the service starts");
        });
        let ready = tokio::time::timeout(Duration::from_secs(10), ready_rx)
            .await
            .expect("ready in time")
            .expect("ready");
        let client = RateLimitServiceClient::connect(format!("http://{}", ready.grpc))
            .await
            .unwrap();
        Rls {
            clock,
            ready,
            client,
            dir,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    pub fn service(&self) -> &Arc<Service> {
        &self.ready.service
    }

    /// Calls `ShouldRateLimit`.
    pub async fn call(
        &mut self,
        req: RateLimitRequest,
    ) -> Result<RateLimitResponse, tonic::Status> {
        self.client
            .should_rate_limit(req)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Calls and expects an answer.
    pub async fn ok(&mut self, req: RateLimitRequest) -> RateLimitResponse {
        self.call(req).await.expect("an answer")
    }

    /// Stops the service and waits for it.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A descriptor of `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor with its own `hits_addend`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..desc(entries)
    }
}

/// A request of `domain`.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

pub const OK: i32 = 1;
pub const OVER: i32 = 2;

/// `(code, remaining, reset seconds)` of every status.
pub fn brief(r: &RateLimitResponse) -> Vec<(i32, u32, Option<i64>)> {
    r.statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.limit_remaining,
                s.duration_until_reset.as_ref().map(|d| d.seconds),
            )
        })
        .collect()
}

/// A plain HTTP/1.1 request over a fresh connection: status and body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A reset after the response (the server closing with our bytes unread) still leaves the
    // response read.
    let r = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("an answer in time");
    if out.is_empty() {
        r.unwrap();
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_owned();
    (status, body)
}

/// `r` decided through `c`: the service's answer (a call that fails panics).
pub async fn decide(c: &mut Client, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r)
        .await
        .expect("an answer")
        .into_inner()
}

/// The binary's arguments: `--config config`, both ports on a free loopback port, then `extra`.
pub fn config_args<'a>(config: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--config",
        config.to_str().expect("a UTF-8 path"),
        "--grpc",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    args
}

/// The `tollgate-rls` binary.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tollgate-rls"))
}

/// A command running the binary with this process's environment and `env` applied: `Some`
/// sets a variable, `None` removes it.
pub fn command_with_env(env: &[(&str, Option<&str>)]) -> std::process::Command {
    let mut cmd = std::process::Command::new(binary());
    for (name, value) in env {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    cmd
}

/// A `tollgate-rls` process, killed on drop.
pub struct Proc {
    pub child: std::process::Child,
    pub grpc: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
    pub first_line: String,
    stderr: Arc<std::sync::Mutex<String>>,
}

impl Proc {
    /// Starts the binary with `args` and waits (10 s at most) for its first stdout line.
    pub fn start(args: &[&str]) -> Proc {
        Proc::start_with_env(args, &[])
    }

    /// [`start`](Proc::start) with `env` applied ([`command_with_env`]).
    pub fn start_with_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Proc {
        let mut cmd = command_with_env(env);
        cmd.args(args);
        Proc::spawn(cmd)
    }

    /// [`start`](Proc::start) with at most `nofile` open file descriptors (`ulimit -n`).
    #[allow(dead_code)]
    pub fn start_with_fd_limit(nofile: u32, args: &[&str]) -> Proc {
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(binary())
            .args(args);
        Proc::spawn(cmd)
    }

    fn spawn(mut cmd: std::process::Command) -> Proc {
        use std::io::{BufRead, BufReader, Read};
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut r = BufReader::new(out);
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining stdout.
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest);
        });
        let first_line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no first line; stderr: {}", stderr.lock().unwrap()));
        let addr = |name: &str| -> std::net::SocketAddr {
            first_line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| {
                    panic!(
                        "no {name}= in {first_line:?}; stderr: {}",
                        stderr.lock().unwrap()
                    )
                })
                .parse()
                .unwrap()
        };
        let (grpc, http) = (addr("grpc"), addr("http"));
        Proc {
            child,
            grpc,
            http,
            first_line,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether stderr shows `text` within 5 s (it is read by another thread).
    pub fn logged(&self, text: &str) -> bool {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if self.stderr().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits (at most `limit`) for the process to exit; its status code (`Some(-signal)`
    /// when a signal ended it, `None` if it is still running).
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let t0 = std::time::Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().or(s.signal().map(|n| -n));
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub async fn client(&self) -> Client {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    /// A counter's value on the process's /metrics page (0 if absent).
    pub async fn metric(&self, series: &str) -> u64 {
        metric(self.http, series).await
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A series' value on the /metrics page of the HTTP port at `addr` (0 if absent); panics
/// on a value that is not a whole number of at least 0 (a gauge that drifted below 0 would
/// otherwise read 0).
pub async fn metric(addr: std::net::SocketAddr, series: &str) -> u64 {
    let (_, page) = http(addr, "GET", "/metrics", "").await;
    let value = page
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse::<f64>().unwrap());
    assert!(
        value >= 0.0 && value.fract() == 0.0,
        "{series} reads {value}"
    );
    value as u64
}

/// Polls `check` (every 20 ms) until it holds, and panics naming `what` if it does not within
/// 10 s: a test waits for what it needs (a call in flight, a budget given back) as long as a
/// loaded machine takes, and no longer than that takes.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = std::time::Instant::now();
    while !check().await {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the binary to its exit: status code and stderr.
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    run_to_exit_with_env(args, &[])
}

/// [`run_to_exit`] with `env` applied ([`command_with_env`]).
pub fn run_to_exit_with_env(args: &[&str], env: &[(&str, Option<&str>)]) -> (Option<i32>, String) {
    let out = command_with_env(env).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
