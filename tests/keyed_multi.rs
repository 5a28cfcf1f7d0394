//! `KeyedMultiLimiter` against an exact model: one `MultiBucket` per key (itself checked
//! against independent reference buckets in `multi_model.rs`), on one `ManualClock`. With a
//! monotone clock every verdict, wait, refusing quota, availability and tightest snapshot must
//! equal the key's `MultiBucket`'s — through evictions and re-insertions in a table smaller than
//! the key set — except a new key refused because the table is full: that refusal is a
//! `RetryAfter` of at most one burst's refill of the default policy's slowest quota, only while
//! the table is full, and only for a key its model holds full (untracked). Overrides (one and
//! three quotas beside a default of two) and the edges: cost 0, `u64::MAX`, `max_keys` 0 and 1.
//! The checks `keyed.rs` makes of a `Quota` policy too are written once in
//! `common/keyed_policies.rs`.
#![cfg(feature = "keyed")]

#[path = "common/keyed_policies.rs"]
mod keyed_policies;

use proptest::prelude::*;
use std::time::Duration;
use tollgate::Limiter;
use tollgate::{
    ConfigError, Denied, KeyedMultiLimiter, Limits, ManualClock, MultiBucket, Quota, Refusal,
};
use tollgate_testkit::decide::Snapshotting;

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Acquire(u8, u64),
    Snapshot(u8, u64),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..3_000_000_000).prop_map(Op::Advance),
        6 => (0u8..8, 0u64..12).prop_map(|(k, c)| Op::Acquire(k, c)),
        2 => (0u8..8, 0u64..12).prop_map(|(k, c)| Op::Snapshot(k, c)),
        1 => Just(Op::Sweep),
    ]
}

