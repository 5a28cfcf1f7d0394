//! `RedisLimiter::decide_keys`: several keys with their own policies and costs in one script
//! call, all or nothing. The quotas refill one token per hours, so that the milliseconds a test
//! takes refill nothing and every verdict follows from the tokens taken so far.

use std::collections::HashMap;
use std::time::Duration;
use tollgate::{Denied, Limits, Quota};
use tollgate_redis::{CheckedLimits, Error, KeyDemand, RedisLimiter};
use tollgate_testkit::redis_server::RedisServer;
use tollgate_testkit::rng::Rng;

/// `burst` tokens, one more every `hours` hours.
fn slow(burst: u64, hours: u64) -> Quota {
    Quota::new(1, Duration::from_secs(3600 * hours), burst).unwrap()
}

fn checked(quotas: &[Quota]) -> CheckedLimits {
    CheckedLimits::new(Limits::new(quotas.iter().copied()).unwrap()).unwrap()
}

/// `cost` tokens of `key` under `limits`, in the call's all or nothing.
fn demand<'a>(key: &'a str, limits: &'a CheckedLimits, cost: u64) -> KeyDemand<'a> {
    KeyDemand {
        key,
        limits,
        cost,
        alone: false,
        check: false,
    }
}

/// `cost` tokens of `key`, decided alone.
fn alone<'a>(key: &'a str, limits: &'a CheckedLimits, cost: u64) -> KeyDemand<'a> {
    KeyDemand {
        alone: true,
        ..demand(key, limits, cost)
    }
}

/// `cost` tokens that `key` must hold, never debited.
fn check_only<'a>(key: &'a str, limits: &'a CheckedLimits, cost: u64) -> KeyDemand<'a> {
    KeyDemand {
        check: true,
        ..demand(key, limits, cost)
    }
}

async fn limiter(server: &RedisServer) -> RedisLimiter {
    RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refusal_debits_no_key_and_says_which_key_refused() {
    let Some(server) = RedisServer::start("a_refusal_debits_no_key") else {
        return;
    };
    let l = limiter(&server).await;
    let a = checked(&[slow(3, 24)]);
    let b = checked(&[slow(1, 24), slow(5, 48)]);
    let both = |ca, cb| [demand("{t}a", &a, ca), demand("{t}b", &b, cb)];
    let out = l.decide_keys(&both(1, 1)).await.unwrap();
    assert!(out.iter().all(|d| d.verdict.is_ok()));
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 2);
    assert_eq!(out[1].snapshots.tightest().1.remaining(), 0);
    let a_before = server.cli(&["GET", "tollgate:{t}a"]);
    let out = l.decide_keys(&both(1, 1)).await.unwrap();
    assert!(out[0].verdict.is_ok(), "a alone holds its cost");
    let refusal = out[1].verdict.unwrap_err();
    assert_eq!(refusal.quota_index(), 0, "b's first quota refused");
    assert!(matches!(refusal.denied(), Denied::RetryAfter(w) if w > Duration::from_secs(80_000)));
    assert_eq!(
        out[0].snapshots.tightest().1.remaining(),
        2,
        "a was not debited"
    );
    assert_eq!(server.cli(&["GET", "tollgate:{t}a"]), a_before);
    // A cost above a burst: refused whatever the state, and the call writes nothing.
    let out = l.decide_keys(&both(4, 0)).await.unwrap();
    assert_eq!(out[0].verdict.unwrap_err().denied(), Denied::ExceedsBurst);
    assert!(out[1].verdict.is_ok(), "a read holds");
    assert_eq!(server.cli(&["GET", "tollgate:{t}a"]), a_before);
    // Reads (cost 0) alongside a debit: the debit goes through, the read takes nothing.
    let out = l.decide_keys(&both(2, 0)).await.unwrap();
    assert!(out.iter().all(|d| d.verdict.is_ok()));
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 0);
    assert_eq!(out[1].snapshots.tightest().1.remaining(), 0);
}

