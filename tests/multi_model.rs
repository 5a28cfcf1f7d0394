//! Property tests of `MultiBucket` against an exact model of independent buckets checked
//! together: one exact reference bucket (`support/model.rs`, i128 rational arithmetic) per
//! quota; a decision admits iff every model admits at the same reading, and then debits every
//! model; a refusal is `ExceedsBurst` iff the cost exceeds the smallest burst, otherwise the
//! largest model wait, naming its quota. Reservations are due when the last model holds the
//! cost and debit every model as of that instant; a cancellation applies each model's rule.
//! Exact quotas only, so the policy must agree bit for bit: every verdict, every wait, every
//! quota's availability, the tightest snapshot's tokens.
//!
//! Chains (`all_of`, `all_of2`) of the policy and a separate `Bucket` (one more model) are
//! checked against the same models: admitted iff every model admits, and then every one
//! debited; a refusal changes nothing and waits the largest wait of the limiters the chain
//! asked (`all_of` asks the bucket only if the policy admits); a retry exactly at that wait is
//! admitted, one nanosecond earlier it is refused with 1 ns to go.

use proptest::prelude::*;
use tollgate::Limiter;
use tollgate_testkit::model;

use model::Model;
use std::time::Duration;
use tollgate::{
    all_of, all_of2, Bucket, Clock, Denied, Limits, ManualClock, MultiBucket, MultiReservation,
    Quota, Refusal,
};

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
    /// `all_of2` of the policy and the other bucket (the policy first if `true`); with `retry`,
    /// a refusal's wait is then checked by retrying at it (and 1 ns before it).
    Chain {
        cost: u64,
        policy_first: bool,
        retry: bool,
    },
    /// `all_of(&policy, cost, |c| other.try_acquire(c))`.
    AllOf(u64),
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
            3 => (0..=burst + 1, any::<bool>(), any::<bool>()).prop_map(
                |(cost, policy_first, retry)| Op::Chain { cost, policy_first, retry }
            ),
            1 => (0..=burst + 1).prop_map(Op::AllOf),
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

/// The verdict of a chain that asks every limiter, from the policy's models' refusal and the
/// other bucket's model: `ExceedsBurst` if either says so, else the larger wait.
fn chained(policy: Result<(), Refusal>, other: Result<(), Denied>) -> Result<(), Denied> {
    match (policy.map_err(Denied::from), other) {
        (Err(Denied::ExceedsBurst), _) | (_, Err(Denied::ExceedsBurst)) => {
            Err(Denied::ExceedsBurst)
        }
        (Err(Denied::RetryAfter(a)), Err(Denied::RetryAfter(b))) => {
            Err(Denied::RetryAfter(a.max(b)))
        }
        (Err(d), _) | (_, Err(d)) => Err(d),
        (Ok(()), Ok(())) => Ok(()),
    }
}

fn run(quotas: &[(u64, u64, u64)], ops: &[Op]) -> Result<(), TestCaseError> {
    let (other_q, quotas) = quotas.split_last().unwrap();
    let other_quota = Quota::new(other_q.0, Duration::from_nanos(other_q.1), other_q.2).unwrap();
    prop_assume!(other_quota.is_exact());
    let qs: Vec<Quota> = quotas
        .iter()
        .map(|&(t, p, b)| Quota::new(t, Duration::from_nanos(p), b).unwrap())
        .collect();
    prop_assume!(qs.iter().all(Quota::is_exact));
    let bursts: Vec<u64> = qs.iter().map(Quota::burst).collect();
    let clock = ManualClock::new();
    let policy = MultiBucket::with_clock(Limits::new(qs.iter().copied()).unwrap(), clock.clone());
    let other = Bucket::with_clock(other_quota, clock.clone());
    let mut other_model = Model::new(other_q.0, other_q.1, other_q.2);
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
                    let (v, s) = policy.decide_snapshots(&(), cost);
                    (v, Some(s.tightest().1.remaining()))
                } else {
                    (policy.decide(&(), cost), None)
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
            Op::Chain {
                cost,
                policy_first,
                retry,
            } => {
                let chain = || {
                    if policy_first {
                        all_of2(&policy, &other, cost)
                    } else {
                        all_of2(&other, &policy, cost)
                    }
                };
                let want = |models: &[Model], other_model: &Model, t: u64| {
                    chained(
                        verdict(models, t, cost, &bursts),
                        other_model.clone().try_acquire(t, cost),
                    )
                };
                let mut got = chain();
                prop_assert_eq!(
                    got,
                    want(&models, &other_model, t),
                    "op {} {:?} at {}",
                    n,
                    op,
                    t
                );
                let mut at = t;
                if let (true, Err(Denied::RetryAfter(d))) = (retry, got) {
                    if d != Duration::MAX {
                        // One nanosecond early: refused, 1 ns to go; at the wait: admitted.
                        let d = d.as_nanos() as u64;
                        clock.advance(Duration::from_nanos(d - 1));
                        let early = chain();
                        prop_assert_eq!(
                            early,
                            Err(Denied::RetryAfter(Duration::from_nanos(1))),
                            "op {} 1 ns early",
                            n
                        );
                        clock.advance(Duration::from_nanos(1));
                        at = clock.now();
                        got = chain();
                        prop_assert_eq!(got, Ok(()), "op {} retried at the wait {} ns", n, d);
                        prop_assert_eq!(want(&models, &other_model, at), Ok(()));
                    }
                }
                if got.is_ok() {
                    for m in models.iter_mut().chain([&mut other_model]) {
                        m.try_acquire(at, cost).unwrap();
                    }
                }
            }
            Op::AllOf(cost) => {
                let got = all_of(&policy, cost, |c| other.try_acquire(c));
                let want = match verdict(&models, t, cost, &bursts) {
                    Ok(()) => other_model.clone().try_acquire(t, cost),
                    Err(refusal) => Err(refusal.denied()),
                };
                prop_assert_eq!(got, want, "op {} {:?} at {}", n, op, t);
                if got.is_ok() {
                    for m in models.iter_mut().chain([&mut other_model]) {
                        m.try_acquire(t, cost).unwrap();
                    }
                }
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
        prop_assert_eq!(
            other.available(),
            other_model.available(t),
            "other after op {}",
            n
        );
        let snaps = policy.decide_snapshots(&(), 0).1;
        for (i, (s, m)) in snaps.as_slice().iter().zip(&models).enumerate() {
            prop_assert_eq!(s.remaining(), m.available(t), "quota {} after op {}", i, n);
        }
    }
    Ok(())
}

fn policy_and_ops(
    n: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<(u64, u64, u64)>, Vec<Op>)> {
    // The last quota is the chains' other bucket's.
    let n = *n.start() + 1..=*n.end() + 1;
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
