//! Deterministic tests of the core bucket on a ManualClock: a timeline of decisions and every edge.

use std::time::Duration;
use tollgate::{Bucket, Clock, ConfigError, Denied, ManualClock, Quota};

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn bucket(tokens: u64, per: Duration, burst: u64) -> (Bucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        Bucket::with_clock(Quota::new(tokens, per, burst).unwrap(), clock.clone()),
        clock,
    )
}

#[test]
fn two_per_second_burst_three_timeline_of_admissions_and_exact_waits() {
    let (b, clock) = bucket(2, Duration::from_secs(1), 3);
    let rows: &[(u64, u64, Result<(), Denied>, u64)] = &[
        (0, 2, Ok(()), 1),
        (0, 2, Err(Denied::RetryAfter(ms(500))), 1),
        (250, 1, Ok(()), 0),
        (500, 2, Err(Denied::RetryAfter(ms(500))), 1),
        (1000, 2, Ok(()), 0),
        (5000, 3, Ok(()), 0),
    ];
    for &(t, cost, want, avail) in rows {
        clock.set(ms(t));
        assert_eq!(b.try_acquire(cost), want, "t={t} cost={cost}");
        assert_eq!(b.available(), avail, "available after t={t}");
    }
}

#[test]
fn retry_after_is_the_smallest_admitting_wait() {
    for (tokens, per, burst) in [
        (3, 1_000, 3),
        (7, 13, 2),
        (999_999_937, 1_000_000_000, 5),
        (1, 3_600_000, 1),
    ] {
        let (b, clock) = bucket(tokens, Duration::from_millis(per), burst);
        b.try_acquire(burst).unwrap();
        clock.advance(Duration::from_nanos(12_345));
        for cost in 1..=burst {
            let Err(Denied::RetryAfter(d)) = b.try_acquire(cost) else {
                panic!("cost {cost} admitted")
            };
            let now = clock.now();
            let d = d.as_nanos() as u64;
            assert!(d >= 1);
            clock.set(Duration::from_nanos(now + d - 1));
            assert!(b.try_acquire(cost).is_err(), "admitted 1 ns early");
            clock.set(Duration::from_nanos(now + d));
            assert!(b.available() >= cost, "not admitted at now + d");
            // Put the clock back: a refusal and `available` change nothing.
            clock.set(Duration::from_nanos(now));
        }
    }
}

#[test]
fn refusal_and_zero_cost_change_nothing() {
    let (b, clock) = bucket(10, Duration::from_secs(1), 10);
    b.try_acquire(9).unwrap();
    for _ in 0..100 {
        assert!(b.try_acquire(2).is_err());
        assert_eq!(b.try_acquire(0), Ok(()));
    }
    assert_eq!(b.available(), 1);
    clock.advance(ms(100));
    assert_eq!(b.available(), 2);
    assert_eq!(b.try_acquire(2), Ok(()));
}

#[test]
fn cost_above_burst_is_exceeds_burst() {
    let (b, _) = bucket(10, Duration::from_secs(1), 10);
    assert_eq!(b.try_acquire(11), Err(Denied::ExceedsBurst));
    assert_eq!(b.try_acquire(u64::MAX), Err(Denied::ExceedsBurst));
    assert_eq!(b.available(), 10);
}

#[test]
fn idle_time_never_accumulates_more_than_burst() {
    let (b, clock) = bucket(1000, Duration::from_secs(1), 5);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(b.available(), 5);
    assert_eq!(b.try_acquire(5), Ok(()));
    assert!(b.try_acquire(1).is_err());
}

#[test]
fn quota_validation() {
    let s = Duration::from_secs(1);
    assert_eq!(Quota::new(0, s, 1), Err(ConfigError::ZeroTokens));
    assert_eq!(
        Quota::new(1, Duration::ZERO, 1),
        Err(ConfigError::ZeroPeriod)
    );
    assert_eq!(Quota::new(1, s, 0), Err(ConfigError::ZeroBurst));
    assert_eq!(
        Quota::new(1, Duration::MAX, 1),
        Err(ConfigError::PeriodTooLong)
    );
    assert_eq!(Quota::new(u64::MAX, s, 1), Err(ConfigError::BeyondRange));
    assert_eq!(Quota::new(1, s, u64::MAX), Err(ConfigError::BeyondRange));
    assert_eq!(Quota::per_second(0), Err(ConfigError::ZeroTokens));
    // The documented range: 1e9 tokens/s with a burst of 2^62 for 100 years.
    assert!(Quota::new(1_000_000_000, s, 1 << 62).is_ok());
    assert!(Quota::new(999_999_937, s, 1 << 62).is_ok());
    assert!(Quota::new(1, Duration::from_nanos(u64::MAX), 1).is_ok());
    assert!(Quota::new(1, Duration::from_nanos(1), 1).is_ok());
    for e in [ConfigError::ZeroTokens, ConfigError::BeyondRange] {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn extreme_clock_readings_never_panic() {
    for q in [
        Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 62).unwrap(),
        Quota::new(999_999_937, Duration::from_secs(1), 1 << 62).unwrap(),
        Quota::new(1, Duration::from_nanos(u64::MAX), 1).unwrap(),
        Quota::per_second(3).unwrap(),
    ] {
        let clock = ManualClock::new();
        let b = Bucket::with_clock(q, clock.clone());
        for t in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX, 5, 0] {
            clock.set(Duration::from_nanos(t));
            for cost in [0, 1, q.burst(), q.burst().saturating_add(1), u64::MAX] {
                let _ = b.try_acquire(cost);
                let _ = b.available();
            }
        }
        clock.advance(Duration::MAX);
        let _ = b.try_acquire(1);
        b.set_quota(Quota::per_second(1).unwrap());
        let _ = b.try_acquire(1);
    }
}

