//! Faults: SCRIPT FLUSH under load, a frozen server (SIGSTOP / SIGCONT), a killed and restarted
//! server. Every loop is bounded in time and count.

mod support;

use std::time::{Duration, Instant};
use tollgate::{Denied, Quota};
use tollgate_redis::{Counters, Error, OnUnavailable, RedisLimiter, FAIL_CLOSED_RETRY};
use tollgate_testkit::redis_server::RedisServer;

use support::{unlimited, Load};

/// Scheduling slack on a loaded 2-core CI machine, on top of the decision timeout.
const SLACK: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_under_load_surfaces_no_error() {
    let Some((server, l)) = unlimited("faults::script_flush_under_load").await else {
        return;
    };
    let load = Load::start(&l, 8, 20_000);
    // SCRIPT FLUSH every 100 ms for 1.5 s.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    }
    let tally = load.stop().await;
    assert_eq!((tally.refused, tally.failed), (0, 0), "{tally:?}");
    assert!(tally.admitted > 100, "{tally:?}");
    assert_eq!(l.counters().errors, 0);
}

/// Runs `n` decisions spread over `tasks` tasks; returns the verdicts and the slowest one.
async fn burst_of_decisions(
    l: &RedisLimiter,
    tasks: usize,
    n: usize,
) -> (Vec<Result<(), Denied>>, Duration) {
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let l = l.clone();
        set.spawn(async move {
            let mut out = Vec::new();
            for i in 0..n / tasks {
                let t0 = Instant::now();
                let v = l.try_acquire(&format!("k{}", (t + i) % 5), 1).await;
                out.push((v, t0.elapsed()));
            }
            out
        });
    }
    let (mut verdicts, mut slowest) = (Vec::new(), Duration::ZERO);
    while let Some(r) = set.join_next().await {
        for (v, d) in r.unwrap() {
            verdicts.push(v);
            slowest = slowest.max(d);
        }
    }
    (verdicts, slowest)
}