#[tokio::test]
async fn bad_calls_are_errors() {
    let Some(server) = RedisServer::start("decide_keys_bad_calls") else {
        return;
    };
    let l = limiter(&server).await;
    let p = checked(&[slow(3, 1)]);
    let d = demand("k", &p, 1);
    assert!(matches!(l.decide_keys(&[]).await, Err(Error::Config(_))));
    assert!(matches!(
        l.decide_keys(&[d, d]).await,
        Err(Error::Config(_))
    ));
    server.cli(&["SET", "tollgate:junk", "not a state"]);
    let junk = demand("junk", &p, 1);
    match l.decide_keys(&[d, junk]).await {
        Err(Error::Malformed { key, .. }) => assert_eq!(key, "tollgate:junk"),
        other => panic!("{other:?}"),
    }
}

/// A key holding another type (a hash) or a value the script did not write is malformed, named
/// by the error in key order whatever the other keys hold, and nothing is written. The script
/// reads every key before deciding (from three keys on, by MGET, which reads a key of another
/// type as absent): such a key among absent ones is still found, in calls of any size.
#[tokio::test]
async fn a_key_of_another_type_is_malformed_and_nothing_is_written() {
    let Some(server) = RedisServer::start("decide_keys_other_type") else {
        return;
    };
    let l = limiter(&server).await;
    let p = checked(&[slow(3, 1)]);
    let two = checked(&[slow(3, 1), slow(5, 2)]);
    let d = |key, limits| demand(key, limits, 1);
    // A state under each policy, for an existing key among the others.
    l.decide_keys(&[d("{o}held", &p), d("{o}held2", &two)])
        .await
        .unwrap();
    let held = server.cli(&["GET", "tollgate:{o}held"]);
    let held2 = server.cli(&["GET", "tollgate:{o}held2"]);
    server.cli(&["HSET", "tollgate:{o}hash", "f", "v"]);
    server.cli(&["SET", "tollgate:{o}junk", "not a state"]);
    let calls: [(&[&str], &str); 6] = [
        (&["{o}hash"], "tollgate:{o}hash"),
        (&["{o}a", "{o}hash"], "tollgate:{o}hash"),
        (&["{o}a", "{o}hash", "{o}b"], "tollgate:{o}hash"),
        (
            &["{o}held", "{o}a", "{o}held2", "{o}hash"],
            "tollgate:{o}hash",
        ),
        (&["{o}a", "{o}hash", "{o}junk"], "tollgate:{o}hash"),
        (&["{o}a", "{o}junk", "{o}hash"], "tollgate:{o}junk"),
    ];
    for (keys, bad) in calls {
        let demands: Vec<KeyDemand<'_>> = keys
            .iter()
            .map(|k| d(*k, if k.ends_with('2') { &two } else { &p }))
            .collect();
        match l.decide_keys(&demands).await {
            Err(Error::Malformed { key, reason }) => {
                assert_eq!(key, bad, "{keys:?}");
                if bad.ends_with("hash") {
                    assert!(reason.contains("WRONGTYPE"), "{reason}");
                }
            }
            other => panic!("{keys:?}: {other:?}"),
        }
        assert_eq!(
            server
                .cli(&["EXISTS", "tollgate:{o}a", "tollgate:{o}b"])
                .trim(),
            "0"
        );
        assert_eq!(server.cli(&["GET", "tollgate:{o}held"]), held);
        assert_eq!(server.cli(&["GET", "tollgate:{o}held2"]), held2);
    }
}

