//! Random schedules (fixed seeds) mixing every operation that takes, gives back or converts
//! tokens — `try_acquire`, `reserve` (kept, or cancelled in random order), `try_acquire_for`,
//! `acquire`, `set_quota` — with clock readings that step back and readings made stale on
//! purpose, on one thread and on several. Every admission is recorded with the instant it was
//! decided at (a kept reservation, `acquire` and `try_acquire_for` at their due instant) and
//! every window is checked against `burst + rate·Δ` in exact integers (Δ plus 1 ns: due
//! instants are whole nanoseconds rounded up, see `WindowChecker::check_within`).
//!
//! What is checked against which quota:
//! * every **quota era** (the decisions between two reconfigurations, all in one unit) against
//!   its own quota, on one thread where the era of each decision is known — whatever the
//!   readings, the reconfiguration's own included;
//! * everything, on one thread and on several, against the loosest quota (`QUOTAS[0]`, no lower
//!   in rate or burst than any other), which covers windows that span reconfigurations in either
//!   direction — for schedules whose readings do not straddle a reconfiguration: its reading is
//!   no older than the decisions before it, and no decision after it reads earlier (decisions
//!   between two reconfigurations may read anything). Readings that straddle a switch see the
//!   other rate extrapolated over their staleness (`gcra::rescale` documents the bound).
//!   `gcra::rescale` keeps a debt's due instant: otherwise a rate going up with queued debt would
//!   break even the loosest bound (`tests/reconfigure/window_bound.rs`).

use tollgate_testkit::rng;
use tollgate_testkit::stall;
use tollgate_testkit::window;

use rng::Rng;
use stall::{arm, Stall, StallClock};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Duration;
use tollgate::{Bucket, Clock, ManualClock, Quota, Reservation};
use window::WindowChecker;

const MS: u64 = 1_000_000;

/// (tokens per second, burst), loosest first: no other is higher in rate or burst.
const QUOTAS: [(u64, u64); 6] = [(20, 8), (20, 5), (13, 8), (10, 4), (7, 3), (3, 2)];

fn quota(i: usize) -> Quota {
    let (t, b) = QUOTAS[i];
    Quota::per_second(t).unwrap().with_burst(b).unwrap()
}

/// Any quota of the list.
fn any_quota(rng: &mut Rng) -> usize {
    rng.below(QUOTAS.len() as u64) as usize
}

/// A reservation still held, with what the checker needs when it is kept.
struct Held<'a> {
    r: Reservation<'a, StallClock<ManualClock>>,
    era: usize,
    cost: u64,
}

impl Held<'_> {
    /// Keeps the reservation (returns its era, due instant and cost, to record) or cancels it
    /// with the given reading.
    fn resolve(self, keep: bool, reading: u64) -> Option<(usize, u64, u64)> {
        if keep {
            Some((self.era, self.r.delay_from(0).as_nanos() as u64, self.cost))
        } else {
            arm([Stall::Reading(reading)]);
            self.r.cancel();
            None
        }
    }
}