/// The policy of key `k`: key 0 three quotas, key 1 one, the rest the default two.
fn limits_of(k: u8, default: &Limits, three: &Limits, one: &Limits) -> Limits {
    match k {
        0 => three.clone(),
        1 => one.clone(),
        _ => default.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_key_decides_as_its_own_multi_bucket(
        max_keys in 1usize..5,
        ops in proptest::collection::vec(op(), 1..120),
        (r0, p0, b0) in (1u64..4, 1u64..2000, 1u64..10),
        (r1, p1, b1) in (1u64..4, 1u64..20_000, 1u64..10),
    ) {
        let default = Limits::new([q(r0, p0, b0), q(r1, p1, b1)]).unwrap();
        let three = Limits::new([q(r0, p0, b0), q(1, 700, 4), q(2, 5000, 9)]).unwrap();
        let one = Limits::from(q(r1, p1, b1));
        let clock = ManualClock::new();
        let limiter = KeyedMultiLimiter::builder(default.clone(), max_keys, clock.clone())
            .override_quota(0u8, three.clone())
            .override_quota(1u8, one.clone())
            .build()
            .unwrap();
        let models: Vec<_> = (0..8u8)
            .map(|k| MultiBucket::with_clock(limits_of(k, &default, &three, &one), clock.clone()))
            .collect();
        // A refusal for room waits at most the longest burst refill of any policy's quota.
        let cap = [&default, &three, &one]
            .iter()
            .flat_map(|l| l.quotas())
            .map(|q| q.refill_time(q.burst()))
            .max()
            .unwrap();
        // What the counters must say: every decision admitted or refused, once.
        let (mut admitted, mut refused, mut room, mut evicted) = (0u64, 0u64, 0u64, 0u64);
        for op in ops {
            match op {
                Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
                Op::Sweep => {
                    evicted += limiter.sweep() as u64;
                }
                Op::Acquire(k, cost) | Op::Snapshot(k, cost) => {
                    let m = &models[k as usize];
                    let full = m.available() == m.limits().quotas().iter().map(|q| q.burst()).min().unwrap()
                        && m.decide_snapshots(&(), 0).1.as_slice().iter().all(|s| s.until_full().is_zero());
                    let len_before = limiter.len();
                    let (got, snap) = if matches!(op, Op::Snapshot(..)) {
                        let (v, s) = limiter.decide_snapshots(&k, cost);
                        (v, Some(s))
                    } else {
                        (limiter.decide(&k, cost), None)
                    };
                    // Refused although the model, holding the key full (untracked), admits:
                    // only as a refusal for room.
                    let table_full = full
                        && cost <= m.available()
                        && matches!(got, Err(r) if r.denied() != Denied::ExceedsBurst);
                    match got {
                        Ok(()) => admitted += 1,
                        Err(_) => refused += 1,
                    }
                    if table_full {
                        room += 1;
                        let r = got.unwrap_err();
                        prop_assert_eq!(len_before, max_keys);
                        prop_assert!(matches!(r.denied(), Denied::RetryAfter(d) if d > Duration::ZERO && d <= cap), "{:?}", r);
                        prop_assert_eq!(got.unwrap_err().quota_index(), 0);
                    } else {
                        let (expected, snaps) = m.decide_snapshots(&(), cost);
                        prop_assert_eq!(got, expected, "key {} cost {}", k, cost);
                        if let Some(s) = snap {
                            prop_assert_eq!(s, snaps, "key {} snapshots", k);
                        }
                    }
                }
            }
            prop_assert!(limiter.len() <= max_keys);
            for (k, m) in models.iter().enumerate() {
                prop_assert_eq!(limiter.available(&(k as u8)), m.available(), "key {}", k);
            }
        }
        let c = limiter.counters();
        prop_assert_eq!((c.admitted, c.refused, c.refused_table_full), (admitted, refused, room));
        prop_assert_eq!(c.admitted_untracked, 0);
        // Insertions evict too: at least the sweeps' evictions.
        prop_assert!(c.evicted >= evicted, "{:?} {}", c, evicted);
    }
}

#[test]
fn cost_zero_and_huge_costs() {
    let limits = Limits::new([q(1, 1000, 5), q(10, 60_000, 3)]).unwrap();
    let limiter = KeyedMultiLimiter::with_clock(limits, 4, ManualClock::new());
    assert_eq!(limiter.try_acquire(&"a", 0), Ok(()));
    assert!(limiter.is_empty(), "cost 0 tracks nothing");
    assert_eq!(
        limiter.decide(&"a", u64::MAX),
        Err(Refusal::new(Denied::ExceedsBurst, 1))
    );
    assert_eq!(limiter.try_acquire(&"a", 4), Err(Denied::ExceedsBurst));
    assert!(limiter.is_empty(), "a refusal tracks nothing");
    assert_eq!(limiter.try_acquire(&"a", 3), Ok(()));
    assert_eq!(limiter.available(&"a"), 0);
    assert_eq!(limiter.try_acquire(&"a", 0), Ok(()));
    assert_eq!(
        limiter.decide(&"a", 1),
        Err(Refusal::new(Denied::RetryAfter(Duration::from_secs(6)), 1))
    );
}

#[test]
fn max_keys_zero_and_one() {
    let limits = Limits::from(q(1, 1000, 2));
    assert_eq!(
        KeyedMultiLimiter::<u8, _>::builder(limits.clone(), 0, ManualClock::new())
            .build()
            .unwrap_err(),
        ConfigError::ZeroCapacity
    );
    // `new`/`with_clock` with 0: nothing tracked, every new key refused, never admitted (a
    // finite wait would make `until_key_ready` poll for ever).
    let none = KeyedMultiLimiter::with_clock(limits.clone(), 0, ManualClock::new());
    assert_eq!(
        none.try_acquire(&1u8, 1),
        Err(Denied::RetryAfter(Duration::MAX))
    );
    let mut ready = std::pin::pin!(none.until_key_ready(&1u8, 1));
    assert!(std::future::Future::poll(
        ready.as_mut(),
        &mut std::task::Context::from_waker(std::task::Waker::noop())
    )
    .is_ready());
    assert_eq!(none.try_acquire(&1u8, 0), Ok(()));
    assert!(none.is_empty());
    let clock = ManualClock::new();
    let one = KeyedMultiLimiter::with_clock(limits, 1, clock.clone());
    assert_eq!(one.try_acquire(&1u8, 1), Ok(()));
    assert_eq!(
        one.try_acquire(&2u8, 1),
        Err(Denied::RetryAfter(Duration::from_secs(1)))
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(one.try_acquire(&2u8, 2), Ok(()), "key 1 is full: evicted");
    assert_eq!(one.len(), 1);
    assert_eq!(one.available(&1u8), 2);
    assert_eq!(one.max_keys(), 1);
}

/// A fail-open table of one key admits a new key untracked while the table is full, keeps only
/// the tracked key, and still refuses that key's spent tokens.
#[test]
fn fail_open_admits_untracked_when_full() {
    let limits = Limits::from(q(1, 1000, 1));
    let limiter =
        keyed_policies::fail_open_admits_untracked_when_full(limits, 1, ManualClock::new());
    assert_eq!(limiter.len(), 1);
    assert!(limiter.try_acquire(&1u8, 1).is_err());
}

#[test]
fn a_table_full_refusal_reports_empty_snapshots() {
    let limits = Limits::new([q(1, 1000, 1), q(1, 10_000, 1)]).unwrap();
    let limiter = KeyedMultiLimiter::with_clock(limits, 1, ManualClock::new());
    limiter.try_acquire(&1u8, 1).unwrap();
    let (verdict, snaps) = limiter.decide_snapshots(&2u8, 1);
    let wait = Duration::from_secs(10);
    assert_eq!(verdict, Err(Refusal::new(Denied::RetryAfter(wait), 0)));
    assert!(snaps
        .as_slice()
        .iter()
        .all(|s| s.remaining() == 0 && s.until_full() == wait));
}

/// A swept key's record goes back to the free list once: the next two new keys get records of
/// their own, and the swept key, the two new ones and a third decide independently, each on
/// its own bucket (a record freed twice would be handed to both new keys, and a key whose slot
/// names a record it no longer owns would retry forever).
#[test]
fn a_swept_record_is_reused_once() {
    let clock = ManualClock::new();
    let limits = Limits::new([Quota::new(1, Duration::from_secs(1), 1).unwrap()]).unwrap();
    let limiter = KeyedMultiLimiter::with_clock(limits, 3, clock.clone());
    limiter.try_acquire(&1u32, 1).unwrap();
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.len(), 0);
    assert_eq!(limiter.try_acquire(&3, 1), Ok(()));
    assert_eq!(limiter.try_acquire(&4, 1), Ok(()));
    assert_eq!(limiter.len(), 2);
    for key in [3, 4] {
        assert_eq!(
            limiter.try_acquire(&key, 1),
            Err(Denied::RetryAfter(Duration::from_secs(1))),
            "key {key} spent its own token"
        );
    }
    assert_eq!(limiter.try_acquire(&1, 1), Ok(()));
    assert_eq!(limiter.len(), 3);
    assert_eq!(
        limiter.try_acquire(&5, 1),
        Err(Denied::RetryAfter(Duration::from_secs(1)))
    );
}

/// A new key refused because the table is full waits until the first tracked key is full, even
/// when that key's override policy has a slower quota than any of the default policy: the cap
/// is the longest burst refill of any quota of any policy (200 s), not the default's (2 s).
#[test]
fn table_full_wait_covers_an_override_slower_than_the_default() {
    keyed_policies::table_full_wait_covers_an_override_slower_than_the_default(
        Limits::new([q(10, 1000, 10), q(10, 2000, 10)]).unwrap(),
        Limits::new([q(10, 1000, 10), q(1, 100_000, 2)]).unwrap(),
    );
}

#[test]
fn counters_count_every_decision_and_eviction() {
    let clock = ManualClock::new();
    let limits = Limits::new([q(2, 1000, 2), q(3, 60_000, 3)]).unwrap();
    let limiter = KeyedMultiLimiter::builder(limits.clone(), 2, clock.clone())
        .build()
        .unwrap();
    assert_eq!(limiter.try_acquire(&1, 2), Ok(()));
    assert_eq!(limiter.try_acquire(&1, 0), Ok(())); // cost 0: admitted, counted
    assert!(limiter.try_acquire(&1, 1).is_err()); // the second is spent
    assert!(limiter.try_acquire(&1, 3).is_err()); // above the smallest burst
    assert_eq!(limiter.try_acquire(&2, 1), Ok(()));
    assert!(limiter.try_acquire(&3, 1).is_err()); // the table is full
    let c = limiter.counters();
    assert_eq!(
        (c.admitted, c.refused, c.refused_table_full, c.evicted),
        (3, 3, 1, 0)
    );
    // A minute on, both keys are full: key 3's insertion evicts one, the sweep the other.
    clock.advance(Duration::from_secs(60));
    assert_eq!(limiter.try_acquire(&3, 1), Ok(()));
    let evicted = limiter.counters().evicted;
    assert!(evicted >= 1, "{evicted}");
    assert_eq!(limiter.sweep() as u64 + evicted, 2);
    assert_eq!(limiter.counters().evicted, 2);

    let open = KeyedMultiLimiter::builder(limits, 1, clock.clone())
        .fail_open(true)
        .build()
        .unwrap();
    assert_eq!(open.try_acquire(&1, 1), Ok(()));
    assert_eq!(open.try_acquire(&2, 1), Ok(())); // untracked
    let c = open.counters();
    assert_eq!((c.admitted, c.admitted_untracked, c.refused), (2, 1, 0));
}

/// Counted on every thread, the owned and the shared shards alike: exact once the threads end.
#[test]
fn counters_are_exact_across_threads() {
    let limiter =
        KeyedMultiLimiter::new(Limits::new([q(1, 1000, 1), q(1, 60_000, 1)]).unwrap(), 64);
    let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get()) + 5;
    std::thread::scope(|s| {
        for t in 0..threads {
            let limiter = &limiter;
            s.spawn(move || {
                for i in 0..1_000u64 {
                    let _ = limiter.try_acquire(&(t as u64 * 1_000 + i % 8), 1);
                }
            });
        }
    });
    let c = limiter.counters();
    assert_eq!(c.admitted + c.refused, threads as u64 * 1_000);
    assert!(c.admitted >= 64.min(threads as u64 * 8), "{c:?}");
}

