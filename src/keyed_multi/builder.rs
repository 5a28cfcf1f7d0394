//! [`KeyedMultiLimiterBuilder`]: per-key policy overrides and the full-table policy.

use super::KeyedMultiLimiter;
use crate::clock::{Clock, DefaultClock};
use crate::error::ConfigError;
use crate::limits::Limits;
use core::fmt;
use core::hash::Hash;
use std::collections::HashMap;

/// Builds a [`KeyedMultiLimiter`] with per-key policies or the fail-open policy.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
/// let per_day = |n| Quota::new(n, Duration::from_secs(86_400), n).unwrap();
/// let basic = Limits::new([Quota::per_second(10).unwrap(), per_day(10_000)]).unwrap();
/// let premium = Limits::new([Quota::per_second(1000).unwrap(), per_day(1_000_000)]).unwrap();
/// let limiter = KeyedMultiLimiter::builder(basic, 1000, ManualClock::new())
///     .limits_for("premium".to_string(), premium)
///     .build()
///     .unwrap();
/// assert_eq!(limiter.try_acquire_by("premium", 500), Ok(()));
/// assert!(limiter.try_acquire_by("basic", 500).is_err());
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct KeyedMultiLimiterBuilder<K, C = DefaultClock> {
    limits: Limits,
    max_keys: usize,
    overrides: HashMap<K, Limits>,
    fail_open: bool,
    clock: C,
    /// The name and shadow mode (`keyed/named.rs`).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    named: crate::keyed::named::Named,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedMultiLimiterBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedMultiLimiterBuilder")
            .field("limits", &self.limits)
            .field("max_keys", &self.max_keys)
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiterBuilder<K, C> {
    /// Gives `key` its own policy (one to four quotas, any number of them independent of the
    /// default's) instead of the default one; found by the key's fingerprint at each decision
    /// (one more hash-map lookup per call; none without overrides).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let one = Limits::from(Quota::per_second(1).unwrap());
    /// let five = Limits::from(Quota::per_second(5).unwrap());
    /// let limiter = KeyedMultiLimiter::builder(one.clone(), 10, ManualClock::new())
    ///     .limits_for(7u32, five.clone())
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.limits_for(&7), &five);
    /// assert_eq!(limiter.limits_for(&8), &one);
    /// ```
    pub fn limits_for(mut self, key: K, limits: Limits) -> Self {
        self.overrides.insert(key, limits);
        self
    }

    /// When the table is full and no key can be evicted: `false` (the default) refuses a new
    /// key with `RetryAfter`; `true` admits it without tracking it (outside every bound).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::builder(Limits::from(Quota::per_second(1).unwrap()), 1, ManualClock::new())
    ///     .fail_open(true)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&1, 1), Ok(()));
    /// assert_eq!(limiter.try_acquire(&2, 1), Ok(())); // untracked
    /// assert_eq!(limiter.len(), 1);
    /// ```
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// The limiter. Errors with [`ConfigError::ZeroCapacity`] when `max_keys` is 0.
    ///
    /// ```
    /// use tollgate::{ConfigError, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let b = KeyedMultiLimiter::<u64, _>::builder(Limits::from(Quota::per_second(1).unwrap()), 0, ManualClock::new());
    /// assert_eq!(b.build().unwrap_err(), ConfigError::ZeroCapacity);
    /// ```
    pub fn build(self) -> Result<KeyedMultiLimiter<K, C>, ConfigError> {
        self.build_seeded(None)
    }

    /// [`build`](Self::build) with the fingerprint seed given (a restore's) or drawn at random.
    pub(super) fn build_seeded(
        self,
        seed: Option<u64>,
    ) -> Result<KeyedMultiLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let quotas = self
            .overrides
            .values()
            .chain([&self.limits])
            .map(|l| l.quotas().len())
            .max()
            .unwrap_or(1);
        #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(unused_mut))]
        let mut limiter = KeyedMultiLimiter::from_parts(
            self.limits,
            self.max_keys,
            self.clock,
            self.overrides,
            self.fail_open,
            seed,
        );
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        {
            limiter.observe = self.named.observer(limiter.max_keys, quotas);
        }
        Ok(limiter)
    }

    /// Names the limiter, as [`KeyedLimiterBuilder::name`](crate::KeyedLimiterBuilder::name):
    /// with the `metrics` feature every decision is recorded under the `limiter` label `name`
    /// (`tollgate_decisions_total`, the refusals' waits), each refusal also by the quota that
    /// refused (`tollgate_policy_refusals_total`, label `quota`: its index in the key's
    /// [`Limits`]; a new key refused for a full table counts against quota 0), and the table's
    /// gauges, evictions and full-table events (see [`crate::metrics`]); with `tracing`, its
    /// table-full events carry the name. The handles come from the recorder installed when
    /// [`build`](Self::build) runs.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::builder(Limits::from(Quota::per_second(5).unwrap()), 100, ManualClock::new())
    ///     .name("per-key-policy")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&"acme", 1), Ok(()));
    /// ```
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<alloc::string::String>) -> Self {
        self.named.name = Some(name.into());
        self
    }

    /// Shadow mode: every decision is made and recorded as usual (what would have been refused
    /// as `shadow_refused`, with its wait and its quota), then admitted. A refusal writes
    /// nothing, so turning shadow off later enforces from the state an enforcing limiter would
    /// have reached. Recorded only for a [named](Self::name) limiter; the
    /// [counters](KeyedMultiLimiter::counters) count what callers got.
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter = KeyedMultiLimiter::builder(Limits::from(Quota::per_second(1).unwrap()), 100, ManualClock::new())
    ///     .name("trial")
    ///     .shadow(true)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&"acme", 1), Ok(()));
    /// assert_eq!(limiter.try_acquire(&"acme", 1), Ok(())); // would have been refused
    /// assert_eq!(limiter.available(&"acme"), 0);
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn shadow(mut self, on: bool) -> Self {
        self.named.shadow = on;
        self
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiter<K, C> {
    /// A builder: per-key policies ([`limits_for`](KeyedMultiLimiterBuilder::limits_for)) and
    /// the fail-open policy ([`fail_open`](KeyedMultiLimiterBuilder::fail_open)).
    ///
    /// ```
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter: KeyedMultiLimiter<String, _> =
    ///     KeyedMultiLimiter::builder(Limits::from(Quota::per_second(5).unwrap()), 100, ManualClock::new())
    ///         .build()
    ///         .unwrap();
    /// assert!(limiter.is_empty());
    /// ```
    pub fn builder(limits: Limits, max_keys: usize, clock: C) -> KeyedMultiLimiterBuilder<K, C> {
        KeyedMultiLimiterBuilder {
            limits,
            max_keys,
            overrides: HashMap::new(),
            fail_open: false,
            clock,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            named: Default::default(),
        }
    }
}
