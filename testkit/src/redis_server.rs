//! Test support (feature `test-support`): throwaway `redis-server` processes on free loopback
//! ports, for this crate's tests and other workspace crates' (e.g. `tower/`).
//!
//! * [`RedisServer::start`] — one server (`--save '' --appendonly no`, in its own temp dir),
//!   killed and removed on drop, and killed by a watchdog process when the test process dies
//!   without dropping it (killed, say); [`pause`](RedisServer::pause) /
//!   [`resume`](RedisServer::resume) (SIGSTOP / SIGCONT), [`restart`](RedisServer::restart)
//!   (SIGKILL, then again on the same port).
//! * [`RedisCluster::start`] — three masters joined by `redis-cli --cluster create`.
//!
//! When `redis-server` (Debian package `redis-server`) is missing, `start` prints a loud
//! `SKIPPED` line to the terminal (not captured by the test harness) and returns `None`, so the
//! test can return early; with `CI=true` it panics instead: a missing server is a failure there.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether `CI=true`: then a missing `redis-server` fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `redis-server` and `redis-cli` can be started.
pub fn available() -> bool {
    ["redis-server", "redis-cli"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// Reports a skipped test on the terminal (bypassing the harness's output capture), or panics
/// under `CI=true`.
pub fn skip(test: &str, why: &str) {
    if required() {
        panic!("{test}: {why} (CI=true: a missing Redis server is a failure)");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED {test}: {why}. Install the Debian package `redis-server` to run it \
         (CI=true makes this a failure). ***"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// Sends one command (inline RESP) and returns the raw reply.
fn command(port: u16, cmd: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(format!("{cmd}\r\n").as_bytes())?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// How a wait for a server ended.
enum Ready {
    /// It answers and has loaded its data.
    Yes,
    /// It exited (it could not bind the port, say).
    Exited,
    /// Another process's server answers on the port.
    Taken,
    /// No answer in time.
    Timeout,
}

/// Waits until `child` answers on `port` and has loaded its data. The answer must name
/// `child`'s process id: the port was free when drawn, but another test's server may have
/// taken it since, and then `child` fails to bind and exits while that one answers.
fn wait_for(port: u16, child: &mut Child, timeout: Duration) -> Ready {
    let t0 = Instant::now();
    let ours = format!("\r\nprocess_id:{}\r\n", child.id());
    while t0.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            return Ready::Exited;
        }
        if let Ok(info) = command(port, "INFO server") {
            if info.contains(&ours) {
                // A server loading its data (the append-only file after a restart) answers
                // `INFO` but refuses every other command (`LOADING`) until it is done.
                if command(port, "INFO persistence").is_ok_and(|p| p.contains("\r\nloading:0\r\n"))
                {
                    return Ready::Yes;
                }
            } else if info.contains("\r\nprocess_id:") {
                return Ready::Taken;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ready::Timeout
}

/// One `redis-server` process and the watchdog that kills it when the test process dies.
///
/// A test binary that is killed (SIGKILL, a CI timeout) runs no destructor; without the watchdog
/// its servers would outlive it, a paused one (SIGSTOP, `CLIENT PAUSE`) forever. The watchdog is
/// a shell blocked reading a pipe whose only writer is this process: the kernel closes that end
/// when the process dies however it dies, the read returns, and the shell kills the server. It
/// ignores SIGINT, SIGTERM and SIGHUP, so a Ctrl-C sent to the whole process group leaves it to
/// kill a stopped server that would not have answered those signals.
#[derive(Debug)]
struct Process {
    server: Child,
    watchdog: Option<Child>,
}

/// The watchdog's script: `$1` is the server's process id, `$2` its directory. `read` returns at
/// end of input, when the test process (the pipe's only writer) is gone; then the server is
/// killed and its directory removed, as a drop would have done.
const WATCHDOG: &str = "trap '' INT TERM HUP; read -r _line; \
                        kill -CONT \"$1\" 2>/dev/null; kill -KILL \"$1\" 2>/dev/null; \
                        sleep 0.1; rm -rf -- \"$2\"";

impl Process {
    fn spawn(mut cmd: Command, dir: &std::path::Path) -> std::io::Result<Process> {
        let mut server = cmd.stdin(Stdio::null()).spawn()?;
        // Without a watchdog the server still dies on drop: only a killed test process would
        // leak it.
        let watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "redis-watchdog", &server.id().to_string()])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match watchdog {
            Ok(w) => Ok(Process {
                server,
                watchdog: Some(w),
            }),
            Err(e) => {
                let _ = server.kill();
                let _ = server.wait();
                Err(e)
            }
        }
    }

    /// Kills the server (SIGKILL, which a stopped process dies of too; SIGCONT first all the
    /// same, so nothing depends on that) and its watchdog, and reaps both. The watchdog goes
    /// first: once the server is reaped its process id may be reused, and the watchdog must not
    /// be left to kill whatever process gets it.
    fn kill(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if let Ok(None) = self.server.try_wait() {
            let _ = Command::new("kill")
                .args(["-CONT", &self.server.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// Why a server did not start on a port: another process holds it, or anything else.
enum LaunchError {
    /// The server could not bind the port (its log's line, or the other server's answer).
    PortTaken(String),
    Other(String),
}

/// One throwaway `redis-server` on `127.0.0.1`, killed and its directory removed on drop, and
/// killed too if the test process dies without dropping it (a watchdog process waits for that).
#[derive(Debug)]
pub struct RedisServer {
    process: Process,
    port: u16,
    dir: PathBuf,
    cluster: bool,
    /// Extra `redis-server` arguments, after the defaults (so they override them).
    args: Vec<String>,
}

impl RedisServer {
    /// Starts a server, or returns `None` after [`skip`] when `redis-server` is missing.
    /// `test` names the caller in the skip message.
    pub fn start(test: &str) -> Option<RedisServer> {
        if !available() {
            skip(test, "redis-server/redis-cli not found on PATH");
            return None;
        }
        Some(Self::spawn(false, &[]))
    }

    /// [`start`](RedisServer::start) with extra `redis-server` arguments (persistence, say:
    /// `["--appendonly", "yes"]`), kept for [`restart`](RedisServer::restart).
    pub fn start_with(test: &str, args: &[&str]) -> Option<RedisServer> {
        if !available() {
            skip(test, "redis-server/redis-cli not found on PATH");
            return None;
        }
        Some(Self::spawn(false, args))
    }

    fn spawn(cluster: bool, args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut last = String::new();
        for _ in 0..5 {
            // A port drawn free may be taken before the server binds it: draw another.
            let port = free_port();
            match Self::launch(&dir, port, cluster, &args) {
                Ok(process) => {
                    return RedisServer {
                        process,
                        port,
                        dir,
                        cluster,
                        args,
                    }
                }
                Err(LaunchError::PortTaken(why) | LaunchError::Other(why)) => last = why,
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("redis-server did not start (5 attempts; the last: {last})");
    }

    fn launch(
        dir: &std::path::Path,
        port: u16,
        cluster: bool,
        args: &[String],
    ) -> Result<Process, LaunchError> {
        // The log goes to a file of the attempt's own, read back to say why a start failed.
        let log = dir.join(format!("redis-{port}.log"));
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new("redis-server");
        cmd.current_dir(dir)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(format!("nodes-{port}.conf"));
        }
        let mut process = Process::spawn(cmd, dir)
            .map_err(|e| LaunchError::Other(format!("cannot run redis-server: {e}")))?;
        match wait_for(port, &mut process.server, Duration::from_secs(10)) {
            Ready::Yes => Ok(process),
            other => {
                process.kill();
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                // Warnings are marked `#`: the bind error, or the last of them.
                let line = said
                    .lines()
                    .find(|l| l.contains("Address already in use"))
                    .or_else(|| said.lines().rev().find(|l| l.contains('#')))
                    .unwrap_or("")
                    .trim()
                    .to_string();
                Err(match other {
                    Ready::Taken => LaunchError::PortTaken(format!(
                        "port {port} is held by another process's redis-server"
                    )),
                    _ if said.contains("Address already in use") => LaunchError::PortTaken(
                        format!("port {port} is held by another process: {line}"),
                    ),
                    Ready::Exited => LaunchError::Other(format!("redis-server exited: {line}")),
                    _ => LaunchError::Other(format!("no answer on port {port} in 10 s: {line}")),
                })
            }
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process's id (a new one after [`restart`](RedisServer::restart)).
    pub fn pid(&self) -> u32 {
        self.process.server.id()
    }

    /// Runs `redis-cli -p PORT args…` and returns its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} failed");
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL; without persistence its data is gone) and starts a new one on
    /// the same port (clients keep their URL).
    ///
    /// # Panics
    ///
    /// When no server answers on the port within 10 s, and at once, with the server's own
    /// reason, when another process has taken the port for 1 s of retries: a restart cannot
    /// move to another port, and a port taken that long is not given back in time.
    pub fn restart(&mut self) {
        self.kill();
        let t0 = Instant::now();
        loop {
            let why = match Self::launch(&self.dir, self.port, self.cluster, &self.args) {
                Ok(process) => {
                    self.process = process;
                    return;
                }
                Err(LaunchError::PortTaken(why)) => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(1),
                        "restart on port {} failed: {why}",
                        self.port
                    );
                    why
                }
                Err(LaunchError::Other(why)) => why,
            };
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "restart on port {} failed: {why}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server (SIGKILL, a paused one too) without restarting it.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A local Redis Cluster of three masters (no replicas) on loopback.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts and joins three masters, or returns `None` after [`skip`] when `redis-server` is
    /// missing. Waits until every node reports `cluster_state:ok`.
    pub fn start(test: &str) -> Option<RedisCluster> {
        if !available() {
            skip(test, "redis-server/redis-cli not found on PATH");
            return None;
        }
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn(true, &[])).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let t0 = Instant::now();
        while !nodes
            .iter()
            .all(|n| command(n.port, "CLUSTER INFO").is_ok_and(|r| r.contains("cluster_state:ok")))
        {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "cluster never became ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(RedisCluster { nodes })
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}
