//! loom models: `set_quota` racing `try_acquire` while another thread moves the clock, and a
//! reader (`available`, a refusal) racing two reconfigurations.
//!
//! A concurrent caller must see the old quota with the old state or the new quota with the new
//! state, never a mix: every interleaving must end in an outcome that a serial order explains —
//! the decision under the old quota and then the switch, or the switch and then the decision
//! under the new quota — each taken at the clock reading its thread made.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --test set_quota`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{gcra, Bucket, Denied, Limiter, ManualClock, Quota, Snapshot};

const STEP: u64 = 100_000_000; // 100 ms

fn old_quota() -> Quota {
    Quota::per_second(10).unwrap().with_burst(2).unwrap()
}

/// A different rate, burst and unit (scale), so a mix of old and new could not go unnoticed.
fn new_quota() -> Quota {
    Quota::new(3, Duration::from_secs(1), 3).unwrap()
}

/// B's two verdicts, the quota in force at the end, and a probe of the final state.
type Outcome = (
    Result<(), Denied>,
    Result<(), Denied>,
    Quota,
    Result<(), Denied>,
);

fn verdict(r: Result<Option<u64>, Denied>) -> Result<(), Denied> {
    r.map(|_| ())
}

/// Serial orders: B takes 2 then 1; the switch comes before, between or after; each decision at
/// clock 0 or `STEP` (B's second no earlier than its first).
fn serial_outcomes() -> Vec<Outcome> {
    let (q1, q2) = (old_quota(), new_quota());
    let mut out = Vec::new();
    for switch_pos in 0..3 {
        for t_switch in [0, STEP] {
            for t_b1 in [0, STEP] {
                for t_b2 in [t_b1, STEP] {
                    let mut s = gcra::FULL;
                    let mut q = q1;
                    let mut v = Vec::new();
                    let b_ops = [(2, t_b1), (1, t_b2)];
                    for step in 0..3 {
                        if step == switch_pos {
                            s = gcra::rescale(s, t_switch, &q1, &q2);
                            q = q2;
                        }
                        if let Some(&(cost, t)) = b_ops.get(step) {
                            let r = gcra::try_acquire(s, t, &q, cost);
                            if let Ok(Some(n)) = r {
                                s = n;
                            }
                            v.push(verdict(r));
                        }
                    }
                    let probe = verdict(gcra::try_acquire(s, STEP, &q, 2));
                    out.push((v[0], v[1], q, probe));
                }
            }
        }
    }
    out.sort_by_key(|o| format!("{o:?}"));
    out.dedup();
    out
}

#[test]
fn set_quota_races_try_acquire() {
    let allowed = serial_outcomes();
    loom::model(move || {
        let clock = ManualClock::new();
        let bucket = Arc::new(Bucket::with_clock(old_quota(), clock.clone()));

        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.set_quota(new_quota()))
        };
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || (bucket.try_acquire(2), bucket.try_acquire(1)))
        };
        let c = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(STEP)))
        };
        a.join().unwrap();
        let (b1, b2) = b.join().unwrap();
        c.join().unwrap();

        let q = bucket.quota();
        assert_eq!(q, new_quota());
        let probe = bucket.try_acquire(2);
        let outcome = (b1, b2, q, probe);
        assert!(
            allowed.contains(&outcome),
            "{outcome:?} is not explained by any serial order; allowed: {allowed:?}"
        );
    });
}

// ---- a reader racing two reconfigurations ----

/// 1 token/s, burst 1000: a token is 10^9 units.
fn slow() -> Quota {
    Quota::new(1, Duration::from_secs(1), 1000).unwrap()
}

/// 10 tokens/s, burst 1000: the balance carries over unchanged.
fn middle() -> Quota {
    Quota::new(10, Duration::from_secs(1), 1000).unwrap()
}

/// 1000 tokens/s, burst 10: `slow`'s state holding 500 tokens, read under it, is ~500 s of debt.
fn fast() -> Quota {
    Quota::new(1000, Duration::from_secs(1), 10).unwrap()
}

/// A bucket at 1 s on a frozen clock, under `slow` with 500 tokens, while thread A reconfigures
/// twice (`slow → middle → fast`) and thread B reads. B's results must come from one quota with
/// its own state: before the switches 500 tokens, after them 10 (capped at `fast`'s burst).
fn reader_racing_two_reconfigurations<R: Send + 'static>(
    read: fn(&Bucket<ManualClock>) -> R,
    check: fn(R, &Bucket<ManualClock>),
) {
    loom::model(move || {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1));
        let bucket = Arc::new(Bucket::with_clock(slow(), clock));
        bucket.try_acquire(500).unwrap();
        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                bucket.set_quota(middle());
                bucket.set_quota(fast());
            })
        };
        // The reader on a spawned thread too: loom explores no preemption of the main thread
        // before its first spawned thread has run.
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || read(&bucket))
        };
        a.join().unwrap();
        let r = b.join().unwrap();
        assert_eq!(bucket.quota(), fast());
        check(r, &bucket);
    });
}

