//! The Redis backend (`--redis URL`): one `RedisLimiter::decide_keys` call per request, every
//! bucket of the request in one script call (one round trip, all or nothing; shadow-mode
//! buckets ride along, decided alone). When Redis cannot decide within the timeout, the
//! configured policy answers.
//!
//! Keys are `tollgate-rls:{d:H}DOMAIN\x1fBUCKET`, `H` a stable 64-bit hash of the domain: every
//! key of a domain carries one hash tag, so on Redis Cluster a request's keys share one slot
//! (and a domain lives on one shard).

use super::local::{Prepared, Retiring};
use super::{limits_of, Demand, LocalBackend, Outcome};
use crate::config::Config;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use tollgate::Quota;
use tollgate_redis::{CheckedLimits, KeyDemand, RedisLimiter};

/// What [`RedisBackend::prepare`] built, not yet swapped in.
#[derive(Debug)]
pub(crate) struct PreparedPolicies<'a> {
    next: HashMap<String, Arc<CheckedLimits>>,
    fallback: Option<Prepared<'a>>,
}

/// What [`RedisBackend::commit`] swapped out, dropped (and the fallback's tables retired) by
/// [`finish`](Swapped::finish) once decisions go on.
#[derive(Debug)]
pub(crate) struct Swapped<'a> {
    old: HashMap<String, Arc<CheckedLimits>>,
    fallback: Option<Retiring<'a>>,
}

impl Swapped<'_> {
    /// Retires the fallback's old tables and drops the old policies.
    pub(crate) fn finish(self) {
        if let Some(r) = self.fallback {
            r.finish();
        }
        drop(self.old);
    }
}

/// What answers when Redis cannot decide (timeout, breaker open, connection lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRedisError {
    /// gRPC `UNAVAILABLE` (HTTP 500 on `/json`): Envoy's `failure_mode_deny` decides.
    Unavailable,
    /// Every descriptor `OK`.
    Allow,
    /// The local backend decides (per-process buckets of the same limits).
    Local,
}

/// Why a Redis decision failed, in words for the client (a gRPC status message, a `/json`
/// body): they name no Redis key, whose text holds the request's descriptor values (the
/// client's own, possibly private ones).
#[derive(Debug, Clone)]
pub struct RedisFailure(pub String);

/// The Redis backend.
pub struct RedisBackend {
    limiter: RedisLimiter,
    policies: RwLock<HashMap<String, Arc<CheckedLimits>>>,
    on_error: OnRedisError,
    fallback: Option<LocalBackend>,
    /// Lines of the log about malformed keys: ten at once, then one a second, so that calls
    /// meeting a bad key again and again do not flood stderr. Boxed: inline, the bucket would
    /// make `Backend::Redis` far larger than the other variants.
    log_budget: Box<tollgate::Bucket<tollgate::StdClock>>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("limiter", &self.limiter)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

/// The prefix tollgate-redis gives every key tollgate-rls names.
const KEY_PREFIX: &str = "tollgate-rls:";

/// The bytes of a key of a domain before its bucket, besides the domain: the hash tag
/// (`{d:` and 16 hex digits and `}`) and the `\x1f` that ends the domain ([`key_start`]).
const KEY_TAG_BYTES: usize = 21;

/// What one bucket's key adds, besides its bucket, to what a decision on Redis holds while it
/// waits, for a domain of `domain_len` bytes: the key built here ([`key_start`] and the
/// bucket), and tollgate-redis's copy of it with [`KEY_PREFIX`], which its command holds; and
/// the fixed part of each table entry [`RedisBackend::decide`] holds for its demand (the
/// demand, its key's header, its outcome, its index, policy and call).
pub(crate) const fn key_fixed_bytes(domain_len: usize) -> usize {
    2 * (KEY_TAG_BYTES + domain_len) + KEY_PREFIX.len() + DEMAND_ENTRIES_BYTES
}

/// The fixed part of what [`RedisBackend::decide`] holds per demand while it waits.
const DEMAND_ENTRIES_BYTES: usize = std::mem::size_of::<Demand>()
    + std::mem::size_of::<String>()
    + std::mem::size_of::<Outcome>()
    + std::mem::size_of::<usize>()
    + std::mem::size_of::<Arc<CheckedLimits>>()
    + std::mem::size_of::<KeyDemand<'static>>();

/// What every key of `domain` starts with ([`KEY_TAG_BYTES`] more than the domain): the hash
/// tag, the domain, and the `\x1f` that ends it.
fn key_start(domain: &str) -> String {
    format!("{{d:{:016x}}}{domain}\u{1f}", fnv(domain))
}

/// FNV-1a, 64 bits: the domain's hash tag (stable across processes and versions).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl RedisBackend {
    /// Connects (within `timeout` per decision, and two seconds to connect).
    pub async fn connect(
        url: &str,
        timeout: Duration,
        on_error: OnRedisError,
        fallback: Option<LocalBackend>,
    ) -> Result<RedisBackend, String> {
        // The builder's quota is unused: every call names its keys' policies.
        let any = Quota::per_second(1).map_err(|e| e.to_string())?;
        let limiter = RedisLimiter::builder(url, any)
            .prefix(KEY_PREFIX)
            .timeout(timeout)
            .name("rls")
            .build()
            .await
            .map_err(|e| format!("redis {url}: {e}"))?;
        let log_quota = Quota::new(1, Duration::from_secs(1), 10).map_err(|e| e.to_string())?;
        Ok(RedisBackend {
            limiter,
            policies: RwLock::new(HashMap::new()),
            on_error,
            fallback,
            log_budget: Box::new(tollgate::Bucket::with_clock(
                log_quota,
                tollgate::StdClock::new(),
            )),
        })
    }

