//! A `RedisServer` never outlives its test: not when the test panics, not when the server is
//! paused (SIGSTOP, `CLIENT PAUSE`) as it is dropped, not when the test binary is killed and runs
//! no destructor. A restart onto a port another process has taken fails at once, saying so.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_testkit::redis_server::RedisServer;

/// Whether process `pid` runs (a zombie, dead and not yet reaped by an init that may never reap
/// it, does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Waits up to 5 s for process `pid` to be gone.
fn gone(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_paused_server_dies_on_drop() {
    let Some(stopped) = RedisServer::start("redis_server::a_paused_server_dies_on_drop") else {
        return;
    };
    let Some(client_paused) = RedisServer::start("redis_server::a_paused_server_dies_on_drop")
    else {
        return;
    };
    let pids = [stopped.pid(), client_paused.pid()];
    stopped.pause();
    assert_eq!(
        client_paused.cli(&["CLIENT", "PAUSE", "600000"]).trim(),
        "OK"
    );
    drop(stopped);
    drop(client_paused);
    for pid in pids {
        assert!(gone(pid), "redis-server {pid} outlived its RedisServer");
    }
}

#[test]
fn a_server_dies_with_a_test_that_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let Some(server) =
            RedisServer::start("redis_server::a_server_dies_with_a_test_that_panics")
        else {
            return;
        };
        server.pause();
        tx.send(server.pid()).unwrap();
        panic!("the test fails with its server paused");
    });
    let panicked = test.join().is_err();
    let Ok(pid) = rx.recv() else {
        return; // skipped: no redis-server
    };
    assert!(panicked);
    assert!(gone(pid), "redis-server {pid} outlived the panicking test");
}

/// The environment variable that makes [`orphan_helper`] start a server: the file it writes the
/// server's process id to.
const PID_FILE: &str = "TOLLGATE_TESTKIT_ORPHAN_PID_FILE";

/// Run only as a child of [`a_server_dies_with_a_killed_test_binary`] (a no-op otherwise):
/// starts a server, pauses it, writes its process id and waits to be killed (30 s at most).
#[test]
fn orphan_helper() {
    let Ok(file) = std::env::var(PID_FILE) else {
        return;
    };
    let server = RedisServer::start("redis_server::orphan_helper").expect("redis-server");
    server.pause();
    let tmp = format!("{file}.tmp");
    let dir = std::env::temp_dir().join(format!("tollgate-redis-{}-0", std::process::id()));
    assert!(dir.is_dir(), "the first server's directory is {dir:?}");
    std::fs::write(&tmp, format!("{} {}", server.pid(), dir.display())).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    std::thread::sleep(Duration::from_secs(30));
}

/// A test binary killed with SIGKILL (a CI timeout, say) runs no destructor: its paused server
/// still dies with it, and the server's directory is removed.
#[test]
fn a_server_dies_with_a_killed_test_binary() {
    if !tollgate_testkit::redis_server::available() {
        tollgate_testkit::redis_server::skip(
            "redis_server::a_server_dies_with_a_killed_test_binary",
            "redis-server/redis-cli not found on PATH",
        );
        return;
    }
    let file = std::env::temp_dir().join(format!("tollgate-orphan-{}.pid", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "orphan_helper", "--test-threads", "1"])
        .env(PID_FILE, &file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let written = read_pid(&file, Duration::from_secs(20));
    let _ = helper.kill();
    let _ = helper.wait();
    let _ = std::fs::remove_file(&file);
    let (pid, dir) = written.expect("the helper never wrote its server's process id");
    let dead = gone(pid);
    if !dead {
        // Do not leave it behind for the next run.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(dead, "redis-server {pid} outlived its killed test binary");
    let t0 = Instant::now();
    while dir.exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = dir.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!left, "{dir:?} outlived its killed test binary");
}

/// The server's process id and directory, once the helper has written them to `file`.
fn read_pid(file: &Path, timeout: Duration) -> Option<(u32, PathBuf)> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Some((pid, dir)) = text.split_once(' ') {
                return Some((pid.parse().unwrap(), PathBuf::from(dir)));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Another process binds the port between the kill and the new start: `restart` cannot move to
/// another port (clients keep their URL), so it fails, within about a second and naming the
/// cause, instead of retrying for long or hanging.
#[test]
fn a_restart_onto_a_taken_port_fails_clearly() {
    let Some(mut server) = RedisServer::start("redis_server::a_restart_onto_a_taken_port") else {
        return;
    };
    server.kill();
    let _squatter = TcpListener::bind(("127.0.0.1", server.port())).unwrap();
    let t0 = Instant::now();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()))
        .expect_err("a restart onto a taken port succeeded");
    let took = t0.elapsed();
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains(&format!("port {}", server.port())) && msg.contains("Address already in use"),
        "unclear failure: {msg}"
    );
    assert!(took < Duration::from_secs(5), "the failure took {took:?}");
}
