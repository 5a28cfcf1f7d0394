//! [`RedisLimiter`]: the decision path (edge cases, the lease, or one script call), within
//! the timeout, through the breaker and the in-flight cap.

use crate::breaker::{Breaker, BreakerGuard};
use crate::conn::Conn;
use crate::counters::{bump, Counters, Stats};
use crate::lease::Table;
use crate::observe::{Observer, Path};
use crate::policy::{Policy, FAIL_CLOSED_RETRY};
use crate::script::{Decision, Params};
use crate::Error;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tollgate::{Denied, Quota, Snapshot};

/// What decided a [`RedisLimiter::try_acquire_outcome`] call, and how: the verdict, the
/// bucket's [`Snapshot`] after it, and the quota of the bucket that decided — the key's Redis
/// quota, or the local fallback's share of it when [`OnUnavailable::LocalFallback`](crate::OnUnavailable::LocalFallback) decided.
/// `snapshot` and `quota` are `None` when no bucket decided (fail open or closed).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Admitted, or why not.
    pub verdict: Result<(), Denied>,
    /// The bucket right after the decision (`None`: no bucket decided).
    pub snapshot: Option<Snapshot>,
    /// The quota of the bucket that decided (`None`: no bucket decided).
    pub quota: Option<Quota>,
}
pub(crate) struct Inner {
    pub(crate) conn: Conn,
    pub(crate) script: redis::Script,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) policy: Policy,
    pub(crate) default: Params,
    pub(crate) per_key: HashMap<String, Params>,
    pub(crate) stats: Stats,
    pub(crate) breaker: Breaker,
    pub(crate) in_flight: Semaphore,
    pub(crate) leases: Option<Table>,
    /// Metrics and tracing (`observe.rs`).
    pub(crate) observe: Observer,
}

/// A GCRA rate limiter whose buckets live in Redis, shared by every process that uses the same
/// server, prefix and keys. `Send + Sync + Clone`; clones share the connection, counters and
/// leases. See the crate docs for the exactness, range and policies.
#[derive(Clone)]
pub struct RedisLimiter {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("conn", &self.inner.conn)
            .field("prefix", &self.inner.prefix)
            .field("quota", &self.inner.default.quota)
            .field("timeout", &self.inner.timeout)
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

/// The script mode and lease maximum of one call.
#[derive(Clone, Copy)]
enum Mode {
    Acquire,
    Lease(u64),
}

impl RedisLimiter {
    /// Takes `cost` tokens from `key`'s bucket, applying the [`OnUnavailable`](crate::OnUnavailable) policy when Redis
    /// cannot decide. Returns within the timeout.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// if let Err(denied) = limiter.try_acquire("tenant:42", 1).await {
    ///     let _retry_after_secs = denied.retry_after_secs();
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, key: &str, cost: u64) -> Result<(), tollgate::Denied> {
        match self.decide(key, cost, false).await {
            Ok((v, _)) => v,
            Err(_) => self.apply_policy(key, cost).verdict,
        }
    }

    /// [`try_acquire`](Self::try_acquire) with the bucket's [`Snapshot`] after the decision;
    /// `None` when no limiter answered (fail open or closed). A snapshot served from a lease
    /// is approximate (see [`check_snapshot`](Self::check_snapshot)).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// let (verdict, snapshot) = limiter.try_acquire_snapshot("tenant:42", 1).await;
    /// # let _ = (verdict, snapshot.map(|s| s.remaining()));
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_snapshot(
        &self,
        key: &str,
        cost: u64,
    ) -> (Result<(), tollgate::Denied>, Option<Snapshot>) {
        let o = self.try_acquire_outcome(key, cost).await;
        (o.verdict, o.snapshot)
    }

    /// [`try_acquire_snapshot`](Self::try_acquire_snapshot), also saying which quota decided
    /// ([`Outcome::quota`]): the key's Redis quota, or the local fallback's share of it while
    /// Redis is unavailable. What `RateLimit-Policy` headers must report, since the fallback's
    /// bucket is smaller than the Redis one.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// let o = limiter.try_acquire_outcome("tenant:42", 1).await;
    /// # let _ = (o.verdict, o.snapshot, o.quota.map(|q| q.burst()));
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_outcome(&self, key: &str, cost: u64) -> Outcome {
        match self.decide(key, cost, true).await {
            Ok((verdict, snapshot)) => Outcome {
                verdict,
                snapshot,
                quota: Some(self.params(key).quota),
            },
            Err(_) => self.apply_policy(key, cost),
        }
    }

