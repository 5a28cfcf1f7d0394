//! A key whose state was written under another quota (a deploy that changes the limit, or
//! `quota_for` configured on some processes only): the script carries the old bucket over as
//! `tollgate::gcra::rescale` does, rounded toward fewer tokens, and rejects a value it cannot
//! have written. Against a real `redis-server`, at fixed server times (the test-only time
//! argument), with fixed seeds.

use std::time::Duration;
use tollgate::{gcra, Denied, Quota};
use tollgate_redis::{Error, Leases, RedisLimiter, ORIGIN_UNIX_US};
use tollgate_testkit::random_quotas::{log_uniform, quota};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::rng::Rng;

/// The quotas the script holds.
fn fits(q: Quota) -> bool {
    tollgate_redis::check_quota(q).is_ok()
}

const PAIRS: usize = 400;
/// The script's step-back allowance: a base at most a day after the server's time.
const STEP_BACK_US: u64 = 86_400 * 1_000_000;
/// The latest reading: 99 years after the origin, within tollgate's horizon.
const LAST_US: u64 = ORIGIN_UNIX_US + 99 * 365 * 86_400 * 1_000_000;
const READS: usize = 5;

/// A quota for the other side of a pair: the same rate with another burst, the same period
/// with other tokens, or an unrelated one.
fn other(rng: &mut Rng, a: &Quota) -> Quota {
    for _ in 0..20 {
        let q = match rng.below(3) {
            0 => Quota::new(a.tokens(), a.per(), log_uniform(rng, 10_000_000)),
            1 => Quota::new(log_uniform(rng, 1_000_000_000), a.per(), a.burst()),
            _ => return quota(rng, fits),
        };
        if let Ok(q) = q {
            if tollgate_redis::check_quota(q).is_ok() {
                return q;
            }
        }
    }
    quota(rng, fits)
}

/// Units `q` earns by `now_ns`, rounded down (the model's `earned_floor`).
fn earned_floor(q: &Quota, now_ns: u64) -> u128 {
    let (mul, div) = q.units_per_ns();
    u128::from(now_ns) * u128::from(mul) / u128::from(div)
}

fn ns(t_us: u64) -> u64 {
    (t_us - ORIGIN_UNIX_US) * 1000
}

struct Pair {
    key: String,
    a: Quota,
    b: Quota,
    /// Decisions under `a`: (server µs, cost).
    writes: Vec<(u64, u64)>,
    /// Readings under `b` (server µs), one of them stepped back.
    reads: Vec<u64>,
}

fn pairs(seed: u64) -> Vec<Pair> {
    let mut rng = Rng(seed);
    (0..PAIRS)
        .map(|i| {
            let a = quota(&mut rng, fits);
            let b = other(&mut rng, &a);
            let token_us = (a.refill_time(1).as_micros() as u64).max(1);
            let full_us = (a.refill_time(a.burst()).as_micros() as u64).max(1);
            let mut t = ORIGIN_UNIX_US + rng.below(90 * 365 * 86_400 * 1_000_000);
            let first = t;
            let writes = (0..1 + rng.below(4))
                .map(|_| {
                    t += match rng.below(3) {
                        0 => 0,
                        1 => rng.below(token_us * 2),
                        _ => rng.below(1000),
                    };
                    let cost = match rng.below(3) {
                        0 => a.burst(),
                        1 => log_uniform(&mut rng, a.burst()),
                        _ => 1 + rng.below(a.burst().min(3)),
                    };
                    (t, cost)
                })
                .collect();
            let last = t;
            let mut reads: Vec<u64> = (0..READS - 1)
                .map(|_| {
                    // Within tollgate's horizon (a quota may take centuries to refill its
                    // burst in the script's coarser units).
                    LAST_US.min(
                        last + match rng.below(6) {
                            0 => 0,
                            1 => rng.below(token_us),
                            2 => rng.below(full_us.saturating_mul(2)),
                            3 => token_us,
                            4 => log_uniform(&mut rng, 1 << 40),
                            _ => rng.below(1000),
                        },
                    )
                })
                .collect();
            // The clock stepped back (a failover to a host whose clock is behind): before the
            // last write, by up to three tokens' time or to before the first write.
            let back = match rng.below(2) {
                0 => 1 + rng.below(token_us.saturating_mul(3)),
                _ => last - first + 1 + rng.below(1000),
            };
            // At most a day back: a state dated further ahead of the server's time is malformed
            // by design (`tests/hostile_clients.rs`).
            reads.push(
                last.saturating_sub(back)
                    .max(last.saturating_sub(STEP_BACK_US))
                    .max(ORIGIN_UNIX_US),
            );
            Pair {
                key: format!("p{i}"),
                a,
                b,
                writes,
                reads,
            }
        })
        .collect()
}

