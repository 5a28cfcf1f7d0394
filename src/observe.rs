//! What the keyed table and the timer report (features `metrics`, `tracing`), so that their
//! paths hold one-line hooks. Tracing events mark state changes only, never a decision: a keyed
//! table becoming full and ceasing to be, the timer thread failing to start.

#[cfg(feature = "keyed")]
pub(crate) use keyed::KeyedObserver;

#[cfg(feature = "keyed")]
mod keyed {
    #[cfg(feature = "tracing")]
    use crate::sync::{AtomicU32, Ordering};
    #[cfg(feature = "metrics")]
    use crate::{metrics::Handles, refusal::Refusal, Denied};

    /// A keyed limiter's name, metric handles and table-full flag.
    #[derive(Debug)]
    // `pub` for the keyed policies' sealed `observe` hook, which names it.
    #[cfg_attr(not(feature = "metrics"), allow(unreachable_pub))]
    pub struct KeyedObserver {
        #[cfg(feature = "tracing")]
        name: Option<alloc::boxed::Box<str>>,
        #[cfg(feature = "metrics")]
        metrics: Option<(Handles, crate::metrics::TableMetrics)>,
        #[cfg(feature = "metrics")]
        shadow: bool,
        /// Whether the table is full (set by a key turned away, cleared by an eviction).
        #[cfg(feature = "tracing")]
        full: AtomicU32,
    }

    impl KeyedObserver {
        /// The observer of a limiter named `name` (or unnamed), of at most `capacity` keys.
        pub(crate) fn new(name: Option<&str>, capacity: u64, shadow: bool) -> KeyedObserver {
            KeyedObserver::with_quotas(name, capacity, shadow, 0)
        }

        /// [`new`](Self::new) for a table of policies of up to `quotas` quotas (0: of single
        /// quotas), whose refusals are also counted by quota.
        #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
        pub(crate) fn with_quotas(
            name: Option<&str>,
            capacity: u64,
            shadow: bool,
            quotas: usize,
        ) -> KeyedObserver {
            KeyedObserver {
                #[cfg(feature = "tracing")]
                name: name.map(Into::into),
                #[cfg(feature = "metrics")]
                metrics: name.map(|name| {
                    let name = metrics::SharedString::from(alloc::string::String::from(name));
                    let table = crate::metrics::TableMetrics::new(name.clone(), capacity);
                    (Handles::new(name, quotas), table)
                }),
                #[cfg(feature = "metrics")]
                shadow,
                #[cfg(feature = "tracing")]
                full: AtomicU32::new(0),
            }
        }

        /// Whether every decision is admitted after being recorded (shadow mode).
        #[cfg(feature = "metrics")]
        #[inline]
        pub(crate) fn is_shadow(&self) -> bool {
            self.shadow
        }

        /// Records a decision; returns what the caller gets (`Ok` in shadow mode).
        #[cfg(feature = "metrics")]
        #[inline]
        pub(crate) fn decided(&self, verdict: Result<(), Denied>) -> Result<(), Denied> {
            match &self.metrics {
                Some((Handles::One(d), _)) => d.decide(self.shadow, verdict),
                Some((Handles::Policy(p), _)) => p.decide(self.shadow, verdict, 0),
                None if self.shadow => Ok(()),
                None => verdict,
            }
        }

        /// [`decided`](Self::decided) for a policy's decision.
        #[cfg(feature = "metrics")]
        #[inline]
        pub(crate) fn decided_policy(&self, verdict: Result<(), Refusal>) -> Result<(), Refusal> {
            match &self.metrics {
                Some((handles, _)) => handles.decide(self.shadow, verdict),
                None if self.shadow => Ok(()),
                None => verdict,
            }
        }

        /// A new key met a full table: admitted untracked (`fail_open`) or refused.
        #[cold]
        pub(crate) fn table_full(&self, admitted: bool) {
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.full[usize::from(admitted)].increment(1);
            }
            #[cfg(feature = "tracing")]
            if self.full.swap(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    limiter = self.name.as_deref().unwrap_or(""),
                    fail_open = admitted,
                    "tollgate: keyed table full, no bucket can be evicted: new keys are {}",
                    if admitted {
                        "admitted untracked"
                    } else {
                        "refused"
                    },
                );
            }
        }

        /// A key was inserted; the table tracks `len` keys (called under the table's mutex).
        #[cold]
        pub(crate) fn inserted(&self, len: u64) {
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.keys.set(len as f64);
            }
            let _ = len;
        }

        /// A sweep step evicted `evicted` buckets; the table tracks `len` keys.
        #[cold]
        pub(crate) fn swept(&self, evicted: u64, len: u64) {
            if evicted == 0 {
                return;
            }
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.evictions.increment(evicted);
                table.keys.set(len as f64);
            }
            #[cfg(feature = "tracing")]
            if self.full.swap(0, Ordering::Relaxed) == 1 {
                tracing::info!(
                    limiter = self.name.as_deref().unwrap_or(""),
                    evicted,
                    keys = len,
                    "tollgate: keyed table no longer full: evictions made room",
                );
            }
        }
    }
}

/// The timer thread could not be started; the next attempt is after `backoff`.
#[cfg(feature = "tracing")]
#[cold]
pub(crate) fn timer_spawn_failed(backoff: core::time::Duration) {
    tracing::error!(
        retry_in = ?backoff,
        "tollgate: the timer thread failed to start; async waits re-poll at a bounded rate until it does",
    );
}
