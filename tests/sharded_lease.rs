//! ShardedBucket's leases: stale and stalled spends keep every window, pooling a lease with the
//! central word, the bounded loss of a lease that lapses, and random stalls around lease
//! replacement. ManualClock (or the real clock with seeded stalls) and fixed seeds.
#![cfg(feature = "std")]

use std::sync::Arc;
use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota, ShardedBucket, StdClock};

use rng::Rng;
use stall::{arm, decision_reading, gated, last_reading, Stall, StallClock};
use tollgate_testkit::cpus;
use tollgate_testkit::rng;
use tollgate_testkit::stall;
use tollgate_testkit::window;
use window::WindowChecker;

const S: u64 = 1_000_000_000;

/// A lease taken at a late reading holds units near that reading's refill; a spend at a much
/// older reading (a thread preempted since its clock read) must not take them: at that reading
/// the whole burst was already admitted. Without the lease's "within one burst of the reading"
/// test the window `[t0, t0]` would hold burst + 1.
#[test]
fn a_stale_spend_cannot_take_a_lease_of_a_later_reading() {
    for shards in [2usize, 64] {
        let clock = StallClock::new(ManualClock::new());
        let quota = Quota::per_second(1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let checker = WindowChecker::new();
        let take = |cost: u64| {
            let verdict = bucket.try_acquire(cost);
            if verdict.is_ok() {
                checker.admit(last_reading(), cost);
            }
            verdict
        };
        clock.inner().set(Duration::from_nanos(10 * S));
        assert_eq!(take(1_000), Ok(()));
        clock.inner().set(Duration::from_nanos(20 * S));
        // 1 token and a lease of ⌊999 / (8 × shards)⌋ tokens (or none at 64 shards).
        assert_eq!(take(1), Ok(()));
        for _ in 0..10 {
            arm([Stall::Reading(10 * S)]);
            assert!(
                take(1).is_err(),
                "{shards} shards: a token at the drained reading"
            );
        }
        // At the lease's own reading its tokens are there.
        while take(1).is_ok() {}
        assert_eq!(checker.check(&quota), Ok(()), "{shards} shards");
        assert_eq!(checker.total(), 2_000, "{shards} shards");
    }
}

/// A thread takes a lease, then stalls between its next reading and its spend while the main
/// thread drains the bucket two seconds later (its own shard's lease and the central word, or
/// the same lease if the two threads share a shard). The stalled spend, at its old reading,
/// takes a leased token only if it is within one burst of that reading; every window holds.
#[test]
fn a_stalled_spend_keeps_every_window() {
    for shards in [2usize, 8] {
        let clock = StallClock::new(ManualClock::new());
        let quota = Quota::per_second(1_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let checker = WindowChecker::new();
        clock.inner().set(Duration::from_nanos(10 * S));
        let (bucket, checker) = (&bucket, &checker);
        let stalled = std::thread::scope(|s| {
            s.spawn(|| {
                // Takes 1 and a lease.
                assert_eq!(bucket.try_acquire(1), Ok(()));
                checker.admit(last_reading(), 1);
                gated(
                    || {
                        let verdict = bucket.try_acquire(1);
                        if verdict.is_ok() {
                            checker.admit(last_reading(), 1);
                        }
                        verdict
                    },
                    || {
                        clock.inner().set(Duration::from_nanos(12 * S));
                        let (b, c) = (bucket, checker);
                        // A thread of its own: the main test thread may share no shard.
                        std::thread::scope(|s| {
                            s.spawn(|| {
                                while b.try_acquire(1).is_ok() {
                                    c.admit(last_reading(), 1);
                                }
                            });
                        });
                    },
                )
            })
            .join()
            .unwrap()
        });
        assert_eq!(checker.check(&quota), Ok(()), "{shards} shards");
        // Whatever the stalled spend did, nothing beyond burst + 2 s of rate.
        assert!(
            checker.total() <= 3_000,
            "{shards} shards: {}",
            checker.total()
        );
        println!("{shards} shards: stalled spend {stalled:?}");
    }
}

/// The measured loss of leases: a thread takes a lease on a full bucket and exits; the main
/// thread then takes everything it can every 100 µs for two seconds. A single `Bucket` seeing
/// the same requests is the reference: the sharded bucket admits no more, and at most the
/// abandoned lease less (`⌊99,999 / (8 × shards)⌋` tokens: 6,249 at 2 shards, 12 at 1,024).
/// The two threads are pinned to two CPUs, so at 1,024 shards their shards differ for certain
/// (threads are homed by CPU). A lease that its own shard's threads keep spending loses
/// nothing: the 2-shard case loses nothing when the two CPUs map to one shard.
#[test]
fn an_abandoned_lease_loses_at_most_its_tokens() {
    let pinned = cpus::two();
    for (shards, lease) in [(2usize, 6_249u64), (1024, 12)] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(100_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, clock.clone());
        let reference = Bucket::with_clock(quota, clock.clone());
        std::thread::scope(|s| {
            s.spawn(|| {
                if let Some([first, _]) = pinned {
                    cpus::pin(first);
                }
                assert_eq!(bucket.try_acquire(1), Ok(()))
            });
        });
        // This (the test's own) thread on the other CPU from its first decision on.
        if let Some([_, second]) = pinned {
            cpus::pin(second);
        }
        assert_eq!(reference.try_acquire(1), Ok(()));
        let (mut got, mut want) = (1u64, 1u64);
        for _ in 0..20_000 {
            while bucket.try_acquire(1).is_ok() {
                got += 1;
            }
            while reference.try_acquire(1).is_ok() {
                want += 1;
            }
            clock.advance(Duration::from_micros(100));
        }
        assert!(got <= want, "{shards} shards: {got} > {want}");
        assert!(
            want - got <= lease,
            "{shards} shards: lost {} of {want}",
            want - got
        );
        // Pinned to two CPUs, at 1,024 shards the lease is abandoned for certain (two CPUs get
        // two ranks below 1,024): some of it lapses, or this test measured nothing.
        if pinned.is_some() && shards == 1024 {
            assert!(
                got < want,
                "{shards} shards: nothing lost, no lease abandoned"
            );
        }
        println!("abandoned lease, {shards} shards: {got} of {want} admitted");
    }
}

/// On a frozen clock a lease never lapses: two threads draining with costs that often exceed
/// what their lease holds (so decisions pool a lease with the central word, and leases are
/// replaced) take exactly the burst between them, nothing stranded.
#[test]
fn frozen_clock_pooling_and_replacement_take_exactly_the_burst() {
    for shards in [2usize, 4] {
        let quota = Quota::per_second(100_000).unwrap();
        let bucket = ShardedBucket::with_clock(quota, shards, ManualClock::new());
        let total: u64 = std::thread::scope(|s| {
            let spawned: Vec<_> = (0..2u64)
                .map(|t| {
                    let bucket = &bucket;
                    s.spawn(move || {
                        let mut rng = Rng(t + 7);
                        let mut got = 0;
                        // Large costs until refused, then single tokens until refused.
                        loop {
                            let cost = 1 + rng.below(5_000);
                            match bucket.try_acquire(cost) {
                                Ok(()) => got += cost,
                                Err(_) => break,
                            }
                        }
                        while bucket.try_acquire(1).is_ok() {
                            got += 1;
                        }
                        got
                    })
                })
                .collect();
            spawned.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(total, 100_000, "{shards} shards");
        assert_eq!(bucket.available(), 0, "{shards} shards");
        assert_eq!(bucket.stranded_tokens(), 0.0, "{shards} shards");
    }
}

/// Real threads and random stalls between the reading and the decision, a burst large enough
/// for leases of thousands of tokens and costs up to twice a lease, so spends, replacements,
/// pooled decisions and refusals race at readings out of order: every window holds.
#[test]
fn random_stalls_around_leases_never_break_any_window() {
    let quota = Quota::new(2_000_000, Duration::from_secs(1), 200_000).unwrap();
    for (shards, seed) in [(2usize, 11u64), (8, 12)] {
        let (total, stranded) = four_stalled_threads(quota, shards, seed, 300, 20_000, (6_000, 4));
        println!("{shards} shards: {total} tokens admitted, {stranded:.3} stranded");
    }
}

/// The bucket-wide dry instant (`dry_all`) under stalls, with leases out: 1,000 tokens/s, so a
/// drained word is dry for a millisecond and more and its dry instant is published for every
/// shard; a burst of 2,000, so the first decisions take leases of up to 125 tokens; one cost in
/// 16 up to 400, so the word runs dry while other shards' leases still hold tokens (the scan
/// before a publication finds them and does not publish); 1 % of readings stalled up to 3 ms,
/// three tokens' time, so stale readings spend, pool and publish among current ones. Every
/// window holds at the readings the decisions used (with the publications counted, about 200
/// happen at 2 and at 8 shards, a few of them stopped by a lease holding tokens).
#[test]
fn dry_spells_under_stalls_never_break_any_window() {
    let quota = Quota::new(1_000, Duration::from_secs(1), 2_000).unwrap();
    for (shards, seed) in [(2usize, 21u64), (8, 22)] {
        let (total, stranded) = four_stalled_threads(quota, shards, seed, 3_000, 20_000, (400, 2));
        assert!(total >= 2_000, "{shards} shards: {total}");
        println!("dry spells, {shards} shards: {total} admitted, {stranded:.1} stranded");
    }
}

/// What the dry instant may refuse: nothing a shard's lease holds. A `ManualClock` moved a
/// token (1 ms of 1,000 tokens/s) at a time by the main thread, so that every reading, state and
/// lease is whole tokens, and every drained word is dry for the millisecond that publishes the
/// bucket's dry instant; four threads pinned to the CPUs in turn decide on it (burst 2,000:
/// leases of up to 125 tokens at first; one cost in 16 up to 400, which runs the word dry while
/// other shards' leases hold tokens) with 1 % of readings stalled up to 300 µs, a dozen steps.
/// Then the clock moves on by a burst's time and stops, and each thread takes one token at a
/// time until refused: leases are taken from the full word, which runs dry while some still
/// hold tokens. Every window holds, and nothing is left: a one-token refusal while the
/// thread's own lease held a token (the dry instant published over a lease, or a stale shard
/// `dry_until`) would leave it in `available()`. Fails when the publication skips its scan.
#[test]
fn dry_spells_refuse_nothing_a_lease_holds_under_stalls() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let allowed = cpus::allowed();
    if allowed.is_empty() || !cpus::known() {
        eprintln!("no CPU list, or no CPU number: threads cannot be pinned, nothing to check");
        return;
    }
    let quota = Quota::new(1_000, Duration::from_secs(1), 2_000).unwrap();
    for (shards, seed) in [(2usize, 31u64), (8, 32)] {
        let manual = ManualClock::new();
        let clock = StallClock::random(manual.clone(), 0.01, Duration::from_micros(300), seed);
        let bucket = ShardedBucket::with_clock(quota, shards, clock);
        let checker = WindowChecker::new();
        let (running, frozen) = (AtomicUsize::new(4), AtomicBool::new(false));
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (bucket, checker, allowed) = (&bucket, &checker, &allowed);
                let (running, frozen) = (&running, &frozen);
                s.spawn(move || {
                    cpus::pin(allowed[t as usize % allowed.len()]);
                    let mut rng = Rng(seed * 16 + t + 1);
                    for _ in 0..20_000 {
                        let range = if rng.below(16) == 0 { 400 } else { 2 };
                        let cost = 1 + rng.below(range);
                        let admitted = bucket.try_acquire(cost).is_ok();
                        let at = decision_reading();
                        if admitted {
                            checker.admit(at, cost);
                        }
                    }
                    running.fetch_sub(1, Ordering::Release);
                    while !frozen.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    while bucket.try_acquire(1).is_ok() {
                        checker.admit(decision_reading(), 1);
                    }
                    decision_reading();
                });
            }
            while running.load(Ordering::Acquire) > 0 {
                manual.advance(Duration::from_millis(1));
                std::thread::sleep(Duration::from_micros(20));
            }
            // A whole burst's time: the word full, so the drain takes leases again.
            manual.advance(Duration::from_secs(2));
            frozen.store(true, Ordering::Release);
        });
        assert_eq!(checker.check(&quota), Ok(()), "{shards} shards");
        assert_eq!(bucket.available(), 0, "{shards} shards: left behind");
        println!(
            "{shards} shards: {} admitted by {} ms, {:.1} stranded",
            checker.total(),
            manual.now() / 1_000_000,
            bucket.stranded_tokens()
        );
    }
}

