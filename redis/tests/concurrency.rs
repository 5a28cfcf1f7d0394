//! Two limiters (separate connections) × many tasks on one key, with a rate that cannot refill
//! during the test: exactly the burst is admitted in total.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::RedisLimiter;
use tollgate_testkit::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_admit_exactly_the_burst() {
    let Some(server) = RedisServer::start("concurrency::two_limiters_admit_exactly_the_burst")
    else {
        return;
    };
    const BURST: u64 = 500;
    // One token per hour: nothing refills during the test.
    let quota = Quota::new(1, Duration::from_secs(3600), BURST).unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    let mut limiters = Vec::new();
    for _ in 0..2 {
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        limiters.push(l.clone());
        for _ in 0..32 {
            let (l, admitted) = (l.clone(), admitted.clone());
            tasks.spawn(async move {
                // 40 decisions per task: 2 × 32 × 40 = 2560 attempts for 500 tokens.
                for _ in 0..40 {
                    if l.check("hot", 1).await.unwrap().is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), BURST);
    let (_, s) = limiters[0].check_snapshot("hot", 0).await.unwrap();
    assert_eq!(s.remaining(), 0);
    for l in &limiters {
        let c = l.counters();
        assert_eq!(c.errors, 0);
        assert!(c.redis >= 32 * 40);
    }
}
