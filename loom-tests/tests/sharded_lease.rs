//! loom models of the sharded bucket's leases: spends racing a lease's replacement, a decision
//! pooling a lease with the central word while another thread spends from it, and a stale
//! spend racing the installation of a lease taken at a later reading.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{Clock, ManualClock, Quota, ShardedBucket};
use tollgate_loom_tests::{at, PerThread};

/// Quota 34/s, burst 34, two shards: a one-token decision on the full bucket takes a lease of
/// ⌊33 / 16⌋ = 2 tokens.
fn bucket<C: Clock>(clock: C) -> Arc<ShardedBucket<C>> {
    let bucket = ShardedBucket::with_clock(Quota::per_second(34).unwrap(), 2, clock);
    assert_eq!(bucket.shards(), 2);
    Arc::new(bucket)
}

/// Spawns the thread that `f` runs on as the one sharing the calling thread's shard: thread
/// slots are handed out in the order threads first decide (the caller has slot 0), so a thread
/// that decides first on another bucket takes slot 1 and the next one gets slot 2, shard 0.
fn on_the_same_shard<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    thread::spawn(|| {
        let other = ShardedBucket::with_clock(Quota::per_second(2).unwrap(), 2, ManualClock::new());
        let _ = other.try_acquire(1);
    })
    .join()
    .unwrap();
    thread::spawn(f)
}

/// The main thread's part of the dry-spell races: 1 (and a lease of 2 from a full word), a
/// yield, then 1 twice; with what `other` took, all 34 tokens are admitted, none is left and
/// none stranded — so no request of the main thread was refused while its lease held a token.
fn the_main_threads_three<C: Clock>(bucket: &ShardedBucket<C>, other: thread::JoinHandle<u64>) {
    let first = u64::from(bucket.try_acquire(1).is_ok());
    // A yield lets the model run the other thread here without spending a preemption.
    thread::yield_now();
    let mine = first + (0..2).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64;
    let theirs = other.join().unwrap();
    assert_eq!(mine + theirs, 34, "mine {mine}, theirs {theirs}");
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.stranded_tokens(), 0.0);
}

