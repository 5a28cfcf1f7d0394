//! The headers of a decision describe the quota it was made under, whatever reconfiguration
//! races it: a `set_quota` landing right after the decision (before anything else reads the
//! bucket) is modelled by a wrapper that makes it there, deterministically. Through a limiter on
//! `Limiter`'s default `decide_snapshots_limits` and `decide_or_snapshots_limits` (one written
//! outside tollgate), a decision that such a change straddles carries no quota, and its headers
//! no `RateLimit` fields: never the new quota with the old quota's snapshot.

use std::cell::Cell;
use std::time::Duration;

use http::header::{HeaderMap, RETRY_AFTER};
use tollgate::{Bucket, Denied, Limiter, Limits, ManualClock, Quota, Refusal, Snapshot, Snapshots};
use tollgate_testkit::rng::Rng;

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

/// A limiter written outside tollgate, on `Limiter`'s defaults for the quotas (it implements
/// neither `decide_snapshots_limits` nor `decide_or_snapshots_limits`): `ReconfiguredAfter`'s
/// decisions, with the same reconfiguration right after each.
struct OnDefaults<'a>(&'a ReconfiguredAfter);

impl Limiter for OnDefaults<'_> {
    type Key = ();

    fn decide(&self, key: &(), cost: u64) -> Result<(), Refusal> {
        self.0.decide(key, cost)
    }
    fn decide_or_snapshots(&self, key: &(), cost: u64) -> Result<(), (Refusal, Snapshots)> {
        self.0.decide_or_snapshots(key, cost)
    }
    fn decide_snapshots(&self, key: &(), cost: u64) -> (Result<(), Refusal>, Snapshots) {
        self.0.decide_snapshots(key, cost)
    }
    fn limits(&self, key: &()) -> Option<Limits> {
        self.0.limits(key)
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

/// The integer parameter `name` of a single-item header value (`"default";q=10;w=1`).
fn param(map: &HeaderMap, header: &str, name: &str) -> Option<u64> {
    let value = map.get(header)?.to_str().unwrap();
    let prefix = format!("{name}=");
    value
        .split(';')
        .find_map(|p| p.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
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

/// On the trait's defaults, a decision that a quota change straddles (lowered after an
/// admission, raised after a refusal in either report mode) reports its snapshot without a
/// quota: the headers carry `Retry-After` alone, not the new quota with the old one's snapshot.
/// A decision no change straddles reports the quota in force.
#[test]
fn on_the_defaults_a_straddled_decision_reports_no_quota() {
    let clock = ManualClock::new();
    let inner = ReconfiguredAfter::new(Quota::per_second(100).unwrap(), &clock);
    let limiter = OnDefaults(&inner);
    inner.next.set(Some(Quota::per_second(10).unwrap()));
    let d = decide(&limiter, &(), 20, true);
    assert_eq!(
        (d.verdict, d.snapshot, d.quota),
        (
            Ok(()),
            Some(Snapshot::new(80, Duration::from_millis(200))),
            None
        ),
        "the snapshot of the quota the decision was made under, without the new quota"
    );
    let map = headers(&d);
    assert!(map.is_empty(), "{map:?}");
    let slow = Quota::new(10, Duration::from_secs(100), 10).unwrap();
    inner.bucket.set_quota(slow);
    inner.bucket.drain();
    for report in [true, false] {
        inner.next.set(Some(Quota::per_second(100).unwrap()));
        let d = decide(&limiter, &(), 1, report);
        assert_eq!(d.verdict, Err(Denied::RetryAfter(Duration::from_secs(10))));
        assert_eq!(
            (d.snapshot, d.quota),
            (Some(Snapshot::new(0, Duration::from_secs(100))), None),
            "report {report}"
        );
        let map = headers(&d);
        assert_eq!(map.len(), 1, "Retry-After alone: {map:?}");
        assert_eq!(map[RETRY_AFTER], "10");
        inner.bucket.set_quota(slow);
        inner.bucket.drain();
    }
    let d = decide(&limiter, &(), 1, true);
    assert_eq!(d.quota, Some(slow), "no change straddled it");
    assert_eq!(headers(&d)["ratelimit-policy"], "\"default\";q=10;w=100");
}

/// Quotas exact and not (3 or more tokens per reduced period round), bursts of 3 to 1000.
fn quotas() -> [Quota; 6] {
    let s = Duration::from_secs;
    [
        Quota::per_second(100).unwrap(),
        Quota::new(10, s(100), 10).unwrap(),
        Quota::per_second(1000).unwrap().with_burst(5).unwrap(),
        Quota::new(3, s(1), 3).unwrap(),
        Quota::new(7, s(60), 50).unwrap(),
        Quota::new(1000, s(3600), 1000).unwrap(),
    ]
}

/// How far past `refill_time(burst)` a snapshot's `until_full` may reach without reservations:
/// an inexact quota's rounding leaves a bucket it emptied one unit above empty, and a quota
/// change carries that unit as owed, `1 / scale` of a token (`scale` at least 10^6 here), which
/// the slowest of these quotas refills in 10 µs.
fn slack() -> Duration {
    let token = quotas().iter().map(|q| q.refill_time(1)).max().unwrap();
    let scale = quotas().iter().map(|q| q.scale()).min().unwrap();
    let ns = u64::try_from(token.as_nanos()).unwrap().div_ceil(scale);
    Duration::from_nanos(ns + 1)
}

/// Whole seconds, rounded up (as the headers round).
fn secs_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Seeded runs of decisions (either report mode, costs up to one past the burst), clock steps,
/// and reconfigurations made before a decision or right after it. Every decision reports the
/// quota in force when it was made, with a snapshot of that quota (`tied`: the limiter reads
/// its quotas with the decision; otherwise, on the trait's defaults, a decision that a change
/// to another quota straddles reports its snapshot with no quota, and its headers carry no
/// `RateLimit` fields); and its headers hold the documented bounds: `r <= q`, `t <= w`, on a
/// refusal `t <= Retry-After`, and within the burst `Retry-After <= w`; the legacy headers say
/// what the IETF ones say.
fn headers_hold_under_reconfigurations<L: Limiter<Key = ()>>(
    limiter: &L,
    inner: &ReconfiguredAfter,
    clock: &ManualClock,
    seed: u64,
    tied: bool,
) {
    let quotas = quotas();
    let mut rng = Rng(seed);
    let mut current = inner.bucket.quota();
    let mut pending = None;
    let (mut refused, mut raced, mut past_w, mut unreported) = (0, 0, 0, 0);
    let mut excess = Duration::ZERO;
    for step in 0..20_000 {
        match rng.below(12) {
            0..=2 => clock.advance(Duration::from_nanos(rng.below(3_000_000_000))),
            3 => {
                current = quotas[rng.below(6) as usize];
                inner.bucket.set_quota(current);
            }
            4 => {
                let next = quotas[rng.below(6) as usize];
                inner.next.set(Some(next));
                pending = Some(next);
            }
            _ => {
                let cost = rng.below(current.burst() + 2);
                let report = rng.below(2) == 0;
                let d = decide(limiter, &(), cost, report);
                let in_force = current;
                let mut straddled = false;
                if let Some(next) = pending.take() {
                    current = next;
                    raced += 1;
                    straddled = next != in_force;
                }
                let ctx = format!("step {step}: cost {cost}, report {report}, {d:?}");
                if d.verdict.is_err() {
                    refused += 1;
                }
                let admitted_unreported = d.verdict.is_ok() && !report;
                assert_eq!(d.snapshot.is_some(), !admitted_unreported, "{ctx}");
                let want = if admitted_unreported || (straddled && !tied) {
                    None
                } else {
                    Some(in_force)
                };
                assert_eq!(d.quota, want, "{ctx}");
                let (Some(quota), Some(snap)) = (d.quota, d.snapshot) else {
                    if !admitted_unreported {
                        unreported += 1;
                        let map = headers(&d);
                        let retry = u8::from(map.contains_key(RETRY_AFTER));
                        assert_eq!(map.len(), usize::from(retry), "{ctx}: {map:?}");
                    }
                    continue;
                };
                assert!(snap.remaining() <= quota.burst(), "{ctx}");
                let fill = quota.refill_time(quota.burst());
                excess = excess.max(snap.until_full().saturating_sub(fill));
                assert!(snap.until_full() <= fill + slack(), "{ctx}");
                let map = headers(&d);
                let get = |h, p| param(&map, h, p).unwrap();
                let (q, w) = (get("ratelimit-policy", "q"), get("ratelimit-policy", "w"));
                let (r, t) = (get("ratelimit", "r"), get("ratelimit", "t"));
                assert_eq!((q, r, t), (quota.burst(), snap.remaining(), t), "{ctx}");
                let w_slack = secs_up(fill + slack());
                assert!(r <= q && t <= w_slack, "{ctx}: {map:?}");
                past_w += u64::from(t > w);
                let legacy = |h: &str| map[h].to_str().unwrap().parse::<u64>().unwrap();
                assert_eq!(
                    (
                        legacy("x-ratelimit-limit"),
                        legacy("x-ratelimit-remaining"),
                        legacy("x-ratelimit-reset")
                    ),
                    (q, r, t),
                    "{ctx}"
                );
                match d.verdict {
                    Err(Denied::RetryAfter(_)) => {
                        let retry = legacy(RETRY_AFTER.as_str());
                        assert!(t <= retry && retry <= w_slack, "{ctx}: {map:?}");
                    }
                    Err(Denied::ExceedsBurst) => assert!(cost > q, "{ctx}"),
                    _ => assert!(!map.contains_key(RETRY_AFTER), "{ctx}"),
                }
            }
        }
    }
    // The run reaches what it checks.
    assert!(
        refused > 1_000 && raced > 1_000 && (tied || unreported > 500),
        "{refused} refused, {raced} raced, {unreported} without a quota"
    );
    println!("seed {seed}: {refused} refused, {raced} raced, {unreported} without a quota, t > w {past_w} times, fill exceeded by at most {excess:?}");
}

#[test]
fn headers_hold_under_seeded_reconfigurations() {
    for seed in [1, 0x5eed, 0xdead_beef] {
        let clock = ManualClock::new();
        let limiter = ReconfiguredAfter::new(quotas()[0], &clock);
        headers_hold_under_reconfigurations(&limiter, &limiter, &clock, seed, true);
    }
}

/// Through a limiter on the trait's defaults for the quotas: a decision that a change straddles
/// reports no quota, the others the quota in force.
#[test]
fn headers_hold_under_seeded_reconfigurations_on_the_defaults() {
    for seed in [1, 0x5eed, 0xdead_beef] {
        let clock = ManualClock::new();
        let inner = ReconfiguredAfter::new(quotas()[0], &clock);
        headers_hold_under_reconfigurations(&OnDefaults(&inner), &inner, &clock, seed, false);
    }
}

/// Through `Metered` (a named limiter): its decisions forward the quotas of the limiter's.
#[test]
fn metered_headers_hold_under_seeded_reconfigurations() {
    let clock = ManualClock::new();
    let metered = tollgate::metrics::Metered::new(
        "reconfigured",
        ReconfiguredAfter::new(quotas()[0], &clock),
    );
    headers_hold_under_reconfigurations(&metered, metered.get_ref(), &clock, 7, true);
}
