//! Decisions abandoned mid-request (a client disconnect, `tokio::time::timeout`, `select!`)
//! while the server stalls: the connection is multiplexed (redis-rs pairs each reply with its
//! request, in order, and drops the replies nobody waits for), so no caller ever reads another
//! caller's reply; a lease refill whose reply was abandoned credits nothing locally (its tokens
//! stay debited in Redis: under-admission, never over-admission). Each test starts its own
//! `redis-server` on a free loopback port; the schedules are seeded.

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tollgate::{Denied, Quota};
use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::rng::Rng;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// One inline command on `s`, and its one-line reply.
fn command(s: &mut TcpStream, cmd: &str) -> String {
    s.write_all(format!("{cmd}\r\n").as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "connection closed");
        buf.push(byte[0]);
    }
    String::from_utf8_lossy(&buf).trim_end().to_owned()
}

/// Stalls the server until `stop`: `CLIENT PAUSE 4` (every client's commands wait 4 ms), then
/// about 1 ms of service, again and again. Returns the number of pauses. Start the server with
/// `--hz 500`: a pause ends at the server's next cron tick (100 ms apart at the default 10).
fn stall_until(port: u16, stop: &AtomicBool) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        assert_eq!(command(&mut s, "CLIENT PAUSE 4"), "+OK");
        std::thread::sleep(Duration::from_millis(5));
        n += 1;
    }
    n
}

/// How many times the server ran `EVALSHA` and `EVAL` without an error (`INFO
/// commandstats`: `calls` less `failed_calls`, which counts the NOSCRIPT answers; Redis 7).
fn script_runs(server: &RedisServer) -> u64 {
    let field = |line: &str, name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| field(l, "calls") - field(l, "failed_calls"))
        .sum()
}

/// How a caller gives up on a decision.
#[derive(Clone, Copy, Debug)]
enum GiveUp {
    Never,
    /// An outer `tokio::time::timeout`.
    After(Duration),
    /// Polled once (its command handed to the connection), then dropped.
    PollOnce,
}

impl GiveUp {
    fn pick(rng: &mut Rng) -> GiveUp {
        match rng.below(8) {
            0..=2 => GiveUp::Never,
            3..=4 => GiveUp::After(Duration::from_millis(1)),
            5..=6 => GiveUp::After(Duration::from_millis(2)),
            _ => GiveUp::PollOnce,
        }
    }

    /// Runs `f`, or gives up on it: `None` when it was dropped unfinished.
    async fn run<F: Future>(self, f: F) -> Option<F::Output> {
        match self {
            GiveUp::Never => Some(f.await),
            GiveUp::After(d) => tokio::time::timeout(d, f).await.ok(),
            GiveUp::PollOnce => {
                let mut f = pin!(f);
                match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(v) => Some(v),
                    Poll::Pending => None,
                }
            }
        }
    }
}