/// Frozen clock. The main thread takes 1 (and a lease of 2), then it and a thread of the same
/// shard ask for one token twice each: two spends empty the lease, and whichever decision finds
/// it empty first replaces it (lock, CAS on the central word, install) while the other spends or
/// finds it locked. All four are admitted, and admitted + available is exactly the burst:
/// nothing spent twice, nothing lost.
#[test]
fn spends_race_a_lease_replacement() {
    loom::model(|| {
        let bucket = bucket(ManualClock::new());
        assert_eq!(bucket.try_acquire(1), Ok(()));
        let b = bucket.clone();
        let other = on_the_same_shard(move || (0..2).filter(|_| b.try_acquire(1).is_ok()).count());
        thread::yield_now();
        let mine = (0..2).filter(|_| bucket.try_acquire(1).is_ok()).count();
        let admitted = 1 + mine + other.join().unwrap();
        assert_eq!(admitted, 5);
        assert_eq!(admitted as u64 + bucket.available(), 34);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// Frozen clock. The main thread takes 1 (and a lease of 2), then asks for 33: the central word
/// holds 31, so the decision pools the lease's 2 with 31 from the word (lock the lease, CAS the
/// word, empty the lease). Meanwhile a thread of the same shard spends 1 from the lease. Either
/// the pooling wins (33 admitted, the spend refused) or the spend does (then 1 + 31 < 33: the
/// pooling is refused and gives the lease back): admitted + available is exactly the burst.
#[test]
fn pooling_races_a_spend_on_the_same_lease() {
    loom::model(|| {
        let bucket = bucket(ManualClock::new());
        assert_eq!(bucket.try_acquire(1), Ok(()));
        let b = bucket.clone();
        let spend = on_the_same_shard(move || u64::from(b.try_acquire(1).is_ok()));
        thread::yield_now();
        let pooled = if bucket.try_acquire(33).is_ok() {
            33
        } else {
            0
        };
        let spent = spend.join().unwrap();
        assert!(
            pooled + spent == 33 || pooled + spent == 1,
            "{pooled} + {spent}"
        );
        assert_eq!(1 + pooled + spent + bucket.available(), 34);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// The main thread takes the whole burst at reading 0. A thread of the same shard at 10 s (340
/// tokens refilled, capped at the burst: the word holds 34) takes 1 and a lease of 2, whose
/// units lie within one burst of 10 s. The main thread, still at reading 0, asks for 1
/// meanwhile: from the lease (installed or not) or the word, nothing is within one burst of
/// reading 0, so it is refused in every interleaving — an admission would put 35 tokens at
/// reading 0.
#[test]
fn a_stale_spend_never_takes_a_lease_of_a_later_reading() {
    loom::model(|| {
        let bucket = bucket(PerThread);
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(()));
        let b = bucket.clone();
        let late = on_the_same_shard(move || {
            at(10_000_000_000);
            b.try_acquire(1)
        });
        // A yield lets the model run the other thread first without spending a preemption.
        thread::yield_now();
        let stale = bucket.try_acquire(1);
        assert_eq!(late.join().unwrap(), Ok(()));
        assert!(stale.is_err(), "35 tokens at reading 0");
    });
}

/// A clock moved by the main thread (by half a second: 17 tokens) while two threads of
/// different shards each take 1 (and a lease) and then ask for 30: leases taken at one reading
/// lapse, are spent or are pooled at another. Whatever the interleaving, everything admitted
/// plus what is left fits the burst plus the step's refill.
#[test]
fn leases_on_two_shards_while_the_clock_moves() {
    loom::model(|| {
        let clock = ManualClock::new();
        let bucket = bucket(clock.clone());
        let spawn = |b: Arc<ShardedBucket<ManualClock>>| {
            thread::spawn(move || {
                [1, 30]
                    .into_iter()
                    .map(|c| (c, b.try_acquire(c)))
                    .collect::<Vec<_>>()
            })
        };
        let (t, u) = (spawn(bucket.clone()), spawn(bucket.clone()));
        thread::yield_now();
        clock.advance(Duration::from_millis(500));
        let (t, u) = (t.join().unwrap(), u.join().unwrap());
        let admitted: u64 = t
            .iter()
            .chain(&u)
            .filter(|(_, v)| v.is_ok())
            .map(|(c, _)| c)
            .sum();
        // The first decision finds the bucket full; a decision whose reading is older than the
        // word's may find it ahead and refuse (as a `Bucket` does).
        assert!(
            admitted >= 1,
            "a full bucket refused everything: {t:?} {u:?}"
        );
        assert!(admitted + bucket.available() <= 34 + 17, "{admitted}");
    });
}

/// The bucket-wide dry instant against a lease taken at the same time. Frozen clock, 34/s (a
/// token every 29 ms, so a drained word is dry for longer than the 1 ms that publishes it).
/// The main thread (shard 0) takes 1 and a lease of 2, then asks for 1 twice; a thread of
/// shard 1 takes 31 and then asks for 1. When the 31 leave the word dry, that thread tries to
/// publish the whole bucket's dry instant, scanning the shards while the main thread locks,
/// takes and installs its lease. The publication must see the lock or the lease, never the
/// empty lease before it (the lease's CAS is `Release`, and the publisher fences its read of
/// the word `Acquire`):
/// otherwise the main thread's two requests would be refused while its lease holds 2 tokens.
/// Demand (35) exceeds the burst, and in every interleaving all 34 tokens are admitted.
#[test]
fn a_dry_spell_is_never_published_over_a_lease_being_taken() {
    loom::model(|| {
        let bucket = bucket(ManualClock::new());
        let b = bucket.clone();
        let drain = thread::spawn(move || {
            let first = if b.try_acquire(31).is_ok() { 31 } else { 0 };
            first + u64::from(b.try_acquire(1).is_ok())
        });
        the_main_threads_three(&bucket, drain);
    });
}

/// A scan must never record "every lease empty" for a lease being handed out: the count of
/// hand-outs is raised after the lease's lock (and before its `Release` CAS), and read
/// `Acquire`. Shard 0 takes 1 and a lease of 2 at reading 0, then pools 33; at a stale reading
/// it is refused and publishes after a scan. Meanwhile shard 1, at 1 s, takes 1 and a lease of 2.
/// Then shard 0 at 1 s drains the word and publishes again, skipping the scan only if no lease
/// was handed out since the last one. Shard 1's two requests at 1 s are then paid from its
/// lease in every interleaving. With the count raised before the lock, the scan could read the
/// count and then the lease before its lock, and the second publication skip the scan over a
/// lease holding 2 tokens.
#[test]
fn a_scan_never_passes_a_lease_being_handed_out() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        let bucket = bucket(PerThread);
        at(0);
        // Shard 0: 1 and a lease of 2, then 33 pooled (the lease's 2 and the word's 31).
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(bucket.try_acquire(33), Ok(()));
        let taken = Arc::new(AtomicBool::new(false));
        let drained = Arc::new(AtomicBool::new(false));
        let (b, t, d) = (bucket.clone(), taken.clone(), drained.clone());
        let other = thread::spawn(move || {
            at(1_000_000_000); // 34 earned: the word is full again
            let r1 = b.try_acquire(1); // 1 and a lease of 2 on shard 1
            t.store(true, Ordering::Release);
            while !d.load(Ordering::Acquire) {
                thread::yield_now();
            }
            let r2 = b.try_acquire(1);
            let r3 = b.try_acquire(1);
            (r1, r2, r3)
        });
        // At reading 0 the word is dry for 29 ms: a publication, with a scan.
        assert!(bucket.try_acquire(1).is_err());
        while !taken.load(Ordering::Acquire) {
            thread::yield_now();
        }
        at(1_000_000_000);
        assert_eq!(bucket.try_acquire(31), Ok(())); // drains the word, publishes again
        drained.store(true, Ordering::Release);
        let (r1, r2, r3) = other.join().unwrap();
        assert_eq!(r1, Ok(()));
        // Shard 1's lease holds 2 tokens payable at 1 s.
        assert_eq!((r2, r3), (Ok(()), Ok(())));
    });
}

/// The near-lease races below share this: 64 tokens a millisecond, burst 64, two shards, so
/// near leases of one token (16 µs of rate) with the word at most two tokens beyond the limit;
/// `T` a token's time, `T0` 10 ms. The main thread (shard 0) drains the bucket at `T0`,
/// taking token 704 (in tokens since the clock's origin) as a near lease, and spends it at
/// `T0 + 2T` (where the next token is earned: its admission takes no next lease). A thread of
/// shard 1, at `T0 + T`, finds its lease empty and the word dry, and takes an advance of
/// token 705, payable at `T0 + 2T`, where it asks again (and, spending its lease to the top,
/// takes the next near lease): its token is admitted in every interleaving. Meanwhile the main thread asks for 2 at a stale reading, 0:
/// refused, with the word dry until 10 ms later — so it publishes `dry_all`, the instant the
/// word it read holds a token, unless a lease holds one. `publish` asks that way `publish`
/// times, the second after the first (and, with `after_first`, shard 1 decides only after the
/// first). Returns shard 1's two verdicts.
fn near_lease_against_publications(
    publish: usize,
    after_first: bool,
) -> (Result<(), tollgate::Denied>, Result<(), tollgate::Denied>) {
    use loom::sync::atomic::{AtomicBool, Ordering};
    const T: u64 = 15_625;
    const T0: u64 = 10_000_000;
    let quota = Quota::new(64, Duration::from_millis(1), 64).unwrap();
    let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
    at(T0);
    assert_eq!(bucket.try_acquire(64), Ok(())); // shard 0, with a near lease of token 704
    at(T0 + 2 * T);
    assert_eq!(bucket.try_acquire(1), Ok(())); // token 704
    let first_done = Arc::new(AtomicBool::new(!after_first));
    // Set once shard 1 decided at `T0 + T`: `Relaxed`, so that it orders nothing (the main
    // thread waits for it only so that its publication may read the word the advance wrote).
    let advanced = Arc::new(AtomicBool::new(false));
    let (b, f, a) = (bucket.clone(), first_done.clone(), advanced.clone());
    let other = thread::spawn(move || {
        while !f.load(Ordering::Acquire) {
            thread::yield_now();
        }
        at(T0 + T);
        let advance = b.try_acquire(1);
        a.store(true, Ordering::Relaxed);
        at(T0 + 2 * T);
        (advance, b.try_acquire(1))
    });
    at(0);
    for n in 0..publish {
        if n + 1 == publish {
            while !advanced.load(Ordering::Relaxed) {
                thread::yield_now();
            }
        }
        assert!(bucket.try_acquire(2).is_err());
        first_done.store(true, Ordering::Release);
    }
    other.join().unwrap()
}

/// A publication must see a near lease being handed out from the state it read: the advance
/// (or the next near lease an admission takes) locks its lease and counts the hand-out before
/// its CAS (`Release`), and the publisher fences its read of the word (`Acquire`) before
/// reading the count and scanning. A publication that passed it would refuse shard 1 at
/// `T0 + 2T` with its token in its lease.
#[test]
fn a_publication_never_passes_a_near_lease_it_read() {
    loom::model(|| {
        let (advance, mine) = near_lease_against_publications(1, false);
        assert!(advance.is_err(), "{advance:?}");
        assert_eq!(mine, Ok(()));
    });
}

/// A second publication skips the scan only if no lease was handed out since the first found
/// them all empty: shard 1's advance comes after the first publication, and the second reads
/// the hand-out count after its read of the word, so that a word raised by the advance comes
/// with the count that makes it scan (and see the lease).
#[test]
fn a_scan_is_never_skipped_past_a_near_lease_being_handed_out() {
    loom::model(|| {
        let (advance, mine) = near_lease_against_publications(2, true);
        assert!(advance.is_err(), "{advance:?}");
        assert_eq!(mine, Ok(()));
    });
}

/// A replacement that read its lease empty never discards an advance installed from the same
/// frontier meanwhile. 125,000 tokens/s (8 µs a token, near leases of up to 2), burst 34, two
/// shards, every decision of the model on shard 0: drained at 0 with a near lease of one
/// token, spent at 16 µs (where the next token is earned, so that admission takes no next
/// lease) — the lease is spent to its top with the word still there (35 tokens' units).
/// Then, racing: the model's thread at its reading of 16 µs asks for 2 and takes the
/// next advance, `[35, 37)`, from that very unit (the frontier goes `35 → LOCKED → 35`); a
/// thread of the same shard at 240 µs (30 tokens earned, the word holding plenty) asks for 1 —
/// from the advance if it sees it, else with a new lease.
/// At 240 µs the shard then drains what is left: whichever ran first, 28 tokens (64 earned or
/// in the burst, 35 spent before the race, 1 by the racer), none stranded. A lock that checked
/// only the frontier let the racer, stalled between reading the empty lease and locking it,
/// replace the advance: 26.
#[test]
fn a_stalled_replacement_never_discards_an_advance() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(())); // and a near lease of one token
        assert!(bucket.try_acquire(1).is_err()); // from the near lease, not yet earned
        assert!(bucket.try_acquire(1).is_err()); // from `dry_until`
        assert!(bucket.try_acquire(2).is_err()); // more than the lease holds
        at(16_000);
        assert_eq!(bucket.try_acquire(1), Ok(())); // spent to its top
        let b = bucket.clone();
        let racer = on_the_same_shard(move || {
            at(240_000);
            b.try_acquire(1)
        });
        assert!(bucket.try_acquire(2).is_err()); // the next advance, or refused by the racer's lease
        assert_eq!(racer.join().unwrap(), Ok(()));
        at(240_000);
        let left = (0..40).filter(|_| bucket.try_acquire(1).is_ok()).count();
        assert_eq!(left, 28);
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// The next near lease an admission takes after spending its shard's lease to the top races a
/// refusal of the same shard that read the lease empty and takes an advance: the lease's lock
/// lets one replace it, the other retries on what it installed. 125,000 tokens/s (8 µs a
/// token), burst 34, two shards, both threads on shard 0 at 8 µs, where one token (34, the
/// near lease taken with the drain) is payable: exactly one is admitted; the shard's next near
/// lease is installed once, so at 240 µs (30 tokens earned) the shard drains what is left,
/// 29 tokens (64 earned or in the burst, 35 spent), none stranded.
#[test]
fn an_admissions_next_lease_races_an_advance_on_its_shard() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(())); // and a near lease of token 34
        let b = bucket.clone();
        let racer = on_the_same_shard(move || {
            at(8_000);
            b.try_acquire(1).is_ok()
        });
        at(8_000);
        let mine = bucket.try_acquire(1).is_ok();
        let theirs = racer.join().unwrap();
        assert_eq!(u32::from(mine) + u32::from(theirs), 1, "one token at 8 µs");
        at(240_000);
        let left = (0..40).filter(|_| bucket.try_acquire(1).is_ok()).count();
        assert_eq!(left, 29);
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// A refill that loses its CAS to another shard tries once more, at once, from the word that
/// won: an admission that spends its shard's near lease to the top takes the next one while a
/// thread of the other shard, its lease empty and the word dry, takes an advance for a cost of
/// two (a one-token refusal takes none at first: it waits for a hand-off). 125,000 tokens/s
/// (8 µs a token), burst 34, two shards (near leases of up to two tokens, the word at most
/// four beyond the limit): drained at 0 on shard 0 with a near lease of token 34. At 8 µs
/// shard 0 spends token 34 (token 35 unearned: its refill takes tokens 35 and 36) while shard 1
/// takes an advance of tokens 35 and 36. Whichever CAS lands first, shard 1 is refused with
/// the exact wait for its own two (37 and 38, payable at 40 µs, after the refill; else 35 and
/// 36 at 24 µs), and at 16 µs shard 0 spends token 35 from its lease, or (the advance first)
/// is refused with the exact wait for token 37, which the refill's retry took (had it given
/// up, shard 0's refusal would have had to take it). At 240 µs (30 tokens earned) the 29
/// tokens left (64 earned or in the burst, 35 spent) are admitted or in the word and the
/// leases, none stranded.
#[test]
fn a_refill_that_lost_its_cas_to_an_advance_tries_once_more() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        let wait = |us| Err(tollgate::Denied::RetryAfter(Duration::from_micros(us)));
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(())); // shard 0, and a near lease of token 34
        let b = bucket.clone();
        // The next thread slot: shard 1.
        let other = thread::spawn(move || {
            at(8_000);
            b.try_acquire(2)
        });
        at(8_000);
        assert_eq!(bucket.try_acquire(1), Ok(())); // token 34, and the refill
        let theirs = other.join().unwrap();
        assert!(
            theirs == wait(32) || theirs == wait(16),
            "shard 1 {theirs:?}"
        );
        // Shard 0's `dry_until`, recorded by the spend before its refill: token 35's instant.
        assert_eq!(bucket.try_acquire(1), wait(8));
        at(16_000);
        let mine = bucket.try_acquire(1);
        if theirs == wait(32) {
            assert_eq!(mine, Ok(())); // token 35, from shard 0's lease
        } else {
            assert_eq!(mine, wait(16)); // token 37, from shard 0's next lease
        }
        at(240_000);
        let left = (0..40).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64;
        let admitted = u64::from(mine.is_ok()) + left;
        assert_eq!(admitted + bucket.available(), 29);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// The safety of the refill by an admission behind the clock: an admission that spends its
