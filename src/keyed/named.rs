//! Naming a [`KeyedLimiter`] (features `metrics`, `tracing`): the builder's `name` and
//! `shadow`, applied once at `build`.

use alloc::string::String;

use super::{KeyedLimiter, KeyedLimiterBuilder, KeyedPolicy};
use crate::observe::KeyedObserver;

/// What a keyed builder was told: the name and shadow mode.
#[derive(Debug, Default)]
pub(crate) struct Named {
    pub(crate) name: Option<String>,
    pub(crate) shadow: bool,
}

impl Named {
    /// Gives `limiter` its observer, its handles resolved now from the installed recorder.
    pub(super) fn apply<K, P: KeyedPolicy, C>(
        self,
        mut limiter: KeyedLimiter<K, P, C>,
    ) -> KeyedLimiter<K, P, C> {
        let quotas = if P::SEVERAL { limiter.most_quotas() } else { 0 };
        limiter.observe =
            KeyedObserver::with_quotas(self.name.as_deref(), limiter.max_keys, self.shadow, quotas);
        limiter
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiterBuilder<K, P, C> {
    /// Names the limiter. With `metrics` it records under the `limiter` label `name` every
    /// decision and refusal wait, for a policy of several quotas each refusal by the quota that
    /// refused (a table-full refusal counts against quota 0), the keys tracked and the capacity,
    /// evictions and the new keys that met a full table ([`crate::metrics`] lists the series),
    /// with the recorder installed when [`build`](KeyedLimiterBuilder::build) runs. With
    /// `tracing`, its table-full events carry the name.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(5).unwrap(), 100, ManualClock::new())
    ///     .name("per-tenant")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.try_acquire(&"acme", 1), Ok(()));
    /// ```
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.named.name = Some(name.into());
        self
    }

    /// Shadow mode: every decision is made and recorded as usual (a would-be refusal as
    /// `shadow_refused`, with its wait; only for a [named](KeyedLimiterBuilder::name) limiter),
    /// then admitted. A refusal writes nothing, so turning shadow off later enforces from the
    /// state an enforcing limiter would have reached. The [counters](KeyedLimiter::counters)
    /// count what callers got.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap(), 100, ManualClock::new())
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
