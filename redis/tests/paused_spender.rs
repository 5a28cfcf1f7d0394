//! A lease holder frozen against a real `redis-server` while the rest of the fleet keeps
//! deciding on the same key: the fleet never admits more than `burst + rate·Δ` in any window,
//! and the holder's lease lapses while it is frozen instead of being spent late. Frozen mid-spend
//! (between a spend's reading of the server's time and its CAS), and frozen with its take's reply
//! unread (the script ran, the lease is not yet installed).
//!
//! The holder runs on a thread of its own with a current-thread runtime, so blocking that thread
//! freezes the whole limiter, its Redis connection included: a process descheduled, GC-paused or
//! SIGSTOPped at the worst instruction. Its monotonic clock runs on meanwhile, as a stopped
//! process's does.
//!
//! Time is real (the script reads the server's `TIME`, the lease the process's monotonic clock),
//! so each admission is recorded as the interval of the realtime clock around its call, the clock
//! a local server's `TIME` reads, and every window is checked in exact integers
//! ([`SpanChecker`]). Bounded: about 0.6 s and a few thousand decisions per test.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;
use tollgate::Quota;
use tollgate_redis::{Leases, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::window::SpanChecker;

const RATE: u64 = 100;
const BURST: u64 = 10;
const KEY: &str = "paused";
/// How long the holder stays frozen: far past its lease's last slice (`BURST` slices of 10 ms
/// from its take) and past a full refill of the bucket.
const FROZEN: Duration = Duration::from_millis(300);

/// Realtime nanoseconds: the clock a `redis-server` on this host reads for `TIME`.
fn wall() -> u64 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(t.as_nanos()).unwrap()
}

/// One decision of cost 1 on the shared key, recorded if admitted.
async fn decide(l: &RedisLimiter, spans: &SpanChecker) -> bool {
    let lo = wall();
    let admitted = l.try_acquire(KEY, 1).await.is_ok();
    if admitted {
        spans.admit(lo, wall(), 1);
    }
    admitted
}

async fn limiter(url: &str, leases: Option<Leases>) -> RedisLimiter {
    let quota = Quota::new(RATE, Duration::from_secs(1), BURST).unwrap();
    let mut b = RedisLimiter::builder(url, quota).timeout(Duration::from_secs(2));
    if let Some(l) = leases {
        b = b.leases(l);
    }
    b.build().await.unwrap()
}

/// The fleet's phases: deciding as fast as the key admits, or idle while the bucket refills.
const DECIDING: u8 = 0;
const IDLE: u8 = 1;

/// What the frozen holder saw.
#[derive(Debug)]
struct Holder {
    /// The call frozen in flight: whether it admitted, and how long it took.
    frozen: bool,
    frozen_for: Duration,
    /// The holder's spends from its lease when the frozen call returned, and after its next
    /// decision.
    leased_at_resume: u64,
    leased_after_next: u64,
}