/// The first decision of `key` that Redis makes (a policy answers none of these: they are
/// `check`s), retried while calls end in the limiter's timeout or in the open breaker's
/// refusal that follows one: on a loaded machine a call, the first one included, can need more
/// than a 25 ms timeout. Any other error fails the test.
async fn redis_decides(l: &RedisLimiter, key: &str, within: Duration) -> Result<(), Denied> {
    let t0 = Instant::now();
    loop {
        match l.check(key, 1).await {
            Ok(verdict) => return verdict,
            Err(e @ (Error::Timeout(_) | Error::Unavailable)) => {
                assert!(
                    t0.elapsed() < within,
                    "no decision by Redis in {within:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

async fn waits_until_back_on_redis(l: &RedisLimiter, within: Duration) -> Duration {
    let t0 = Instant::now();
    let before = l.counters().redis;
    while l.counters().redis == before {
        assert!(t0.elapsed() < within, "not back on Redis after {within:?}");
        let _ = l.try_acquire("probe", 1).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_every_policy_answers_within_the_timeout() {
    let Some(server) = RedisServer::start("faults::frozen_server") else {
        return;
    };
    let timeout = Duration::from_millis(25);
    let quota = Quota::per_second(1_000_000).unwrap();
    let build = |p: OnUnavailable| {
        RedisLimiter::builder(&server.url(), quota)
            .timeout(timeout)
            .on_unavailable(p)
            .build()
    };
    let closed = build(OnUnavailable::FailClosed).await.unwrap();
    let open = build(OnUnavailable::FailOpen).await.unwrap();
    let local = build(OnUnavailable::LocalFallback {
        fraction: 0.5,
        max_keys: 100,
    })
    .await
    .unwrap();
    // Each limiter decides on Redis before the freeze. Its first call may need more than the
    // 25 ms timeout on a loaded machine (a policy answers for it then, and the call counts as an
    // error): it is retried until Redis decides one, and the checks below count from there.
    let mut warm = Vec::new();
    for l in [&closed, &open, &local] {
        waits_until_back_on_redis(l, Duration::from_secs(5)).await;
        warm.push(l.counters());
    }
    server.pause();
    let resume = scopeguard(&server);
    for ((l, name), warm) in [(&closed, "closed"), (&open, "open"), (&local, "local")]
        .into_iter()
        .zip(warm)
    {
        let (verdicts, slowest) = burst_of_decisions(l, 8, 200).await;
        assert!(
            slowest <= timeout + SLACK,
            "{name}: slowest decision {slowest:?}"
        );
        let c = since(l.counters(), warm);
        match name {
            "closed" => {
                assert!(verdicts
                    .iter()
                    .all(|v| *v == Err(Denied::RetryAfter(FAIL_CLOSED_RETRY))));
                assert_eq!(c.fail_closed, 200);
            }
            "open" => {
                assert!(verdicts.iter().all(Result::is_ok));
                assert_eq!(c.fail_open, 200);
            }
            _ => {
                // Half of 10^6/s: a burst of 500_000 per key, plenty for 200.
                assert!(verdicts.iter().all(Result::is_ok));
                assert_eq!(c.local_fallback, 200);
            }
        }
        // Most decisions never reached the frozen server (the breaker lets one probe through
        // per interval), so nothing queues behind it.
        assert!(c.redis_calls < 50, "{name}: {c:?}");
        assert_eq!(c.errors, 200, "{name}: {c:?}");
        // The raw path reports the error.
        assert!(l.check("x", 1).await.unwrap_err().is_unavailable());
    }
    drop(resume);
    for l in [&closed, &open, &local] {
        let back = waits_until_back_on_redis(l, Duration::from_secs(1)).await;
        assert!(back < Duration::from_secs(1), "{back:?}");
    }
}

/// The counters of what a limiter decided after `warm` was read.
fn since(now: Counters, warm: Counters) -> Counters {
    let mut c = now;
    c.redis -= warm.redis;
    c.leased -= warm.leased;
    c.lease_denied -= warm.lease_denied;
    c.fail_open -= warm.fail_open;
    c.fail_closed -= warm.fail_closed;
    c.local_fallback -= warm.local_fallback;
    c.errors -= warm.errors;
    c.malformed -= warm.malformed;
    c.redis_calls -= warm.redis_calls;
    c
}

/// Resumes the server even if an assertion fails while it is paused.
fn scopeguard(server: &RedisServer) -> impl Drop + '_ {
    struct Resume<'a>(&'a RedisServer);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.resume();
        }
    }
    Resume(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_restarted_server_recovers_by_itself() {
    let Some(mut server) = RedisServer::start("faults::killed_and_restarted") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1000).unwrap())
        .on_unavailable(OnUnavailable::FailOpen)
        .build()
        .await
        .unwrap();
    assert_eq!(redis_decides(&l, "k", Duration::from_secs(5)).await, Ok(()));
    server.kill();
    let t0 = Instant::now();
    // While it is down: errors, within the timeout, policy applied.
    for _ in 0..20 {
        let t = Instant::now();
        assert!(l.check("k", 1).await.is_err());
        assert_eq!(l.try_acquire("k", 1).await, Ok(()));
        assert!(t.elapsed() <= 2 * (Duration::from_millis(25) + SLACK));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(l.counters().fail_open >= 20);
    server.restart();
    // Back on Redis (reconnected, script reloaded) without any help.
    let back = waits_until_back_on_redis(&l, Duration::from_secs(5)).await;
    assert_eq!(redis_decides(&l, "k", Duration::from_secs(5)).await, Ok(()));
    eprintln!("down {:?}, back {back:?} after restart", t0.elapsed());
}

/// A decision timeout longer than two seconds is the decision's: the connection adds no reply
/// limit of its own that would end the call sooner with another error (and count it against the
/// breaker as a failed call rather than the limiter's timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_timeout_is_waited_for_in_full() {
    let Some(server) = RedisServer::start("faults::long_timeout") else {
        return;
    };
    let timeout = Duration::from_millis(2_600);
    let limiter = RedisLimiter::builder(&server.url(), Quota::per_second(100).unwrap())
        .timeout(timeout)
        .build()
        .await
        .unwrap();
    assert!(matches!(limiter.check("k", 1).await, Ok(Ok(()))));
    server.pause();
    let resume = scopeguard(&server);
    let started = Instant::now();
    let err = limiter.check("k", 1).await.unwrap_err();
    let took = started.elapsed();
    drop(resume);
    assert!(
        matches!(err, Error::Timeout(t) if t == timeout),
        "{err:?} after {took:?}"
    );
    assert!(took >= timeout && took <= timeout + SLACK * 5, "{took:?}");
    // Answered again once the server is back.
    let back = waits_until_back_on_redis(&limiter, Duration::from_secs(2)).await;
    assert!(back < Duration::from_secs(2), "{back:?}");
}
