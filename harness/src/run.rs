//! Running one round of a cell: one strategy × thread count × regime, timed, sampled and
//! checked against the round's bound (see [`crate::cell`] for what is measured and how
//! [`crate::compare()`] combines the rounds).
//!
//! Every operation goes through `&dyn RateLimiter` (one indirect call, the same for all).
//!
//! # Per-key recording
//! For a keyed strategy every thread counts its admitted operations per key in an array of its
//! own (one `u64` per key, [`KEY_COUNT_BYTES`]; no atomics, nothing shared, so the recording
//! costs every keyed strategy the same). The arrays take `threads × keys ×` 8 bytes, at most
//! [`MAX_KEY_RECORDING_BYTES`]: a larger plan is refused with an [`Error::Plan`] before anything
//! runs, and an allocation that fails below the cap is an error too, never an abort.

use crate::cell::{new_histogram, BusiestKey, Counters, Measured, Round};
use crate::rng::SplitMix64;
use crate::{CellResult, CellSpec, Error, RateLimiter, Setup, Strategy};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tollgate::{Clock, DefaultClock};

/// Bytes each thread's per-key admission count takes (a `u64`: one key of one thread cannot
/// overflow it within the longest round, 1 hour).
pub const KEY_COUNT_BYTES: u64 = 8;

/// The most memory the per-key admission counts of a keyed strategy's round may take, all
/// threads together: 4 GiB (e.g. `--keys 16777216` at up to 31 threads, `--keys 1000000` at up
/// to 536). A plan beyond it is refused with an [`Error::Plan`] naming `--threads` and `--keys`.
///
/// ```
/// use tollgate_bench::run::{key_recording_bytes, MAX_KEY_RECORDING_BYTES};
/// assert!(key_recording_bytes(4, 1000).unwrap() < MAX_KEY_RECORDING_BYTES);
/// assert!(key_recording_bytes(512, 1 << 24).unwrap() > MAX_KEY_RECORDING_BYTES);
/// ```
pub const MAX_KEY_RECORDING_BYTES: u64 = 4 << 30;

/// Elements of padding on either side of a thread's counts (128 bytes, two cache lines): the
/// arrays of two threads never share a line, however small, so counting never bounces a line
/// between cores.
const PAD: usize = 16;

/// The bytes the per-key admission counts of a round of a keyed strategy take: each of
/// `threads` threads counts every one of `keys` keys (plus its padding), and the deny regime's
/// drain marks every key once. `None` when the size does not fit a `u64`.
///
/// ```
/// use tollgate_bench::run::key_recording_bytes;
/// assert_eq!(key_recording_bytes(2, 1000), Some(2 * (1000 + 32) * 8 + 1000));
/// assert_eq!(key_recording_bytes(usize::MAX, u64::MAX), None);
/// ```
pub fn key_recording_bytes(threads: usize, keys: u64) -> Option<u64> {
    let per_thread = keys
        .checked_add(2 * PAD as u64)?
        .checked_mul(KEY_COUNT_BYTES)?;
    u64::try_from(threads)
        .ok()?
        .checked_mul(per_thread)?
        .checked_add(keys)
}

/// `bytes` for a message: `1.5 GiB`, `12.0 MiB`, `800 bytes`.
fn human_bytes(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// Refuses, with an [`Error::Plan`] naming `--threads` and `--keys`, a keyed round whose
/// per-key counts would take more than [`MAX_KEY_RECORDING_BYTES`] (or overflow).
pub(crate) fn check_key_recording(threads: usize, keys: u64) -> Result<(), Error> {
    let cap = human_bytes(MAX_KEY_RECORDING_BYTES);
    let needed = match key_recording_bytes(threads, keys) {
        Some(b) if b <= MAX_KEY_RECORDING_BYTES => return Ok(()),
        Some(b) => human_bytes(b),
        None => "more than 16 EiB".to_owned(),
    };
    Err(Error::Plan(format!(
        "--threads {threads} with --keys {keys}: a keyed strategy's per-key admission counts \
         ({KEY_COUNT_BYTES} bytes per key per thread) would take {needed}, over the {cap} cap; \
         lower --threads or --keys"
    )))
}

/// A zeroed vector of `len` counts, or an [`Error::Plan`] when the allocation fails.
fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| {
        Error::Plan(format!(
            "cannot allocate {what} ({len} elements): {e}; lower --threads or --keys"
        ))
    })?;
    v.resize(len, T::default());
    Ok(v)
}

