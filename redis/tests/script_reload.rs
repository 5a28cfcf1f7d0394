//! The script's reload after `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`): under an
//! operator flushing the script cache in a tight loop, no decision may fail because the cache
//! was flushed again between the reload and the re-run; the calls that found the script missing
//! share one `SCRIPT LOAD` (counted by the server's `INFO commandstats`), and a load that fails
//! or whose caller is dropped leaves no call waiting. Each test starts its own `redis-server` on
//! a free loopback port.

mod support;

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::{OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;

use support::{unlimited, Load};

/// Sends `SCRIPT FLUSH` on its own connection, one after another, until `stop`; returns how
/// many the server answered.
fn flush_until(port: u16, stop: &AtomicBool) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut n = 0;
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        s.write_all(b"SCRIPT FLUSH\r\n").unwrap();
        let mut got = 0;
        while !buf[..got].ends_with(b"\r\n") {
            got += s.read(&mut buf[got..]).unwrap();
        }
        assert_eq!(&buf[..got], b"+OK\r\n");
        n += 1;
    }
    n
}

/// Starts flushing the script cache of `server` back to back, on a thread of its own.
fn flusher(server: &RedisServer) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (s, port) = (stop.clone(), server.port());
    (stop, std::thread::spawn(move || flush_until(port, &s)))
}

/// `SCRIPT FLUSH` back to back for a second while 4 tasks decide: every decision is made
/// (none fails, so the breaker never opens and no policy answers for Redis): a `NOSCRIPT`
/// reply is answered by loading the script again, never counted as the server failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flushed_back_to_back_fails_no_decision() {
    let Some((server, l)) = unlimited("script_reload::flushed_back_to_back").await else {
        return;
    };
    let (stop, flusher) = flusher(&server);
    let load = Load::start(&l, 4, 50_000);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let tally = load.stop().await;
    let flushes = flusher.join().unwrap();
    let (decided, failed) = (tally.admitted + tally.refused, tally.failed);
    println!(
        "{flushes} flushes, {decided} decisions, {failed} failed: {:?}",
        l.counters()
    );
    assert!(
        flushes > 100 && decided > 100,
        "{flushes} flushes, {decided} decided"
    );
    assert_eq!(failed, 0, "{:?}", l.counters());
}

/// The same flushes under `FailOpen` on a key with a burst of 5 (one token an hour): at most
/// the burst is admitted: a `NOSCRIPT` after the reload must not open the breaker, whose
/// policy would admit every request until a probe got through (hundreds in a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flushes_never_let_fail_open_admit_beyond_the_burst() {
    let Some(server) = RedisServer::start("script_reload::fail_open_burst") else {
        return;
    };
    let l = RedisLimiter::builder(
        &server.url(),
        Quota::new(1, Duration::from_secs(3600), 5).unwrap(),
    )
    .timeout(Duration::from_secs(2))
    .on_unavailable(OnUnavailable::FailOpen)
    .build()
    .await
    .unwrap();
    let (stop, flusher) = flusher(&server);
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (l, stop, admitted) = (l.clone(), stop.clone(), admitted.clone());
        tasks.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && i < 50_000 {
                if l.try_acquire("k", 1).await.is_ok() {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let flushes = flusher.join().unwrap();
    let admitted = admitted.load(Ordering::Relaxed);
    println!("{flushes} flushes, {admitted} admitted: {:?}", l.counters());
    assert!(flushes > 100, "{flushes} flushes");
    assert!(
        admitted <= 5,
        "{admitted} admitted on a burst of 5: {:?}",
        l.counters()
    );
}

const HOUR: Duration = Duration::from_secs(3600);

/// One command's line of `INFO commandstats` (`cmdstat_NAME`, e.g. `evalsha`, `script|load`
/// on Redis 7): its `calls` (with the ones that failed, e.g. NOSCRIPT), `failed_calls` and
/// `rejected_calls` (refused before running, e.g. NOPERM; not in `calls`); zeros when the
/// server has not run it since the last `CONFIG RESETSTAT`.
fn stat(server: &RedisServer, name: &str) -> (u64, u64, u64) {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{name}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return (0, 0, 0);
    };
    let field = |f: &str| -> u64 {
        line.split(&format!("{f}="))
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("calls"),
        field("failed_calls"),
        field("rejected_calls"),
    )
}

