//! Every built-in tollgate strategy applies exactly the core decision function: deterministic
//! checks on a ManualClock, single-threaded against the pure function and multi-threaded on a
//! frozen clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tollgate::{gcra, Bucket, Clock, ManualClock, Quota};
use tollgate_bench::strategies::{Cas, CasBackoff, ParkingLotMutex, SpinLock, StdMutex};
use tollgate_bench::{
    compare, run, run_cell, strategies, CellSpec, Error, Kind, Plan, RateLimiter, Regime, Strategy,
};

fn all(quota: Quota, clock: &ManualClock) -> Vec<Arc<dyn RateLimiter>> {
    vec![
        Arc::new(StdMutex::new(quota, clock.clone())),
        Arc::new(ParkingLotMutex::new(quota, clock.clone())),
        Arc::new(SpinLock::new(quota, clock.clone())),
        Arc::new(Cas::new(Bucket::with_clock(quota, clock.clone()))),
        Arc::new(CasBackoff::new(quota, clock.clone())),
    ]
}

#[test]
fn every_strategy_gives_the_pure_functions_verdicts() {
    let quota = Quota::new(7, Duration::from_millis(3), 5).unwrap();
    let clock = ManualClock::new();
    let limiters = all(quota, &clock);
    let mut reference = gcra::FULL;
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        clock.advance(Duration::from_nanos(x % 700_000));
        let cost = x >> 40 & 7; // 0..=7: includes 0 and costs above the burst
        let now = clock.now();
        let expected = match gcra::try_acquire(reference, now, &quota, cost) {
            Ok(next) => {
                reference = next.unwrap_or(reference);
                Ok(())
            }
            Err(d) => Err(d),
        };
        for l in &limiters {
            assert_eq!(
                l.try_acquire(cost),
                expected,
                "{} at {now} cost {cost}",
                l.name()
            );
        }
    }
}

#[test]
fn on_a_frozen_clock_threads_get_exactly_the_burst() {
    let quota = Quota::new(1000, Duration::from_secs(1), 10_000).unwrap();
    let clock = ManualClock::new();
    for limiter in all(quota, &clock) {
        let admitted: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let l = &limiter;
                    s.spawn(move || (0..5_000).filter(|_| l.try_acquire(1).is_ok()).count() as u64)
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 10_000, "{}", limiter.name());
    }
}

#[test]
fn names_are_the_documented_ones() {
    let clock = ManualClock::new();
    let names: Vec<String> = all(Quota::per_second(1).unwrap(), &clock)
        .iter()
        .map(|l| l.name().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "std-mutex",
            "parking-lot-mutex",
            "spin",
            "cas",
            "cas-backoff"
        ]
    );
    let builtins = strategies::builtins();
    for b in &builtins {
        let expected = if b.name().starts_with("governor") {
            Kind::Peer
        } else {
            Kind::Tollgate
        };
        assert_eq!(b.kind(), expected, "{}", b.name());
    }
}

#[test]
fn a_custom_strategy_over_its_bound_is_caught_through_the_library() {
    /// Consults a real bucket but admits even what it refuses.
    struct IgnoresRefusals(Bucket);
    impl RateLimiter for IgnoresRefusals {
        fn try_acquire(&self, cost: u64) -> Result<(), tollgate::Denied> {
            let _ = self.0.try_acquire(cost);
            Ok(())
        }
        fn name(&self) -> &str {
            "ignores-refusals"
        }
    }
    let broken = Strategy::new("ignores-refusals", Kind::Custom, |s| {
        Ok(Box::new(IgnoresRefusals(Bucket::with_clock(s.quota, s.clock))) as Box<dyn RateLimiter>)
    });
    // 1 token/s, burst 10: the bound is 10 + ceil(elapsed in s); every thread runs at least one
    // batch of 64 operations, so the broken strategy exceeds it however slow the machine is.
    let mut plan = Plan::new(vec![1, 2], Regime::ALL.to_vec(), Duration::from_millis(5));
    plan.rate = Some(1);
    plan.burst = Some(10);
    let report = compare(
        &[strategies::by_name("cas").unwrap(), broken],
        &plan,
        |_, _, _| {},
    )
    .unwrap();
    let bad: Vec<_> = report
        .violations()
        .iter()
        .map(|c| (c.strategy.clone(), c.threads, c.regime))
        .collect();
    let mut expected = Vec::new();
    for regime in Regime::ALL {
        for threads in [1, 2] {
            expected.push(("ignores-refusals".to_owned(), threads, regime));
        }
    }
    assert_eq!(bad, expected);
    assert!(report.violation_messages()[0].starts_with("ignores-refusals admitted"));
}

