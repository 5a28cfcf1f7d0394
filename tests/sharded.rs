//! ShardedBucket: exactly the burst on a frozen clock across shard counts and threads, one thread
//! gets the whole burst and rate, the window bound, exact waits near the limit. ManualClock and
//! fixed seeds (the lease protocol's own cases: `tests/sharded_lease.rs`).
#![cfg(feature = "std")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate::{Bucket, Clock, Denied, ManualClock, Quota, ShardedBucket, StdClock};
use tollgate_testkit::decide::Snapshotting;

use rng::Rng;
use stall::{arm, decision_reading, Gate, Stall, StallClock};
use tollgate_testkit::rng;
use tollgate_testkit::stall;
use tollgate_testkit::window;
use window::WindowChecker;

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
                        // Refused only once its lease and the central word are empty.
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

/// Four threads with random costs on a frozen clock: nothing is created and nothing lost
/// (admitted + available is the burst), and what the main thread cannot take afterwards lies in
/// the other shards' leases, which hold at most an eighth of the burst together.
#[test]
fn frozen_clock_mixed_costs_create_and_lose_nothing() {
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
        let admitted = total.into_inner();
        assert_eq!(admitted + bucket.available(), 1_000, "{shards} shards");
        let mut more = 0;
        while bucket.try_acquire(1).is_ok() {
            more += 1;
        }
        let leased = bucket.available();
        assert_eq!(admitted + more + leased, 1_000, "{shards} shards");
        assert!(
            leased <= 1_000 / 8,
            "{shards} shards: {leased} left in leases"
        );
        assert_eq!(bucket.stranded_tokens(), 0.0);
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
    assert_eq!(bucket.try_acquire(u64::MAX), Err(Denied::ExceedsBurst));
    // The edges of the one-compare test `cost - 1 >= burst`, on a bucket of several shards.
    let shards = ShardedBucket::with_clock(quota, 4, ManualClock::new());
    assert_eq!(shards.try_acquire(u64::MAX), Err(Denied::ExceedsBurst));
    assert_eq!(shards.try_acquire(6), Err(Denied::ExceedsBurst));
    assert_eq!(shards.try_acquire(5), Ok(()));
    assert_eq!(shards.try_acquire(0), Ok(()), "cost 0 on a drained bucket");
    assert!(matches!(shards.try_acquire(1), Err(Denied::RetryAfter(_))));
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

/// Near the limit nothing is leased, so a refusal's wait is exact: at `now + d - 1` the same
/// request is still refused, at `now + d` admitted, at 1,024 shards as at 2.
#[test]
fn retry_after_is_exact_near_the_limit() {
    for shards in [2usize, 1024] {
        let clock = ManualClock::new();
        let bucket =
            ShardedBucket::with_clock(Quota::per_second(1024).unwrap(), shards, clock.clone());
        assert_eq!(bucket.shards(), shards);
        assert_eq!(bucket.try_acquire(1024), Ok(()));
        let Err(Denied::RetryAfter(d)) = bucket.try_acquire(3) else {
            panic!("admitted more than the burst")
        };
        // 3 tokens at 1024/s: ⌈3 × 10^9 / 1024⌉ ns.
        assert_eq!(d, Duration::from_nanos(2_929_688), "{shards} shards");
        let d = d.as_nanos() as u64;
        clock.set(Duration::from_nanos(d - 1));
        assert!(bucket.try_acquire(3).is_err());
        clock.set(Duration::from_nanos(d));
        assert_eq!(bucket.try_acquire(3), Ok(()));
        assert!(bucket.try_acquire(1).is_err());
    }
}

/// Near the limit the sharded bucket decides exactly as one `Bucket` does, waits included: one
/// thread drains it and then asks for 1 to 3 tokens at random readings a few tokens' time apart,
/// never leaving enough in the central word for a lease.
#[test]
fn near_the_limit_it_decides_as_one_bucket() {
    for shards in [2usize, 8, 64] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let reference = Bucket::with_clock(quota, clock.clone());
        assert_eq!(bucket.try_acquire(1_000), Ok(()));
        assert_eq!(reference.try_acquire(1_000), Ok(()));
        let mut rng = Rng(shards as u64);
        let mut admitted = 0;
        for _ in 0..5_000 {
            clock.advance(Duration::from_micros(rng.below(5_000)));
            loop {
                let cost = 1 + rng.below(3);
                let (got, want) = (bucket.try_acquire(cost), reference.try_acquire(cost));
                assert_eq!(
                    got,
                    want,
                    "{shards} shards at {} ns, cost {cost}",
                    clock.now()
                );
                if got.is_err() {
                    break;
                }
                admitted += cost;
            }
        }
        assert!(admitted > 10_000, "{admitted}");
    }
}