/// The script commands the server saw since the last `CONFIG RESETSTAT`, for the messages.
fn script_stats(server: &RedisServer) -> String {
    ["evalsha", "eval", "script|load"]
        .map(|n| format!("{n} {:?}", stat(server, n)))
        .join(", ")
}

/// A limiter whose key `k` has a burst of `burst` (one token an hour), with a decision timeout
/// of 5 s (each wait for a load ends there at the latest), its script loaded; then the script
/// cache is flushed and the command statistics reset.
async fn limiter_with_the_script_flushed(server: &RedisServer, burst: u64) -> RedisLimiter {
    let l = RedisLimiter::builder(&server.url(), Quota::new(1, HOUR, burst).unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    assert_eq!(l.check("warm", 1).await.unwrap(), Ok(()));
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]).trim(), "OK");
    l
}

/// Spawns `n` decisions on key `k` of `l`, each its own task.
fn decisions(l: &RedisLimiter, n: usize) -> tokio::task::JoinSet<Result<(), tollgate::Denied>> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let l = l.clone();
        set.spawn(async move { l.check("k", 1).await.unwrap() });
    }
    set
}

/// Waits (up to 10 s) until `l` has started `n` script calls since it was built (each counted
/// as it is handed to the connection, in the same poll).
async fn until_sent(l: &RedisLimiter, n: u64) {
    let t0 = std::time::Instant::now();
    while l.counters().redis_calls < n {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}: {n} calls not sent",
            l.counters()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Joins `set` within 20 s (every decision has a 5 s timeout: a call left waiting on a load
/// nobody sends fails here); returns how many were admitted, each of the others refused with a
/// wait (the burst spent, not an error).
async fn admitted(mut set: tokio::task::JoinSet<Result<(), tollgate::Denied>>) -> usize {
    let all = async {
        let mut admitted = 0;
        while let Some(v) = set.join_next().await {
            match v.unwrap() {
                Ok(()) => admitted += 1,
                Err(tollgate::Denied::RetryAfter(_)) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        admitted
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("decisions still waiting after 20 s")
}

/// 64 decisions of a limiter of burst 40 sent at once to `server` frozen with the script
/// flushed, answered after the thaw: the limiter, how many were admitted, and the server's
/// script statistics.
async fn sixty_four_calls_on_a_flushed_script(
    server: &RedisServer,
) -> (RedisLimiter, usize, String) {
    let l = limiter_with_the_script_flushed(server, 40).await;
    let sent = l.counters().redis_calls;
    server.pause();
    let set = decisions(&l, 64);
    until_sent(&l, sent + 64).await;
    server.resume();
    let admitted = admitted(set).await;
    let stats = script_stats(server);
    println!("{stats}");
    (l, admitted, stats)
}

/// 64 decisions on one limiter all find the script missing (their EVALSHAs are queued at a
/// frozen server, so each is answered NOSCRIPT before any load is sent): one `SCRIPT LOAD`
/// serves them all (one copy of the source for the server to compile, not 64), none falls back
/// to EVAL, and each decision is made once: 40 admitted on a burst of 40, 24 refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_load_serves_every_call_that_found_the_script_missing() {
    let Some(server) = RedisServer::start("script_reload::one_load") else {
        return;
    };
    let (l, admitted, stats) = sixty_four_calls_on_a_flushed_script(&server).await;
    assert_eq!(admitted, 40, "{stats}");
    assert_eq!(stat(&server, "evalsha"), (128, 64, 0), "{stats}");
    assert_eq!(stat(&server, "script|load"), (1, 0, 0), "{stats}");
    assert_eq!(stat(&server, "eval"), (0, 0, 0), "{stats}");
    assert_eq!(l.counters().errors, 0, "{:?}", l.counters());
}

/// A decision polled by hand.
type Call = std::pin::Pin<Box<dyn Future<Output = Result<(), tollgate::Denied>> + Send>>;

/// The call sending the load is dropped before it reads the answer (a caller's timeout, a
/// `select!`) while 39 calls that found the script missing wait for that load: the next of
/// them loads the script, and all 39 decide, each once (24 admitted on a burst of 24; none is
/// left waiting, none falls back to EVAL). The 40 decisions are polled by hand (40: each one
/// poll hands its EVALSHA to the connection, whose queue holds 50 requests): their EVALSHAs
/// are answered NOSCRIPT, then, the server frozen, the first takes the reload and sends its
/// load, which cannot be answered, and the others wait behind it; the server thawed, that load
/// is answered (never read), the waiters send no load of their own while the first holds the
/// reload, and the cache is flushed again before the first call is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_whose_caller_is_dropped_leaves_no_call_waiting() {
    let Some(server) = RedisServer::start("script_reload::dropped_loader") else {
        return;
    };
    let l = limiter_with_the_script_flushed(&server, 24).await;
    let t0 = std::time::Instant::now();
    let waited = |what: &str| {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what}: {}",
            script_stats(&server)
        );
    };
    let mut calls: Vec<Call> = (0..40)
        .map(|_| {
            let l = l.clone();
            Box::pin(async move { l.check("k", 1).await.unwrap() }) as Call
        })
        .collect();
    let mut pending = |call: &mut Call| {
        let cx = &mut std::task::Context::from_waker(std::task::Waker::noop());
        let poll = call.as_mut().poll(cx);
        assert!(
            poll.is_pending(),
            "a call ended: {poll:?}: {}",
            script_stats(&server)
        );
    };
    server.pause();
    calls.iter_mut().for_each(&mut pending);
    server.resume();
    while stat(&server, "evalsha").1 < 40 {
        waited("not every EVALSHA answered");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.pause();
    while !l.script_load_in_flight() {
        waited("the first call sent no load");
        pending(&mut calls[0]);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    calls[1..].iter_mut().for_each(&mut pending);
    server.resume();
    while stat(&server, "script|load").0 < 1 {
        waited("the first call's load never came");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for _ in 0..50 {
        calls[1..].iter_mut().for_each(&mut pending);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        stat(&server, "script|load").0,
        1,
        "{}",
        script_stats(&server)
    );
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    let mut calls = calls.into_iter();
    drop(calls.next());
    let mut set = tokio::task::JoinSet::new();
    for call in calls {
        set.spawn(call);
    }
    let admitted = admitted(set).await;
    let stats = script_stats(&server);
    println!("{stats}");
    assert_eq!(admitted, 24, "{stats}");
    assert_eq!(stat(&server, "evalsha"), (79, 40, 0), "{stats}");
    assert_eq!(stat(&server, "script|load"), (2, 0, 0), "{stats}");
    assert_eq!(stat(&server, "eval"), (0, 0, 0), "{stats}");
    assert_eq!(l.counters().errors, 0, "{:?}", l.counters());
}

/// Every `SCRIPT LOAD` fails (the user may not run it: an ACL): the first call that found the
/// script missing tries the load, and it and the calls that waited for it run the script with
/// EVAL, without a load each; all 64 decide within their timeout, each once (40 admitted on a
/// burst of 40), none through EVALSHA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_load_leaves_no_call_waiting() {
    let Some(server) = RedisServer::start("script_reload::failing_load") else {
        return;
    };
    assert_eq!(
        server
            .cli(&["ACL", "SETUSER", "default", "-script|load"])
            .trim(),
        "OK"
    );
    let (l, admitted, stats) = sixty_four_calls_on_a_flushed_script(&server).await;
    assert_eq!(admitted, 40, "{stats}");
    assert_eq!(stat(&server, "evalsha"), (64, 64, 0), "{stats}");
    assert_eq!(stat(&server, "script|load"), (0, 0, 1), "{stats}");
    assert_eq!(stat(&server, "eval"), (64, 0, 0), "{stats}");
    assert_eq!(l.counters().errors, 0, "{:?}", l.counters());
}
