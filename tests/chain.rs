//! `all_of` / `all_of2`: different limiters required together, taken in order, earlier tokens
//! given back when a later one refuses. Never over-admits any limiter; the slowest wait; and
//! the under-admission contention costs (a give-back that finds a later admission keeps its
//! tokens), measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tollgate::Limiter;
use tollgate::{all_of, all_of2, Bucket, Denied, Limits, ManualClock, MultiBucket, Quota};
use tollgate_testkit::decide::Snapshotting;

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

#[test]
fn refusals_give_back_and_report_the_slowest_wait() {
    let clock = ManualClock::new();
    let global = Bucket::with_clock(q(100, 1000, 100), clock.clone());
    let tenant = MultiBucket::with_clock(
        Limits::new([q(1, 100, 2), q(1, 1000, 3)]).unwrap(),
        clock.clone(),
    );
    assert_eq!(all_of2(&global, &tenant, 2), Ok(()));
    // The tenant refuses (100 ms): the global token comes back.
    assert_eq!(
        all_of2(&global, &tenant, 1),
        Err(Denied::RetryAfter(Duration::from_millis(100)))
    );
    assert_eq!(global.available(), 98);
    // The global bucket refuses: the tenant's wait is checked without consuming, the larger kept.
    global.try_acquire(98).unwrap();
    clock.advance(Duration::from_millis(5));
    assert_eq!(
        all_of2(&global, &tenant, 1),
        Err(Denied::RetryAfter(Duration::from_millis(95)))
    );
    assert_eq!(
        all_of2(&tenant, &global, 1),
        Err(Denied::RetryAfter(Duration::from_millis(95)))
    );
    assert_eq!(tenant.available(), 0);
    // ExceedsBurst from either side.
    assert_eq!(all_of2(&global, &tenant, 4), Err(Denied::ExceedsBurst));
    assert_eq!(all_of2(&tenant, &global, 101), Err(Denied::ExceedsBurst));
    // `all_of` with any limiter last: the closure's refusal, the first's tokens back.
    clock.advance(Duration::from_secs(10));
    let before = global.available();
    assert_eq!(
        all_of(&global, 1, |_| Err(Denied::RetryAfter(
            Duration::from_secs(3)
        ))),
        Err(Denied::RetryAfter(Duration::from_secs(3)))
    );
    assert_eq!(global.available(), before);
    assert_eq!(all_of(&global, 0, |_| Ok(())), Ok(()));
}

