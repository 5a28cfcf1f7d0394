//! Redis strategies (offered when `tollgate-bench compare` gets `--redis URL`; not among the
//! [`builtins`](super::builtins), which need no server):
//!
//! | name | what |
//! |---|---|
//! | `redis` | `tollgate_redis::RedisLimiter`: one script call per decision, exact |
//! | `redis-lease` | the same with leases of a quarter burst (at least 64 tokens): most decisions local |
//! | `redis-lua-baseline` | **baseline**: the seeds' plain float Lua token bucket (one call per decision) |
//! | `redis-keyed`, `redis-lease-keyed`, `redis-lua-baseline-keyed` | the same three, a key drawn per decision from `--keys` keys |
//!
//! Each limiter built (one per round of a cell) uses a fresh key prefix (state never carries
//! over between rounds or cells). The harness's threads call the async limiters through one
//! shared tokio runtime (`block_on` per decision). The per-decision timeout is 1 s (a benchmark
//! measures latency; it does not shed load), and a decision that fails counts as a refusal.

use super::{Kind, RateLimiter, Setup, Strategy};
use crate::BuildError;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tollgate::{Clock, DefaultClock, Denied};
use tollgate_redis::{Leases, RedisLimiter};

static CELL: AtomicU64 = AtomicU64::new(0);

fn prefix() -> String {
    format!(
        "tollgate-bench:{}:{}:",
        std::process::id(),
        CELL.fetch_add(1, Ordering::Relaxed)
    )
}

fn runtime() -> Result<Arc<tokio::runtime::Runtime>, BuildError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(Into::into)
}

/// `RedisLimiter` (optionally leasing) behind the harness's synchronous trait.
struct Tollgate {
    name: &'static str,
    rt: Arc<tokio::runtime::Runtime>,
    limiter: RedisLimiter,
    keyed: bool,
}

impl RateLimiter for Tollgate {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.rt.block_on(self.limiter.try_acquire("hot", cost))
    }

    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        if !self.keyed {
            return self.try_acquire(cost);
        }
        let key = format!("k{key}");
        self.rt.block_on(self.limiter.try_acquire(&key, cost))
    }

    fn is_keyed(&self) -> bool {
        self.keyed
    }

    fn name(&self) -> &str {
        self.name
    }
}

impl Drop for Tollgate {
    fn drop(&mut self) {
        // Round trips per decision: what leases save.
        let c = self.limiter.counters();
        if c.redis_calls > 0 {
            // Not `eprintln!`: it panics when stderr cannot be written, and this runs in a drop.
            let _ = writeln!(
                std::io::stderr(),
                "{}: {} decisions, {} Redis calls ({} from leases, {} errors)",
                self.name,
                c.redis + c.leased + c.lease_denied,
                c.redis_calls,
                c.leased + c.lease_denied,
                c.errors
            );
        }
    }
}

/// The baseline script through the same kind of connection as tollgate-redis's, called the way the
/// recipe is usually called (`Script::invoke_async`, an integer reply).
struct Baseline {
    rt: Arc<tokio::runtime::Runtime>,
    conn: ::redis::aio::ConnectionManager,
    script: ::redis::Script,
    key: String,
    capacity: String,
    rate: String,
    clock: DefaultClock,
    keyed: bool,
}

impl Baseline {
    fn decide(&self, key: &str, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        let mut conn = self.conn.clone();
        let r: ::redis::RedisResult<i64> = self.rt.block_on(
            self.script
                .key(key)
                .arg(&self.capacity)
                .arg(&self.rate)
                .arg(now)
                .arg(cost)
                .invoke_async(&mut conn),
        );
        match r {
            Ok(1) => Ok(()),
            // The recipe reports no wait; a refusal (or an error) is a refusal.
            _ => Err(Denied::RetryAfter(Duration::ZERO)),
        }
    }
}

