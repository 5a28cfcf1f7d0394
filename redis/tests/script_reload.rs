//! The script's reload after `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`), under an
//! operator flushing the script cache in a tight loop: no decision may fail because the cache
//! was flushed again between the reload and the re-run. Each test starts its own `redis-server`
//! on a free loopback port.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::{OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;

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
    let Some(server) = RedisServer::start("script_reload::flushed_back_to_back") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1_000_000).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (stop, flusher) = flusher(&server);
    let (decided, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..4 {
        let (l, stop, decided, failed) = (l.clone(), stop.clone(), decided.clone(), failed.clone());
        tasks.spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && i < 50_000 {
                match l.check(&format!("k{}", (t * 7 + i) % 50), 1).await {
                    Ok(_) => decided.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
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
    let (decided, failed) = (
        decided.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
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