/// Random calls of one to five keys among eight, random policies and costs, against a model
/// that counts whole tokens: admitted iff every key with a cost holds it, then all debited.
#[tokio::test]
async fn random_calls_follow_the_all_or_nothing_model() {
    let Some(server) = RedisServer::start("decide_keys_model") else {
        return;
    };
    let l = limiter(&server).await;
    let mut rng = Rng(0x6b65_7973);
    let keys: Vec<String> = (0..8).map(|i| format!("{{m}}k{i}")).collect();
    let policies: Vec<(Vec<Quota>, CheckedLimits)> = (0..8)
        .map(|_| {
            let n = 1 + rng.below(3) as usize;
            let quotas: Vec<Quota> = (0..n)
                .map(|_| slow(1 + rng.below(6), 10 + rng.below(90)))
                .collect();
            let c = checked(&quotas);
            (quotas, c)
        })
        .collect();
    // Tokens left per key and quota.
    let mut left: HashMap<usize, Vec<u64>> = (0..8)
        .map(|k| (k, policies[k].0.iter().map(Quota::burst).collect()))
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for _ in 0..300 {
        let mut chosen: Vec<usize> = (0..8).collect();
        for i in (1..8).rev() {
            chosen.swap(i, rng.below(i as u64 + 1) as usize);
        }
        chosen.truncate(1 + rng.below(5) as usize);
        let costs: Vec<u64> = chosen.iter().map(|_| rng.below(4)).collect();
        let demands: Vec<KeyDemand<'_>> = chosen
            .iter()
            .zip(&costs)
            .map(|(&k, &cost)| demand(&keys[k], &policies[k].1, cost))
            .collect();
        let out = l.decide_keys(&demands).await.unwrap();
        let holds: Vec<bool> = chosen
            .iter()
            .zip(&costs)
            .map(|(k, c)| left[k].iter().all(|t| t >= c))
            .collect();
        for (i, d) in out.iter().enumerate() {
            assert_eq!(
                d.verdict.is_ok(),
                holds[i],
                "key {} cost {}",
                chosen[i],
                costs[i]
            );
        }
        if holds.iter().all(|h| *h) {
            admitted += 1;
            for (k, c) in chosen.iter().zip(&costs) {
                for t in left.get_mut(k).unwrap() {
                    *t -= c;
                }
            }
        } else {
            refused += 1;
        }
        for (i, k) in chosen.iter().enumerate() {
            let want: Vec<u64> = left[k].clone();
            let got: Vec<u64> = out[i]
                .snapshots
                .as_slice()
                .iter()
                .map(|s| s.remaining())
                .collect();
            assert_eq!(got, want, "key {k}");
        }
    }
    assert!(
        admitted > 10 && refused > 10,
        "{admitted} admitted, {refused} refused"
    );
}

#[tokio::test]
async fn a_key_decided_alone_neither_blocks_nor_waits_for_the_others() {
    let Some(server) = RedisServer::start("decide_keys_alone") else {
        return;
    };
    let l = limiter(&server).await;
    let one = checked(&[slow(1, 24)]);
    let two = checked(&[slow(2, 24)]);
    let call = |enforced_cost, alone_cost| {
        [
            demand("{s}enforced", &one, enforced_cost),
            alone("{s}alone", &two, alone_cost),
        ]
    };
    let out = l.decide_keys(&call(1, 2)).await.unwrap();
    assert!(out.iter().all(|d| d.verdict.is_ok()));
    // A refusing alone key does not stop a holding enforced key.
    let spare = checked(&[slow(5, 24)]);
    let out = l
        .decide_keys(&[demand("{s}spare", &spare, 1), alone("{s}alone", &two, 1)])
        .await
        .unwrap();
    assert!(out[0].verdict.is_ok() && out[1].verdict.is_err());
    assert_eq!(
        out[0].snapshots.tightest().1.remaining(),
        4,
        "spare debited"
    );
    // The enforced key refuses: an alone key that holds is debited anyway.
    let out = l
        .decide_keys(&[demand("{s}enforced", &one, 1), alone("{s}spare", &spare, 1)])
        .await
        .unwrap();
    assert!(out[0].verdict.is_err() && out[1].verdict.is_ok());
    assert_eq!(
        out[1].snapshots.tightest().1.remaining(),
        3,
        "spare debited alone"
    );
    // An alone key over its burst is refused and does not make the others read-only.
    let out = l
        .decide_keys(&[demand("{s}spare", &spare, 1), alone("{s}alone", &two, 3)])
        .await
        .unwrap();
    assert_eq!(out[1].verdict.unwrap_err().denied(), Denied::ExceedsBurst);
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 2);
}

/// A key written under one policy and decided under another (a changed limit): the script
/// converts the state (off the one-quota hot path), and the reply still agrees with gcra.
#[tokio::test]
async fn a_key_under_a_changed_policy_is_converted() {
    let Some(server) = RedisServer::start("decide_keys_converted") else {
        return;
    };
    let l = limiter(&server).await;
    let before = checked(&[slow(3, 24)]);
    let after = checked(&[slow(5, 24)]);
    let two = checked(&[slow(5, 24), slow(9, 48)]);
    let d = |p, cost| demand("{c}k", p, cost);
    let out = l.decide_keys(&[d(&before, 3)]).await.unwrap();
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 0);
    // Burst 3 spent, now a burst of 5 at the same rate: still empty (tokens are not made up).
    let out = l.decide_keys(&[d(&after, 0)]).await.unwrap();
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 0);
    // And under a policy of two quotas (several triples from one).
    let out = l.decide_keys(&[d(&two, 0)]).await.unwrap();
    assert_eq!(out[0].snapshots.as_slice()[0].remaining(), 0);
    assert_eq!(out[0].snapshots.as_slice()[1].remaining(), 9);
}