/// Four threads making `calls` decisions each on a `shards`-shard bucket whose clock stalls 1 %
/// of readings for up to `stall_us`; one cost in 16 is `1 + below(big)`, the others `1 +
/// below(small)`. Checks every window at the readings the decisions used; returns the tokens
/// admitted and `stranded_tokens()`.
fn four_stalled_threads(
    quota: Quota,
    shards: usize,
    seed: u64,
    stall_us: u64,
    calls: u32,
    (big, small): (u64, u64),
) -> (u128, f64) {
    let clock = StallClock::random(StdClock::new(), 0.01, Duration::from_micros(stall_us), seed);
    let bucket = ShardedBucket::with_clock(quota, shards, clock);
    let checker = WindowChecker::new();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (bucket, checker) = (&bucket, &checker);
            s.spawn(move || {
                let mut rng = Rng(seed * 16 + t + 1);
                for _ in 0..calls {
                    let range = if rng.below(16) == 0 { big } else { small };
                    let cost = 1 + rng.below(range);
                    let admitted = bucket.try_acquire(cost).is_ok();
                    let at = decision_reading();
                    if admitted {
                        checker.admit(at, cost);
                    }
                }
            });
        }
    });
    assert_eq!(checker.check(&quota), Ok(()), "{shards} shards");
    (checker.total(), bucket.stranded_tokens())
}

