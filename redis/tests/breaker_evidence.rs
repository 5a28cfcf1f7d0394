//! What the breaker learns from, and what it does not: a call that the queue for a key's lease
//! refill left without its share of the time, or a probe whose caller gave up, is no evidence
//! against the server. Each test starts its own
//! `redis-server` on a free loopback port, some behind a local proxy that delays its replies.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// A TCP proxy in front of a server that delivers every chunk of reply bytes the delay set when
/// the proxy read it from the server (a healthy server that far away: a cross-zone Redis, a
/// loaded one), in order. Requests pass at once.
struct DelayProxy {
    port: u16,
    /// The delay in milliseconds, read as each reply chunk arrives.
    delay_ms: Arc<AtomicU64>,
    /// Reply chunks read from the server so far.
    replies: Arc<AtomicUsize>,
}

impl DelayProxy {
    async fn start(upstream: u16, delay: Duration) -> DelayProxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let replies = Arc::new(AtomicUsize::new(0));
        let (d, n) = (delay_ms.clone(), replies.clone());
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
                let (d, replies) = (d.clone(), n.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    while let Some(n) = read_some(&sr, &mut buf).await {
                        let delay = Duration::from_millis(d.load(Ordering::Relaxed));
                        let _ = tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec()));
                        replies.fetch_add(1, Ordering::Relaxed);
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
        let proxy = DelayProxy {
            port,
            delay_ms,
            replies,
        };
        proxy.set_delay(delay);
        proxy
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The delay of the reply chunks read from now on.
    fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap();
        self.delay_ms.store(ms, Ordering::Relaxed);
    }

    fn replies(&self) -> usize {
        self.replies.load(Ordering::Relaxed)
    }
}

/// A limiter of 1 token an hour and a burst of 3 per key, through `proxy`, with leases of one
/// token (so that no refill serves the next caller: each one waits for the refill lock) and
/// `FailClosed` (an opened breaker refuses every caller `Unavailable`); one probe an hour, so an
/// opened breaker stays open.
async fn queued_limiter(proxy: &DelayProxy, timeout: Duration) -> RedisLimiter {
    RedisLimiter::builder(
        &proxy.url(),
        Quota::new(1, Duration::from_secs(3600), 3).unwrap(),
    )
    .on_unavailable(OnUnavailable::FailClosed)
    .timeout(timeout)
    .probe_interval(Duration::from_secs(3600))
    .leases(Leases::new(1))
    .build()
    .await
    .unwrap()
}

/// `n` callers deciding `key` at once; their results.
async fn callers(
    l: &RedisLimiter,
    key: &'static str,
    n: usize,
) -> Vec<Result<Result<(), tollgate::Denied>, Error>> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move { l.check(key, 1).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    results
}

/// Panics if `l`'s breaker is open: a decision of a fresh key is made by Redis, not refused
/// `Unavailable`. `what` says what happened before.
async fn assert_closed(l: &RedisLimiter, what: &str) {
    match l.check("other", 1).await {
        Ok(_) => {}
        Err(Error::Unavailable) => {
            panic!(
                "the breaker opened on a healthy server: {what}; {:?}",
                l.counters()
            )
        }
        Err(e) => panic!("a decision on a healthy server failed: {e:?}; {what}"),
    }
}

/// Callers queued behind one key's lease refills on a healthy server whose replies take 400 ms
/// (timeout 600 ms) leave the breaker closed. The first caller's refill holds the lock past
/// half the timeout, so each of the 7 others gives up waiting at 300 ms and asks Redis directly
/// with at most half its time left, less than the reply's 400 ms: every one of them times out,
/// and none of those timeouts is evidence (a call sent with three quarters of the timeout or
/// less). A rule that counted a call with half its time left would open the breaker here, and
/// then every caller is refused `Unavailable` (`FailClosed`). No more than the burst of 3 is
/// admitted. The fair call (the refill, all 600 ms left) has 200 ms of slack on a loaded
/// machine; the others time out whatever the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_queued_behind_a_refill_do_not_open_the_breaker() {
    let Some(server) = RedisServer::start("breaker_evidence::refill_queue") else {
        return;
    };
    let proxy = DelayProxy::start(server.port(), Duration::from_millis(400)).await;
    let l = queued_limiter(&proxy, Duration::from_millis(600)).await;
    let (mut admitted, mut timed_out) = (0, 0);
    for _wave in 0..2 {
        for r in callers(&l, "hot", 8).await {
            match r {
                Ok(Ok(())) => admitted += 1,
                Err(Error::Timeout(_)) => timed_out += 1,
                Ok(Err(_)) => {}
                Err(e) => panic!("{e:?}: the breaker opened on a healthy server"),
            }
        }
        // The timed-out calls' replies arrive.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert!(admitted <= 3, "{admitted} admitted of a burst of 3");
    assert_eq!(
        timed_out,
        14,
        "each wave's 7 queued callers time out on their direct call; {:?}",
        l.counters()
    );
    assert_closed(
        &l,
        "after 14 direct calls sent with half their time timed out",
    )
    .await;
}