#[tokio::test]
async fn a_checked_key_must_hold_and_is_never_debited() {
    let Some(server) = RedisServer::start("decide_keys_check") else {
        return;
    };
    let l = limiter(&server).await;
    let one = checked(&[slow(1, 24)]);
    let five = checked(&[slow(5, 24)]);
    let call = |check_cost| {
        [
            demand("{k}debited", &five, 1),
            check_only("{k}checked", &one, check_cost),
        ]
    };
    for left in [4, 3] {
        let out = l.decide_keys(&call(1)).await.unwrap();
        assert!(out.iter().all(|d| d.verdict.is_ok()));
        assert_eq!(out[0].snapshots.tightest().1.remaining(), left);
        assert_eq!(
            out[1].snapshots.tightest().1.remaining(),
            1,
            "checked, not debited"
        );
    }
    assert_eq!(server.cli(&["EXISTS", "tollgate:{k}checked"]).trim(), "0");
    // A check that does not hold refuses the call: nothing is debited.
    let out = l.decide_keys(&call(2)).await.unwrap();
    assert_eq!(out[1].verdict.unwrap_err().denied(), Denied::ExceedsBurst);
    assert_eq!(out[0].snapshots.tightest().1.remaining(), 3);
    // Spend the checked key's token; then its check refuses and nothing is debited.
    let mut spend = call(1);
    spend[1].check = false;
    l.decide_keys(&spend).await.unwrap();
    let out = l.decide_keys(&call(1)).await.unwrap();
    assert!(matches!(
        out[1].verdict.unwrap_err().denied(),
        Denied::RetryAfter(_)
    ));
    assert!(out[0].verdict.is_ok());
    assert_eq!(
        out[0].snapshots.tightest().1.remaining(),
        2,
        "not debited by the refused call"
    );
}

/// A call of the most keys (tens of milliseconds of script and checking: about 16 µs a key on a
/// local server, more in a debug build) has a timeout for every 32 of them, so it is decided,
/// and the breaker stays closed for the next caller (one 20 ms timeout for the whole call
/// would fail it with `Error::Timeout`, evidence that Redis is down).
#[tokio::test]
async fn a_call_of_many_keys_has_a_timeout_per_32_keys() {
    let Some(server) = RedisServer::start("a_call_of_many_keys") else {
        return;
    };
    let l = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let limits = checked(&[slow(3, 24), slow(5, 48)]);
    let keys: Vec<String> = (0..tollgate_redis::MAX_KEYS_PER_CALL)
        .map(|i| format!("{{t}}k{i}"))
        .collect();
    let demands: Vec<KeyDemand<'_>> = keys.iter().map(|key| demand(key, &limits, 1)).collect();
    for round in 0..3 {
        let out = l.decide_keys(&demands).await;
        let out = out.unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(out.iter().all(|d| d.verdict.is_ok()), "round {round}");
    }
    assert_eq!(l.counters().errors, 0);
    // The breaker stayed closed: the next caller is sent to Redis, not refused `Unavailable`.
    // Its one key's round trip may pass 20 ms on a loaded machine (a `Timeout`: the call was
    // sent); what it reads is checked through a limiter whose timeout no round trip reaches.
    let next = l.check("{t}k0", 1).await;
    assert!(
        matches!(
            next,
            Ok(Err(Denied::RetryAfter(_))) | Err(Error::Timeout(_))
        ),
        "{next:?}"
    );
    let patient = RedisLimiter::builder(&server.url(), Quota::per_second(1).unwrap())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // The three rounds drained the burst of 3.
    assert!(matches!(
        patient.check("{t}k0", 1).await,
        Ok(Err(Denied::RetryAfter(_)))
    ));
}
