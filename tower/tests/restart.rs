//! The example server's `--state`: a restart after SIGTERM hands out nothing, ten `kill -9`s in
//! a row under load hand out nothing twice, a per-key `--limit` policy keeps each key's hourly
//! spend across a restart, no state file is a first start (full), a corrupted, truncated or
//! oversized one starts the server drained with a log line saying why, a save never writes
//! through a link planted beside the state file, a link to a state file is restored from (a
//! link to no file starts drained), and something other than a regular file at the path is a
//! usage error. Real processes, real files.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use support::{client, server_binary};
use tollgate::{Bucket, KeyedMultiLimiter, Limits, Quota};

/// A fresh directory for one test's state file.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The example server with its stderr lines collected.
struct Proc {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    /// The server's end of its stderr socket: a line written here is read after every line the
    /// server wrote before it and before every line it writes after it.
    marks: std::os::unix::net::UnixStream,
}

/// The marker line [`Proc::wait_saves`] writes into the server's stderr.
const MARK: &str = "test: mark";

/// The example server on a free loopback port with these flags, its stdout piped.
fn spawn(flags: &[&str], stderr: Stdio) -> Child {
    Command::new(server_binary())
        .args(["--listen", "127.0.0.1:0"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the example server starts")
}

/// A connected pair of Unix stream sockets: the server's stderr is one end, written by the
/// server and by [`Proc::wait_saves`], and the log's thread reads the other.
fn stderr_pair() -> (
    std::os::unix::net::UnixStream,
    std::os::unix::net::UnixStream,
) {
    std::os::unix::net::UnixStream::pair().expect("a socket pair")
}

impl Proc {
    fn start(flags: &[&str]) -> Proc {
        let (stderr, marks) = stderr_pair();
        let server_end = std::os::fd::OwnedFd::from(marks.try_clone().unwrap());
        let mut child = spawn(flags, Stdio::from(server_end));
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next().and_then(Result::ok));
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .ok()
            .flatten()
            .expect("a `listening on` line");
        let addr = line.strip_prefix("listening on ").unwrap().parse().unwrap();
        let proc = Proc {
            child,
            addr,
            log,
            marks,
        };
        // The `state:` line (restored, or starting drained) goes to stderr before `listening on`
        // goes to stdout, but its reader thread may not have taken it yet.
        if flags.contains(&"--state") {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !proc.log().iter().any(|l| l.starts_with("state: ")) {
                assert!(Instant::now() < deadline, "no state line: {:?}", proc.log());
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        proc
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Waits for `n` saves completed after this call: `n` `state: saved` lines after a marker
    /// line this call writes into the server's stderr. Counting the lines read so far
    /// instead would count a save printed before the call but not yet read by the log's
    /// thread as a later one. Saves run one after another, so the second of them read the
    /// limiter after this call.
    fn wait_saves(&mut self, n: usize) {
        use std::io::Write;
        self.marks
            .write_all(format!("{MARK}\n").as_bytes())
            .expect("a marker line");
        let count = || {
            let log = self.log();
            let marked = log.iter().rposition(|l| l == MARK);
            marked.map_or(0, |at| {
                log[at + 1..]
                    .iter()
                    .filter(|l| *l == "state: saved")
                    .count()
            })
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while count() < n {
            assert!(Instant::now() < deadline, "no save: {:?}", self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn sigterm(&mut self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test's HTTP client.
type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

/// `GET url`: the status and the `Retry-After` value, or `None` if the server went away.
async fn status(c: &Client, url: &str) -> Option<(StatusCode, Option<u64>)> {
    status_with(c, Request::get(url)).await
}

/// [`status`] of the request `req` builds.
async fn status_with(c: &Client, req: http::request::Builder) -> Option<(StatusCode, Option<u64>)> {
    let response = c.request(req.body(Empty::new()).unwrap()).await.ok()?;
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let status = response.status();
    response.into_body().collect().await.ok()?;
    Some((status, retry))
}

/// A full bucket's state file for `quota` (the state of a server that never ran).
fn full_state(path: &Path, quota: Quota) {
    let mut file = Vec::new();
    Bucket::new(quota).save(&mut file).unwrap();
    std::fs::write(path, file).unwrap();
}

/// `server` (an hour's burst of a few tokens) started drained, not full: a request is refused
/// for most of an hour, and the log's `state: starting drained: ` line names `why`. `case`
/// names the case in the failure messages.
async fn assert_starts_drained(c: &Client, server: &Proc, why: &str, case: &str) {
    let (s, retry) = status(c, &server.url()).await.unwrap();
    assert_eq!(
        s,
        StatusCode::TOO_MANY_REQUESTS,
        "{case}: drained, not full"
    );
    assert!(retry.unwrap() > 3000, "{case}: {retry:?}");
    let log = server.log();
    let line = log
        .iter()
        .find(|l| l.starts_with("state: starting drained: "));
    assert!(line.is_some_and(|l| l.contains(why)), "{case}: {log:?}");
}

#[tokio::test]
async fn after_sigterm_a_restart_hands_out_nothing() {
    let dir = temp_dir("sigterm");
    let path = dir.join("state");
    let quota = Quota::new(1, Duration::from_secs(3600), 3).unwrap();
    full_state(&path, quota);
    let flags = [
        "--rate", "1/h", "--burst", "3", "--key", "global", "--state",
    ];
    let path_s = path.to_str().unwrap();
    let c = client();
    let mut server = Proc::start(&[&flags[..], &[path_s]].concat());
    for _ in 0..3 {
        assert_eq!(status(&c, &server.url()).await.unwrap().0, StatusCode::OK);
    }
    let (s, retry) = status(&c, &server.url()).await.unwrap();
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let first_retry = retry.unwrap();
    assert!((3590..=3600).contains(&first_retry), "{first_retry}");
    let spent = Instant::now();
    server.sigterm();
    let server = Proc::start(&[&flags[..], &[path_s]].concat());
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.starts_with("state: restored")),
        "{:?}",
        server.log()
    );
    let (s, retry) = status(&c, &server.url()).await.unwrap();
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    // The token the burst's first request spent comes back an hour after it, not earlier.
    let elapsed = spent.elapsed().as_secs();
    let retry = retry.unwrap();
    assert!(
        retry <= first_retry && retry + elapsed + 2 >= first_retry,
        "{retry} {first_retry}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET url` with the header `x-api-key: key`: the status and the `Retry-After` value.
async fn status_for(c: &Client, url: &str, key: &str) -> (StatusCode, Option<u64>) {
    status_with(c, Request::get(url).header("x-api-key", key))
        .await
        .expect("the server answers")
}

/// `--limit 10/s:10 --limit 4/h:4 --key header:x-api-key`: key `a` spends its hour's 4, the
/// server stops (SIGTERM) and starts again from its state: `a` is still refused by the hour (its
/// wait no shorter than before, less the time that passed), `b` still has its own 4.
#[tokio::test]
async fn a_per_key_policy_keeps_each_keys_hour_across_a_restart() {
    let dir = temp_dir("policy");
    let path = dir.join("state");
    let limits = Limits::new([
        Quota::new(10, Duration::from_secs(1), 10).unwrap(),
        Quota::new(4, Duration::from_secs(3600), 4).unwrap(),
    ])
    .unwrap();
    // The state of a server that never ran: every key full.
    let mut file = Vec::new();
    KeyedMultiLimiter::<String>::new(limits, 16)
        .save(&mut file)
        .unwrap();
    std::fs::write(&path, file).unwrap();
    let path_s = path.to_str().unwrap();
    let flags = [
        "--limit",
        "10/s:10",
        "--limit",
        "4/h:4",
        "--key",
        "header:x-api-key",
        "--state",
        path_s,
    ];
    let c = client();
    let mut server = Proc::start(&flags);
    assert!(server
        .log()
        .iter()
        .any(|l| l.starts_with("state: restored")));
    for _ in 0..4 {
        assert_eq!(status_for(&c, &server.url(), "a").await.0, StatusCode::OK);
    }
    let (s, retry) = status_for(&c, &server.url(), "a").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let first_retry = retry.unwrap();
    assert!((890..=900).contains(&first_retry), "{first_retry}");
    let spent = Instant::now();
    server.sigterm();
    let server = Proc::start(&flags);
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.starts_with("state: restored")),
        "{:?}",
        server.log()
    );
    let (s, retry) = status_for(&c, &server.url(), "a").await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "the hour stays spent");
    let retry = retry.unwrap();
    let elapsed = spent.elapsed().as_secs();
    assert!(
        retry <= first_retry && retry + elapsed + 2 >= first_retry,
        "{retry} {first_retry}"
    );
    for _ in 0..4 {
        assert_eq!(status_for(&c, &server.url(), "b").await.0, StatusCode::OK);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn ten_kill_9s_under_load_hand_out_the_burst_once() {
    let dir = temp_dir("kill9");
    let path = dir.join("state");
    let burst = 20;
    let quota = Quota::new(1, Duration::from_secs(3600), burst).unwrap();
    full_state(&path, quota);
    let path_s = path.to_str().unwrap();
    let flags = [
        "--rate",
        "1/h",
        "--burst",
        "20",
        "--key",
        "global",
        "--save-every",
        "50ms",
        "--state",
        path_s,
    ];
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    for run in 0..10 {
        let mut server = Proc::start(&flags);
        let url = server.url();
        let (stop, refused) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let load: Vec<_> = (0..4)
            .map(|_| {
                let (url, stop, refused, admitted) =
                    (url.clone(), stop.clone(), refused.clone(), admitted.clone());
                tokio::spawn(async move {
                    let c = client();
                    while !stop.load(Ordering::Relaxed) {
                        match status(&c, &url).await {
                            Some((StatusCode::OK, _)) => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            Some(_) => refused.store(true, Ordering::Relaxed),
                            None => tokio::time::sleep(Duration::from_millis(1)).await,
                        }
                    }
                })
            })
            .collect();
        // Once a refusal shows the bucket drained, two saves later one has read it drained;
        // then the kill, with the load still running.
        while !refused.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let wait = tokio::task::spawn_blocking(move || {
            server.wait_saves(2);
            server.kill9();
        });
        wait.await.unwrap();
        stop.store(true, Ordering::Relaxed);
        for l in load {
            l.await.unwrap();
        }
        let total = admitted.load(Ordering::Relaxed);
        assert!(total <= burst, "run {run}: {total} admitted in all");
    }
    // At 1/h the minute this takes refills nothing: the burst, once.
    assert!(started.elapsed() < Duration::from_secs(1800));
    assert_eq!(admitted.load(Ordering::Relaxed), burst);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The flags of a server with 5 tokens an hour per client address, saving to `path`.
fn five_an_hour(path: &Path) -> Proc {
    Proc::start(&[
        "--rate",
        "1/h",
        "--burst",
        "5",
        "--key",
        "ip",
        "--state",
        path.to_str().unwrap(),
    ])
}

/// No file is a first start (the save renames a complete file into place, so a crash never
/// leaves none): the burst is there at once, and the log says so.
#[tokio::test]
async fn no_state_file_is_a_first_start_and_starts_full() {
    let dir = temp_dir("first");
    let path = dir.join("state");
    let c = client();
    let mut server = five_an_hour(&path);
    for _ in 0..5 {
        assert_eq!(status(&c, &server.url()).await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(
        status(&c, &server.url()).await.unwrap().0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let log = server.log();
    assert!(
        log.iter().any(|l| l.starts_with("state: first start")),
        "{log:?}"
    );
    // The shutdown's save is the next start's state: the burst is not handed out twice.
    server.sigterm();
    let server = five_an_hour(&path);
    assert!(server
        .log()
        .iter()
        .any(|l| l.starts_with("state: restored")));
    assert_eq!(
        status(&c, &server.url()).await.unwrap().0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_damaged_file_or_a_missing_directory_starts_drained_and_says_why() {
    let dir = temp_dir("damaged");
    let quota = Quota::new(1, Duration::from_secs(3600), 5).unwrap();
    let mut good = Vec::new();
    Bucket::new(quota).save(&mut good).unwrap();
    let mut corrupted = good.clone();
    let mid = corrupted.len() / 2;
    corrupted[mid] ^= 0x40;
    let truncated = good[..good.len() - 3].to_vec();
    let c = client();
    for (name, bytes, why) in [
        // A directory that is not there (an unmounted volume): no save could have been made.
        ("missing-dir/state", None, "cannot read"),
        ("corrupted", Some(corrupted), "corrupt"),
        ("truncated", Some(truncated), "truncated"),
        (
            "foreign",
            Some(b"{\"tokens\": 5}".to_vec()),
            "not a tollgate saved state",
        ),
    ] {
        let path = dir.join(name);
        if let Some(bytes) = bytes {
            std::fs::write(&path, bytes).unwrap();
        }
        let server = five_an_hour(&path);
        assert_starts_drained(&c, &server, why, name).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Someone who can write to the state file's directory plants links where a save might write
/// (`FILE.tmp`, the name a fixed temporary file would have) and makes `FILE` itself a link: the
/// saves leave both targets as they were and put a regular file at `FILE`.
#[cfg(unix)]
#[tokio::test]
async fn a_save_never_writes_through_a_planted_link() {
    let dir = temp_dir("links");
    let path = dir.join("state");
    let (victim, victim_of_file) = (dir.join("victim"), dir.join("victim-of-file"));
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::write(&victim_of_file, b"also precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("state.tmp")).unwrap();
    std::os::unix::fs::symlink(&victim_of_file, &path).unwrap();
    let mut server = Proc::start(&[
        "--rate",
        "1/h",
        "--burst",
        "5",
        "--key",
        "global",
        "--save-every",
        "50ms",
        "--state",
        path.to_str().unwrap(),
    ]);
    server.wait_saves(2);
    server.sigterm();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(&victim_of_file).unwrap(), b"also precious");
    let saved = std::fs::symlink_metadata(&path).unwrap();
    assert!(saved.file_type().is_file(), "{saved:?}");
    let restored = Bucket::new(Quota::new(1, Duration::from_secs(3600), 5).unwrap());
    restored
        .restore(std::fs::File::open(&path).unwrap())
        .unwrap();
    // Nothing but the state file, the links and their targets is left in the directory.
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["state", "state.tmp", "victim", "victim-of-file"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server run with `flags` until it exits, for at most 10 s (then killed): its exit code
/// (`None` when it had to be killed), stdout and stderr.
fn run_to_exit(flags: &[&str]) -> (Option<i32>, String, String) {
    let mut child = spawn(flags, Stdio::piped());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut exited = true;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            exited = false;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let code = if exited { out.status.code() } else { None };
    (code, text(&out.stdout), text(&out.stderr))
}

/// Something other than a regular file at `--state`, or a link to one, is a usage error: exit
/// 2 at once with a message, the server never listening and leaving the thing as it was. (A
/// FIFO opened for reading waits for a writer: the start would hang; a link to `/dev/zero`
/// starts drained, and its saves would replace the link.)
#[cfg(unix)]
#[test]
fn a_state_path_that_is_not_a_regular_file_exits_2() {
    use std::os::unix::fs::{symlink, FileTypeExt};
    let dir = temp_dir("not-regular");
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let socket = dir.join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (to_fifo, to_zero) = (dir.join("to-fifo"), dir.join("to-zero"));
    symlink(&fifo, &to_fifo).unwrap();
    symlink("/dev/zero", &to_zero).unwrap();
    for (path, what) in [
        (&fifo, "a FIFO"),
        (&to_fifo, "a FIFO"),
        (&socket, "a socket"),
        (&to_zero, "a character device"),
        (&dir, "a directory"),
    ] {
        let flags = ["--key", "global", "--state", path.to_str().unwrap()];
        let (code, stdout, stderr) = run_to_exit(&flags);
        assert_eq!(code, Some(2), "{path:?}: {stdout:?} {stderr:?}");
        assert!(
            stderr.contains(&format!("{what}, not a regular file")),
            "{path:?}: {stderr:?}"
        );
        assert!(stdout.is_empty(), "{path:?} never listens: {stdout:?}");
    }
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&to_zero).unwrap().is_symlink());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `--state` file name too long for the save's temporary file beside it (`FILE.XXXXXX.tmp`)
/// would fail every save: a usage error. The longest name that leaves room starts.
#[test]
fn a_state_name_too_long_for_its_temporary_file_exits_2() {
    let dir = temp_dir("long-name");
    let long = dir.join("s".repeat(245));
    let flags = ["--key", "global", "--state", long.to_str().unwrap()];
    let (code, stdout, stderr) = run_to_exit(&flags);
    assert_eq!(code, Some(2), "{stdout:?} {stderr:?}");
    assert!(
        stderr.contains("a file name of 245 bytes leaves no room"),
        "{stderr:?}"
    );
    assert!(stdout.is_empty(), "never listens: {stdout:?}");
    let longest = dir.join("s".repeat(244));
    let mut server = three_an_hour(&longest);
    server.sigterm();
    assert!(std::fs::metadata(&longest).unwrap().is_file(), "saved");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server with 3 tokens an hour for everyone, restored from and saved to `path`.
fn three_an_hour(path: &Path) -> Proc {
    let path = path.to_str().unwrap();
    Proc::start(&[
        "--rate", "1/h", "--burst", "3", "--key", "global", "--state", path,
    ])
}

/// A link to a state file is restored from; the shutdown's save replaces the link itself with
/// a regular file and leaves its target as it was.
#[cfg(unix)]
#[tokio::test]
async fn a_link_to_a_state_file_is_restored_from() {
    let dir = temp_dir("link-to-state");
    let (path, target) = (dir.join("state"), dir.join("saved"));
    let quota = Quota::new(1, Duration::from_secs(3600), 3).unwrap();
    full_state(&target, quota);
    let before = std::fs::read(&target).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let mut server = three_an_hour(&path);
    let log = server.log();
    assert!(
        log.iter().any(|l| l.starts_with("state: restored")),
        "{log:?}"
    );
    let c = client();
    assert_eq!(status(&c, &server.url()).await.unwrap().0, StatusCode::OK);
    server.sigterm();
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    assert_eq!(std::fs::read(&target).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A link that leads to no file is no first start: what it pointed at may hold a save that
/// cannot be reached now (a volume not mounted, its directory missing), so the start is
/// drained and says why, as for a missing directory; the shutdown's save then replaces the
/// link with a regular file.
#[cfg(unix)]
#[tokio::test]
async fn a_link_to_nothing_starts_drained() {
    let dir = temp_dir("link-to-nothing");
    let path = dir.join("state");
    std::os::unix::fs::symlink(dir.join("unmounted").join("state"), &path).unwrap();
    let mut server = three_an_hour(&path);
    assert_starts_drained(&client(), &server, "a link to", "a link to nothing").await;
    server.sigterm();
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A state file larger than any save of the server is damaged: the start is drained, says so,
/// and does not read it (here a full save followed by a gigabyte of nothing, which a reader
/// that stops at the save's end frame would restore, full).
#[tokio::test]
async fn an_oversized_state_file_starts_drained() {
    let dir = temp_dir("oversized");
    let path = dir.join("state");
    let quota = Quota::new(1, Duration::from_secs(3600), 3).unwrap();
    full_state(&path, quota);
    // Sparse: no disk space is taken.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    let server = three_an_hour(&path);
    let why = "more than any save of this server";
    assert_starts_drained(&client(), &server, why, "oversized").await;
    let _ = std::fs::remove_dir_all(&dir);
}
