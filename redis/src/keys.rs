//! [`RedisLimiter::decide_keys`]: several keys, each with its own policy and cost, decided in
//! one script call (mode `keys` of `gcra.lua`), all or nothing: admitted only if every key
//! with a cost holds it, and then every such key is debited; otherwise nothing is written.
//! Each key's part of the reply is checked against `tollgate::gcra` as a policy's is.

use crate::conn::Arg;
use crate::key::stored_key;
use crate::limits::LimitsParams;
use crate::observe::Path;
use crate::script::{parse, server_ns};
use crate::{Error, RedisLimiter};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tollgate::{gcra, Denied, Limits, Refusal, Snapshots};

/// A policy ([`Limits`]) checked once against the script's range, for
/// [`RedisLimiter::decide_keys`].
///
/// ```
/// use tollgate::{Limits, Quota};
/// let p = tollgate_redis::CheckedLimits::new(Limits::from(Quota::per_second(5).unwrap())).unwrap();
/// assert_eq!(p.limits().quotas().len(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct CheckedLimits(LimitsParams);

impl CheckedLimits {
    /// Checks every quota of `limits` against the script's range ([`crate::check_quota`]).
    pub fn new(limits: Limits) -> Result<CheckedLimits, Error> {
        LimitsParams::new(limits).map(CheckedLimits)
    }

    /// The policy.
    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }
}

/// One key of a [`RedisLimiter::decide_keys`] call: its name (stored as
/// [`RedisLimiter::redis_key`] names it), its policy, its cost (0: read only), whether it is
/// decided alone (outside the call's all or nothing), and whether it is only checked.
#[derive(Clone, Copy, Debug)]
pub struct KeyDemand<'a> {
    /// The key.
    pub key: &'a str,
    /// Its policy.
    pub limits: &'a CheckedLimits,
    /// Tokens to take (0: read the bucket, take nothing).
    pub cost: u64,
    /// Decided on its own: debited if it holds its cost whatever the other keys get, and
    /// left out of the call's verdict (a limit in shadow mode, say).
    pub alone: bool,
    /// Checked only: the key must hold its cost (it takes part in the verdict, unless
    /// `alone`), and it is never debited.
    pub check: bool,
}

/// What one key of a [`RedisLimiter::decide_keys`] call got.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDecision {
    /// Whether this key alone holds its cost (a cost of 0 always does), with the refusing
    /// quota otherwise. The call admitted iff every verdict of a key not decided alone is
    /// `Ok`.
    pub verdict: Result<(), Refusal>,
    /// Each quota's bucket right after the decision (debited only if the call admitted).
    pub snapshots: Snapshots,
}

/// The most keys one call takes.
pub const MAX_KEYS_PER_CALL: usize = 1024;

/// The keys of a [`RedisLimiter::decide_keys`] call that one timeout covers: a call of `n` keys
/// has `⌈n / 32⌉` timeouts. The script's time grows with the keys (a full call takes longer
/// than a timeout sized for one key), and a call that runs past its deadline counts as evidence
/// that Redis is down: with one timeout per call, one caller's large call would open the
/// breaker for every caller.
const KEYS_PER_TIMEOUT: usize = 32;