/// A shard whose lease lapsed (its thread took a lease from the full bucket, then went quiet
/// while another shard drained the word) still takes near leases once the word is near its
/// limit: a near lease replaces a lapsed one, and the size it halves to after a lapse never
/// reaches 0. The schedule makes the quiet shard find the word dry: the other shard takes each
/// token the instant it is earned, then the quiet one asks twice. `stranded_tokens` counts the
/// lapsed units of the lease a near lease replaced. The window bound is checked against a
/// `Bucket` on the same clock throughout. The two threads are pinned to two CPUs that the probe found on two
/// shards ([`two_cpus_on_two_shards`]: the first two CPUs may share one on a larger machine).
#[test]
fn a_lapsed_lease_does_not_keep_its_shard_from_advances() {
    let pinned = two_cpus_on_two_shards();
    let clock = ManualClock::new();
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    let token = Duration::from_nanos(100);
    let bucket = ShardedBucket::with_clock(quota, 2, clock.clone());
    let reference = Bucket::with_clock(quota, clock.clone());
    let turns = std::sync::Barrier::new(2);
    let tries = |n: usize| (0..n).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64;
    let (mut got, mut want) = (0u64, 0u64);
    let step = |by: Duration, want: &mut u64| {
        clock.advance(by);
        while reference.try_acquire(1).is_ok() {
            *want += 1;
        }
    };
    std::thread::scope(|s| {
        let quiet = s.spawn(|| {
            if let Some([first, _]) = pinned {
                cpus::pin(first);
            }
            // A lease from the full bucket, one token of it spent; then quiet.
            let mut got = tries(1);
            turns.wait();
            turns.wait(); // the other shard drained the word twice: the lease lapsed
            for _ in 0..1_000 {
                turns.wait(); // a token earned, and taken by the other shard
                got += tries(2);
                turns.wait();
            }
            got
        });
        if let Some([_, second]) = pinned {
            cpus::pin(second);
        }
        turns.wait();
        step(Duration::ZERO, &mut want);
        got += tries(20_000);
        step(Duration::from_millis(5), &mut want);
        got += tries(20_000);
        turns.wait();
        for _ in 0..1_000 {
            step(token, &mut want);
            got += tries(1);
            turns.wait();
            turns.wait();
        }
        got += quiet.join().unwrap();
    });
    assert!(got <= want, "{got} > {want}");
    // Lost: the lapsed lease (at most a sixteenth of the burst, 625 tokens) and one near lease.
    assert!(want - got <= 625 + 64, "lost {} of {want}", want - got);
    if pinned.is_some() {
        // Two CPUs, two shards: the quiet shard's lapsed lease was replaced by a near lease.
        assert!(
            bucket.stranded_tokens() > 0.0,
            "the shard with a lapsed lease took no near lease"
        );
    }
    println!(
        "lapsed lease, CPUs {pinned:?}: {got} of {want} admitted, {} tokens stranded",
        bucket.stranded_tokens()
    );
}

