//! Test support (feature `test-support`): throwaway `redis-server` processes on free loopback
//! ports, for this crate's tests and other workspace crates' (e.g. `tower/`).
//!
//! * [`RedisServer::start`] — one server (`--save '' --appendonly no`, in its own temp dir),
//!   stopped and removed on drop; [`pause`](RedisServer::pause) / [`resume`](RedisServer::resume)
//!   (SIGSTOP / SIGCONT), [`restart`](RedisServer::restart) (SIGKILL, then again on the same
//!   port).
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

/// Waits until `child` answers on `port` and has loaded its data. The answer must name
/// `child`'s process id: the port was free when drawn, but another test's server may have
/// taken it since, and then `child` fails to bind and exits while that one answers.
fn wait_for(port: u16, child: &mut Child, timeout: Duration) -> bool {
    let t0 = Instant::now();
    let ours = format!("\r\nprocess_id:{}\r\n", child.id());
    while t0.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(info) = command(port, "INFO server") {
            if info.contains(&ours) {
                // A server loading its data (the append-only file after a restart) answers
                // `INFO` but refuses every other command (`LOADING`) until it is done.
                if command(port, "INFO persistence").is_ok_and(|p| p.contains("\r\nloading:0\r\n"))
                {
                    return true;
                }
            } else if info.contains("\r\nprocess_id:") {
                // Another process's server holds the port.
                return false;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// One throwaway `redis-server` on `127.0.0.1` (killed and its directory removed on drop).
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
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
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = Self::launch(&dir, port, cluster, &args) {
                return RedisServer {
                    child,
                    port,
                    dir,
                    cluster,
                    args,
                };
            }
        }
        panic!("redis-server did not start (5 attempts)");
    }

    fn launch(dir: &std::path::Path, port: u16, cluster: bool, args: &[String]) -> Option<Child> {
        let mut cmd = Command::new("redis-server");
        cmd.current_dir(dir)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(format!("nodes-{port}.conf"));
        }
        let mut child = cmd.spawn().ok()?;
        if wait_for(port, &mut child, Duration::from_secs(10)) {
            Some(child)
        } else {
            let _ = child.kill();
            let _ = child.wait();
            None
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
            .args([sig, &self.child.id().to_string()])
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
    /// the same port.
    pub fn restart(&mut self) {
        self.kill();
        let t0 = Instant::now();
        loop {
            if let Some(child) = Self::launch(&self.dir, self.port, self.cluster, &self.args) {
                self.child = child;
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "restart on port {} failed",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server (SIGKILL) without restarting it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused process still dies of SIGKILL.
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