/// The rest of the fleet, started once the holder is frozen: a leasing limiter and a plain one,
/// two tasks each, deciding as fast as the key admits for 150 ms, idle until `FROZEN` has
/// passed (the bucket refills its burst in 100 ms), then deciding again until the refilled
/// burst is drained. Then the holder is released (`gate`), and the fleet decides on for 200 ms
/// before `stop` is raised.
async fn fleet_around_a_freeze(
    url: &str,
    spans: &Arc<SpanChecker>,
    stop: &Arc<AtomicBool>,
    gate: mpsc::Sender<()>,
) {
    let phase = Arc::new(AtomicU8::new(DECIDING));
    let drained = Arc::new(AtomicBool::new(false));
    let mut fleet = tokio::task::JoinSet::new();
    for leases in [Some(Leases::new(4).lifetime(Duration::from_secs(60))), None] {
        let l = limiter(url, leases).await;
        for _ in 0..2 {
            let (l, spans, stop, phase, drained) = (
                l.clone(),
                spans.clone(),
                stop.clone(),
                phase.clone(),
                drained.clone(),
            );
            fleet.spawn(async move {
                for _ in 0..20_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let deciding = phase.load(Ordering::Relaxed) == DECIDING;
                    if deciding && decide(&l, &spans).await {
                        continue;
                    }
                    if deciding {
                        // A refusal: the key holds no whole token now.
                        drained.store(true, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    phase.store(IDLE, Ordering::Relaxed);
    tokio::time::sleep(FROZEN - Duration::from_millis(150)).await;
    drained.store(false, Ordering::Relaxed);
    phase.store(DECIDING, Ordering::Relaxed);
    let t = Instant::now();
    while !drained.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        drained.load(Ordering::Relaxed),
        "the fleet drained the burst"
    );
    gate.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = fleet.join_next().await {
        r.unwrap();
    }
}

/// Checks every window; the holder was frozen, and its next decision after the freeze was not
/// served from its lease. The fleet drained the refilled burst right before the release, so
/// some window comes within a token of the bound (within three on a machine too loaded to
/// drain it at once): spends from the lapsed lease, eight or nine slices, would break it.
fn check(spans: &SpanChecker, h: &Holder) {
    let quota = Quota::new(RATE, Duration::from_secs(1), BURST).unwrap();
    let tight = spans.tightest(&quota, 1_000).expect("admissions");
    eprintln!(
        "{} admitted; tightest window: {} in {:.3} ms (bound {:.3}); holder: {h:?}",
        spans.total(),
        tight.admitted,
        (tight.to - tight.from) as f64 / 1e6,
        tight.bound_num as f64 / tight.per_ns as f64,
    );
    // 1 µs of slack: the server reads `TIME` in whole microseconds.
    assert_eq!(spans.check_within(&quota, 1_000), Ok(()));
    assert!(h.frozen_for >= FROZEN, "the holder was not frozen: {h:?}");
    assert_eq!(
        h.leased_after_next, h.leased_at_resume,
        "the holder spent its lapsed lease after the freeze: {h:?}"
    );
    assert!(
        (tight.admitted as i128 + 3) * tight.per_ns > tight.bound_num,
        "the fleet did not reach the limit: {tight:?}"
    );
}

/// Whether the server holds a key (any: each test has a server of its own), polled over a
/// plain connection for up to `within`, blocking the calling thread.
fn server_has_a_key(port: u16, within: Duration) -> bool {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 64];
    while t.elapsed() < within {
        c.write_all(b"DBSIZE\r\n").unwrap();
        let n = c.read(&mut buf).unwrap();
        if &buf[..n] != b":0\r\n" {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// The holder takes a lease of a full burst (its own token and nine slices, 10 ms apart) and is
/// frozen inside its next spend, between its reading and its CAS, with nine slices in hand, for
/// 300 ms while the fleet decides. The frozen spend completes: it was decided at its reading,
/// before the freeze, and is counted there (the window bound holds with it there); a pause just
/// after its CAS would look the same to the caller. The holder's next decision finds the slices passed by the
/// server's clock and goes to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_mid_spend_lets_its_lease_lapse() {
    let Some(server) =
        RedisServer::start("paused_spender::a_holder_frozen_mid_spend_lets_its_lease_lapse")
    else {
        return;
    };
    let h = freeze_a_holder(
        &server.url(),
        "the holder reached its spend",
        |a, spans, frozen_tx, gate_rx| async move {
            assert!(decide(&a, &spans).await, "the take from a full bucket");
            assert_eq!(a.counters().redis_calls, 1, "{:?}", a.counters());
            // The hook runs after the spend's reading: the spend is decided at an instant
            // between the call's start and the hook's, before the freeze, and is recorded
            // there (a reading the spend took after the freeze would not lie in it).
            let hooked = Arc::new(AtomicU64::new(0));
            let mut signal = Some((frozen_tx, hooked.clone()));
            let hook = tollgate_redis::on_lease_spend(move || {
                if let Some((s, hooked)) = signal.take() {
                    hooked.store(wall(), Ordering::Relaxed);
                    s.send(()).unwrap();
                    gate_rx.recv().unwrap();
                }
            });
            let (t, lo) = (Instant::now(), wall());
            let frozen = a.try_acquire(KEY, 1).await.is_ok();
            let frozen_for = t.elapsed();
            drop(hook);
            if frozen {
                spans.admit(lo, hooked.load(Ordering::Relaxed), 1);
            }
            (frozen, frozen_for)
        },
    )
    .await;
    assert!(
        h.frozen,
        "a spend decided before the freeze completes at its reading"
    );
    assert_eq!(h.leased_at_resume, 1, "the frozen spend was the lease's");
}

/// The holder's take (its own token and nine slices) runs on the server, and the holder is
/// frozen before it reads the reply, for 300 ms while the fleet decides. The lease it installs
/// after the freeze is dated by its sending, not by its reply: the server's clock may have run
/// for the whole freeze since the script ran, so the slices have passed and its next decision
/// goes to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_before_reading_its_take_lets_the_lease_lapse() {
    let Some(server) = RedisServer::start(
        "paused_spender::a_holder_frozen_before_reading_its_take_lets_the_lease_lapse",
    ) else {
        return;
    };
    let port = server.port();
    let h = freeze_a_holder(
        &server.url(),
        "the holder's take reached the server",
        move |a, spans, frozen_tx, gate_rx| async move {
            let take = tokio::spawn({
                let (a, spans) = (a.clone(), spans.clone());
                async move {
                    let t = Instant::now();
                    (decide(&a, &spans).await, t.elapsed())
                }
            });
            // Let the take's request out, then block this thread as soon as the script has
            // written the key: the reply is left unread until the gate opens.
            let mut ran = false;
            for _ in 0..100 {
                tokio::task::yield_now().await;
                if server_has_a_key(port, Duration::from_millis(20)) {
                    ran = true;
                    break;
                }
            }
            assert!(ran, "the take never reached the server");
            assert!(
                !take.is_finished(),
                "the take's reply was read before the freeze"
            );
            frozen_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
            let frozen = take.await.unwrap();
            assert_eq!(a.counters().redis_calls, 1, "{:?}", a.counters());
            frozen
        },
    )
    .await;
    assert!(h.frozen, "the take from a full bucket admits its own token");
    assert_eq!(h.leased_at_resume, 0);
}

/// A holder frozen by `freeze` while the fleet decides around it ([`fleet_around_a_freeze`]);
/// what it saw, checked ([`check`]). The holder runs on a thread of its own with a
/// current-thread runtime and a lease of a full burst. `freeze` gets its limiter, the spans,
/// a sender to signal once the thread is about to block (`expect`: what a signal not sent in
/// 10 s means) and the gate to block on; it returns the frozen call's verdict and duration.
/// Then the holder decides once more, and on with the fleet until it stops.
async fn freeze_a_holder<F, Fut>(url: &str, expect: &str, freeze: F) -> Holder
where
    F: FnOnce(RedisLimiter, Arc<SpanChecker>, oneshot::Sender<()>, mpsc::Receiver<()>) -> Fut
        + Send
        + 'static,
    Fut: Future<Output = (bool, Duration)>,
{
    let spans = Arc::new(SpanChecker::new());
    let stop = Arc::new(AtomicBool::new(false));
    let (frozen_tx, frozen_rx) = oneshot::channel::<()>();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let holder = {
        let (url, spans, stop) = (url.to_owned(), spans.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let a = limiter(
                    &url,
                    Some(Leases::new(BURST).lifetime(Duration::from_secs(60))),
                )
                .await;
                let (frozen, frozen_for) =
                    freeze(a.clone(), spans.clone(), frozen_tx, gate_rx).await;
                let leased_at_resume = a.counters().leased;
                decide(&a, &spans).await;
                let leased_after_next = a.counters().leased;
                decide_until(&a, &spans, &stop).await;
                Holder {
                    frozen,
                    frozen_for,
                    leased_at_resume,
                    leased_after_next,
                }
            })
        })
    };
    tokio::time::timeout(Duration::from_secs(10), frozen_rx)
        .await
        .expect(expect)
        .unwrap();
    fleet_around_a_freeze(url, &spans, &stop, gate_tx).await;
    let h = tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    check(&spans, &h);
    h
}

/// The holder goes on deciding with the fleet until `stop`.
async fn decide_until(a: &RedisLimiter, spans: &SpanChecker, stop: &AtomicBool) {
    for _ in 0..5_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if !decide(a, spans).await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
