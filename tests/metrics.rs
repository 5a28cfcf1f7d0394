//! The `metrics` feature: what named limiters record (read back from a debugging recorder), and
//! shadow mode deciding exactly as enforcement does. Deterministic: ManualClock, fixed seeds.
#![cfg(all(feature = "metrics", feature = "keyed"))]

use std::time::Duration;
use tollgate::Limiter;
use tollgate_testkit::decide::Snapshotting;

use tollgate::metrics::{DecisionMetrics, Metered, Outcome, PolicyMetrics};
use tollgate::{
    Bucket, Denied, KeyedLimiter, KeyedMultiLimiter, Limits, ManualClock, Quota, ShardedBucket,
};

use tollgate_testkit::quotas::quota;
use tollgate_testkit::recorder::Recorder;
use tollgate_testkit::rng::Rng;

#[test]
fn bucket_decisions_and_waits_are_recorded() {
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let api = rec.build(|| Metered::new("api", Bucket::with_clock(quota(4, 2), clock.clone())));
    assert_eq!(api.try_acquire(1), Ok(()));
    assert_eq!(api.try_acquire(1), Ok(()));
    assert_eq!(
        api.try_acquire(1),
        Err(Denied::RetryAfter(Duration::from_millis(250)))
    );
    assert_eq!(
        api.try_acquire(2),
        Err(Denied::RetryAfter(Duration::from_millis(500)))
    );
    assert_eq!(api.try_acquire(3), Err(Denied::ExceedsBurst));
    clock.advance(Duration::from_millis(250));
    let (verdict, snapshot) = api.decide_snapshot(&(), 1);
    assert_eq!((verdict, snapshot.remaining()), (Ok(()), 0));
    assert_eq!(api.try_acquire(0), Ok(()));

    let s = rec.snapshot();
    assert_eq!(s.decisions("api", "admitted"), 4);
    assert_eq!(s.decisions("api", "refused"), 2);
    assert_eq!(s.decisions("api", "exceeds_burst"), 1);
    assert_eq!(s.decisions("api", "shadow_refused"), 0);
    // One sample per wait handed out, in seconds; none for admissions or exceeds_burst.
    assert_eq!(s.waits("api"), vec![0.25, 0.5]);
}

