//! `MultiBucket` at the edges: one to four quotas against `Bucket`s side by side, costs 0, 1,
//! the smallest burst and `u64::MAX`, waits of `Duration::MAX`, clocks that step back,
//! refusals that write nothing, which quota refused, the tightest snapshot, initial tokens,
//! reservations.

use std::time::Duration;
use tollgate::Limiter;
use tollgate::{
    Bucket, Clock, ConfigError, Denied, Limits, ManualClock, MultiBucket, Quota, Refusal, Snapshot,
};
use tollgate_testkit::decide::Snapshotting;

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn is_send_sync_and_debug() {
    fn send_sync<T: Send + Sync + std::fmt::Debug>() {}
    send_sync::<MultiBucket<ManualClock>>();
    send_sync::<MultiBucket>();
    let p = MultiBucket::with_clock(Limits::from(q(1, 1000, 2)), ManualClock::new());
    let shown = format!("{p:?}");
    assert!(
        shown.contains("MultiBucket") && shown.contains("states"),
        "{shown}"
    );
}

/// With one quota the policy is a `Bucket`: same verdicts, waits, availability and snapshots
/// on the same schedule (clock moving back and forth, costs at the edges).
#[test]
fn one_quota_decides_as_a_bucket() {
    for quota in [
        q(10, 1000, 10),
        q(3, 7, 5),
        q(1, 3_600_000, 1),
        q(7, 1000, 2),
    ] {
        let clock = ManualClock::new();
        let policy = MultiBucket::with_clock(Limits::from(quota), clock.clone());
        let bucket = Bucket::with_clock(quota, clock.clone());
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 => clock.set(Duration::from_nanos(x % 10_000_000_000)),
                1 => clock.advance(Duration::from_nanos(x % 300_000_000)),
                _ => {
                    let cost = [0, 1, 2, quota.burst(), quota.burst() + 1, u64::MAX]
                        [(x >> 8) as usize % 6];
                    let (v, s) = policy.decide_snapshot(&(), cost);
                    assert_eq!(
                        (v, s),
                        bucket.decide_snapshot(&(), cost),
                        "{quota:?} cost {cost}"
                    );
                }
            }
            assert_eq!(policy.available(), bucket.available());
        }
    }
}

fn policy(quotas: &[Quota], clock: &ManualClock) -> MultiBucket<ManualClock> {
    MultiBucket::with_clock(Limits::new(quotas.iter().copied()).unwrap(), clock.clone())
}

/// A refusal by one quota leaves every quota as it was, including those that held the cost;
/// cost 0 is admitted and writes nothing.
#[test]
fn a_refusal_and_cost_zero_write_nothing() {
    for n in 2..=4 {
        let all = [
            q(100, 1000, 100),
            q(2, 1000, 2),
            q(50, 1000, 60),
            q(7, 10, 9),
        ];
        let clock = ManualClock::new();
        let p = policy(&all[..n], &clock);
        p.try_acquire(2).unwrap();
        let before = p.decide_snapshots(&(), 0).1;
        assert_eq!(p.try_acquire(0), Ok(()));
        let refusal = p.decide(&(), 1).unwrap_err();
        assert_eq!(refusal.quota_index(), 1);
        assert_eq!(refusal.denied(), Denied::RetryAfter(ms(500)));
        assert_eq!(p.decide_snapshots(&(), 0).1, before, "{n} quotas");
        assert_eq!(before.as_slice()[0].remaining(), 98);
    }
}

/// `ExceedsBurst` iff the cost exceeds the smallest burst, whatever the states; it names the
/// first quota with that burst. `u64::MAX` included.
#[test]
fn exceeds_burst_iff_cost_above_the_smallest_burst() {
    let clock = ManualClock::new();
    let p = policy(
        &[q(1, 1000, 9), q(1, 1000, 3), q(1, 1000, 5), q(1, 1000, 3)],
        &clock,
    );
    for cost in [4, 5, 10, u64::MAX] {
        assert_eq!(
            p.decide(&(), cost),
            Err(Refusal::new(Denied::ExceedsBurst, 1))
        );
        assert_eq!(p.reserve(cost).unwrap_err(), Denied::ExceedsBurst);
        assert_eq!(p.acquire(cost), Err(Denied::ExceedsBurst));
    }
    assert_eq!(p.try_acquire(3), Ok(()));
    // Drained: a cost within the burst waits, one above it still exceeds.
    assert!(matches!(p.try_acquire(3), Err(Denied::RetryAfter(_))));
    assert_eq!(p.try_acquire(4), Err(Denied::ExceedsBurst));
}