/// Eight tasks send 4,800 requests of three kinds through one limiter while the server stalls
/// every 5 ms and the script cache is flushed every 50 ms; callers are set to give up on 5 in 8
/// requests, at seeded points (an outer timeout of 1 or 2 ms, or a single poll), and 40 to 55 %
/// end unfinished. Every request that finishes gets its own reply: an `echo` of unique numbers
/// returns exactly them, a key whose one-an-hour burst was spent is refused with no token left
/// (a wait of up to an hour), a key with a million tokens is admitted. The server ran scripts
/// whose callers had gone (their replies were read and dropped by the connection, not handed to
/// the next caller): before the race, 300 by construction, sent to a stopped server and dropped
/// ahead of an echo that gets its own reply; in the race, 40 to over 1,000 depending on the
/// timing. Nothing failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_requests_never_answer_another_caller() {
    let Some(server) =
        RedisServer::start_with("cancellation::abandoned_requests", &["--hz", "500"])
    else {
        return;
    };
    const TASKS: u64 = 8;
    const OPS: u64 = 600;
    let mut b = RedisLimiter::builder(&server.url(), Quota::per_second(1_000_000).unwrap())
        .timeout(Duration::from_secs(1))
        .on_unavailable(OnUnavailable::FailClosed);
    for t in 0..TASKS {
        b = b.quota_for(&format!("spent{t}"), Quota::new(1, HOUR, 1).unwrap());
    }
    let l = b.build().await.unwrap();
    for t in 0..TASKS {
        assert_eq!(l.check(&format!("spent{t}"), 1).await.unwrap(), Ok(()));
    }
    let runs_before = script_runs(&server);
    // Replies for callers that had gone, whatever the timing: with the server stopped, 100
    // echoes are polled once, get 50 ms to be written, and are dropped; an echo sent after them
    // and awaited once the server resumes must get its own reply, not one of theirs. An echo
    // dropped before it was written is never sent, so rounds go on until the server ran
    // `ORPHANS` of them: one round unless the machine is too loaded to write 100 commands in
    // 50 ms.
    const ORPHANS: u64 = 300;
    let mut orphans = 0;
    for round in 0..30u64 {
        let runs = script_runs(&server);
        server.pause();
        let nums: Vec<[u64; 2]> = (0..100).map(|i| [round, i]).collect();
        let mut gone: Vec<_> = nums.iter().map(|n| Box::pin(l.echo(n))).collect();
        for echo in &mut gone {
            let polled = echo.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            assert!(polled.is_pending(), "a stopped server answered");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(gone);
        let own = [round, 1_000_000];
        let mut live = Box::pin(l.echo(&own));
        assert!(live
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending());
        server.resume();
        let want: Vec<String> = own.iter().map(u64::to_string).collect();
        assert_eq!(live.await.unwrap(), want, "round {round}");
        orphans += script_runs(&server) - runs - 1;
        if orphans >= ORPHANS {
            break;
        }
    }
    assert!(
        orphans >= ORPHANS,
        "only {orphans} orphan echoes reached Redis"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let staller = {
        let (stop, port) = (stop.clone(), server.port());
        std::thread::spawn(move || stall_until(port, &stop))
    };
    let flusher = {
        let stop = stop.clone();
        let port = server.port();
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(command(&mut s, "SCRIPT FLUSH"), "+OK");
                n += 1;
            }
            n
        })
    };
    let finished = Arc::new(AtomicU64::new(0));
    let t0 = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let (l, finished) = (l.clone(), finished.clone());
        tasks.spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
            let mut wrong = Vec::new();
            for i in 0..OPS {
                let give_up = GiveUp::pick(&mut rng);
                let done = match rng.below(3) {
                    0 => {
                        let nums = [t, i, t * 1_000_003 + i];
                        give_up.run(l.echo(&nums)).await.map(|r| {
                            let want: Vec<String> = nums.iter().map(u64::to_string).collect();
                            if r.as_ref().ok() != Some(&want) {
                                wrong.push(format!("echo {nums:?} answered {r:?}"));
                            }
                        })
                    }
                    1 => {
                        let key = format!("spent{}", rng.below(TASKS));
                        give_up
                            .run(l.check_snapshot(&key, 1))
                            .await
                            .map(|r| match r {
                                Ok((Err(Denied::RetryAfter(w)), s))
                                    if w > HOUR / 2 && w <= HOUR && s.remaining() == 0 => {}
                                r => wrong.push(format!("{key} answered {r:?}")),
                            })
                    }
                    _ => {
                        let key = format!("plenty{}", rng.below(4));
                        give_up
                            .run(l.check_snapshot(&key, 1))
                            .await
                            .map(|r| match r {
                                Ok((Ok(()), s)) if s.remaining() >= 1_000_000 - TASKS * OPS => {}
                                r => wrong.push(format!("{key} answered {r:?}")),
                            })
                    }
                };
                if done.is_some() {
                    finished.fetch_add(1, Ordering::Relaxed);
                }
            }
            wrong
        });
    }
    let mut wrong = Vec::new();
    while let Some(r) = tasks.join_next().await {
        wrong.extend(r.unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let (pauses, flushes) = (staller.join().unwrap(), flusher.join().unwrap());
    // Let the abandoned requests still queued on the connection be answered.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let runs = script_runs(&server) - runs_before;
    let finished = finished.load(Ordering::Relaxed);
    let c = l.counters();
    println!(
        "{:?}: {pauses} pauses, {flushes} flushes; {} requests, {finished} finished; the server ran \
         {runs} scripts to the end ({orphans} orphans before the race); {} wrong; {c:?}",
        t0.elapsed(),
        TASKS * OPS,
        wrong.len()
    );
    assert!(wrong.is_empty(), "{:#?}", &wrong[..wrong.len().min(10)]);
    // Each finished request read the reply of one script run; the others were read by the
    // connection and dropped: the orphans sent before the race (how many of the race's own
    // callers gave up after their script was sent depends on the timing: 40 to over 1,000).
    assert!(
        runs >= finished + ORPHANS,
        "too few scripts ran for callers that had gone: {runs} runs, {finished} finished"
    );
    assert_eq!(c.errors, 0, "{c:?}");
    // The connection is as good as new: every key answers as before, from Redis.
    for t in 0..TASKS {
        let (v, s) = l.check_snapshot(&format!("spent{t}"), 1).await.unwrap();
        assert!(matches!(v, Err(Denied::RetryAfter(_))) && s.remaining() == 0);
        assert_eq!(l.echo(&[t]).await.unwrap(), vec![t.to_string()]);
    }
}

/// Four tasks spend a key's leases of 8 (burst 10,000, one token a day: nothing refills during
/// the test) with costs of 1 to 3 while the server stalls every 5 ms; callers are set to give up
/// on 5 in 8 decisions at seeded points, and lease refills are among those abandoned (sent,
/// their reply never read: how many depends on the timing, 10 to 70 of about 350 calls). Before
/// them, 24 refills are abandoned by construction: each sent to a stopped server by a single
/// poll, then dropped. The tokens admitted never exceed what Redis debited: a refill whose reply
/// nobody read credited nothing locally, and the tokens it debited are lost (under-admission,
/// reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_lease_refills_credit_nothing() {
    let Some(server) =
        RedisServer::start_with("cancellation::abandoned_lease_refills", &["--hz", "500"])
    else {
        return;
    };
    const BURST: u64 = 10_000;
    let l = RedisLimiter::builder(&server.url(), Quota::new(1, DAY, BURST).unwrap())
        .timeout(Duration::from_secs(1))
        .on_unavailable(OnUnavailable::FailClosed)
        .leases(Leases::new(8).lifetime(HOUR))
        .build()
        .await
        .unwrap();
    // Refills abandoned whatever the timing, before the race: with the server stopped, each
    // of a round's keys (its lease empty) sends a refill at its first poll, the connection gets
    // 50 ms to write them, then every caller drops its future and the server resumes and runs
    // what reached it, replying to nobody. A refill dropped before it was written is never sent
    // (nothing debited), so rounds go on until Redis ran `SURE` of them: one round unless the
    // machine is too loaded to write 24 commands in 50 ms.
    const SURE: u64 = 24;
    let mut sure = 0;
    for round in 0..20 {
        let runs = script_runs(&server);
        server.pause();
        let keys: Vec<String> = (0..SURE).map(|k| format!("sure{round}-{k}")).collect();
        let mut calls: Vec<_> = keys.iter().map(|k| Box::pin(l.try_acquire(k, 1))).collect();
        for call in &mut calls {
            let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            assert!(polled.is_pending(), "a stopped server answered");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(calls);
        server.resume();
        let c = l.counters();
        assert_eq!(c.redis, 0, "a dropped refill was counted as decided: {c:?}");
        // The echo (a script run too) comes back after every earlier command on the
        // connection ran.
        assert_eq!(l.echo(&[round]).await.unwrap(), vec![round.to_string()]);
        sure += script_runs(&server) - runs - 1;
        if sure >= SURE {
            break;
        }
    }
    assert!(sure >= SURE, "only {sure} abandoned refills reached Redis");
    // None of them credited its key's lease: the next decision there refills from Redis.
    let before = l.counters().redis_calls;
    assert_eq!(l.try_acquire("sure0-0", 1).await, Ok(()));
    assert_eq!(
        l.counters().redis_calls,
        before + 1,
        "served from a lease whose refill was abandoned"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let staller = {
        let (stop, port) = (stop.clone(), server.port());
        std::thread::spawn(move || stall_until(port, &stop))
    };
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..4u64 {
        let (l, admitted) = (l.clone(), admitted.clone());
        tasks.spawn(async move {
            let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (t + 1));
            let mut finished = 0u64;
            for _ in 0..400 {
                let cost = 1 + rng.below(3);
                let give_up = GiveUp::pick(&mut rng);
                if let Some(v) = give_up.run(l.try_acquire("hot", cost)).await {
                    finished += 1;
                    if v.is_ok() {
                        admitted.fetch_add(cost, Ordering::Relaxed);
                    }
                }
            }
            finished
        });
    }
    let mut finished = 0;
    while let Some(r) = tasks.join_next().await {
        finished += r.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let pauses = staller.join().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_, s) = l.check_snapshot("hot", 0).await.unwrap();
    let debited = BURST - s.remaining();
    let admitted = admitted.load(Ordering::Relaxed);
    let c = l.counters();
    println!(
        "{pauses} pauses; 1600 decisions, {finished} finished; {admitted} tokens admitted, \
         {debited} debited in Redis ({} lost to abandoned refills and unspent leases); \
         {} calls abandoned, {sure} of them refills Redis ran before the race; {c:?}",
        debited - admitted.min(debited),
        c.redis_calls - c.redis
    );
    assert!(
        admitted <= debited,
        "{admitted} tokens admitted, only {debited} debited in Redis"
    );
    // Calls whose caller gave up before the reply (errors are none): the sure ones, and those
    // of the race (how many depends on the timing: reported, not asserted).
    let abandoned = c.redis_calls - c.redis;
    assert!(abandoned >= SURE, "{c:?}");
    assert!(c.leased > 0 && c.redis > 0, "{c:?}");
    assert_eq!(c.errors, 0, "{c:?}");
}

/// Four tasks send echoes of unique numbers and decisions on a key with a million tokens,
/// giving up on 5 in 8 at seeded points, while the server is killed and restarted on the same
/// port twice (the script cache and the state gone each time): requests fail while it is down,
/// and every request answered, before, between or after the restarts, gets its own reply; the
/// connection reconnects and the script reloads by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_across_restarts_are_each_callers_own() {
    let Some(mut server) = RedisServer::start("cancellation::restarts") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1_000_000).unwrap())
        .timeout(Duration::from_secs(1))
        .on_unavailable(OnUnavailable::FailClosed)
        .probe_interval(Duration::from_millis(10))
        .build()
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Requests answered since the last restart.
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..4u64 {
        let (l, stop, answered) = (l.clone(), stop.clone(), answered.clone());
        tasks.spawn(async move {
            let mut rng = Rng(0xA076_1D64_78BD_642F ^ (t + 1));
            let (mut wrong, mut failed) = (Vec::new(), 0u64);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let give_up = GiveUp::pick(&mut rng);
                let ok = if rng.below(2) == 0 {
                    let nums = [t, i];
                    give_up.run(l.echo(&nums)).await.map(|r| match r {
                        Ok(got) if got == [t.to_string(), i.to_string()] => true,
                        Ok(got) => {
                            wrong.push(format!("echo {nums:?} answered {got:?}"));
                            false
                        }
                        Err(_) => false,
                    })
                } else {
                    give_up
                        .run(l.check_snapshot("plenty", 1))
                        .await
                        .map(|r| match r {
                            Ok((Ok(()), s)) if s.remaining() >= 900_000 => true,
                            Ok(r) => {
                                wrong.push(format!("plenty answered {r:?}"));
                                false
                            }
                            Err(_) => false,
                        })
                };
                match ok {
                    Some(true) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(false) => failed += 1,
                    None => {}
                }
                // Some pacing: the server is killed at a random point of the traffic.
                if rng.below(4) == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            (wrong, failed)
        });
    }
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        answered_past(&answered, 0).await;
        assert!(answered.swap(0, Ordering::Relaxed) > 0, "nothing answered");
        tokio::task::block_in_place(|| server.restart());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    answered_past(&answered, 100).await;
    stop.store(true, Ordering::Relaxed);
    let (mut wrong, mut failed) = (Vec::new(), 0);
    while let Some(r) = tasks.join_next().await {
        let (w, f) = r.unwrap();
        wrong.extend(w);
        failed += f;
    }
    let after = answered.load(Ordering::Relaxed);
    println!(
        "{failed} failed while the server was down; {after} answered after the last restart; \
         {} wrong; {:?}",
        wrong.len(),
        l.counters()
    );
    assert!(wrong.is_empty(), "{:#?}", &wrong[..wrong.len().min(10)]);
    assert!(failed > 0, "no request met the restarts");
    assert!(after > 100, "{after} answered after the last restart");
}

/// Waits until more than `n` requests were answered since the last restart, for at most 10 s
/// (a loaded machine may take longer than the test's pacing to reconnect and reload the
/// script); the caller's assertions say what a longer wait means.
async fn answered_past(answered: &AtomicU64, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while answered.load(Ordering::Relaxed) <= n && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