    /// The policy on errors.
    pub fn on_error(&self) -> OnRedisError {
        self.on_error
    }

    /// Takes `config`'s limits (and hands them to the local fallback, if any).
    pub fn apply(&self, config: &Config) {
        self.commit(self.prepare(config)).finish();
    }

    /// The first half of [`apply`](Self::apply): the policies and the fallback's tables
    /// (`LocalBackend::prepare`), built without holding a lock decisions take.
    pub(crate) fn prepare(&self, config: &Config) -> PreparedPolicies<'_> {
        let mut next = HashMap::new();
        for limit in config.limits() {
            if let Some(limits) = limits_of(limit) {
                // Checked at load for this backend (`Target::Redis`). A config loaded for
                // another target may hold a rate the script refuses: that limit gets no
                // policy, and its demands are refused (`blocked`), never decided inexactly.
                if let Ok(c) = CheckedLimits::new(limits) {
                    next.insert(limit.id.clone(), Arc::new(c));
                }
            }
        }
        PreparedPolicies {
            next,
            fallback: self.fallback.as_ref().map(|f| f.prepare(config)),
        }
    }

    /// The second half of [`apply`](Self::apply): swaps in what `prepare` built (see
    /// `LocalBackend::commit`); the caller holds the config's write lock around it.
    pub(crate) fn commit<'a>(&'a self, prepared: PreparedPolicies<'a>) -> Swapped<'a> {
        let old = std::mem::replace(
            &mut *self
                .policies
                .write()
                .unwrap_or_else(PoisonError::into_inner),
            prepared.next,
        );
        let fallback = match (&self.fallback, prepared.fallback) {
            (Some(f), Some(p)) => Some(f.commit(p)),
            _ => None,
        };
        Swapped { old, fallback }
    }

    /// The local fallback (`OnRedisError::Local`).
    pub fn fallback(&self) -> Option<&LocalBackend> {
        self.fallback.as_ref()
    }

    /// Decides `demands` of `domain` in one script call.
    pub async fn decide(
        &self,
        domain: &str,
        demands: &[Demand],
    ) -> Result<Vec<Outcome>, RedisFailure> {
        let tag = key_start(domain);
        let keys: Vec<String> = demands
            .iter()
            .map(|d| format!("{tag}{}", d.bucket))
            .collect();
        // Demands with no policy (a limit of 0 per unit) are answered here. A limit the
        // current config no longer has (a reload between the request's plan and this call) is
        // decided under its own rates, as the plan had it, never refused for being missing; a
        // limit of 0 per unit in the plan refuses even if a reload has lifted it since (the
        // plan made the request's other buckets reads: nothing would be debited).
        let (with, policies): (Vec<usize>, Vec<Arc<CheckedLimits>>) = {
            let p = self.policies.read().unwrap_or_else(PoisonError::into_inner);
            demands
                .iter()
                .enumerate()
                .filter(|(_, d)| d.limit.blocking_rate().is_none())
                .filter_map(|(i, d)| {
                    let own = || {
                        let limits = super::limits_of(&d.limit)?;
                        CheckedLimits::new(limits).ok().map(Arc::new)
                    };
                    p.get(&d.limit.id).cloned().or_else(own).map(|c| (i, c))
                })
                .unzip()
        };
        let mut out: Vec<Outcome> = demands.iter().map(super::blocked).collect();
        if with.is_empty() {
            return Ok(out);
        }
        // A check-only demand (hits 0) must hold one hit, and a demand of a request that a
        // rate of 0 refuses must hold its hits; neither is debited.
        let calls: Vec<KeyDemand<'_>> = with
            .iter()
            .zip(&policies)
            .map(|(&i, p)| {
                let d = &demands[i];
                KeyDemand {
                    key: &keys[i],
                    limits: p,
                    cost: d.need(),
                    alone: !d.enforce,
                    check: d.hits == 0 || d.read,
                }
            })
            .collect();
        let decided = self
            .limiter
            .decide_keys(&calls)
            .await
            .map_err(|e| self.failure(e))?;
        for (&i, k) in with.iter().zip(decided) {
            out[i] = Outcome::from_parts(k.verdict, &k.snapshots);
        }
        Ok(out)
    }

    /// A failed decision's [`RedisFailure`]. A malformed value's key is logged (escaped, within
    /// `log_budget`) for the operator, who deletes it, and left out of the answer; the other
    /// errors name no key and are answered as they are.
    fn failure(&self, e: tollgate_redis::Error) -> RedisFailure {
        match e {
            tollgate_redis::Error::Malformed { key, reason } => {
                if self.log_budget.try_acquire(1).is_ok() {
                    crate::server::log(format_args!(
                        "the Redis key {key:?} holds a value that is not a tollgate \
                         state ({reason:?}); delete it (DEL) to give the key a full bucket"
                    ));
                }
                RedisFailure(
                    "a Redis key of this request holds a value that is not a tollgate state \
                     (tollgate-rls logs its name)"
                        .into(),
                )
            }
            e => RedisFailure(e.to_string()),
        }
    }

    /// What answers a failed decision under [`OnRedisError::Allow`].
    pub fn allow_all(demands: &[Demand]) -> Vec<Outcome> {
        demands.iter().map(|_| super::undecided()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_starts_with_its_tag_and_domain() {
        for domain in ["", "d", "a much longer domain, with \u{e9} in it"] {
            let start = key_start(domain);
            assert_eq!(start.len(), KEY_TAG_BYTES + domain.len(), "{start:?}");
            assert!(start.ends_with(&format!("}}{domain}\u{1f}")), "{start:?}");
        }
    }
}
