//! Every window of a quota's admissions against `burst + rate·Δ` in exact rationals (included
//! by path by the targets that need it), with one unit (`1 / scale` token) of slack for quotas
//! that are not exact: a decision there rounds the units earned, as `Bucket`'s does
//! (`docs/sharded.md`, "The window bound"), and that unit may put a whole token over a bound
//! lying just below a whole number. `testkit::window` has no such slack.

use tollgate::Quota;

/// The worst window over its bound among admissions `(reading, cost)`, `None` if none: the
/// admissions at readings in `[t_i, t_j]` take at most `burst + rate · (t_j − t_i + slack_ns)`
/// tokens (`+ 1 / scale` for inexact quotas). `slack_ns` is 0 for admissions at their
/// readings, 1 where some are at due instants: a due instant is the first *whole* nanosecond
/// at which the tokens are there, up to 1 ns after the exact one (`testkit::window`'s
/// `check_within`). In i128: readings below 2^63, rate and period below 2^40, at most 2^40
/// tokens admitted in all.
pub fn violation(quota: &Quota, ev: &mut [(u64, u64)], slack_ns: u64) -> Option<String> {
    ev.sort_unstable();
    let per = i128::try_from(quota.per().as_nanos()).unwrap();
    let rate = i128::from(quota.tokens());
    let burst = i128::from(quota.burst());
    let scale = i128::from(quota.scale());
    // A window over `burst + rate·Δ` by `excess / per` tokens: a violation if `excess > 0`, and
    // for inexact quotas only beyond one unit (`excess · scale > per`; an overflow is beyond).
    let over = |excess: i128| {
        excess > 0 && (quota.is_exact() || excess.checked_mul(scale).is_none_or(|v| v > per))
    };
    // Tokens admitted before event `j`, and the greatest `rate·t_i − per·P(i)` over `i ≤ j`.
    let mut p: i128 = 0;
    let mut best: Option<(i128, usize, i128)> = None;
    for (j, &(t, c)) in ev.iter().enumerate() {
        let here = rate * i128::from(t) - per * p;
        if best.is_none_or(|b| here > b.0) {
            best = Some((here, j, p));
        }
        p += i128::from(c);
        let (high, i, p0) = best?;
        let excess =
            per * p - rate * i128::from(t) + high - per * burst - rate * i128::from(slack_ns);
        if over(excess) {
            return Some(format!(
                "window [{}, {t}] admitted {} tokens, over burst {burst} + {rate}/{per}ns · ({} + {slack_ns})",
                ev[i].0,
                p - p0,
                t - ev[i].0
            ));
        }
    }
    None
}