/// The wait is the largest per-quota wait, to the nanosecond: refused 1 ns before it, admitted
/// at it; the refusal names the quota that waits longest (the first of equal waits).
#[test]
fn retry_after_is_the_largest_wait_to_the_nanosecond() {
    let clock = ManualClock::new();
    // 3 per 7 ms: a token every 2.333 ms (exact), 1 per s, and a copy of the first.
    let quotas = [q(3, 7, 5), q(1, 1000, 4), q(3, 7, 5)];
    let p = policy(&quotas, &clock);
    p.try_acquire(4).unwrap();
    let buckets: Vec<_> = quotas
        .iter()
        .map(|&q| {
            let b = Bucket::with_clock(q, clock.clone());
            b.try_acquire(4).unwrap();
            b
        })
        .collect();
    for cost in 1..=4 {
        let waits: Vec<Duration> = buckets
            .iter()
            .map(|b| match b.try_acquire(cost) {
                Ok(()) => Duration::ZERO,
                Err(Denied::RetryAfter(d)) => d,
                Err(e) => panic!("{e:?}"),
            })
            .collect();
        let worst = *waits.iter().max().unwrap();
        let index = waits.iter().position(|&w| w == worst).unwrap();
        assert_eq!(
            p.decide(&(), cost),
            Err(Refusal::new(Denied::RetryAfter(worst), index))
        );
    }
    let Err(Denied::RetryAfter(d)) = p.try_acquire(2) else {
        panic!()
    };
    clock.advance(d - Duration::from_nanos(1));
    assert!(p.try_acquire(2).is_err());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(p.try_acquire(2), Ok(()));
}

/// Past the horizon nothing refills: the wait is `Duration::MAX`, as for a `Bucket`.
#[test]
fn waits_past_the_horizon_are_duration_max() {
    let clock = ManualClock::new();
    clock.set(tollgate::HORIZON - Duration::from_millis(1));
    let quotas = [q(1, 1000, 1), q(1000, 1000, 1000)];
    let p = policy(&quotas, &clock);
    let b = Bucket::with_clock(quotas[0], clock.clone());
    p.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    assert_eq!(p.try_acquire(1), b.try_acquire(1));
    assert_eq!(p.try_acquire(1), Err(Denied::RetryAfter(Duration::MAX)));
    clock.advance(Duration::from_secs(10));
    assert_eq!(p.try_acquire(1), Err(Denied::RetryAfter(Duration::MAX)));
    assert_eq!(p.try_acquire(1), b.try_acquire(1));
}

/// A reading earlier than one already acted on refuses more, never admits more: stepping the
/// clock back does not re-earn tokens.
#[test]
fn a_clock_stepping_back_earns_nothing() {
    let clock = ManualClock::new();
    let p = policy(&[q(10, 1000, 10), q(100, 1000, 10)], &clock);
    clock.set(Duration::from_secs(5));
    p.try_acquire(10).unwrap();
    clock.set(Duration::from_secs(4));
    assert_eq!(
        p.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_millis(1100)))
    );
    assert_eq!(p.available(), 0);
    clock.set(Duration::from_secs(5) + ms(100));
    assert_eq!(p.try_acquire(1), Ok(()));
}

/// The snapshot is the tightest quota's: the fewest remaining tokens, ties broken by the one
/// full last.
#[test]
fn the_snapshot_is_the_tightest_quotas() {
    let clock = ManualClock::new();
    // Both hold 2 after taking 3; the second refills slower (full last).
    let p = policy(&[q(5, 1000, 5), q(1, 1000, 5)], &clock);
    let (v, s) = p.decide_snapshot(&(), 3);
    assert_eq!((v, s), (Ok(()), Snapshot::new(2, Duration::from_secs(3))));
    assert_eq!(p.decide_snapshots(&(), 0).1.tightest().0, 1);
    // A refusal describes the policy as it found it.
    let (v, s) = p.decide_snapshot(&(), 3);
    assert_eq!(v, Err(Denied::RetryAfter(Duration::from_secs(1))));
    assert_eq!(s, Snapshot::new(2, Duration::from_secs(3)));
}

