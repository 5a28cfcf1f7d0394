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

/// The same race for a dry spell published because one shard drains the word alone (two
/// admissions in a row that leave it dry suffice under loom), 34 tokens a millisecond, so every
/// spell here is shorter than the 1 ms that publishes any spell. A thread of shard 1 drains the
/// bucket at reading 0 and takes the next token at 30 µs: alone, it publishes, after a scan
/// that finds no lease (and records that none was handed out since). Then, at 10 ms (the bucket
/// full again), the main thread (shard 0) takes 1 and a lease of 2 and asks for 1 twice, while
/// the other takes 31: the third admission of its run, which leaves the word dry and publishes
/// again — without a scan only if no lease was handed out since the last, so here after one
/// that must see the main thread's lock or lease (the hand-out count and the lock come before
/// the lease's CAS, `Release`; the publisher fences its read of the word `Acquire`). All 34
/// tokens of 10 ms
/// are admitted in every interleaving: the main thread's two are never refused while its lease
/// holds them.
#[test]
fn a_shard_alone_never_publishes_over_a_lease_being_taken() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        let quota = Quota::new(34, Duration::from_millis(1), 34).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        let first_done = Arc::new(AtomicBool::new(false));
        let (b, done) = (bucket.clone(), first_done.clone());
        let alone = thread::spawn(move || {
            at(0);
            assert_eq!(b.try_acquire(34), Ok(()));
            at(30_000);
            assert_eq!(b.try_acquire(1), Ok(()));
            done.store(true, Ordering::Release);
            // As below: the main thread may go first here without spending a preemption.
            thread::yield_now();
            at(10_000_000);
            if b.try_acquire(31).is_ok() {
                31
            } else {
                0
            }
        });
        while !first_done.load(Ordering::Acquire) {
            thread::yield_now();
        }
        at(10_000_000);
        the_main_threads_three(&bucket, alone);
    });
}

/// A scan must never record "every lease empty" for a lease being handed out: the count of
/// hand-outs is raised after the lease's lock (and before its `Release` CAS), and read
/// `Acquire`. Shard 0 takes 1 and a lease of 2 at reading 0, then pools 33; at a stale reading
/// it is refused and publishes after a scan. Meanwhile shard 1, at 1 s, takes 1 and a lease of 2.
/// Then shard 0 at 1 s drains the word and publishes again, skipping the scan only if no lease
/// was handed out since the last one. Shard 1's two requests at 1 s are then paid from its
/// lease in every interleaving. Found by a second read (2026-12-03): with the count raised
/// before the lock, the scan could read the count and then the lease before its lock, and the
/// second publication skipped the scan over a lease holding 2 tokens.
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

/// The same window with an advance, every thread's readings moving forward (64 tokens a
/// millisecond, a token every 15.6 µs, so advances are on): shard 0 drains the bucket and admits
/// alone, publishing after a scan; shard 1, hungry, takes an advance from the state shard 0's
/// admission left. The next admission of shard 0 may skip the scan only if that advance shows
/// in the count; in every interleaving three of the five requests are admitted (the bound at
/// these readings), shard 1's last from its advance if it holds one.
#[test]
fn a_scan_never_passes_an_advance_being_handed_out() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        const T: u64 = 15_625; // a token
        let quota = Quota::new(64, Duration::from_millis(1), 64).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(64), Ok(())); // shard 0
        let (b15, a46) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (b, f1, f2) = (bucket.clone(), b15.clone(), a46.clone());
        let other = thread::spawn(move || {
            at(0);
            assert!(b.try_acquire(1).is_err());
            assert!(b.try_acquire(1).is_err()); // from `dry_until`: hungry
            at(T);
            let r15 = b.try_acquire(1);
            f1.store(true, Ordering::Release);
            while !f2.load(Ordering::Acquire) {
                thread::yield_now();
            }
            at(3 * T);
            let r46 = b.try_acquire(1);
            (r15, r46)
        });
        at(T);
        let a15 = bucket.try_acquire(1);
        while !b15.load(Ordering::Acquire) {
            thread::yield_now();
        }
        at(2 * T);
        let a31 = bucket.try_acquire(1);
        at(3 * T);
        let a46_ = bucket.try_acquire(1);
        a46.store(true, Ordering::Release);
        let (r15, r46) = other.join().unwrap();
        let all = [a15, a31, a46_, r15, r46];
        let n = all.iter().filter(|r| r.is_ok()).count();
        assert_eq!(n, 3, "{all:?}");
    });
}

