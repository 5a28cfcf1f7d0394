//! loom models of the sharded bucket's central word: decisions of two shards racing on it, with a
//! clock that moves and with stale readings (the leases' own models: `sharded_lease.rs`).
#![cfg(tollgate_loom)]

use loom::thread;
use std::time::{Duration, UNIX_EPOCH};
use tollgate::{ManualClock, Quota, ShardedBucket};
use tollgate_loom_tests::{at, PerThread};

/// Runs `f` under loom with at least 6 preemptions: these models are small enough for that
/// bound to run in about a second, and `ci/loom.sh`'s default (`LOOM_MAX_PREEMPTIONS`, 2)
/// would leave interleavings with three or more preemptions unexplored. The protocol has no
/// spin loop (a locked lease sends a decision to the central word; every retry follows another
/// thread's successful CAS), so no model needs `yield_now` to terminate.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.map_or(6, |p| p.max(6)));
    builder.check(f);
}

/// Quota 2/s on two shards (too small for a lease: every decision is the central word's), a
/// frozen clock: one thread takes 2, the other 1 at the same time. Nothing is created, nothing
/// lost: admitted + available is exactly the burst.
#[test]
fn two_shards_race_on_the_central_word() {
    model(|| {
        at(2_000_000_000);
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::per_second(2).unwrap(),
            2,
            ManualClock::new(),
        ));
        let other = bucket.clone();
        let t = thread::spawn(move || if other.try_acquire(2).is_ok() { 2 } else { 0 });
        let b2 = bucket.clone();
        let u = thread::spawn(move || if b2.try_acquire(1).is_ok() { 1 } else { 0 });
        let admitted = t.join().unwrap() + u.join().unwrap();
        assert!(admitted == 1 || admitted == 2, "admitted {admitted}");
        assert_eq!(admitted + bucket.available(), 2);
        // A refusal never leaves a token refused once the races are over.
        if admitted == 1 {
            assert_eq!(bucket.try_acquire(1), Ok(()));
        }
    });
}

/// Quota 2/s on `clock`, two shards, full.
fn two_shards_of_one(clock: &ManualClock) -> loom::sync::Arc<ShardedBucket<ManualClock>> {
    shards_of_one(clock, 2)
}

/// Quota 2/s on `clock`, `shards` shards, full.
fn shards_of_one(
    clock: &ManualClock,
    shards: usize,
) -> loom::sync::Arc<ShardedBucket<ManualClock>> {
    let quota = Quota::per_second(2).unwrap();
    loom::sync::Arc::new(ShardedBucket::with_clock(quota, shards, clock.clone()))
}

/// The same race with the clock moving by half a second meanwhile: the total never exceeds
/// burst + what the clock can earn.
#[test]
fn the_race_while_the_clock_moves_creates_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let bucket = two_shards_of_one(&clock);
        let other = bucket.clone();
        let t = thread::spawn(move || if other.try_acquire(2).is_ok() { 2 } else { 0 });
        let b2 = bucket.clone();
        let u = thread::spawn(move || if b2.try_acquire(1).is_ok() { 1 } else { 0 });
        clock.advance(Duration::from_millis(500)); // each shard earns half a token
        let admitted = t.join().unwrap() + u.join().unwrap();
        // At most the burst (2) plus what 500 ms at 2 tokens/s can refill (1).
        assert!(admitted + bucket.available() <= 3, "admitted {admitted}");
        assert!(admitted >= 1, "a full bucket refused everything");
    });
}

/// A decision at a stale reading racing decisions at a later one on the central word.
///
/// Quota 2/s, burst 4, two shards (no leases at this size), full. `B` reads 0 (stale) and asks
/// for 3; `O` reads 2 s and takes 2, then 1. In every interleaving the tokens admitted at the
/// instant 2 s plus those still available then stay within the burst, and everything admitted
/// within [0, 2 s] within burst + 2 s of rate.
#[test]
fn a_stale_decision_racing_a_later_one_creates_nothing() {
    model(|| {
        at(2_000_000_000);
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(
            Quota::new(2, Duration::from_secs(1), 4).unwrap(),
            2,
            PerThread,
        ));
        assert_eq!(bucket.shards(), 2);
        let b = bucket.clone();
        let stale = thread::spawn(move || {
            at(0);
            if b.try_acquire(3).is_ok() {
                3
            } else {
                0
            }
        });
        let o = bucket.clone();
        let fresh = thread::spawn(move || {
            at(2_000_000_000);
            let mut got = 0;
            for cost in [2, 1] {
                if o.try_acquire(cost).is_ok() {
                    got += cost;
                }
            }
            got
        });
        let at_zero = stale.join().unwrap();
        let at_two = fresh.join().unwrap();
        let left = bucket.available(); // at 2 s
        assert!(
            at_two + left <= 4,
            "{at_two} admitted at 2 s and {left} left: burst 4"
        );
        assert!(
            at_zero + at_two + left <= 8,
            "{at_zero} + {at_two} + {left} in 2 s"
        );
    });
}