impl RateLimiter for Baseline {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        self.decide(&self.key, cost)
    }

    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        if !self.keyed {
            return self.try_acquire(cost);
        }
        self.decide(&format!("{}{key}", self.key), cost)
    }

    fn is_keyed(&self) -> bool {
        self.keyed
    }

    fn name(&self) -> &str {
        if self.keyed {
            "redis-lua-baseline-keyed"
        } else {
            "redis-lua-baseline"
        }
    }
}

fn tollgate(
    url: &str,
    setup: &Setup,
    leases: bool,
    keyed: bool,
) -> Result<Box<dyn RateLimiter>, BuildError> {
    let rt = runtime()?;
    let mut b = RedisLimiter::builder(url, setup.quota)
        .prefix(&prefix())
        .timeout(Duration::from_secs(1));
    if leases {
        // Sized by the lease rule (redis/README.md): a lease from a full bucket expires at the
        // quota's rate, so it must span a useful stretch of server time — a quarter burst here.
        b = b.leases(Leases::new((setup.quota.burst() / 4).max(64)));
    }
    let limiter = rt.block_on(b.build())?;
    Ok(Box::new(Tollgate {
        name: match (leases, keyed) {
            (false, false) => "redis",
            (true, false) => "redis-lease",
            (false, true) => "redis-keyed",
            (true, true) => "redis-lease-keyed",
        },
        rt,
        limiter,
        keyed,
    }))
}

fn baseline(url: &str, setup: &Setup, keyed: bool) -> Result<Box<dyn RateLimiter>, BuildError> {
    let rt = runtime()?;
    let client = ::redis::Client::open(url)?;
    // The connection tollgate-redis opens (redis/src/conn.rs): one multiplexed connection that
    // pipelines every caller's requests, with the same per-request response timeout.
    let config = ::redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
        .set_number_of_retries(4);
    let conn = rt.block_on(::redis::aio::ConnectionManager::new_with_config(
        client, config,
    ))?;
    let q = setup.quota;
    // Tokens per second as a float, as the recipe takes it.
    let rate = q.tokens() as f64 / q.per().as_secs_f64();
    Ok(Box::new(Baseline {
        rt,
        conn,
        script: ::redis::Script::new(include_str!("redis_baseline.lua")),
        key: format!("{}hot", prefix()),
        capacity: q.burst().to_string(),
        rate: format!("{rate:e}"),
        clock: setup.clock,
        keyed,
    }))
}

/// The Redis strategies for the server at `url` (see the module docs).
///
/// ```
/// let s = tollgate_bench::strategies::redis::strategies("redis://127.0.0.1:6379");
/// let names: Vec<&str> = s.iter().map(|s| s.name()).collect();
/// assert_eq!(
///     names,
///     [
///         "redis",
///         "redis-lease",
///         "redis-lua-baseline",
///         "redis-keyed",
///         "redis-lease-keyed",
///         "redis-lua-baseline-keyed"
///     ]
/// );
/// ```
pub fn strategies(url: &str) -> Vec<Strategy> {
    let mut out = Vec::new();
    for keyed in [false, true] {
        let sfx = if keyed { "-keyed" } else { "" };
        let keys = if keyed {
            ", a key per decision from --keys"
        } else {
            ""
        };
        let (u1, u2, u3) = (url.to_owned(), url.to_owned(), url.to_owned());
        out.push(
            Strategy::new(format!("redis{sfx}"), Kind::Tollgate, move |s| {
                tollgate(&u1, s, false, keyed)
            })
            .with_description(format!(
                "tollgate-redis: the exact GCRA script, one round trip per decision{keys}"
            )),
        );
        out.push(
            Strategy::new(format!("redis-lease{sfx}"), Kind::Tollgate, move |s| {
                tollgate(&u2, s, true, keyed)
            })
            .with_description(format!(
                "tollgate-redis with leases of a quarter burst (100 ms lifetime){keys}"
            )),
        );
        out.push(
            Strategy::new(format!("redis-lua-baseline{sfx}"), Kind::Peer, move |s| {
                baseline(&u3, s, keyed)
            })
            .with_description(format!(
                "the seeds' plain float Lua token bucket (client clock, HMSET, EXPIRE 60){keys}"
            )),
        );
    }
    out
}
