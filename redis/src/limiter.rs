//! [`RedisLimiter`] and its builder: the decision path, the unavailability policy, counters.

use crate::conn::Conn;
use crate::lease::{Leases, Table};
use crate::script::{Decision, Params, SOURCE};
use crate::Error;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tollgate::{Denied, KeyedLimiter, Quota, Snapshot};

/// The wait a fail-closed refusal carries: short, so that clients come back soon after Redis
/// does (an HTTP `Retry-After` of 1 second).
pub const FAIL_CLOSED_RETRY: Duration = Duration::from_secs(1);

/// What [`RedisLimiter::try_acquire`] does when Redis cannot decide (connection refused or
/// broken, timeout, server busy, too many decisions in flight).
///
/// ```
/// use tollgate_redis::OnUnavailable;
/// let p = OnUnavailable::LocalFallback { fraction: 0.25, max_keys: 10_000 };
/// assert_ne!(p, OnUnavailable::FailClosed);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OnUnavailable {
    /// Refuse with `Denied::RetryAfter(`[`FAIL_CLOSED_RETRY`]`)` (the default).
    FailClosed,
    /// Admit.
    FailOpen,
    /// Decide in a local in-process [`tollgate::KeyedLimiter`] (at most `max_keys` keys) whose
    /// quota per key is `fraction` (in `(0, 1]`) of the Redis quota: the rate scaled exactly by
    /// lengthening the period (rounded toward slower), the burst rounded down (at least 1). With
    /// `N` processes, `fraction = 1/N` keeps the total near the global limit.
    LocalFallback {
        /// This process's share of each key's quota.
        fraction: f64,
        /// The local table's bound on keys.
        max_keys: usize,
    },
}

/// How many decisions took each path (since the limiter was built; shared by clones).
///
/// `redis + leased + lease_denied` decisions were made by the Redis bucket (directly, or from
/// what a lease refill learned); `fail_open + fail_closed + local_fallback` decisions applied the policy after an
/// error (`errors` counts every error, including those [`RedisLimiter::check`] returned).
///
/// ```
/// let c = tollgate_redis::Counters::default();
/// assert_eq!(c.redis + c.redis_calls, 0);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Decisions made by one script call (admitted or refused).
    pub redis: u64,
    /// Admissions served from a local lease.
    pub leased: u64,
    /// Refusals decided locally in lease mode: a refill of this key was refused with a wait that
    /// has not passed yet, for the same or a smaller cost.
    pub lease_denied: u64,
    /// Admitted by [`OnUnavailable::FailOpen`].
    pub fail_open: u64,
    /// Refused by [`OnUnavailable::FailClosed`].
    pub fail_closed: u64,
    /// Decided by [`OnUnavailable::LocalFallback`].
    pub local_fallback: u64,
    /// Decisions that failed with an [`Error`].
    pub errors: u64,
    /// Script calls sent to Redis (round trips, including lease refills and probes).
    pub redis_calls: u64,
}

/// What decided a [`RedisLimiter::try_acquire_outcome`] call, and how: the verdict, the
/// bucket's [`Snapshot`] after it, and the quota of the bucket that decided — the key's Redis
/// quota, or the local fallback's share of it when [`OnUnavailable::LocalFallback`] decided.
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

#[derive(Debug, Default)]
struct Stats {
    redis: AtomicU64,
    leased: AtomicU64,
    lease_denied: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    local_fallback: AtomicU64,
    errors: AtomicU64,
    redis_calls: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// After a connection failure or timeout, only one probe decision per interval goes to Redis;
/// the others fail at once (so nothing queues behind a dead or stopped server).
#[derive(Debug)]
struct Breaker {
    start: Instant,
    down: AtomicBool,
    probing: AtomicBool,
    last_probe: AtomicU64,
    interval: Duration,
}

enum Pass {
    Normal,
    Probe,
}

impl Breaker {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn pass(&self) -> Option<Pass> {
        if !self.down.load(Ordering::Acquire) {
            return Some(Pass::Normal);
        }
        let now = self.now();
        // Saturating: an interval past u64::MAX ns (`Duration::MAX`) means "never probe again".
        let due = self
            .last_probe
            .load(Ordering::Acquire)
            .saturating_add(u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX));
        if now >= due
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.last_probe.store(now, Ordering::Release);
            return Some(Pass::Probe);
        }
        None
    }

    /// Gives a pass back unused (the state is unchanged).
    fn release(&self, pass: Pass) {
        if let Pass::Probe = pass {
            self.probing.store(false, Ordering::Release);
        }
    }

    fn done(&self, pass: Pass, unavailable: bool) {
        if unavailable {
            if !self.down.swap(true, Ordering::AcqRel) {
                self.last_probe.store(self.now(), Ordering::Release);
            }
        } else {
            self.down.store(false, Ordering::Release);
        }
        if let Pass::Probe = pass {
            self.probing.store(false, Ordering::Release);
        }
    }
}

