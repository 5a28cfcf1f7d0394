//! ShardedBucket: exactly the burst on a frozen clock across shard counts and threads, one thread
//! gets the whole burst and rate, the window bound, exact waits. ManualClock and fixed seeds.
#![cfg(feature = "std")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate::{Bucket, Clock, Denied, ManualClock, Quota, ShardedBucket};

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

#[test]
fn frozen_clock_gives_exactly_the_burst_across_shard_counts() {
    for shards in [1usize, 2, 8, 64] {
        for threads in [1usize, 4] {
            let quota = Quota::new(1_000, Duration::from_secs(1), 997).unwrap();
            let bucket = ShardedBucket::with_clock(quota, shards, ManualClock::new());
            assert_eq!(bucket.shards(), shards);
            let total = AtomicU64::new(0);
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| {
                        // A cost-1 borrow is refused only once every shard has been seen empty.
                        while bucket.try_acquire(1).is_ok() {
                            total.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            });
            assert_eq!(
                total.into_inner(),
                997,
                "{shards} shards, {threads} threads"
            );
            assert_eq!(bucket.available(), 0);
        }
    }
}

#[test]
fn frozen_clock_mixed_costs_never_exceed_and_strand_nothing() {
    for shards in [2usize, 8, 64] {
        let quota = Quota::per_second(1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, ManualClock::new());
        let total = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (bucket, total) = (&bucket, &total);
                s.spawn(move || {
                    let mut rng = Rng(t + 1);
                    for _ in 0..2_000 {
                        let cost = 1 + rng.below(40);
                        if bucket.try_acquire(cost).is_ok() {
                            total.fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        // Whatever was refused is still there: admitted + available is the whole burst.
        assert_eq!(
            total.into_inner() + bucket.available(),
            1_000,
            "{shards} shards"
        );
        let rest = bucket.available();
        if rest > 0 {
            assert_eq!(bucket.try_acquire(rest), Ok(()));
        }
        assert_eq!(bucket.available(), 0);
    }
}

#[test]
fn one_thread_gets_the_whole_burst_and_the_whole_rate() {
    for shards in [1usize, 2, 8, 64] {
        let clock = ManualClock::new();
        let quota = Quota::new(1_000, Duration::from_secs(1), 200).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let reference = Bucket::with_clock(quota, clock.clone());
        assert_eq!(bucket.try_acquire(200), Ok(()));
        assert_eq!(reference.try_acquire(200), Ok(()));
        let (mut got, mut want) = (200u64, 200u64);
        // 10 s in steps of 0.7 ms, always asking for 1 token until refused.
        for _ in 0..14_286 {
            clock.advance(Duration::from_micros(700));
            while bucket.try_acquire(1).is_ok() {
                got += 1;
            }
            while reference.try_acquire(1).is_ok() {
                want += 1;
            }
        }
        assert!(got * 100 >= want * 99, "{shards} shards: {got} of {want}");
        assert!(got <= want, "{shards} shards: {got} > {want}");
    }
}

#[test]
fn waits_are_exact_and_fractions_pool() {
    for shards in [1usize, 3, 8] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(8).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        assert_eq!(bucket.try_acquire(8), Ok(()));
        let wait = match bucket.try_acquire(3) {
            Err(Denied::RetryAfter(d)) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait, Duration::from_millis(375), "{shards} shards");
        clock.advance(wait - Duration::from_nanos(1));
        assert!(bucket.try_acquire(3).is_err());
        clock.advance(Duration::from_nanos(1));
        assert_eq!(bucket.try_acquire(3), Ok(()));
    }
}

/// Random traffic from several threads, one after another (each thread gets its own home shard),
/// with a moving clock: in every window [t_i, t_j] the admitted total is at most
/// burst + rate·(t_j − t_i).
#[test]
fn never_more_than_burst_plus_rate_times_window() {
    for shards in [2usize, 8, 64] {
        let clock = ManualClock::new();
        let (tokens, per_ns, burst) = (30u64, 10_000_000u64, 20u64);
        let quota = Quota::new(tokens, Duration::from_nanos(per_ns), burst).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let mut log: Vec<(u64, u64)> = Vec::new();
        let mut rng = Rng(shards as u64);
        for _round in 0..40 {
            let batch = std::thread::scope(|s| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    let mut rng = Rng(rng.next());
                    for _ in 0..50 {
                        if rng.below(3) == 0 {
                            clock.advance(Duration::from_nanos(rng.below(2_000_000)));
                        }
                        let cost = 1 + rng.below(8);
                        let now = clock.now();
                        if bucket.try_acquire(cost).is_ok() {
                            mine.push((now, cost));
                        }
                    }
                    mine
                })
                .join()
                .unwrap()
            });
            log.extend(batch);
        }
        assert!(log.len() > 100);
        for i in 0..log.len() {
            let mut sum = 0u128;
            for j in i..log.len() {
                sum += u128::from(log[j].1);
                let window = u128::from(log[j].0 - log[i].0);
                assert!(
                    sum * u128::from(per_ns)
                        <= u128::from(burst) * u128::from(per_ns) + u128::from(tokens) * window,
                    "{shards} shards: {sum} tokens in {window} ns"
                );
            }
        }
    }
}

#[test]
fn bad_input_is_refused_not_panicking() {
    let quota = Quota::per_second(5).unwrap();
    let bucket = ShardedBucket::with_clock(quota, 0, ManualClock::new());
    assert_eq!(bucket.shards(), 1);
    assert_eq!(bucket.try_acquire(0), Ok(()));
    assert_eq!(bucket.try_acquire(6), Err(Denied::ExceedsBurst));
    assert_eq!(
        ShardedBucket::with_clock(quota, usize::MAX, ManualClock::new()).shards(),
        5
    );
    let slow = Quota::new(1, Duration::from_secs(u64::MAX / 1_000_000_000), 4).unwrap();
    let bucket = ShardedBucket::with_clock(slow, 4, ManualClock::new());
    assert!(bucket.shards() >= 1);
    assert_eq!(bucket.try_acquire(4), Ok(()));
    assert!(bucket.try_acquire(1).is_err());
}

/// The wait is exact even when most shards are full (and so earn nothing): at `now + d - 1` the
/// same request is still refused, at `now + d` admitted.
#[test]
fn retry_after_is_exact_when_only_some_shards_refill() {
    let clock = ManualClock::new();
    let bucket = ShardedBucket::with_clock(Quota::per_second(1024).unwrap(), 1024, clock.clone());
    assert_eq!(bucket.shards(), 1024);
    // Empty one shard only (thread's home shard), then ask for the whole burst.
    bucket.try_acquire(1).unwrap();
    let Err(Denied::RetryAfter(d)) = bucket.try_acquire(1024) else {
        panic!("admitted more than the burst")
    };
    // One shard earns 1 token per 1024 s / 1024 = 1 s.
    assert_eq!(d, Duration::from_secs(1));
    let d = d.as_nanos() as u64;
    clock.set(Duration::from_nanos(d - 1));
    assert!(bucket.try_acquire(1024).is_err());
    clock.set(Duration::from_nanos(d));
    assert_eq!(bucket.try_acquire(1024), Ok(()));
}