/// A near lease abandoned by its shard loses at most its size: one token here, an eighth of the
/// burst over 1,024 shards. Two threads pinned to two CPUs (two shards of 1,024) take turns on
/// a drained bucket, each asking for tokens until refused at every 50 ns step — faster than the
/// rate, so each finds its lease empty and the word dry and takes near leases; then the first
/// stops and the second goes on alone. A `Bucket` asked greedily at every step is the
/// reference: the sharded bucket admits no more while both run, and at most one near lease less
/// in all.
#[test]
fn an_abandoned_advance_loses_at_most_its_size() {
    let pinned = cpus::two();
    let clock = ManualClock::new();
    let quota = Quota::new(10_000_000, Duration::from_secs(1), 10_000).unwrap();
    let bucket = ShardedBucket::with_clock(quota, 1024, clock.clone());
    let reference = Bucket::with_clock(quota, clock.clone());
    // Pinned before this thread's first decision, which caches its CPU's shard: from another
    // CPU it would share the first thread's shard for its first 1,023 decisions, and whether
    // it did changed which of the two takes the tokens.
    if let Some([_, second]) = pinned {
        cpus::pin(second);
    }
    assert_eq!(bucket.try_acquire(10_000), Ok(()));
    assert_eq!(reference.try_acquire(10_000), Ok(()));
    let greedy = || {
        let mut got = 0u64;
        while bucket.try_acquire(1).is_ok() {
            got += 1;
        }
        got
    };
    let step = |want: &mut u64| {
        clock.advance(Duration::from_nanos(50));
        while reference.try_acquire(1).is_ok() {
            *want += 1;
        }
    };
    let turns = std::sync::Barrier::new(2);
    let (mut got, mut want) = (0u64, 0u64);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            if let Some([first, _]) = pinned {
                cpus::pin(first);
            }
            let mut got = 0;
            for _ in 0..20_000 {
                turns.wait(); // the clock has moved
                got += greedy();
                turns.wait(); // the second thread's turn
            }
            got
        });
        for _ in 0..20_000 {
            step(&mut want);
            turns.wait();
            turns.wait();
            got += greedy();
        }
        got += first.join().unwrap();
    });
    assert!(got <= want, "both threads: {got} > {want}");
    for _ in 0..20_000 {
        step(&mut want);
        got += greedy();
    }
    assert!(got <= want, "{got} > {want}");
    // At most the near lease the first thread's shard may hold when it stops (one token: an
    // eighth of the burst over 1,024 shards).
    assert!(want - got <= 1, "lost {} of {want}", want - got);
    println!("abandoned advance: {got} of {want} admitted");
}

