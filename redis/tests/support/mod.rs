//! Helpers shared by the integration tests (one home for each).

#![allow(dead_code)] // each test file uses a part

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::Quota;
use tollgate_redis::RedisLimiter;
use tollgate_testkit::redis_server::RedisServer;

/// A server, and a limiter on it that admits everything a test sends (a million a second)
/// with decisions timing out after 2 s; `None` (the test skipped) without a `redis-server`.
pub(crate) async fn unlimited(test: &str) -> Option<(RedisServer, RedisLimiter)> {
    let server = RedisServer::start(test)?;
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1_000_000).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    Some((server, l))
}

/// What the tasks of a [`Load`] got: decisions admitted, refused, and calls that failed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) admitted: u64,
    pub(crate) refused: u64,
    pub(crate) failed: u64,
}

/// Tasks deciding (`check`, cost 1) on 50 keys (`k0` … `k49`, each task its own order) until
/// stopped, each at most `max_each` times: a server under load while a test does something to
/// it.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<Tally>,
}

impl Load {
    /// Starts `tasks` tasks on `l`.
    pub(crate) fn start(l: &RedisLimiter, tasks: u64, max_each: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut set = tokio::task::JoinSet::new();
        for t in 0..tasks {
            let (l, stop) = (l.clone(), stop.clone());
            set.spawn(async move {
                let mut tally = Tally::default();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && i < max_each {
                    match l.check(&format!("k{}", (t * 7 + i) % 50), 1).await {
                        Ok(Ok(_)) => tally.admitted += 1,
                        Ok(Err(_)) => tally.refused += 1,
                        Err(_) => tally.failed += 1,
                    }
                    i += 1;
                }
                tally
            });
        }
        Load { stop, tasks: set }
    }

    /// Stops the tasks and adds up what they got.
    pub(crate) async fn stop(mut self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut sum = Tally::default();
        while let Some(r) = self.tasks.join_next().await {
            let t = r.unwrap();
            sum.admitted += t.admitted;
            sum.refused += t.refused;
            sum.failed += t.failed;
        }
        sum
    }
}
