//! One key's [`Limits`] with their decision words, ready for the hot path.

use crate::error::Denied;
use crate::gcra::{self, all, all::Rates};
use crate::limits::{Limits, MAX_LIMITS};
use crate::multi::Snapshots;
use crate::refusal::Refusal;
use crate::snapshot::Snapshot;

/// A policy's decision words: two quotas (or one, repeated) decided straight-line, three or
/// four through the general loop.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    Two(Rates<2>),
    Four(Rates<4>),
}

/// [`Limits`] and what every decision on them needs.
#[derive(Clone, Debug)]
pub(super) struct Policy {
    pub(super) limits: Limits,
    pub(super) len: usize,
    /// The smallest burst and its quota (the first of equals): a larger cost is refused before
    /// the clock is read.
    pub(super) min_burst: u64,
    pub(super) min_burst_index: usize,
    /// The refill of a whole burst of the slowest quota: the cap of a full-table wait.
    pub(super) slowest_refill: core::time::Duration,
    pub(super) kind: Kind,
}

impl Policy {
    pub(super) fn new(limits: Limits) -> Policy {
        let quotas = limits.quotas();
        let mut min_burst_index = 0;
        for (i, q) in quotas.iter().enumerate() {
            if q.burst() < quotas[min_burst_index].burst() {
                min_burst_index = i;
            }
        }
        let kind = if quotas.len() <= 2 {
            Kind::Two(Rates::new(&limits))
        } else {
            Kind::Four(Rates::new(&limits))
        };
        let slowest_refill = quotas
            .iter()
            .map(|q| q.refill_time(q.burst()))
            .max()
            .unwrap_or(core::time::Duration::MAX);
        Policy {
            slowest_refill,
            len: quotas.len(),
            min_burst: quotas[min_burst_index].burst(),
            min_burst_index,
            kind,
            limits,
        }
    }

    /// The refusal of a cost above the smallest burst.
    pub(super) fn exceeds(&self) -> Refusal {
        Refusal::new(Denied::ExceedsBurst, self.min_burst_index)
    }

    /// Where a key the table does not track starts: every quota full as of `evicted_at`, the
    /// latest eviction reading (see [`KeyedMultiLimiter`](super::KeyedMultiLimiter)).
    pub(super) fn start(&self, evicted_at: u64) -> [u64; MAX_LIMITS] {
        let q = self.limits.quotas();
        core::array::from_fn(|i| q[i.min(self.len - 1)].earned_floor(evicted_at))
    }

    /// The all-quotas decision on `states` (the first `len` meaningful).
    pub(super) fn decide(
        &self,
        states: &[u64; MAX_LIMITS],
        now: u64,
        cost: u64,
    ) -> Result<Option<[u64; MAX_LIMITS]>, Refusal> {
        let padded = all::pad::<MAX_LIMITS>(&states[..self.len]);
        let next = match &self.kind {
            Kind::Two(r) => {
                all::decide_pair([padded[0], padded[1]], now, r, cost)?.map(|[a, b]| [a, b, b, b])
            }
            Kind::Four(r) => all::decide(padded, now, r, cost)?,
        };
        Ok(next)
    }

    /// The first instant at which every quota is full (`u64::MAX`: never within the horizon).
    pub(super) fn full_at(&self, states: &[u64]) -> u64 {
        self.limits
            .quotas()
            .iter()
            .zip(states)
            .map(|(q, &s)| gcra::full_at(s, q))
            .max()
            .unwrap_or(0)
    }

    /// Whole tokens every quota holds at `now`.
    pub(super) fn available(&self, states: &[u64], now: u64) -> u64 {
        self.limits
            .quotas()
            .iter()
            .zip(states)
            .map(|(q, &s)| gcra::available(s, now, q))
            .min()
            .unwrap_or(0)
    }

    /// Every quota's snapshot at `now`, in the policy's order.
    pub(super) fn snapshots(&self, states: &[u64], now: u64) -> Snapshots {
        let snaps: [Snapshot; MAX_LIMITS] = core::array::from_fn(|i| {
            let i = i.min(self.len - 1);
            gcra::snapshot(states[i], now, &self.limits.quotas()[i])
        });
        Snapshots::from_padded(snaps, self.len)
    }
}
