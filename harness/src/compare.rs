//! A whole comparison: check a [`Plan`] against the strategies, run every cell
//! ([`crate::run`]) and collect them into a [`Report`] ([`crate::report`]). The one module that
//! knows both the runner and the report, so that neither imports the other.

use crate::{run_cell, Error, Plan, Report, Setup, Strategy};
use tollgate::DefaultClock;

/// Checks, without running anything, the plan ([`Plan::validate`]) and that every strategy
/// can be built for every regime.
///
/// ```
/// use tollgate_bench::{compare::check, strategies, Plan, Regime};
/// let plan = Plan::new(vec![1], vec![Regime::Deny], std::time::Duration::from_millis(5));
/// assert!(check(&strategies::builtins(), &plan).is_ok());
/// assert!(check(&[], &plan).is_err());
/// ```
pub fn check(strategies: &[Strategy], plan: &Plan) -> Result<(), Error> {
    if strategies.is_empty() {
        return Err(Error::Plan("nothing to run: no strategies".to_owned()));
    }
    plan.validate()?;
    for spec in plan.first_cells() {
        let setup = Setup {
            quota: spec.checked_quota()?,
            keys: spec.keys,
            clock: DefaultClock::default(),
        };
        for s in strategies {
            s.build(&setup).map_err(|source| Error::Strategy {
                name: s.name().to_owned(),
                regime: spec.regime.name(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Runs every cell of `plan` for every strategy (regime, then threads, then strategy), calling
/// `progress(done, total, label)` before each cell. The report computes the ratio to the
/// baseline ([`Report::vs_std_mutex`]).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{compare, strategies, Plan, Regime};
/// let s = vec![strategies::by_name("std-mutex").unwrap(), strategies::by_name("cas").unwrap()];
/// let plan = Plan::new(vec![1], vec![Regime::Allow], Duration::from_millis(5));
/// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
/// assert_eq!(report.cells.len(), 2);
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
    let total = specs.len() * strategies.len();
    let mut cells = Vec::with_capacity(total);
    for spec in &specs {
        for s in strategies {
            let label = format!(
                "{} · {} thread{} · {}",
                s.name(),
                spec.threads,
                if spec.threads == 1 { "" } else { "s" },
                spec.regime.name()
            );
            progress(cells.len(), total, &label);
            cells.push(run_cell(s, spec)?);
        }
    }
    progress(cells.len(), total, "done");
    Ok(Report {
        cells,
        duration: plan.duration,
        cost: plan.cost,
        seed: plan.seed,
    })
}