struct ThreadOut {
    ops: u64,
    admitted_ops: u64,
    /// What the sharded bucket wrote to shared lines for this thread's decisions.
    counts: tollgate::counters::Counts,
    hist: Histogram<u64>,
    /// Keyed strategies: admitted operations per key, at `PAD..PAD + keys` (empty otherwise).
    per_key: Vec<u64>,
}

/// Runs batches of 64 operations, the first of each timed, until `stop` (at least one batch).
#[inline]
fn drive(
    stop: &AtomicBool,
    clock: &DefaultClock,
    hist: &mut Histogram<u64>,
    mut op: impl FnMut() -> bool,
) -> (u64, u64) {
    let (mut ops, mut admitted) = (0u64, 0u64);
    // At least one batch, even if the stop signal came before this thread got a core.
    loop {
        let t0 = clock.now();
        let ok = op();
        let t1 = clock.now();
        hist.saturating_record(t1.saturating_sub(t0));
        admitted += u64::from(ok);
        for _ in 0..63 {
            admitted += u64::from(op());
        }
        ops += 64;
        if stop.load(Ordering::Relaxed) {
            return (ops, admitted);
        }
    }
}

/// What every thread of a cell shares.
#[derive(Clone, Copy)]
struct Shared<'a> {
    limiter: &'a dyn RateLimiter,
    cost: u64,
    keys: u64,
    clock: &'a DefaultClock,
    go: &'a AtomicBool,
    stop: &'a AtomicBool,
}

fn worker(sh: Shared<'_>, mut out: ThreadOut, mut rng: SplitMix64) -> ThreadOut {
    let Shared {
        limiter,
        cost,
        keys,
        clock,
        go,
        stop,
    } = sh;
    while !go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    tollgate::counters::take();
    let (ops, admitted) = if limiter.is_keyed() {
        let per_key = &mut out.per_key[PAD..];
        drive(stop, clock, &mut out.hist, || {
            // Multiply-shift range reduction, not `%`: a 64-bit division on every operation
            // would add its latency to every strategy's time and dilute the ratios between them.
            let key = ((u128::from(rng.next()) * u128::from(keys)) >> 64) as u64;
            let ok = limiter.try_acquire_key(key, cost).is_ok();
            per_key[key as usize] += u64::from(ok);
            ok
        })
    } else {
        drive(stop, clock, &mut out.hist, || {
            limiter.try_acquire(cost).is_ok()
        })
    };
    out.ops = ops;
    out.admitted_ops = admitted;
    out.counts = tollgate::counters::take();
    out
}

/// Runs one cell in one round: builds a fresh limiter on a fresh clock, drains it for the deny regime,
/// runs `spec.threads` threads for `spec.duration`, and measures.
///
/// Errors ([`Error`]) when the quota is invalid, the cost exceeds the burst, the strategy
/// cannot be built with this setup, a keyed strategy's per-key counts would take more than
/// [`MAX_KEY_RECORDING_BYTES`] or cannot be allocated, or a thread cannot be spawned.
/// Over-admission is *not* an error here: it is reported by [`CellResult::over_bound`] (for a
/// keyed strategy, per key as well as summed over the keys).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{run_cell, strategies, CellSpec, Regime};
/// let spec = CellSpec::new(2, Regime::Mixed, Duration::from_millis(10));
/// let r = run_cell(&strategies::by_name("std-mutex").unwrap(), &spec).unwrap();
/// assert_eq!((r.threads, r.regime, r.keys), (2, Regime::Mixed, 1));
/// assert!(r.ops > 0 && r.admitted <= r.bound);
/// assert_eq!((r.rounds.len(), r.ops_per_sec_min, r.ops_per_sec_max), (1, r.ops_per_sec, r.ops_per_sec));
/// ```
pub fn run_cell(strategy: &Strategy, spec: &CellSpec) -> Result<CellResult, Error> {
    let measured = run_round(strategy, spec, 0, 0)?;
    CellResult::from_rounds(strategy, spec, vec![measured])
}

