//! KeyedLimiter: the flood bound, differential tests against one exact `Bucket` per key, and
//! threads on hot keys. Deterministic: ManualClock and fixed seeds. The checks `keyed_multi.rs`
//! makes of a `Limits` policy too are written once in `common/keyed_policies.rs`.
#![cfg(feature = "keyed")]

#[path = "common/keyed_policies.rs"]
mod keyed_policies;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tollgate::{Bucket, Clock, Denied, KeyedLimiter, ManualClock, Quota, StdClock};
use tollgate_testkit::decide::Snapshotting;

use rng::Rng;
use stall::{arm, Gate, Stall, StallClock};
use tollgate_testkit::rng;
use tollgate_testkit::stall;
use tollgate_testkit::window;
use window::WindowChecker;

const MS: u64 = 1_000_000;

#[test]
fn flood_of_unique_keys_stays_bounded() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 1_000, clock.clone());
    let refill = quota.refill_time(quota.burst());
    let mut admitted = 0;
    for key in 0..100_000u64 {
        match limiter.try_acquire(&key, 1) {
            Ok(()) => admitted += 1,
            Err(Denied::RetryAfter(d)) => {
                assert!(d > Duration::ZERO && d <= refill, "unbounded wait {d:?}");
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(limiter.len() <= 1_000);
    }
    assert_eq!(admitted, 1_000);
    assert_eq!(limiter.len(), 1_000);
    let c = limiter.counters();
    assert_eq!(
        (c.admitted, c.refused, c.refused_table_full),
        (1_000, 99_000, 99_000)
    );
    assert_eq!(c.evicted, 0);

    // One refill interval later every tracked bucket is full again: new keys get in.
    clock.advance(refill);
    let mut admitted = 0;
    for key in 100_000..200_000u64 {
        if limiter.try_acquire(&key, 1).is_ok() {
            admitted += 1;
        }
        assert!(limiter.len() <= 1_000);
    }
    assert_eq!(admitted, 1_000);
    assert_eq!(limiter.counters().evicted, 1_000);
    // The evicted keys were full, so they are admitted as if new once there is room again.
    clock.advance(refill);
    assert_eq!(limiter.try_acquire(&0, 1), Ok(()));
}

/// Threads that come and go, some overlapping: every decision is counted exactly once, on
/// whichever counter shard the thread's (possibly reused) slot selects.
#[test]
fn counters_stay_exact_while_threads_come_and_go() {
    let limiter =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), 1_000, ManualClock::new());
    for wave in 0..20u64 {
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let limiter = &limiter;
                s.spawn(move || {
                    for i in 0..50u64 {
                        // Keys 0..100: each admitted once (burst 1), then refused.
                        let _ = limiter.try_acquire(&((wave * 3 + t + i) % 100), 1);
                    }
                });
            }
        });
    }
    let c = limiter.counters();
    assert_eq!((c.admitted, c.refused), (100, 20 * 3 * 50 - 100));
}

/// A new key refused because the table is full is told to come back exactly when the first
/// tracked bucket is full (refused 1 ms before, admitted then); a fail-open table admits the
/// new key untracked instead, still refuses a cost above the burst and the tracked key's spent
/// tokens, and counts the untracked admissions apart.
#[test]
fn table_full_wait_is_exact_and_fail_open_counts() {
    let clock = ManualClock::new();
    let quota = Quota::new(1, Duration::from_secs(2), 4).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 2, clock.clone());
    assert_eq!(limiter.try_acquire(&"a", 1), Ok(())); // full again at 2 s
    clock.advance(Duration::from_millis(500));
    assert_eq!(limiter.try_acquire(&"b", 4), Ok(())); // full again at 8.5 s
    assert_eq!(
        limiter.try_acquire(&"c", 1),
        Err(Denied::RetryAfter(Duration::from_millis(1_500)))
    );
    clock.set(Duration::from_millis(1_999));
    assert!(limiter.try_acquire(&"c", 1).is_err());
    clock.set(Duration::from_millis(2_000));
    assert_eq!(limiter.try_acquire(&"c", 1), Ok(()));
    assert_eq!(limiter.len(), 2);

    // Fail-open: key 2 is admitted untracked while key 1 fills the table.
    let open = keyed_policies::fail_open_admits_untracked_when_full(quota, 4, clock.clone());
    assert_eq!(open.try_acquire(&2u8, 5), Err(Denied::ExceedsBurst));
    assert!(open.try_acquire(&1u8, 1).is_err());
    let c = open.counters();
    assert_eq!((c.admitted, c.admitted_untracked, c.refused), (4, 3, 2));
    assert_eq!(open.len(), 1);
}