// ---- until_key_ready ----

/// One registration however often the future is polled, woken at the exact instant the
/// slowest quota admits (`until_key_ready_waits_with_one_registration`: 10 per second and 12
/// per minute, 10 spent, 3 more are there in 5 s, not the second's 300 ms); then a waiter whose
/// tokens someone else takes first re-arms for the new instant, dropping a waiting future
/// cancels its wake-up, and a cost above the smallest burst resolves at once, naming that
/// quota, counted as a refusal.
#[test]
fn until_key_ready_waits_for_the_slowest_quota_with_one_registration() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};
    let limits = Limits::new([q(10, 1000, 10), q(12, 60_000, 12)]).unwrap();
    // 10 per second and 12 per minute. Key 1 spends 10, then waits for 3: the second is back
    // in 300 ms, but the minute holds 2 until 5 s later (and 12 − 10 + 1 − 3 = 0 after).
    let (limiter, clock, waker) =
        keyed_policies::until_key_ready_waits_with_one_registration(limits, Duration::from_secs(5));
    let mut cx = Context::from_waker(&waker);

    // Someone else takes the tokens first: the waiter re-arms for the new instant.
    let mut fut = pin!(limiter.until_key_ready(&2u8, 1));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(Duration::ZERO)));
    // The minute holds 2 (12 − 10 + 1 − 1); 3 are there 5 s on.
    let mut fut = pin!(limiter.until_key_ready(&2u8, 3));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        limiter.try_acquire(&2u8, 2),
        Ok(()),
        "someone else is first"
    );
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(clock.pending_wakes(), 1);
    clock.advance(Duration::from_secs(9));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Duration::from_secs(15)))
    );
    // Dropping a waiting future cancels its wake-up.
    {
        let mut fut = pin!(limiter.until_key_ready(&2u8, 10));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(clock.pending_wakes(), 1);
    }
    assert_eq!(clock.pending_wakes(), 0);
    // Above the smallest burst: resolved at once, naming that quota; counted as a refusal.
    let before = limiter.counters().refused;
    assert_eq!(
        pin!(limiter.until_key_ready(&1u8, 11)).poll(&mut cx),
        Poll::Ready(Err(Refusal::new(Denied::ExceedsBurst, 0)))
    );
    assert_eq!(limiter.counters().refused, before + 1);
}

