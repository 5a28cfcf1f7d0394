//! Leases: several limiters leasing from one key never admit more than `burst + rate·Δ` in any
//! window of length Δ (exactly: no lease-lifetime term); on a hot key they need at least 10×
//! fewer Redis calls per admitted request than plain decisions (with `L` chosen by the rule in
//! the crate README: the key stays full, so its leases expire gradually).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate::Quota;
use tollgate_redis::{Leases, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::window::SpanChecker;

/// Realtime nanoseconds: the clock a `redis-server` on this host reads for `TIME`, so that an
/// admission recorded as the interval `[before, after]` around its call contains the instant it
/// was decided (on the server, or locally against the lease, whose slices are the server's).
fn wall() -> u64 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(t.as_nanos()).unwrap()
}

/// Slack of every window: the server reads `TIME` in whole microseconds, and a lease's slices,
/// anchored to the server's time at its take, are spent by the process's own clock, which an
/// NTP slew of the realtime clock (at most 0.05 %) moves against the server's by at most 25 µs
/// over the longest lease here (10 tokens, 50 ms).
const SLACK_NS: u64 = 26_000;

/// Checks `burst + rate·Δ` in every window in exact integers ([`SpanChecker`]), with
/// [`SLACK_NS`], and reports the tightest window.
fn assert_window_bound(spans: &SpanChecker, quota: &Quota) {
    if let Some(tight) = spans.tightest(quota, SLACK_NS) {
        eprintln!(
            "{} admitted; tightest window: {} in {:.3} ms (bound {:.3})",
            spans.total(),
            tight.admitted,
            (tight.to - tight.from) as f64 / 1e6,
            tight.bound_num as f64 / tight.per_ns as f64,
        );
    }
    assert_eq!(spans.check_within(quota, SLACK_NS), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_never_exceed_the_window_bound() {
    let Some(server) = RedisServer::start("leases::leases_never_exceed_the_window_bound") else {
        return;
    };
    const RATE: u64 = 200;
    const BURST: u64 = 20;
    let quota = Quota::new(RATE, Duration::from_secs(1), BURST).unwrap();
    let spans = Arc::new(SpanChecker::new());
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut limiters = Vec::new();
    for _ in 0..3 {
        // A long lifetime cap: the bound must not depend on it.
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .leases(Leases::new(5).lifetime(Duration::from_secs(10)))
            .build()
            .await
            .unwrap();
        limiters.push(l.clone());
        for _ in 0..6 {
            let (l, spans) = (l.clone(), spans.clone());
            tasks.spawn(async move {
                // 1.2 s or 3,000 attempts per task, whichever comes first.
                for _ in 0..3_000 {
                    if t0.elapsed() > Duration::from_millis(1200) {
                        break;
                    }
                    let before = wall();
                    if l.try_acquire("shared", 1).await.is_ok() {
                        spans.admit(before, wall(), 1);
                    } else {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // 20 + 200/s × 1.2 s ≈ 260 tokens at most; most of them should be used.
    assert!(spans.total() > 150, "only {} admitted", spans.total());
    let leased: u64 = limiters.iter().map(|l| l.counters().leased).sum();
    assert!(leased >= 5, "the leases served only {leased} admissions");
    assert_window_bound(&spans, &quota);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_adds_nothing_to_a_refilled_burst() {
    let Some(server) = RedisServer::start("leases::a_held_lease_adds_nothing_to_a_refilled_burst")
    else {
        return;
    };
    // Limiter A leases 10 tokens and holds them while the bucket refills to the full burst;
    // B then takes the burst, and A's leased slices (which the server's clock has passed) must
    // not be spent on top of it.
    const RATE: u64 = 200;
    const BURST: u64 = 20;
    let quota = Quota::new(RATE, Duration::from_secs(1), BURST).unwrap();
    let build = |leases: Leases| {
        RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .leases(leases)
            .build()
    };
    let a = build(Leases::new(10).lifetime(Duration::from_secs(60)))
        .await
        .unwrap();
    let b = build(Leases::new(1)).await.unwrap();
    let spans = SpanChecker::new();
    let record = async |l: &RedisLimiter, spans: &SpanChecker| {
        let before = wall();
        let ok = l.try_acquire("held", 1).await.is_ok();
        if ok {
            spans.admit(before, wall(), 1);
        }
        ok
    };
    assert!(record(&a, &spans).await);
    assert_eq!(
        a.counters().redis_calls,
        1,
        "one take of 10 (1 spent, 9 leased)"
    );
    // The bucket is full again after 10 tokens' refill time (50 ms); wait well past it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut burst = 0;
    while burst < 100 && record(&b, &spans).await {
        burst += 1;
    }
    assert!(burst >= BURST - 1, "B took only {burst}");
    // A's old lease must serve none of these: its slices expired, so A asks Redis. The bucket
    // refills meanwhile (a token per 5 ms), and a machine that pauses this task long enough
    // lets a take of A's be admitted with new slices, which A may then spend (the window bound
    // covers them): a spend from a lease is A's old lease unless such a take came first.
    let mut took = false;
    for _ in 0..10 {
        let before = a.counters();
        let ok = record(&a, &spans).await;
        let after = a.counters();
        assert!(
            after.leased == before.leased || took,
            "A spent its old lease after B's burst: {after:?}"
        );
        took |= ok && after.redis > before.redis;
    }
    assert_window_bound(&spans, &quota);
}

async fn hot_key_calls_per_admission(url: &str, leases: Option<Leases>) -> f64 {
    let quota = Quota::per_second(1_000_000).unwrap();
    let mut b = RedisLimiter::builder(url, quota).timeout(Duration::from_secs(2));
    if let Some(l) = leases {
        b = b.leases(l);
    }
    let l = b.build().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let l = l.clone();
        tasks.spawn(async move {
            for _ in 0..200 {
                let _ = l.try_acquire("hot", 1).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let c = l.counters();
    let admitted = c.redis + c.leased;
    assert!(admitted >= 64 * 200 * 9 / 10, "{c:?}");
    c.redis_calls as f64 / admitted as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_cut_redis_calls_tenfold_on_a_hot_key() {
    let Some(server) = RedisServer::start("leases::leases_cut_redis_calls_tenfold") else {
        return;
    };
    let plain = hot_key_calls_per_admission(&server.url(), None).await;
    let leased = hot_key_calls_per_admission(&server.url(), Some(Leases::new(1024))).await;
    eprintln!("Redis calls per admitted request: plain {plain:.3}, leases {leased:.4}");
    assert!(plain >= 0.99, "{plain}");
    assert!(plain / leased >= 10.0, "plain {plain} vs leased {leased}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_a_drained_key_refuse_locally() {
    let Some(server) = RedisServer::start("leases::leases_on_a_drained_key_refuse_locally") else {
        return;
    };
    // One token per hour, burst 5: two leasing limiters admit exactly 5 in total.
    let quota = Quota::new(1, Duration::from_secs(3600), 5).unwrap();
    let admitted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut limiters = Vec::new();
    for _ in 0..2 {
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .leases(Leases::new(4))
            .build()
            .await
            .unwrap();
        limiters.push(l.clone());
        for _ in 0..16 {
            let (l, admitted) = (l.clone(), admitted.clone());
            tasks.spawn(async move {
                for _ in 0..50 {
                    match l.try_acquire("drained", 1).await {
                        Ok(()) => {
                            admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(tollgate::Denied::RetryAfter(d)) => {
                            assert!(d > Duration::from_secs(3000) && d <= Duration::from_secs(3600))
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert!(admitted.load(std::sync::atomic::Ordering::Relaxed) <= 5);
    for l in &limiters {
        let c = l.counters();
        // 800 decisions per limiter; after the first refused refill, refusals stay local.
        assert_eq!(c.redis + c.leased + c.lease_denied, 800, "{c:?}");
        assert!(c.redis_calls <= 10, "{c:?}");
    }
}