/// A table of no keys refuses every request with "never" (a finite wait would make
/// `until_key_ready` poll for ever).
#[test]
fn zero_capacity_refuses_without_panicking() {
    let quota = Quota::per_second(3).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 0, ManualClock::new());
    assert_eq!(
        limiter.try_acquire(&1u32, 1),
        Err(Denied::RetryAfter(Duration::MAX))
    );
    let mut ready = std::pin::pin!(limiter.until_key_ready(&1u32, 1));
    let waker = std::task::Waker::noop();
    assert_eq!(
        std::future::Future::poll(ready.as_mut(), &mut std::task::Context::from_waker(waker)),
        std::task::Poll::Ready(Err(Denied::RetryAfter(Duration::MAX)))
    );
    assert_eq!(limiter.try_acquire(&1u32, 0), Ok(()));
    assert!(limiter.is_empty());
}

#[test]
fn borrowed_lookups_and_premium_quotas() {
    let clock = ManualClock::new();
    let basic = Quota::per_second(2).unwrap();
    let premium = Quota::per_second(100).unwrap();
    let limiter = KeyedLimiter::builder(basic, 10, clock.clone())
        .override_quota("gold".to_string(), premium)
        .build()
        .unwrap();
    assert_eq!(limiter.try_acquire_by("gold", 100), Ok(()));
    assert_eq!(limiter.try_acquire_by("free", 3), Err(Denied::ExceedsBurst));
    assert_eq!(limiter.try_acquire_by("free", 2), Ok(()));
    assert!(limiter.try_acquire(&"free".to_string(), 1).is_err());
    assert_eq!(limiter.available("gold"), 0);
    clock.advance(Duration::from_millis(10));
    assert_eq!(limiter.available("gold"), 1);
    assert_eq!(limiter.available("free"), 0);
    assert_eq!(limiter.len(), 2);
    // Cost 0 and ExceedsBurst never track a key.
    assert_eq!(limiter.try_acquire_by("ghost", 0), Ok(()));
    assert_eq!(limiter.len(), 2);
}

/// Random traffic to fewer keys than the table holds: every verdict equals one exact bucket per
/// key, whatever the clock does (it also steps backwards).
#[test]
fn differential_against_one_bucket_per_key() {
    for seed in [1u64, 2, 3, 0xDEAD_BEEF] {
        let mut rng = Rng(seed);
        let clock = ManualClock::new();
        let quotas = [
            Quota::new(3, Duration::from_millis(7), 5).unwrap(),
            Quota::new(1_000, Duration::from_secs(1), 1).unwrap(),
            Quota::new(7, Duration::from_secs(3), 13).unwrap(),
        ];
        let default = Quota::new(2, Duration::from_millis(3), 4).unwrap();
        let mut builder = KeyedLimiter::builder(default, 64, clock.clone());
        for (i, q) in quotas.iter().enumerate() {
            builder = builder.override_quota(i as u64, *q);
        }
        let limiter = builder.build().unwrap();
        let mut models: HashMap<u64, Bucket<ManualClock>> = HashMap::new();
        for _ in 0..20_000 {
            match rng.below(10) {
                0 => clock.advance(Duration::from_nanos(rng.below(5_000_000))),
                1 if rng.below(20) == 0 => {
                    let back = rng.below(2_000_000).min(clock.now());
                    clock.set(Duration::from_nanos(clock.now() - back));
                }
                _ => {}
            }
            let key = rng.below(48);
            let quota = limiter.quota_for(&key);
            let cost = rng.below(quota.burst() + 2);
            let model = models
                .entry(key)
                .or_insert_with(|| Bucket::with_clock(quota, clock.clone()));
            assert_eq!(
                limiter.try_acquire(&key, cost),
                model.try_acquire(cost),
                "seed {seed} key {key}"
            );
            assert_eq!(limiter.available(&key), model.available());
            assert!(limiter.len() <= 48);
        }
        assert_eq!(limiter.counters().evicted, 0);
    }
}