#[test]
fn initial_tokens_per_quota() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(3));
    let limits = Limits::new([q(10, 1000, 10), q(1, 1000, 4), q(2, 1000, 2)]).unwrap();
    let p = MultiBucket::with_initial_tokens(limits.clone(), &[10, 0], clock.clone()).unwrap();
    assert_eq!(p.available(), 0);
    assert_eq!(
        p.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_secs(1)))
    );
    let p = MultiBucket::with_initial_tokens(limits.clone(), &[], clock.clone()).unwrap();
    assert_eq!(p.available(), 2);
    for (tokens, err) in [
        (&[11][..], ConfigError::InitialAboveBurst),
        (&[0, 5], ConfigError::InitialAboveBurst),
        (&[0, 0, 3], ConfigError::InitialAboveBurst),
        (&[0, 0, 0, 0], ConfigError::TooManyQuotas),
        (&[u64::MAX], ConfigError::InitialAboveBurst),
    ] {
        assert_eq!(
            MultiBucket::with_initial_tokens(limits.clone(), tokens, clock.clone()).unwrap_err(),
            err
        );
    }
}

/// Reservations queue on every quota; cancelling gives back, per quota, only under the
/// bucket's rule (nothing admitted since, not yet due).
#[test]
fn reservations_queue_and_cancel_per_quota() {
    let clock = ManualClock::new();
    let p = policy(&[q(10, 1000, 2), q(1, 1000, 10), q(100, 1000, 100)], &clock);
    let r1 = p.reserve(2).unwrap();
    assert_eq!(r1.delay(), Duration::ZERO);
    let r2 = p.reserve(2).unwrap();
    assert_eq!(r2.delay(), ms(200));
    clock.advance(ms(100));
    r2.cancel();
    // All back: the next reservation of 2 is due at 200 ms again (100 ms from now).
    let r3 = p.reserve(2).unwrap();
    assert_eq!(r3.delay(), ms(100));
    // r1 came due long ago on every quota and later reservations hold: nothing back.
    r1.cancel();
    // The first quota is owed 4 tokens (due at 200 ms with burst 2): the next at 300 ms.
    assert_eq!(p.reserve(1).unwrap().delay(), ms(200));
    assert_eq!(
        p.try_acquire_for(1, ms(100)),
        Err(Denied::RetryAfter(ms(300)))
    );
    assert_eq!(p.try_acquire_for(1, ms(300)), Ok(ms(300)));
    assert_eq!(clock.now(), 400_000_000);
    // A quota whose tokens are there at once is debited as of the due instant: the second
    // quota (1/s) holds 10 − 2 − 2 − 1 − 1 tokens plus what it earned by 400 ms, no more.
    assert_eq!(p.decide_snapshots(&(), 0).1.as_slice()[1].remaining(), 4);
    // In debt, cost 0 is still due at once and takes nothing.
    let r = p.reserve(0).unwrap();
    assert_eq!(r.delay(), Duration::ZERO);
    r.cancel();
    assert_eq!(p.try_acquire_for(0, Duration::ZERO), Ok(Duration::ZERO));
    assert_eq!(p.reserve(1).unwrap().delay(), ms(100));
}

/// A cancelled reservation gives every quota its state from before the reservation back: a
/// quota whose tokens were there before the due instant, debited as of it, does not keep its
/// refill until then (10/s and 1/s with a burst of 4: a reservation due in 4 s cancelled at once
/// must not leave the first quota 6 tokens short).
#[test]
fn a_cancel_gives_every_quota_its_state_back() {
    let clock = ManualClock::new();
    let quotas = [q(10, 1000, 10), q(1, 1000, 4)];
    let (policy, control) = (policy(&quotas, &clock), policy(&quotas, &clock));
    policy.reserve(4).unwrap();
    control.reserve(4).unwrap();
    let r = policy.reserve(4).unwrap();
    assert_eq!(r.delay(), Duration::from_secs(4));
    r.cancel();
    assert_eq!(
        policy.decide_snapshots(&(), 0).1.as_slice(),
        control.decide_snapshots(&(), 0).1.as_slice()
    );
    clock.set(Duration::from_secs(3));
    let (mine, never) = (policy.try_acquire(3), control.try_acquire(3));
    assert_eq!((mine, never), (Ok(()), Ok(())));
}
