//! loom models of `MultiBucket`: decisions racing on the two-quota word (one CAS) and on the
//! sequence-locked words of three and four quotas, one of them with a stale clock reading, and
//! a reader racing a writer (it must never see the quotas of two different decisions).
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test multi`
#![cfg(tollgate_loom)]

use tollgate::Limiter;
use tollgate_testkit::window;

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{Denied, Limits, ManualClock, MultiBucket, Quota};
use tollgate_loom_tests::{at, PerThread};
use window::WindowChecker;

const MS: u64 = 1_000_000;

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

/// Two decisions race for the last token of the tighter quota (frozen clock): exactly one is
/// admitted, and it debits both quotas once; the refused one writes nothing.
#[test]
fn two_quota_decisions_race_in_one_cas() {
    loom::model(|| {
        let limits = Limits::new([q(1, 1000, 1), q(1, 1000, 3)]).unwrap();
        let policy = Arc::new(MultiBucket::with_clock(limits, ManualClock::new()));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let p = policy.clone();
                thread::spawn(move || p.try_acquire(1).is_ok())
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|&ok| ok)
            .count();
        assert_eq!(admitted, 1);
        let snaps = policy.decide_snapshots(&(), 0).1;
        let left: Vec<u64> = snaps.as_slice().iter().map(|s| s.remaining()).collect();
        assert_eq!(left, [0, 2]);
    });
}

/// Two admissions race on the two-quota word; once both have returned, a refusal is decided
/// on the states both left: the request for 2 is refused for 2 s (quota 0 holds 0 of its 2),
/// never 1 s (the states after one admission), and nothing else was debited. This is also the
/// model of the word's mirror: the first admission's mirror stores can land after the second's,
/// leaving the mirror one admission behind once both have returned, so the refusal must be
/// confirmed by a load of the word (without that load this model fails with 1 s).
#[test]
fn a_refusal_after_two_admissions_sees_both() {
    loom::model(|| {
        let limits = Limits::new([q(1, 1000, 2), q(1, 1000, 3)]).unwrap();
        let policy = Arc::new(MultiBucket::with_clock(limits, ManualClock::new()));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let p = policy.clone();
                thread::spawn(move || p.try_acquire(1))
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), Ok(()));
        }
        assert_eq!(
            policy.try_acquire(2),
            Err(Denied::RetryAfter(Duration::from_secs(2)))
        );
        let snaps = policy.decide_snapshots(&(), 0).1;
        let left: Vec<u64> = snaps.as_slice().iter().map(|s| s.remaining()).collect();
        assert_eq!(left, [0, 1]);
    });
}

/// One decision reads the clock at 10 ms, the other holds a stale reading of 0 (taken before
/// the fresh one acted, or a clock that stepped back). The first quota (one token per 10 ms)
/// was drained at 0: in every order the stale decision is refused and the fresh one admitted,
/// and each quota's window bound holds at the readings the decisions used.
#[test]
fn a_stale_reading_never_admits_what_the_fresh_one_took() {
    loom::model(|| {
        let first = q(1, 10, 1);
        let second = q(1, 1, 2);
        let limits = Limits::new([first, second]).unwrap();
        let policy = Arc::new(MultiBucket::with_clock(limits, PerThread));
        let log = Arc::new(WindowChecker::new());
        at(0);
        policy.try_acquire(1).unwrap();
        log.admit(0, 1);
        let spawn = |reading| decide_at(&policy, &log, reading);
        let fresh = spawn(10 * MS);
        let stale = spawn(0);
        let (fresh, stale) = (fresh.join().unwrap(), stale.join().unwrap());
        assert!(fresh && !stale, "fresh {fresh}, stale {stale}");
        log.check(&first).unwrap();
        log.check(&second).unwrap();
    });
}

/// Four quotas under the sequence lock: an admission races a thread that reads every quota's
/// snapshot. The reader sees the states before or after the admission, never a mix (bursts
/// 2, 3, 4, 5 after one earlier admission: quota `i` holds `1 + i`, then `i`).
#[test]
fn four_quota_writer_races_a_reader_under_the_sequence_lock() {
    loom::model(|| {
        let limits = Limits::new([q(1, 1000, 2), q(1, 1000, 3), q(1, 1000, 4), q(1, 1000, 5)]);
        let policy = Arc::new(MultiBucket::with_clock(limits.unwrap(), ManualClock::new()));
        policy.try_acquire(1).unwrap();
        let p = policy.clone();
        let reader = thread::spawn(move || {
            let snaps = p.decide_snapshots(&(), 0).1;
            snaps
                .as_slice()
                .iter()
                .map(|s| s.remaining())
                .collect::<Vec<u64>>()
        });
        let p = policy.clone();
        let writer = thread::spawn(move || p.try_acquire(1).is_ok());
        assert!(writer.join().unwrap());
        let seen = reader.join().unwrap();
        let k = 1 - seen[0];
        let expected: Vec<u64> = (0..4).map(|i| 1 + i - k).collect();
        assert_eq!(seen, expected);
        assert_eq!(policy.available(), 0);
    });
}

/// Three quotas, a stale and a fresh decision racing on the sequence lock, as the two-quota
/// model above: the stale one is refused in every order, the fresh one admitted, and every
/// quota keeps its bound.
#[test]
fn three_quotas_with_a_stale_reading_under_the_sequence_lock() {
    loom::model(|| {
        let quotas = [q(1, 10, 1), q(1, 1, 2), q(3, 10, 3)];
        let policy = Arc::new(MultiBucket::with_clock(
            Limits::new(quotas).unwrap(),
            PerThread,
        ));
        let log = Arc::new(WindowChecker::new());
        at(0);
        policy.try_acquire(1).unwrap();
        log.admit(0, 1);
        let spawn = |reading| decide_at(&policy, &log, reading);
        let stale = spawn(0);
        let fresh = spawn(10 * MS);
        assert!(fresh.join().unwrap() && !stale.join().unwrap());
        for q in &quotas {
            log.check(q).unwrap();
        }
    });
}

/// A model thread that decides one token at `reading` and logs it if admitted.
fn decide_at(
    policy: &Arc<MultiBucket<PerThread>>,
    log: &Arc<WindowChecker>,
    reading: u64,
) -> thread::JoinHandle<bool> {
    let (p, log) = (policy.clone(), log.clone());
    thread::spawn(move || {
        at(reading);
        let ok = p.try_acquire(1).is_ok();
        if ok {
            log.admit(reading, 1);
        }
        ok
    })
}