/// More active keys than the table holds: evictions happen all the time, yet a request that gets
/// a slot is decided exactly as by one bucket per key, and a "table full" refusal only ever hits
/// a key whose exact bucket is full (so forgetting it changed nothing).
#[test]
fn differential_under_eviction_pressure() {
    for seed in [7u64, 8, 9] {
        let mut rng = Rng(seed);
        let clock = ManualClock::new();
        let quota = Quota::new(5, Duration::from_millis(10), 3).unwrap();
        let limiter = KeyedLimiter::with_clock(quota, 16, clock.clone());
        let mut models: HashMap<u64, Bucket<ManualClock>> = HashMap::new();
        let mut table_full = 0;
        for _ in 0..30_000 {
            if rng.below(4) == 0 {
                clock.advance(Duration::from_nanos(rng.below(3_000_000)));
            }
            let key = rng.below(40);
            let cost = rng.below(4);
            let model = models
                .entry(key)
                .or_insert_with(|| Bucket::with_clock(quota, clock.clone()));
            let before = limiter.counters().refused_table_full;
            let got = limiter.try_acquire(&key, cost);
            if limiter.counters().refused_table_full > before {
                table_full += 1;
                assert_eq!(
                    model.available(),
                    quota.burst(),
                    "an untracked key must be full"
                );
                assert!(
                    matches!(got, Err(Denied::RetryAfter(d)) if d > Duration::ZERO
                    && d <= quota.refill_time(quota.burst()))
                );
            } else {
                assert_eq!(got, model.try_acquire(cost), "seed {seed} key {key}");
            }
            assert!(limiter.len() <= 16);
        }
        let c = limiter.counters();
        assert!(
            table_full > 0 && c.evicted > 0,
            "the test must exercise both paths"
        );
    }
}

#[test]
fn hot_keys_on_a_frozen_clock_admit_exactly_their_burst() {
    let quota = Quota::per_second(500).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 64, ManualClock::new());
    let per_key = Mutex::new(HashMap::<u64, u64>::new());
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (limiter, per_key) = (&limiter, &per_key);
            s.spawn(move || {
                let mut mine = HashMap::<u64, u64>::new();
                let mut open: Vec<u64> = (0..16).collect();
                let mut i = t as usize;
                while !open.is_empty() {
                    i = (i + 1) % open.len();
                    let key = open[i];
                    match limiter.try_acquire(&key, 1) {
                        Ok(()) => *mine.entry(key).or_default() += 1,
                        Err(_) => {
                            open.swap_remove(i);
                        }
                    }
                }
                let mut all = per_key.lock().unwrap();
                for (k, n) in mine {
                    *all.entry(k).or_default() += n;
                }
            });
        }
    });
    let all = per_key.into_inner().unwrap();
    assert_eq!(all.len(), 16);
    assert!(all.values().all(|&n| n == 500), "{all:?}");
    assert_eq!(limiter.len(), 16);
}