/// One greedy thread on a drained 64-shard bucket at 5 M tokens/s gets the whole rate (a single
/// `Bucket` on the same clock is the reference), and every wait is exact.
#[test]
fn a_greedy_thread_gets_the_rate_at_64_shards_and_5m_per_s() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(5_000_000).unwrap();
    let bucket = ShardedBucket::with_clock(quota, 64, clock.clone());
    let reference = Bucket::with_clock(quota, clock.clone());
    assert_eq!(bucket.shards(), 64);
    assert_eq!(bucket.try_acquire(5_000_000), Ok(()));
    assert_eq!(reference.try_acquire(5_000_000), Ok(()));
    let (mut got, mut want, mut refused) = (0u64, 0u64, 0u64);
    let mut rng = Rng(7);
    // 20 ms in random steps of 0..=700 ns, asking for 1 token until refused.
    while clock.now() < 20_000_000 {
        clock.advance(Duration::from_nanos(rng.below(701)));
        loop {
            match bucket.try_acquire(1) {
                Ok(()) => got += 1,
                Err(Denied::RetryAfter(d)) => {
                    refused += 1;
                    // The wait is exact: one nanosecond earlier is still refused.
                    if d > Duration::from_nanos(1) && refused % 97 == 0 {
                        let t = clock.now();
                        clock.advance(d - Duration::from_nanos(1));
                        assert!(bucket.try_acquire(1).is_err());
                        clock.set(Duration::from_nanos(t));
                    }
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        while reference.try_acquire(1).is_ok() {
            want += 1;
        }
    }
    assert!(want > 90_000, "{want}");
    assert!(got <= want, "{got} > {want}");
    assert!(got * 100 >= want * 99, "{got} of {want}");
    println!("greedy, 64 shards, 5 M/s: {got} of {want} tokens");
    assert_eq!(bucket.stranded_tokens(), 0.0);
}

/// A refusal on a drained bucket is the exact wait for every reading before the next token,
/// stale ones included (`Stall::Reading`).
#[test]
fn refusals_are_exact_for_stale_readings_too() {
    for shards in [1usize, 2, 64, 1024] {
        let clock = StallClock::new(ManualClock::new());
        let quota = Quota::per_second(1024).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        clock.inner().set(Duration::from_secs(10));
        assert_eq!(bucket.try_acquire(1024), Ok(()));
        // The next token at 10 s + 1/1024 s.
        let first = bucket.try_acquire(1);
        let tick = 1_000_000_000u64.div_ceil(1024);
        assert_eq!(first, Err(Denied::RetryAfter(Duration::from_nanos(tick))));
        // Readings before it, later and earlier (stale), get the wait to the same instant.
        for t in [10_000_000_000 + tick - 1, 10_000_000_000 + 5, 9_999_000_000] {
            arm([Stall::Reading(t)]);
            assert_eq!(
                bucket.try_acquire(1),
                Err(Denied::RetryAfter(Duration::from_nanos(
                    10_000_000_000 + tick - t
                ))),
                "{shards} shards, reading {t}"
            );
        }
        clock
            .inner()
            .set(Duration::from_nanos(10_000_000_000 + tick));
        assert_eq!(bucket.try_acquire(1), Ok(()), "{shards} shards");
        assert!(bucket.try_acquire(1).is_err());
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }
}

/// Readings older than the last decision's get the wait to the same instant, the next token as
/// the central word holds it.
#[test]
fn a_stale_reading_waits_for_the_same_instant() {
    for shards in [1usize, 2] {
        let clock = StallClock::new(ManualClock::new());
        let bucket =
            ShardedBucket::with_clock(Quota::per_second(2).unwrap(), shards, clock.clone());
        let ms = Duration::from_millis;
        assert_eq!(bucket.try_acquire(2), Ok(()));
        clock.inner().set(ms(1_000));
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(ms(500))));
        for t in [400, 499, 500, 1_000, 1_499] {
            arm([Stall::Reading(t * 1_000_000)]);
            assert_eq!(
                bucket.try_acquire(1),
                Err(Denied::RetryAfter(ms(1_500 - t))),
                "{shards} shards, reading {t} ms"
            );
        }
        clock.inner().set(ms(1_500));
        assert_eq!(bucket.try_acquire(1), Ok(()), "{shards} shards");
    }
}

