//! Ordinary rates whose core unit the script cannot hold (7 per 30 days: 8.64e14 units per token,
//! 7000 units per 3 µs) are held in the script's own unit (`tollgate_redis::script_quota`):
//! against a real `redis-server`, at fixed server times (the test-only time argument), the
//! burst is admitted at once, the next token refused with the continuous bucket's wait (to the
//! nanosecond; the first server reading at or after it admits), the snapshot is the continuous
//! bucket's; and a state written under the tag of the same quota in the core's unit (a client
//! of a rolling deploy that holds it there) is converted, never with more tokens.

use std::time::Duration;
use tollgate::{gcra, Denied, Quota};
use tollgate_redis::{Leases, RedisLimiter, ORIGIN_UNIX_US};
use tollgate_testkit::redis_server::RedisServer;

const MONTH: Duration = Duration::from_secs(2_592_000);
const YEAR: Duration = Duration::from_secs(31_536_000);

/// A fixed server time: about six years after the origin, off every round number.
const T0: u64 = ORIGIN_UNIX_US + 189_345_678_901_234;

fn ns(t_us: u64) -> u64 {
    (t_us - ORIGIN_UNIX_US) * 1000
}

/// The continuous bucket's time to earn `tokens` of `q`, rounded up to the nanosecond.
fn continuous(q: &Quota, tokens: u64) -> Duration {
    let ns = (u128::from(tokens) * q.per().as_nanos()).div_ceil(u128::from(q.tokens()));
    Duration::from_nanos(ns as u64)
}

/// One unit of the script's quota, in nanoseconds, rounded up: the most an inexact unit's
/// rounding may add to a wait.
fn unit_ns(m: &Quota) -> u64 {
    let (mul, div) = m.units_per_ns();
    div.div_ceil(mul)
}

/// Drains `q` at once at `T0`, then: the next token is refused with the continuous bucket's wait
/// (within one unit of the script's quota for `exact = false`), refused a microsecond before that
/// wait ends and admitted at the first microsecond at or after it; the snapshot after the drain
/// is empty, full again after the continuous bucket's refill of the burst.
async fn drained_then_refused(server: &RedisServer, q: Quota, exact: bool) {
    let limiter = RedisLimiter::builder(&server.url(), q)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{q:?}: {e}"));
    let m = tollgate_redis::script_quota(q).unwrap();
    assert_eq!(limiter.quota_for("k"), q);
    let key = format!("{}/{:?}", q.tokens(), q.per());
    let (v, s, _) = limiter.check_at(&key, q.burst(), T0).await.unwrap();
    assert_eq!(v, Ok(()), "{q:?}");
    assert_eq!(s.remaining(), 0, "{q:?}");
    let full = continuous(&q, q.burst());
    let (v, _, _) = limiter.check_at(&key, 1, T0).await.unwrap();
    let Err(Denied::RetryAfter(wait)) = v else {
        panic!("{q:?}: {v:?} after the burst");
    };
    let want = continuous(&q, 1);
    if exact {
        assert_eq!(wait, want, "{q:?}");
        assert_eq!(s.until_full(), full, "{q:?}");
    } else {
        let slack = Duration::from_nanos(unit_ns(&m) + 1);
        assert!(
            want <= wait && wait <= want + slack,
            "{q:?}: {wait:?} vs {want:?}"
        );
        assert!(
            full <= s.until_full() && s.until_full() <= full + slack,
            "{q:?}: {s:?}"
        );
    }
    // The server reads whole microseconds: the first reading at or after the wait admits.
    let due = T0 + (wait.as_nanos() as u64).div_ceil(1000);
    let (v, _, _) = limiter.check_at(&key, 1, due - 1).await.unwrap();
    assert!(matches!(v, Err(Denied::RetryAfter(_))), "{q:?}: {v:?}");
    let (v, _, _) = limiter.check_at(&key, 1, due).await.unwrap();
    assert_eq!(v, Ok(()), "{q:?}");
    // And the model agrees with the state Redis holds.
    let mut model = gcra::try_acquire(gcra::FULL, ns(T0), &m, q.burst())
        .unwrap()
        .unwrap();
    model = gcra::try_acquire(model, ns(due), &m, 1).unwrap().unwrap();
    assert_eq!(limiter.state_at(&key, due).await.unwrap(), model, "{q:?}");
}

#[tokio::test]
async fn ordinary_rates_admit_the_burst_then_wait_the_continuous_buckets_time() {
    let Some(server) = RedisServer::start("ordinary_rates::drained") else {
        return;
    };
    for (tokens, per) in [(7, MONTH), (31, MONTH), (7, YEAR), (29, YEAR)] {
        let q = Quota::new(tokens, per, tokens).unwrap();
        // Exact at every microsecond, though not at every nanosecond.
        let m = tollgate_redis::script_quota(q).unwrap();
        assert!(!m.is_exact() && 1000 % m.units_per_ns().1 == 0, "{m:?}");
        drained_then_refused(&server, q, true).await;
    }
    // 292,899 per minute: no unit exact at every microsecond fits the core's 63-bit horizon
    // (97,633 units per µs at the coarsest), so the finest unit that fits, rounding toward
    // refusing by less than a unit.
    let q = Quota::new(292_899, Duration::from_secs(60), 292_899).unwrap();
    drained_then_refused(&server, q, false).await;
}