/// The counters are exact once the calls have returned, whichever counter shard each thread
/// counts on: more threads than there are owned shards (the next power of two of 4 × cores, at
/// most 1,024), so some threads count on owned shards and the later ones on shared ones.
#[test]
fn counters_are_exact_across_owned_and_shared_shards() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let owned = (cores * 4).next_power_of_two().min(1024);
    let threads = owned + 24;
    let quota = Quota::per_second(100).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 64, ManualClock::new_frozen());
    let admitted = AtomicU64::new(0);
    // In waves, so that the test never holds hundreds of threads at once.
    for wave in 0..threads.div_ceil(32) {
        std::thread::scope(|s| {
            for t in wave * 32..((wave + 1) * 32).min(threads) {
                let (limiter, admitted) = (&limiter, &admitted);
                s.spawn(move || {
                    for i in 0..200u64 {
                        if limiter.try_acquire(&((t as u64 + i) % 16), 1).is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
    }
    let c = limiter.counters();
    let calls = threads as u64 * 200;
    assert_eq!(c.admitted, admitted.into_inner());
    assert_eq!(
        c.admitted,
        16 * 100,
        "each of the 16 keys admits its burst, frozen clock"
    );
    assert_eq!(c.admitted + c.refused, calls);
}

/// Many threads, new keys, a moving clock and a small table: the bound holds throughout and no key
/// is ever admitted beyond burst + rate·elapsed.
#[test]
fn concurrent_churn_respects_every_keys_bound() {
    let clock = ManualClock::new();
    let quota = Quota::new(2, Duration::from_millis(1), 3).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 32, clock.clone());
    let per_key = Mutex::new(HashMap::<u64, u64>::new());
    let rounds = 200u64;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (limiter, per_key) = (&limiter, &per_key);
            s.spawn(move || {
                let mut rng = Rng(t + 11);
                let mut mine = HashMap::<u64, u64>::new();
                for _ in 0..20_000 {
                    let key = rng.below(100);
                    if limiter.try_acquire(&key, 1).is_ok() {
                        *mine.entry(key).or_default() += 1;
                    }
                    assert!(limiter.len() <= 32);
                }
                let mut all = per_key.lock().unwrap();
                for (k, n) in mine {
                    *all.entry(k).or_default() += n;
                }
            });
        }
        for _ in 0..rounds {
            clock.advance(Duration::from_micros(50));
            std::thread::yield_now();
        }
    });
    let elapsed_ms = clock.now() / 1_000_000;
    let bound = quota.burst() + 2 * (elapsed_ms + 1);
    let all = per_key.into_inner().unwrap();
    assert!(all.values().all(|&n| n <= bound), "bound {bound}: {all:?}");
    assert!(limiter.len() <= 32);
}

/// Hot keys keep exactly their burst while other threads insert thousands of new keys, so the
/// table's region doubles eight times (64 to 16,384 slots), each doubling a migration whose
/// steps move entries under the admissions and the lookups' own helping steps (frozen clock:
/// no refill).
#[test]
fn hot_keys_stay_exact_while_the_table_grows() {
    // 4,000 attempts per hot key against a burst of 3,900: the keys run dry only at the end,
    // so a lost update during a move would show as an admission beyond the burst. (Threads
    // on a busy machine rarely overlap a move; the loom models `growth_races_an_admission`
    // and `an_admission_racing_a_migration_step_is_kept` explore that race exhaustively.)
    let quota = Quota::per_second(3_900).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 8192, ManualClock::new());
    let admitted = Mutex::new(HashMap::<u64, u64>::new());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                let mut mine = HashMap::<u64, u64>::new();
                for i in 0..2_000u64 {
                    for key in 0..8u64 {
                        if limiter.try_acquire(&key, 1).is_ok() {
                            *mine.entry(key).or_default() += 1;
                        }
                    }
                    // New keys on the same threads too, so inserts race the admissions.
                    assert_eq!(
                        limiter.try_acquire(&(1_000_000 + t * 10_000 + i), 1),
                        Ok(())
                    );
                }
                let mut all = admitted.lock().unwrap();
                for (k, n) in mine {
                    *all.entry(k).or_default() += n;
                }
            });
        }
        for t in 0..2u64 {
            let limiter = &limiter;
            s.spawn(move || {
                for i in 0..2_000u64 {
                    assert_eq!(
                        limiter.try_acquire(&(2_000_000 + t * 10_000 + i), 1),
                        Ok(())
                    );
                }
            });
        }
    });
    let all = admitted.into_inner().unwrap();
    assert_eq!(all.len(), 8);
    assert!(all.values().all(|&n| n == 3_900), "{all:?}");
    assert_eq!(limiter.len(), 8 + 8_000);
    for key in 0..8u64 {
        assert_eq!(limiter.available(&key), 0);
    }
    assert_eq!(limiter.counters().evicted, 0);
}

// ---- an eviction at a later reading must not hand a fresh burst to a
// decision at an earlier reading. ----

/// The reproduction, on one thread: keys 1 and 2 take their burst at 0, key 3 evicts them
/// at 1 s (both full then), and a decision for key 1 at the stale reading 0.5 s re-inserts it.
/// A fresh full bucket would admit 10 more (20 in 0.5 s, bound 15); key 1's own bucket holds 5.
#[test]
fn eviction_at_a_later_reading_gives_no_fresh_burst_to_a_stale_one() {
    let clock = StallClock::new(ManualClock::new());
    let quota = Quota::per_second(10).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 2, clock.clone());
    let key1 = WindowChecker::new();
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    key1.admit(0, 10);
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(()));
    clock.inner().set(Duration::from_secs(1));
    assert_eq!(limiter.try_acquire(&3u8, 1), Ok(()));
    assert_eq!(limiter.counters().evicted, 2);
    // The stale reading sees key 1 as its own bucket would at 0.5 s: 5 tokens, not 10.
    arm([Stall::Reading(500 * MS)]);
    assert_eq!(
        limiter.try_acquire(&1u8, 10),
        Err(Denied::RetryAfter(Duration::from_millis(500)))
    );
    arm([Stall::Reading(500 * MS)]);
    assert_eq!(limiter.available(&1u8), 5);
    arm([Stall::Reading(500 * MS)]);
    assert_eq!(limiter.try_acquire(&1u8, 5), Ok(()));
    key1.admit(500 * MS, 5);
    arm([Stall::Reading(500 * MS)]);
    assert!(limiter.try_acquire(&1u8, 1).is_err());
    assert_eq!(key1.check(&quota), Ok(()));
    // At or after the latest eviction reading a re-inserted key is exactly full (a monotone
    // clock sees no change): at 1.5 s key 1 is full again and evicted for key 2.
    clock.inner().set(Duration::from_millis(1_500));
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(()));
    assert_eq!(
        limiter.counters().evicted,
        4,
        "keys 1 and 3 are full at 1.5 s"
    );
}