/// Builds a [`RedisLimiter`]: see [`RedisLimiter::builder`].
pub struct RedisLimiterBuilder {
    url: String,
    quota: Quota,
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    on_unavailable: OnUnavailable,
    per_key: Vec<(String, Quota)>,
    leases: Option<Leases>,
    max_in_flight: usize,
    probe_interval: Duration,
}

impl fmt::Debug for RedisLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("quota", &self.quota)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("on_unavailable", &self.on_unavailable)
            .field("leases", &self.leases)
            .finish_non_exhaustive()
    }
}

impl RedisLimiterBuilder {
    /// The prefix of every Redis key (default `"tollgate:"`). It must not contain `{` or `}`, so
    /// that a hash tag in the user's key (`"user:{42}"`) decides the cluster slot.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .prefix("myapp:rl:")
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// The most one decision may take, round trip included (default 25 ms). Past it the
    /// decision fails with [`Error::Timeout`] (and `try_acquire` applies the policy).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .timeout(Duration::from_millis(10))
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn timeout(mut self, t: std::time::Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The policy when Redis cannot decide (default [`OnUnavailable::FailClosed`]).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .on_unavailable(OnUnavailable::LocalFallback { fraction: 0.25, max_keys: 10_000 })
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn on_unavailable(mut self, p: OnUnavailable) -> Self {
        self.on_unavailable = p;
        self
    }

    /// How long [`build`](Self::build) may take to connect (default 2 s).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .connect_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// A quota for one key instead of the default (checked at `build`). A key's stored state
    /// is tagged with its quota: after a quota change the key starts full (at most one extra
    /// burst).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .quota_for("tenant:{vip}", Quota::per_second(1000).unwrap())
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn quota_for(mut self, key: &str, quota: Quota) -> Self {
        self.per_key.push((key.to_owned(), quota));
        self
    }

    /// Serve decisions from tokens leased ahead of time (see [`Leases`] for the bound and the
    /// cost). Off by default.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .leases(Leases::new(64).lifetime(Duration::from_millis(50)))
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn leases(mut self, leases: Leases) -> Self {
        self.leases = Some(leases);
        self
    }

    /// The most decisions waiting for Redis at once (default 4096); more fail at once with
    /// [`Error::Overloaded`].
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .max_in_flight(1024)
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// After a failure, how often one probe decision is sent to Redis (default 100 ms). An
    /// interval beyond `u64::MAX` nanoseconds (about 584 years, e.g. `Duration::MAX`) never
    /// probes: after the first failure every decision takes the [`OnUnavailable`] policy.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .probe_interval(Duration::from_millis(250))
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn probe_interval(mut self, t: Duration) -> Self {
        self.probe_interval = t;
        self
    }

    /// Checks the configuration, connects, loads the script and checks that the server runs
    /// it exactly (a round trip of `2^53 − 1`).
    ///
    /// Errors: [`Error::Config`] for a quota outside the script's exact range (see the crate
    /// docs), a bad prefix, fraction or lease setting; [`Error::Url`], [`Error::Connect`],
    /// [`Error::Timeout`] or [`Error::Server`] when the server cannot be used.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate_redis::{Leases, OnUnavailable, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        if self.prefix.contains(['{', '}']) {
            return Err(Error::Config(format!(
                "the prefix {:?} contains a brace; it would override the keys' hash tags",
                self.prefix
            )));
        }
        if self.timeout.is_zero() || self.max_in_flight == 0 {
            return Err(Error::Config(
                "the timeout and max_in_flight must be non-zero".into(),
            ));
        }
        let default = Params::new(self.quota)?;
        let mut per_key = HashMap::new();
        for (k, q) in &self.per_key {
            per_key.insert(k.clone(), Params::new(*q)?);
        }
        let policy = match self.on_unavailable {
            OnUnavailable::FailClosed => Policy::FailClosed,
            OnUnavailable::FailOpen => Policy::FailOpen,
            OnUnavailable::LocalFallback { fraction, max_keys } => {
                let share = |q: Quota| local_share(q, fraction);
                let mut b = KeyedLimiter::builder(share(self.quota)?, max_keys, Default::default());
                for (k, q) in &self.per_key {
                    b = b.quota_for(k.clone(), share(*q)?);
                }
                Policy::Local(Box::new(
                    b.build().map_err(|e| Error::Config(e.to_string()))?,
                ))
            }
        };
        if let Some(l) = &self.leases {
            l.validate()?;
        }
        let conn = Conn::connect(&self.url, self.connect_timeout).await?;
        let script = redis::Script::new(SOURCE);
        // Loads the script (EVALSHA falls back to loading it) and checks the number path.
        let probe = format!("{}{{check}}", self.prefix);
        let big = "9007199254740991";
        let echo = tokio::time::timeout(
            self.connect_timeout,
            conn.eval(&script, &probe, &["echo", "", big, "100000000"]),
        )
        .await
        .map_err(|_| Error::Timeout(self.connect_timeout))?
        .map_err(Error::from_redis)?;
        if echo != [big, "100000000"] {
            return Err(Error::Reply(format!(
                "the server's Lua does not hold 2^53 - 1 exactly: {echo:?}"
            )));
        }
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                conn,
                script,
                prefix: self.prefix,
                timeout: self.timeout,
                policy,
                default,
                per_key,
                stats: Stats::default(),
                breaker: Breaker {
                    start: Instant::now(),
                    down: AtomicBool::new(false),
                    probing: AtomicBool::new(false),
                    last_probe: AtomicU64::new(0),
                    interval: self.probe_interval,
                },
                in_flight: Semaphore::new(self.max_in_flight.min(Semaphore::MAX_PERMITS)),
                leases: self.leases.map(Table::new),
            }),
        })
    }
}