#[test]
fn available_racing_two_reconfigurations() {
    reader_racing_two_reconfigurations(
        |b| b.available(),
        |got, b| {
            assert!(got == 500 || got == 10, "available() = {got}: a mix");
            assert_eq!(b.available(), 10);
        },
    );
}

#[test]
fn refusal_racing_two_reconfigurations() {
    // 10 tokens are there in every serial order; a mix of `slow`'s state with `fast` refuses.
    reader_racing_two_reconfigurations(
        |b| b.try_acquire(10),
        |got, b| {
            assert_eq!(got, Ok(()));
            // Taken before the switches: 490 left, capped at 10; after them: 0 left.
            let left = b.available();
            assert!(left == 10 || left == 0, "{left} left");
        },
    );
}

/// What `decide_snapshots_limits(cost)` reports in each serial era of
/// [`reader_racing_two_reconfigurations`] (`slow`, `middle`, `fast`): the verdict, the
/// snapshot and the quota it was taken under, all three from that era.
fn era_reports(cost: u64) -> Vec<(Result<(), Denied>, Snapshot, Quota)> {
    const NOW: u64 = 1_000_000_000;
    let mut state = gcra::try_acquire(gcra::FULL, NOW, &slow(), 500)
        .unwrap()
        .unwrap();
    let mut quota = slow();
    let mut out = Vec::new();
    for next in [None, Some(middle()), Some(fast())] {
        if let Some(next) = next {
            state = gcra::rescale(state, NOW, &quota, &next);
            quota = next;
        }
        let decided = gcra::try_acquire(state, NOW, &quota, cost);
        let after = match decided {
            Ok(Some(next)) => next,
            _ => state,
        };
        out.push((verdict(decided), gcra::snapshot(after, NOW, &quota), quota));
    }
    out
}

/// The snapshots a decision reports come with the quota they were taken under, never another
/// era's (`Limiter::decide_snapshots_limits`, what tollgate-tower's headers are written from).
#[test]
fn decide_snapshots_limits_racing_two_reconfigurations() {
    reader_racing_two_reconfigurations(
        |b| {
            let (verdict, snaps, limits) = b.decide_snapshots_limits(&(), 10);
            let quota = limits.unwrap().quotas()[0];
            (verdict.map_err(Denied::from), snaps.tightest().1, quota)
        },
        |got, _| {
            let allowed = era_reports(10);
            assert!(
                allowed.contains(&got),
                "{got:?}: not one era's; {allowed:?}"
            );
        },
    );
}

/// The same on refusal: 600 tokens wait 100 s under `slow`, 10 s under `middle`, and exceed
/// `fast`'s burst.
#[test]
fn decide_or_snapshots_limits_racing_two_reconfigurations() {
    reader_racing_two_reconfigurations(
        |b| {
            let (refusal, snaps, limits) = b.decide_or_snapshots_limits(&(), 600).unwrap_err();
            let quota = limits.unwrap().quotas()[0];
            (Err(refusal.denied()), snaps.tightest().1, quota)
        },
        |got, _| {
            let allowed = era_reports(600);
            assert!(
                allowed.contains(&got),
                "{got:?}: not one era's; {allowed:?}"
            );
        },
    );
}

// ---- a decision made again on the word its CAS lost to, racing two reconfigurations ----

/// A bucket at 1 s on a frozen clock, full under `fast` (10 tokens), while thread A reconfigures
/// twice (`fast → middle → slow`, the balance carried over: 10 tokens in every era) and thread
/// B takes 5, which every serial order admits. B's first CAS can lose to A's second switch,
/// which brings the epoch back and rewrites the slot B read: B then decides again on the word
/// that CAS returned, which is `slow`'s. Decided with the slot read before that word (`fast`'s
/// quota) the mix refuses (`slow`'s state read in `fast`'s units is ~990 s of debt): the retry
/// loop must read the slot again and find its version changed. A form of the loop that decided
/// on the words read before, unchecked, failed here.
#[test]
fn a_decision_made_again_on_the_word_its_cas_lost_to() {
    loom::model(|| {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1));
        let bucket = Arc::new(Bucket::with_clock(fast(), clock));
        let a = {
            let bucket = bucket.clone();
            thread::spawn(move || {
                bucket.set_quota(middle());
                bucket.set_quota(slow());
            })
        };
        let b = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.try_acquire(5))
        };
        a.join().unwrap();
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(bucket.quota(), slow());
        // Taken in any era: 5 of the 10 left.
        assert_eq!(bucket.available(), 5);
    });
}