/// The state under `b` never holds more than `gcra::rescale` of the same absolute state (nor
/// more tokens than the old bucket held), and at most a few units less: none with equal scales
/// and no debt, 2 units (the double bound on a fraction of a token) otherwise, plus what `b`
/// earns in one microsecond in debt (the due instant is rounded up to the server clock's
/// microsecond).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converted_state_is_rescale_rounded_toward_fewer_tokens() {
    let Some(server) = RedisServer::start("quota_change::converted_state") else {
        return;
    };
    let all = pairs(0x5eed_c0a7);
    let mut la = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(5));
    let mut lb = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(5));
    for p in &all {
        la = la.quota_for(&p.key, p.a);
        lb = lb.quota_for(&p.key, p.b);
    }
    let (la, lb) = (la.build().await.unwrap(), lb.build().await.unwrap());
    let (mut exact, mut debt, mut capped, mut fewer, mut inexact, mut scales) = (0, 0, 0, 0, 0, 0);
    let mut huge = 0;
    for p in &all {
        // Each side's quota in the script's unit: every state and decision is `gcra` on it.
        let (a, b) = (
            tollgate_redis::script_quota(p.a).unwrap(),
            tollgate_redis::script_quota(p.b).unwrap(),
        );
        // The writes under `a`, mirrored by the model.
        let mut model = gcra::FULL;
        for &(t, cost) in &p.writes {
            let (v, _, _) = la.check_at(&p.key, cost, t).await.unwrap();
            let m = gcra::try_acquire(model, ns(t), &a, cost);
            assert_eq!(v, m.map(|_| ()));
            model = m.ok().flatten().unwrap_or(model);
        }
        // The absolute state under `a` (its own tag: read exactly, whatever the time).
        let last = p.writes.last().unwrap().0;
        let s = la.state_at(&p.key, last).await.unwrap();
        assert_eq!(s, model, "{:?}: {:?}", p.a, p.writes);
        inexact += u32::from(!a.is_exact() || !b.is_exact());
        for &t in &p.reads {
            let now = ns(t);
            let got = lb.state_at(&p.key, t).await.unwrap();
            if a.units_per_ns() == b.units_per_ns()
                && (a.scale(), a.burst()) == (b.scale(), b.burst())
            {
                // The same tag: no conversion, the state as stored.
                assert_eq!(got, s);
                continue;
            }
            let want = gcra::rescale(s, now, &a, &b);
            let ctx = || format!("{:?} -> {:?}, state {s}, t {t}: {got} vs {want}", p.a, p.b);
            assert!(got < (1 << 63) - 1, "saturated: {}", ctx());
            assert!(got >= want, "more than gcra::rescale: {}", ctx());
            assert!(
                gcra::available(got, now, &b) <= gcra::available(s, now, &a),
                "more tokens than the old bucket: {}",
                ctx()
            );
            let in_debt = u128::from(s) > earned_floor(&a, now) + u128::from(a.burst() * a.scale());
            // The script counts in units of k of the quota's (see src/script.rs): its
            // roundings are whole script units of the reader's quota.
            let (ka, kb) = (script_unit(&a), script_unit(&b));
            let equal_scales = a.scale() / ka == b.scale() / kb;
            scales += u32::from(!equal_scales);
            let tol = if in_debt {
                debt += 1;
                let (mul, div) = b.units_per_ns();
                let micro = (1000 * u128::from(mul)).div_ceil(u128::from(div)) + 1;
                // A debt of 2^52 units or more above the base is bounded in doubles: within
                // 2^-47 of itself, plus one.
                let big = if u128::from(got) > earned_floor(&b, now) + (1 << 52) {
                    huge += 1;
                    u128::from(got >> 46)
                } else {
                    0
                };
                2 * u128::from(kb) + micro + big
            } else if equal_scales {
                0
            } else {
                2 * u128::from(kb)
            };
            assert!(
                u128::from(got - want) <= tol,
                "{} fewer units than tol {tol}: {}",
                got - want,
                ctx()
            );
            exact += u32::from(got == want);
            fewer += u32::from(got > want);
            if gcra::available(s, now, &a) > b.burst() {
                capped += 1;
            }
            // Nothing was written: the key still holds the state under `a`.
            assert_eq!(la.state_at(&p.key, last).await.unwrap(), s);
        }
    }
    let reads = PAIRS * READS;
    eprintln!(
        "{reads} readings: {exact} exact, {fewer} fewer, {debt} in debt, {capped} capped at the \
         new burst, {scales} across scales, {inexact} pairs with an inexact quota, {huge} debts \
         above 2^52 units"
    );
    assert!(exact > reads as u32 / 2, "{exact} exact");
    assert!(debt > 20 && capped > 20 && scales > 100 && inexact > 40);
}