#[test]
fn sharded_bucket_is_metered() {
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let global = rec.build(|| {
        Metered::new(
            "global",
            ShardedBucket::with_clock(quota(10, 10), 2, clock.clone()),
        )
    });
    let mut admitted = 0;
    let mut refused = 0;
    for _ in 0..30 {
        match global.try_acquire(1) {
            Ok(()) => admitted += 1,
            Err(Denied::RetryAfter(_)) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(admitted + refused, 30);
    assert!(refused >= 20, "{refused}");
    let s = rec.snapshot();
    assert_eq!(s.decisions("global", "admitted"), admitted);
    assert_eq!(s.decisions("global", "refused"), refused);
    assert_eq!(s.waits("global").len() as u64, refused);
}

/// One random sequence of costs and clock steps, decided by `decide` on a fresh limiter per
/// run; returns each call's verdict and the bucket's tokens after it.
fn drive(
    seed: u64,
    clock: &ManualClock,
    mut decide: impl FnMut(u64, u64) -> (Result<(), Denied>, u64),
) -> Vec<(Result<(), Denied>, u64)> {
    let mut rng = Rng(seed);
    (0..2_000)
        .map(|_| {
            clock.advance(Duration::from_micros(rng.below(40_000)));
            // Mostly small costs, sometimes one above the burst of 8.
            let cost = if rng.below(50) == 0 { 9 } else { rng.below(4) };
            let key = rng.below(5);
            decide(key, cost)
        })
        .collect()
}

#[test]
fn shadow_bucket_refuses_nothing_and_counts_exactly_what_enforcement_refuses() {
    let rec = Recorder::new();
    let enforce_clock = ManualClock::new();
    let shadow_clock = ManualClock::new();
    let enforce = rec.build(|| {
        Metered::new(
            "enforce",
            Bucket::with_clock(quota(50, 8), enforce_clock.clone()),
        )
    });
    let shadow = rec.build(|| {
        Metered::new(
            "shadow",
            Bucket::with_clock(quota(50, 8), shadow_clock.clone()),
        )
        .shadow(true)
    });
    assert!(shadow.is_shadow() && !enforce.is_shadow());
    let enforced = drive(7, &enforce_clock, |_, cost| {
        (enforce.try_acquire(cost), enforce.get_ref().available())
    });
    let shadowed = drive(7, &shadow_clock, |_, cost| {
        (shadow.try_acquire(cost), shadow.get_ref().available())
    });
    // Every shadow decision admitted, and after each the shadow bucket holds what the
    // enforcing one holds: its would-be refusals wrote nothing.
    for (i, (e, s)) in enforced.iter().zip(&shadowed).enumerate() {
        assert_eq!(s.0, Ok(()), "call {i}");
        assert_eq!(e.1, s.1, "tokens after call {i}");
    }
    let refused = enforced
        .iter()
        .filter(|(v, _)| matches!(v, Err(Denied::RetryAfter(_))))
        .count() as u64;
    let too_big = enforced
        .iter()
        .filter(|(v, _)| *v == Err(Denied::ExceedsBurst))
        .count() as u64;
    assert!(refused > 100 && too_big > 10, "{refused} {too_big}");

    let s = rec.snapshot();
    assert_eq!(s.decisions("enforce", "refused"), refused);
    assert_eq!(s.decisions("enforce", "exceeds_burst"), too_big);
    assert_eq!(s.decisions("shadow", "shadow_refused"), refused + too_big);
    assert_eq!(s.decisions("shadow", "refused"), 0);
    assert_eq!(
        s.decisions("shadow", "admitted"),
        s.decisions("enforce", "admitted")
    );
    // The waits it would have sent are the waits enforcement sent.
    assert_eq!(s.waits("shadow"), s.waits("enforce"));
    assert_eq!(s.waits("enforce").len() as u64, refused);
}

#[test]
fn shadow_keyed_limiter_counts_exactly_what_enforcement_refuses() {
    let rec = Recorder::new();
    let (ce, cs) = (ManualClock::new(), ManualClock::new());
    let build = |name: &str, clock: &ManualClock, shadow: bool| {
        rec.build(|| {
            KeyedLimiter::builder(quota(50, 8), 3, clock.clone())
                .name(name)
                .shadow(shadow)
                .build()
                .unwrap()
        })
    };
    let enforce = build("enforce", &ce, false);
    let shadow = build("shadow", &cs, true);
    // Five keys in a table of three: table-full refusals are refusals too.
    let enforced = drive(11, &ce, |key, cost| {
        (enforce.try_acquire(&key, cost), enforce.available(&key))
    });
    let shadowed = drive(11, &cs, |key, cost| {
        (shadow.try_acquire(&key, cost), shadow.available(&key))
    });
    for (i, (e, s)) in enforced.iter().zip(&shadowed).enumerate() {
        assert_eq!(s.0, Ok(()), "call {i}");
        assert_eq!(e.1, s.1, "tokens after call {i}");
    }
    let refused = enforced.iter().filter(|(v, _)| v.is_err()).count() as u64;
    assert!(refused > 50, "{refused}");
    let s = rec.snapshot();
    assert!(s.counter("tollgate_table_full_total{action=refused,limiter=enforce}") > 0);
    let enforce_refused =
        s.decisions("enforce", "refused") + s.decisions("enforce", "exceeds_burst");
    assert_eq!(enforce_refused, refused);
    assert_eq!(s.decisions("shadow", "shadow_refused"), refused);
    assert_eq!(
        s.counter("tollgate_table_full_total{action=refused,limiter=enforce}"),
        s.counter("tollgate_table_full_total{action=refused,limiter=shadow}"),
    );
    assert_eq!(s.waits("shadow"), s.waits("enforce"));
}

/// A keyed policy table in shadow mode decides as the enforcing one, and both count each
/// refusal by the quota that refused.
#[test]
fn shadow_keyed_policy_counts_exactly_what_enforcement_refuses_by_quota() {
    let rec = Recorder::new();
    let (ce, cs) = (ManualClock::new(), ManualClock::new());
    // 50/s with a burst of 8, and 5/s with a burst of 12.
    let limits = Limits::new([
        quota(50, 8),
        Quota::new(10, Duration::from_secs(2), 12).unwrap(),
    ])
    .unwrap();
    let build = |name: &str, clock: &ManualClock, shadow: bool| {
        rec.build(|| {
            KeyedMultiLimiter::builder(limits.clone(), 3, clock.clone())
                .name(name)
                .shadow(shadow)
                .build()
                .unwrap()
        })
    };
    let enforce = build("policy-enforce", &ce, false);
    let shadow = build("policy-shadow", &cs, true);
    let mut by_quota = [0u64; 2];
    let enforced = drive(13, &ce, |key, cost| {
        let verdict = enforce.decide(&key, cost);
        if let Err(r) = verdict {
            by_quota[r.quota_index()] += 1;
        }
        (verdict.map_err(Denied::from), enforce.available(&key))
    });
    let shadowed = drive(13, &cs, |key, cost| {
        (shadow.try_acquire(&key, cost), shadow.available(&key))
    });
    for (i, (e, s)) in enforced.iter().zip(&shadowed).enumerate() {
        assert_eq!(s.0, Ok(()), "call {i}");
        assert_eq!(e.1, s.1, "tokens after call {i}");
    }
    let refused = enforced.iter().filter(|(v, _)| v.is_err()).count() as u64;
    assert!(by_quota[0] > 50 && by_quota[1] > 20, "{by_quota:?}");
    let s = rec.snapshot();
    let by = |limiter: &str, q: &str| {
        s.counter(&format!(
            "tollgate_policy_refusals_total{{limiter={limiter},quota={q}}}"
        ))
    };
    for name in ["policy-enforce", "policy-shadow"] {
        assert_eq!(
            (by(name, "0"), by(name, "1")),
            (by_quota[0], by_quota[1]),
            "{name}"
        );
    }
    let enforce_refused =
        s.decisions("policy-enforce", "refused") + s.decisions("policy-enforce", "exceeds_burst");
    assert_eq!(enforce_refused, refused);
    assert_eq!(s.decisions("policy-shadow", "shadow_refused"), refused);
    assert!(s.counter("tollgate_table_full_total{action=refused,limiter=policy-enforce}") > 0);
    assert_eq!(
        s.counter("tollgate_table_full_total{action=refused,limiter=policy-enforce}"),
        s.counter("tollgate_table_full_total{action=refused,limiter=policy-shadow}"),
    );
    assert_eq!(s.waits("policy-shadow"), s.waits("policy-enforce"));
    assert_eq!(
        s.gauge("tollgate_keys_capacity{limiter=policy-enforce}"),
        3.0
    );
    assert_eq!(
        s.gauge("tollgate_keys{limiter=policy-enforce}"),
        enforce.len() as f64
    );
    // The limiter's own counters: what callers got.
    let (ec, sc) = (enforce.counters(), shadow.counters());
    assert_eq!(ec.refused, refused);
    assert_eq!((sc.refused, sc.admitted), (0, 2_000));
}

#[test]
fn keyed_table_gauges_evictions_and_full_table() {
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let strict = rec.build(|| {
        KeyedLimiter::builder(quota(1, 1), 2, clock.clone())
            .name("strict")
            .build()
            .unwrap()
    });
    let lenient = rec.build(|| {
        KeyedLimiter::builder(quota(1, 1), 1, clock.clone())
            .name("lenient")
            .fail_open(true)
            .build()
            .unwrap()
    });
    assert_eq!(strict.try_acquire(&1, 1), Ok(()));
    assert_eq!(strict.try_acquire(&2, 1), Ok(()));
    // Full, and no bucket is full again before 1 s: new keys are refused.
    for key in 3..13 {
        assert!(strict.try_acquire(&key, 1).is_err());
    }
    assert_eq!(lenient.try_acquire(&1, 1), Ok(()));
    assert_eq!(lenient.try_acquire(&2, 1), Ok(())); // untracked
    assert_eq!(lenient.try_acquire(&3, 1), Ok(())); // untracked
    clock.advance(Duration::from_secs(1));
    assert_eq!(strict.sweep(), 2);
    assert_eq!(strict.try_acquire(&20, 1), Ok(()));

    let s = rec.snapshot();
    assert_eq!(s.gauge("tollgate_keys_capacity{limiter=strict}"), 2.0);
    assert_eq!(s.gauge("tollgate_keys_capacity{limiter=lenient}"), 1.0);
    assert_eq!(s.gauge("tollgate_keys{limiter=strict}"), 1.0);
    assert_eq!(s.gauge("tollgate_keys{limiter=lenient}"), 1.0);
    assert_eq!(s.counter("tollgate_evictions_total{limiter=strict}"), 2);
    assert_eq!(
        s.counter("tollgate_table_full_total{action=refused,limiter=strict}"),
        10
    );
    assert_eq!(
        s.counter("tollgate_table_full_total{action=admitted_untracked,limiter=lenient}"),
        2
    );
    assert_eq!(s.decisions("strict", "admitted"), 3);
    assert_eq!(s.decisions("strict", "refused"), 10);
    assert_eq!(s.decisions("lenient", "admitted"), 3);
    assert_eq!(s.waits("strict").len(), 10);
    // The counters the limiter keeps itself agree.
    let c = strict.counters();
    assert_eq!((c.refused_table_full, c.evicted), (10, 2));
}

#[test]
fn labels_carry_names_and_fixed_words_never_keys() {
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let per_client = rec.build(|| {
        KeyedLimiter::builder(quota(1, 1), 4, clock.clone())
            .name("per-client")
            .build()
            .unwrap()
    });
    for i in 0..100u32 {
        let _ = per_client.try_acquire(&format!("client-{i}"), 1);
    }
    let s = rec.snapshot();
    let words = [
        "per-client",
        "admitted",
        "refused",
        "exceeds_burst",
        "shadow_refused",
        "admitted_untracked",
    ];
    for value in s.label_values() {
        assert!(words.contains(&value.as_str()), "label value {value:?}");
    }
    // Four outcomes, one histogram, two gauges, evictions, two table-full actions.
    assert_eq!(s.0.len(), 10, "{:?}", s.0.keys());
}

#[test]
fn unnamed_or_named_before_the_recorder_records_nothing() {
    let rec = Recorder::new();
    let clock = ManualClock::new();
    // Named outside the recorder: its handles are the no-op ones, for good.
    let early = Metered::new("early", Bucket::with_clock(quota(1, 1), clock.clone()));
    let unnamed = rec.build(|| KeyedLimiter::with_clock(quota(1, 1), 4, clock.clone()));
    rec.build(|| {
        assert_eq!(early.try_acquire(1), Ok(()));
        assert!(early.try_acquire(1).is_err());
        assert_eq!(unnamed.try_acquire(&1, 1), Ok(()));
        assert!(unnamed.try_acquire(&1, 1).is_err());
    });
    assert!(rec.snapshot().0.is_empty());
}

#[test]
fn decision_metrics_record_by_hand() {
    let rec = Recorder::new();
    let m = rec.build(|| DecisionMetrics::new("custom"));
    m.count(Outcome::Admitted, None);
    m.count(Outcome::Refused, Some(Duration::from_secs(2)));
    m.count(Outcome::ShadowRefused, None);
    assert_eq!(
        m.decide(false, Err(Denied::ExceedsBurst)),
        Err(Denied::ExceedsBurst)
    );
    assert_eq!(
        m.decide(true, Err(Denied::RetryAfter(Duration::MAX))),
        Ok(())
    );
    let s = rec.snapshot();
    for (outcome, n) in [
        ("admitted", 1),
        ("refused", 1),
        ("exceeds_burst", 1),
        ("shadow_refused", 2),
    ] {
        assert_eq!(s.decisions("custom", outcome), n, "{outcome}");
    }
    // "Never" (`Duration::MAX`) is counted, with no sample.
    assert_eq!(s.waits("custom"), vec![2.0]);
    assert_eq!(
        Outcome::ALL.map(Outcome::as_str),
        ["admitted", "refused", "exceeds_burst", "shadow_refused"]
    );
}

#[test]
fn policy_metrics_count_refusals_by_quota() {
    let rec = Recorder::new();
    let m = rec.build(|| PolicyMetrics::new("tiers", 2));
    let wait = Err(Denied::RetryAfter(Duration::from_secs(1)));
    m.record(&Ok(()), 1); // an admission counts against no quota
    m.record(&wait, 0);
    m.record(&wait, 1);
    m.record(&Err(Denied::ExceedsBurst), 1);
    m.record(&wait, 9); // past the last quota: the last
    assert_eq!(m.decide(true, wait, 0), Ok(()));
    let s = rec.snapshot();
    let by = |q: &str| {
        s.counter(&format!(
            "tollgate_policy_refusals_total{{limiter=tiers,quota={q}}}"
        ))
    };
    assert_eq!((by("0"), by("1")), (2, 3));
    assert!(
        !s.0.keys().any(|k| k.contains("quota=2")),
        "{:?}",
        s.0.keys()
    );
    assert_eq!(s.decisions("tiers", "admitted"), 1);
    assert_eq!(s.decisions("tiers", "refused"), 3);
    assert_eq!(s.decisions("tiers", "exceeds_burst"), 1);
    assert_eq!(s.decisions("tiers", "shadow_refused"), 1);
    assert_eq!(s.waits("tiers").len(), 4);
    // Clamped to one to four quotas.
    let wide = rec.build(|| PolicyMetrics::new("wide", 9));
    wide.record(&wait, 3);
    let none = rec.build(|| PolicyMetrics::new("none", 0));
    none.record(&wait, 0);
    let s = rec.snapshot();
    assert_eq!(
        s.counter("tollgate_policy_refusals_total{limiter=wide,quota=3}"),
        1
    );
    assert_eq!(
        s.counter("tollgate_policy_refusals_total{limiter=none,quota=0}"),
        1
    );
}

/// `Metered` over any limiter, through the `Limiter` trait: a `MultiBucket`'s refusals are also
/// counted by the quota that refused, a keyed table's decisions by key, a `Smooth`'s too; a
/// single quota's limiter registers no per-quota series; shadow mode admits what it records.
#[test]
fn metered_wraps_every_limiter() {
    use tollgate::{Limiter, MultiBucket, Smooth};
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let minute = Quota::new(3, Duration::from_secs(60), 3).unwrap();
    let limits = Limits::new([quota(10, 10), minute]).unwrap();
    let policy =
        rec.build(|| Metered::new("policy", MultiBucket::with_clock(limits, clock.clone())));
    assert_eq!(policy.try_acquire(3), Ok(()));
    assert_eq!(policy.try_acquire(11), Err(Denied::ExceedsBurst)); // the minute's burst, 3
    assert_eq!(policy.decide(&(), 1).unwrap_err().quota_index(), 1);
    let keyed = rec.build(|| {
        Metered::new(
            "per-key",
            KeyedLimiter::with_clock(quota(1, 1), 10, clock.clone()),
        )
    });
    assert!(keyed.decide(&"a", 1).is_ok());
    assert!(keyed.decide(&"b", 1).is_ok());
    assert!(keyed.decide(&"a", 1).is_err());
    let smooth = rec.build(|| {
        Metered::new(
            "smooth",
            Smooth::bursty_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap(),
        )
        .shadow(true)
    });
    assert_eq!(smooth.try_acquire(1), Ok(()));
    assert_eq!(smooth.try_acquire(1), Ok(())); // refused, in shadow mode
    let s = rec.snapshot();
    let by = |q: &str| {
        s.counter(&format!(
            "tollgate_policy_refusals_total{{limiter=policy,quota={q}}}"
        ))
    };
    assert_eq!((by("0"), by("1")), (0, 2));
    assert_eq!(s.decisions("policy", "admitted"), 1);
    assert_eq!(s.decisions("policy", "exceeds_burst"), 1);
    assert_eq!(s.decisions("per-key", "admitted"), 2);
    assert_eq!(s.decisions("per-key", "refused"), 1);
    assert_eq!(s.decisions("smooth", "shadow_refused"), 1);
    assert!(!s.0.keys().any(|k| k.contains("limiter=per-key,quota")));
}

/// A refusal that never admits (`RetryAfter(Duration::MAX)`: a keyed table of no keys, a
/// request past the horizon) adds no sample to the wait histogram: its 1.8e19 s, in the
/// exporter's `f64` sum, would absorb every later wait (the ulp there is 4,096 s), so one such
/// refusal would freeze `_sum` for the life of the process. It is still counted as a refusal.
#[test]
fn a_never_wait_leaves_the_histogram_sum_counting() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let m = metrics::with_local_recorder(&recorder, || DecisionMetrics::new("never"));
    m.record(&Err(Denied::RetryAfter(Duration::MAX)));
    for _ in 0..1_000 {
        m.record(&Err(Denied::RetryAfter(Duration::from_millis(250))));
    }
    let text = handle.render();
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("{series} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        value("tollgate_retry_after_seconds_sum{limiter=\"never\"}"),
        250.0
    );
    assert_eq!(
        value("tollgate_retry_after_seconds_count{limiter=\"never\"}"),
        1_000.0
    );
    assert_eq!(
        value("tollgate_decisions_total{limiter=\"never\",outcome=\"refused\"}"),
        1_001.0
    );
}

/// Four threads on a frozen clock, seeded random costs (edge ones included: 0, the burst, one
/// above it): the counters agree with the verdicts the callers got, one count per decision
/// however many CAS retries it took, and the admitted costs are exactly what the bucket lost.
#[test]
fn counters_agree_with_the_verdicts_under_contention() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let rec = Recorder::new();
    let clock = ManualClock::new();
    let burst = 5_000;
    let api = rec.build(|| Metered::new("contended", Bucket::with_clock(quota(1, burst), clock)));
    let keyed = rec.build(|| {
        KeyedLimiter::builder(quota(1, 50), 8, ManualClock::new())
            .name("contended-keyed")
            .build()
            .unwrap()
    });
    let [admitted, admitted_cost, refused, too_big, keyed_ok, keyed_err] =
        [(); 6].map(|()| AtomicU64::new(0));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (api, keyed) = (&api, &keyed);
            let (admitted, admitted_cost, refused, too_big, keyed_ok, keyed_err) = (
                &admitted,
                &admitted_cost,
                &refused,
                &too_big,
                &keyed_ok,
                &keyed_err,
            );
            s.spawn(move || {
                let mut rng = Rng(0x5eed + t);
                for _ in 0..3_000 {
                    let cost = match rng.below(40) {
                        0 => 0,
                        1 => burst,
                        2 => burst + 1,
                        3 => u64::MAX,
                        _ => 1 + rng.below(5),
                    };
                    match api.try_acquire(cost) {
                        Ok(()) => {
                            admitted.fetch_add(1, Relaxed);
                            admitted_cost.fetch_add(cost, Relaxed);
                        }
                        Err(Denied::RetryAfter(_)) => _ = refused.fetch_add(1, Relaxed),
                        Err(_) => _ = too_big.fetch_add(1, Relaxed),
                    }
                    match keyed.try_acquire(&rng.below(4), cost.min(60)) {
                        Ok(()) => _ = keyed_ok.fetch_add(1, Relaxed),
                        Err(_) => _ = keyed_err.fetch_add(1, Relaxed),
                    }
                }
            });
        }
    });
    let s = rec.snapshot();
    let [admitted, admitted_cost, refused, too_big, keyed_ok, keyed_err] = [
        admitted,
        admitted_cost,
        refused,
        too_big,
        keyed_ok,
        keyed_err,
    ]
    .map(AtomicU64::into_inner);
    assert_eq!(admitted + refused + too_big, 12_000);
    assert!(refused > 1_000 && too_big > 100, "{refused} {too_big}");
    assert_eq!(s.decisions("contended", "admitted"), admitted);
    assert_eq!(s.decisions("contended", "refused"), refused);
    assert_eq!(s.decisions("contended", "exceeds_burst"), too_big);
    assert_eq!(s.waits("contended").len() as u64, refused);
    assert_eq!(admitted_cost + api.get_ref().available(), burst);
    assert_eq!(keyed_ok + keyed_err, 12_000);
    assert_eq!(s.decisions("contended-keyed", "admitted"), keyed_ok);
    let keyed_refused =
        s.decisions("contended-keyed", "refused") + s.decisions("contended-keyed", "exceeds_burst");
    assert_eq!(keyed_refused, keyed_err);
    let c = keyed.counters();
    assert_eq!((c.admitted, c.refused), (keyed_ok, keyed_err));
}