/// Advances under stalls: four threads on a bucket at 50 M tokens/s (advances of up to 64
/// tokens) with a clock that stalls 1 % of readings for up to 200 µs, so that advances are
/// taken, spent, abandoned by stalled threads and replaced while others decide; every window
/// is checked against burst + rate·Δ at the readings the decisions used.
#[test]
fn advances_under_stalls_never_break_any_window() {
    let quota = Quota::new(50_000_000, Duration::from_secs(1), 256).unwrap();
    for (shards, seed) in [(2usize, 7u64), (8, 8)] {
        let (total, stranded) = four_stalled_threads(quota, shards, seed, 200, 50_000, (8, 1));
        assert!(total > 0);
        println!("advances, {shards} shards: {total} admitted, {stranded:.1} stranded");
    }
}

/// A lease lives at least 250 ns of the rate (`lease_min`): one shorter than the time between
/// its shard's decisions lapses unspent, so its taker paid a lock and a CAS for nothing and the
/// other shards lost its tokens. At 40 M tokens/s that floor is 10 tokens, and a lease of 10
/// from 64 shards needs a word of `1 + 8 × 64 × 10` tokens, more than a burst of 1,024: the
/// first shard's one-token decision takes no lease (a near lease from the full word would lapse
/// as soon), and the other shard gets the rest of the burst. At 1 M tokens/s (a floor of one
/// token) it takes one, and the other gets 1,022. On a
/// frozen clock; the two threads pinned to two CPUs. 64 shards, so that the two CPUs' ranks
/// (consecutive in the order the process first saw its CPUs, whichever tests ran before) fall
/// on two shards wherever fewer than 64 CPUs were seen; with two shards, ranks 0 and 2 would
/// share one.
#[test]
fn a_high_rate_takes_no_short_lived_lease() {
    let Some([first, second]) = cpus::two() else {
        eprintln!("one CPU only: one shard would be used, nothing to check");
        return;
    };
    // One token taken on the first CPU's shard, then what the second CPU's shard can take.
    let second_gets = |per_second: u64| {
        let quota = Quota::new(per_second, Duration::from_secs(1), 1_024).unwrap();
        let bucket = ShardedBucket::with_clock(quota, 64, ManualClock::new());
        assert_eq!(bucket.shards(), 64);
        taken_after(&bucket, first, second)
    };
    assert_eq!(
        second_gets(40_000_000),
        1_023,
        "the first shard's decision leased tokens the second lost"
    );
    // The control: at 1 M tokens/s a lease of one token stays with the first shard (so the two
    // threads did decide on two shards).
    assert_eq!(second_gets(1_000_000), 1_022);
}