/// A policy strategy is checked against every quota it declares: one that keeps its first
/// quota but declares a second it ignores is caught, and the three built-in policy strategies
/// keep both quotas' bounds in every regime.
#[test]
fn policy_strategies_are_checked_per_quota() {
    /// Admits by the cell's quota alone, but declares a second quota of one token an hour.
    struct IgnoresSecond(Bucket);
    impl RateLimiter for IgnoresSecond {
        fn try_acquire(&self, cost: u64) -> Result<(), tollgate::Denied> {
            self.0.try_acquire(cost)
        }
        fn name(&self) -> &str {
            "ignores-second"
        }
        fn extra_quotas(&self) -> Vec<Quota> {
            vec![Quota::new(1, Duration::from_secs(3600), 1).unwrap()]
        }
    }
    let broken = Strategy::new("ignores-second", Kind::Custom, |s| {
        Ok(Box::new(IgnoresSecond(Bucket::with_clock(s.quota, s.clock))) as Box<dyn RateLimiter>)
    });
    let plan = Plan::new(vec![1, 2], Regime::ALL.to_vec(), Duration::from_millis(5));
    let mut all: Vec<Strategy> = ["multi", "multi-chain", "multi-mutex", "keyed-multi"]
        .iter()
        .map(|n| strategies::by_name(n).unwrap())
        .collect();
    all.push(broken);
    let report = compare(&all, &plan, |_, _, _| {}).unwrap();
    let bad: Vec<_> = report
        .violations()
        .iter()
        .map(|c| c.strategy.clone())
        .collect();
    assert!(
        !bad.is_empty() && bad.iter().all(|s| s == "ignores-second"),
        "{bad:?}"
    );
}

/// A strategy that logs its name each time it is built (a fresh limiter: one per round, and
/// one per regime when the plan is checked) and then behaves as `cas`.
fn logged(name: &'static str, log: &Arc<Mutex<Vec<&'static str>>>) -> Strategy {
    let log = Arc::clone(log);
    Strategy::new(name, Kind::Custom, move |s| {
        log.lock().unwrap().push(name);
        Ok(Box::new(Cas::new(Bucket::with_clock(s.quota, s.clock))) as Box<dyn RateLimiter>)
    })
}