impl RedisLimiter {
    /// Decides every key of `demands` at one server time in one script call (one round trip),
    /// all or nothing: admitted iff every key with a cost above 0 holds it (each against its
    /// own policy), and then every such key is debited; otherwise none is. A key marked
    /// [`alone`](KeyDemand::alone) is debited iff it holds its cost, whatever the others get,
    /// and takes no part in the call's verdict; one marked [`check`](KeyDemand::check) must
    /// hold its cost and is never debited. Keys must be
    /// distinct, at most [`MAX_KEYS_PER_CALL`]; on Redis Cluster they must hash to one slot
    /// (give them one hash tag, `{tenant}`; a call whose keys do not is [`Error::Config`],
    /// never sent). No policy applies here: errors (timeout, breaker
    /// open, malformed value) are returned for the caller to decide. The call has one
    /// [`timeout`](crate::RedisLimiterBuilder::timeout) for every 32 keys (rounded up), since
    /// the script's time grows with them.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::{Limits, Quota};
    /// use tollgate_redis::{CheckedLimits, KeyDemand, RedisLimiter};
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379", Quota::per_second(100).unwrap())
    ///     .build()
    ///     .await?;
    /// let tenant = CheckedLimits::new(Limits::from(Quota::per_second(10).unwrap()))?;
    /// let route = CheckedLimits::new(Limits::from(Quota::per_second(100).unwrap()))?;
    /// let out = limiter
    ///     .decide_keys(&[
    ///         KeyDemand { key: "{t1}tenant", limits: &tenant, cost: 1, alone: false, check: false },
    ///         KeyDemand { key: "{t1}route", limits: &route, cost: 1, alone: false, check: false },
    ///     ])
    ///     .await?;
    /// let admitted = out.iter().all(|d| d.verdict.is_ok());
    /// # let _ = admitted;
    /// # Ok(()) }
    /// ```
    pub async fn decide_keys(&self, demands: &[KeyDemand<'_>]) -> Result<Vec<KeyDecision>, Error> {
        if demands.is_empty() || demands.len() > MAX_KEYS_PER_CALL {
            return Err(Error::Config(format!(
                "{} keys in one call: between 1 and {MAX_KEYS_PER_CALL}",
                demands.len()
            )));
        }
        let inner = &*self.inner;
        let full: Vec<String> = demands
            .iter()
            .map(|d| format!("{}{}", inner.prefix, stored_key(d.key)))
            .collect();
        let mut seen = HashSet::with_capacity(full.len());
        if !full.iter().all(|k| seen.insert(k.as_str())) {
            return Err(Error::Config("the same key twice in one call".into()));
        }
        // On a cluster the server answers keys on several slots with CROSSSLOT, a server error,
        // which would open the breaker for every caller: refuse such a call here, unsent.
        if matches!(inner.conn, crate::conn::Conn::Cluster(_)) {
            let slot = redis::cluster_routing::Slot::for_key(&full[0]);
            if full
                .iter()
                .any(|k| redis::cluster_routing::Slot::for_key(k) != slot)
            {
                return Err(Error::Config(
                    "keys on several cluster slots in one call: give them one hash tag".into(),
                ));
            }
        }
        // A cost above a key's smallest burst is refused whatever the state: such a key is read
        // (the script would otherwise admit a full bucket), and so is every key of the call's
        // all or nothing when one of them is.
        let exceeds = |d: &KeyDemand<'_>| d.cost > d.limits.0.min_burst();
        let read_all = demands.iter().any(|d| !d.alone && exceeds(d));
        let sent: Vec<u64> = demands
            .iter()
            .map(|d| {
                if exceeds(d) || (read_all && !d.alone) {
                    0
                } else {
                    d.cost
                }
            })
            .collect();
        // Each policy once (by identity: the keys of a call mostly share a few), numbered from 1
        // in order of first use; then per key its cost, flags and policy's number. The script
        // reads and bases each policy's quotas once, and a key costs three arguments however
        // many quotas its policy has.
        let mut number: HashMap<usize, u64> = HashMap::new();
        let mut policies: Vec<&CheckedLimits> = Vec::new();
        let of: Vec<u64> = demands
            .iter()
            .map(|d| {
                *number
                    .entry(std::ptr::from_ref(d.limits).addr())
                    .or_insert_with(|| {
                        policies.push(d.limits);
                        policies.len() as u64
                    })
            })
            .collect();
        let mut argv: Vec<Arg<'_>> = Vec::with_capacity(3 + policies.len() * 6 + demands.len() * 3);
        argv.push(Arg::Str("keys"));
        argv.push(Arg::Str(""));
        argv.push(Arg::Int(policies.len() as u64));
        for p in &policies {
            let quotas = p.0.quota_params();
            argv.push(Arg::Int(quotas.len() as u64));
            for q in quotas {
                argv.extend(q.quota_strs().iter().map(|a| Arg::Str(a)));
            }
        }
        for ((d, s), p) in demands.iter().zip(&sent).zip(&of) {
            argv.push(Arg::Int(*s));
            argv.push(Arg::Int(u64::from(d.alone) + 2 * u64::from(d.check)));
            argv.push(Arg::Int(*p));
        }
        let keys: Vec<&str> = full.iter().map(String::as_str).collect();
        // At most `MAX_KEYS_PER_CALL / KEYS_PER_TIMEOUT` = 32 timeouts.
        let deadline = inner.deadline_times(demands.len().div_ceil(KEYS_PER_TIMEOUT) as u32);
        let r = self.eval_keys_checked(&keys, &argv, deadline).await;
        let r = r.and_then(|reply| {
            let reply: Vec<String> = redis::FromRedisValue::from_redis_value(reply)
                .map_err(|e| Error::Reply(format!("a keys reply: {e}")))?;
            decode(&reply, demands, &sent)
        });
        match &r {
            Ok(out) => {
                let admitted = out
                    .iter()
                    .zip(demands)
                    .all(|(o, d)| d.alone || o.verdict.is_ok());
                inner.observe.decided(&if admitted {
                    Ok(())
                } else {
                    Err(Denied::RetryAfter(Duration::ZERO))
                });
                if admitted && !read_all {
                    crate::counters::bump(&inner.stats.redis);
                    inner.observe.path(Path::Redis);
                }
            }
            Err(e) => {
                crate::counters::bump(&inner.stats.errors);
                inner.observe.failed(matches!(e, Error::Timeout(_)));
            }
        }
        r
    }
}

/// Decodes `{status, t, per key: own, prev_1..N, next_1..N}` (see `gcra.lua`), checking every
/// quota's part against `tollgate::gcra` at the reply's time.
fn decode(
    reply: &[String],
    demands: &[KeyDemand<'_>],
    sent: &[u64],
) -> Result<Vec<KeyDecision>, Error> {
    let want = 2 + demands
        .iter()
        .map(|d| 1 + 2 * d.limits.0.quota_params().len())
        .sum::<usize>();
    if reply.len() != want {
        return Err(Error::Reply(format!(
            "expected {want} fields, got {}",
            reply.len()
        )));
    }
    let admitted = match reply[0].as_str() {
        "1" => true,
        "0" => false,
        _ => return Err(Error::Reply(format!("unknown status {:?}", reply[0]))),
    };
    let t = parse(Some(reply[1].as_str()))?;
    let now = server_ns(t)?;
    let disagree = |what: &str| {
        Error::Reply(format!(
            "the script and tollgate::gcra disagree on {what}; is another writer using this key \
             prefix?"
        ))
    };
    let mut out = Vec::with_capacity(demands.len());
    let mut pos = 2;
    let mut all_hold = true;
    for (d, &sent) in demands.iter().zip(sent) {
        let quotas = d.limits.0.quota_params();
        let n = quotas.len();
        let own = match reply[pos].as_str() {
            "1" => true,
            "0" => false,
            _ => return Err(Error::Reply(format!("unknown verdict {:?}", reply[pos]))),
        };
        let prev = &reply[pos + 1..pos + 1 + n];
        let next = &reply[pos + 1 + n..pos + 1 + 2 * n];
        pos += 1 + 2 * n;
        // Written: a cost sent, not a check, and the call admitted (or this key, decided
        // alone, held it).
        let written = sent > 0 && !d.check && if d.alone { own } else { admitted };
        let mut verdicts = Vec::with_capacity(n);
        let mut snaps = Vec::with_capacity(n);
        for (i, p) in quotas.iter().enumerate() {
            let before = p.state_of(&prev[i])?;
            let r = gcra::try_acquire(before, now, &p.model, d.cost);
            let after = match (&r, written) {
                (Ok(Some(after)), true) => {
                    if p.written_state(t, &next[i])? != u128::from(*after) {
                        return Err(disagree("a written state"));
                    }
                    *after
                }
                (Err(_), true) => return Err(disagree("an admission")),
                _ => before,
            };
            verdicts.push(r.map(|_| ()));
            snaps.push(gcra::snapshot(after, now, &p.model));
        }
        let verdict = crate::limits::combine(verdicts.iter().copied());
        if sent == d.cost && verdict.is_ok() != own {
            return Err(disagree("a key's verdict"));
        }
        all_hold &= d.alone || sent == 0 || own;
        let verdict = match verdict {
            Ok(()) => Ok(()),
            Err(denied) => {
                let idx = verdicts.iter().position(|v| *v == Err(denied)).unwrap_or(0);
                Err(Refusal::new(denied, idx))
            }
        };
        let snapshots =
            Snapshots::new(&snaps).ok_or_else(|| Error::Reply("a policy of no quota".into()))?;
        out.push(KeyDecision { verdict, snapshots });
    }
    if admitted != all_hold {
        return Err(disagree("the call's verdict"));
    }
    Ok(out)
}