/// Four threads push one tenant (burst 100) through a chain with a global bucket (burst
/// 100,000) on a frozen clock: the tenant admits exactly its burst, the global bucket never
/// admits more than it holds, and the global tokens lost to give-backs that found another
/// thread's admission are the chain's under-admission (reported). A `MultiBucket` over both
/// quotas loses none.
#[test]
fn contention_never_over_admits_and_the_loss_is_measured() {
    let global_q = q(1, 3_600_000, 100_000);
    let tenant_q = q(1, 3_600_000, 100);
    let global = Bucket::with_clock(global_q, ManualClock::new());
    let tenant = Bucket::with_clock(tenant_q, ManualClock::new());
    let admitted = AtomicU64::new(0);
    let attempts = 20_000u64;
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (global, tenant, admitted) = (&global, &tenant, &admitted);
            s.spawn(move || {
                for _ in 0..attempts {
                    if all_of2(global, tenant, 1).is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let admitted = admitted.into_inner();
    assert_eq!(admitted, 100);
    assert_eq!(tenant.available(), 0);
    let lost = 100_000 - admitted - global.available();
    eprintln!(
        "chain: {lost} global tokens lost in {} refused attempts",
        4 * attempts - admitted
    );
    assert!(lost <= 4 * attempts - admitted);

    let policy = MultiBucket::with_clock(
        Limits::new([global_q, tenant_q]).unwrap(),
        ManualClock::new(),
    );
    std::thread::scope(|s| {
        for _ in 0..4 {
            let policy = &policy;
            s.spawn(move || {
                for _ in 0..attempts {
                    let _ = policy.try_acquire(1);
                }
            });
        }
    });
    let left: Vec<u64> = policy
        .decide_snapshots(&(), 0)
        .1
        .as_slice()
        .iter()
        .map(|s| s.remaining())
        .collect();
    assert_eq!(left, [100_000 - 100, 0]);
}

/// A clock that moves 1 ns at every reading: any real clock between two reads.
#[derive(Clone, Debug, Default)]
struct Tick(std::sync::Arc<AtomicU64>);

impl tollgate::Clock for Tick {
    fn now(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

/// A give-back whenever it comes: the take is due at its own reading, and nothing was acted
/// on, so the clock moving between the take and the later limiter's refusal changes nothing.
/// (With the cancel rule's "not yet due", nothing would come back once 1 ns had passed: 100
/// refused chains would empty a global bucket of 100.)
#[test]
fn a_give_back_after_the_clock_moved_gives_everything_back() {
    let clock = ManualClock::new();
    let global = Bucket::with_clock(q(100, 1000, 100), clock.clone());
    let multi = MultiBucket::with_clock(
        Limits::new([q(100, 1000, 100), q(1000, 1000, 1000)]).unwrap(),
        clock.clone(),
    );
    let refuse_later = |_| {
        clock.advance(Duration::from_nanos(1));
        Err(Denied::RetryAfter(Duration::from_secs(1)))
    };
    for _ in 0..100 {
        assert!(all_of(&global, 1, refuse_later).is_err());
        assert!(all_of(&multi, 1, refuse_later).is_err());
    }
    assert_eq!(global.available(), 100);
    assert_eq!(multi.available(), 100);

    let tick = Tick::default();
    let global = Bucket::with_clock(q(100, 1000, 100), tick.clone());
    let tenant = Bucket::with_clock(q(1, 1000, 1), tick.clone());
    tenant.try_acquire(1).unwrap();
    for _ in 0..100 {
        assert!(all_of2(&global, &tenant, 1).is_err());
    }
    assert_eq!(global.available(), 100);
}

/// A give-back restores the state from before the take, not the take's state less its cost:
/// for a quota whose unit is a whole token (scale 1) and a reading off its unit grid, the
/// latter would keep a token, and the chain's wait would be short by up to a token's time.
#[test]
fn a_give_back_keeps_no_unit_of_rounding_and_the_wait_holds() {
    let big = 1u64 << 62;
    let first_q = Quota::new(3, Duration::from_secs(1), big).unwrap();
    assert_eq!((first_q.scale(), first_q.is_exact()), (1, false));
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(1));
    let first = Bucket::with_clock(first_q, clock.clone());
    let second = Bucket::with_clock(
        Quota::new(1, Duration::from_millis(1), big).unwrap(),
        clock.clone(),
    );
    second.try_acquire(1).unwrap();
    let Err(Denied::RetryAfter(wait)) = all_of2(&first, &second, big) else {
        panic!("refused by the second");
    };
    assert_eq!(first.available(), big, "the first comes back full");
    clock.advance(wait);
    assert_eq!(
        all_of2(&first, &second, big),
        Ok(()),
        "admitted at the wait named"
    );
}

/// A `Bucket` take that refuses writes nothing, whatever comes between its clock readings: a
/// take that reserved first and cancelled when the tokens were not there yet would let another
/// reservation held across that cancel keep the refused chain's token taken (the next wait 2 s
/// instead of 1 s). The other reservation comes at the take's second reading (where such a take
/// would read its `delay`), or after the take if it reads the clock once.
#[test]
fn a_refused_take_takes_nothing_whatever_comes_between() {
    use tollgate_testkit::stall::{gated_at, StallClock};
    let clock = StallClock::new(ManualClock::new());
    let global = Bucket::with_clock(q(1, 1000, 1), clock);
    global.try_acquire(1).unwrap();
    let (refused, other) = gated_at(
        2,
        || all_of(&global, 1, |_| Ok(())),
        || global.reserve(1).unwrap(),
    );
    other.cancel();
    assert_eq!(refused, Err(Denied::RetryAfter(Duration::from_secs(1))));
    assert_eq!(
        global.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_secs(1))),
        "the refused take left its token taken"
    );
}

/// [`a_refused_take_takes_nothing_whatever_comes_between`] with the clock passing the due
/// instant at the take's second reading (a stall, a coarse clock): the old take's cancel found
/// its reservation due and gave nothing back, though the take refused.
#[test]
fn a_refused_take_takes_nothing_when_the_clock_passes_its_due_instant() {
    use tollgate::Clock;
    use tollgate_testkit::stall::{gated_at, StallClock};
    let clock = StallClock::new(ManualClock::new());
    let global = Bucket::with_clock(q(1, 1000, 1), clock.clone());
    global.try_acquire(1).unwrap();
    let (refused, ()) = gated_at(
        2,
        || all_of(&global, 1, |_| Ok(())),
        || clock.inner().advance(Duration::from_nanos(1_000_000_001)),
    );
    assert_eq!(refused, Err(Denied::RetryAfter(Duration::from_secs(1))));
    assert_eq!(clock.now(), 1_000_000_001);
    // Emptied at 0, one token back at 1 s: the refused take must not have spent it.
    assert_eq!(
        global.available(),
        1,
        "the refused take left its token taken"
    );
}

/// Seeded random policies of one to four quotas and a separate bucket, exact, inexact and at
/// the ends of the range (10^9/s, one a year, bursts of 2^62), with reservations held and
/// cancelled between decisions: every finite wait that `MultiBucket::try_acquire`, `all_of2`
/// (both orders) or the bucket names is exact — the same request one nanosecond earlier is
/// refused with 1 ns to go, at the wait it is admitted. (`all_of` names only the first
/// limiter's wait when that one refuses: documented, not checked.)
#[test]
fn a_retry_at_the_named_wait_is_admitted_for_any_quotas() {
    use tollgate_testkit::random_quotas::{edge_quota, log_uniform, quota};
    use tollgate_testkit::rng::Rng;
    let mut checked = 0;
    for seed in 1..1_500u64 {
        let mut rng = Rng(seed * 0x9E37_79B9 + 1);
        let n = 1 + rng.below(4) as usize;
        let qs: Vec<Quota> = (0..=n)
            .map(|_| match rng.below(3) {
                0 => edge_quota(&mut rng, |_| true),
                _ => quota(&mut rng, |_| true),
            })
            .collect();
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(log_uniform(&mut rng, 1 << 50)));
        let multi = MultiBucket::with_clock(Limits::new(qs[..n].to_vec()).unwrap(), clock.clone());
        let bucket = Bucket::with_clock(qs[n], clock.clone());
        let min_burst = qs.iter().map(|q| q.burst()).min().unwrap();
        let mut held = Vec::new();
        for step in 0..60 {
            let cost = log_uniform(&mut rng, min_burst);
            match rng.below(12) {
                0 | 1 => {
                    held.extend(multi.reserve(cost));
                    continue;
                }
                2 if !held.is_empty() => {
                    let r: tollgate::MultiReservation<'_, _> = held.swap_remove(0);
                    r.cancel();
                    continue;
                }
                _ => {}
            }
            let which = rng.below(4);
            let decide = |c| match which {
                0 => multi.try_acquire(c),
                1 => all_of2(&multi, &bucket, c),
                2 => all_of2(&bucket, &multi, c),
                _ => bucket.try_acquire(c),
            };
            if let Err(Denied::RetryAfter(d)) = decide(cost) {
                if d < tollgate::HORIZON {
                    let d = d.as_nanos() as u64;
                    clock.advance(Duration::from_nanos(d - 1));
                    let early = decide(cost);
                    clock.advance(Duration::from_nanos(1));
                    let at = decide(cost);
                    let why =
                        format!("seed {seed} step {step} limiter {which} cost {cost} wait {d} ns");
                    assert_eq!(
                        early,
                        Err(Denied::RetryAfter(Duration::from_nanos(1))),
                        "{why}"
                    );
                    assert_eq!(at, Ok(()), "{why}");
                    checked += 1;
                }
            }
            clock.advance(Duration::from_nanos(log_uniform(&mut rng, 1 << 36)));
        }
    }
    assert!(checked > 5_000, "{checked}");
}

/// Edge inputs through policies, chains and reconfiguration never panic (a debug build checks
/// every overflow): quotas at the ends of the range (one token per `u64::MAX` ns, 10^9/s,
/// the largest bursts), costs 0, 1, 2^62 and `u64::MAX`, readings from 0 to `u64::MAX`, a
/// clock stepping back, `set_quota` between any two of them.
#[test]
fn edge_inputs_through_policies_chains_and_reconfiguration_never_panic() {
    let max_burst = |q: Quota| {
        let (mut lo, mut hi) = (1u64, u64::MAX);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if q.with_burst(mid).is_ok() {
                lo = mid
            } else {
                hi = mid - 1
            }
        }
        q.with_burst(lo).unwrap()
    };
    let mut qs = Vec::new();
    for (t, per) in [
        (1, Duration::from_nanos(u64::MAX)),
        (1_000_000_000, Duration::from_secs(1)),
        (1, Duration::from_nanos(1)),
        (999_999_937, Duration::from_secs(1)),
        (7, Duration::from_nanos(3)),
        (3, Duration::from_secs(1)),
    ] {
        let q = Quota::new(t, per, 1).unwrap();
        qs.extend([q, max_burst(q)]);
    }
    let costs = [0, 1, 2, 1 << 62, u64::MAX - 1, u64::MAX];
    let readings = [
        0,
        1,
        1_000_000_000,
        u64::MAX / 2,
        3_155_760_000_000_000_000,
        u64::MAX,
    ];
    for &a in &qs {
        for &b in &qs {
            for &start in &readings {
                let clock = ManualClock::new();
                clock.set(Duration::from_nanos(start));
                let bucket = Bucket::with_clock(a, clock.clone());
                let other = Bucket::with_clock(b, clock.clone());
                let pair = MultiBucket::with_clock(Limits::new([a, b]).unwrap(), clock.clone());
                let wide =
                    MultiBucket::with_clock(Limits::new([a, b, a, b]).unwrap(), clock.clone());
                for &c in &costs {
                    let _ = bucket.decide_snapshot(&(), c);
                    let _ = (pair.decide_snapshots(&(), c), wide.decide_snapshots(&(), c));
                    for r in [pair.reserve(c), wide.reserve(c)].into_iter().flatten() {
                        let _ = r.delay();
                        r.cancel();
                    }
                    let _ = pair.try_acquire_for(c, Duration::ZERO);
                    let _ = (all_of2(&bucket, &other, c), all_of2(&pair, &bucket, c));
                    let _ = all_of2(&bucket, &wide, c);
                    let _ = all_of(&pair, c, |c| other.try_acquire(c));
                    clock.set(Duration::from_nanos(start / 2));
                    let _ = (all_of2(&bucket, &pair, c), pair.try_acquire(c));
                    clock.set(Duration::from_nanos(start));
                    bucket.set_quota(b);
                    let _ = bucket.try_acquire(c);
                    bucket.set_quota(a);
                    let _ = (bucket.available(), pair.available(), wide.available());
                }
            }
        }
    }
}

/// Inherent, documented: a reconfiguration of an earlier limiter between its take and the
/// give-back keeps the take's tokens (the state is then counted in the new quota's units, and
/// the cancel rule gives nothing back across a reconfiguration); without one they come back.
#[test]
fn a_give_back_across_a_reconfiguration_keeps_the_tokens() {
    let clock = ManualClock::new();
    let global = Bucket::with_clock(q(10, 1000, 10), clock.clone());
    let refuse = Err(Denied::RetryAfter(Duration::from_secs(1)));
    assert_eq!(all_of(&global, 4, |_| refuse), refuse);
    assert_eq!(global.available(), 10);
    assert_eq!(
        all_of(&global, 4, |_| {
            global.set_quota(q(20, 1000, 10));
            refuse
        }),
        refuse
    );
    assert_eq!(global.available(), 6, "kept across the reconfiguration");
}
