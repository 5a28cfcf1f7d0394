//! What one client can do to everyone else's limit: drop its decisions mid-flight, send huge
//! keys, plant values under the prefix; and the range of quotas real deployments use. Each test
//! starts its own `redis-server` on a free loopback port.

use std::future::Future;
use std::task::{Context, Waker};
use std::time::Duration;
use tollgate::{Denied, Quota};
use tollgate_redis::{Error, OnUnavailable, RedisLimiter, MALFORMED_RETRY};
use tollgate_testkit::redis_server::RedisServer;

fn q(tokens: u64, per: Duration, burst: u64) -> Quota {
    Quota::new(tokens, per, burst).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A caller that gives up (a client disconnect, a `select!`, a shorter outer timeout) is not the
/// limiter's evidence that Redis is down: 1,000 dropped in-flight decisions (half polled once,
/// so their script call is in flight, half never polled) leave the breaker closed and the
/// in-flight slots free, and the next 200 decisions are all decided by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_decisions_neither_open_the_breaker_nor_hold_slots() {
    let Some(server) = RedisServer::start("hostile::dropped_decisions") else {
        return;
    };
    for policy in [OnUnavailable::FailOpen, OnUnavailable::FailClosed] {
        let l = RedisLimiter::builder(&server.url(), q(5, HOUR, 5))
            .on_unavailable(policy)
            .max_in_flight(64)
            .probe_interval(Duration::from_secs(3600))
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        for i in 0..1000 {
            let mut f = Box::pin(l.try_acquire("victim", 1));
            if i % 2 == 0 {
                let _ = f.as_mut().poll(&mut cx);
            }
            drop(f);
        }
        let before = l.counters();
        let mut admitted = 0;
        for _ in 0..200 {
            if l.try_acquire("victim", 1).await.is_ok() {
                admitted += 1;
            }
        }
        let after = l.counters();
        assert_eq!(
            after.redis - before.redis,
            200,
            "{policy:?}: every decision after the drops is Redis's ({after:?})"
        );
        assert_eq!(
            after.fail_open + after.fail_closed + after.local_fallback,
            0,
            "{policy:?}: no decision took the policy ({after:?})"
        );
        assert!(
            admitted <= 5,
            "{policy:?}: {admitted} admitted on a burst-5 key"
        );
        server.cli(&["FLUSHALL"]);
    }
}

/// `INFO memory`'s `used_memory`.
fn used_memory(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

/// Client-chosen key bytes do not grow Redis: 2,000 unique 60 KB keys leave `used_memory` within
/// 2 MB of what 2,000 short keys leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_keys_cost_redis_what_short_keys_cost() {
    let (Some(short), Some(long)) = (
        RedisServer::start("hostile::huge_keys (short)"),
        RedisServer::start("hostile::huge_keys (long)"),
    ) else {
        return;
    };
    let mut grown = Vec::new();
    for (server, len) in [(&short, 8usize), (&long, 60_000)] {
        let l = RedisLimiter::builder(&server.url(), q(1, HOUR, 5))
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        let m0 = used_memory(server);
        for i in 0..2000u32 {
            let mut key = format!("{i:08}");
            key.extend(std::iter::repeat_n('x', len.saturating_sub(8)));
            assert_eq!(l.check(&key, 1).await.unwrap(), Ok(()));
        }
        assert_eq!(
            server.cli(&["DBSIZE"]).trim(),
            "2000",
            "one Redis key per limiter key"
        );
        grown.push(used_memory(server).saturating_sub(m0));
    }
    assert!(
        grown[1] <= grown[0] + 2_000_000,
        "2,000 keys of 60 KB grew Redis by {} bytes, 2,000 short keys by {}",
        grown[1],
        grown[0]
    );
}

/// A value under the prefix that the script did not write (garbage, a hash or a list, numbers
/// out of range, a state dated far beyond the server's time) is that key's fault alone: the
/// key is refused with a wait, never admitted by the fail-open policy, `check` names it, and
/// other keys are decided by Redis as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_values_are_refused_for_their_key_only() {
    let Some(server) = RedisServer::start("hostile::foreign_values") else {
        return;
    };
    let quota = q(1, HOUR, 3);
    // A generous timeout: on a loaded machine a 25 ms timeout would open the breaker, and
    // fail-open admissions would hide what this test checks.
    let l = RedisLimiter::builder(&server.url(), quota)
        .on_unavailable(OnUnavailable::FailOpen)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // A state written by the script, to forge a same-tag state from.
    assert_eq!(l.check("probe", 1).await.unwrap(), Ok(()));
    let written = server.cli(&["GET", "tollgate:probe"]);
    let tag = written.split(' ').next().unwrap().to_owned();
    let forged_future = format!("{tag} 8000000000000000 0");
    let plants: [(&str, &[&str]); 6] = [
        ("garbage", &["SET", "tollgate:garbage", "not a state"]),
        ("hash", &["HSET", "tollgate:hash", "f", "v"]),
        ("list", &["RPUSH", "tollgate:list", "v"]),
        (
            "range",
            &["SET", "tollgate:range", "1.2.3.4 99999999999999999999 1"],
        ),
        (
            "tagrange",
            &["SET", "tollgate:tagrange", "99999999999999999999.1.1.1 1 1"],
        ),
        ("future", &["SET", "tollgate:future", &forged_future]),
    ];
    for (key, cmd) in plants {
        server.cli(cmd);
        for _ in 0..20 {
            let v = l.try_acquire(key, 1).await;
            assert_eq!(
                v,
                Err(Denied::RetryAfter(MALFORMED_RETRY)),
                "{key}: a foreign value must be refused, not take the policy"
            );
        }
        let before = l.counters().malformed;
        let e = l.check(key, 1).await.expect_err(key);
        assert!(
            matches!(&e, Error::Malformed { key: k, .. } if *k == l.redis_key(key)),
            "{key}: {e:?}"
        );
        assert!(!e.is_unavailable());
        let e = e.to_string();
        assert!(
            e.contains(key),
            "{key}: check's error does not name the key: {e}"
        );
        let c = l.counters();
        assert_eq!(c.fail_open, 0, "{key}: {c:?}");
        // check returns the error; it is counted as an error, not as a refusal.
        assert_eq!(c.malformed, before, "{key}: {c:?}");
        assert!(c.malformed >= 20 && c.errors >= c.malformed, "{key}: {c:?}");
        // Nothing was written: the planted value is still there.
        assert_ne!(server.cli(&["EXISTS", &l.redis_key(key)]).trim(), "0");
        // Another key is untouched: its burst of 3, decided by Redis.
        let other = format!("other-{key}");
        let before = l.counters().redis;
        let admitted = {
            let mut n = 0;
            for _ in 0..5 {
                n += u32::from(l.try_acquire(&other, 1).await.is_ok());
            }
            n
        };
        assert_eq!(admitted, 3, "{key}: another key's burst");
        assert_eq!(l.counters().redis - before, 5);
    }
}