/// The same race with real threads: the decision for key 1 takes its reading (0.5 s), stalls,
/// the eviction runs at 1 s, then the stalled decision goes on.
#[test]
fn a_stalled_decision_after_an_eviction_respects_the_window() {
    let clock = StallClock::new(ManualClock::new());
    let quota = Quota::per_second(10).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 2, clock.clone());
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(()));
    clock.inner().set(Duration::from_millis(500));
    let gate = Gate::new();
    std::thread::scope(|s| {
        let g = gate.clone();
        let limiter = &limiter;
        let stalled = s.spawn(move || {
            arm([Stall::Gate(g)]);
            limiter.try_acquire(&1u8, 10)
        });
        gate.wait_reached();
        clock.inner().set(Duration::from_secs(1));
        assert_eq!(limiter.try_acquire(&3u8, 1), Ok(()));
        assert_eq!(limiter.counters().evicted, 2);
        gate.open();
        // 10 at 0 s and 10 at 0.5 s would be 20 tokens in 0.5 s (bound 15).
        assert!(stalled.join().unwrap().is_err());
    });
}

/// Per-key quotas: a re-inserted key starts from its own quota's state at the eviction reading.
#[test]
fn stale_reinsert_uses_the_keys_own_quota() {
    let clock = StallClock::new(ManualClock::new());
    let basic = Quota::per_second(10).unwrap();
    let premium = Quota::new(100, Duration::from_secs(1), 100).unwrap();
    let limiter = KeyedLimiter::builder(basic, 2, clock.clone())
        .override_quota(1u8, premium)
        .build()
        .unwrap();
    assert_eq!(limiter.try_acquire(&1u8, 100), Ok(()));
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(()));
    clock.inner().set(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 2);
    arm([Stall::Reading(250 * MS)]);
    assert_eq!(limiter.available(&1u8), 25);
    arm([Stall::Reading(250 * MS)]);
    assert_eq!(limiter.available(&2u8), 2);
    arm([Stall::Reading(250 * MS)]);
    assert!(limiter.try_acquire(&1u8, 26).is_err());
    arm([Stall::Reading(250 * MS)]);
    assert_eq!(limiter.try_acquire(&1u8, 25), Ok(()));
    // A key never seen is treated the same way: the table cannot tell it from an evicted one.
    arm([Stall::Reading(0)]);
    assert_eq!(
        limiter.try_acquire(&9u8, 1),
        Err(Denied::RetryAfter(Duration::from_millis(100)))
    );
}

/// A clock stepped far back after evictions: new keys wait until the clock catches up with the
/// latest eviction reading (less one burst), exactly as one bucket that saw that reading would.
#[test]
fn a_clock_stepped_back_after_evictions_is_never_more_lenient() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 1, clock.clone());
    let w = WindowChecker::new();
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    w.admit(0, 10);
    clock.set(Duration::from_secs(5));
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(())); // evicts key 1 at 5 s
    clock.set(Duration::from_secs(1));
    assert_eq!(limiter.sweep(), 0, "key 2 is not full at 1 s");
    assert_eq!(limiter.available(&1u8), 0);
    clock.set(Duration::from_millis(4_500));
    assert_eq!(limiter.available(&1u8), 5);
    for t in [0, 1_000, 4_000, 4_500, 5_000] {
        clock.set(Duration::from_millis(t));
        if limiter.try_acquire(&1u8, 5).is_ok() {
            w.admit(t * MS, 5);
        }
    }
    assert_eq!(w.check(&quota), Ok(()));
}

// ---- Stress: real threads, real clocks, constant eviction. ----