/// On the server's own clock (`TIME`), with and without leases (whose tokens are the script
/// quota's units): 7 per month admits 7 one by one, then refuses with the continuous bucket's
/// wait less the calls' time (a lease's cached refusal may report up to its round trip more).
#[tokio::test]
async fn seven_per_month_on_the_servers_clock() {
    let Some(server) = RedisServer::start("ordinary_rates::time") else {
        return;
    };
    let q = Quota::new(7, MONTH, 7).unwrap();
    for leases in [false, true] {
        let mut b = RedisLimiter::builder(&server.url(), q)
            .timeout(Duration::from_secs(5))
            .prefix(if leases { "leased:" } else { "plain:" });
        if leases {
            b = b.leases(Leases::new(4));
        }
        let limiter = b.build().await.unwrap();
        for i in 0..7 {
            assert_eq!(limiter.try_acquire("m", 1).await, Ok(()), "{leases}: {i}");
        }
        let Err(Denied::RetryAfter(wait)) = limiter.try_acquire("m", 1).await else {
            panic!("the 8th of 7 per month was admitted (leases: {leases})");
        };
        let want = continuous(&q, 1);
        let (lo, hi) = (
            want - Duration::from_secs(10),
            want + Duration::from_secs(1),
        );
        assert!(lo <= wait && wait <= hi, "{leases}: {wait:?}");
        assert!(limiter.try_acquire("m", 1).await.is_err(), "{leases}");
    }
}

/// A rolling deploy: 7 per day in the core's own unit (2.88e13 units per token, 7000 units per
/// 3 µs: the tag a client that holds quotas in the core's unit writes) and in the script's
/// unit (8.64e10, 7 units per µs, exact). A state written under the core-unit tag is converted
/// as `gcra::rescale` does, never with more tokens than that bucket held, and without losing a
/// whole one.
#[tokio::test]
async fn a_state_under_the_core_unit_tag_is_converted_never_with_more_tokens() {
    let Some(server) = RedisServer::start("ordinary_rates::core_unit_tag") else {
        return;
    };
    let q = Quota::new(7, Duration::from_secs(86_400), 7).unwrap();
    let m = tollgate_redis::script_quota(q).unwrap();
    assert_eq!(m.scale(), 86_400_000_000);
    // The core-unit tag's parameters: a units per b µs, k = 1 (b > 1).
    let (mul, div) = q.units_per_ns();
    assert_eq!((q.scale(), 1000 * mul, div), (28_800_000_000_000, 7000, 3));
    let (a, b) = (7000u64, 3u64);
    let old_tag = format!("{a}.{b}.{}.{}", q.scale(), 7 * q.scale());
    let limiter = RedisLimiter::builder(&server.url(), q)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    for (i, (taken, later_us)) in [
        (3, 0),
        (3, 1),
        (7, 5_000_000_017),
        (1, 12_345_678_901),
        (5, 0),
    ]
    .into_iter()
    .enumerate()
    {
        // A core-unit client's write at T0: `taken` tokens from a full bucket.
        let s = gcra::try_acquire(gcra::FULL, ns(T0), &q, taken)
            .unwrap()
            .unwrap();
        let n = (T0 - ORIGIN_UNIX_US) / b;
        let z = s - n * a;
        let key = format!("old{i}");
        server.cli(&[
            "SET",
            &format!("tollgate:{key}"),
            &format!("{old_tag} {n} {z}"),
        ]);
        let t = T0 + later_us;
        let got = limiter.state_at(&key, t).await.unwrap();
        let old = gcra::available(s, ns(t), &q);
        let new = gcra::available(got, ns(t), &m);
        assert!(new <= old, "{taken} at +{later_us} us: {new} > {old}");
        assert!(
            got >= gcra::rescale(s, ns(t), &q, &m),
            "{taken} at +{later_us} us"
        );
        // Within a unit of the old bucket: no whole token lost.
        assert_eq!(new, old, "{taken} at +{later_us} us");
        // Exactly the converted tokens are admitted, one by one.
        for _ in 0..new {
            assert_eq!(limiter.check_at(&key, 1, t).await.unwrap().0, Ok(()));
        }
        let (v, _, _) = limiter.check_at(&key, 1, t).await.unwrap();
        assert!(matches!(v, Err(Denied::RetryAfter(_))), "{v:?}");
        let stored = server.cli(&["GET", &format!("tollgate:{key}")]);
        if new > 0 {
            assert!(
                stored.starts_with("7.1.86400000000.604800000000 "),
                "{stored}"
            );
        }
    }
}
