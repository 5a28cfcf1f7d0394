//! The unavailability policy: what a decision does when Redis cannot decide.

use crate::Error;
#[cfg(doc)]
use crate::RedisLimiter;
use std::time::Duration;
use tollgate::{KeyedLimiter, Quota};

/// The wait a fail-closed refusal carries: short, so that clients come back soon after Redis
/// does (an HTTP `Retry-After` of 1 second).
pub const FAIL_CLOSED_RETRY: Duration = Duration::from_secs(1);

/// The wait [`RedisLimiter::try_acquire`] refuses a key with while the value stored under it is
/// not a state this crate wrote ([`Error::Malformed`]): a per-key fault, not an outage, so no
/// [`OnUnavailable`] policy applies to it. The key stays refused until an operator deletes it
/// (`DEL`, the name in the error; see [`RedisLimiter::redis_key`]); then it starts full.
pub const MALFORMED_RETRY: Duration = Duration::from_secs(1);

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
    /// `N` processes, `fraction = 1/N` keeps the total near the global limit *while Redis is
    /// out*: the local shares start full when it goes, and Redis never learns of what they
    /// admitted, so a window spanning the switch (either way) can admit up to about twice the
    /// burst plus the rate times its length. A cost above the share's burst but within the
    /// key's is refused with `Denied::RetryAfter(`[`FAIL_CLOSED_RETRY`]`)`, as a fail closed
    /// refuses: it can be held once Redis is back.
    LocalFallback {
        /// This process's share of each key's quota.
        fraction: f64,
        /// The local table's bound on keys.
        max_keys: usize,
    },
}

/// `fraction` of `q`: the period lengthened by `1 / fraction` (rounded up), the burst scaled
/// down (at least 1).
pub(crate) fn local_share(q: Quota, fraction: f64) -> Result<Quota, Error> {
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

pub(crate) enum Policy {
    FailClosed,
    FailOpen,
    Local(Box<KeyedLimiter<String>>),
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
}