/// A named table restored from a save reports the keys it restored: `tollgate_keys` equals
/// `len()`, not 0 until the next insertion or eviction.
#[cfg(feature = "persist")]
#[test]
fn a_restored_table_reports_its_keys() {
    use std::time::SystemTime;
    let rec = Recorder::new();
    let saved = KeyedLimiter::with_clock(quota(1, 4), 16, ManualClock::new());
    let multi_saved =
        KeyedMultiLimiter::with_clock(Limits::from(quota(1, 4)), 16, ManualClock::new());
    for key in 0..5u32 {
        saved.try_acquire(&key, 2).unwrap();
        multi_saved.try_acquire(&key, 2).unwrap();
    }
    let (mut file, mut multi_file) = (Vec::new(), Vec::new());
    saved.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    multi_saved
        .save_at(&mut multi_file, SystemTime::UNIX_EPOCH)
        .unwrap();
    let restored = rec.build(|| {
        KeyedLimiter::<u32, _, _>::builder(quota(1, 4), 16, ManualClock::new())
            .name("restored")
            .restore_at(&file[..], SystemTime::UNIX_EPOCH)
            .unwrap()
    });
    let multi_restored = rec.build(|| {
        KeyedMultiLimiter::<u32, _>::builder(Limits::from(quota(1, 4)), 16, ManualClock::new())
            .name("multi-restored")
            .restore_at(&multi_file[..], SystemTime::UNIX_EPOCH)
            .unwrap()
    });
    assert_eq!((restored.len(), multi_restored.len()), (5, 5));
    let s = rec.snapshot();
    assert_eq!(s.gauge("tollgate_keys{limiter=restored}"), 5.0);
    assert_eq!(s.gauge("tollgate_keys{limiter=multi-restored}"), 5.0);
}