thread_local! {
    /// The calling thread's latest reading of a [`Recording`] clock.
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// Remembers, per thread, the reading it returned: the reading the limiter's decision used.
#[derive(Clone, Debug)]
struct Recording<C>(C);

impl<C: Clock> Clock for Recording<C> {
    fn now(&self) -> u64 {
        let t = self.0.now();
        LAST.with(|c| c.set(t));
        t
    }
}

/// A real clock that now and then reads up to `max_back` earlier than it should (unsynchronised
/// TSCs, a stepped clock): one reading in `1 / p`, chosen by a seeded shared counter.
#[derive(Clone, Debug)]
struct SteppingBack<C> {
    inner: C,
    draws: Arc<AtomicU64>,
    one_in: u64,
    max_back: u64,
}

impl<C: Clock> Clock for SteppingBack<C> {
    fn now(&self) -> u64 {
        let t = self.inner.now();
        let mut r = Rng(self.draws.fetch_add(1, Ordering::Relaxed) | 1);
        let z = r.next();
        if z % self.one_in == 0 {
            t.saturating_sub((z >> 32) % self.max_back)
        } else {
            t
        }
    }
}

/// A stress shape, bounded and sharpened: 20k/s with burst 10, `max_keys` 256, 16 hot
/// keys taking 1 to 10 tokens and 40 % unique keys (so hot buckets are spent, refill and are
/// evicted all the time), on 4 threads for `run` at most, readings stalled at random. Every hot key's admissions, each at the reading its decision used,
/// must stay within `burst + rate·Δ` in every window; that is a bound, so it holds in every
/// interleaving (the test cannot be flaky).
fn stress_hot_keys_under_eviction<C: Clock + Clone + Send + Sync>(clock: C, seed: u64) {
    const HOT: u64 = 16;
    let quota = Quota::new(20_000, Duration::from_secs(1), 10).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 256, Recording(clock));
    let run = Duration::from_millis(700);
    let logs = Mutex::new(vec![Vec::<(u64, u64)>::new(); HOT as usize]);
    let next_unique = AtomicU64::new(1 << 32);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (limiter, logs, next_unique) = (&limiter, &logs, &next_unique);
            s.spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(31).wrapping_add(t) | 1);
                let mut mine = vec![Vec::<(u64, u64)>::new(); HOT as usize];
                let start = Instant::now();
                for i in 0..2_000_000u64 {
                    if i % 256 == 0 && start.elapsed() > run {
                        break;
                    }
                    if rng.below(10) < 4 {
                        let key = next_unique.fetch_add(1, Ordering::Relaxed);
                        let _ = limiter.try_acquire(&key, 1);
                    } else {
                        let key = rng.below(HOT);
                        let cost = 1 + rng.below(10);
                        if limiter.try_acquire(&key, cost).is_ok() {
                            mine[key as usize].push((LAST.with(Cell::get), cost));
                        }
                    }
                }
                let mut all = logs.lock().unwrap();
                for (k, events) in mine.into_iter().enumerate() {
                    all[k].extend(events);
                }
            });
        }
    });
    assert!(limiter.len() <= 256);
    let c = limiter.counters();
    assert!(
        c.evicted > 0,
        "the stream of unique keys must force evictions"
    );
    for (key, events) in logs.into_inner().unwrap().into_iter().enumerate() {
        let w = WindowChecker::new();
        for (at, tokens) in events {
            w.admit(at, tokens);
        }
        assert_eq!(
            w.check(&quota),
            Ok(()),
            "hot key {key} over its bound ({c:?})"
        );
    }
}

#[test]
fn stress_eviction_with_stalled_readings() {
    let clock = StallClock::random(StdClock::default(), 0.01, Duration::from_micros(500), 5);
    stress_hot_keys_under_eviction(clock, 5);
}

#[test]
fn stress_eviction_with_a_clock_stepping_back() {
    let clock = SteppingBack {
        inner: StallClock::random(StdClock::default(), 0.01, Duration::from_micros(500), 6),
        draws: Arc::new(AtomicU64::new(0x5EED)),
        one_in: 500,
        max_back: 2_000_000,
    };
    stress_hot_keys_under_eviction(clock, 6);
}