/// A new key refused because the table is full waits until a tracked key is full.
#[test]
fn until_key_ready_waits_out_a_full_table() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};
    let (_, waker) = tollgate_testkit::wakers::Count::waker();
    let mut cx = Context::from_waker(&waker);
    let clock = ManualClock::new_frozen();
    let limits = Limits::new([q(10, 1000, 10), q(10, 2000, 10)]).unwrap();
    let limiter = KeyedMultiLimiter::with_clock(limits, 1, clock.clone());
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    let mut fut = pin!(limiter.until_key_ready(&2u8, 1));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_millis(1_999));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Duration::from_secs(2)))
    );
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.counters().refused_table_full, 2);
}

/// A new key refused by where untracked keys start (the floor evictions raised, read by a
/// stepped-back clock) gets that record's snapshots, not the table-full ones (as for
/// `KeyedLimiter`).
#[test]
fn a_new_key_refused_by_the_floor_gets_its_records_snapshots() {
    let clock = ManualClock::new_frozen();
    let limiter = KeyedMultiLimiter::with_clock(
        Limits::from(Quota::per_second(10).unwrap()),
        2,
        clock.clone(),
    );
    limiter.try_acquire(&"a", 10).unwrap();
    limiter.try_acquire(&"x", 10).unwrap();
    clock.set(Duration::from_secs(2));
    limiter.try_acquire(&"b", 1).unwrap(); // the table full: a sweep evicts both
    clock.set(Duration::from_millis(1500));
    assert_eq!(limiter.available(&"c"), 5);
    let (verdict, snapshot) = limiter.decide_snapshot(&"c", 8);
    assert!(verdict.is_err());
    assert_eq!(
        snapshot,
        tollgate::Snapshot::new(5, Duration::from_millis(500))
    );
}