    /// Takes `cost` tokens from `key`'s bucket; backend errors surface (no policy applied).
    /// `cost == 0` is admitted without a round trip, `cost > burst` refused with
    /// `Denied::ExceedsBurst` without one.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// match limiter.check("tenant:42", 1).await? {
    ///     Ok(()) => {}
    ///     Err(denied) => println!("{denied}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check(
        &self,
        key: &str,
        cost: u64,
    ) -> Result<Result<(), tollgate::Denied>, crate::Error> {
        self.decide(key, cost, false).await.map(|(v, _)| v)
    }

    /// [`check`](Self::check) with the bucket's [`Snapshot`] right after the decision, computed
    /// by `tollgate::gcra` from the state the script found (one round trip, also for
    /// `cost == 0` and `cost > burst`). When served from a lease, `remaining` is the lease's
    /// tokens plus what Redis held at the last refill and `until_full` the Redis bucket's as of
    /// that refill (an estimate: other processes may have spent since).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// let (verdict, s) = limiter.check_snapshot("tenant:42", 1).await?;
    /// println!("{verdict:?}: {} left, full in {:?}", s.remaining(), s.until_full());
    /// # Ok(()) }
    /// ```
    pub async fn check_snapshot(
        &self,
        key: &str,
        cost: u64,
    ) -> Result<(Result<(), tollgate::Denied>, tollgate::Snapshot), Error> {
        let (v, s) = self.decide(key, cost, true).await?;
        match s {
            Some(s) => Ok((v, s)),
            None => Err(Error::Reply("no snapshot".into())),
        }
    }

    /// The decision counters.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// let c = limiter.counters();
    /// println!("{} decided by Redis, {} errors", c.redis, c.errors);
    /// # Ok(()) }
    /// ```
    pub fn counters(&self) -> Counters {
        self.inner.stats.snapshot()
    }

    /// The quota that applies to `key`.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// assert_eq!(limiter.quota_for("tenant:42").burst(), 100);
    /// # Ok(()) }
    /// ```
    pub fn quota_for(&self, key: &str) -> Quota {
        self.params(key).quota
    }

    fn params(&self, key: &str) -> &Params {
        self.inner.per_key.get(key).unwrap_or(&self.inner.default)
    }

    fn apply_policy(&self, key: &str, cost: u64) -> Outcome {
        let s = &self.inner.stats;
        match &self.inner.policy {
            Policy::FailClosed => {
                bump(&s.fail_closed);
                self.inner.observe.path(Path::FailClosed);
                Outcome {
                    verdict: Err(Denied::RetryAfter(FAIL_CLOSED_RETRY)),
                    snapshot: None,
                    quota: None,
                }
            }
            Policy::FailOpen => {
                bump(&s.fail_open);
                self.inner.observe.path(Path::FailOpen);
                Outcome {
                    verdict: Ok(()),
                    snapshot: None,
                    quota: None,
                }
            }
            Policy::Local(k) => {
                bump(&s.local_fallback);
                self.inner.observe.path(Path::LocalFallback);
                let (verdict, snapshot) = k.try_acquire_snapshot(key, cost);
                self.inner.observe.decided(&verdict);
                Outcome {
                    verdict,
                    snapshot: Some(snapshot),
                    quota: Some(k.quota_for(key)),
                }
            }
        }
    }

    /// [`decide_unobserved`](RedisLimiter::decide_unobserved), its verdict recorded.
    async fn decide(
        &self,
        key: &str,
        cost: u64,
        want_snapshot: bool,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>), Error> {
        let r = self.decide_unobserved(key, cost, want_snapshot).await;
        if let Ok((verdict, _)) = &r {
            self.inner.observe.decided(verdict);
        }
        r
    }

    /// The decision: edge cases, the lease, or one script call; all within the timeout.
    async fn decide_unobserved(
        &self,
        key: &str,
        cost: u64,
        want_snapshot: bool,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>), Error> {
        let p = self.params(key);
        let burst = p.quota.burst();
        if !want_snapshot {
            if cost == 0 {
                return Ok((Ok(()), None));
            }
            if cost > burst {
                return Ok((Err(Denied::ExceedsBurst), None));
            }
        }
        let r = tokio::time::timeout(self.inner.timeout, self.decide_redis(key, cost, p)).await;
        let r = r.unwrap_or(Err(Error::Timeout(self.inner.timeout)));
        if let Err(e) = &r {
            bump(&self.inner.stats.errors);
            self.inner.observe.failed(matches!(e, Error::Timeout(_)));
        }
        r
    }

    async fn decide_redis(
        &self,
        key: &str,
        cost: u64,
        p: &Params,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>), Error> {
        if cost == 0 || cost > p.quota.burst() {
            // A snapshot for an edge case: read the state (cost 0 writes nothing).
            let d = self.call(key, p, 0, Mode::Acquire, None).await?;
            let v = if cost == 0 {
                Ok(())
            } else {
                Err(Denied::ExceedsBurst)
            };
            return Ok((v, Some(d.snapshot)));
        }
        let Some(table) = &self.inner.leases else {
            let d = self.call(key, p, cost, Mode::Acquire, None).await?;
            bump(&self.inner.stats.redis);
            self.inner.observe.path(Path::Redis);
            return Ok((d.verdict, Some(d.snapshot)));
        };
        let Some(slot) = table.slot(key) else {
            let d = self.call(key, p, cost, Mode::Acquire, None).await?;
            bump(&self.inner.stats.redis);
            self.inner.observe.path(Path::Redis);
            return Ok((d.verdict, Some(d.snapshot)));
        };
        if let Some(r) = self.local(table, &slot, p, cost) {
            return Ok(r);
        }
        let _refill = slot.refill.lock().await;
        // Another task may have refilled (or been refused) while this one waited.
        if let Some(r) = self.local(table, &slot, p, cost) {
            return Ok(r);
        }
        let take = table.next_take(cost);
        let sent = table.now();
        self.inner.observe.refill();
        let d = self.call(key, p, cost, Mode::Lease(take), None).await?;
        bump(&self.inner.stats.redis);
        self.inner.observe.path(Path::Redis);
        match d.verdict {
            Ok(()) => {
                let take = crate::lease::Take {
                    state: d.state,
                    tokens: d.taken - cost,
                    server_ns: d.now_ns,
                    sent,
                };
                table.deposit(&slot, &p.quota, take, d.snapshot);
                Ok((Ok(()), Some(self.lease_snapshot(table, &slot, p))))
            }
            Err(Denied::RetryAfter(wait)) => {
                table.deny(&slot, cost, wait, d.snapshot);
                Ok((d.verdict, Some(d.snapshot)))
            }
            Err(_) => Ok((d.verdict, Some(d.snapshot))),
        }
    }

    /// A decision from the key's lease alone: its tokens, or a recent refusal's wait.
    fn local(
        &self,
        table: &Table,
        slot: &crate::lease::Slot,
        p: &Params,
        cost: u64,
    ) -> Option<(Result<(), Denied>, Option<Snapshot>)> {
        if table.take_local(slot, &p.quota, cost) {
            bump(&self.inner.stats.leased);
            self.inner.observe.path(Path::Lease);
            return Some((Ok(()), Some(self.lease_snapshot(table, slot, p))));
        }
        let wait = table.denied(slot, cost)?;
        bump(&self.inner.stats.lease_denied);
        self.inner.observe.path(Path::LeaseDenied);
        Some((
            Err(Denied::RetryAfter(wait)),
            Some(self.lease_snapshot(table, slot, p)),
        ))
    }

    fn lease_snapshot(&self, table: &Table, slot: &crate::lease::Slot, p: &Params) -> Snapshot {
        let local = table.local_available(slot, &p.quota);
        let last = *slot.last.lock().unwrap_or_else(|e| e.into_inner());
        match last {
            Some((s, at)) => Snapshot::new(
                s.remaining().saturating_add(local).min(p.quota.burst()),
                s.until_full().saturating_sub(at.elapsed()),
            ),
            None => Snapshot::new(local, Duration::ZERO),
        }
    }

    /// One script call through the breaker and the in-flight cap.
    async fn call(
        &self,
        key: &str,
        p: &Params,
        cost: u64,
        mode: Mode,
        test_now_us: Option<u64>,
    ) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let pass = inner.breaker.pass().ok_or(Error::Unavailable)?;
        let Ok(_permit) = inner.in_flight.try_acquire() else {
            // Nothing was learned about the server.
            inner.breaker.release(pass);
            return Err(Error::Overloaded);
        };
        let (mode_s, lease_max) = match mode {
            Mode::Acquire => ("acquire", 0),
            Mode::Lease(l) => ("lease", l),
        };
        let args = p.args(cost, lease_max, test_now_us);
        let mut argv: Vec<&str> = Vec::with_capacity(10);
        argv.push(mode_s);
        argv.extend(args.iter().map(String::as_str));
        let full_key = format!("{}{}", inner.prefix, key);
        bump(&inner.stats.redis_calls);
        // The breaker must learn about a timeout too: mark it down unless the call finishes.
        let guard = BreakerGuard::new(&inner.breaker, pass, &inner.observe);
        let started = inner.observe.start();
        let reply = inner.conn.eval(&inner.script, &full_key, &argv).await;
        inner.observe.round_trip(started, reply.is_ok());
        let unavailable = match &reply {
            Ok(_) => false,
            Err(e) => {
                e.is_connection_refusal()
                    || e.is_connection_dropped()
                    || e.is_io_error()
                    || e.is_timeout()
                    || e.is_unrecoverable_error()
            }
        };
        guard.finish(unavailable);
        let reply = reply.map_err(Error::from_redis)?;
        p.decode(&reply, cost)
    }

    /// The decision at a given server time (microseconds since the Unix epoch) instead of
    /// `TIME`: for the differential test against `tollgate::gcra` only. Keys written this way
    /// never expire.
    #[cfg(feature = "test-support")]
    pub async fn check_at(
        &self,
        key: &str,
        cost: u64,
        now_us: u64,
    ) -> Result<(Result<(), Denied>, Snapshot, u64), Error> {
        let p = self.params(key);
        if cost > p.quota.burst() {
            let d = self.call(key, p, 0, Mode::Acquire, Some(now_us)).await?;
            return Ok((Err(Denied::ExceedsBurst), d.snapshot, d.now_ns));
        }
        let d = self.call(key, p, cost, Mode::Acquire, Some(now_us)).await?;
        Ok((d.verdict, d.snapshot, d.now_ns))
    }

    /// The key's absolute `tollgate::gcra` state as the script reads it at a given server time
    /// (a state written under another quota converted into this key's quota), without writing
    /// anything: for the quota-change tests only.
    #[cfg(feature = "test-support")]
    pub async fn state_at(&self, key: &str, now_us: u64) -> Result<u64, Error> {
        let p = self.params(key);
        Ok(self
            .call(key, p, 0, Mode::Acquire, Some(now_us))
            .await?
            .state)
    }

    /// The lease script ("take at most `max` tokens, at least `cost`") at a given server time:
    /// for the differential test only. Returns the verdict for `cost`, the tokens taken and
    /// the snapshot after the take.
    #[cfg(feature = "test-support")]
    pub async fn lease_at(
        &self,
        key: &str,
        cost: u64,
        max: u64,
        now_us: u64,
    ) -> Result<(Result<(), Denied>, u64, Snapshot), Error> {
        let p = self.params(key);
        if cost == 0 || cost > p.quota.burst() || max < cost {
            return Err(Error::Config(
                "lease_at needs 1 <= cost <= burst, max".into(),
            ));
        }
        let d = self
            .call(key, p, cost, Mode::Lease(max), Some(now_us))
            .await?;
        Ok((d.verdict, d.taken, d.snapshot))
    }

    /// Sends `numbers` through the script and back (test support: the number path).
    #[cfg(feature = "test-support")]
    pub async fn echo(&self, numbers: &[u64]) -> Result<Vec<String>, Error> {
        let nums: Vec<String> = numbers.iter().map(u64::to_string).collect();
        let mut argv = vec!["echo", ""];
        argv.extend(nums.iter().map(String::as_str));
        self.inner
            .conn
            .eval(
                &self.inner.script,
                &format!("{}echo", self.inner.prefix),
                &argv,
            )
            .await
            .map_err(Error::from_redis)
    }
}
