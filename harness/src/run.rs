//! Running one round of a cell: one strategy × thread count × regime, timed, sampled and
//! checked against the round's bound (see [`crate::cell`] for what is measured and how
//! [`crate::compare()`] combines the rounds).
//!
//! Every operation goes through `&dyn RateLimiter` (one indirect call, the same for all).

use crate::cell::{new_histogram, Measured, Round};
use crate::rng::SplitMix64;
use crate::{CellResult, CellSpec, Error, RateLimiter, Setup, Strategy};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tollgate::{Clock, DefaultClock};

struct ThreadOut {
    ops: u64,
    admitted_ops: u64,
    hist: Histogram<u64>,
    touched: Vec<bool>,
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
    let (ops, admitted) = if limiter.is_keyed() {
        let touched = &mut out.touched;
        drive(stop, clock, &mut out.hist, || {
            // Multiply-shift range reduction, not `%`: a 64-bit division on every operation
            // would add its latency to every strategy's time and dilute the ratios between them.
            let key = ((u128::from(rng.next()) * u128::from(keys)) >> 64) as u64;
            touched[key as usize] = true;
            limiter.try_acquire_key(key, cost).is_ok()
        })
    } else {
        drive(stop, clock, &mut out.hist, || {
            limiter.try_acquire(cost).is_ok()
        })
    };
    out.ops = ops;
    out.admitted_ops = admitted;
    out
}

/// Runs one cell in one round: builds a fresh limiter on a fresh clock, drains it for the deny regime,
/// runs `spec.threads` threads for `spec.duration`, and measures.
///
/// Errors ([`Error`]) when the quota is invalid, the cost exceeds the burst, the strategy
/// cannot be built with this setup, or a thread cannot be spawned. Over-admission is *not* an
/// error here: it is reported by [`CellResult::over_bound`].
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

    let mut touched = vec![false; if keyed { key_slots } else { 1 }];
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
            }
            touched[key as usize] = true;
        }
    }

    let mut outs = Vec::with_capacity(spec.threads);
    for _ in 0..spec.threads {
        outs.push(ThreadOut {
            ops: 0,
            admitted_ops: 0,
            hist: new_histogram()?,
            touched: if keyed {
                vec![false; key_slots]
            } else {
                Vec::new()
            },
        });
    }

    let go = AtomicBool::new(false);
    let stop = crossbeam_utils::CachePadded::new(AtomicBool::new(false));
    let (outs, seconds) = std::thread::scope(|scope| {
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
    for out in &outs {
        ops += out.ops;
        min_ops = min_ops.min(out.ops);
        max_ops = max_ops.max(out.ops);
        admitted += u128::from(out.admitted_ops) * u128::from(spec.cost);
        hist.add(&out.hist)
            .map_err(|e| Error::Histogram(format!("{e:?}")))?;
        for (t, &o) in touched.iter_mut().zip(&out.touched) {
            *t |= o;
        }
    }
    if !keyed {
        touched[0] = true;
    }
    let touched_keys = touched.iter().filter(|&&t| t).count() as u128;
    let elapsed_ns = end_ns.saturating_sub(start_ns);
    let refill = (u128::from(spec.rate) * u128::from(elapsed_ns)).div_ceil(1_000_000_000);
    let mut bound = touched_keys * (u128::from(spec.burst) + refill);
    // A policy's admissions hold every quota: each quota's bound holds, the tightest reported.
    for q in limiter.extra_quotas() {
        let refill = (u128::from(q.tokens()) * u128::from(elapsed_ns)).div_ceil(q.per().as_nanos());
        bound = bound.min(touched_keys * (u128::from(q.burst()) + refill));
    }
    let threads = outs.len().max(1);
    Ok(Measured {
        round: Round {
            index,
            position,
            ops,
            seconds,
            ops_per_sec: ops as f64 / seconds,
            admitted: u64::try_from(admitted).unwrap_or(u64::MAX),
            bound: u64::try_from(bound).unwrap_or(u64::MAX),
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
