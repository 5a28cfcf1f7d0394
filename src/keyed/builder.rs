//! [`KeyedLimiterBuilder`]: per-key quota overrides and the full-table policy.

use super::KeyedLimiter;
use crate::clock::{Clock, DefaultClock};
use crate::error::ConfigError;
use crate::quota::Quota;
use core::fmt;
use core::hash::Hash;
use std::collections::HashMap;

/// Builds a [`KeyedLimiter`] with per-key quotas or the fail-open policy.
///
/// ```
/// use tollgate::{KeyedLimiter, ManualClock, Quota};
/// let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap(), 1000, ManualClock::new())
///     .quota_for("premium".to_string(), Quota::per_second(1000).unwrap())
///     .fail_open(true)
///     .build()
///     .unwrap();
/// assert_eq!(limiter.try_acquire_by("premium", 500), Ok(()));
/// assert!(limiter.try_acquire_by("basic", 500).is_err());
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "keyed")))]
pub struct KeyedLimiterBuilder<K, C = DefaultClock> {
    quota: Quota,
    max_keys: usize,
    overrides: HashMap<K, Quota>,
    fail_open: bool,
    clock: C,
    /// The name and shadow mode (`named.rs`).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) named: super::named::Named,
}

impl<K, C: fmt::Debug> fmt::Debug for KeyedLimiterBuilder<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("overrides", &self.overrides.len())
            .field("fail_open", &self.fail_open)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiterBuilder<K, C> {
    /// Gives `key` its own quota (a premium tenant) instead of the default one. The override is
    /// found by the key's hash at every decision, so overrides cost one more hash lookup per call;
    /// without any, nothing is looked up.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 10, ManualClock::new())
    ///     .quota_for(7u32, Quota::per_second(5).unwrap())
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.quota_for(&7), Quota::per_second(5).unwrap());
    /// assert_eq!(limiter.quota_for(&8), Quota::per_second(1).unwrap());
    /// ```
    pub fn quota_for(mut self, key: K, quota: Quota) -> Self {
        self.overrides.insert(key, quota);
        self
    }

    /// When the table is full and no bucket can be evicted: `false` (the default) refuses a new
    /// key with `RetryAfter`; `true` admits it without tracking it. Both are counted.
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
    /// let b = KeyedLimiter::<u64, _>::builder(Quota::per_second(1).unwrap(), 0, ManualClock::new());
    /// assert_eq!(b.build().unwrap_err(), ConfigError::ZeroCapacity);
    /// ```
    pub fn build(self) -> Result<KeyedLimiter<K, C>, ConfigError> {
        self.build_seeded(None)
    }

    /// [`build`](KeyedLimiterBuilder::build) with the fingerprint seed given (a restore's) or
    /// drawn at random (`None`).
    pub(super) fn build_seeded(self, seed: Option<u64>) -> Result<KeyedLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        let limiter = KeyedLimiter::from_parts(
            self.quota,
            self.max_keys,
            self.clock,
            self.overrides,
            self.fail_open,
            seed,
        );
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let limiter = self.named.apply(limiter);
        Ok(limiter)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiter<K, C> {
    /// A builder: per-key quotas ([`quota_for`](KeyedLimiterBuilder::quota_for)) and the
    /// fail-open policy ([`fail_open`](KeyedLimiterBuilder::fail_open)).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _> =
    ///     KeyedLimiter::builder(Quota::per_second(5).unwrap(), 100, ManualClock::new()).build().unwrap();
    /// assert!(limiter.is_empty());
    /// ```
    pub fn builder(quota: Quota, max_keys: usize, clock: C) -> KeyedLimiterBuilder<K, C> {
        KeyedLimiterBuilder {
            quota,
            max_keys,
            overrides: HashMap::new(),
            fail_open: false,
            clock,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            named: Default::default(),
        }
    }
}
