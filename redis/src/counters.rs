//! [`Counters`]: how many decisions took each path, counted with relaxed atomics (each counter
//! is monotonic on its own; a snapshot of all of them is not one instant's).

#[cfg(doc)]
use crate::{Error, OnUnavailable, RedisLimiter};
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Refusals of a key whose stored value is not a state this crate wrote
    /// ([`Error::Malformed`]; refused with [`MALFORMED_RETRY`](crate::MALFORMED_RETRY), no policy
    /// applied). Also counted in `errors`.
    pub malformed: u64,
    /// Script calls sent to Redis (round trips, including lease refills and probes).
    pub redis_calls: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) redis: AtomicU64,
    pub(crate) leased: AtomicU64,
    pub(crate) lease_denied: AtomicU64,
    pub(crate) fail_open: AtomicU64,
    pub(crate) fail_closed: AtomicU64,
    pub(crate) local_fallback: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) redis_calls: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Stats {
    /// The counters now (each read on its own).
    pub(crate) fn snapshot(&self) -> Counters {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            redis: l(&self.redis),
            leased: l(&self.leased),
            lease_denied: l(&self.lease_denied),
            fail_open: l(&self.fail_open),
            fail_closed: l(&self.fail_closed),
            local_fallback: l(&self.local_fallback),
            errors: l(&self.errors),
            malformed: l(&self.malformed),
            redis_calls: l(&self.redis_calls),
        }
    }
}
