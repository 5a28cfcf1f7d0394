//! A policy of several quotas on one key ([`tollgate::Limits`]), decided in one script call
//! (mode `multi` of `gcra.lua`): every quota's state lives in the one Redis key, the script
//! admits only if every quota holds the cost and then writes every new state at once (one `SET`),
//! or writes nothing. The client checks each quota's part of the reply against
//! `tollgate::gcra`, as for one quota.
//!
//! The verdict is the core's per-quota decisions combined: admitted iff every quota admits;
//! otherwise `ExceedsBurst` if some quota's burst is below the cost, else `RetryAfter` the
//! largest per-quota wait (the first instant every quota holds the cost). The snapshot and quota
//! reported are the tightest quota's: the fewest tokens remaining, ties to the longest time
//! until full.

use crate::script::{disagreement, parse, server_ns, Params};
use crate::Error;
use tollgate::{gcra, Denied, Limits, Quota, Snapshot};

/// A policy checked to fit the script (each quota as [`Params`]).
#[derive(Clone, Debug)]
pub(crate) struct LimitsParams {
    pub(crate) limits: Limits,
    quotas: Vec<Params>,
}

/// One decoded policy decision.
#[derive(Debug)]
pub(crate) struct LimitsDecision {
    pub(crate) verdict: Result<(), Denied>,
    /// The tightest quota's bucket right after the decision.
    pub(crate) snapshot: Snapshot,
    /// The tightest quota.
    pub(crate) quota: Quota,
}

/// The core's verdicts on one cost, combined as a policy's (see the module docs).
pub(crate) fn combine(
    verdicts: impl IntoIterator<Item = Result<(), Denied>>,
) -> Result<(), Denied> {
    let mut out = Ok(());
    for v in verdicts {
        out = match (out, v) {
            (Err(Denied::ExceedsBurst), _) | (_, Err(Denied::ExceedsBurst)) => {
                Err(Denied::ExceedsBurst)
            }
            (Err(Denied::RetryAfter(x)), Err(Denied::RetryAfter(y))) => {
                Err(Denied::RetryAfter(x.max(y)))
            }
            (Err(d), _) | (_, Err(d)) => Err(d),
            (Ok(()), Ok(())) => Ok(()),
        };
    }
    out
}

/// The index of the tightest snapshot: the fewest remaining, ties to the longest until full.
pub(crate) fn tightest(snapshots: &[Snapshot]) -> usize {
    let mut best = 0;
    for (i, s) in snapshots.iter().enumerate() {
        let b = &snapshots[best];
        if (s.remaining(), std::cmp::Reverse(s.until_full()))
            < (b.remaining(), std::cmp::Reverse(b.until_full()))
        {
            best = i;
        }
    }
    best
}

impl LimitsParams {
    /// Checks every quota of `limits` against the script's range.
    pub(crate) fn new(limits: Limits) -> Result<LimitsParams, Error> {
        let quotas = limits
            .quotas()
            .iter()
            .map(|q| Params::new(*q))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LimitsParams { limits, quotas })
    }

    /// Each quota's script parameters, in the policy's order.
    pub(crate) fn quota_params(&self) -> &[Params] {
        &self.quotas
    }

    /// The smallest burst: a larger cost is `ExceedsBurst`.
    pub(crate) fn min_burst(&self) -> u64 {
        self.limits
            .quotas()
            .iter()
            .map(Quota::burst)
            .min()
            .unwrap_or(0)
    }

    /// The script's arguments: `multi`, N, cost, test time, then each quota's five.
    pub(crate) fn args(&self, cost: u64, test_now_us: Option<u64>) -> Vec<String> {
        let mut v = Vec::with_capacity(4 + 5 * self.quotas.len());
        v.push("multi".to_owned());
        v.push(self.quotas.len().to_string());
        v.push(cost.to_string());
        v.push(test_now_us.map_or_else(String::new, |t| t.to_string()));
        for p in &self.quotas {
            v.extend(p.quota_args());
        }
        v
    }

    /// Decodes `{status, t, prev_1..N, next_1..N, taken}`, checking every quota's part against
    /// `tollgate::gcra` (a disagreement is [`Error::Reply`], never trusted).
    pub(crate) fn decode(&self, reply: &[String], cost: u64) -> Result<LimitsDecision, Error> {
        let n = self.quotas.len();
        if reply.len() != 3 + 2 * n {
            return Err(Error::Reply(format!(
                "expected {} fields, got {reply:?}",
                3 + 2 * n
            )));
        }
        let t = parse(Some(reply[1].as_str()))?;
        let now = server_ns(t)?;
        let disagree = || disagreement(&reply, cost);
        let mut verdicts = Vec::with_capacity(n);
        let mut snapshots = Vec::with_capacity(n);
        let admitted = match reply[0].as_str() {
            "1" => true,
            "0" => false,
            _ => return Err(Error::Reply(format!("unknown status in {reply:?}"))),
        };
        for (i, p) in self.quotas.iter().enumerate() {
            let before = p.state_of(&reply[2 + i])?;
            let r = gcra::try_acquire(before, now, &p.model, cost);
            let after = match (&r, admitted) {
                (Ok(Some(after)), true) => {
                    if p.written_state(t, &reply[2 + n + i])? != u128::from(*after) {
                        return Err(disagree());
                    }
                    *after
                }
                // A read: nothing taken, nothing written.
                (Ok(None), true) if cost == 0 => before,
                (_, false) => before,
                _ => return Err(disagree()),
            };
            verdicts.push(r.map(|_| ()));
            snapshots.push(gcra::snapshot(after, now, &p.model));
        }
        let verdict = combine(verdicts);
        if verdict.is_ok() != admitted {
            return Err(disagree());
        }
        let best = tightest(&snapshots);
        Ok(LimitsDecision {
            verdict,
            snapshot: snapshots[best],
            quota: self.quotas[best].quota,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn verdicts_combine_to_the_largest_wait_and_snapshots_to_the_tightest() {
        let w = |ms| Err(Denied::RetryAfter(Duration::from_millis(ms)));
        assert_eq!(combine([Ok(()), Ok(())]), Ok(()));
        assert_eq!(combine([Ok(()), w(5), w(9), w(2)]), w(9));
        assert_eq!(
            combine([w(5), Err(Denied::ExceedsBurst)]),
            Err(Denied::ExceedsBurst)
        );
        let s = |r, ms| Snapshot::new(r, Duration::from_millis(ms));
        assert_eq!(tightest(&[s(3, 10), s(1, 5), s(1, 50), s(2, 99)]), 2);
        assert_eq!(tightest(&[s(0, 1)]), 0);
    }
}