/// Two threads' one-token decisions.
type Racers = [thread::JoinHandle<Result<(), tollgate::Denied>>; 2];

/// [`shards_of_one`] drained at 0, the clock moved to 0.5 s (one token earned), and two
/// threads each asking for one token.
fn drained_then_two_race_at_half_a_second(
    clock: &ManualClock,
    shards: usize,
) -> (loom::sync::Arc<ShardedBucket<ManualClock>>, Racers) {
    let bucket = shards_of_one(clock, shards);
    assert_eq!(bucket.try_acquire(2), Ok(()));
    clock.advance(Duration::from_millis(500));
    let racers = [(); 2].map(|()| {
        let b = bucket.clone();
        thread::spawn(move || b.try_acquire(1))
    });
    (bucket, racers)
}

/// Two one-token decisions on different shards of a drained bucket while the clock moves.
///
/// Quota 2/s, burst 2, drained at 0. At 0.5 s one token is there; two requests race while the
/// clock moves on to 0.75 s (1.5 tokens earned since the drain): at most one is admitted,
/// nothing is created, and once the races are over a token the bucket holds is not refused.
#[test]
fn two_decisions_on_a_drained_bucket_while_the_clock_moves() {
    model(|| {
        let clock = ManualClock::new();
        let (bucket, [t, u]) = drained_then_two_race_at_half_a_second(&clock, 2);
        clock.advance(Duration::from_millis(250));
        let admitted = u64::from(t.join().unwrap().is_ok()) + u64::from(u.join().unwrap().is_ok());
        let left = bucket.available(); // at 0.75 s
        assert!(admitted <= 1, "admitted {admitted}");
        assert!(admitted + left <= 1, "{admitted} admitted and {left} left");
        if left >= 1 {
            assert_eq!(bucket.try_acquire(1), Ok(()), "a token refused");
        }
    });
}

/// Two one-token decisions on different shards race for the one token a drained bucket holds,
/// on a frozen clock: exactly one is admitted, and the other — refused at once when its CAS
/// loses to the winner, or refused from the word as the winner left it — waits exactly until
/// the next token (0.5 s), which is then admitted, neither early nor refused by a stale
/// `dry_until`.
#[test]
fn the_loser_of_the_race_for_the_last_token_waits_exactly() {
    the_last_token_race(2);
}

/// [`the_loser_of_the_race_for_the_last_token_waits_exactly`] on one shard, which both threads
/// share: the word decides alone, as a `Bucket`'s (no lease, no `dry_until`), and the loser,
/// refused on the word its lost CAS found or as the winner left it, waits exactly.
#[test]
fn on_one_shard_the_loser_of_the_race_waits_exactly() {
    the_last_token_race(1);
}

fn the_last_token_race(shards: usize) {
    model(move || {
        let clock = ManualClock::new();
        let (bucket, [t, u]) = drained_then_two_race_at_half_a_second(&clock, shards);
        let verdicts = [t.join().unwrap(), u.join().unwrap()];
        let wait = tollgate::Denied::RetryAfter(Duration::from_millis(500));
        assert!(
            verdicts == [Ok(()), Err(wait)] || verdicts == [Err(wait), Ok(())],
            "{verdicts:?}"
        );
        assert_eq!(bucket.try_acquire(1), Err(wait));
        clock.advance(Duration::from_millis(499));
        assert!(bucket.try_acquire(1).is_err());
        clock.advance(Duration::from_millis(1));
        assert_eq!(bucket.try_acquire(1), Ok(()));
    });
}

/// *Near leases* racing on two shards. Quota 125,000/s (a token every 8 µs), burst 16, two
/// shards: near leases of one token (an eighth of the burst over two shards), the word at most
/// two tokens beyond the limit. The bucket is drained at 0 (no lease out); then the model's
/// thread and a thread of the other shard each ask for a token: each finds its lease empty and
/// the word dry, takes no advance (a first such refusal marks its shard as waiting for a
/// hand-off) and waits for the word's next token, 16 (8 µs). At 8 µs the model's thread is
/// admitted (token 16 from the word), and what was admitted plus what the bucket holds is the
/// one token earned: nothing created, nothing lost.
#[test]
fn near_leases_race_on_two_shards() {
    model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(125_000, Duration::from_secs(1), 16).unwrap();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, clock.clone()));
        bucket.drain();
        let wait = |us| tollgate::Denied::RetryAfter(Duration::from_micros(us));
        let other = bucket.clone();
        let t = thread::spawn(move || other.try_acquire(1));
        let mine = bucket.try_acquire(1);
        let theirs = t.join().unwrap();
        assert_eq!([mine, theirs], [Err(wait(8)), Err(wait(8))]);
        clock.advance(Duration::from_micros(8));
        let last = bucket.try_acquire(1);
        assert_eq!(last, Ok(()));
        assert_eq!(u64::from(last.is_ok()) + bucket.available(), 1);
    });
}

