//! [`Error`]: what failed when a decision could not be made (or a limiter not built).

use std::fmt;
use std::time::Duration;

/// The source of an [`Error`]: the client library's error, kept opaque so that this crate's
/// public API does not pin a `redis` version.
type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a decision (or [`build`](crate::RedisLimiterBuilder::build)) failed. Each variant says
/// what to check; the underlying client error, if any, is the [`source`](std::error::Error::source).
///
/// ```
/// use std::time::Duration;
/// let e = tollgate_redis::Error::Timeout(Duration::from_millis(25));
/// assert!(e.to_string().contains("25ms"));
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// The URL could not be parsed (see the crate docs for the accepted forms).
    Url(String),
    /// A configuration value was refused: a quota the script cannot hold exactly (see the
    /// crate's range documentation), a fraction outside `(0, 1]`, a prefix with `{`, …
    Config(String),
    /// Connecting to the server failed (refused, unreachable, authentication).
    Connect(Source),
    /// No reply within the per-decision timeout. The script may still run on the server later:
    /// tollgate never resends a decision (that could count it twice; in cluster mode redis-rs
    /// itself resends after a dropped connection, which at worst counts it twice: fewer
    /// admissions, never more).
    Timeout(Duration),
    /// The limiter recently failed to reach the server and is waiting before the next probe;
    /// no request was sent (so none can queue behind a dead connection).
    Unavailable,
    /// Too many decisions are already waiting for the server (the in-flight cap).
    Overloaded,
    /// The server answered with an error (busy, out of memory, a script error, a key of
    /// another type under this limiter's prefix, …) or the connection broke mid-request.
    Server(Source),
    /// The value stored under `key` (the Redis key, prefix included) is not a state this crate's
    /// script wrote: another program's value under the prefix, a hash or a list, numbers out of
    /// range, a state dated beyond the quota's horizon from the server's time. Nothing was
    /// decided or written. A per-key fault, not an outage:
    /// [`try_acquire`](crate::RedisLimiter::try_acquire) refuses that key with
    /// [`MALFORMED_RETRY`](crate::MALFORMED_RETRY) and applies no policy; other keys are
    /// unaffected. An operator deletes the key (`DEL key`), which gives it a full bucket.
    Malformed {
        /// The Redis key.
        key: String,
        /// What the script found.
        reason: String,
    },
    /// The server's reply did not have the expected shape or disagreed with `tollgate::gcra`
    /// (a bug, or a key written by something else): nothing was decided.
    Reply(String),
}

impl Error {
    /// Whether the error came from the backend at decision time (everything but a bad URL or
    /// configuration, or a malformed value under one key): the cases where [`try_acquire`](crate::RedisLimiter::try_acquire) applies
    /// the [`OnUnavailable`](crate::OnUnavailable) policy.
    ///
    /// ```
    /// assert!(tollgate_redis::Error::Unavailable.is_unavailable());
    /// assert!(!tollgate_redis::Error::Config("x".into()).is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        !matches!(
            self,
            Error::Url(_) | Error::Config(_) | Error::Malformed { .. }
        )
    }

    pub(crate) fn from_redis(e: redis::RedisError) -> Error {
        // The client's own (connection-level) timeouts count as connection failures.
        if e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_io_error()
            || e.is_timeout()
        {
            Error::Connect(Box::new(e))
        } else {
            Error::Server(Box::new(e))
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Url(m) => write!(f, "invalid Redis URL: {m}"),
            Error::Config(m) => write!(f, "invalid configuration: {m}"),
            Error::Connect(e) => write!(f, "cannot connect to Redis: {e}"),
            Error::Timeout(d) => write!(f, "no reply from Redis within {d:?}"),
            Error::Unavailable => f.write_str(
                "Redis is unavailable (a recent request failed; waiting before the next probe)",
            ),
            Error::Overloaded => f.write_str("too many decisions are waiting for Redis"),
            Error::Server(e) => write!(f, "Redis replied with an error: {e}"),
            Error::Malformed { key, reason } => write!(
                f,
                "the Redis key {key:?} holds a value that is not a tollgate state ({reason}); \
                 delete it (DEL) to give the key a full bucket"
            ),
            Error::Reply(m) => write!(f, "unexpected reply from the rate-limit script: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connect(e) | Error::Server(e) => Some(&**e),
            _ => None,
        }
    }
}