/// Two quotas of the same rate and different bursts alternate on one key at every call, at
/// intervals shorter than one token's refill, for a long schedule: the admitted tokens stay
/// within one (the larger) burst of `rate × elapsed` — a conversion that dropped the fraction
/// of a token at every switch would starve the key; one that read the other's state as full
/// would admit every request. A third pair has slightly different rates and scales: then the
/// bound is the larger burst plus the larger rate, and at least the smaller rate less a burst.
#[tokio::test]
async fn alternating_quotas_neither_starve_nor_over_admit() {
    let Some(server) = RedisServer::start("quota_change::alternating") else {
        return;
    };
    let pairs = [
        (
            Quota::per_second(10).unwrap().with_burst(5).unwrap(),
            Quota::per_second(10).unwrap().with_burst(20).unwrap(),
        ),
        (
            Quota::new(3, Duration::from_secs(7), 2).unwrap(),
            Quota::new(3, Duration::from_secs(7), 9).unwrap(),
        ),
        (
            Quota::per_second(1000).unwrap().with_burst(50).unwrap(),
            Quota::per_second(999).unwrap().with_burst(30).unwrap(),
        ),
    ];
    let mut rng = Rng(0xa17e_57a7);
    for (i, (q1, q2)) in pairs.into_iter().enumerate() {
        let key = format!("alt{i}");
        let l1 = RedisLimiter::builder(&server.url(), q1)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        let l2 = RedisLimiter::builder(&server.url(), q2)
            .timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        // Intervals below one token of the faster quota.
        let token_us = q1.refill_time(1).min(q2.refill_time(1)).as_micros() as u64;
        let t0 = ORIGIN_UNIX_US + 1_000_000_000_000 + rng.below(1_000_000_000);
        let mut t = t0;
        let mut admitted = 0u64;
        for call in 0..4000 {
            t += 1 + rng.below(token_us - 1);
            let l = if call % 2 == 0 { &l1 } else { &l2 };
            // One call in five is a lease take of up to 3 tokens (checked against the model
            // like every reply); its tokens count as admitted.
            if call % 5 == 4 {
                let (v, taken, _) = l.lease_at(&key, 1, 3, t).await.unwrap();
                assert_eq!(v.is_ok(), taken > 0);
                admitted += taken;
            } else if l.check_at(&key, 1, t).await.unwrap().0.is_ok() {
                admitted += 1;
            }
        }
        let elapsed = Duration::from_micros(t - t0);
        let per_s = |q: &Quota| q.tokens() as f64 / q.per().as_secs_f64();
        let (lo, hi) = (per_s(&q1).min(per_s(&q2)), per_s(&q1).max(per_s(&q2)));
        let burst = q1.burst().max(q2.burst()) as f64;
        let (min, max) = (
            lo * elapsed.as_secs_f64() - burst,
            hi * elapsed.as_secs_f64() + burst,
        );
        eprintln!("{q1:?} / {q2:?}: {admitted} admitted in {elapsed:?}, bounds {min:.1}..{max:.1}");
        assert!(
            (admitted as f64) <= max && (admitted as f64) >= min,
            "{q1:?} / {q2:?}: {admitted} admitted in {elapsed:?}, expected {min:.1}..={max:.1}"
        );
    }
}