/// The advance's CAS on its own: nothing but the word orders the advance before the publication
/// that reads it (no flag from the advancing thread to the publisher after its advance). 64
/// tokens a millisecond, burst 64, a token every `T`; states below in tokens' time.
///
/// Shard 1 is refused twice at 0 (hungry). Shard 0 drains the bucket at 0 and admits alone at
/// `T` (a publication after a scan that finds every lease empty) and at `2T`. Meanwhile shard 1
/// asks at `2T`: when it finds the word dry (state 66), it takes an advance of the next token,
/// `[66, 67)`, payable from `3T` on. Shard 0 admits at `4T` from the state after it (67 → 68)
/// and may publish `5T` — skipping the scan only if the count of hand-outs it reads misses
/// nothing: the advance counted, then its CAS `Release`, and the publisher's `Acquire` fence
/// after its own CAS, which read that state. Then shard 1 asks at `3T`: refused only when its
/// shard holds no token payable then (with the advance's CAS `Relaxed`, loom finds the
/// publication of `5T` over the advance, and a refusal while `available()` is 1).
#[test]
fn a_publication_never_passes_an_advance_it_read() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        const T: u64 = 15_625;
        let quota = Quota::new(64, Duration::from_millis(1), 64).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(64), Ok(())); // shard 0 (the main thread's slot)
        let flags = Arc::new([(); 3].map(|()| AtomicBool::new(false)));
        let (ready, go, done) = (0, 1, 2);
        let (b, f) = (bucket.clone(), flags.clone());
        let other = thread::spawn(move || {
            at(0);
            assert!(b.try_acquire(1).is_err()); // from the word: `dry_until` T
            assert!(b.try_acquire(1).is_err()); // from `dry_until`: hungry
            f[ready].store(true, Ordering::Release);
            while !f[go].load(Ordering::Acquire) {
                thread::yield_now();
            }
            at(2 * T);
            let _ = b.try_acquire(1); // an advance, an admission or a refusal
            while !f[done].load(Ordering::Acquire) {
                thread::yield_now();
            }
            at(3 * T);
            let last = b.try_acquire(1);
            (last, b.available())
        });
        while !flags[ready].load(Ordering::Acquire) {
            thread::yield_now();
        }
        at(T);
        assert_eq!(bucket.try_acquire(1), Ok(())); // alone: publishes 2T after a scan
        flags[go].store(true, Ordering::Release);
        at(2 * T);
        let _ = bucket.try_acquire(1);
        at(4 * T);
        let _ = bucket.try_acquire(1);
        flags[done].store(true, Ordering::Release);
        let (last, available) = other.join().unwrap();
        assert!(
            last.is_ok() || available == 0,
            "{last:?} with {available} available"
        );
    });
}

/// A replacement that read its lease empty never discards an advance installed from the same
/// frontier meanwhile (a review's finding, 2026-12-04). 125,000 tokens/s (8 µs a token,
/// advances of up to 2), burst 34, two shards, every decision of the model on shard 0: drained
/// at 0, hungry, an advance of one token taken and spent at 8 µs — the lease is spent to its
/// top with the word still there (35 tokens' units). Then, racing: the model's thread at its
/// reading of 8 µs asks for 2 and takes the next advance, `[35, 37)`, from that very unit (the
/// frontier goes `35 → LOCKED → 35`); a thread of the same shard at 240 µs (30 tokens earned,
/// the word holding plenty) asks for 1 — from the advance if it sees it, else with a new lease.
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
        assert_eq!(bucket.try_acquire(34), Ok(()));
        assert!(bucket.try_acquire(1).is_err()); // from the word
        assert!(bucket.try_acquire(1).is_err()); // from `dry_until`: hungry
        assert!(bucket.try_acquire(2).is_err()); // an advance of one token
        at(8_000);
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

/// A *chain* starts from a state read before the hand-outs count its publication checks, so
/// that no advance written before that state escapes the check. 64 tokens a millisecond, burst
/// 64, a token every `T`, two shards. Shard 1 is refused twice at 0 (hungry). Shard 0 drains
/// the bucket at 0 and admits alone at `T`: it publishes `dry_all` after a scan and starts its
/// chain. Racing that, shard 1 asks at `T`: it takes that token, or finds the word dry (state
/// 65) and takes an advance of the next one, `[65, 66)`, payable from `2T`. Shard 0 then admits
/// at `3T` — through its chain, which publishes without a scan. Then shard 1 asks at `3T`: it is
/// refused only when nothing is payable to it. With the chain's state read after the count, loom
/// finds a chain from the advance's top (66) that publishes `4T` over the advance's token.
#[test]
fn a_chain_never_starts_past_an_advance() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    loom::model(|| {
        const T: u64 = 15_625;
        let quota = Quota::new(64, Duration::from_millis(1), 64).unwrap();
        let bucket = Arc::new(ShardedBucket::with_clock(quota, 2, PerThread));
        at(0);
        assert_eq!(bucket.try_acquire(64), Ok(())); // shard 0 (the main thread's slot)
        let done = Arc::new(AtomicBool::new(false));
        let (b, f) = (bucket.clone(), done.clone());
        let other = thread::spawn(move || {
            at(0);
            assert!(b.try_acquire(1).is_err()); // from the word: `dry_until` T
            assert!(b.try_acquire(1).is_err()); // from `dry_until`: hungry
            at(T);
            let _ = b.try_acquire(1); // an admission, or an advance
            while !f.load(Ordering::Acquire) {
                thread::yield_now();
            }
            at(3 * T);
            let last = b.try_acquire(1);
            (last, b.available())
        });
        at(T);
        let _ = bucket.try_acquire(1); // alone: publishes after a scan, starts the chain
        at(3 * T);
        let _ = bucket.try_acquire(1);
        done.store(true, Ordering::Release);
        let (last, available) = other.join().unwrap();
        assert!(
            last.is_ok() || available == 0,
            "{last:?} with {available} available"
        );
    });
}
