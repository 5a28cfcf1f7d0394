//! The save-and-restore tests of `KeyedLimiter` that `persist_keyed.rs` (a `Quota` per key)
//! and `persist_keyed_multi.rs` (`Limits` per key) share, written once over the policy. Each
//! file's tests call these with its own limiters, seeds and counts; [`Policy`] says how a key of
//! each policy is read and decided, so every check stays the one its file made before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tollgate::persist::RestoreError;
use tollgate::{
    Clock, Denied, KeyedLimiter, KeyedLimiterBuilder, KeyedPolicy, Limiter, Limits, ManualClock,
    Quota, Refusal,
};

use tollgate_testkit::rng::Rng;
use tollgate_testkit::signal::Signal;

/// The limiters these tests save and restore: `u64` keys on a `ManualClock`.
pub(crate) type Keyed<P> = KeyedLimiter<u64, P, ManualClock>;

/// A builder of [`Keyed`] limiters.
pub(crate) type Builder<P> = KeyedLimiterBuilder<u64, P, ManualClock>;

/// How the shared tests read and decide a key of each policy: a `Quota` key by `available` and
/// `try_acquire`, a `Limits` key by every quota's tokens and `decide` (which also names the
/// refusing quota).
pub(crate) trait Policy: KeyedPolicy {
    /// What one decision returns, compared between a restored and a live limiter.
    type Verdict: PartialEq + std::fmt::Debug;

    /// Every quota's whole tokens for key `k`, in the policy's order (one for a `Quota`).
    fn tokens(l: &Keyed<Self>, k: u64) -> Vec<u64>;

    /// The decision of `cost` for key `k`.
    fn verdict(l: &Keyed<Self>, k: u64, cost: u64) -> Self::Verdict;
}

impl Policy for Quota {
    type Verdict = Result<(), Denied>;

    fn tokens(l: &Keyed<Self>, k: u64) -> Vec<u64> {
        vec![l.available(&k)]
    }

    fn verdict(l: &Keyed<Self>, k: u64, cost: u64) -> Self::Verdict {
        l.try_acquire(&k, cost)
    }
}

impl Policy for Limits {
    type Verdict = Result<(), Refusal>;

    fn tokens(l: &Keyed<Self>, k: u64) -> Vec<u64> {
        quotas_of(l, k)
    }

    fn verdict(l: &Keyed<Self>, k: u64, cost: u64) -> Self::Verdict {
        l.decide(&k, cost)
    }
}

/// Every quota's whole tokens for key `k` of a `Limits` limiter.
pub(crate) fn quotas_of(l: &Keyed<Limits>, k: u64) -> Vec<u64> {
    let (_, s) = l.decide_snapshots(&k, 0);
    s.as_slice().iter().map(|s| s.remaining()).collect()
}

/// The wall-clock time `ns` nanoseconds after a fixed instant.
pub(crate) fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(ns)
}

/// Whether no quota of `got` holds more tokens than the same quota of `had`.
fn no_more(got: &[u64], had: &[u64]) -> bool {
    got.iter().zip(had).all(|(g, h)| g <= h)
}

