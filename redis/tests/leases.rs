//! Leases: several limiters leasing from one key never admit more than
//! `burst + rate·(Δ + lifetime)` in any window of length Δ; on a hot key they need at least 10×
//! fewer Redis calls per admitted request than plain decisions.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate::Quota;
use tollgate_redis::test_support::RedisServer;
use tollgate_redis::{Leases, RedisLimiter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_never_exceed_the_window_bound() {
    let Some(server) = RedisServer::start("leases::leases_never_exceed_the_window_bound") else {
        return;
    };
    const RATE: u64 = 200;
    const BURST: u64 = 20;
    let lifetime = Duration::from_millis(50);
    let quota = Quota::new(RATE, Duration::from_secs(1), BURST).unwrap();
    let times = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .leases(Leases::new(5).lifetime(lifetime))
            .build()
            .await
            .unwrap();
        for _ in 0..6 {
            let (l, times) = (l.clone(), times.clone());
            tasks.spawn(async move {
                // 1.2 s or 3,000 attempts per task, whichever comes first.
                for _ in 0..3_000 {
                    if t0.elapsed() > Duration::from_millis(1200) {
                        break;
                    }
                    if l.try_acquire("shared", 1).await.is_ok() {
                        times.lock().unwrap().push(t0.elapsed());
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
    let mut t = times.lock().unwrap().clone();
    t.sort();
    // 20 + 200/s × 1.2 s ≈ 260 tokens at most; most of them should be used.
    assert!(t.len() > 150, "only {} admitted", t.len());
    // Timestamps are taken after the reply: a token is spent at most `lifetime` (plus a
    // scheduling slack) after Redis debited it.
    let slack = Duration::from_millis(15);
    for window in [0, 5, 20, 100, 500].map(Duration::from_millis) {
        let bound = BURST as f64 + RATE as f64 * (window + lifetime + slack).as_secs_f64();
        let mut j = 0;
        for i in 0..t.len() {
            while t[i] - t[j] > window {
                j += 1;
            }
            let n = (i - j + 1) as f64;
            assert!(
                n <= bound,
                "{n} admissions within {window:?} (bound {bound})"
            );
        }
    }
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
    let leased = hot_key_calls_per_admission(&server.url(), Some(Leases::new(256))).await;
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
