//! Everything that touches tollgate's core and tollgate-redis: the clock, the quotas a rate
//! becomes, the local backend (per-limit keyed tables, all or nothing across a request's
//! descriptors, saved state) and the Redis backend (one script call per request).
//!
//! The service (`service.rs`) hands a backend a request's *demands* — one per distinct bucket,
//! the hits of the descriptors that share it summed — and gets one [`Outcome`] per demand.

mod fixed;
mod local;
mod redis;

pub(crate) use self::redis::key_fixed_bytes;
pub use self::redis::{OnRedisError, RedisBackend, RedisFailure};
pub use fixed::FixedWindowBackend;
pub use local::{Applied, LocalBackend, Restored};

use crate::config::{Kind, Limit, Rate, Target};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Clock, Limits, ManualClock, Quota, StdClock};

/// The quota a rate becomes: `requests_per_unit` per `unit`, a bucket of `burst`.
pub(crate) fn quota_of(rate: &Rate) -> Result<Quota, String> {
    Quota::new(
        u64::from(rate.requests_per_unit),
        rate.unit.duration(),
        rate.burst,
    )
    .map_err(|e| format!("not a valid rate: {e}"))
}

/// Checks at load that a rate makes a quota that `target` holds: the core's check on every
/// backend, the Redis script's range only on the Redis backend (it refuses some rates the
/// core holds: 4,294,967,291 per month among them).
pub(crate) fn check_rate(rate: &Rate, target: Target) -> Result<(), String> {
    let q = quota_of(rate)?;
    match target {
        Target::Local => Ok(()),
        Target::Redis => tollgate_redis::check_quota(q)
            .map_err(|e| format!("not a rate the Redis backend holds: {e}")),
    }
}

/// The policy of a limit's rates (`None` for `unlimited` or a rate of 0 per unit).
pub(crate) fn limits_of(limit: &Limit) -> Option<Limits> {
    let Kind::Rates(rates) = &limit.kind else {
        return None;
    };
    if limit.blocking_rate().is_some() {
        return None;
    }
    // Checked at load (`check_rate`: the core's check on every backend), and a config holds 1
    // to 4 rates per limit.
    let quotas: Result<Vec<Quota>, String> = rates.iter().map(quota_of).collect();
    Limits::new(quotas.ok()?).ok()
}

/// The service's clock: real time (`Instant`, monotonic) or a [`ManualClock`] for tests.
///
/// A decision reads it once: `RlsClock::pin` fixes the reading on the calling thread while
/// a request is decided, so every descriptor of the request is decided at one instant.
#[derive(Clone, Debug)]
pub struct RlsClock(ClockKind);

#[derive(Clone, Debug)]
enum ClockKind {
    Std(StdClock),
    Manual(ManualClock),
}

thread_local! {
    /// The reading pinned by the request being decided on this thread, if any.
    static PINNED: Cell<Option<u64>> = const { Cell::new(None) };
}

impl RlsClock {
    /// Real time.
    pub fn real() -> RlsClock {
        RlsClock(ClockKind::Std(StdClock::new()))
    }

    /// A manual clock (tests): clones of `clock` move it.
    pub fn manual(clock: ManualClock) -> RlsClock {
        RlsClock(ClockKind::Manual(clock))
    }

    fn read(&self) -> u64 {
        match &self.0 {
            ClockKind::Std(c) => c.now(),
            ClockKind::Manual(c) => c.now(),
        }
    }

    /// Fixes this thread's reading until the guard is dropped.
    pub(crate) fn pin(&self) -> Pin {
        let now = self.read();
        let before = PINNED.with(|p| p.replace(Some(now)));
        Pin { before }
    }
}

impl Clock for RlsClock {
    fn now(&self) -> u64 {
        PINNED.with(Cell::get).unwrap_or_else(|| self.read())
    }
}

/// A pinned reading (see [`RlsClock::pin`]).
pub(crate) struct Pin {
    before: Option<u64>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        PINNED.with(|p| p.set(self.before));
    }
}

/// What a request asks of one bucket: the limit, the bucket's key and the hits.
#[derive(Debug, Clone)]
pub struct Demand {
    /// The limit (its rates).
    pub limit: Arc<Limit>,
    /// The bucket within the limit (the request's entries).
    pub bucket: String,
    /// Hits to take (0: check that one hit would pass, take nothing).
    pub hits: u64,
    /// Whether the demand takes part in the request's all-or-nothing decision (`false`:
    /// shadow mode, decided on its own).
    pub enforce: bool,
    /// Read only: another limit of the request refuses whatever the state (a limit of 0 per
    /// unit), so this bucket is only checked.
    pub read: bool,
}