/// Two CPUs whose threads decide on different shards of a two-shard bucket, if the process may
/// run on two. A thread's shard is its CPU's rank modulo the shard count, and ranks follow the
/// order in which the process first saw its CPUs — whichever tests ran before — so on a machine
/// of more than two CPUs the first two may share a shard (ranks 0 and 2). Found by
/// [`two_shard_probe`] for each candidate.
fn two_cpus_on_two_shards() -> Option<[usize; 2]> {
    let allowed = cpus::allowed();
    let (&first, rest) = allowed.split_first()?;
    for &cpu in rest {
        match two_shard_probe(first, cpu) {
            937 => return Some([first, cpu]),
            999 => {}
            other => panic!("CPU {cpu} took {other} tokens: neither 937 nor 999"),
        }
    }
    None
}

/// On a frozen clock, one token of a full two-shard bucket with a burst of 1,000 taken on CPU
/// `a` also leases 62 to its shard, so a thread on CPU `b` then takes 999 tokens on the same
/// shard (it spends that lease) and 937 on the other.
fn two_shard_probe(a: usize, b: usize) -> usize {
    let quota = Quota::per_second(1_000).unwrap();
    taken_after(
        &ShardedBucket::with_clock(quota, 2, ManualClock::new()),
        a,
        b,
    )
}

/// A thread pinned to CPU `a` takes one token of `bucket`; then one pinned to CPU `b` takes what
/// it can (2,000 tries): how many it got.
fn taken_after(bucket: &ShardedBucket<ManualClock>, a: usize, b: usize) -> usize {
    std::thread::scope(|s| {
        s.spawn(|| {
            cpus::pin(a);
            assert_eq!(bucket.try_acquire(1), Ok(()));
        })
        .join()
        .unwrap();
        s.spawn(|| {
            cpus::pin(b);
            (0..2_000).filter(|_| bucket.try_acquire(1).is_ok()).count()
        })
        .join()
        .unwrap()
    })
}

/// The probe tells one shard from two: one CPU is one shard (999), and where the process may run
/// on two CPUs or more, two of them are on two shards (ranks are consecutive from 0, so both
/// parities are there).
#[test]
fn the_shard_probe_tells_one_shard_from_two() {
    let allowed = cpus::allowed();
    let Some(&first) = allowed.first().filter(|_| cpus::known()) else {
        eprintln!(
            "no CPU list, or no CPU number (not Linux, or the calls failed): nothing to probe"
        );
        return;
    };
    assert_eq!(two_shard_probe(first, first), 999);
    if allowed.len() >= 2 {
        let [a, b] = two_cpus_on_two_shards().expect("two CPUs on two shards");
        assert_eq!(two_shard_probe(a, b), 937);
        assert_eq!(two_shard_probe(b, a), 937);
    }
}

/// A drain empties the shards' leases as well as the central word: a lease taken before it
/// pays nothing after it, so a drained bucket admits what the clock earns from the drain on and
/// no more (with 2 and 4 shards, a far lease on each shard first).
#[test]
fn a_drain_empties_every_lease() {
    let q = Quota::per_second(1_000_000).unwrap();
    for shards in [2, 4] {
        let clock = ManualClock::new();
        let bucket = Arc::new(ShardedBucket::with_clock(q, shards, clock.clone()));
        // A thread per shard (at least) takes a lease: each admits one token and leaves the
        // rest of its lease to its shard.
        std::thread::scope(|s| {
            for _ in 0..shards * 2 {
                let bucket = bucket.clone();
                s.spawn(move || assert_eq!(bucket.try_acquire(1), Ok(())));
            }
        });
        bucket.drain();
        assert_eq!(bucket.available(), 0, "{shards} shards");
        let admitted = std::thread::scope(|s| {
            let hs: Vec<_> = (0..shards * 2)
                .map(|_| {
                    let bucket = bucket.clone();
                    s.spawn(move || (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum::<usize>()
        });
        assert_eq!(admitted, 0, "{shards} shards: a lease paid after the drain");
        assert!(bucket.stranded_tokens() > 0.0, "{shards} shards");
        clock.advance(Duration::from_micros(10));
        assert_eq!(
            bucket.available(),
            10,
            "{shards} shards: the refill from the drain on"
        );
    }
}
