//! [`Backend`] for per-key policies: [`KeyedMultiLimiter`], each key carrying every quota of
//! its policy, with the headers of a [`MultiBucket`](tollgate::MultiBucket)'s decision (one
//! `RateLimit-Policy` item per quota, `RateLimit` for the tightest, `Retry-After` the slowest
//! wait, rounded up).

use core::future::Ready;
use core::hash::Hash;

use tollgate::{Clock, KeyedMultiLimiter};

use super::multi::policy_decision;
use super::{Backend, Check, Decision};

/// Each key's policy, all or nothing. As for a `MultiBucket`: `try_acquire_snapshots` when
/// admitted responses carry headers, else `try_acquire_or_snapshots`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
/// use tollgate_tower::{Backend, Check};
/// let per_minute = Quota::new(3, Duration::from_secs(60), 3).unwrap();
/// let limits = Limits::new([Quota::per_second(2).unwrap(), per_minute]).unwrap();
/// let per_key = KeyedMultiLimiter::with_clock(limits, 100, ManualClock::new());
/// for _ in 0..2 {
///     assert!(matches!(per_key.check("alice", 1, false), Check::Ready(d) if d.verdict.is_ok()));
/// }
/// let Check::Ready(refused) = per_key.check("alice", 2, false) else { unreachable!() };
/// assert_eq!(refused.verdict, Err(Denied::RetryAfter(Duration::from_secs(20))));
/// assert_eq!(refused.policy.unwrap().refused(), Some(1)); // the minute waits longest
/// assert!(matches!(per_key.check("bob", 2, true), Check::Ready(d) if d.verdict.is_ok()));
/// ```
impl<K: Hash + Eq + Clone, C: Clock + Clone> Backend<K> for KeyedMultiLimiter<K, C> {
    type Future = Ready<Decision>;

    #[inline]
    fn check(&self, key: K, cost: u64, report: bool) -> Check<Self::Future> {
        Check::Ready(if report {
            let (verdict, snapshots) = self.try_acquire_snapshots(&key, cost);
            policy_decision(self.limits_for(&key), verdict, snapshots)
        } else {
            match self.try_acquire_or_snapshots(&key, cost) {
                Ok(()) => Decision::new(Ok(()), None, None),
                Err((refusal, snapshots)) => {
                    policy_decision(self.limits_for(&key), Err(refusal), snapshots)
                }
            }
        })
    }
}
