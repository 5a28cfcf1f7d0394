//! The exact reference model of the continuous token bucket (i128 rational arithmetic) and a
//! checker that drives a `Bucket` and the model through the same operations. Shared by the
//! proptest suite (`tests/model.rs`) and the fuzzer (`fuzz/`), which includes it by path.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;
use tollgate::{Bucket, Denied, ManualClock, Quota};

/// The continuous token bucket: balance = min(burst, balance + rate * dt), admit iff
/// balance >= cost. The state is the theoretical arrival time `z` (in tokens since the origin)
/// kept as `z * per` so that everything is an integer: earned(t) * per = t * tokens.
#[derive(Debug, Clone)]
pub struct Model {
    tokens: i128,
    per: i128,
    burst: i128,
    /// z * per, where balance(t) = min(burst, t * tokens / per - z).
    zp: i128,
}

impl Model {
    pub fn new(tokens: u64, per_ns: u64, burst: u64) -> Model {
        let (tokens, per, burst) = (i128::from(tokens), i128::from(per_ns), i128::from(burst));
        Model {
            tokens,
            per,
            burst,
            zp: -burst * per,
        }
    }

    /// balance * per at `t` (may be negative: never, for this model without reservations).
    pub fn balance_p(&self, t: u64) -> i128 {
        (i128::from(t) * self.tokens - self.zp).min(self.burst * self.per)
    }

    pub fn available(&self, t: u64) -> u64 {
        (self.balance_p(t).max(0) / self.per) as u64
    }

    pub fn try_acquire(&mut self, t: u64, cost: u64) -> Result<(), Denied> {
        let cost = i128::from(cost);
        if cost == 0 {
            return Ok(());
        }
        if cost > self.burst {
            return Err(Denied::ExceedsBurst);
        }
        if self.balance_p(t) >= cost * self.per {
            self.zp = self
                .zp
                .max(i128::from(t) * self.tokens - self.burst * self.per)
                + cost * self.per;
            Ok(())
        } else {
            // Smallest integer t' with t' * tokens - zp >= cost * per.
            let need = cost * self.per + self.zp;
            let at = (need + self.tokens - 1).div_euclid(self.tokens);
            Err(Denied::RetryAfter(Duration::from_nanos(
                (at - i128::from(t)) as u64,
            )))
        }
    }
}

/// One step of a schedule.
#[derive(Debug, Clone)]
pub enum Op {
    /// Move the clock forward by this many nanoseconds.
    Advance(u64),
    /// Set the clock (may move backwards).
    Set(u64),
    /// `try_acquire(cost)`.
    Acquire(u64),
    /// `available()`.
    Available,
}

/// Runs `ops` on a bucket and on the model. With `exact`, every verdict, `RetryAfter` and
/// `available()` must be identical; otherwise the bucket must never admit what the model refuses.
/// Either way, on a monotone schedule, admitted cost in any window stays within burst + rate * dt.
pub fn check(tokens: u64, per: u64, burst: u64, ops: &[Op], exact: bool) -> Result<(), String> {
    let quota = Quota::new(tokens, Duration::from_nanos(per), burst).unwrap();
    if exact && !quota.is_exact() {
        return Err(format!("{quota:?} is not exact"));
    }
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota, clock.clone());
    let mut model = Model::new(tokens, per, burst);
    let mut t = 0u64;
    // (time, cost) of every admission, for the window bound.
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut monotone = true;
    for op in ops {
        match *op {
            Op::Advance(d) => t += d,
            Op::Set(to) => {
                monotone &= to >= t;
                t = to
            }
            Op::Acquire(cost) => {
                clock.set(Duration::from_nanos(t));
                let got = bucket.try_acquire(cost);
                if exact {
                    let want = model.try_acquire(t, cost);
                    if got != want {
                        return Err(format!("t={t} cost={cost}: bucket {got:?}, model {want:?}"));
                    }
                } else if got.is_ok() {
                    // Never more lenient than the continuous bucket.
                    if model.try_acquire(t, cost).is_err() {
                        return Err(format!("over-admitted cost {cost} at t={t}"));
                    }
                }
                if got.is_ok() && cost > 0 {
                    admitted.push((t, cost));
                }
            }
            Op::Available => {
                clock.set(Duration::from_nanos(t));
                if exact {
                    let (got, want) = (bucket.available(), model.available(t));
                    if got != want {
                        return Err(format!("available at t={t}: bucket {got}, model {want}"));
                    }
                }
            }
        }
        if !exact {
            // Keep the model in step with what the bucket decided.
            clock.set(Duration::from_nanos(t));
            model = resync(&bucket, model, t);
        }
    }
    if monotone {
        // Window bound: admitted cost in [a, b] <= burst + rate * (b - a).
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for &(tb, cost) in &admitted[i..] {
                sum += u128::from(cost);
                let bound = u128::from(burst) * u128::from(per)
                    + u128::from(tb - admitted[i].0) * u128::from(tokens);
                if sum * u128::from(per) > bound {
                    return Err(format!(
                        "window bound broken: {sum} tokens from t={}",
                        admitted[i].0
                    ));
                }
            }
        }
    }
    Ok(())
}

/// For inexact quotas the model only checks "never more lenient"; it cannot follow the rounding,
/// so after each step it is reset to agree with the bucket's balance, rounded toward more tokens.
fn resync(bucket: &Bucket<ManualClock>, mut model: Model, t: u64) -> Model {
    let avail = i128::from(bucket.available());
    // Model balance in [avail, avail + 1): take the lenient end, so the check above stays sound.
    let lenient = ((avail + 1) * model.per - 1).min(model.burst * model.per);
    if model.balance_p(t) > lenient {
        model.zp = i128::from(t) * model.tokens - lenient;
    }
    model
}
