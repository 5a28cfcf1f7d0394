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

fn n(cost: u64) -> Option<NonZeroU32> {
    u32::try_from(cost).ok().and_then(NonZeroU32::new)
}

/// governor reports the earliest instant; a caller answering `Retry-After` needs the wait,
/// which costs one more clock read on a refusal.
fn denied(
    nu: &governor::NotUntil<<GovClock as governor::clock::Clock>::Instant>,
    clock: &GovClock,
) -> Denied {
    Denied::RetryAfter(nu.wait_time_from(clock.now()))
}

struct Direct(governor::DefaultDirectRateLimiter);
impl RateLimiter for Direct {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let r = if cost == 1 {
            self.0.check()
        } else {
            let Some(n) = n(cost) else {
                return if cost == 0 {
                    Ok(())
                } else {
                    Err(Denied::ExceedsBurst)
                };
            };
            self.0.check_n(n).map_err(|_| Denied::ExceedsBurst)?
        };
        r.map_err(|nu| denied(&nu, self.0.clock()))
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
        let r = if cost == 1 {
            self.0.check_key(&key)
        } else {
            let Some(n) = n(cost) else {
                return if cost == 0 {
                    Ok(())
                } else {
                    Err(Denied::ExceedsBurst)
                };
            };
            self.0
                .check_key_n(&key, n)
                .map_err(|_| Denied::ExceedsBurst)?
        };
        r.map_err(|nu| denied(&nu, self.0.clock()))
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