/// `fraction` of `q`: the period lengthened by `1 / fraction` (rounded up), the burst scaled
/// down (at least 1).
fn local_share(q: Quota, fraction: f64) -> Result<Quota, Error> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(Error::Config(format!(
            "the local fallback fraction {fraction} is not in (0, 1]"
        )));
    }
    let per = (q.per().as_nanos() as f64 / fraction).ceil();
    let per = Duration::from_nanos(if per >= u64::MAX as f64 {
        u64::MAX
    } else {
        per as u64
    });
    let burst = ((q.burst() as f64 * fraction).floor() as u64).max(1);
    Quota::new(q.tokens(), per, burst).map_err(|e| Error::Config(e.to_string()))
}

enum Policy {
    FailClosed,
    FailOpen,
    Local(Box<KeyedLimiter<String>>),
}

struct Inner {
    conn: Conn,
    script: redis::Script,
    prefix: String,
    timeout: Duration,
    policy: Policy,
    default: Params,
    per_key: HashMap<String, Params>,
    stats: Stats,
    breaker: Breaker,
    in_flight: Semaphore,
    leases: Option<Table>,
}

/// A GCRA rate limiter whose buckets live in Redis, shared by every process that uses the same
/// server, prefix and keys. `Send + Sync + Clone`; clones share the connection, counters and
/// leases. See the crate docs for the exactness, range and policies.
#[derive(Clone)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
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
    /// A builder for `quota` per key on the server at `url` (`redis://host:port`, or
    /// `redis+cluster://host1:port1,host2:port2` for a cluster).
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// assert_eq!(limiter.quota_for("any").tokens(), 100);
    /// # Ok(()) }
    /// ```
    pub fn builder(url: &str, quota: tollgate::Quota) -> RedisLimiterBuilder {
        RedisLimiterBuilder {
            url: url.to_owned(),
            quota,
            prefix: "tollgate:".to_owned(),
            timeout: Duration::from_millis(25),
            connect_timeout: Duration::from_secs(2),
            on_unavailable: OnUnavailable::FailClosed,
            per_key: Vec::new(),
            leases: None,
            max_in_flight: 4096,
            probe_interval: Duration::from_millis(100),
        }
    }

    /// Takes `cost` tokens from `key`'s bucket, applying the [`OnUnavailable`] policy when Redis
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
        let s = &self.inner.stats;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            redis: l(&s.redis),
            leased: l(&s.leased),
            lease_denied: l(&s.lease_denied),
            fail_open: l(&s.fail_open),
            fail_closed: l(&s.fail_closed),
            local_fallback: l(&s.local_fallback),
            errors: l(&s.errors),
            redis_calls: l(&s.redis_calls),
        }
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
                Outcome {
                    verdict: Err(Denied::RetryAfter(FAIL_CLOSED_RETRY)),
                    snapshot: None,
                    quota: None,
                }
            }
            Policy::FailOpen => {
                bump(&s.fail_open);
                Outcome {
                    verdict: Ok(()),
                    snapshot: None,
                    quota: None,
                }
            }
            Policy::Local(k) => {
                bump(&s.local_fallback);
                let (verdict, snapshot) = k.try_acquire_snapshot(key, cost);
                Outcome {
                    verdict,
                    snapshot: Some(snapshot),
                    quota: Some(k.quota_for(key)),
                }
            }
        }
    }

    /// The decision: edge cases, the lease, or one script call; all within the timeout.
    async fn decide(
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
        if r.is_err() {
            bump(&self.inner.stats.errors);
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
            return Ok((d.verdict, Some(d.snapshot)));
        };
        let Some(slot) = table.slot(key) else {
            let d = self.call(key, p, cost, Mode::Acquire, None).await?;
            bump(&self.inner.stats.redis);
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
        let d = self.call(key, p, cost, Mode::Lease(take), None).await?;
        bump(&self.inner.stats.redis);
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
            return Some((Ok(()), Some(self.lease_snapshot(table, slot, p))));
        }
        let wait = table.denied(slot, cost)?;
        bump(&self.inner.stats.lease_denied);
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
        let guard = BreakerGuard {
            breaker: &inner.breaker,
            pass: Some(pass),
        };
        let reply = inner.conn.eval(&inner.script, &full_key, &argv).await;
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

/// Reports the call's outcome to the breaker; a call dropped by the decision timeout counts as
/// unavailable.
struct BreakerGuard<'a> {
    breaker: &'a Breaker,
    pass: Option<Pass>,
}

