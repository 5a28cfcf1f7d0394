//! A whole comparison: check a [`Plan`] against the strategies, run every cell in interleaved
//! rounds ([`crate::run`]) and collect them into a [`Report`] ([`crate::report`]). The one module that
//! knows both the runner and the report, so that neither imports the other.

use crate::cell::Measured;
use crate::plan::round_order;
use crate::run::{check_key_recording, run_round};
use crate::{CellResult, CellSpec, Error, Plan, Report, Setup, Strategy};
use tollgate::DefaultClock;

/// Checks, without running anything, the plan ([`Plan::validate`]), that every strategy
/// can be built for every regime, and that a keyed strategy's per-key admission counts fit
/// [`MAX_KEY_RECORDING_BYTES`](crate::run::MAX_KEY_RECORDING_BYTES) at the plan's largest
/// thread count.
///
/// ```
/// use tollgate_bench::{compare::check, strategies, Plan, Regime};
/// let mut plan = Plan::new(vec![1], vec![Regime::Deny], std::time::Duration::from_millis(5));
/// assert!(check(&strategies::builtins(), &plan).is_ok());
/// assert!(check(&[], &plan).is_err());
/// plan.threads = vec![1, 4096];
/// plan.keys = 1 << 18;
/// let keyed = strategies::by_name("keyed").unwrap();
/// assert!(check(&[keyed], &plan).unwrap_err().to_string().contains("lower --threads or --keys"));
/// assert!(check(&[strategies::by_name("cas").unwrap()], &plan).is_ok()); // unkeyed: no counts
/// ```
pub fn check(strategies: &[Strategy], plan: &Plan) -> Result<(), Error> {
    if strategies.is_empty() {
        return Err(Error::Plan("nothing to run: no strategies".to_owned()));
    }
    plan.validate()?;
    let max_threads = plan.threads.iter().copied().max().unwrap_or(1);
    for spec in plan.first_cells() {
        let setup = Setup {
            quota: spec.checked_quota()?,
            keys: spec.keys,
            clock: DefaultClock::default(),
        };
        for s in strategies {
            let limiter = s.build(&setup).map_err(|source| Error::Strategy {
                name: s.name().to_owned(),
                regime: spec.regime.name(),
                source,
            })?;
            if limiter.is_keyed() {
                check_key_recording(max_threads, spec.keys)?;
            }
        }
    }
    Ok(())
}

/// Runs every cell of `plan` for every strategy and calls `progress(done, total, label)`
/// before each run (`total` = cells × rounds). Regime, then threads, in the outer loops; for
/// each threads × regime, [`Plan::rounds`] rounds, each running every strategy once for
/// [`Plan::round_duration`] on a fresh limiter, in the order [`round_order`] gives (rotated by
/// one per round). The rounds of a cell are combined as [`crate::cell`] describes: the median
/// round's throughput, every round checked against its own bound, latencies merged. The report
/// lists the cells in strategy order and computes the ratio to the baseline
/// ([`Report::vs_std_mutex`]).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{compare, strategies, Plan, Regime};
/// let s = vec![strategies::by_name("std-mutex").unwrap(), strategies::by_name("cas").unwrap()];
/// let mut plan = Plan::new(vec![1], vec![Regime::Allow], Duration::from_millis(6));
/// plan.rounds = 3;
/// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
/// assert_eq!(report.cells.len(), 2);
/// assert_eq!(report.cells[1].rounds.iter().map(|r| r.position).collect::<Vec<_>>(), [1, 0, 1]);
/// assert_eq!(report.vs_std_mutex(&report.cells[0]), Some(1.0));
/// assert!(report.violations().is_empty());
/// ```
pub fn compare(
    strategies: &[Strategy],
    plan: &Plan,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Report, Error> {
    check(strategies, plan)?;
    let specs = plan.cells();
    let total = specs.len() * strategies.len() * plan.rounds;
    let mut done = 0;
    let mut cells = Vec::with_capacity(specs.len() * strategies.len());
    for spec in &specs {
        let round_spec = CellSpec {
            duration: plan.round_duration(),
            ..spec.clone()
        };
        let mut rounds: Vec<Vec<Measured>> = strategies
            .iter()
            .map(|_| Vec::with_capacity(plan.rounds))
            .collect();
        for round in 0..plan.rounds {
            for (position, i) in round_order(strategies.len(), round).into_iter().enumerate() {
                let s = &strategies[i];
                let label = format!(
                    "{} · {} thread{} · {} · round {}/{}",
                    s.name(),
                    spec.threads,
                    if spec.threads == 1 { "" } else { "s" },
                    spec.regime.name(),
                    round + 1,
                    plan.rounds
                );
                progress(done, total, &label);
                rounds[i].push(run_round(s, &round_spec, round, position)?);
                done += 1;
            }
        }
        for (s, rounds) in strategies.iter().zip(rounds) {
            cells.push(CellResult::from_rounds(s, spec, rounds)?);
        }
    }
    progress(done, total, "done");
    Ok(Report {
        cells,
        duration: plan.duration,
        rounds: plan.rounds,
        cost: plan.cost,
        seed: plan.seed,
    })
}
