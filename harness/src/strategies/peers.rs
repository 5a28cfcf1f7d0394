//! The peers, for reference (feature `peers`): governor's direct and keyed limiters,
//! labelled as peers in every output.

use super::{Kind, RateLimiter, Setup, Strategy};
use governor::clock::{Clock as _, DefaultClock as GovClock};
use std::num::NonZeroU32;
use std::time::Duration;
use tollgate::{Denied, Quota};

/// governor's quota closest to `q` that admits no more: the replenish interval rounds
/// *up* to whole nanoseconds, so the peer's bound is never above tollgate's.
fn quota(q: &Quota) -> Result<governor::Quota, String> {
    let per_ns = q.per().as_nanos();
    let interval = per_ns.div_ceil(u128::from(q.tokens())).max(1);
    let interval = u64::try_from(interval).map_err(|_| "rate too slow for governor")?;
    let burst = u32::try_from(q.burst())
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| {
            format!(
                "governor cannot hold a burst of {} (max u32::MAX)",
                q.burst()
            )
        })?;
    Ok(governor::Quota::with_period(Duration::from_nanos(interval))
        .ok_or("zero replenish interval")?
        .allow_burst(burst))
}

type NotUntil = governor::NotUntil<<GovClock as governor::clock::Clock>::Instant>;

/// governor's verdict on `cost` tokens, as a [`Denied`]: `one` (its `check`) for a cost of 1,
/// `many` (its `check_n`) otherwise; 0 is free, and a cost above `u32::MAX` exceeds any burst
/// governor holds. governor reports the earliest instant; a caller answering `Retry-After`
/// needs the wait, which costs one more clock read on a refusal.
fn verdict<E>(
    cost: u64,
    clock: &GovClock,
    one: impl FnOnce() -> Result<(), NotUntil>,
    many: impl FnOnce(NonZeroU32) -> Result<Result<(), NotUntil>, E>,
) -> Result<(), Denied> {
    let r = match cost {
        0 => return Ok(()),
        1 => one(),
        _ => {
            let n = u32::try_from(cost)
                .ok()
                .and_then(NonZeroU32::new)
                .ok_or(Denied::ExceedsBurst)?;
            many(n).map_err(|_| Denied::ExceedsBurst)?
        }
    };
    r.map_err(|nu| Denied::RetryAfter(nu.wait_time_from(clock.now())))
}

struct Direct(governor::DefaultDirectRateLimiter);
impl RateLimiter for Direct {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        verdict(
            cost,
            self.0.clock(),
            || self.0.check(),
            |n| self.0.check_n(n),
        )
    }
    fn name(&self) -> &str {
        "governor"
    }
}

struct Keyed(governor::DefaultKeyedRateLimiter<u64>);
impl RateLimiter for Keyed {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.try_acquire_key(0, cost)
    }
    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        verdict(
            cost,
            self.0.clock(),
            || self.0.check_key(&key),
            |n| self.0.check_key_n(&key, n),
        )
    }
    fn is_keyed(&self) -> bool {
        true
    }
    fn name(&self) -> &str {
        "governor-keyed"
    }
}

/// The `governor` peer: its direct limiter.
pub(super) fn governor() -> Strategy {
    Strategy::new("governor", Kind::Peer, |s: &Setup| {
        Ok(
            Box::new(Direct(governor::RateLimiter::direct(quota(&s.quota)?)))
                as Box<dyn RateLimiter>,
        )
    })
    .with_description("PEER: governor 0.10 direct limiter (its own quanta clock)")
}

/// The `governor-keyed` peer: its keyed limiter.
pub(super) fn governor_keyed() -> Strategy {
    Strategy::new("governor-keyed", Kind::Peer, |s: &Setup| {
        Ok(Box::new(Keyed(governor::RateLimiter::keyed(quota(&s.quota)?))) as Box<dyn RateLimiter>)
    })
    .with_description("PEER: governor 0.10 keyed limiter, DashMap store (--keys)")
}
