//! [`KeyedLimiterBuilder`]: per-key policy overrides and the full-table policy.

use super::{KeyedLimiter, KeyedPolicy};
use crate::clock::{Clock, DefaultClock};
use crate::error::ConfigError;
use crate::limits::Limits;
use crate::quota::Quota;
use core::fmt;
use core::hash::Hash;
use std::collections::HashMap;

/// Builds a [`KeyedLimiter`] with per-key policies or the fail-open policy.
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
/// let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap(), 1000, ManualClock::new())
///     .override_quota("premium".to_string(), Quota::per_second(1000).unwrap())
///     .fail_open(true)
///     .build()
///     .unwrap();
/// assert_eq!(limiter.try_acquire_by("premium", 500), Ok(()));
/// assert!(limiter.try_acquire_by("basic", 500).is_err());
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct KeyedLimiterBuilder<K, P: KeyedPolicy = Quota, C = DefaultClock> {
    policy: P,
    max_keys: usize,
    overrides: HashMap<K, P>,
    fail_open: bool,
    clock: C,
    /// The name and shadow mode (`named.rs`).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) named: super::named::Named,
    /// The index's secret instead of a random one (tests whose outcome depends on the layout).
    #[cfg(test)]
    secret: Option<[u64; 2]>,
}

/// The builder of a [`KeyedMultiLimiter`](crate::KeyedMultiLimiter): a
/// [`KeyedLimiterBuilder`] of [`Limits`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
/// let per_day = |n| Quota::new(n, Duration::from_secs(86_400), n).unwrap();
/// let basic = Limits::new([Quota::per_second(10).unwrap(), per_day(10_000)]).unwrap();
/// let premium = Limits::new([Quota::per_second(1000).unwrap(), per_day(1_000_000)]).unwrap();
/// let limiter = KeyedMultiLimiter::builder(basic, 1000, ManualClock::new())
///     .override_quota("premium".to_string(), premium)
///     .build()
///     .unwrap();
/// assert_eq!(limiter.try_acquire_by("premium", 500), Ok(()));
/// assert!(limiter.try_acquire_by("basic", 500).is_err());
/// ```
pub type KeyedMultiLimiterBuilder<K, C = DefaultClock> = KeyedLimiterBuilder<K, Limits, C>;

impl<K, P: KeyedPolicy, C: fmt::Debug> fmt::Debug for KeyedLimiterBuilder<K, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("policy", &self.policy)
            .field("max_keys", &self.max_keys)
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiterBuilder<K, P, C> {
    /// Gives `key` its own policy (a premium tenant's quota; for [`Limits`], any number of
    /// quotas) instead of the default. Overrides cost one hash-map lookup per decision (by the
    /// key's fingerprint); without any, nothing is looked up.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 10, ManualClock::new())
    ///     .override_quota(7u32, Quota::per_second(5).unwrap())
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.quota_for(&7), Quota::per_second(5).unwrap());
    /// assert_eq!(limiter.quota_for(&8), Quota::per_second(1).unwrap());
    /// ```
    pub fn override_quota(mut self, key: K, policy: P) -> Self {
        self.overrides.insert(key, policy);
        self
    }

    /// When the table is full and no bucket can be evicted, a new key is refused with
    /// `RetryAfter` (`false`, the default) or admitted untracked, outside every bound (`true`).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 1, ManualClock::new())
    ///     .fail_open(true)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&1, 1), Ok(()));
    /// assert_eq!(limiter.try_acquire(&2, 1), Ok(())); // untracked
    /// assert_eq!(limiter.counters().admitted_untracked, 1);
    /// ```
    pub fn fail_open(mut self, fail_open: bool) -> Self {
        self.fail_open = fail_open;
        self
    }

    /// The limiter. Errors with [`ConfigError::ZeroCapacity`] when `max_keys` is 0.
    ///
    /// ```
    /// use tollgate::{ConfigError, KeyedLimiter, ManualClock, Quota};
    /// let b = KeyedLimiter::<u64, Quota, _>::builder(Quota::per_second(1).unwrap(), 0, ManualClock::new());
    /// assert_eq!(b.build().unwrap_err(), ConfigError::ZeroCapacity);
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, P, C>, ConfigError> {
        self.build_seeded(None)
    }

    /// Mixes the given secret into the index's home slots instead of a random one, so that a
    /// test sees the same layout (probe lengths, eviction order) in every run.
    #[cfg(all(test, feature = "persist"))]
    pub(crate) fn index_secret(mut self, secret: [u64; 2]) -> Self {
        self.secret = Some(secret);
        self
    }

    /// [`build`](KeyedLimiterBuilder::build) with the fingerprint seed given or drawn (`None`).
    pub(super) fn build_seeded(
        self,
        seed: Option<u64>,
    ) -> Result<KeyedLimiter<K, P, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        #[cfg(test)]
        let (secret, max_keys) = (self.secret, self.max_keys);
        #[allow(unused_mut)]
        let mut limiter = KeyedLimiter::from_parts(
            self.policy,
            self.max_keys,
            self.clock,
            self.overrides,
            self.fail_open,
            seed,
        );
        #[cfg(test)]
        if let Some(secret) = secret {
            // The index is still empty: swapping it loses nothing.
            limiter.index = super::Index::with_secret(max_keys.min(super::MAX_KEYS), secret);
        }
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let limiter = self.named.apply(limiter);
        Ok(limiter)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiterBuilder<K, Quota, C> {
    /// [`override_quota`](KeyedLimiterBuilder::override_quota).
    #[deprecated(
        note = "use `override_quota` (the builder sets with a verb; `quota_for` reads \
                         the limiter)"
    )]
    pub fn quota_for(self, key: K, quota: Quota) -> Self {
        self.override_quota(key, quota)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiterBuilder<K, Limits, C> {
    /// [`override_quota`](KeyedLimiterBuilder::override_quota).
    #[deprecated(
        note = "use `override_quota` (the builder sets with a verb; `limits_for` reads \
                         the limiter)"
    )]
    pub fn limits_for(self, key: K, limits: Limits) -> Self {
        self.override_quota(key, limits)
    }
}

impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiter<K, P, C> {
    /// A builder: per-key policies ([`override_quota`](KeyedLimiterBuilder::override_quota))
    /// and the fail-open policy ([`fail_open`](KeyedLimiterBuilder::fail_open)).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, Quota, _> =
    ///     KeyedLimiter::builder(Quota::per_second(5).unwrap(), 100, ManualClock::new()).build().unwrap();
    /// assert!(limiter.is_empty());
    /// ```
    pub fn builder(policy: P, max_keys: usize, clock: C) -> KeyedLimiterBuilder<K, P, C> {
        KeyedLimiterBuilder {
            policy,
            max_keys,
            overrides: HashMap::new(),
            fail_open: false,
            clock,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            named: Default::default(),
            #[cfg(test)]
            secret: None,
        }
    }
}
