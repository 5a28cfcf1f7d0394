//! # tollgate-redis
//!
//! tollgate's exact GCRA token bucket with the state in Redis, so that every process sharing the
//! server shares each key's limit.
//!
//! * [`RedisLimiter`] — one round trip per decision: a Lua script (EVALSHA, reloaded after a
//!   restart, failover or `SCRIPT FLUSH`), atomic on the server, one key per call (works
//!   unchanged on Redis Cluster; hash tags in keys are respected).
//! * Time is the server's (`TIME`, microseconds): no clock skew between application hosts.
//! * **Exact**: every verdict, `RetryAfter` and [`tollgate::Snapshot`] that Redis decides
//!   equals `tollgate::gcra` evaluated at the server's microsecond reading (as nanoseconds
//!   since 2020-01-01 UTC; with [`Leases`], a refusal served from the refusal cache reports an
//!   upper bound of Redis's wait, and a lease's snapshot is an estimate). The
//!   script keeps every number an exact integer below 2^53, in the coarsest exact unit of its
//!   microsecond clock; quotas it cannot hold are refused at
//!   [`build`](RedisLimiterBuilder::build) (range: refilling the whole burst may take up to 2^51
//!   µs, about 71 years, when one token refills in whole microseconds; see the README's table).
//! * [`RedisLimiterBuilder::limits`]: a policy of up to four quotas on one key
//!   ([`tollgate::Limits`]), all decided in the same single round trip, all or none.
//! * [`RedisLimiter::decide_keys`]: several keys, each with its own policy and cost, in one
//!   round trip, all or none (a request checked against several limits at once).
//! * Bounded key bytes: keys over [`MAX_KEY_BYTES`] are stored under their SHA-256 digest
//!   ([`stored_key`]).
//! * A value under the prefix that the script did not write is that key's fault
//!   ([`Error::Malformed`], refused with [`MALFORMED_RETRY`]), never an outage.
//! * Bounded memory: a key exists only while its bucket is not full (it expires when full).
//! * [`OnUnavailable`]: fail closed (default), fail open, or a local [`tollgate::KeyedLimiter`]
//!   with a fraction of the quota; every decision returns within the timeout; [`Counters`].
//! * [`Leases`] (opt-in): tokens debited in Redis ahead of time and spent locally from a
//!   lock-free word (the same exact arithmetic, on the server's time): far fewer round trips,
//!   bounded under-admission.
//! * Feature `test-support`: a decision method that takes the time as an argument, for the
//!   differential tests, and `on_lease_spend`, a hook that pauses a lease spender between its
//!   reading and its CAS (throwaway `redis-server`s are in the workspace test kit).
//!
//! # Observability
//!
//! Feature `metrics`: a limiter named with `RedisLimiterBuilder::name` records, through the
//! `metrics` facade (handles resolved once, at `build`, from the recorder installed then; labels
//! never carry a request's key):
//!
//! | series | kind | labels | what |
//! |---|---|---|---|
//! | `tollgate_decisions_total` | counter | `limiter`, `outcome` | every decision, as in the core |
//! | `tollgate_retry_after_seconds` | histogram | `limiter` | the waits of refusals |
//! | `tollgate_redis_decisions_total` | counter | `limiter`, `path` | what decided: `redis`, `lease`, `lease_denied`, `fail_open`, `fail_closed`, `local_fallback` |
//! | `tollgate_redis_round_trip_seconds` | histogram | `limiter` | each script call's round trip (answered or failed) |
//! | `tollgate_redis_timeouts_total` | counter | `limiter` | decisions that ran past the timeout |
//! | `tollgate_redis_errors_total` | counter | `limiter` | decisions that failed (timeouts included) |
//! | `tollgate_redis_breaker_transitions_total` | counter | `limiter`, `to` | the breaker opening (`open`) and closing (`closed`) |
//! | `tollgate_redis_lease_refills_total` | counter | `limiter` | lease refills sent to Redis |
//!
//! Feature `tracing`: events on state changes only — the breaker opening and closing, the local
//! fallback engaging (its first decision after Redis answered) and ending (Redis answering
//! again).
//!
//! Decisions run on tokio and need its time driver (`#[tokio::main]` or a runtime built with
//! `enable_all`/`enable_time`): the per-decision timeout is a tokio timer.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate_redis::Error> {
//! use tollgate::Quota;
//! use tollgate_redis::{OnUnavailable, RedisLimiter};
//! let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
//!     .on_unavailable(OnUnavailable::FailOpen)
//!     .build()
//!     .await?;
//! match limiter.try_acquire("tenant:42", 1).await {
//!     Ok(()) => { /* serve */ }
//!     Err(denied) => { /* 429, Retry-After: denied.retry_after_secs() */ }
//! }
//! # Ok(()) }
//! ```