/// `rounds` rounds of 20,000 random decisions over 3,000 keys (evictions included, through a
/// table of 1,000 from `build(max_keys, clock)`), saved, then restored onto another clock at
/// one of five later instants: every quota of every key equals the live limiter's, and so does
/// every next decision, at the restore and 100 and 200 ms on. `seed` seeds the decisions.
pub(crate) fn every_key_comes_back_as_the_live_limiter_has_it<P: Policy>(
    seed: u64,
    rounds: usize,
    build: impl Fn(usize, ManualClock) -> Builder<P>,
) {
    let mut rng = Rng(seed);
    for round in 0..rounds {
        let clock = ManualClock::new();
        let live = build(1000, clock.clone()).build().unwrap();
        for _ in 0..20_000 {
            if rng.below(50) == 0 {
                clock.advance(Duration::from_millis(rng.below(200)));
            }
            let _ = live.try_acquire(&rng.below(3000), 1 + rng.below(12));
        }
        let t0 = clock.now();
        let mut file = Vec::new();
        live.save_at(&mut file, wall(t0)).unwrap();
        let gap = [0, 1, 150_000_000, 900_000_000, 5_000_000_000][round % 5];
        clock.advance(Duration::from_nanos(gap));
        let clock2 = ManualClock::new();
        clock2.set(Duration::from_secs(rng.below(1000)));
        let restored = build(1000, clock2.clone())
            .restore_at(&file[..], wall(t0 + gap))
            .unwrap();
        assert!(restored.len() <= live.len());
        for step in 0..3 {
            for k in 0..3000 {
                assert_eq!(
                    P::tokens(&restored, k),
                    P::tokens(&live, k),
                    "round {round} key {k}"
                );
            }
            for k in (0..3000).step_by(7) {
                let cost = 1 + rng.below(3);
                assert_eq!(
                    P::verdict(&restored, k, cost),
                    P::verdict(&live, k, cost),
                    "key {k}"
                );
            }
            let d = Duration::from_millis(100 * step);
            clock.advance(d);
            clock2.advance(d);
        }
    }
}

/// The floor travels: a limiter from `build(max_keys, clock)`, drained, saved and restored,
/// still holds nothing for new keys until it has refilled (every quota of four keys, tracked
/// and not, equals the live limiter's); a restore into a table of 3, too small for every entry,
/// holds no quota of any key more leniently than the live limiter.
pub(crate) fn the_floor_travels_and_a_small_table_holds_no_key_more_leniently<P: Policy>(
    build: impl Fn(usize, ManualClock) -> Builder<P>,
) {
    let clock = ManualClock::new();
    let live = build(100, clock.clone()).build().unwrap();
    live.drain();
    assert_eq!(live.available(&1), 0);
    for k in 0..50 {
        clock.advance(Duration::from_millis(20));
        let _ = live.try_acquire(&k, 1);
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    let restored = build(100, ManualClock::new())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    clock.advance(Duration::from_millis(300));
    for k in [1000u64, 7, 3, 49] {
        assert_eq!(P::tokens(&restored, k), P::tokens(&live, k), "key {k}");
    }
    // Into a table of 3 keys: the entries that do not fit raise the floor instead.
    let small = build(3, clock.clone())
        .restore_at(&file[..], wall(300_000_000))
        .unwrap();
    assert!(small.len() <= 3);
    for k in 0..60 {
        let (s, l) = (P::tokens(&small, k), P::tokens(&live, k));
        assert!(no_more(&s, &l), "key {k}: {s:?} {l:?}");
    }
}

/// Every truncation of a table of 40 spent keys (from `build(max_keys, clock)`) is
/// `RestoreError::Truncated`, and each of 2,000 random flipped bits (`seed`) an error, never a
/// panic.
pub(crate) fn damaged_input_is_an_error<P: Policy>(
    seed: u64,
    build: impl Fn(usize, ManualClock) -> Builder<P>,
) {
    let live = build(100, ManualClock::new()).build().unwrap();
    for k in 0..40 {
        live.try_acquire(&k, 3).unwrap();
    }
    let mut file = Vec::new();
    live.save_at(&mut file, wall(0)).unwrap();
    for len in 0..file.len() {
        let r = build(100, ManualClock::new()).restore_at(&file[..len], wall(0));
        assert!(matches!(r, Err(RestoreError::Truncated)), "{len}");
    }
    let mut rng = Rng(seed);
    for _ in 0..2000 {
        let mut bad = file.clone();
        let i = rng.below(bad.len() as u64) as usize;
        bad[i] ^= 1 << rng.below(8);
        assert!(build(100, ManualClock::new())
            .restore_at(&bad[..], wall(0))
            .is_err());
    }
}

/// The numbers of one file's racing save: `rounds` rounds; round `r` fills keys 0..15,000 at
/// costs `1..=max_fill_cost` from `Rng(seed + r)`, then four threads decide over keys
/// `0..keys`, thread `t` from `Rng(thread_seed + t * 7919 + r)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Race {
    /// How many rounds, each on a new limiter.
    pub(crate) rounds: u64,
    /// The fill's seed (plus the round).
    pub(crate) seed: u64,
    /// The largest cost of a fill.
    pub(crate) max_fill_cost: u64,
    /// The keys read before the save and restored (0..keys), and the keys the threads decide.
    pub(crate) keys: u64,
    /// The threads' seed (plus `t * 7919` and the round).
    pub(crate) thread_seed: u64,
}