/// A caller that gets a key's refill lock with between half and three quarters of its time
/// left, and whose call then times out, leaves the breaker closed: the queue took the rest of
/// its time, so the timeout is no evidence against the server. The queued call is sent with
/// about 600 ms of its 1 s left (over 500 ms unless the first reply is 100 ms late, at most
/// 750 ms unless the second caller started 150 ms after the first). A rule that counted a call
/// with over half its time left opens the breaker here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_left_three_quarters_of_its_time_or_less_is_no_evidence() {
    let name = "breaker_evidence::three_quarters_or_less";
    let Some(opened) = a_queued_call_times_out(name, Duration::from_millis(400)).await else {
        return;
    };
    assert!(
        !opened,
        "the breaker opened on a healthy server: a call sent with under three quarters of its \
         time timed out"
    );
}

/// A call sent with over three quarters of its time left that times out is evidence that the
/// server is slow: the breaker opens. The queued call is sent with about 850 ms of its 1 s left
/// (over 750 ms unless the first reply is 100 ms late). A rule that required more of the time
/// (seven eighths, all of it) leaves the breaker closed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_left_over_three_quarters_of_its_time_is_evidence() {
    let name = "breaker_evidence::over_three_quarters";
    let Some(opened) = a_queued_call_times_out(name, Duration::from_millis(150)).await else {
        return;
    };
    assert!(
        opened,
        "the breaker stayed closed after a call sent with over three quarters of its time timed \
         out"
    );
}

/// Two callers of one key on a limiter of timeout 1 s (`queued_limiter`) behind a proxy: the
/// first one's refill is answered `first` after it is sent, so the second one takes the lock
/// with about 1 s − `first` left; its reply is held 1 s, so it times out. Whether the breaker
/// opened (a decision of another key refused `Unavailable`), once the held reply has arrived;
/// `None` without a `redis-server`.
async fn a_queued_call_times_out(name: &str, first: Duration) -> Option<bool> {
    let server = RedisServer::start(name)?;
    let proxy = DelayProxy::start(server.port(), first).await;
    let l = queued_limiter(&proxy, Duration::from_secs(1)).await;
    let before = proxy.replies();
    let both = tokio::spawn({
        let l = l.clone();
        async move { callers(&l, "queued", 2).await }
    });
    // The first refill's reply is read (and held `first`): the second caller's reply, sent
    // once that one is delivered, is held 1 s.
    while proxy.replies() == before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    proxy.set_delay(Duration::from_secs(1));
    let results = both.await.unwrap();
    let count = |f: fn(&Result<Result<(), tollgate::Denied>, Error>) -> bool| {
        results.iter().filter(|r| f(r)).count()
    };
    assert!(
        count(|r| matches!(r, Ok(Ok(())))) == 1
            && count(|r| matches!(r, Err(Error::Timeout(_)))) == 1,
        "one refill admitted, the queued one timed out: {results:?}"
    );
    // The held reply arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set_delay(Duration::ZERO);
    match l.check("other", 1).await {
        Ok(_) => Some(false),
        Err(Error::Unavailable) => Some(true),
        Err(e) => panic!("a decision on a healthy server failed: {e:?}"),
    }
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
/// have passed (1.2 s here, as documented: `RedisLimiterBuilder::probe_interval`) the next
/// caller takes the probe over and reaches Redis, within `SLACK` (one interval: a takeover two
/// intervals later than documented fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_probe_does_not_hold_the_breaker_open() {
    let Some(server) = RedisServer::start("breaker_evidence::parked_probe") else {
        return;
    };
    // A timeout that a healthy round trip never reaches, even on a loaded machine (where 50 ms
    // can pass, and a timed-out decision on the healthy server would end the wait below early).
    let interval = Duration::from_millis(200);
    let timeout = Duration::from_secs(1);
    // The callers below poll every 5 ms; that poll and a decision's round trip took the
    // takeover at most 16 ms past its due time on a loaded 2-core machine.
    const SLACK: Duration = Duration::from_millis(200);
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
    // The probe: sent to the stalled server, polled once, then parked. Its pass was taken
    // after `t0`, so the takeover is due no sooner than `t0 + timeout + interval`.
    let t0 = Instant::now();
    let mut cx = Context::from_waker(Waker::noop());
    let mut parked = Box::pin(l.check("k", 1));
    assert!(parked.as_mut().poll(&mut cx).is_pending());
    server.resume();
    let due = timeout + interval;
    let mut r = l.check("k", 1).await;
    while matches!(r, Err(Error::Unavailable)) && t0.elapsed() < due + SLACK {
        tokio::time::sleep(Duration::from_millis(5)).await;
        r = l.check("k", 1).await;
    }
    let took = t0.elapsed();
    let held = format!(
        "{r:?} after {took:?} with the probe parked (documented: {due:?}, late by {:?})",
        took.saturating_sub(due)
    );
    drop(parked);
    let after = l.check("k", 1).await;
    println!("{held}; once the parked future is dropped: {after:?}");
    assert!(
        matches!(r, Ok(Ok(()))) && took < due + SLACK,
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
    let proxy = DelayProxy::start(server.port(), Duration::from_millis(300)).await;
    // One token, back 400 ms after it is spent.
    let l = RedisLimiter::builder(
        &proxy.url(),
        Quota::new(1, Duration::from_millis(400), 1).unwrap(),
    )
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
