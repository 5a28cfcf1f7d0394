//! The headers of a decision describe the quota it was made under, whatever reconfiguration
//! races it: a `set_quota` landing right after the decision (before anything else reads the
//! bucket) is modelled by a wrapper that makes it there, deterministically.

use std::cell::Cell;
use std::time::Duration;

use http::header::{HeaderMap, RETRY_AFTER};
use tollgate::{Bucket, Denied, Limiter, Limits, ManualClock, Quota, Refusal, Snapshot, Snapshots};

use super::{decide, Decision};
use crate::RateLimitHeaders;

/// A bucket whose quota is replaced by `next` (when set) right after its next decision: another
/// thread's `set_quota` landing between the decision and whatever reads the bucket next.
struct ReconfiguredAfter {
    bucket: Bucket<ManualClock>,
    next: Cell<Option<Quota>>,
}

impl ReconfiguredAfter {
    fn new(quota: Quota, clock: &ManualClock) -> Self {
        ReconfiguredAfter {
            bucket: Bucket::with_clock(quota, clock.clone()),
            next: Cell::new(None),
        }
    }

    /// Passes `decided` through after the pending reconfiguration, if any.
    fn then_reconfigure<R>(&self, decided: R) -> R {
        if let Some(quota) = self.next.take() {
            self.bucket.set_quota(quota);
        }
        decided
    }
}

impl Limiter for ReconfiguredAfter {
    type Key = ();

    fn decide(&self, key: &(), cost: u64) -> Result<(), Refusal> {
        self.then_reconfigure(self.bucket.decide(key, cost))
    }
    fn decide_or_snapshots(&self, key: &(), cost: u64) -> Result<(), (Refusal, Snapshots)> {
        self.then_reconfigure(self.bucket.decide_or_snapshots(key, cost))
    }
    fn decide_snapshots(&self, key: &(), cost: u64) -> (Result<(), Refusal>, Snapshots) {
        self.then_reconfigure(self.bucket.decide_snapshots(key, cost))
    }
    fn limits(&self, key: &()) -> Option<Limits> {
        self.bucket.limits(key)
    }
    fn decide_snapshots_limits(
        &self,
        key: &(),
        cost: u64,
    ) -> (Result<(), Refusal>, Snapshots, Option<Limits>) {
        self.then_reconfigure(self.bucket.decide_snapshots_limits(key, cost))
    }
    fn decide_or_snapshots_limits(
        &self,
        key: &(),
        cost: u64,
    ) -> Result<(), (Refusal, Snapshots, Option<Limits>)> {
        self.then_reconfigure(self.bucket.decide_or_snapshots_limits(key, cost))
    }
}

/// Every header `decision` gets (IETF, legacy and `Retry-After`), by name.
fn headers(decision: &Decision) -> HeaderMap {
    let mut map = HeaderMap::new();
    RateLimitHeaders::default()
        .on_success(true)
        .legacy(true)
        .write(decision, &mut map);
    map
}

#[test]
fn a_quota_lowered_after_the_decision_is_not_reported_with_its_snapshot() {
    let clock = ManualClock::new();
    let limiter = ReconfiguredAfter::new(Quota::per_second(100).unwrap(), &clock);
    limiter.next.set(Some(Quota::per_second(10).unwrap()));
    let d = decide(&limiter, &(), 20, true);
    assert_eq!(d.verdict, Ok(()));
    assert_eq!(
        (d.snapshot, d.quota),
        (
            Some(Snapshot::new(80, Duration::from_millis(200))),
            Quota::per_second(100).ok()
        ),
        "the snapshot of the quota the decision was made under, with that quota"
    );
    let map = headers(&d);
    assert_eq!(map["ratelimit-policy"], "\"default\";q=100;w=1");
    assert_eq!(map["ratelimit"], "\"default\";r=80;t=1");
    assert_eq!(map["x-ratelimit-limit"], "100");
}

#[test]
fn a_quota_raised_after_a_refusal_is_not_reported_with_its_snapshot() {
    let clock = ManualClock::new();
    let slow = Quota::new(10, Duration::from_secs(100), 10).unwrap();
    let limiter = ReconfiguredAfter::new(slow, &clock);
    limiter.bucket.drain();
    for report in [true, false] {
        limiter.next.set(Some(Quota::per_second(100).unwrap()));
        let d = decide(&limiter, &(), 1, report);
        assert_eq!(d.verdict, Err(Denied::RetryAfter(Duration::from_secs(10))));
        assert_eq!(d.quota, Some(slow), "report {report}");
        let map = headers(&d);
        assert_eq!(map["ratelimit-policy"], "\"default\";q=10;w=100");
        assert_eq!(map["ratelimit"], "\"default\";r=0;t=10");
        assert_eq!(map[RETRY_AFTER], "10");
        limiter.bucket.set_quota(slow);
        limiter.bucket.drain();
    }
}
