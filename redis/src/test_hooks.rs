//! Test-only entry points (feature `test-support`): decisions at a given server time instead of
//! `TIME`, for the differential tests against `tollgate::gcra` (keys written this way never
//! expire), a hook that holds a lease spender between its reading and its CAS, for the
//! end-to-end tests of a paused spender, and a look at the script's reload in flight.

use crate::conn::Arg;
use crate::key::stored_key;
use crate::limiter::{Mode, RedisLimiter};
use crate::Error;
use tollgate::{Denied, Quota, Snapshot};

/// Runs `pause` on the calling thread whenever a lease spend on that thread has read the
/// server's time (its estimate from the lease's take) and is about to commit the spend, until
/// the returned guard drops. A test blocks there to freeze a spender at the worst instant: a
/// process descheduled, GC-paused or SIGSTOPped between its reading and its CAS. The hook is
/// per thread: drive the paused limiter on a thread of its own (a current-thread runtime, which
/// then freezes whole, its connection included).
///
/// ```
/// let guard = tollgate_redis::on_lease_spend(|| {});
/// drop(guard);
/// ```
pub fn on_lease_spend(pause: impl FnMut() + 'static) -> LeaseSpendHook {
    crate::lease::hook_spends(pause);
    LeaseSpendHook {
        _not_send: std::marker::PhantomData,
    }
}

/// Removes the hook [`on_lease_spend`] installed on this thread when dropped.
///
/// ```
/// let guard: tollgate_redis::LeaseSpendHook = tollgate_redis::on_lease_spend(|| {});
/// drop(guard);
/// ```
#[derive(Debug)]
pub struct LeaseSpendHook {
    /// The hook is the installing thread's: the guard stays on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for LeaseSpendHook {
    fn drop(&mut self) {
        crate::lease::unhook();
    }
}

impl RedisLimiter {
    /// The decision at a given server time (microseconds since the Unix epoch) instead of
    /// `TIME`: for the differential test against `tollgate::gcra` only. Keys written this way
    /// never expire.
    pub async fn check_at(
        &self,
        key: &str,
        cost: u64,
        now_us: u64,
    ) -> Result<(Result<(), Denied>, Snapshot, u64), Error> {
        let p = self.params(key);
        if cost > p.quota.burst() {
            let d = self
                .call(
                    &stored_key(key),
                    p,
                    0,
                    Mode::Acquire,
                    Some(now_us),
                    self.inner.deadline(),
                )
                .await?;
            return Ok((Err(Denied::ExceedsBurst), d.snapshot, d.now_ns));
        }
        let d = self
            .call(
                &stored_key(key),
                p,
                cost,
                Mode::Acquire,
                Some(now_us),
                self.inner.deadline(),
            )
            .await?;
        Ok((d.verdict, d.snapshot, d.now_ns))
    }

    /// The key's absolute `tollgate::gcra` state as the script reads it at a given server time
    /// (a state written under another quota converted into this key's quota), without writing
    /// anything: for the quota-change tests only.
    pub async fn state_at(&self, key: &str, now_us: u64) -> Result<u64, Error> {
        let p = self.params(key);
        Ok(self
            .call(
                &stored_key(key),
                p,
                0,
                Mode::Acquire,
                Some(now_us),
                self.inner.deadline(),
            )
            .await?
            .state)
    }

    /// The lease script ("take at most `max` tokens, at least `cost`") at a given server time:
    /// for the differential test only. Returns the verdict for `cost`, the tokens taken and
    /// the snapshot after the take.
    pub async fn lease_at(
        &self,
        key: &str,
        cost: u64,
        max: u64,
        now_us: u64,
    ) -> Result<(Result<(), Denied>, u64, Snapshot), Error> {
        let p = self.params(key);
        if cost == 0 || cost > p.quota.burst() || max < cost {
            return Err(Error::Config(
                "lease_at needs 1 <= cost <= burst, max".into(),
            ));
        }
        let d = self
            .call(
                &stored_key(key),
                p,
                cost,
                Mode::Lease(max),
                Some(now_us),
                self.inner.deadline(),
            )
            .await?;
        Ok((d.verdict, d.taken, d.snapshot))
    }

    /// A policy's decision at a given server time (microseconds since the Unix epoch): for the
    /// differential test only. Returns the verdict, the tightest quota's snapshot and that
    /// quota. A key without a policy of several quotas is [`Error::Config`].
    pub async fn check_limits_at(
        &self,
        key: &str,
        cost: u64,
        now_us: u64,
    ) -> Result<(Result<(), Denied>, Snapshot, Quota), Error> {
        let m = self
            .limits_of(key)
            .ok_or_else(|| Error::Config(format!("{key:?} has no policy of several quotas")))?;
        let deadline = self.inner.deadline();
        let d = self
            .decide_limits(&stored_key(key), cost, m, Some(now_us), deadline)
            .await?;
        Ok((d.verdict, d.snapshot, d.quota))
    }

    /// Whether a call of this limiter is sending `SCRIPT LOAD` now, between taking the reload
    /// lock and reading the load's answer (or being dropped): for the reload tests only, which
    /// poll a decision by hand up to that point and hold it there.
    pub fn script_load_in_flight(&self) -> bool {
        self.inner.script.load_in_flight()
    }

    /// Sends `numbers` through the script and back (test support: the number path).
    pub async fn echo(&self, numbers: &[u64]) -> Result<Vec<String>, Error> {
        let nums: Vec<String> = numbers.iter().map(u64::to_string).collect();
        let mut argv = vec![Arg::Str("echo"), Arg::Str("")];
        argv.extend(nums.iter().map(|s| Arg::Str(s)));
        let reply = self
            .inner
            .conn
            .eval(
                &self.inner.script,
                &format!("{}echo", self.inner.prefix),
                &argv,
            )
            .await
            .map_err(Error::from_redis)?;
        redis::FromRedisValue::from_redis_value(reply)
            .map_err(|e| Error::Reply(format!("the echo: {e}")))
    }
}
