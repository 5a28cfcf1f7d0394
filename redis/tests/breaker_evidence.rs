//! What the breaker learns from, and what it does not: a call that the queue for a key's lease
//! refill left without its share of the time, or a probe whose caller gave up, is no evidence
//! against the server. Each test starts its own
//! `redis-server` on a free loopback port, one behind a local proxy that delays its replies.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tollgate::Quota;
use tollgate_redis::{Error, Leases, OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;

async fn write_all(w: &tokio::net::tcp::OwnedWriteHalf, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        if w.writable().await.is_err() {
            return false;
        }
        match w.try_write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
    }
    true
}

async fn read_some(r: &tokio::net::tcp::OwnedReadHalf, buf: &mut [u8]) -> Option<usize> {
    loop {
        r.readable().await.ok()?;
        match r.try_read(buf) {
            Ok(0) => return None,
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}

/// A TCP proxy in front of `upstream` that delivers every reply byte `delay` after the server
/// sent it (a healthy server `delay` away: a cross-zone Redis, a loaded one). Requests pass at once.
async fn delay_proxy(upstream: u16, delay: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = l.accept().await else {
                return;
            };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                return;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Some(n) = read_some(&cr, &mut buf).await {
                    if !write_all(&sw, &buf[..n]).await {
                        return;
                    }
                }
            });
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Some(n) = read_some(&sr, &mut buf).await {
                    let _ = tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec()));
                }
            });
            tokio::spawn(async move {
                while let Some((at, bytes)) = rx.recv().await {
                    tokio::time::sleep_until(at).await;
                    if !write_all(&cw, &bytes).await {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// Callers queued behind one key's lease refills on a healthy server whose replies take 100 ms
/// (timeout 250 ms, leases of one token, so no refill serves the next caller) leave the breaker
/// closed: a caller that gets the refill lock with no time left must not send its call, whose
/// timeout would count against a healthy server and open the breaker (then every caller is
/// refused `Unavailable`, under `FailClosed`). No more than the burst of 3 is admitted. The
/// delays are ten times a loaded machine's scheduling delays (a fair call has 150 ms of slack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_queued_behind_a_refill_do_not_open_the_breaker() {
    let Some(server) = RedisServer::start("breaker_evidence::refill_queue") else {
        return;
    };
    let port = delay_proxy(server.port(), Duration::from_millis(100)).await;
    let url = format!("redis://127.0.0.1:{port}");
    let l = RedisLimiter::builder(&url, Quota::new(1, Duration::from_secs(3600), 3).unwrap())
        .on_unavailable(OnUnavailable::FailClosed)
        .timeout(Duration::from_millis(250))
        .probe_interval(Duration::from_secs(3600))
        .leases(Leases::new(1))
        .build()
        .await
        .unwrap();
    let admitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _wave in 0..2 {
        let mut callers = Vec::new();
        for _ in 0..8 {
            let (l, admitted) = (l.clone(), admitted.clone());
            callers.push(tokio::spawn(async move {
                if l.try_acquire("hot", 1).await.is_ok() {
                    admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }));
        }
        for c in callers {
            c.await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(admitted.load(std::sync::atomic::Ordering::Relaxed) <= 3);
    let mut decided = false;
    for _ in 0..20 {
        match l.check("other", 1).await {
            Ok(_) => {
                decided = true;
                break;
            }
            Err(Error::Unavailable) => panic!("the breaker opened on a healthy server"),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    assert!(decided, "{:?}", l.counters());
}

/// A probe whose caller gave up after sending it leaves the probe to the next caller at once:
/// the breaker's interval does not restart from the dropped probe, which would refuse a healthy
/// server for another whole interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_probe_leaves_the_next_caller_the_probe() {
    let Some(server) = RedisServer::start("breaker_evidence::dropped_probe") else {
        return;
    };
    // A timeout that a healthy round trip never reaches, even on a loaded machine (where 50 ms
    // can pass); only the paused server's calls time out.
    let interval = Duration::from_millis(400);
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1000).unwrap())
        .timeout(Duration::from_secs(1))
        .probe_interval(interval)
        .build()
        .await
        .unwrap();
    assert!(matches!(l.check("k", 1).await, Ok(Ok(()))));
    server.pause();
    assert!(matches!(l.check("k", 1).await, Err(Error::Timeout(_))));
    server.resume();
    tokio::time::sleep(interval + Duration::from_millis(50)).await;
    // The probe's caller gives up after sending it. The server is stalled meanwhile, so that the
    // probe is still in flight when it is dropped (on a healthy server its reply could arrive
    // within the first poll: it did in 2 of 5 runs once the reload path got shorter).
    server.pause();
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = Box::pin(l.check("k", 1));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    drop(f);
    server.resume();
    let t0 = Instant::now();
    let first = l.check("k", 1).await;
    let mut unavailable = 0;
    let mut r = first;
    while matches!(r, Err(Error::Unavailable)) {
        unavailable += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
        r = l.check("k", 1).await;
    }
    println!(
        "after the dropped probe: {unavailable} decisions refused Unavailable for {:?} (server healthy); then {r:?}",
        t0.elapsed()
    );
    assert_eq!(
        unavailable, 0,
        "the dropped probe's pass was not available to the next caller"
    );
}

/// A probe whose caller polled it once and then keeps its future without polling it again
/// (parked in a struct, a `select!` arm that is never polled again) must not keep the breaker
/// open: the server is healthy again, and once the parked probe's timeout and one interval
/// have passed (1.05 s here) the next caller takes the probe over and reaches Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_probe_does_not_hold_the_breaker_open() {
    let Some(server) = RedisServer::start("breaker_evidence::parked_probe") else {
        return;
    };
    // A timeout that a healthy round trip never reaches, even on a loaded machine (where 50 ms
    // can pass, and a timed-out decision on the healthy server would end the wait below early).
    let interval = Duration::from_millis(50);
    let timeout = Duration::from_secs(1);
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1000).unwrap())
        .timeout(timeout)
        .probe_interval(interval)
        .build()
        .await
        .unwrap();
    assert!(matches!(l.check("k", 1).await, Ok(Ok(()))));
    server.pause();
    assert!(matches!(l.check("k", 1).await, Err(Error::Timeout(_))));
    tokio::time::sleep(interval + Duration::from_millis(20)).await;
    // The probe: sent to the stalled server, polled once, then parked.
    let mut cx = Context::from_waker(Waker::noop());
    let mut parked = Box::pin(l.check("k", 1));
    assert!(parked.as_mut().poll(&mut cx).is_pending());
    server.resume();
    // The parked probe's timeout and ten intervals later, on a healthy server.
    let t0 = Instant::now();
    let mut r = l.check("k", 1).await;
    while matches!(r, Err(Error::Unavailable)) && t0.elapsed() < timeout + interval * 10 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        r = l.check("k", 1).await;
    }
    let held = format!("{r:?} after {:?} with the probe parked", t0.elapsed());
    drop(parked);
    let after = l.check("k", 1).await;
    println!("{held}; once the parked future is dropped: {after:?}");
    assert!(
        matches!(r, Ok(Ok(()))),
        "{held}; once it is dropped: {after:?}"
    );
}

/// A lease refill refused with `RetryAfter(d)` is cached locally, and the cache ends no later
/// than Redis would admit again (`Slot::denied_until`: "never refuses what Redis would
/// admit"). The script's refusal is at a server time between the call's sending and its reply
/// (the reply 300 ms later here, through the delaying proxy), so the cache counts `d` from the
/// sending: a request sent `d` + 100 ms after the refused one goes to Redis, which admits it.
/// (The wait a cached refusal reports is counted from the reply, never shorter than Redis's:
/// `edge_cases::lease_cache_refusals_wait_for_the_larger_cost`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_lease_refusal_ends_when_redis_would_admit() {
    let Some(server) = RedisServer::start("breaker_evidence::cached_refusal") else {
        return;
    };
    let port = delay_proxy(server.port(), Duration::from_millis(300)).await;
    let url = format!("redis://127.0.0.1:{port}");
    // One token, back 400 ms after it is spent.
    let l = RedisLimiter::builder(&url, Quota::new(1, Duration::from_millis(400), 1).unwrap())
        .timeout(Duration::from_secs(2))
        .leases(Leases::new(1))
        .build()
        .await
        .unwrap();
    assert_eq!(l.check("k", 1).await.unwrap(), Ok(()));
    let sent = Instant::now();
    let refused = l.check("k", 1).await.unwrap();
    let Err(tollgate::Denied::RetryAfter(d)) = refused else {
        panic!("{refused:?}");
    };
    // Redis ran the refused call just after `sent` (requests pass the proxy at once), so it
    // holds the token again well before `sent + d + 100 ms`.
    let at = sent + d + Duration::from_millis(100);
    tokio::time::sleep_until(at.into()).await;
    let r = l.check("k", 1).await.unwrap();
    let c = l.counters();
    assert!(
        c.lease_denied == 0 && r == Ok(()),
        "{:?} after sending the refused call (its wait: {d:?}): {r:?}; {c:?}",
        at - sent
    );
}
