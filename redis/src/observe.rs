//! What a named [`RedisLimiter`](crate::RedisLimiter) records (feature `metrics`) and the
//! events it emits (feature `tracing`). The decision path calls the one-line hooks here; with
//! neither feature every hook is an empty inline function and [`Observer`] holds nothing.
//!
//! The series are listed in the crate docs ("Observability").
//!
//! Tracing events (state changes only): the breaker opening and closing, the local fallback
//! engaging (its first decision after Redis answered) and ending (Redis answering again).

#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tollgate::Denied;

/// What decided a request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Path {
    Redis,
    Lease,
    LeaseDenied,
    FailOpen,
    FailClosed,
    LocalFallback,
}

/// The `path` label values, in [`Path`] order.
#[cfg(feature = "metrics")]
const PATHS: [&str; 6] = [
    "redis",
    "lease",
    "lease_denied",
    "fail_open",
    "fail_closed",
    "local_fallback",
];

/// A limiter's handles, resolved once when it is built.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Handles {
    decisions: tollgate::metrics::DecisionMetrics,
    paths: [metrics::Counter; 6],
    round_trip: metrics::Histogram,
    timeouts: metrics::Counter,
    errors: metrics::Counter,
    refills: metrics::Counter,
    opened: metrics::Counter,
    closed: metrics::Counter,
}

/// A limiter's name, handles and fallback flag (shared with its breaker).
#[derive(Debug, Default)]
pub(crate) struct Observer {
    #[cfg(feature = "tracing")]
    name: String,
    #[cfg(feature = "metrics")]
    handles: Option<Handles>,
    /// Whether the local fallback decided since Redis last answered; only its flips emit events.
    #[cfg(feature = "tracing")]
    fallback: AtomicBool,
}

impl Observer {
    /// The observer of a limiter named `name` (`None`: nothing recorded, unnamed events).
    #[cfg_attr(
        not(any(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn new(name: Option<&str>) -> Observer {
        Observer {
            #[cfg(feature = "tracing")]
            name: name.unwrap_or("").to_owned(),
            #[cfg(feature = "metrics")]
            handles: name.map(|name| {
                let limiter = metrics::SharedString::from(name.to_owned());
                let l = || limiter.clone();
                Handles {
                    decisions: tollgate::metrics::DecisionMetrics::new(l()),
                    paths: PATHS.map(|p| {
                        metrics::counter!("tollgate_redis_decisions_total", "limiter" => l(), "path" => p)
                    }),
                    round_trip: metrics::histogram!("tollgate_redis_round_trip_seconds", "limiter" => l()),
                    timeouts: metrics::counter!("tollgate_redis_timeouts_total", "limiter" => l()),
                    errors: metrics::counter!("tollgate_redis_errors_total", "limiter" => l()),
                    refills: metrics::counter!("tollgate_redis_lease_refills_total", "limiter" => l()),
                    opened: metrics::counter!("tollgate_redis_breaker_transitions_total", "limiter" => l(), "to" => "open"),
                    closed: metrics::counter!("tollgate_redis_breaker_transitions_total", "limiter" => l(), "to" => "closed"),
                }
            }),
            #[cfg(feature = "tracing")]
            fallback: AtomicBool::new(false),
        }
    }

    /// A decision's verdict (every public decision passes here once).
    #[inline]
    pub(crate) fn decided(&self, verdict: &Result<(), Denied>) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.decisions.record(verdict);
        }
        let _ = verdict;
    }

    /// What decided it.
    #[inline]
    pub(crate) fn path(&self, path: Path) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.paths[path as usize].increment(1);
        }
        #[cfg(feature = "tracing")]
        if let Path::LocalFallback = path {
            if !self.fallback.swap(true, Ordering::Relaxed) {
                tracing::warn!(limiter = %self.name, "tollgate-redis: Redis unavailable, the local fallback decides");
            }
        }
        let _ = path;
    }

    /// A lease refill goes to Redis.
    #[inline]
    pub(crate) fn refill(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.refills.increment(1);
        }
    }

    /// A decision failed; `timeout`: it ran past the limiter's timeout.
    #[cold]
    pub(crate) fn failed(&self, timeout: bool) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.errors.increment(1);
            if timeout {
                h.timeouts.increment(1);
            }
        }
        let _ = timeout;
    }

    /// The start of a script call (`None` when nothing records it).
    #[inline]
    pub(crate) fn start(&self) -> Option<Instant> {
        #[cfg(feature = "metrics")]
        if self.handles.is_some() {
            return Some(Instant::now());
        }
        None
    }

    /// A script call started at `start` ended; `answered`: Redis replied.
    #[inline]
    pub(crate) fn round_trip(&self, start: Option<Instant>, answered: bool) {
        #[cfg(feature = "metrics")]
        if let (Some(h), Some(start)) = (&self.handles, start) {
            h.round_trip.record(start.elapsed().as_secs_f64());
        }
        #[cfg(feature = "tracing")]
        if answered
            && self.fallback.load(Ordering::Relaxed)
            && self.fallback.swap(false, Ordering::Relaxed)
        {
            tracing::info!(limiter = %self.name, "tollgate-redis: Redis answers again, the local fallback ends");
        }
        let _ = (start, answered);
    }

    /// The breaker changed (`Some(true)`: opened, `Some(false)`: closed) or not (`None`).
    #[inline]
    pub(crate) fn breaker(&self, changed: Option<bool>) {
        match changed {
            Some(true) => self.breaker_opened(),
            Some(false) => self.breaker_closed(),
            None => {}
        }
    }

    /// The breaker opened: after a failure, one probe per interval goes to Redis.
    #[cold]
    fn breaker_opened(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.opened.increment(1);
        }
        #[cfg(feature = "tracing")]
        tracing::warn!(limiter = %self.name, "tollgate-redis: breaker open, Redis is unavailable; probing once per interval");
    }

    /// The breaker closed: a call succeeded.
    #[cold]
    fn breaker_closed(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.handles {
            h.closed.increment(1);
        }
        #[cfg(feature = "tracing")]
        tracing::info!(limiter = %self.name, "tollgate-redis: breaker closed, Redis answers again");
    }
}

#[cfg(any(feature = "metrics", feature = "tracing"))]
impl crate::RedisLimiterBuilder {
    /// Names the limiter: with `metrics` it records the series in the table of
    /// [the crate docs](crate#observability) under `limiter = name` (the handles come from the
    /// recorder installed when [`build`](crate::RedisLimiterBuilder::build) runs); with
    /// `tracing` its events carry the name. Labels never carry a request's key.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::Quota;
    /// use tollgate_redis::RedisLimiter;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .name("api")
    ///     .build()
    ///     .await?;
    /// # let _ = limiter;
    /// # Ok(()) }
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}