/// One thread pools its shard's lease with the central word: after a small decision took a
/// lease, a cost that neither holds alone is paid from both, and the rest of the burst comes out
/// to the token; at a stale reading that pooling is refused and loses nothing.
#[test]
fn one_thread_pools_its_lease_with_the_central_word() {
    let clock = StallClock::new(ManualClock::new());
    let quota = Quota::per_second(1_000).unwrap();
    let bucket = ShardedBucket::with_clock(quota, 2, clock.clone());
    clock.inner().set(Duration::from_secs(5));
    // Takes 1 and a lease of ⌊999 / 16⌋ = 62 tokens.
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert_eq!(bucket.available(), 999);
    // A reading 1 s older than the lease: the lease's tokens lie more than a burst ahead of it.
    arm([Stall::Reading(4_000_000_000)]);
    assert!(bucket.try_acquire(990).is_err());
    assert_eq!(bucket.available(), 999);
    // 62 from the lease, 928 from the central word.
    assert_eq!(bucket.try_acquire(990), Ok(()));
    assert_eq!(bucket.available(), 9);
    assert_eq!(bucket.try_acquire(9), Ok(()));
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_millis(1)))
    );
    assert_eq!(bucket.stranded_tokens(), 0.0);
}

/// Real threads, random stalls between the clock reading and the compare-and-swap
/// (`StallClock::random` on the real clock), costs from 1 to 24 so that spends, lease
/// replacements, pooled decisions and refusals race; every admission is recorded with the
/// reading its decision used and every window is checked against burst + rate·Δ. Also reports
/// what replaced leases lost (capacity lost, never extra).
#[test]
fn random_stalls_never_break_any_window() {
    for (shards, seed) in [(1usize, 4u64), (2, 1), (8, 2), (64, 3)] {
        let quota = Quota::new(200_000, Duration::from_secs(1), 64).unwrap();
        let clock = StallClock::random(StdClock::new(), 0.01, Duration::from_micros(200), seed);
        let bucket = ShardedBucket::with_clock(quota, shards, clock);
        let checker = WindowChecker::new();
        let calls = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (bucket, checker, calls) = (&bucket, &checker, &calls);
                s.spawn(move || {
                    let mut rng = Rng(seed * 16 + t + 1);
                    for _ in 0..20_000 {
                        let cost = if rng.below(8) == 0 {
                            1 + rng.below(24)
                        } else {
                            1
                        };
                        let admitted = bucket.try_acquire(cost).is_ok();
                        // The decision's reading: a lost central CAS reads the clock again
                        // (to size a far lease) after deciding at the first.
                        let at = decision_reading();
                        if admitted {
                            checker.admit(at, cost);
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(checker.check(&quota), Ok(()), "{shards} shards");
        let admitted = checker.total() as f64;
        let stranded = bucket.stranded_tokens();
        println!(
            "{shards} shards: {} calls, {admitted} tokens admitted, {stranded:.3} stranded",
            calls.into_inner()
        );
        assert!(admitted > 0.0);
    }
}

/// On a drained bucket the wait is exact for every reading before the next token, stale ones
/// included; and a thread stalled between its reading and its decision while another drains the
/// bucket at later readings is refused with the exact wait for its own reading and admits
/// nothing the window does not allow.
#[test]
fn waits_are_exact_for_stale_readings_and_stalled_deciders() {
    let tick = 1_000_000_000u64.div_ceil(1024);
    let t0 = 10_000_000_000u64;
    for shards in [1usize, 2, 4, 64] {
        let clock = StallClock::new(ManualClock::new());
        let quota = Quota::per_second(1024).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        clock.inner().set(Duration::from_nanos(t0));
        assert_eq!(bucket.try_acquire(1024), Ok(()));
        // One token refilled, taken: the next one is a tick later.
        clock.inner().set(Duration::from_nanos(t0 + tick));
        assert_eq!(bucket.try_acquire(1), Ok(()), "{shards} shards");
        let wait = |r: Result<(), Denied>| match r {
            Err(Denied::RetryAfter(d)) => u64::try_from(d.as_nanos()).unwrap(),
            other => panic!("{shards} shards: {other:?}"),
        };
        let next = t0 + tick + wait(bucket.try_acquire(1));
        assert!(
            next > t0 + tick && next <= t0 + 2 * tick,
            "{shards} shards: {next}"
        );
        // Readings before it, later and earlier (stale) than the borrow's, get the wait to the
        // same instant.
        for t in [next - 1, t0 + tick, t0 + 5, t0 - 1_000_000] {
            arm([Stall::Reading(t)]);
            assert_eq!(
                wait(bucket.try_acquire(1)),
                next - t,
                "{shards} shards, at {t}"
            );
        }
        // A decider reads `next` (one token there), stalls; meanwhile this thread takes
        // everything there is two ticks later.
        clock.inner().set(Duration::from_nanos(next));
        let gate = Gate::new();
        let mut admitted = 1024u64 + 1;
        std::thread::scope(|s| {
            let (g, bucket) = (gate.clone(), &bucket);
            let stalled = s.spawn(move || {
                arm([Stall::Gate(g)]);
                bucket.try_acquire(1)
            });
            gate.wait_reached();
            let later = next + 2 * tick;
            clock.inner().set(Duration::from_nanos(later));
            while bucket.try_acquire(1).is_ok() {
                admitted += 1;
            }
            let ready = later + wait(bucket.try_acquire(1));
            gate.open();
            // The stalled decider finds the word of later readings: refused, with the wait
            // from its own reading to the same instant.
            assert_eq!(
                wait(stalled.join().unwrap()),
                ready - next,
                "{shards} shards"
            );
            clock.inner().set(Duration::from_nanos(ready - 1));
            assert!(bucket.try_acquire(1).is_err(), "{shards} shards");
            clock.inner().set(Duration::from_nanos(ready));
            assert_eq!(bucket.try_acquire(1), Ok(()), "{shards} shards");
            admitted += 1;
            // Everything since the drain at t0, within burst + rate × window.
            let bound = 1024 + u128::from(ready - t0) * 1024 / 1_000_000_000;
            assert!(
                u128::from(admitted) <= bound,
                "{shards} shards: {admitted} > {bound}"
            );
            assert_eq!(admitted, 1024 + 5, "{shards} shards: the whole rate");
        });
        assert_eq!(bucket.stranded_tokens(), 0.0);
    }
}

/// A huge burst (2^40 and 2^33 tokens) comes out exactly, never wrapped: the whole burst in one
/// request and in two (the second pooling a lease with the central word), then the exact wait,
/// at 2 and 1,024 shards.
#[test]
fn costs_beyond_64_bits_of_units_pool_exactly() {
    let cases = [
        (
            Quota::new(1, Duration::from_secs(1), 1 << 40),
            Duration::from_secs(1),
        ),
        (
            Quota::new(1_000_000_000, Duration::from_secs(1), 1 << 33),
            Duration::from_nanos(1),
        ),
    ];
    for (quota, wait) in cases {
        let quota = quota.unwrap();
        for shards in [2usize, 1024] {
            for parts in [1u64, 2] {
                let bucket = ShardedBucket::with_clock(quota, shards, ManualClock::new());
                assert_eq!(bucket.shards(), shards);
                for _ in 0..parts {
                    assert_eq!(bucket.try_acquire(quota.burst() / parts), Ok(()));
                }
                assert_eq!(bucket.available(), 0, "{quota:?}, {shards} shards");
                assert_eq!(bucket.try_acquire(1), Err(Denied::RetryAfter(wait)));
                assert_eq!(bucket.stranded_tokens(), 0.0);
            }
        }
    }
}

/// One shard takes no lease and decides on the word alone: every verdict, wait, snapshot and
/// `available()` is a [`Bucket`]'s on the same readings, for exact and inexact quotas (one at a
/// few nanoseconds a token, so that readings land on the instants themselves), costs from 0 to
/// beyond the burst, and clock steps around a token's time; every 500 steps the clock steps
/// back, and behind the latest reading too the waits are the `Bucket`'s.
#[test]
fn one_shard_decides_as_a_bucket() {
    // (quota, the largest clock step in ns)
    let cases = [
        (Quota::per_second(1_000).unwrap(), 3_000_000),
        (
            Quota::new(7, Duration::from_secs(3), 5).unwrap(),
            2_000_000_000,
        ),
        (Quota::new(3, Duration::from_nanos(7), 5).unwrap(), 6),
        (
            Quota::new(1_000_000_000, Duration::from_secs(1), 64).unwrap(),
            4,
        ),
        (
            Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap(),
            300,
        ),
    ];
    let mut shorter_in_all = 0;
    for (i, (quota, step)) in cases.into_iter().enumerate() {
        shorter_in_all += against_a_bucket(quota, step, 1, 0x5eed + i as u64, 20_000);
    }
    assert_eq!(shorter_in_all, 0, "a wait shorter than the word's");
}

/// A bucket dry for a millisecond or more, or drained by one shard alone, publishes its dry
/// instant for all its shards, and one-token refusals are then answered before the thread's
/// shard is found. On 2, 8 and 64 shards, with bursts too small for a lease, one thread
/// decides exactly as a `Bucket` on the same readings (snapshots and `available` too), costs 0
/// to beyond the burst, rates from one token an hour (long spells) to 50,000 tokens a second (a
/// shard alone; faster rates take advances, which no `Bucket` does); every 500 steps the clock
/// steps back, and behind the latest reading such a refusal may wait less than the `Bucket`
/// says (an instant an earlier decision found), never more, the verdict the same.
#[test]
fn dry_spells_decide_as_a_bucket() {
    // (quota, the largest clock step in ns)
    let cases = [
        // Short spells (a shard alone), too slow for advances (below a token in 16 µs).
        (
            Quota::new(50_000, Duration::from_secs(1), 10).unwrap(),
            60_000,
        ),
        (
            Quota::new(7, Duration::from_micros(300), 5).unwrap(),
            130_000,
        ),
        (
            Quota::per_second(1_000).unwrap().with_burst(10).unwrap(),
            3_000_000,
        ),
        (
            Quota::new(7, Duration::from_secs(3), 5).unwrap(),
            2_000_000_000,
        ),
        (
            Quota::new(3, Duration::from_millis(7), 5).unwrap(),
            10_000_000,
        ),
        (
            Quota::new(1, Duration::from_secs(3_600), 2).unwrap(),
            1_000_000_000_000,
        ),
    ];
    let mut shorter_in_all = 0;
    for shards in [2usize, 8, 64] {
        for (i, &(quota, step)) in cases.iter().enumerate() {
            let seed = 0xd1e5 + i as u64 + 100 * shards as u64;
            shorter_in_all += against_a_bucket(quota, step, shards, seed, 5_000);
        }
    }
    assert!(
        shorter_in_all > 0,
        "no refusal answered from an earlier instant"
    );
}

/// One thread deciding on a `ShardedBucket` of `shards` and on a `Bucket` at the same
/// readings, `steps` times: clock steps of up to `step` ns, a step back every 500, costs 0 to
/// beyond the burst, a snapshot every 7th. Every verdict, snapshot and `available` agrees;
/// behind the latest reading a refusal may wait less than the `Bucket` says, never more (the
/// count of those is returned). Nothing stranded.
fn against_a_bucket(quota: Quota, step: u64, shards: usize, seed: u64, steps: u32) -> u32 {
    let (c1, c2) = (ManualClock::new(), ManualClock::new());
    let bucket = Bucket::with_clock(quota, c1.clone());
    let sharded = ShardedBucket::with_clock(quota, shards, c2.clone());
    let burst = quota.burst();
    assert_eq!(sharded.shards() as u64, (shards as u64).min(burst));
    let mut rng = Rng(seed);
    let (mut latest, mut shorter) = (0u64, 0u32);
    for n in 1..=steps {
        if n % 500 == 0 {
            let back = Duration::from_nanos(c1.now() - rng.below(10 * step + 1).min(c1.now()));
            c1.set(back);
            c2.set(back);
        } else {
            let dt = Duration::from_nanos(rng.below(step + 1));
            c1.advance(dt);
            c2.advance(dt);
        }
        let behind = c1.now() < latest;
        latest = latest.max(c1.now());
        let cost = match rng.below(8) {
            0 => 0,
            1 => burst + 1,
            2 => 1 + rng.below(burst),
            _ => 1,
        };
        let at = format!("{quota:?}, {shards} shards, step {n}, cost {cost}");
        let (got, want) = if n % 7 == 0 {
            let (g, gs) = sharded.try_acquire_snapshot(cost);
            let (w, ws) = bucket.decide_snapshot(&(), cost);
            assert_eq!(gs, ws, "{at}");
            (g, w)
        } else {
            (sharded.try_acquire(cost), bucket.try_acquire(cost))
        };
        match (got, want) {
            (Err(Denied::RetryAfter(g)), Err(Denied::RetryAfter(w))) if behind && g != w => {
                assert!(g < w, "{at}: waits {g:?}, a Bucket {w:?}");
                shorter += 1;
            }
            _ => assert_eq!(got, want, "{at}"),
        }
        assert_eq!(sharded.available(), bucket.available(), "{at}");
    }
    assert_eq!(sharded.stranded_tokens(), 0.0);
    println!("{quota:?}, {shards} shards: {shorter} shorter waits behind the latest reading");
    shorter
}