/// A save on one thread while four others admit, insert new keys (the table grows through
/// migrations and, once full, evicts full buckets) and the clock moves (thread 0, only once the
/// save has read it): restored at the save's own instant onto a fresh clock, no quota of any
/// of `race.keys` keys holds more tokens than it had when the save began. `live` makes each
/// round's limiter on its clock, `restore` the builder the file is restored through.
pub(crate) fn a_save_racing_decisions_never_restores_more_tokens<P: Policy>(
    race: Race,
    live: impl Fn(ManualClock) -> Keyed<P>,
    restore: impl Fn(ManualClock) -> Builder<P>,
) where
    Keyed<P>: Send + Sync,
{
    for round in 0..race.rounds {
        let clock = ManualClock::new();
        let live = Arc::new(live(clock.clone()));
        let mut rng = Rng(race.seed + round);
        for k in 0..15_000u64 {
            let _ = live.try_acquire(&k, 1 + rng.below(race.max_fill_cost));
        }
        let before: Vec<Vec<u64>> = (0..race.keys).map(|k| P::tokens(&live, k)).collect();
        let t0 = clock.now();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (live, clock, stop) = (live.clone(), clock.clone(), stop.clone());
                let started = started.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(race.thread_seed + t * 7919 + round);
                    while !stop.load(Ordering::Relaxed) {
                        let _ = live.try_acquire(&rng.below(race.keys), 1 + rng.below(5));
                        // The clock moves only once the save has read it (its first write).
                        if t == 0 && started.load(Ordering::Relaxed) && rng.below(64) == 0 {
                            clock.advance(Duration::from_millis(1));
                        }
                    }
                })
            })
            .collect();
        let mut file = Signal(Vec::new(), started.clone());
        live.save_at(&mut file, wall(t0)).unwrap();
        let file = file.0;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let restored = restore(ManualClock::new())
            .restore_at(&file[..], wall(t0))
            .unwrap();
        for (k, had) in before.iter().enumerate() {
            let got = P::tokens(&restored, k as u64);
            assert!(
                no_more(&got, had),
                "round {round} key {k}: {got:?} > {had:?}"
            );
        }
    }
}

/// A restore into a live table of the file's seed never adds tokens to a key it does not
/// track either: such a key starts where the table's floor says (here after `drain`: no
/// tokens for a whole refill), and a saved entry more lenient than that must not replace it.
/// Alice, saved with 5 tokens spent of `policy` (a smallest burst of 10), holds 0 in the
/// drained table before the restore and after it.
pub(crate) fn a_restore_in_place_never_hands_an_untracked_key_more_than_the_floor<
    P: KeyedPolicy + Clone,
>(
    policy: P,
) {
    let saved = KeyedLimiter::with_clock(policy.clone(), 100, ManualClock::new());
    let mut empty = Vec::new();
    saved.save_at(&mut empty, wall(0)).unwrap();
    saved.try_acquire(&"alice", 5).unwrap();
    let mut file = Vec::new();
    saved.save_at(&mut file, wall(0)).unwrap();

    // The file's seed, nothing tracked; then drained: every key holds 0.
    let live = KeyedLimiter::<&str, P, _>::builder(policy, 100, ManualClock::new())
        .restore_at(&empty[..], wall(0))
        .unwrap();
    live.drain();
    assert_eq!(live.available(&"alice"), 0);
    live.restore_at(&file[..], wall(0)).unwrap();
    assert_eq!(
        live.available(&"alice"),
        0,
        "the restore gave an untracked key the saved entry's tokens"
    );
    assert!(live.try_acquire(&"alice", 1).is_err());
}
