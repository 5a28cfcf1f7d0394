//! envoyproxy/ratelimit's algorithm, for the benchmark's side-by-side run: a fixed window per
//! unit in Redis, `INCRBY hits` + `EXPIRE unit` per descriptor pipelined in one round trip,
//! over the limit when the count after the increment exceeds `requests_per_unit` (refused hits
//! count too, and the other descriptors of a refused request are debited). Not reachable from
//! the command line: it is the baseline the exact backend is measured against, through the
//! same service.

use super::{Demand, Outcome, RedisFailure, Wait};
use crate::config::Kind;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The fixed-window baseline.
pub struct FixedWindowBackend {
    conn: redis::aio::ConnectionManager,
}

impl std::fmt::Debug for FixedWindowBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedWindowBackend").finish_non_exhaustive()
    }
}

impl FixedWindowBackend {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> Result<FixedWindowBackend, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let conn = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(|e| e.to_string())?;
        Ok(FixedWindowBackend { conn })
    }

    /// Counts `demands` in the current windows (every demand, enforced or not).
    pub async fn decide(
        &self,
        domain: &str,
        demands: &[Demand],
    ) -> Result<Vec<Outcome>, RedisFailure> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut pipe = redis::pipe();
        let mut windows = Vec::with_capacity(demands.len());
        for d in demands {
            let Kind::Rates(rates) = &d.limit.kind else {
                windows.push(None);
                continue;
            };
            let rate = &rates[0];
            let unit = rate.unit.duration().as_secs();
            let key = format!("fw:{domain}_{}_{}", d.bucket, (now / unit) * unit);
            pipe.cmd("INCRBY")
                .arg(&key)
                .arg(d.hits)
                .cmd("EXPIRE")
                .arg(&key)
                .arg(unit)
                .ignore();
            windows.push(Some((rate.requests_per_unit, unit)));
        }
        let counts: Vec<u64> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| RedisFailure(e.to_string()))?;
        let mut counts = counts.into_iter();
        Ok(windows
            .into_iter()
            .map(|w| {
                let Some((limit, unit)) = w else {
                    return super::undecided();
                };
                let count = counts.next().unwrap_or(u64::MAX);
                let reset = Duration::from_secs(unit - now % unit);
                let holds = count <= u64::from(limit);
                Outcome {
                    holds,
                    wait: (!holds).then_some(Wait::After(reset)),
                    remaining: u64::from(limit).saturating_sub(count),
                    until_full: reset,
                    rate: 0,
                    decided: true,
                }
            })
            .collect())
    }
}