/// A table larger than one sweep step (5,000 keys: 16,384 slots, 16 steps per pass) with exactly
/// one full bucket: a flood of new keys finds it within one pass (each refusal moves the pass on
/// by 1,024 slots), and once a pass has ended with no full bucket left, refusals are O(1) with
/// the exact wait. The table fills while the region still migrates from 8,192 slots to 16,384
/// (5,000 is just over a quarter of the table, and insertions drain 4 old slots each): the
/// refusals' sweep steps first finish draining the old region (at most 8,192 slots at 512 or
/// more per step, evicting full buckets there too), then make the pass over the new one.
#[test]
fn incremental_sweep_finds_the_one_full_bucket_within_a_pass() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, 5_000, clock.clone());
    assert_eq!(limiter.try_acquire(&0u64, 1), Ok(())); // full again at 1 s
    clock.set(Duration::from_millis(500));
    for key in 1..5_000u64 {
        assert_eq!(limiter.try_acquire(&key, 1), Ok(())); // full again at 1.5 s
    }
    clock.set(Duration::from_secs(1));
    let mut refused_first = 0;
    let mut key = 1_000_000u64;
    while limiter.try_acquire(&key, 1).is_err() {
        refused_first += 1;
        key += 1;
        assert!(
            refused_first <= 32,
            "a drain of 16 steps at most, a pass of 16"
        );
    }
    assert_eq!(limiter.counters().evicted, 1);
    assert_eq!(limiter.available(&0u64), 1, "key 0 was full when evicted");
    // No bucket is full now: within one more pass the wait becomes exact and stays so.
    let mut waits = Vec::new();
    for k in 2_000_000..2_000_040u64 {
        match limiter.try_acquire(&k, 1) {
            Err(Denied::RetryAfter(d)) => waits.push(d),
            other => panic!("{other:?}"),
        }
        assert!(limiter.len() <= 5_000);
    }
    let exact = waits
        .iter()
        .position(|&d| d == Duration::from_millis(500))
        .expect("a pass ends");
    assert!(exact <= 33, "{exact}");
    assert!(waits[exact..]
        .iter()
        .all(|&d| d == Duration::from_millis(500)));
    assert_eq!(limiter.counters().evicted, 1);
}

// ---- until_key_ready ----

/// One registration however often the future is polled, woken at the exact instant its key
/// admits (`until_key_ready_waits_with_one_registration`, 300 ms here); then a waiter whose
/// tokens someone else takes first re-arms for the new instant, a new key waits out a full
/// table, dropping a waiting future cancels its wake-up, and a cost above the burst resolves at
/// once to `ExceedsBurst`.
#[test]
fn until_key_ready_waits_for_its_key_with_one_registration() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};
    let quota = Quota::per_second(10).unwrap();
    let (limiter, clock, waker) = keyed_policies::until_key_ready_waits_with_one_registration(
        quota,
        Duration::from_millis(300),
    );
    let mut cx = Context::from_waker(&waker);

    // Someone else takes the tokens first: the waiter re-arms for the new instant.
    let mut fut = pin!(limiter.until_key_ready(&1u8, 2));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_millis(200));
    assert_eq!(limiter.try_acquire(&1u8, 2), Ok(()));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    assert_eq!(clock.pending_wakes(), 1);
    clock.advance(Duration::from_millis(200));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Duration::from_millis(400)))
    );

    // A new key with the table full waits until a bucket can be evicted; dropping a waiting
    // future cancels its wake-up.
    clock.set(Duration::from_secs(2)); // both keys full again
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    assert_eq!(limiter.try_acquire(&2u8, 10), Ok(()));
    {
        let mut fut = pin!(limiter.until_key_ready(&3u8, 1));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(clock.pending_wakes(), 1);
    }
    assert_eq!(clock.pending_wakes(), 0);
    let mut fut = pin!(limiter.until_key_ready(&3u8, 1));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Ok(Duration::from_secs(1)))
    );
    assert_eq!(
        pin!(limiter.until_key_ready(&1u8, 11)).poll(&mut cx),
        Poll::Ready(Err(Denied::ExceedsBurst))
    );
}

/// The time `until_key_ready` reports is the time its caller waited, by the clock's forward
/// moves: a clock stepped back between polls stretches the wait by the step (the key's tokens
/// are due at the same instant), and the report says so rather than the distance between the
/// first and the last reading.
#[test]
fn until_key_ready_reports_the_time_waited_across_a_clock_step_back() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};
    let ms = Duration::from_millis;
    let (_, waker) = tollgate_testkit::wakers::Count::waker();
    let mut cx = Context::from_waker(&waker);
    let clock = ManualClock::new_frozen();
    clock.set(Duration::from_secs(10));
    let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 2, clock.clone());
    assert_eq!(limiter.try_acquire(&1u8, 10), Ok(()));
    let mut fut = pin!(limiter.until_key_ready(&1u8, 1)); // due at 10.1 s
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(ms(50));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.set(Duration::from_secs(9)); // 1.05 s back
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(ms(1_099));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
    clock.advance(ms(1));
    assert_eq!(
        fut.as_mut().poll(&mut cx),
        Poll::Ready(Ok(ms(50 + 1_100))),
        "50 ms before the step and 1.1 s after it"
    );
}

