//! Property tests against a small exact reference model of the continuous token bucket, computed
//! with i128 rational arithmetic.

use proptest::prelude::*;
use tollgate_testkit::model;

use model::{check, Op};
use std::time::Duration;
use tollgate::Quota;

fn ops(burst: u64, period: u64) -> impl Strategy<Value = Vec<Op>> {
    let step = period.max(1) * 3;
    prop::collection::vec(
        prop_oneof![
            4 => (0..=step).prop_map(Op::Advance),
            1 => (0..=step * 20).prop_map(Op::Set),
            6 => (0..=burst + 1).prop_map(Op::Acquire),
            2 => Just(Op::Available),
            2 => (0..=burst + 1).prop_map(Op::Reserve),
            2 => (0..8usize, any::<bool>()).prop_map(|(i, keep)| Op::Resolve(i, keep)),
            1 => (0..=burst + 1, 0..=step * 4).prop_map(|(c, d)| Op::AcquireFor(c, d)),
        ],
        1..200,
    )
}

/// Quotas whose reduced rate numerator is 1 or 2 are exact over the whole horizon.
fn exact_quota() -> impl Strategy<Value = (u64, u64, u64)> {
    (1u64..=2, 1u64..=20_000_000_000, 1u64..=1000, 1u64..=50).prop_filter_map(
        "reduced",
        |(t, p, g, burst)| {
            if t == 2 && p % 2 == 0 {
                return None;
            }
            Some((t * g, p.checked_mul(g)?, burst))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(0x7011_6a7e), ..ProptestConfig::default() })]

    #[test]
    fn exact_quotas_match_the_reference_model(
        (tokens, per, burst, ops) in exact_quota()
            .prop_flat_map(|(t, p, b)| (Just(t), Just(p), Just(b), ops(b, p / t)))
    ) {
        check(tokens, per, burst, &ops, true).map_err(TestCaseError::fail)?;
    }

    /// Any quota, with up to three reconfigurations (to any quota) anywhere in the schedule.
    #[test]
    fn any_quota_is_never_more_lenient_than_the_model(
        tokens in 1u64..=1_000_000_000,
        per in 1u64..=10_000_000_000,
        burst in 1u64..=64,
        ops in ops(64, 10_000_000),
        switches in prop::collection::vec((0usize..200, 1u64..=1_000, 1u64..=10_000_000_000, 1u64..=64), 0..4),
    ) {
        prop_assume!(Quota::new(tokens, Duration::from_nanos(per), burst).is_ok());
        let mut ops = ops;
        for (at, t, p, b) in switches {
            let at = at.min(ops.len());
            ops.insert(at, Op::SetQuota(t, p, b));
        }
        check(tokens, per, burst, &ops, false).map_err(TestCaseError::fail)?;
    }
}