/// Quotas real deployments use build and decide exactly: one an hour with bursts of 1,000,
/// thirty per 30 days, one a year with a burst of 10, 10^9 per second with a burst of 10^6,
/// 10,000 a day with a burst of 10,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realistic_quotas_build() {
    let quotas = [
        q(1, HOUR, 1000),
        q(30, 30 * DAY, 30),
        q(1, Duration::from_secs(365 * 86_400), 10),
        q(1_000_000_000, Duration::from_secs(1), 1_000_000),
        q(10_000, DAY, 10_000),
    ];
    for quota in quotas {
        assert!(
            tollgate_redis::check_quota(quota).is_ok(),
            "{quota:?}: {:?}",
            tollgate_redis::check_quota(quota)
        );
    }
    let Some(server) = RedisServer::start("hostile::realistic_quotas") else {
        return;
    };
    for (i, quota) in quotas.into_iter().enumerate() {
        let l = RedisLimiter::builder(&server.url(), quota)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        let key = format!("real{i}");
        let burst = quota.burst();
        assert_eq!(l.check(&key, burst).await.unwrap(), Ok(()));
        if quota.refill_time(1) > Duration::from_secs(60) {
            let (v, s) = l.check_snapshot(&key, 1).await.unwrap();
            assert!(matches!(v, Err(Denied::RetryAfter(_))), "{quota:?}: {v:?}");
            assert_eq!(s.remaining(), 0);
        }
    }
}

/// An ACL user allowed exactly the commands the README lists for the limiter (`TIME`, `GET`,
/// `MGET`, `EXISTS`, `SET`, `PSETEX`, `EVALSHA`, `EVAL`, `SCRIPT`) builds a limiter and decides:
/// plain, leased, several quotas, several keys, after the script cache was flushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_commands_suffice() {
    let Some(server) = RedisServer::start("hostile::documented_acl") else {
        return;
    };
    let set = server.cli(&[
        "ACL", "SETUSER", "lim", "on", ">pw", "~*", "-@all", "+time", "+get", "+mget", "+exists",
        "+set", "+psetex", "+evalsha", "+eval", "+script",
    ]);
    assert_eq!(set.trim(), "OK");
    let url = format!("redis://lim:pw@127.0.0.1:{}", server.port());
    let quota = q(1, HOUR, 3);
    let build = |leases: bool| {
        let b = RedisLimiter::builder(&url, quota).timeout(Duration::from_secs(2));
        let b = if leases {
            b.leases(tollgate_redis::Leases::new(2))
        } else {
            b
        };
        b.build()
    };
    let l = build(false).await.expect("build as the ACL user");
    assert_eq!(l.check("a", 1).await.unwrap(), Ok(()));
    server.cli(&["SCRIPT", "FLUSH"]);
    assert_eq!(l.check("a", 1).await.unwrap(), Ok(()));
    let (v, s) = l.check_snapshot("a", 0).await.unwrap();
    assert_eq!((v, s.remaining()), (Ok(()), 1));
    let leasing = build(true).await.unwrap();
    assert_eq!(leasing.check("b", 1).await.unwrap(), Ok(()));
    let p = tollgate_redis::CheckedLimits::new(tollgate::Limits::from(quota)).unwrap();
    let d = |key| tollgate_redis::KeyDemand {
        key,
        limits: &p,
        cost: 1,
        alone: false,
        check: false,
    };
    let out = l.decide_keys(&[d("c1"), d("c2"), d("c3")]).await.unwrap();
    assert!(out.iter().all(|k| k.verdict.is_ok()));
    let multi = RedisLimiter::builder(&url, quota)
        .limits(tollgate::Limits::new([quota, q(10, DAY, 10)]).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    assert_eq!(multi.check("m", 1).await.unwrap(), Ok(()));
    assert_eq!(l.counters().errors, 0);
}