/// One round of one cell: round number `index`, the strategy's `position` in the round's order.
pub(crate) fn run_round(
    strategy: &Strategy,
    spec: &CellSpec,
    index: usize,
    position: usize,
) -> Result<Measured, Error> {
    let quota = spec.checked_quota()?;
    let key_slots = usize::try_from(spec.keys).map_err(|_| {
        Error::Plan(format!(
            "--keys {} is too many for this platform",
            spec.keys
        ))
    })?;
    let clock = DefaultClock::default();
    // Clocks may share an origin (tollgate's `QuantaClock` is process-wide): the limiter's life
    // starts now, before it is built, so measuring from here keeps the bound an upper bound.
    let start_ns = clock.now();
    let setup = Setup {
        quota,
        keys: spec.keys,
        clock,
    };
    let limiter = strategy.build(&setup).map_err(|source| Error::Strategy {
        name: strategy.name().to_owned(),
        regime: spec.regime.name(),
        source,
    })?;
    let limiter: &dyn RateLimiter = &*limiter;
    let keyed = limiter.is_keyed();
    let keys = if keyed { spec.keys } else { 1 };
    if keyed {
        check_key_recording(spec.threads, spec.keys)?;
    }
    let key_slots = if keyed { key_slots } else { 0 };

    // Everything the threads record into is allocated before the drain, so that the drained
    // buckets refill for no longer than they must before the threads start.
    let mut outs = Vec::new();
    outs.try_reserve_exact(spec.threads)
        .map_err(|e| Error::Plan(format!("--threads {}: cannot allocate: {e}", spec.threads)))?;
    for i in 0..spec.threads {
        outs.push(ThreadOut {
            ops: 0,
            admitted_ops: 0,
            counts: tollgate::counters::Counts::default(),
            hist: new_histogram()?,
            per_key: if keyed {
                zeroed(
                    key_slots + 2 * PAD,
                    &format!("thread {i}'s per-key admission counts"),
                )?
            } else {
                Vec::new()
            },
        });
    }

    // Keyed, drained regime: which keys the drain admitted their burst on.
    let mut drained: Vec<bool> = if keyed && spec.regime.starts_drained() {
        zeroed(key_slots, "the drain's per-key record")?
    } else {
        Vec::new()
    };
    let mut admitted = 0u128;
    if spec.regime.starts_drained() {
        for key in 0..keys {
            let r = if keyed {
                limiter.try_acquire_key(key, spec.burst)
            } else {
                limiter.try_acquire(spec.burst)
            };
            if r.is_ok() {
                admitted += u128::from(spec.burst);
                if keyed {
                    drained[key as usize] = true;
                }
            }
        }
    }

    let go = AtomicBool::new(false);
    let stop = crossbeam_utils::CachePadded::new(AtomicBool::new(false));
    let (mut outs, seconds) = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(spec.threads);
        let mut failed = None;
        for (i, out) in outs.into_iter().enumerate() {
            let mut rng =
                SplitMix64(spec.seed ^ (i as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
            rng.next();
            let shared = Shared {
                limiter,
                cost: spec.cost,
                keys,
                clock: &clock,
                go: &go,
                stop: &stop,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{i}"))
                .spawn_scoped(scope, move || worker(shared, out, rng));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    failed = Some(Error::Thread(format!("cannot spawn thread {i}: {e}")));
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        go.store(true, Ordering::Release);
        let start = Instant::now();
        if failed.is_none() {
            std::thread::sleep(spec.duration);
        }
        stop.store(true, Ordering::Relaxed);
        let mut outs = Vec::with_capacity(handles.len());
        for h in handles {
            match h.join() {
                Ok(out) => outs.push(out),
                Err(_) => failed = Some(Error::Thread("a benchmark thread panicked".to_owned())),
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        match failed {
            Some(e) => Err(e),
            None => Ok((outs, seconds)),
        }
    })?;
    let end_ns = clock.now();

    let mut hist = new_histogram()?;
    let (mut ops, mut min_ops, mut max_ops) = (0u64, u64::MAX, 0u64);
    let (mut min_admitted, mut max_admitted) = (u64::MAX, 0u64);
    let mut counts = Counters::default();
    for out in &outs {
        ops += out.ops;
        min_ops = min_ops.min(out.ops);
        max_ops = max_ops.max(out.ops);
        min_admitted = min_admitted.min(out.admitted_ops);
        max_admitted = max_admitted.max(out.admitted_ops);
        counts.add(&out.counts, out.ops, out.admitted_ops);
        admitted += u128::from(out.admitted_ops) * u128::from(spec.cost);
        hist.add(&out.hist)
            .map_err(|e| Error::Histogram(format!("{e:?}")))?;
    }
    let elapsed_ns = end_ns.saturating_sub(start_ns);
    let refill = (u128::from(spec.rate) * u128::from(elapsed_ns)).div_ceil(1_000_000_000);
    // One key's bound (the whole limiter's, unkeyed). A policy's admissions hold every quota:
    // each quota's bound holds, the tightest reported.
    let mut key_bound = u128::from(spec.burst) + refill;
    for q in limiter.extra_quotas() {
        let refill = (u128::from(q.tokens()) * u128::from(elapsed_ns)).div_ceil(q.per().as_nanos());
        key_bound = key_bound.min(u128::from(q.burst()) + refill);
    }
    let (keys_admitting, busiest_key) = if keyed {
        let busiest = sum_per_key(&mut outs, &drained, spec);
        (busiest.keys_admitting, Some(busiest))
    } else {
        (1, None)
    };
    let bound = u128::from(keys_admitting) * key_bound;
    let saturate = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
    let threads = outs.len().max(1);
    Ok(Measured {
        round: Round {
            index,
            position,
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            admitted: saturate(admitted),
            bound: saturate(bound),
            thread_admitted_min: if outs.is_empty() { 0 } else { min_admitted },
            thread_admitted_max: max_admitted,
            counters: limiter.counts_shared_writes().then_some(counts),
            busiest_key: busiest_key.map(|b| BusiestKey {
                key: b.key,
                admitted: saturate(b.admitted),
                bound: saturate(key_bound),
            }),
        },
        keys,
        ns_per_op: if ops == 0 {
            f64::INFINITY
        } else {
            seconds * 1e9 * threads as f64 / ops as f64
        },
        fairness: if max_ops == 0 {
            1.0
        } else {
            min_ops as f64 / max_ops as f64
        },
        hist,
    })
}

/// What the per-key counts of a round add up to.
struct PerKey {
    /// The key that admitted the most tokens (the lowest of a tie; 0 when none admitted).
    key: u64,
    /// Its tokens.
    admitted: u128,
    /// Keys that admitted at least once.
    keys_admitting: u64,
}

/// Adds every thread's per-key counts into the first thread's (in place: no second array) and
/// finds the key that admitted the most tokens, the drain's included.
fn sum_per_key(outs: &mut [ThreadOut], drained: &[bool], spec: &CellSpec) -> PerKey {
    let mut sum = PerKey {
        key: 0,
        admitted: 0,
        keys_admitting: 0,
    };
    let Some((first, rest)) = outs.split_first_mut() else {
        return sum;
    };
    let total = &mut first.per_key[PAD..];
    for out in rest {
        for (t, &n) in total.iter_mut().zip(&out.per_key[PAD..]) {
            // Physically out of reach (2^64 operations); saturating rather than wrapping keeps
            // an impossible overflow from ever hiding admissions.
            *t = t.saturating_add(n);
        }
    }
    for (key, &n) in total.iter().take(spec.keys as usize).enumerate() {
        let drain = if drained.get(key).copied().unwrap_or(false) {
            u128::from(spec.burst)
        } else {
            0
        };
        let tokens = u128::from(n) * u128::from(spec.cost) + drain;
        if tokens > 0 {
            sum.keys_admitting += 1;
        }
        if tokens > sum.admitted {
            sum.admitted = tokens;
            sum.key = key as u64;
        }
    }
    sum
}