impl BreakerGuard<'_> {
    fn finish(mut self, unavailable: bool) {
        if let Some(p) = self.pass.take() {
            self.breaker.done(p, unavailable);
        }
    }
}

impl Drop for BreakerGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.pass.take() {
            self.breaker.done(p, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_share_scales_rate_and_burst() {
        let q = Quota::per_second(100).unwrap();
        let s = local_share(q, 0.25).unwrap();
        assert_eq!(
            (s.tokens(), s.per(), s.burst()),
            (100, Duration::from_secs(4), 25)
        );
        let one = local_share(Quota::per_second(3).unwrap(), 0.1).unwrap();
        assert_eq!(one.burst(), 1, "the burst never rounds to zero");
        for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(local_share(q, bad), Err(Error::Config(_))),
                "{bad}"
            );
        }
    }

    fn breaker(interval: Duration) -> Breaker {
        Breaker {
            start: Instant::now(),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            last_probe: AtomicU64::new(0),
            interval,
        }
    }

    #[test]
    fn breaker_lets_one_probe_through_per_interval() {
        let b = breaker(Duration::ZERO);
        assert!(matches!(b.pass(), Some(Pass::Normal)));
        b.done(Pass::Normal, true);
        let probe = b.pass().expect("a probe is due");
        assert!(matches!(probe, Pass::Probe));
        assert!(b.pass().is_none(), "one probe at a time");
        b.release(probe);
        let probe = b.pass().expect("a released probe is due again");
        b.done(probe, false);
        assert!(
            matches!(b.pass(), Some(Pass::Normal)),
            "a successful probe closes it"
        );

        let slow = breaker(Duration::from_secs(3600));
        slow.done(Pass::Normal, true);
        assert!(slow.pass().is_none(), "no probe before the interval");
    }

    /// An interval past `u64::MAX` ns (`Duration::MAX`) saturates: once down, the breaker never
    /// lets a probe through (an unchecked add panicked in debug builds and, wrapped in release,
    /// made every decision a probe).
    #[test]
    fn a_huge_probe_interval_neither_panics_nor_probes() {
        let b = Breaker {
            start: Instant::now() - Duration::from_secs(1),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            last_probe: AtomicU64::new(0),
            interval: Duration::MAX,
        };
        b.done(Pass::Normal, true); // a failure: down, last_probe = now (> 0)
        let r = std::panic::catch_unwind(|| b.pass().is_none());
        assert_eq!(
            r.ok(),
            Some(true),
            "pass() with an interval of Duration::MAX must neither panic nor let a probe through"
        );
    }
}