/// Runs one schedule of `ops` operations on one thread; returns the number of admissions.
fn one_thread(seed: u64, ops: usize, fresh_reconfig: bool) -> usize {
    let mut rng = Rng(seed);
    let clock = StallClock::new(ManualClock::new());
    let mut q = 0;
    let bucket = Bucket::with_clock(quota(q), clock.clone());
    // Per era: (quota, admissions); all admissions for the loosest-quota check.
    let mut eras = vec![(quota(q), WindowChecker::new())];
    let all = WindowChecker::new();
    let mut held: Vec<Held<'_>> = Vec::new();
    let mut admitted = 0;
    // The latest reading any operation used (for reconfigurations that read a fresh clock).
    let mut latest = 0u64;
    // The reading of the last reconfiguration.
    let mut switched_at = 0u64;
    let mut record = |eras: &mut Vec<(Quota, WindowChecker)>, era: usize, at: u64, n: u64| {
        eras[era].1.admit(at, n);
        all.admit(at, n);
        admitted += 1;
    };
    for _ in 0..ops {
        let now = clock.inner().now();
        // This operation's reading: the clock's, or (one in four) up to 500 ms older.
        let reading = if rng.below(4) == 0 {
            now.saturating_sub(rng.below(500) * MS)
        } else {
            now
        };
        // Readings do not straddle a switch where the looser bound is checked.
        let reading = if fresh_reconfig {
            reading.max(switched_at)
        } else {
            reading
        };
        latest = latest.max(reading);
        let burst = quota(q).burst();
        let cost = rng.below(burst + 2);
        let era = eras.len() - 1;
        match rng.below(16) {
            0..=2 => clock.inner().advance(Duration::from_millis(rng.below(400))),
            3 => clock.inner().set(Duration::from_nanos(
                now.saturating_sub(rng.below(800) * MS),
            )),
            4..=6 => {
                arm([Stall::Reading(reading)]);
                if bucket.try_acquire(cost).is_ok() {
                    record(&mut eras, era, reading, cost);
                }
            }
            7..=9 => {
                arm([Stall::Reading(reading)]);
                if let Ok(r) = bucket.reserve(cost) {
                    held.push(Held { r, era, cost });
                }
            }
            10 | 11 if !held.is_empty() => {
                // Resolve a random held reservation: cancel it (any order), or keep it.
                let h = held.swap_remove(rng.below(held.len() as u64) as usize);
                if let Some((era, at, n)) = h.resolve(rng.below(3) == 0, reading) {
                    record(&mut eras, era, at, n);
                }
            }
            12 => {
                let timeout = Duration::from_millis(rng.below(300));
                arm([Stall::Reading(reading)]);
                if let Ok(wait) = bucket.try_acquire_for(cost, timeout) {
                    record(&mut eras, era, reading + wait.as_nanos() as u64, cost);
                }
            }
            13 => {
                arm([Stall::Reading(reading)]);
                if let Ok(wait) = bucket.acquire(cost) {
                    record(&mut eras, era, reading + wait.as_nanos() as u64, cost);
                }
            }
            14 => {
                let next = any_quota(&mut rng);
                if fresh_reconfig {
                    switched_at = latest;
                }
                arm([Stall::Reading(if fresh_reconfig {
                    latest
                } else {
                    reading
                })]);
                bucket.set_quota(quota(next));
                if next != q {
                    q = next;
                    eras.push((quota(q), WindowChecker::new()));
                }
            }
            _ => {}
        }
        arm([]); // an operation that returned before reading the clock leaves no stall behind
    }
    // The rest: kept or cancelled, in random order.
    while !held.is_empty() {
        let h = held.swap_remove(rng.below(held.len() as u64) as usize);
        let now = clock.inner().now();
        if let Some((era, at, n)) = h.resolve(rng.below(2) == 0, now) {
            record(&mut eras, era, at, n);
        }
    }
    for (i, (q, w)) in eras.iter().enumerate() {
        assert_eq!(
            w.check_within(q, 1),
            Ok(()),
            "seed {seed:#x}, era {i} ({q:?})"
        );
    }
    if fresh_reconfig {
        assert_eq!(
            all.check_within(&quota(0), 1),
            Ok(()),
            "seed {seed:#x}, all eras"
        );
    }
    admitted
}

#[test]
fn one_thread_random_schedules_never_over_admit() {
    let mut admitted = 0;
    for seed in 1..=5_000u64 {
        let seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        admitted += one_thread(seed, 150, seed & 2 == 0);
    }
    // The schedules do admit (the check is not vacuous).
    assert!(admitted > 50_000, "{admitted}");
}