/// In shadow mode a new key that meets a full table is admitted untracked, and the limiters'
/// own counters say so: `admitted_untracked`, within `admitted`, not `refused_table_full`,
/// which `refused` includes. Metrics record what enforcement would have done.
#[test]
fn shadow_counters_count_a_full_table_as_admitted_untracked() {
    let rec = Recorder::new();
    let keyed = rec.build(|| {
        KeyedLimiter::builder(quota(1, 1), 1, ManualClock::new())
            .name("shadow-full")
            .shadow(true)
            .build()
            .unwrap()
    });
    let multi = rec.build(|| {
        KeyedMultiLimiter::builder(Limits::from(quota(1, 1)), 1, ManualClock::new())
            .name("shadow-full-multi")
            .shadow(true)
            .build()
            .unwrap()
    });
    for key in [1u32, 1, 2] {
        assert_eq!(keyed.try_acquire(&key, 1), Ok(()));
        assert_eq!(multi.try_acquire(&key, 1), Ok(()));
    }
    for c in [keyed.counters(), multi.counters()] {
        assert_eq!(
            (
                c.admitted,
                c.refused,
                c.admitted_untracked,
                c.refused_table_full
            ),
            (3, 0, 1, 0),
            "{c:?}"
        );
    }
    let s = rec.snapshot();
    for name in ["shadow-full", "shadow-full-multi"] {
        assert_eq!(s.decisions(name, "shadow_refused"), 2, "{name}");
        assert_eq!(
            s.counter(&format!(
                "tollgate_table_full_total{{action=refused,limiter={name}}}"
            )),
            1,
            "{name}"
        );
    }
}
