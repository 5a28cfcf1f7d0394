//! Property tests of `MultiBucket` against an exact model of independent buckets checked
//! together: one exact reference bucket (`support/model.rs`, i128 rational arithmetic) per
//! quota; a decision admits iff every model admits at the same reading, and then debits every
//! model; a refusal is `ExceedsBurst` iff the cost exceeds the smallest burst, otherwise the
//! largest model wait, naming its quota. Reservations are due when the last model holds the
//! cost and debit every model as of that instant; a cancellation applies each model's rule.
//! Exact quotas only, so the policy must agree bit for bit: every verdict, every wait, every
//! quota's availability, the tightest snapshot's tokens.

use proptest::prelude::*;
use tollgate_testkit::model;

use model::Model;
use std::time::Duration;
use tollgate::{Clock, Denied, Limits, ManualClock, MultiBucket, MultiReservation, Quota, Refusal};

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    /// Set the clock to an absolute reading (earlier ones included).
    Set(u64),
    Acquire(u64),
    Snapshot(u64),
    Reserve(u64),
    /// Cancel (`true`) or keep the `i`-th outstanding reservation.
    Resolve(usize, bool),
}

/// Quotas whose reduced rate numerator is 1 or 2 are exact over the whole horizon.
fn exact_quota() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..=2, 1u64..=5_000_000_000, 1u64..=1000, 1u64..=40).prop_filter_map(
        "reduced",
        |(t, p, g, burst)| {
            if t == 2 && p % 2 == 0 {
                return None;
            }
            Some((t * g, p.checked_mul(g)?, burst))
        },
    )
}

fn ops(step: u64, burst: u64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => (0..=step).prop_map(Op::Advance),
            1 => (0..=step * 30).prop_map(Op::Set),
            6 => (0..=burst + 1).prop_map(Op::Acquire),
            2 => (0..=burst + 1).prop_map(Op::Snapshot),
            2 => (0..=burst + 1).prop_map(Op::Reserve),
            2 => (0..6usize, any::<bool>()).prop_map(|(i, c)| Op::Resolve(i, c)),
        ],
        1..160,
    )
}

/// What the models say about `cost` at `t`: `Ok(())` if every one admits (nothing applied),
/// else the policy's refusal.
fn verdict(models: &[Model], t: u64, cost: u64, bursts: &[u64]) -> Result<(), Refusal> {
    if cost == 0 {
        return Ok(());
    }
    let min = *bursts.iter().min().unwrap();
    if cost > min {
        let i = bursts.iter().position(|&b| b == min).unwrap();
        return Err(Refusal::new(Denied::ExceedsBurst, i));
    }
    let mut worst: Option<(Duration, usize)> = None;
    for (i, m) in models.iter().enumerate() {
        if let Err(Denied::RetryAfter(d)) = m.clone().try_acquire(t, cost) {
            if worst.map_or(true, |(w, _)| d > w) {
                worst = Some((d, i));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((d, i)) => Err(Refusal::new(Denied::RetryAfter(d), i)),
    }
}

fn run(quotas: &[(u64, u64, u64)], ops: &[Op]) -> Result<(), TestCaseError> {
    let qs: Vec<Quota> = quotas
        .iter()
        .map(|&(t, p, b)| Quota::new(t, Duration::from_nanos(p), b).unwrap())
        .collect();
    prop_assume!(qs.iter().all(Quota::is_exact));
    let bursts: Vec<u64> = qs.iter().map(Quota::burst).collect();
    let clock = ManualClock::new();
    let policy = MultiBucket::with_clock(Limits::new(qs.iter().copied()).unwrap(), clock.clone());
    let mut models: Vec<Model> = quotas
        .iter()
        .map(|&(t, p, b)| Model::new(t, p, b))
        .collect();
    // Outstanding reservations: the policy's, each model's state before and after, the due
    // instant and the cost.
    type Held<'a> = (
        MultiReservation<'a, ManualClock>,
        Vec<i128>,
        Vec<i128>,
        u64,
        u64,
    );
    let mut held: Vec<Held<'_>> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let t = clock.now();
        match *op {
            Op::Advance(d) => clock.advance(Duration::from_nanos(d)),
            Op::Set(to) => clock.set(Duration::from_nanos(to)),
            Op::Acquire(cost) | Op::Snapshot(cost) => {
                let want = verdict(&models, t, cost, &bursts);
                let (got, tightest) = if let Op::Snapshot(_) = op {
                    let (v, s) = policy.try_acquire_snapshots(cost);
                    (v, Some(s.tightest().1.remaining()))
                } else {
                    (policy.try_acquire_detailed(cost), None)
                };
                prop_assert_eq!(got, want, "op {} {:?} at {}", n, op, t);
                if want.is_ok() {
                    for m in &mut models {
                        m.try_acquire(t, cost).unwrap();
                    }
                }
                if let Some(r) = tightest {
                    let least = models.iter().map(|m| m.available(t)).min().unwrap();
                    prop_assert_eq!(r, least, "op {} snapshot", n);
                }
            }
            Op::Reserve(cost) => {
                let got = policy.reserve(cost);
                if cost > *bursts.iter().min().unwrap() {
                    prop_assert_eq!(got.unwrap_err(), Denied::ExceedsBurst);
                    continue;
                }
                // Due when the last model holds the cost; every model debited as of then.
                let due = models
                    .iter()
                    .map(|m| m.clone().reserve(t, cost).unwrap().1)
                    .max()
                    .unwrap();
                let befores: Vec<i128> = models.iter().map(|m| m.state()).collect();
                let afters: Vec<i128> = models
                    .iter_mut()
                    .map(|m| m.reserve(due, cost).unwrap().0)
                    .collect();
                let r = got.unwrap();
                prop_assert_eq!(r.delay(), Duration::from_nanos(due.saturating_sub(t)));
                held.push((r, befores, afters, due, cost));
            }
            Op::Resolve(i, cancel) => {
                if held.is_empty() {
                    continue;
                }
                let (r, befores, afters, due, cost) = held.remove(i % held.len());
                if cancel {
                    r.cancel();
                    for ((m, before), after) in models.iter_mut().zip(befores).zip(afters) {
                        m.cancel(t, before, after, due, cost);
                    }
                }
            }
        }
        let t = clock.now();
        let least = models.iter().map(|m| m.available(t)).min().unwrap();
        prop_assert_eq!(policy.available(), least, "after op {} {:?}", n, op);
        let snaps = policy.try_acquire_snapshots(0).1;
        for (i, (s, m)) in snaps.as_slice().iter().zip(&models).enumerate() {
            prop_assert_eq!(s.remaining(), m.available(t), "quota {} after op {}", i, n);
        }
    }
    Ok(())
}

fn policy_and_ops(
    n: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<(u64, u64, u64)>, Vec<Op>)> {
    prop::collection::vec(exact_quota(), n).prop_flat_map(|qs| {
        let step = qs.iter().map(|&(t, p, _)| p / t).max().unwrap().max(1) * 3;
        let burst = qs.iter().map(|q| q.2).max().unwrap();
        (Just(qs), ops(step, burst))
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 384,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6d75_6c74),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Two quotas: the one-word store.
    #[test]
    fn two_quotas_match_independent_models_checked_together((qs, ops) in policy_and_ops(2..=2)) {
        run(&qs, &ops)?;
    }

    /// One, three and four quotas: the padded word and the sequence-locked store.
    #[test]
    fn one_three_and_four_quotas_match_independent_models((qs, ops) in prop_oneof![
        policy_and_ops(1..=1), policy_and_ops(3..=4)
    ]) {
        run(&qs, &ops)?;
    }
}
