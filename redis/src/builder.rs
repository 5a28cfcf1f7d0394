//! [`RedisLimiterBuilder`]: the configuration, checked once at [`build`](RedisLimiterBuilder::build).

use crate::breaker::Breaker;
use crate::conn::{Arg, Conn, Lua};
use crate::counters::Stats;
use crate::key::stored_key;
use crate::lease::{Leases, Table};
use crate::limiter::{Inner, RedisLimiter};
use crate::limits::LimitsParams;
use crate::observe::Observer;
use crate::policy::{local_share, OnUnavailable, Policy};
use crate::script::{Params, SOURCE};
use crate::Error;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tollgate::{KeyedLimiter, Quota};

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
    limits: Option<tollgate::Limits>,
    max_in_flight: usize,
    probe_interval: Duration,
    /// The name metrics and events carry (`name`, in `observe.rs`).
    pub(crate) name: Option<String>,
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
    /// decision fails with [`Error::Timeout`] (and `try_acquire` applies the policy);
    /// `Duration::MAX` sets none (zero is an error at `build`). A
    /// [`decide_keys`](RedisLimiter::decide_keys) call has one for every 32 keys. Keep it
    /// below any timeout the caller wraps decisions in: only this timeout is evidence for the
    /// breaker, so callers that always give up sooner leave it closed against a frozen server,
    /// and every decision is sent and queues there (the README's "When Redis is unavailable").
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

    /// A policy of one to four quotas that must all hold, for every key without a
    /// [`quota_for`](Self::quota_for) of its own (it replaces the builder's quota for them).
    /// All the quotas of a key are decided in **one** round trip (one script call): admitted only
    /// if every quota holds the cost, and then every quota's state is updated at once, or none.
    /// A refusal waits the largest per-quota wait; the snapshot and
    /// [`Outcome::quota`](crate::Outcome::quota) are the tightest quota's (fewest tokens left).
    ///
    /// [`build`](Self::build) refuses a policy of several quotas with [`Leases`] or
    /// [`OnUnavailable::LocalFallback`] ([`Error::Config`]): both hold one quota per key.
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use std::time::Duration;
    /// use tollgate::{Limits, Quota};
    /// use tollgate_redis::RedisLimiter;
    /// let per_second = Quota::per_second(10).unwrap();
    /// let per_day = Quota::new(10_000, Duration::from_secs(86_400), 10_000).unwrap();
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", per_second)
    ///     .limits(Limits::new([per_second, per_day]).unwrap())
    ///     .build()
    ///     .await?;
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub fn limits(mut self, limits: tollgate::Limits) -> Self {
        self.limits = Some(limits);
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
    /// probes: after the first failure every decision takes the [`OnUnavailable`] policy. A
    /// probe whose caller keeps its future without polling it again holds the probe for at most
    /// its timeout plus this interval; then the next caller takes it over.
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
        // A policy of one quota is that quota (the one-quota script path).
        let (quota, limits) = match self.limits {
            Some(l) if l.quotas().len() == 1 => (l.quotas()[0], None),
            Some(l) => (l.quotas()[0], Some(LimitsParams::new(l)?)),
            None => (self.quota, None),
        };
        if limits.is_some()
            && (self.leases.is_some()
                || matches!(self.on_unavailable, OnUnavailable::LocalFallback { .. }))
        {
            return Err(Error::Config(
                "a policy of several quotas works without leases and local fallback (both hold \
                 one quota per key)"
                    .into(),
            ));
        }
        let default = Params::new(quota)?;
        let mut per_key = HashMap::new();
        for (k, q) in &self.per_key {
            per_key.insert(k.clone(), Params::new(*q)?);
        }
        let policy = match self.on_unavailable {
            OnUnavailable::FailClosed => Policy::FailClosed,
            OnUnavailable::FailOpen => Policy::FailOpen,
            OnUnavailable::LocalFallback { fraction, max_keys } => {
                let share = |q: Quota| local_share(q, fraction);
                let mut b = KeyedLimiter::builder(share(quota)?, max_keys, Default::default());
                for (k, q) in &self.per_key {
                    b = b.override_quota(stored_key(k).into_owned(), share(*q)?);
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
        let script = Lua::new(SOURCE);
        // Loads the script (EVALSHA falls back to loading it) and checks the number path.
        let probe = format!("{}{{check}}", self.prefix);
        let big = "9007199254740991";
        let echo = tokio::time::timeout(
            self.connect_timeout,
            conn.eval(
                &script,
                &probe,
                &["echo", "", big, "100000000"].map(Arg::Str),
            ),
        )
        .await
        .map_err(|_| Error::Timeout(self.connect_timeout))?
        .map_err(Error::from_redis)?;
        let echo: Vec<String> = redis::FromRedisValue::from_redis_value(echo)
            .map_err(|e| Error::Reply(format!("the number check: {e}")))?;
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
                limits,
                stats: Stats::default(),
                breaker: Breaker::new(self.probe_interval),
                in_flight: Semaphore::new(self.max_in_flight.min(Semaphore::MAX_PERMITS)),
                leases: self.leases.map(Table::new),
                observe: Observer::new(self.name.as_deref()),
            }),
        })
    }
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
            limits: None,
            max_in_flight: 4096,
            probe_interval: Duration::from_millis(100),
            name: None,
        }
    }
}
