//! Policies of two quotas — every admission must hold both — under three strategies:
//!
//! * `multi` — [`tollgate::MultiBucket`]: both states in one 128-bit word, one CAS;
//! * `multi-chain` — two [`tollgate::Bucket`]s taken in order: reserve on the first (given back
//!   at once if not due now), try the second, give the first back if the second refuses. Never
//!   over-admits; a give-back fails when another admission came between (the bucket's
//!   all-or-nothing cancel rule), so under contention it under-admits;
//! * `multi-mutex` — both states under one [`std::sync::Mutex`], decided with the same
//!   [`tollgate::gcra`] arithmetic;
//! * `keyed-multi` — [`tollgate::KeyedMultiLimiter`]: the same policy per key (`--keys`), in a
//!   table with room for every key, against `keyed` (one quota per key).
//!
//! The policy is the cell's quota and [`second_quota`] (half its rate, twice its burst): the
//! first quota binds in bursts, the second in the long run, and the runner checks the bound of
//! each ([`RateLimiter::extra_quotas`]).

use super::tollgate_types::tollgate;
use super::{Kind, RateLimiter, Setup, Strategy};
use crate::BuildError;
use std::sync::Mutex;
use std::time::Duration;
use tollgate::{
    gcra, Bucket, Clock, DefaultClock, Denied, KeyedMultiLimiter, Limits, MultiBucket, Quota,
};

/// The second quota of the policy strategies: half the cell quota's rate (its period doubled)
/// and twice its burst.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// let q = tollgate_bench::strategies::second_quota(&Quota::per_second(10).unwrap()).unwrap();
/// assert_eq!((q.tokens(), q.per(), q.burst()), (10, Duration::from_secs(2), 20));
/// ```
pub fn second_quota(quota: &Quota) -> Result<Quota, BuildError> {
    let per = quota
        .per()
        .checked_mul(2)
        .ok_or("the cell quota's period is too long to double")?;
    let burst = quota
        .burst()
        .checked_mul(2)
        .ok_or("the cell quota's burst is too large to double")?;
    Ok(Quota::new(quota.tokens(), per, burst).map_err(|e| e.to_string())?)
}

struct Chain {
    first: Bucket<DefaultClock>,
    second: Bucket<DefaultClock>,
}

impl RateLimiter for Chain {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let taken = self.first.reserve(cost)?;
        let wait = taken.delay();
        if wait > Duration::ZERO {
            taken.cancel();
            return Err(Denied::RetryAfter(wait));
        }
        match self.second.try_acquire(cost) {
            Ok(()) => Ok(()),
            Err(denied) => {
                taken.cancel();
                Err(denied)
            }
        }
    }
    fn name(&self) -> &str {
        "multi-chain"
    }
    fn extra_quotas(&self) -> Vec<Quota> {
        vec![self.second.quota()]
    }
}

struct Locked {
    states: Mutex<[u64; 2]>,
    quotas: [Quota; 2],
    clock: DefaultClock,
}

impl RateLimiter for Locked {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let a = gcra::try_acquire(states[0], now, &self.quotas[0], cost);
        let b = gcra::try_acquire(states[1], now, &self.quotas[1], cost);
        match (a, b) {
            (Ok(a), Ok(b)) => {
                *states = [a.unwrap_or(states[0]), b.unwrap_or(states[1])];
                Ok(())
            }
            (Err(Denied::RetryAfter(x)), Err(Denied::RetryAfter(y))) => {
                Err(Denied::RetryAfter(x.max(y)))
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }
    fn name(&self) -> &str {
        "multi-mutex"
    }
    fn extra_quotas(&self) -> Vec<Quota> {
        vec![self.quotas[1]]
    }
}

/// The `multi` strategy's limiter: [`MultiBucket::try_acquire`] called directly, as `cas`
/// calls `Bucket::try_acquire` (not through `Limiter::decide`, whose `Refusal` would add a
/// conversion to every refusal).
struct Multi {
    policy: MultiBucket<DefaultClock>,
    second: Quota,
}

impl RateLimiter for Multi {
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.policy.try_acquire(cost)
    }
    fn name(&self) -> &str {
        "multi"
    }
    fn extra_quotas(&self) -> Vec<Quota> {
        vec![self.second]
    }
}

/// The `keyed-multi` strategy.
pub(super) fn keyed_multi() -> Strategy {
    Strategy::new("keyed-multi", Kind::Tollgate, |s: &Setup| {
        let second = second_quota(&s.quota)?;
        let limits = Limits::new([s.quota, second]).map_err(|e| e.to_string())?;
        // Room for every key: the table never fills, so no refusal is due to capacity.
        let max_keys = usize::try_from(s.keys).map_err(|_| "too many keys")?;
        let table: KeyedMultiLimiter<u64, DefaultClock> =
            KeyedMultiLimiter::with_clock(limits, max_keys, s.clock);
        Ok(tollgate(table, "keyed-multi"))
    })
    .with_description(
        "tollgate::KeyedMultiLimiter<u64>: the two-quota policy per key (--keys), one record per key",
    )
}

/// The `multi` strategy.
pub(super) fn multi() -> Strategy {
    Strategy::new("multi", Kind::Tollgate, |s: &Setup| {
        let second = second_quota(&s.quota)?;
        let limits = Limits::new([s.quota, second]).map_err(|e| e.to_string())?;
        Ok(Box::new(Multi {
            policy: MultiBucket::with_clock(limits, s.clock),
            second,
        }) as Box<dyn RateLimiter>)
    })
    .with_description(
        "tollgate::MultiBucket: two quotas in one 128-bit CAS (quota, half rate x2 burst)",
    )
}

/// The `multi-chain` strategy.
pub(super) fn multi_chain() -> Strategy {
    Strategy::new("multi-chain", Kind::Tollgate, |s: &Setup| {
        let second = second_quota(&s.quota)?;
        Ok(Box::new(Chain {
            first: Bucket::with_clock(s.quota, s.clock),
            second: Bucket::with_clock(second, s.clock),
        }) as Box<dyn RateLimiter>)
    })
    .with_description("two tollgate::Buckets in order: reserve, try, cancel on refusal")
}

/// The `multi-mutex` strategy.
pub(super) fn multi_mutex() -> Strategy {
    Strategy::new("multi-mutex", Kind::Tollgate, |s: &Setup| {
        let second = second_quota(&s.quota)?;
        Ok(Box::new(Locked {
            states: Mutex::new([gcra::FULL; 2]),
            quotas: [s.quota, second],
            clock: s.clock,
        }) as Box<dyn RateLimiter>)
    })
    .with_description("two quotas' states under one std::sync::Mutex, the same gcra arithmetic")
}
