//! What the keyed table and the timer report (features `metrics`, `tracing`): the one-line
//! hooks in `keyed.rs` and `wait/timer.rs` call into here, so those paths hold no metrics code.
//!
//! Tracing events mark state changes only, never a decision: a keyed table becoming full (a
//! new key refused or admitted untracked for want of room) and ceasing to be (an eviction made
//! room), the timer thread failing to start.

#[cfg(feature = "keyed")]
pub(crate) use keyed::KeyedObserver;

#[cfg(feature = "keyed")]
mod keyed {
    #[cfg(feature = "tracing")]
    use crate::sync::{AtomicU32, Ordering};
    #[cfg(feature = "metrics")]
    use crate::{refusal::Refusal, Denied};

    /// The decision handles: one quota's, or a policy's (which also count by refusing quota).
    #[cfg(feature = "metrics")]
    #[derive(Debug)]
    enum Decisions {
        One(crate::metrics::DecisionMetrics),
        Policy(crate::metrics::PolicyMetrics),
    }

    /// A keyed limiter's name, metric handles and table-full flag.
    #[derive(Debug)]
    // `pub` for the keyed policies' sealed `observe` hook (feature `metrics`), which names it.
    #[cfg_attr(not(feature = "metrics"), allow(unreachable_pub))]
    pub struct KeyedObserver {
        #[cfg(feature = "tracing")]
        name: Option<alloc::boxed::Box<str>>,
        #[cfg(feature = "metrics")]
        metrics: Option<(Decisions, crate::metrics::TableMetrics)>,
        #[cfg(feature = "metrics")]
        shadow: bool,
        /// Whether the table is full: set by the first new key it turned away, cleared by the
        /// first eviction after that. Only its flips emit events.
        #[cfg(feature = "tracing")]
        full: AtomicU32,
    }

    impl KeyedObserver {
        /// The observer of a limiter named `name` (unnamed: no metrics, unnamed events),
        /// tracking at most `capacity` keys.
        pub(crate) fn new(name: Option<&str>, capacity: u64, shadow: bool) -> KeyedObserver {
            KeyedObserver::with_quotas(name, capacity, shadow, 0)
        }

        /// [`new`](Self::new) for a table of policies of up to `quotas` quotas (0: of single
        /// quotas): its refusals are also counted by the quota that refused
        /// ([`crate::metrics::POLICY_REFUSALS`]).
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
                    let decisions = if quotas == 0 {
                        Decisions::One(crate::metrics::DecisionMetrics::new(name.clone()))
                    } else {
                        Decisions::Policy(crate::metrics::PolicyMetrics::new(name.clone(), quotas))
                    };
                    (decisions, crate::metrics::TableMetrics::new(name, capacity))
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
                Some((Decisions::One(d), _)) => d.decide(self.shadow, verdict),
                Some((Decisions::Policy(p), _)) => p.decide(self.shadow, verdict, 0),
                None if self.shadow => Ok(()),
                None => verdict,
            }
        }

        /// [`decided`](Self::decided) for a policy's decision, which names the quota that
        /// refused; returns what the caller gets (`Ok` in shadow mode).
        #[cfg(feature = "metrics")]
        #[inline]
        pub(crate) fn decided_policy(&self, verdict: Result<(), Refusal>) -> Result<(), Refusal> {
            if let Some((decisions, _)) = &self.metrics {
                let (denied, index) = match &verdict {
                    Ok(()) => (Ok(()), 0),
                    Err(refusal) => (Err(refusal.denied()), refusal.quota_index()),
                };
                let _ = match decisions {
                    Decisions::One(d) => d.decide(self.shadow, denied),
                    Decisions::Policy(p) => p.decide(self.shadow, denied, index),
                };
            }
            if self.shadow {
                return Ok(());
            }
            verdict
        }

        /// A new key met a full table: admitted untracked (`fail_open`) or refused.
        #[cold]
        pub(crate) fn table_full(&self, admitted: bool) {
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.table_full(admitted);
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
            let _ = admitted;
        }

        /// A key was inserted; the table tracks `len` keys (called under the table's mutex).
        #[cold]
        pub(crate) fn inserted(&self, len: u64) {
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.len(len);
            }
            let _ = len;
        }

        /// A sweep step evicted `evicted` buckets; the table tracks `len` keys (under the
        /// table's mutex).
        #[cold]
        pub(crate) fn swept(&self, evicted: u64, len: u64) {
            if evicted == 0 {
                return;
            }
            #[cfg(feature = "metrics")]
            if let Some((_, table)) = &self.metrics {
                table.evicted(evicted);
                table.len(len);
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
            let _ = len;
        }
    }
}

/// The timer thread could not be started; the next attempt is after `backoff` (until then
/// async waits re-poll their clock instead of sleeping on the timer).
#[cfg(feature = "tracing")]
#[cold]
pub(crate) fn timer_spawn_failed(backoff: core::time::Duration) {
    tracing::error!(
        retry_in = ?backoff,
        "tollgate: the timer thread failed to start; async waits re-poll at a bounded rate until it does",
    );
}