impl Demand {
    /// The tokens the check needs: the hits, or one for a check-only demand.
    pub(crate) fn need(&self) -> u64 {
        self.hits.max(1)
    }
}

/// When a refused demand could pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// After this long (the bucket's exact wait for the hits).
    After(Duration),
    /// Never at these hits: more than the burst, or a limit of 0 per unit.
    Never,
}

/// What one demand got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the bucket holds the hits (for a check-only demand: one hit). For an enforcing
    /// demand of a refused request this says whether *this* bucket held them.
    pub holds: bool,
    /// For a demand that does not hold: when it could.
    pub wait: Option<Wait>,
    /// Whole tokens left in the reported rate's bucket after the decision.
    pub remaining: u64,
    /// Until that bucket is full again.
    pub until_full: Duration,
    /// The reported rate (index into the limit's rates): the refusing one, else the tightest
    /// (fewest tokens remaining).
    pub rate: usize,
    /// Whether the backend could decide (`false`: Redis failed and the policy answered).
    pub decided: bool,
}

impl Outcome {
    /// The outcome of a limit of 0 per unit (`rate`, of `unit`): refused, never at any hits;
    /// never full either, so one unit until full (what a shadow-mode status names as its reset,
    /// as an enforcing one names the wait).
    pub(crate) fn blocked(rate: usize, unit: Duration) -> Outcome {
        Outcome {
            holds: false,
            wait: Some(Wait::Never),
            remaining: 0,
            until_full: unit,
            rate,
            decided: true,
        }
    }

    /// From a snapshot set and a verdict on the hits.
    pub(crate) fn from_parts(
        verdict: Result<(), tollgate::Refusal>,
        snapshots: &tollgate::Snapshots,
    ) -> Outcome {
        match verdict {
            Ok(()) => {
                let (i, s) = snapshots.tightest();
                Outcome {
                    holds: true,
                    wait: None,
                    remaining: s.remaining(),
                    until_full: s.until_full(),
                    rate: i,
                    decided: true,
                }
            }
            Err(r) => {
                let i = r.quota_index();
                let s = snapshots.as_slice()[i.min(snapshots.len() - 1)];
                let wait = match r.denied() {
                    tollgate::Denied::RetryAfter(d) if d < tollgate::HORIZON => Wait::After(d),
                    _ => Wait::Never,
                };
                Outcome {
                    holds: false,
                    wait: Some(wait),
                    remaining: s.remaining(),
                    until_full: s.until_full(),
                    rate: i,
                    decided: true,
                }
            }
        }
    }
}

/// The backend a service decides with.
#[derive(Debug)]
pub enum Backend {
    /// In-process tables.
    Local(LocalBackend),
    /// Shared state in Redis.
    Redis(RedisBackend),
    /// envoyproxy/ratelimit's fixed windows in Redis: the benchmark's baseline only.
    FixedWindow(FixedWindowBackend),
}

impl Backend {
    /// Whether a decision waits on a server (Redis), holding its request meanwhile: the local
    /// tables decide within the caller's turn.
    pub fn waits(&self) -> bool {
        !matches!(self, Backend::Local(_))
    }
}

/// The outcome of a demand whose limit has no bucket: a limit of 0 per unit (the first such
/// rate reported).
pub(crate) fn blocked(d: &Demand) -> Outcome {
    let (rate, unit) = match &d.limit.kind {
        Kind::Rates(r) => match r.iter().position(|r| r.requests_per_unit == 0) {
            Some(i) => (i, r[i].unit.duration()),
            None => (0, r.first().map_or(Duration::ZERO, |r| r.unit.duration())),
        },
        Kind::Unlimited => (0, Duration::ZERO),
    };
    Outcome::blocked(rate, unit)
}

/// An outcome that holds and says nothing, undecided (a demand with no rates, or a failed
/// decision answered by the policy).
pub(crate) fn undecided() -> Outcome {
    Outcome {
        holds: true,
        wait: None,
        remaining: 0,
        until_full: Duration::ZERO,
        rate: 0,
        decided: false,
    }
}