/// shard's near lease to the top with its next token already earned reads the word, and takes
/// the shard's next near lease if the word cannot pay that token (another shard took it
/// meanwhile). Whichever order the race takes, nothing is admitted twice, lost or stranded
/// (which of the two takes the next lease, the admission or the shard's next refusal, is the
/// unit test `near_the_limit_refusals_leave_the_central_word_alone`). 125,000
/// tokens/s (8 µs a token), burst 34, two shards: drained at 0 on shard 0 with a near lease of
/// token 34. At 16 µs (tokens 34 and 35 payable) shard 0 spends token 34 while a thread on
/// shard 1 takes token 35 from the word and a near lease of token 36: both are admitted in
/// every order, and at 240 µs (30 tokens earned) the 28 tokens left (64 earned or in the burst,
/// 36 spent) are in the word and the leases — shard 0 drains its lease and the word,
/// `available` counts shard 1's — none stranded.
#[test]
fn an_admission_behind_the_clock_takes_the_next_lease_only_from_a_dry_word() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(())); // shard 0, and a near lease of token 34
        let b = bucket.clone();
        // The next thread slot: shard 1.
        let other = thread::spawn(move || {
            at(16_000);
            b.try_acquire(1)
        });
        at(16_000);
        assert_eq!(bucket.try_acquire(1), Ok(())); // token 34: the lease spent to its top
        assert_eq!(other.join().unwrap(), Ok(()));
        at(240_000);
        let left = (0..40).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64;
        assert_eq!(left + bucket.available(), 28);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// The next near lease taken by an admission on the general path: two threads of one shard
