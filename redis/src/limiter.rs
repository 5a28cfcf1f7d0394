//! [`RedisLimiter`]: the decision path (edge cases, the lease, or one script call), within
//! the timeout, through the breaker and the in-flight cap.

use crate::breaker::{Breaker, BreakerGuard, Pass};
use crate::conn::Arg;
use crate::conn::Conn;
use crate::counters::{bump, Counters, Stats};
use crate::key::stored_key;
use crate::lease::Table;
use crate::limits::{LimitsDecision, LimitsParams};
use crate::observe::{Observer, Path};
use crate::policy::MALFORMED_RETRY;
use crate::policy::{Policy, FAIL_CLOSED_RETRY};
use crate::script::{Decision, Params};
use crate::Error;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;
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
    pub(crate) script: crate::conn::Lua,
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
    /// The policy of several quotas for keys without a quota of their own.
    pub(crate) limits: Option<LimitsParams>,
}

impl Inner {
    /// The instant a decision starting now must be answered by: the timeout later, or, for a
    /// timeout too long to add to the clock (`Duration::MAX`), thirty years later (no timeout
    /// of its own).
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline_times(1)
    }

    /// [`deadline`](Self::deadline) for a call worth `n` decisions: `n` timeouts later
    /// (saturating).
    pub(crate) fn deadline_times(&self, n: u32) -> Instant {
        const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
        let budget = self.timeout.checked_mul(n).unwrap_or(Duration::MAX);
        let now = Instant::now();
        now.checked_add(budget)
            .or_else(|| now.checked_add(FAR))
            .unwrap_or(now)
    }
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
pub(crate) enum Mode {
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
            Ok((v, _, _)) => v,
            Err(e) => self.on_error(key, cost, &e).verdict,
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
            Ok((verdict, snapshot, quota)) => Outcome {
                verdict,
                snapshot,
                quota: Some(quota),
            },
            Err(e) => self.on_error(key, cost, &e),
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
        self.decide(key, cost, false).await.map(|(v, _, _)| v)
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
        let (v, s, _) = self.decide(key, cost, true).await?;
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

