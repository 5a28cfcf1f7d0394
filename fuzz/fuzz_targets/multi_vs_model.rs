//! A `MultiBucket` of 1 to 4 quotas (the 128-bit word for one or two, the sequence lock for
//! three or four), one thread, readings from a manual clock that advance on the scale of one
//! of the quotas' token time, step back, or are older than the latest (stale), against one
//! reference bucket per quota driven in lockstep: `gcra`'s pure decision on a state of its own
//! (what a `Bucket` decides on its word) and, for exact quotas, the exact rational model of the
//! test kit (`testkit/src/model.rs`).
//!
//! Checked, as the docs promise (`MultiBucket`, `Refusal`, `Limiter::decide_snapshots`):
//! * cost 0 admitted and writes nothing; a cost above the smallest burst `ExceedsBurst`, naming
//!   the quota of the smallest burst (the first of equals);
//! * all or nothing: admitted iff every quota's reference admits at that reading, and then
//!   every reference is debited; refused, none is;
//! * a refusal's wait is the longest of the refusing quotas' waits (the exact smallest wait
//!   after which every quota holds the cost), naming that quota (the first of equals);
//! * for exact quotas (until a drain, which the model lacks) the reference is the model's;
//! * `available()` the least any quota holds; `drain()` empties every quota; every quota's
//!   snapshot after `decide_snapshots` is its reference's;
//! * at the end every quota's admissions, at their readings, within its `burst_i + rate_i·Δ`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tollgate::{gcra, Denied, Limiter, Limits, ManualClock, MultiBucket, Quota, Refusal};

#[path = "common/bytes.rs"]
mod bytes;
#[path = "common/multi_cost.rs"]
mod multi_cost;
#[path = "common/multi_quota.rs"]
mod multi_quota;
#[path = "common/units_window.rs"]
mod units_window;
use tollgate_testkit::model::Model;

use bytes::Bytes;
use multi_cost::multi_cost;
use multi_quota::{model_of, quota};

/// The expected decision at `now`: the references' states after it, and the verdict naming the
/// quota that decided a refusal.
fn expect(
    states: &[u64],
    quotas: &[Quota],
    now: u64,
    cost: u64,
) -> (Vec<u64>, Result<(), Refusal>) {
    if cost == 0 {
        return (states.to_vec(), Ok(()));
    }
    let smallest = quotas.iter().map(Quota::burst).min().unwrap();
    if cost > smallest {
        let i = quotas.iter().position(|q| q.burst() == smallest).unwrap();
        return (states.to_vec(), Err(Refusal::new(Denied::ExceedsBurst, i)));
    }
    let mut next = states.to_vec();
    let mut longest: Option<(Duration, usize)> = None;
    for (i, (s, q)) in states.iter().zip(quotas).enumerate() {
        match gcra::try_acquire(*s, now, q, cost) {
            Ok(Some(after)) => next[i] = after,
            Ok(None) => unreachable!("cost > 0"),
            Err(Denied::RetryAfter(d)) => {
                if longest.is_none_or(|l| d > l.0) {
                    longest = Some((d, i));
                }
            }
            Err(e) => panic!("{e:?} from quota {i} for cost {cost} <= its burst"),
        }
    }
    match longest {
        None => (next, Ok(())),
        Some((d, i)) => (states.to_vec(), Err(Refusal::new(Denied::RetryAfter(d), i))),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u64();
    let mut quotas = Vec::new();
    for _ in 0..flags % 4 + 1 {
        let Some(q) = quota(&mut b, quotas.first().copied(), false) else {
            return;
        };
        quotas.push(q);
    }
    let clock = ManualClock::new();
    let policy =
        MultiBucket::with_clock(Limits::new(quotas.iter().copied()).unwrap(), clock.clone());
    let mut states = vec![gcra::FULL; quotas.len()];
    // The exact model of each exact quota, until a drain.
    let mut models: Vec<Option<Model>> = quotas
        .iter()
        .map(|q| q.is_exact().then(|| model_of(q)))
        .collect();
    let steps: Vec<u64> = quotas
        .iter()
        .map(|q| q.refill_time(1).as_nanos().clamp(1, 1 << 40) as u64)
        .collect();
    let mut t: u64 = (flags >> 8) % (1 << 50);
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 512 {
            break;
        }
        let x = b.u64();
        let j = (x >> 56) as usize % quotas.len();
        let (step, burst) = (steps[j], quotas[j].burst());
        let now = match kind % 12 {
            0 | 1 => {
                t = (t + x % (4 * step + 1)).min(1 << 62);
                continue;
            }
            2 => {
                t = (t + x % (2 * burst * step + 1)).min(1 << 62);
                continue;
            }
            3 => {
                t = t.saturating_sub(x % (burst * step + 1));
                continue;
            }
            4 => {
                clock.set(Duration::from_nanos(t));
                let want = states
                    .iter()
                    .zip(&quotas)
                    .map(|(s, q)| gcra::available(*s, t, q))
                    .min()
                    .unwrap();
                assert_eq!(policy.available(), want, "available at {t}");
                continue;
            }
            5 => {
                clock.set(Duration::from_nanos(t));
                policy.drain();
                for (i, q) in quotas.iter().enumerate() {
                    states[i] = states[i].max(gcra::with_tokens(t, q, 0).unwrap());
                    models[i] = None;
                }
                continue;
            }
            6 => t.saturating_sub((x >> 8) % (2 * burst * step + 1)),
            _ => t,
        };
        let smallest = quotas.iter().map(Quota::burst).min().unwrap();
        let cost = multi_cost(x, smallest, burst);
        clock.set(Duration::from_nanos(now));
        let (next, want) = expect(&states, &quotas, now, cost);
        // For exact quotas, the reference is the model's.
        for (i, m) in models.iter().enumerate() {
            let (Some(m), true) = (m, cost > 0 && cost <= smallest) else {
                continue;
            };
            let by_model = m.clone().try_acquire(now, cost).is_ok();
            let by_gcra = gcra::try_acquire(states[i], now, &quotas[i], cost).is_ok();
            assert_eq!(
                by_model, by_gcra,
                "quota {i} {:?}, cost {cost} at {now}",
                quotas[i]
            );
        }
        let label = format!("{quotas:?}: cost {cost} at {now}");
        match (x >> 20) % 4 {
            0 => assert_eq!(
                policy.try_acquire(cost),
                want.map_err(Denied::from),
                "{label}"
            ),
            1 => assert_eq!(policy.decide(&(), cost), want, "{label}"),
            2 => {
                let got = policy.try_acquire_or_snapshot(cost).map_err(|e| e.0);
                assert_eq!(got, want.map_err(Denied::from), "{label}");
            }
            _ => {
                let (got, snaps) = policy.decide_snapshots(&(), cost);
                assert_eq!(got, want, "{label}");
                for (i, (s, q)) in next.iter().zip(&quotas).enumerate() {
                    assert_eq!(
                        snaps.as_slice()[i],
                        gcra::snapshot(*s, now, q),
                        "{label}: quota {i}'s snapshot"
                    );
                }
            }
        }
        if want.is_ok() && cost > 0 {
            admitted.push((now, cost));
            for m in models.iter_mut().flatten() {
                assert_eq!(m.try_acquire(now, cost), Ok(()), "{label}: the model");
            }
        }
        states = next;
    }
    for q in &quotas {
        if let Some(v) = units_window::violation(q, &mut admitted, 0) {
            panic!("{quotas:?}: quota {q:?}: {v}");
        }
    }
});