/// spend its near lease of two tokens at once, so that the one whose CAS on the lease loses
/// spends the last token after it and takes the shard's next near lease there, racing the
/// other's. 125,000 tokens/s (8 µs a token), burst 34, two shards: drained at 0 on shard 0
/// with a near lease of token 34, spent at 8 µs by an admission that takes the next, tokens 35
/// and 36, payable at 24 µs. There both threads ask for one: both are admitted in every
/// interleaving, and at 240 µs (30 tokens earned) the shard drains the 27 left (64 earned or
/// in the burst, 37 spent), none stranded.
#[test]
fn spends_after_a_lost_cas_take_the_next_lease_once() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(34), Ok(())); // and a near lease of token 34
        at(8_000);
        assert_eq!(bucket.try_acquire(1), Ok(())); // and the next, tokens 35 and 36
        let b = bucket.clone();
        let racer = on_the_same_shard(move || {
            at(24_000);
            b.try_acquire(1)
        });
        at(24_000);
        assert_eq!(bucket.try_acquire(1), Ok(()));
        assert_eq!(racer.join().unwrap(), Ok(()));
        at(240_000);
        let left = (0..40).filter(|_| bucket.try_acquire(1).is_ok()).count();
        assert_eq!(left, 27);
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}

/// A hand-off racing the waiting shard's own decisions. 125,000 tokens/s (8 µs a token), burst
/// 16, two shards (near leases of one token). At 0 the model's thread (shard 0) takes the burst
/// and a near lease of token 16. A thread of shard 1 asks for a token at 0 (its lease empty,
/// the word dry: it takes no advance, marks its shard as waiting and is told the word's next
/// token, 17 at 16 µs) and again at 16 µs, while at 8 µs the model's thread spends token 16:
/// its refill hands shard 1 the next token (shard 1 waiting) and takes the one after for
/// itself. In every interleaving: shard 1's first wait is 16 µs (its refusal first) or 24 µs
/// (the refill first: token 17 is shard 0's, no hand-off); with 24 µs its second ask is
/// refused from its own line; and at 128 µs (16 tokens earned, none lapsed) what was admitted
/// plus what the bucket and its leases hold is exactly the 32 tokens of the burst and the
/// refill: nothing created, nothing lost, nothing stranded.
#[test]
fn a_hand_off_races_the_waiting_shards_own_decisions() {
    loom::model(|| {
        let quota = Quota::new(125_000, Duration::from_secs(1), 16).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        let wait = |us| Err(tollgate::Denied::RetryAfter(Duration::from_micros(us)));
        at(0);
        assert_eq!(bucket.try_acquire(16), Ok(())); // shard 0, and a near lease of token 16
        let b = bucket.clone();
        // The next thread slot: shard 1.
        let other = thread::spawn(move || {
            at(0);
            let first = b.try_acquire(1);
            at(16_000);
            (first, b.try_acquire(1))
        });
        at(8_000);
        assert_eq!(bucket.try_acquire(1), Ok(())); // token 16, and the refill
        let (first, second) = other.join().unwrap();
        assert!(first == wait(16) || first == wait(24), "{first:?}");
        if first == wait(24) {
            assert_eq!(second, wait(8));
        }
        at(128_000);
        let admitted = 17 + u64::from(second.is_ok());
        assert_eq!(admitted + bucket.available(), 32, "{first:?} {second:?}");
        assert_eq!(bucket.stranded_tokens(), 0.0);
    });
}