    /// The policy that applies to `key`: its [`quota_for`](crate::RedisLimiterBuilder::quota_for)
    /// quota, else the builder's [`limits`](crate::RedisLimiterBuilder::limits), else its
    /// quota. ([`quota_for`](Self::quota_for) returns a policy's first quota.)
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// assert_eq!(limiter.limits_for("tenant:42").quotas().len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn limits_for(&self, key: &str) -> tollgate::Limits {
        match self.limits_of(key) {
            Some(m) => m.limits.clone(),
            None => tollgate::Limits::from(self.params(key).quota),
        }
    }

    pub(crate) fn params(&self, key: &str) -> &Params {
        self.inner.per_key.get(key).unwrap_or(&self.inner.default)
    }

    /// The name `key` is stored under in Redis (after the prefix), the lease table and the
    /// local fallback: bounded bytes (see [`stored_key`]).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// assert_eq!(limiter.redis_key("tenant:42"), "tollgate:tenant:42");
    /// assert_eq!(limiter.redis_key(&"x".repeat(1000)).len(), "tollgate:".len() + 65);
    /// # Ok(()) }
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{}", self.inner.prefix, stored_key(key))
    }

    /// What `try_acquire` answers after an error: a per-key fault refuses that key alone
    /// (the server is fine: no policy applies); anything else applies the policy.
    fn on_error(&self, key: &str, cost: u64, e: &Error) -> Outcome {
        // The edges need no bucket: answered as without the error, whatever the policy (a fail
        // open must not admit a cost no state could hold, nor a fail closed name a wait for it).
        if let Some((verdict, quota)) = self.edge(key, cost) {
            return Outcome {
                verdict,
                snapshot: None,
                quota: Some(quota),
            };
        }
        if let Error::Malformed { .. } = e {
            bump(&self.inner.stats.malformed);
            return Outcome {
                verdict: Err(Denied::RetryAfter(MALFORMED_RETRY)),
                snapshot: None,
                quota: None,
            };
        }
        self.apply_policy(key, cost)
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
                // The fallback's table holds bounded names too (its per-key quotas are keyed
                // by them).
                let name = stored_key(key).into_owned();
                let (verdict, snapshots) = tollgate::Limiter::decide_snapshots(&**k, &name, cost);
                // A cost above the share's burst is within the key's (the edges are answered
                // before the policy): it can be held once Redis is back, so it is refused as a
                // fail closed refuses, not for good.
                let verdict = match verdict.map_err(Denied::from) {
                    Err(Denied::ExceedsBurst) => Err(Denied::RetryAfter(FAIL_CLOSED_RETRY)),
                    v => v,
                };
                self.inner.observe.decided(&verdict);
                Outcome {
                    verdict,
                    snapshot: Some(snapshots.tightest().1),
                    quota: Some(k.quota_for(&*name)),
                }
            }
        }
    }

    /// The verdict for the costs that need no bucket, with the quota it is reported under:
    /// 0 is admitted, a cost above the burst (a policy's smallest) refused for good; `None`
    /// for the rest.
    fn edge(&self, key: &str, cost: u64) -> Option<(Result<(), Denied>, Quota)> {
        let (burst, quota) = match self.limits_of(key) {
            Some(m) => (m.min_burst(), m.limits.quotas()[0]),
            None => {
                let q = self.params(key).quota;
                (q.burst(), q)
            }
        };
        if cost == 0 {
            Some((Ok(()), quota))
        } else if cost > burst {
            Some((Err(Denied::ExceedsBurst), quota))
        } else {
            None
        }
    }

    /// The decision: edge cases, the lease, or one script call; all within the timeout.
    /// Also returns the quota that decided (a policy's tightest).
    async fn decide(
        &self,
        key: &str,
        cost: u64,
        want_snapshot: bool,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>, Quota), Error> {
        let r = self.decide_unobserved(key, cost, want_snapshot).await;
        match &r {
            Ok((verdict, _, _)) => self.inner.observe.decided(verdict),
            Err(e) => self.inner.observe.failed(matches!(e, Error::Timeout(_))),
        }
        r
    }

    /// [`decide`](RedisLimiter::decide) before its verdict is recorded.
    async fn decide_unobserved(
        &self,
        key: &str,
        cost: u64,
        want_snapshot: bool,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>, Quota), Error> {
        if !want_snapshot {
            if let Some((verdict, quota)) = self.edge(key, cost) {
                return Ok((verdict, None, quota));
            }
        }
        if let Some(m) = self.limits_of(key) {
            let deadline = self.inner.deadline();
            let r = self
                .decide_limits(&stored_key(key), cost, m, None, deadline)
                .await
                .map(|d| (d.verdict, Some(d.snapshot), d.quota));
            if r.is_err() {
                bump(&self.inner.stats.errors);
            }
            return r;
        }
        let p = self.params(key);
        let quota = p.quota;
        // One deadline for the whole decision: the refill lock's wait and the script call.
        let deadline = self.inner.deadline();
        let r = self.decide_redis(&stored_key(key), cost, p, deadline).await;
        if r.is_err() {
            bump(&self.inner.stats.errors);
        }
        r.map(|(v, s)| (v, s, quota))
    }

    /// The policy of several quotas that applies to `key`, if any (a key with a quota of its
    /// own has one quota).
    pub(crate) fn limits_of(&self, key: &str) -> Option<&LimitsParams> {
        let m = self.inner.limits.as_ref()?;
        (!self.inner.per_key.contains_key(key)).then_some(m)
    }

    /// One script call deciding every quota of a policy on the stored name `name` (a cost of 0
    /// or above the smallest burst reads, for a snapshot), through the breaker and the cap.
    pub(crate) async fn decide_limits(
        &self,
        name: &str,
        cost: u64,
        m: &LimitsParams,
        test_now_us: Option<u64>,
        deadline: Instant,
    ) -> Result<LimitsDecision, Error> {
        let send = if cost > m.min_burst() { 0 } else { cost };
        let args = m.args(send, test_now_us);
        let argv: Vec<Arg<'_>> = args.iter().map(|s| Arg::Str(s)).collect();
        let reply = self.eval_checked(name, &argv, deadline).await?;
        let reply: Vec<String> = redis::FromRedisValue::from_redis_value(reply)
            .map_err(|e| Error::Reply(format!("a policy's reply: {e}")))?;
        let mut d = m.decode(&reply, send)?;
        if cost > m.min_burst() {
            d.verdict = Err(Denied::ExceedsBurst);
        }
        if test_now_us.is_none() && cost == send && cost > 0 {
            bump(&self.inner.stats.redis);
            self.inner.observe.path(Path::Redis);
        }
        Ok(d)
    }

    /// One decision by the script on the word, no lease: the verdict and the snapshot (`name`:
    /// the key's stored name).
    async fn decide_direct(
        &self,
        name: &str,
        p: &Params,
        cost: u64,
        deadline: Instant,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>), Error> {
        let d = self
            .call(name, p, cost, Mode::Acquire, None, deadline)
            .await?;
        bump(&self.inner.stats.redis);
        self.inner.observe.path(Path::Redis);
        Ok((d.verdict, Some(d.snapshot)))
    }

    /// `name` is the key's stored name ([`stored_key`]).
    async fn decide_redis(
        &self,
        name: &str,
        cost: u64,
        p: &Params,
        deadline: Instant,
    ) -> Result<(Result<(), Denied>, Option<Snapshot>), Error> {
        if cost == 0 || cost > p.quota.burst() {
            // A snapshot for an edge case: read the state (cost 0 writes nothing).
            let d = self.call(name, p, 0, Mode::Acquire, None, deadline).await?;
            let v = if cost == 0 {
                Ok(())
            } else {
                Err(Denied::ExceedsBurst)
            };
            return Ok((v, Some(d.snapshot)));
        }
        let Some(table) = &self.inner.leases else {
            return self.decide_direct(name, p, cost, deadline).await;
        };
        let Some(slot) = table.slot(name) else {
            return self.decide_direct(name, p, cost, deadline).await;
        };
        if let Some(r) = self.local(table, &slot, p, cost) {
            return Ok(r);
        }
        // Another task's refill is in flight: wait for it up to half this decision's time, then
        // decide from the word directly with the other half, so that no call is left without
        // its share of the time. A waiter that took the lock with whatever was left, possibly
        // nothing, would time out behind the others on one key and open the breaker against a
        // healthy server.
        let half = self.inner.timeout / 2;
        let lock_by = deadline.checked_sub(half).unwrap_or(deadline);
        let Ok(_refill) = tokio::time::timeout_at(lock_by, slot.refill.lock()).await else {
            return self.decide_direct(name, p, cost, deadline).await;
        };
        // Another task may have refilled (or been refused) while this one waited.
        if let Some(r) = self.local(table, &slot, p, cost) {
            return Ok(r);
        }
        let take = table.next_take(cost);
        let sent = table.now();
        let d = self
            .call(name, p, cost, Mode::Lease(take), None, deadline)
            .await;
        // A refill refused before it was sent (the breaker, the in-flight cap) is not one.
        if !matches!(d, Err(Error::Unavailable | Error::Overloaded)) {
            self.inner.observe.refill();
        }
        let d = d?;
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
                table.deposit(&slot, &p.model, take, d.snapshot);
                Ok((Ok(()), Some(self.lease_snapshot(table, &slot, p))))
            }
            Err(Denied::RetryAfter(wait)) => {
                table.deny(&slot, cost, wait, sent, d.snapshot);
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
        if table.take_local(slot, &p.model, cost) {
            bump(&self.inner.stats.leased);
            self.inner.observe.path(Path::Lease);
            return Some((Ok(()), Some(self.lease_snapshot(table, slot, p))));
        }
        let wait = table.denied(slot, &p.model, cost)?;
        bump(&self.inner.stats.lease_denied);
        self.inner.observe.path(Path::LeaseDenied);
        Some((
            Err(Denied::RetryAfter(wait)),
            Some(self.lease_snapshot(table, slot, p)),
        ))
    }

    fn lease_snapshot(&self, table: &Table, slot: &crate::lease::Slot, p: &Params) -> Snapshot {
        let local = table.local_available(slot, &p.model);
        let last = *slot.last.lock().unwrap_or_else(|e| e.into_inner());
        match last {
            Some((s, at)) => Snapshot::new(
                s.remaining().saturating_add(local).min(p.quota.burst()),
                s.until_full().saturating_sub(at.elapsed()),
            ),
            None => Snapshot::new(local, Duration::ZERO),
        }
    }

    /// One script call on the stored name `name`, through the breaker and the in-flight cap,
    /// answered by `deadline`.
    ///
    /// Only the call's own evidence moves the breaker: its reply (a connection error or a
    /// server error opens it, a reply closes it) or its deadline passing while it waits. A
    /// call dropped by its caller reports nothing: its pass and in-flight slot are given back
    /// unused, and other callers see no change.
    pub(crate) async fn call(
        &self,
        name: &str,
        p: &Params,
        cost: u64,
        mode: Mode,
        test_now_us: Option<u64>,
        deadline: Instant,
    ) -> Result<Decision, Error> {
        let (mode_s, lease_max) = match mode {
            Mode::Acquire => ("acquire", 0),
            Mode::Lease(l) => ("lease", l),
        };
        // The quota's arguments were formatted at build; the call's integers are formatted
        // into the command buffer. The script's optional trailing arguments: the lease maximum
        // (read in mode `lease` only) and a test time.
        let [tag, a, b, bu, scale] = p.quota_strs();
        let mut argv = [
            Arg::Str(mode_s),
            Arg::Str(tag),
            Arg::Str(a),
            Arg::Str(b),
            Arg::Str(bu),
            Arg::Str(scale),
            Arg::Int(cost),
            Arg::Int(lease_max),
            Arg::Int(0),
        ];
        let len = match (mode, test_now_us) {
            (Mode::Acquire, None) => 7,
            (Mode::Lease(_), None) => 8,
            (_, Some(t)) => {
                argv[8] = Arg::Int(t);
                9
            }
        };
        let reply = self.eval_checked(name, &argv[..len], deadline).await?;
        match &reply {
            redis::Value::BulkString(b) => match std::str::from_utf8(b) {
                Ok(s) => p.decode(s, cost),
                Err(_) => Err(Error::Reply(format!(
                    "a reply that is not UTF-8: {reply:?}"
                ))),
            },
            _ => Err(Error::Reply(format!("expected one string, got {reply:?}"))),
        }
    }

    /// One script call with `argv` on the stored name `name`: through the breaker and the
    /// in-flight cap, answered by `deadline` (see [`call`](Self::call)); a malformed value is
    /// [`Error::Malformed`].
    async fn eval_checked(
        &self,
        name: &str,
        argv: &[Arg<'_>],
        deadline: Instant,
    ) -> Result<redis::Value, Error> {
        let (pass, _permit, left) = self.admit(deadline)?;
        let prefix = &self.inner.prefix;
        let mut full_key = String::with_capacity(prefix.len() + name.len());
        full_key.push_str(prefix);
        full_key.push_str(name);
        self.eval_keys_with(&[&full_key], argv, deadline, pass, left)
            .await
    }

    /// One script call on several prefixed keys (mode `keys`), through the breaker and the
    /// in-flight cap, answered by `deadline`.
    pub(crate) async fn eval_keys_checked(
        &self,
        full_keys: &[&str],
        argv: &[Arg<'_>],
        deadline: Instant,
    ) -> Result<redis::Value, Error> {
        let (pass, _permit, left) = self.admit(deadline)?;
        self.eval_keys_with(full_keys, argv, deadline, pass, left)
            .await
    }

    /// What a script call needs before it is sent: the breaker's pass, an in-flight permit
    /// (held until the call ends) and the time left by `deadline`. A call refused here learned
    /// nothing about the server: its pass is given back unused.
    fn admit(
        &self,
        deadline: Instant,
    ) -> Result<(Pass, tokio::sync::SemaphorePermit<'_>, Duration), Error> {
        let inner = &*self.inner;
        let pass = inner
            .breaker
            .pass(deadline.into_std())
            .ok_or(Error::Unavailable)?;
        let Ok(permit) = inner.in_flight.try_acquire() else {
            inner.breaker.release(pass);
            return Err(Error::Overloaded);
        };
        // The time the call gets: what is left of the decision's, after any wait for another
        // task's refill. A call with none is not sent (its timeout would say nothing about the
        // server: see `eval_keys_with`).
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            inner.breaker.release(pass);
            return Err(Error::Timeout(inner.timeout));
        }
        Ok((pass, permit, left))
    }

    /// The script call on full key names (prefixed), holding `pass` (and the caller's in-flight
    /// permit), `left` of the decision's time remaining: the breaker's evidence, the timeout and
    /// a malformed value's report.
    async fn eval_keys_with(
        &self,
        full_keys: &[&str],
        argv: &[Arg<'_>],
        deadline: Instant,
        pass: Pass,
        left: Duration,
    ) -> Result<redis::Value, Error> {
        let inner = &*self.inner;
        // A call sent with three quarters of the limiter's timeout or less that times out says
        // nothing about the server (the queue took the rest: a call after a lock wait of half
        // the timeout never counts): callers queued behind lease refills must not open the
        // breaker against a healthy server.
        let fair = left > inner.timeout / 4 * 3;
        bump(&inner.stats.redis_calls);
        let guard = BreakerGuard::new(&inner.breaker, pass, &inner.observe);
        let started = inner.observe.start();
        let eval = inner.conn.eval_keys(&inner.script, full_keys, argv);
        let Ok(reply) = tokio::time::timeout_at(deadline, eval).await else {
            // The limiter's own timeout, inside the call: evidence that the server is slow,
            // if the call had its fair share of the time (dropping the guard counts nothing).
            inner.observe.round_trip(started, false);
            if fair {
                guard.finish(true);
            }
            return Err(Error::Timeout(inner.timeout));
        };
        inner.observe.round_trip(started, reply.is_ok());
        guard.finish(reply.is_err());
        let reply = reply.map_err(Error::from_redis)?;
        // A malformed value: {'bad', t, reason}.
        if let redis::Value::Array(items) = &reply {
            let text = |v: Option<&redis::Value>| match v {
                Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            if text(items.first()).as_deref() == Some("bad") {
                // Mode `keys` names the key (1-based) as a fourth item.
                let k = text(items.get(3))
                    .and_then(|k| k.parse::<usize>().ok())
                    .and_then(|k| k.checked_sub(1))
                    .unwrap_or(0);
                return Err(Error::Malformed {
                    key: full_keys.get(k).copied().unwrap_or_default().to_owned(),
                    reason: text(items.get(2)).unwrap_or_default(),
                });
            }
        }
        Ok(reply)
    }
}