/// A new key refused because the table is full waits until the first tracked bucket is full,
/// even when that bucket is an override's slower quota: the cap is the longest burst refill of
/// any quota the table's keys can have (200 s here), not the default quota's (1 s), so the
/// client is not told to come back 199 s early.
#[test]
fn table_full_wait_covers_an_override_slower_than_the_default() {
    keyed_policies::table_full_wait_covers_an_override_slower_than_the_default(
        Quota::per_second(10).unwrap(),
        Quota::new(1, Duration::from_secs(100), 2).unwrap(),
    );
}

/// A new key refused by where untracked keys start (the floor evictions raised, here read by a
/// stepped-back clock) gets that bucket's snapshot ("5 tokens, full in 500 ms"), not the
/// table-full one ("0 tokens, full in 300 ms").
#[test]
fn a_new_key_refused_by_the_floor_gets_its_buckets_snapshot() {
    let clock = ManualClock::new_frozen();
    let limiter = KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), 2, clock.clone());
    limiter.try_acquire(&"a", 10).unwrap();
    limiter.try_acquire(&"x", 10).unwrap();
    clock.set(Duration::from_secs(2));
    limiter.try_acquire(&"b", 1).unwrap(); // the table full: a sweep evicts both
    assert_eq!(limiter.counters().evicted, 2);
    clock.set(Duration::from_millis(1500));
    assert_eq!(limiter.available(&"c"), 5);
    let (verdict, snapshot) = limiter.decide_snapshot(&"c", 8);
    assert_eq!(verdict, Err(Denied::RetryAfter(Duration::from_millis(300))));
    assert_eq!(
        snapshot,
        tollgate::Snapshot::new(5, Duration::from_millis(500))
    );
}

/// Keys built against foldhash's public constants never share a fingerprint across tables.
/// foldhash multiplies a word of the input xored with the per-hasher seed by a word of the
/// input xored with a *shared*-seed word; over foldhash's fixed shared seed (public words), an
/// input whose second word equals that word makes the product 0 whatever the per-hasher seed:
/// distinct `u128` keys whose high half is `seeds[0]`, `(u64, u64)` keys whose second field is
/// `seeds[0]`, and byte keys (`Vec<u8>`, `[u8]`) of one length from 8 to 16 whose last 8 bytes
/// are `seeds[1]` would each share one fingerprint, hence one bucket, in every limiter. The
/// shared seed is drawn from the table's seed instead.
#[test]
fn crafted_keys_never_share_a_bucket_whatever_the_seed() {
    // `foldhash::SharedSeed::global_fixed()`'s first two words (foldhash 0.2's ARBITRARY6, 7).
    const SEED0: u64 = 0xc0ac_29b7_c97c_50dd;
    const SEED1: u64 = 0x3f84_d5b5_b547_0917;
    let q = Quota::per_second(1).unwrap();
    let bytes = |head: u32| {
        let mut key = head.to_be_bytes().to_vec();
        key.extend_from_slice(&SEED1.to_ne_bytes());
        key
    };
    // Each limiter draws its own random seed: the collisions hold in every one.
    let mut shared = Vec::new();
    for round in 0..8u64 {
        let wide = KeyedLimiter::with_clock(q, 100, ManualClock::new());
        let (a, b) = (u128::from(SEED0) << 64 | 1, u128::from(SEED0) << 64 | 2);
        wide.try_acquire(&a, 1).unwrap();
        if wide.try_acquire(&b, 1).is_err() {
            shared.push(format!("round {round}: u128 {a:#x} and {b:#x}"));
        }
        let pairs = KeyedLimiter::with_clock(q, 100, ManualClock::new());
        pairs.try_acquire(&(7u64, SEED0), 1).unwrap();
        if pairs.try_acquire(&(8u64, SEED0), 1).is_err() {
            shared.push(format!(
                "round {round}: (7, {SEED0:#x}) and (8, {SEED0:#x})"
            ));
        }
        let blobs: KeyedLimiter<Vec<u8>, Quota, _> =
            KeyedLimiter::with_clock(q, 100, ManualClock::new());
        let (x, y) = (bytes(1), bytes(0xdead_beef));
        blobs.try_acquire(&x, 1).unwrap();
        if blobs.try_acquire(&y, 1).is_err() {
            shared.push(format!("round {round}: bytes {x:02x?} and {y:02x?}"));
        }
    }
    assert!(
        shared.is_empty(),
        "distinct keys share one bucket:\n{}",
        shared.join("\n")
    );
}