#[test]
fn after_the_horizon_nothing_refills_and_nothing_overflows() {
    let (b, clock) = bucket(1, Duration::from_secs(1), 2);
    clock.set(tollgate::HORIZON);
    assert_eq!(b.try_acquire(2), Ok(()));
    clock.set(Duration::MAX);
    assert_eq!(b.try_acquire(1), Err(Denied::RetryAfter(Duration::MAX)));
    assert_eq!(b.available(), 0);
}

#[test]
fn a_clock_stepping_back_admits_no_more_and_loses_nothing_for_good() {
    let (b, clock) = bucket(10, Duration::from_secs(1), 10);
    b.try_acquire(10).unwrap();
    clock.set(ms(500));
    assert_eq!(b.try_acquire(5), Ok(()));
    // The clock steps back 400 ms: the 5 tokens earned by 500 ms are spent, none are re-earned.
    clock.set(ms(100));
    assert_eq!(b.available(), 0);
    assert_eq!(b.try_acquire(1), Err(Denied::RetryAfter(ms(500))));
    // Once the clock passes its earlier reading, the bucket behaves as if the step never happened.
    clock.set(ms(600));
    assert_eq!(b.available(), 1);
    clock.set(ms(2000));
    assert_eq!(b.available(), 10);
}

#[test]
fn initial_tokens() {
    let q = Quota::per_second(4).unwrap();
    for k in 0..=4 {
        let clock = ManualClock::new();
        clock.set(ms(1234));
        let b = Bucket::with_initial_tokens(q, k, clock.clone()).unwrap();
        assert_eq!(b.available(), k);
        clock.advance(ms(250));
        assert_eq!(b.available(), (k + 1).min(4));
    }
    assert_eq!(
        Bucket::with_initial_tokens(q, 5, ManualClock::new()).err(),
        Some(ConfigError::InitialAboveBurst)
    );
}

/// Greedy consumption for ten simulated years admits exactly burst + floor(rate * t).
#[test]
fn ten_years_admit_exactly_burst_plus_rate_times_t() {
    let day = 86_400u64;
    let years = 10 * 365 * day + 2 * day;
    for rate in [3u64, 999_999_937] {
        let burst = rate * 2 * day;
        let q = Quota::new(rate, Duration::from_secs(1), burst).unwrap();
        let clock = ManualClock::new();
        let b = Bucket::with_clock(q, clock.clone());
        let mut admitted: u128 = 0;
        // Steps of 1 day plus an odd number of nanoseconds, so instants are off any grid.
        let step = day * 1_000_000_000 + 7;
        let end = years * 1_000_000_000;
        let mut t = 0u64;
        loop {
            let n = b.available();
            b.try_acquire(n).unwrap();
            admitted += u128::from(n);
            if t == end {
                break;
            }
            t = (t + step).min(end);
            clock.set(Duration::from_nanos(t));
        }
        let expected = u128::from(burst) + u128::from(end) * u128::from(rate) / 1_000_000_000;
        assert_eq!(admitted, expected, "rate {rate}");
    }
}

#[test]
// On the default clock (quanta's, 8 bytes): the clock, two slots of seven quota words with
// their versions, the writer flag, and the word last, at least 64 bytes after everything a
// decision reads before it (the field order in `src/bucket.rs`). `Bucket<StdClock>` (a 16-byte
// `Instant`) is 152.
#[cfg(feature = "quanta")]
fn bucket_is_144_bytes() {
    assert_eq!(std::mem::size_of::<Bucket>(), 144);
    assert_eq!(std::mem::size_of::<Bucket<ManualClock>>(), 144);
}

#[test]
fn set_quota_carries_the_balance_and_debt_over() {
    let (b, clock) = bucket(10, Duration::from_secs(1), 10);
    b.try_acquire(10).unwrap();
    clock.advance(ms(300)); // 3 tokens
    b.set_quota(Quota::new(100, Duration::from_secs(1), 50).unwrap());
    assert_eq!(b.available(), 3);
    assert_eq!(
        b.quota(),
        Quota::new(100, Duration::from_secs(1), 50).unwrap()
    );
    clock.advance(ms(10)); // +1 at the new rate
    assert_eq!(b.available(), 4);
    // Capped at a smaller new burst.
    b.set_quota(Quota::new(1, Duration::from_secs(1), 2).unwrap());
    assert_eq!(b.available(), 2);
    // Setting the same quota is a no-op.
    b.set_quota(b.quota());
    assert_eq!(b.available(), 2);
    // A bucket full for a while keeps the smaller burst.
    clock.advance(ms(10_000));
    b.set_quota(Quota::new(100, Duration::from_secs(1), 5).unwrap());
    assert_eq!(b.available(), 2);
    clock.advance(ms(1_000));
    b.set_quota(Quota::new(10, Duration::from_secs(1), 3).unwrap());
    assert_eq!(b.available(), 3);
}

#[test]
fn errors_display_and_retry_after_secs() {
    assert_eq!(
        Denied::RetryAfter(Duration::ZERO).retry_after_secs(),
        Some(1)
    );
    assert_eq!(Denied::RetryAfter(ms(999)).retry_after_secs(), Some(1));
    assert_eq!(Denied::RetryAfter(ms(2000)).retry_after_secs(), Some(2));
    assert!(Denied::ExceedsBurst.to_string().contains("burst"));
    #[cfg(feature = "std")]
    {
        let e: Box<dyn std::error::Error> = Box::new(Denied::ExceedsBurst);
        assert!(!e.to_string().is_empty());
    }
    let _ = MS;
}