/// A shard that took the last tokens in turn races another for the next. Quota 1,000/s, burst
/// 4, two shards (no near leases at this rate): the model's thread drains the bucket at 0 and
/// takes the token of 1 ms; at 2 ms it asks for the next token while a thread of the other
/// shard asks for it. Exactly one gets it, the other waits exactly 1 ms, and so does every
/// later request.
#[test]
fn a_shard_that_drained_the_bucket_races_another_for_the_next_token() {
    model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1_000, Duration::from_secs(1), 4).unwrap();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, clock.clone()));
        assert_eq!(bucket.try_acquire(4), Ok(()));
        clock.advance(Duration::from_millis(1));
        assert_eq!(bucket.try_acquire(1), Ok(()));
        clock.advance(Duration::from_millis(1));
        let b = bucket.clone();
        let other = thread::spawn(move || b.try_acquire(1));
        let mine = bucket.try_acquire(1);
        let theirs = other.join().unwrap();
        let wait = tollgate::Denied::RetryAfter(Duration::from_millis(1));
        assert!(
            [mine, theirs] == [Ok(()), Err(wait)] || [mine, theirs] == [Err(wait), Ok(())],
            "{mine:?} {theirs:?}"
        );
        assert_eq!(bucket.try_acquire(1), Err(wait));
        clock.advance(Duration::from_nanos(999_999));
        assert!(bucket.try_acquire(1).is_err());
        clock.advance(Duration::from_nanos(1));
        assert_eq!(bucket.try_acquire(1), Ok(()));
    });
}

/// An admission racing a drain (feature `persist`: the word raised with `fetch_max`, a write
/// that no hand-out count sees): the model's thread (as in the model above) asks for a token at
/// 3 ms, the word holding 2, while another thread drains the bucket at 3 ms. Either the
/// admission comes first and the drain then empties the word, or the drain comes first and the
/// thread is refused; in both orders the bucket holds nothing after both, and its next token
/// comes at 4 ms exactly.
#[test]
fn an_admission_racing_a_drain_admits_nothing_past_it() {
    model(|| {
        let clock = ManualClock::new();
        let quota = Quota::new(1_000, Duration::from_secs(1), 4).unwrap();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, clock.clone()));
        assert_eq!(bucket.try_acquire(4), Ok(()));
        clock.advance(Duration::from_millis(1));
        assert_eq!(bucket.try_acquire(1), Ok(()));
        clock.advance(Duration::from_millis(2));
        let b = bucket.clone();
        let other = thread::spawn(move || b.drain());
        let mine = bucket.try_acquire(1);
        other.join().unwrap();
        let wait = tollgate::Denied::RetryAfter(Duration::from_millis(1));
        assert!(mine == Ok(()) || mine == Err(wait), "{mine:?}");
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.try_acquire(1), Err(wait));
        clock.advance(Duration::from_nanos(999_999));
        assert!(bucket.try_acquire(1).is_err());
        clock.advance(Duration::from_nanos(1));
        assert_eq!(bucket.try_acquire(1), Ok(()));
    });
}

/// A restore of a drained file racing a decision that takes a far lease (64/s, two shards, a
/// frozen clock): whichever comes first, and wherever the decision stands when the restore
/// lowers the word (its shard's lease locked, the word's CAS done, the lease installed), no
/// lease pays anything afterwards: the bucket holds nothing once both are done.
#[test]
fn a_restore_racing_a_lease_leaves_no_lease_paying() {
    model(|| {
        at(2_000_000_000);
        let quota = Quota::per_second(64).unwrap();
        let drained = ShardedBucket::with_clock(quota, 2, ManualClock::new());
        assert_eq!(drained.try_acquire(64), Ok(()));
        let mut file = Vec::new();
        drained.save_at(&mut file, UNIX_EPOCH).unwrap();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, ManualClock::new()));
        let other = bucket.clone();
        let t = thread::spawn(move || other.try_acquire(1).is_ok());
        bucket.restore_at(&file[..], UNIX_EPOCH).unwrap();
        t.join().unwrap();
        assert_eq!(bucket.available(), 0);
    });
}

/// A drain racing a thread that takes a lease: as a restore, the drain lowers the central word
/// and then empties every lease, so whichever order the two take, nothing is left to pay
/// afterwards (the lease taken before the lowering is found locked or installed, and emptied).
#[test]
fn a_drain_racing_a_lease_leaves_no_lease_paying() {
    model(|| {
        at(0);
        let quota = Quota::per_second(64).unwrap();
        let bucket = loom::sync::Arc::new(ShardedBucket::with_clock(quota, 2, ManualClock::new()));
        let other = bucket.clone();
        let t = thread::spawn(move || other.try_acquire(1).is_ok());
        bucket.drain();
        t.join().unwrap();
        assert_eq!(bucket.available(), 0);
    });
}