mod breaker;
mod builder;
mod conn;
mod counters;
mod error;
mod key;
mod keys;
mod lease;
mod limiter;
mod limits;
mod observe;
mod policy;
mod script;
#[cfg(feature = "test-support")]
mod test_hooks;

pub use error::Error;
pub use script::ORIGIN_UNIX_US;
#[cfg(feature = "test-support")]
pub use script::PRODUCTION_SOURCE;
#[cfg(feature = "test-support")]
pub use test_hooks::{on_lease_spend, LeaseSpendHook};

/// Whether the Redis script holds `quota`: `Ok` for every quota that
/// [`build`](RedisLimiterBuilder::build) accepts, [`Error::Config`] (saying why) otherwise.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// assert!(tollgate_redis::check_quota(Quota::per_second(1000).unwrap()).is_ok());
/// // 7 per 30 days: the script counts in 1/2.592e12 token, exact at every microsecond.
/// let month = Quota::new(7, Duration::from_secs(2_592_000), 7).unwrap();
/// assert!(tollgate_redis::check_quota(month).is_ok());
/// // One per second with a burst of 2^51 − 1: beyond 2^51 even in whole tokens.
/// let huge = Quota::per_second(1).unwrap().with_burst((1 << 51) - 1).unwrap();
/// assert!(tollgate_redis::check_quota(huge).is_err());
/// ```
pub fn check_quota(quota: tollgate::Quota) -> Result<(), Error> {
    script::Params::new(quota).map(|_| ())
}

/// The quota the script decides `quota` with: the same rate and burst, with states in the
/// unit the script counts in ([`Quota::with_scale`](tollgate::Quota::with_scale)). Every
/// decision, wait and snapshot of a key under `quota` is `tollgate::gcra` on this quota at the
/// server's clock reading, in whole microseconds; where
/// [`is_exact`](tollgate::Quota::is_exact) is false it is still exact at every whole
/// microsecond when a whole number of units is earned per microsecond (see the crate README).
/// [`Error::Config`] as [`check_quota`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// let month = Quota::new(7, Duration::from_secs(2_592_000), 7).unwrap();
/// let q = tollgate_redis::script_quota(month).unwrap();
/// assert_eq!((q.tokens(), q.per(), q.burst()), (7, month.per(), 7));
/// // 7 units per microsecond (7 per 1000 ns), 2.592e12 units per token.
/// assert_eq!((q.units_per_ns(), q.scale()), ((7, 1000), 2_592_000_000_000));
/// // A quota the script holds in its own unit is itself.
/// let q = Quota::per_second(1000).unwrap();
/// assert_eq!(tollgate_redis::script_quota(q).unwrap(), q);
/// ```
pub fn script_quota(quota: tollgate::Quota) -> Result<tollgate::Quota, Error> {
    script::Params::new(quota).map(|p| p.model)
}
pub use builder::RedisLimiterBuilder;
pub use counters::Counters;
pub use key::{stored_key, MAX_KEY_BYTES};
pub use keys::{CheckedLimits, KeyDecision, KeyDemand, MAX_KEYS_PER_CALL};
pub use lease::Leases;
pub use limiter::{Outcome, RedisLimiter};
pub use policy::{OnUnavailable, FAIL_CLOSED_RETRY, MALFORMED_RETRY};

/// The README's Rust examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    #[test]
    fn limiter_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<crate::RedisLimiter>();
        fn check_error<T: std::error::Error + Send + Sync + 'static>() {}
        check_error::<crate::Error>();
    }
}