#[test]
fn rounds_interleave_the_strategies_in_a_rotated_order_and_report_the_median_round() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let strategies = [logged("a", &log), logged("b", &log), logged("c", &log)];
    let mut plan = Plan::new(vec![1], vec![Regime::Mixed], Duration::from_millis(8));
    plan.rounds = 4;
    let report = compare(&strategies, &plan, |_, _, _| {}).unwrap();
    let log = log.lock().unwrap().clone();
    // `check` builds each once, then round r runs the list rotated left by r.
    let expected = [
        "a", "b", "c", // check
        "a", "b", "c", // round 1
        "b", "c", "a", // round 2
        "c", "a", "b", // round 3
        "a", "b", "c", // round 4
    ];
    assert_eq!(log, expected);
    // The report lists cells in strategy order, each with its rounds in run order.
    let names: Vec<&str> = report.cells.iter().map(|c| c.strategy.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let positions: Vec<Vec<usize>> = report
        .cells
        .iter()
        .map(|c| c.rounds.iter().map(|r| r.position).collect())
        .collect();
    assert_eq!(positions, [[0, 2, 1, 0], [1, 0, 2, 1], [2, 1, 0, 2]]);
    for c in &report.cells {
        assert_eq!(
            c.rounds.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // The reported throughput is one round's: the lower middle of the four.
        let mut t: Vec<f64> = c.rounds.iter().map(|r| r.ops_per_sec).collect();
        t.sort_by(f64::total_cmp);
        assert_eq!(c.ops_per_sec, t[1], "{c:?}");
        assert_eq!((c.ops_per_sec_min, c.ops_per_sec_max), (t[0], t[3]));
        assert_eq!(c.ops, c.rounds.iter().map(|r| r.ops).sum::<u64>());
        assert_eq!(c.admitted, c.rounds.iter().map(|r| r.admitted).sum::<u64>());
        assert!(c.rounds.iter().all(|r| r.admitted <= r.bound && r.ops > 0));
    }
    assert_eq!(report.rounds, 4);
}

/// A keyed strategy with one key over its own bound is caught, even when the sum over the keys
/// stays within the sum of their bounds (the check before per-key recording let it pass), and
/// the real keyed strategies pass the same plan.
///
/// 16 keys, 1 token/s, burst 1: in a round shorter than a second an exact limiter admits one
/// token per key against a per-key bound of 2. `broken-keyed-hot-key` gives key 0 a burst of
/// 10: 15 + 10 = 25 tokens, within the 16 × 2 = 32 of the sum, but key 0 over its 2. With seed
/// 0, the first 64 keys thread 0 draws (every thread runs at least one batch of 64) hold key 0
/// four times and every one of the 16 keys, so this holds however slow the machine is.
#[test]
fn one_key_over_its_own_bound_is_caught_even_when_the_sum_hides_it() {
    let mut plan = Plan::new(
        vec![1, 2],
        vec![Regime::Deny, Regime::Mixed],
        Duration::from_millis(10),
    );
    (plan.keys, plan.rate, plan.burst, plan.rounds) = (16, Some(1), Some(1), 2);
    let mut all: Vec<Strategy> = ["keyed", "keyed-multi", "governor-keyed"]
        .iter()
        .filter_map(|n| strategies::by_name(n))
        .collect();
    all.push(strategies::keyed_hot_key());
    let report = compare(&all, &plan, |_, _, _| {}).unwrap();
    assert_eq!(report.cells.len(), all.len() * 4);
    let bad: Vec<_> = report
        .violations()
        .iter()
        .map(|c| (c.strategy.as_str(), c.threads, c.regime))
        .collect();
    let hot = "broken-keyed-hot-key";
    assert_eq!(
        bad,
        [
            (hot, 1, Regime::Deny),
            (hot, 2, Regime::Deny),
            (hot, 1, Regime::Mixed),
            (hot, 2, Regime::Mixed)
        ]
    );
    for c in &report.cells {
        let broken = c.strategy == hot;
        for r in &c.rounds {
            let k = r
                .busiest_key
                .expect("a keyed strategy reports its busiest key");
            if broken {
                assert!(r.admitted <= r.bound, "the sum no longer hides it: {r:?}");
                assert_eq!(k.key, 0, "{r:?}");
                assert!(k.over_bound() && r.over_bound(), "{r:?}");
            } else {
                assert!(!k.over_bound() && !r.over_bound(), "{}: {r:?}", c.strategy);
            }
        }
    }
    let messages = report.violation_messages();
    assert_eq!(messages.len(), 4, "{messages:?}");
    for m in &messages {
        assert!(
            m.starts_with("broken-keyed-hot-key admitted ")
                && m.contains(" tokens on key 0, more than its bound ")
                && m.ends_with("round 1 of 2"),
            "{m}"
        );
    }
}

/// Every keyed built-in stays within its per-key bound where each key is loaded well past its
/// rate (few keys, a low rate) and in the default `mixed` quota with few keys.
#[test]
fn real_keyed_strategies_stay_within_every_keys_bound() {
    let keyed: Vec<Strategy> = ["keyed", "keyed-multi", "governor-keyed"]
        .iter()
        .filter_map(|n| strategies::by_name(n))
        .collect();
    let mut saturated = Plan::new(vec![1, 2], Regime::ALL.to_vec(), Duration::from_millis(15));
    (
        saturated.keys,
        saturated.rate,
        saturated.burst,
        saturated.rounds,
    ) = (3, Some(1000), Some(10), 3);
    let mut mixed = Plan::new(vec![2], vec![Regime::Mixed], Duration::from_millis(10));
    (mixed.keys, mixed.rounds) = (4, 2);
    for plan in [saturated, mixed] {
        let report = compare(&keyed, &plan, |_, _, _| {}).unwrap();
        assert!(
            report.violations().is_empty(),
            "{:?}",
            report.violation_messages()
        );
        for c in &report.cells {
            for r in &c.rounds {
                let k = r.busiest_key.unwrap();
                assert!(
                    k.key < plan.keys && k.admitted <= k.bound,
                    "{}: {r:?}",
                    c.strategy
                );
                // The sum is over the keys that admitted: at most `keys` times one key's bound.
                assert!(r.bound <= plan.keys * k.bound && r.admitted >= k.admitted);
            }
        }
    }
}

/// Per-key admission counts that would take more than the cap (or overflow) are refused with a
/// clear error before anything is allocated or spawned; unkeyed strategies need no counts.
#[test]
fn per_key_counts_past_the_cap_are_an_error_not_an_abort() {
    /// Keyed, admits everything, allocates nothing per key.
    struct AdmitAllKeyed;
    impl RateLimiter for AdmitAllKeyed {
        fn try_acquire(&self, _cost: u64) -> Result<(), tollgate::Denied> {
            Ok(())
        }
        fn is_keyed(&self) -> bool {
            true
        }
        fn name(&self) -> &str {
            "admit-all-keyed"
        }
    }
    let keyed = Strategy::new("admit-all-keyed", Kind::Custom, |_| {
        Ok(Box::new(AdmitAllKeyed) as Box<dyn RateLimiter>)
    });
    let mut spec = CellSpec::new(4096, Regime::Deny, Duration::from_millis(1));
    spec.keys = 1 << 24;
    let err = run_cell(&keyed, &spec).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Plan(_)), "{err:?}");
    assert!(
        msg.starts_with("--threads 4096 with --keys 16777216: ")
            && msg
                .ends_with("would take 512.0 GiB, over the 4.0 GiB cap; lower --threads or --keys"),
        "{msg}"
    );
    assert_eq!(
        run::key_recording_bytes(4096, 1 << 24),
        Some(4096 * ((1 << 24) + 32) * run::KEY_COUNT_BYTES + (1 << 24))
    );

    // A size that does not fit 64 bits.
    (spec.threads, spec.keys) = (usize::MAX, u64::MAX);
    assert_eq!(run::key_recording_bytes(spec.threads, spec.keys), None);
    let msg = run_cell(&keyed, &spec).unwrap_err().to_string();
    assert!(
        msg.contains("more than 16 EiB") || msg.contains("too many for this platform"),
        "{msg}"
    );

    // `compare` refuses such a plan before running anything, at its largest thread count.
    let mut plan = Plan::new(vec![1, 4096], vec![Regime::Mixed], Duration::from_millis(1));
    plan.keys = 1 << 24;
    let msg = compare(std::slice::from_ref(&keyed), &plan, |_, _, _| {
        panic!("nothing runs")
    })
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with("--threads 4096 with --keys 16777216"),
        "{msg}"
    );
    // An unkeyed strategy draws no keys and records none.
    spec.keys = 1 << 24;
    spec.threads = 2;
    assert!(run_cell(&strategies::by_name("cas").unwrap(), &spec).is_ok());
}