/// Values the script cannot have written under any quota are a server error (the script's
/// "not a tollgate state"), for plain decisions, snapshots and lease takes alike — never a
/// panic, a loop or a full bucket — and the value stays as it was. A valid foreign state whose
/// writer's clock ran decades ahead is refused for good (never more tokens), without error.
#[tokio::test]
async fn hostile_foreign_values_are_errors() {
    let Some(server) = RedisServer::start("quota_change::hostile") else {
        return;
    };
    let q = Quota::per_second(10).unwrap();
    let plain = RedisLimiter::builder(&server.url(), q)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let leasing = RedisLimiter::builder(&server.url(), q)
        .leases(Leases::new(4))
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let hostile = [
        "garbage 1 2",
        "x.1.1.1 0 0",
        "1.2.3 0 0",
        "1.2.3.4.5 0 0",
        "-1.1.1.1 0 0",
        "0.1.1000.1000 0 0",                                   // a = 0
        "1.0.1000.1000 0 0",                                   // b = 0
        "1000.1.0.1000 0 0",                                   // scale = 0
        "1000.1.1000.0 0 0",                                   // burst 0
        "1000.1.1000.1500 0 0",                                // burst not whole tokens
        "1000.1.1000.10000 0 99999999999999999999",            // huge z
        "1000.1.1000.10000 0 11001",                           // z > a + burst
        "1000.1.1000.10000 9007199254740992 0",                // n >= 2^53
        "1000.9007199254740.1000.10000 1000 0",                // (a + 1) b > 2^53
        "1000.1.1000.2251799813685248 0 0",                    // burst + 2a > 2^51
        "99999999999999999999999999999999999999.1.1.1000 0 0", // beyond doubles' integers
        "1e3.1.1000.10000 0 0",
        "1000.1.1000.10000 0 0 0",
    ];
    for (i, v) in hostile.iter().enumerate() {
        let key = format!("h{i}");
        server.cli(&["SET", &format!("tollgate:{key}"), v]);
        let checked = plain.check(&key, 1).await;
        assert!(
            matches!(checked, Err(Error::Malformed { .. })),
            "{v:?}: {checked:?}"
        );
        let snap = plain.check_snapshot(&key, 0).await;
        assert!(
            matches!(snap, Err(Error::Malformed { .. })),
            "{v:?}: {snap:?}"
        );
        let leased = leasing.check(&key, 1).await;
        assert!(
            matches!(leased, Err(Error::Malformed { .. })),
            "{v:?}: {leased:?}"
        );
        assert!(
            checked
                .unwrap_err()
                .to_string()
                .contains("not a tollgate state"),
            "{v:?}"
        );
        let kept = server.cli(&["GET", &format!("tollgate:{key}")]);
        assert_eq!(kept.trim_end(), *v);
    }
    // Valid numbers (1 per hour, burst 1: 1000 units per us, a token is 3.6 x 10^12 units), at
    // a base 2^53 - 1 us (~285 years) after the origin, far ahead of the server's clock: dated
    // beyond the quota's horizon, so malformed (refused for this key, never full).
    let v = "1000.1.3600000000000.3600000000000 9007199254740991 3600000000000";
    server.cli(&["SET", "tollgate:ahead", v]);
    let r = plain.check("ahead", 1).await;
    assert!(matches!(r, Err(Error::Malformed { .. })), "{r:?}");
    assert_eq!(
        plain.try_acquire("ahead", 1).await,
        Err(Denied::RetryAfter(tollgate_redis::MALFORMED_RETRY))
    );
    // The same state a few hours ahead (a clock stepped back): a debt, refused, no tokens.
    let now_us = server.cli(&["TIME"]);
    let secs: u64 = now_us.lines().next().unwrap().trim().parse().unwrap();
    let base = (secs - ORIGIN_UNIX_US / 1_000_000 + 3 * 3600) * 1_000_000;
    let v = format!("1000.1.3600000000000.3600000000000 {base} 3600000000000");
    server.cli(&["SET", "tollgate:ahead", &v]);
    let r = plain.check("ahead", 1).await.unwrap();
    assert!(matches!(r, Err(Denied::RetryAfter(_))), "{r:?}");
    let (_, s) = plain.check_snapshot("ahead", 0).await.unwrap();
    assert_eq!(s.remaining(), 0);
    // A refusal writes nothing.
    assert_eq!(server.cli(&["GET", "tollgate:ahead"]).trim_end(), v);
    // A full bucket of 10/s with burst 20, written long ago, read at 10/s with burst 10: capped
    // at the new burst; an admission writes under the reader's tag, with an expiry.
    let wide = "1000.1.100000000.2000000000 0 0";
    server.cli(&["SET", "tollgate:wide", wide]);
    assert_eq!(plain.check("wide", 10).await.unwrap(), Ok(()));
    assert!(plain.check("wide", 1).await.unwrap().is_err());
    let stored = server.cli(&["GET", "tollgate:wide"]);
    assert!(
        // 10/s in script units of 1000: one unit per us, a token is 10^5.
        stored.starts_with("1.1.100000.1000000 "),
        "{stored:?}"
    );
    let ttl: i64 = server
        .cli(&["PTTL", "tollgate:wide"])
        .trim()
        .parse()
        .unwrap();
    assert!((1..=1100).contains(&ttl), "{ttl}");
}

/// The script's unit in the quota's state units (src/script.rs): `gcd(a, scale)` when a whole
/// number of units is earned per microsecond, else 1.
fn script_unit(q: &Quota) -> u64 {
    fn gcd(mut x: u128, mut y: u128) -> u128 {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    }
    let (mul, div) = q.units_per_ns();
    let am = 1000 * u128::from(mul);
    let g = gcd(am, u128::from(div));
    if u128::from(div) / g == 1 {
        gcd(am / g, u128::from(q.scale())) as u64
    } else {
        1
    }
}