/// Several threads on one bucket; each arms its own readings (the clock's, or older), so every
/// admission's reading is known exactly, and the shared clock moves back and forth.
fn threads(seed: u64, n: usize, ops: usize) -> usize {
    let clock = StallClock::new(ManualClock::new());
    let bucket = Bucket::with_clock(quota(0), clock.clone());
    let all = WindowChecker::new();
    let admitted = AtomicUsize::new(0);
    // Decisions share this lock while they run; a reconfiguration takes it alone and reads the
    // latest reading any decision used, so its reading is never older than theirs.
    // (the latest reading any decision used, the last reconfiguration's reading)
    let latest = RwLock::new((AtomicU64::new(0), 0u64));
    std::thread::scope(|s| {
        for i in 0..n {
            let (clock, bucket, all, admitted, latest) =
                (&clock, &bucket, &all, &admitted, &latest);
            s.spawn(move || {
                let mut rng = Rng(seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
                let mut held: Vec<(Reservation<'_, _>, u64)> = Vec::new();
                let record = |at: u64, n: u64| {
                    all.admit(at, n);
                    admitted.fetch_add(1, Ordering::Relaxed);
                };
                for _ in 0..ops {
                    let now = clock.inner().now();
                    let reading = if rng.below(3) == 0 {
                        now.saturating_sub(rng.below(500) * MS)
                    } else {
                        now
                    };
                    let cost = rng.below(QUOTAS[0].1 + 1);
                    let op = rng.below(16);
                    if op == 14 {
                        let mut latest = latest.write().unwrap();
                        let fresh = (*latest.0.get_mut()).max(now);
                        latest.1 = fresh;
                        arm([Stall::Reading(fresh)]);
                        bucket.set_quota(quota(any_quota(&mut rng)));
                        arm([]);
                        continue;
                    }
                    let shared = latest.read().unwrap();
                    // Readings do not straddle a switch (see the module docs).
                    let reading = reading.max(shared.1);
                    shared.0.fetch_max(reading, Ordering::Relaxed);
                    arm([Stall::Reading(reading)]);
                    match op {
                        0..=1 => clock.inner().advance(Duration::from_millis(rng.below(200))),
                        2 => clock.inner().set(Duration::from_nanos(
                            now.saturating_sub(rng.below(400) * MS),
                        )),
                        3..=6 if bucket.try_acquire(cost).is_ok() => record(reading, cost),
                        7..=9 => {
                            if let Ok(r) = bucket.reserve(cost) {
                                held.push((r, cost));
                            }
                        }
                        10 | 11 if !held.is_empty() => {
                            let (r, cost) = held.swap_remove(rng.below(held.len() as u64) as usize);
                            if rng.below(3) == 0 {
                                record(r.delay_from(0).as_nanos() as u64, cost);
                            } else {
                                r.cancel();
                            }
                        }
                        12 => {
                            let timeout = Duration::from_millis(rng.below(300));
                            if let Ok(wait) = bucket.try_acquire_for(cost, timeout) {
                                record(reading + wait.as_nanos() as u64, cost);
                            }
                        }
                        13 => {
                            if let Ok(wait) = bucket.acquire(cost) {
                                record(reading + wait.as_nanos() as u64, cost);
                            }
                        }
                        _ => {}
                    }
                    drop(shared);
                    arm([]);
                }
                for (r, cost) in held {
                    if rng.below(2) == 0 {
                        record(r.delay_from(0).as_nanos() as u64, cost);
                    } else {
                        r.cancel();
                    }
                }
            });
        }
    });
    assert_eq!(
        all.check_within(&quota(0), 1),
        Ok(()),
        "seed {seed:#x}, {n} threads"
    );
    admitted.into_inner()
}

#[test]
fn threads_random_schedules_never_over_admit() {
    let mut admitted = 0;
    for seed in 1..=100u64 {
        let seed = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        admitted += threads(seed, 2 + (seed % 3) as usize, 400);
    }
    assert!(admitted > 3_000, "{admitted}");
}
