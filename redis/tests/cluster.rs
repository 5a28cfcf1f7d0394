//! A 3-master Redis Cluster on loopback: keys spread over slots and nodes, hash tags keep keys
//! together, a slot moved after connecting is followed (MOVED), never a CROSSSLOT error; a
//! script reload on one node does not wait for the others.

use std::time::{Duration, Instant};
use tollgate::Quota;
use tollgate_redis::{Error, OnUnavailable, RedisLimiter};
use tollgate_testkit::redis_server::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_spreads_keys_and_follows_moved() {
    let Some(cluster) = RedisCluster::start("cluster::cluster_spreads_keys_and_follows_moved")
    else {
        return;
    };
    let quota = Quota::new(1, Duration::from_secs(3600), 3).unwrap();
    let l = RedisLimiter::builder(&cluster.url(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // 300 keys: each admits exactly its burst.
    for i in 0..300 {
        let key = format!("user:{i}");
        for _ in 0..3 {
            assert_eq!(l.check(&key, 1).await.unwrap(), Ok(()));
        }
        assert!(l.check(&key, 1).await.unwrap().is_err());
    }
    // Every master holds some of them.
    for n in cluster.nodes() {
        let keys: u64 = n.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys > 30, "a node holds only {keys} keys");
    }
    // Hash tags: all of one tenant's keys on one slot.
    let slot = |k: &str| cluster.nodes()[0].cli(&["CLUSTER", "KEYSLOT", k]);
    for i in 0..10 {
        let key = format!("api:{{tenant7}}:{i}");
        assert_eq!(l.check(&key, 1).await.unwrap(), Ok(()));
        assert_eq!(slot(&format!("tollgate:{key}")), slot("{tenant7}"));
    }

    // MOVED: hand an empty slot to another master after the client has its slot map.
    let key = "moved-key";
    let s: u16 = slot(&format!("tollgate:{key}")).trim().parse().unwrap();
    let ids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.cli(&["CLUSTER", "MYID"]).trim().to_owned())
        .collect();
    let owner = cluster
        .nodes()
        .iter()
        .position(|n| {
            n.cli(&["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()])
                .trim()
                == "0"
                && n.cli(&["CLUSTER", "NODES"])
                    .lines()
                    .any(|l| l.contains("myself") && owns(l, s))
        })
        .expect("the slot's owner");
    let target = (owner + 1) % 3;
    for n in cluster.nodes() {
        n.cli(&["CLUSTER", "SETSLOT", &s.to_string(), "NODE", &ids[target]]);
    }
    // The old owner now answers MOVED; the client follows it.
    let moved = cluster.nodes()[owner].cli(&["GET", &format!("tollgate:{key}")]);
    assert!(moved.contains("MOVED"), "{moved}");
    for _ in 0..3 {
        assert_eq!(l.check(key, 1).await.unwrap(), Ok(()));
    }
    assert!(l.check(key, 1).await.unwrap().is_err());
    let on_target = cluster.nodes()[target].cli(&["EXISTS", &format!("tollgate:{key}")]);
    assert_eq!(on_target.trim(), "1");
    assert_eq!(l.counters().errors, 0);
}

/// Whether a `CLUSTER NODES` line lists slot `s` among its ranges.
fn owns(line: &str, s: u16) -> bool {
    line.split_whitespace()
        .skip(8)
        .any(|r| match r.split_once('-') {
            Some((a, b)) => {
                a.parse::<u16>().is_ok_and(|a| a <= s) && b.parse::<u16>().is_ok_and(|b| s <= b)
            }
            None => r.parse::<u16>() == Ok(s),
        })
}

/// One master frozen (SIGSTOP) while another's script cache is flushed: decisions on the
/// healthy master reload the script there alone and decide at once, so `FailOpen` admits no
/// more than the burst. A reload through `SCRIPT LOAD` (which redis-rs sends to every node)
/// would wait for the frozen node until the decision's timeout, open the breaker, and let
/// FailOpen admit every decision after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_does_not_wait_for_a_frozen_node() {
    let Some(cluster) = RedisCluster::start("cluster::a_reload_does_not_wait_for_a_frozen_node")
    else {
        return;
    };
    let l = RedisLimiter::builder(
        &cluster.url(),
        Quota::new(1, Duration::from_secs(3600), 3).unwrap(),
    )
    .timeout(Duration::from_millis(500))
    .on_unavailable(OnUnavailable::FailOpen)
    .build()
    .await
    .unwrap();
    assert_eq!(l.check("k", 1).await.unwrap(), Ok(()));
    let nodes = cluster.nodes();
    let owner = nodes
        .iter()
        .position(|n| n.cli(&["EXISTS", "tollgate:k"]).trim() == "1")
        .expect("the key's master");
    let frozen = &nodes[(owner + 1) % nodes.len()];
    assert_eq!(nodes[owner].cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    frozen.pause();
    let t0 = Instant::now();
    let first = l.check("k", 1).await;
    let took = t0.elapsed();
    let mut admitted = u64::from(matches!(first, Ok(Ok(()))));
    for _ in 0..50 {
        if l.try_acquire("k", 1).await.is_ok() {
            admitted += 1;
        }
    }
    frozen.resume();
    let c = l.counters();
    println!("first decision after the flush: {first:?} in {took:?}; {admitted} admitted; {c:?}");
    assert!(matches!(first, Ok(Ok(()))), "{first:?} after {took:?}");
    assert_eq!(admitted, 2, "a burst of 3, one spent before: {c:?}");
    assert_eq!(c.fail_open, 0, "{c:?}");
}

/// One caller's `decide_keys` whose keys hash to different slots (no shared hash tag) is that
/// caller's error alone: it must not open the breaker, so the next caller's decision on a
/// healthy cluster is still Redis's. The server answers such a call with `CROSSSLOT`, a server
/// error reply, which the call path reads as evidence that Redis is down: the client refuses
/// the call unsent instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_slot_call_does_not_open_the_breaker() {
    let Some(cluster) = RedisCluster::start("cluster::a_cross_slot_call_does_not_open_the_breaker")
    else {
        return;
    };
    let l = RedisLimiter::builder(
        &cluster.url(),
        Quota::new(1, Duration::from_secs(3600), 3).unwrap(),
    )
    .timeout(Duration::from_secs(2))
    // An hour between probes: once open, the breaker refuses every decision for the test.
    .probe_interval(Duration::from_secs(3600))
    .build()
    .await
    .unwrap();
    let p = tollgate_redis::CheckedLimits::new(tollgate::Limits::from(
        Quota::new(1, Duration::from_secs(3600), 3).unwrap(),
    ))
    .unwrap();
    let d = |key| tollgate_redis::KeyDemand {
        key,
        limits: &p,
        cost: 1,
        alone: false,
        check: false,
    };
    let slot = |k: &str| cluster.nodes()[0].cli(&["CLUSTER", "KEYSLOT", k]);
    assert_ne!(slot("tollgate:{a}x"), slot("tollgate:{b}y"));
    let r = l.decide_keys(&[d("{a}x"), d("{b}y")]).await;
    assert!(
        matches!(r, Err(Error::Config(_))),
        "keys on two slots: {r:?}"
    );
    let next = l.check("{a}other", 1).await;
    assert!(
        matches!(next, Ok(Ok(()))),
        "after one caller's cross-slot call ({r:?}), another's decision: {next:?}"
    );
}
