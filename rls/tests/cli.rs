//! The binary's contract: the first stdout line, exit statuses, signals, `--state`, reloads
//! counted on /metrics.

mod support;

use std::time::{Duration, Instant};
use support::*;

const CONFIG: &str = "domain: cli\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

#[test]
fn bad_flags_and_invalid_configs_exit_2_with_a_clear_message() {
    let dir = TempDir::new("cli-bad");
    let good = dir.write("good.yaml", CONFIG);
    let good = good.to_str().unwrap();
    let (code, err) = run_to_exit(&["--config", good, "--max-keys", "zero"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--max-keys"), "{err}");
    let (code, err) = run_to_exit(&["--grpc", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--config"), "{err}");
    let (code, err) = run_to_exit(&["--config", good, "--bogus"]);
    assert_eq!(code, Some(2), "{err}");
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--header-timeout-ms", "0"),
        ("--body-timeout-ms", "0"),
        ("--idle-timeout-ms", "0"),
        ("--grpc-keepalive-ms", "0"),
        ("--grpc-keepalive-timeout-ms", "0"),
        ("--max-descriptors", "0"),
        ("--max-descriptors", "10000001"),
        ("--max-buffered-mib", "0"),
        ("--max-buffered-mib", "15"),
        ("--max-buffered-mib", "65537"),
        ("--max-buffered-mib", "256MiB"),
        ("--max-buffered-mib", "1e3"),
    ] {
        let (code, err) = run_to_exit(&["--config", good, flag, value]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(flag), "{err}");
    }
    let bad = dir.write(
        "bad.yaml",
        "domain: cli\ndescriptors:\n  - key: user\n    rate_limit: {unit: lightyear, requests_per_unit: 2}\n",
    );
    let (code, err) = run_to_exit(&["--config", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("bad.yaml:4: descriptors[0].rate_limit.unit"),
        "{err}"
    );
    let (code, err) = run_to_exit(&["--config", dir.path().join("none.yaml").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    // A config over --max-descriptors.
    let two = dir.write(
        "two.yaml",
        "domain: cli\ndescriptors:\n  - key: a\n  - key: b\n",
    );
    let two = two.to_str().unwrap();
    let (code, err) = run_to_exit(&["--config", two, "--max-descriptors", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--max-descriptors"), "{err}");
}

/// With stderr's reader gone before the start (every write fails with EPIPE), a start that
/// fails exits with the status its error calls for, not a panic's 101.
#[test]
fn a_failed_start_keeps_its_exit_status_with_stderr_closed() {
    let dir = TempDir::new("cli-closed");
    let bad = dir.write(
        "bad.yaml",
        "domain: cli\ndescriptors:\n  - key: user\n    rate_limit: {unit: lightyear, requests_per_unit: 2}\n",
    );
    let good = dir.write("good.yaml", CONFIG);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    for (args, want) in [
        (vec!["--config", bad.to_str().unwrap()], 2),
        (vec!["--config", good.to_str().unwrap(), "--grpc", &port], 1),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let status = std::process::Command::new(binary())
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(writer)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(want), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_after_its_first_line_and_drains_on_sigterm() {
    let dir = TempDir::new("cli-term");
    let cfg = dir.write("c.yaml", CONFIG);
    let args = config_args(&cfg, &[]);
    for sig in ["TERM", "INT"] {
        let mut p = Proc::start(&args);
        assert_eq!(
            p.first_line.trim_end(),
            format!("tollgate-rls grpc={} http={}", p.grpc, p.http)
        );
        let mut c = p.client().await;
        let out = decide(&mut c, req("cli", vec![desc(&[("user", "a")])])).await;
        assert_eq!(out.overall_code, OK);
        let (code, body) = http(p.http, "GET", "/healthcheck", "").await;
        assert_eq!((code, body.trim()), (200, "OK"));
        p.signal(sig);
        assert_eq!(p.wait(Duration::from_secs(20)), Some(0), "{}", p.stderr());
        assert!(p.logged("draining"));
    }
    // Signals right after the first line are the service's, not the default action's.
    for sig in ["TERM", "HUP"] {
        let mut p = Proc::start(&args);
        p.signal(sig);
        if sig == "HUP" {
            assert!(p.logged("config reloaded"), "{}", p.stderr());
            p.signal("TERM");
        }
        assert_eq!(p.wait(Duration::from_secs(20)), Some(0), "{}", p.stderr());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_are_counted_and_sighup_forces_one() {
    let dir = TempDir::new("cli-reload");
    let cfg = dir.write("c.yaml", CONFIG);
    let args = config_args(&cfg, &[]);
    let p = Proc::start(&args);
    let ok = r#"tollgate_rls_config_load_total{result="ok"}"#;
    let err = r#"tollgate_rls_config_load_total{result="error"}"#;
    assert_eq!(p.metric(ok).await, 1);
    let until = |want: u64, series: &'static str| {
        let p = &p;
        async move {
            let t0 = Instant::now();
            while p.metric(series).await != want {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "{series} != {want} after 2 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    p.signal("HUP");
    until(2, ok).await;
    std::fs::write(&cfg, "domain: cli\ndescriptors: [").unwrap();
    until(1, err).await;
    let mut c = p.client().await;
    let out = decide(&mut c, req("cli", vec![desc(&[("user", "b")])])).await;
    assert_eq!(
        out.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        2,
        "old config"
    );
    std::fs::write(
        &cfg,
        CONFIG.replace("requests_per_unit: 2", "requests_per_unit: 5"),
    )
    .unwrap();
    until(3, ok).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_a_restart_a_first_start_is_full_and_a_damaged_file_drains() {
    let dir = TempDir::new("cli-state");
    let cfg = dir.write("c.yaml", CONFIG);
    let state = dir.path().join("state.bin");
    let args = config_args(&cfg, &["--state", state.to_str().unwrap()]);
    let user = |u: &str| req("cli", vec![desc(&[("user", u)])]);
    let mut p = Proc::start(&args);
    assert!(p.logged("no state file"), "{}", p.stderr());
    let mut c = p.client().await;
    for _ in 0..2 {
        assert_eq!(decide(&mut c, user("x")).await.overall_code, OK);
    }
    p.signal("TERM");
    let code = p.wait(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{}", p.stderr());
    assert!(state.exists());
    // Restarted: x is still drained (two an hour), y is fresh.
    let mut p = Proc::start(&args);
    assert!(p.logged("state restored"), "{}", p.stderr());
    let mut c = p.client().await;
    assert_eq!(decide(&mut c, user("x")).await.overall_code, OVER);
    assert_eq!(decide(&mut c, user("y")).await.overall_code, OK);
    p.signal("TERM");
    assert_eq!(p.wait(Duration::from_secs(20)), Some(0));
    // A damaged file: every bucket starts drained, with a log line.
    let bytes = std::fs::read(&state).unwrap();
    std::fs::write(&state, &bytes[..bytes.len() / 2]).unwrap();
    let p = Proc::start(&args);
    assert!(p.logged("damaged"), "{}", p.stderr());
    let mut c = p.client().await;
    assert_eq!(decide(&mut c, user("new")).await.overall_code, OVER);
    // No temporary files left beside the state.
    drop(p);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn a_closed_stderr_neither_stops_the_drain_nor_the_save() {
    use std::io::{BufRead, BufReader};
    let dir = TempDir::new("cli-stderr");
    let cfg = dir.write("c.yaml", CONFIG);
    let state = dir.path().join("state");
    let args = config_args(&cfg, &["--state", state.to_str().unwrap()]);
    let mut child = std::process::Command::new(binary())
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
        // stdout stays open: only stderr goes away.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a first line");
    assert!(line.starts_with("tollgate-rls grpc="), "{line}");
    // The log's reader goes away (a supervisor's pipe closed): every log line from now on
    // fails to be written (EPIPE), which must cost the line, not the process.
    drop(child.stderr.take());
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("still running 15 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(state.exists(), "the state was not saved");
}

/// Out of file descriptors, each port's accept loop pauses after each failed accept (no
/// spinning) and logs the failures at most once per 10 s, with their count; it serves again
/// once descriptors are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_accept_loop_pauses_and_logs_once_per_period() {
    let dir = TempDir::new("cli-fds");
    let cfg = dir.write("c.yaml", CONFIG);
    let args = config_args(&cfg, &[]);
    let p = Proc::start_with_fd_limit(48, &args);
    // More connections than descriptors left: the rest fail to be accepted (EMFILE).
    let held: Vec<std::net::TcpStream> = (0..80)
        .map(|_| std::net::TcpStream::connect(p.http).unwrap())
        .collect();
    assert!(p.logged("accept failed"), "{}", p.stderr());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = p.stderr().matches("accept failed").count();
    assert_eq!(lines, 1, "one line per 10 s: {}", p.stderr());
    drop(held);
    let t0 = Instant::now();
    loop {
        let (status, _) = http(p.http, "GET", "/healthcheck", "").await;
        if status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "not served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A field the load ignores (a known field out of place, as envoyproxy/ratelimit ignores it)
/// is logged with its file, line and field at start, and the service starts.
#[test]
fn ignored_fields_are_logged_at_start() {
    let dir = TempDir::new("cli-warn");
    let cfg = dir.write(
        "c.yaml",
        "domain: cli\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5, shadow_mode: true}\n",
    );
    let args = config_args(&cfg, &[]);
    let mut p = Proc::start(&args);
    assert!(
        p.logged("c.yaml:4: descriptors[0].rate_limit.shadow_mode: \"shadow_mode\" is not a field of a rate_limit: ignored"),
        "{}",
        p.stderr()
    );
    p.signal("TERM");
    assert_eq!(p.wait(Duration::from_secs(20)), Some(0), "{}", p.stderr());
}

/// The RateLimit headers are off unless `--response-headers` or
/// `LIMIT_RESPONSE_HEADERS_ENABLED` (read as envoyproxy/ratelimit reads it) turns them on, named
/// by `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and `LIMIT_RESET_HEADER`; a value that is
/// neither true nor false, or a name that is not a header name, exits 2 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_are_off_by_default_and_on_with_the_flag_or_the_variable() {
    const VARS: [&str; 4] = [
        "LIMIT_RESPONSE_HEADERS_ENABLED",
        "LIMIT_LIMIT_HEADER",
        "LIMIT_REMAINING_HEADER",
        "LIMIT_RESET_HEADER",
    ];
    // Every variable removed, then `set` applied.
    let env = |set: &[(&'static str, &'static str)]| -> Vec<(&'static str, Option<&'static str>)> {
        VARS.iter()
            .map(|v| (*v, set.iter().find(|(n, _)| n == v).map(|(_, x)| *x)))
            .collect()
    };
    let dir = TempDir::new("cli-headers");
    let cfg = dir.write("c.yaml", CONFIG);
    let named = |names: [&str; 3]| -> Vec<(String, String)> {
        // 2 an hour, one hit: 1 left, full again in 1,800 s.
        names
            .iter()
            .zip(["2", "1", "1800"])
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    };
    let defaults = named(["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]);
    for (flag, set, want) in [
        (false, vec![], vec![]),
        (
            false,
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "false")],
            vec![],
        ),
        (false, vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "0")], vec![]),
        (false, vec![("LIMIT_LIMIT_HEADER", "not a name")], vec![]),
        (
            false,
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
            defaults.clone(),
        ),
        (true, vec![], defaults.clone()),
        (
            true,
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "false")],
            defaults.clone(),
        ),
        (
            false,
            vec![
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "T"),
                ("LIMIT_LIMIT_HEADER", "X-Limit"),
                ("LIMIT_REMAINING_HEADER", "X-Remaining"),
                ("LIMIT_RESET_HEADER", "X-Reset"),
            ],
            named(["X-Limit", "X-Remaining", "X-Reset"]),
        ),
    ] {
        let extra: &[&str] = if flag { &["--response-headers"] } else { &[] };
        let p = Proc::start_with_env(&config_args(&cfg, extra), &env(&set));
        let mut c = p.client().await;
        let out = decide(&mut c, req("cli", vec![desc(&[("user", "a")])])).await;
        let got: Vec<(String, String)> = out
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect();
        assert_eq!(got, want, "--response-headers {flag}, {set:?}");
    }
    for (set, named) in [
        (
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "yes")],
            "LIMIT_RESPONSE_HEADERS_ENABLED",
        ),
        (
            vec![("LIMIT_RESPONSE_HEADERS_ENABLED", "")],
            "LIMIT_RESPONSE_HEADERS_ENABLED",
        ),
        (
            vec![
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
                ("LIMIT_RESET_HEADER", "Bad Name"),
            ],
            "LIMIT_RESET_HEADER",
        ),
        (
            vec![
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "1"),
                ("LIMIT_LIMIT_HEADER", ""),
            ],
            "LIMIT_LIMIT_HEADER",
        ),
    ] {
        let (code, err) = run_to_exit_with_env(&config_args(&cfg, &[]), &env(&set));
        assert_eq!(code, Some(2), "{set:?}: {err}");
        assert!(err.contains(named), "{set:?}: {err}");
    }
}
