//! The exact reference model of the continuous token bucket (i128 rational arithmetic) and a
//! checker that drives a `Bucket` and the model through the same operations. Shared by the
//! proptest suite (`tests/model.rs`) and the fuzzer (`fuzz/`), which includes it by path.
//!
//! The model also reserves (taking ahead of the refill), cancels (all or nothing: only if the
//! state is still the one the reservation left and no reconfiguration came since, restoring the
//! one before it) and rescales
//! (the smaller of the tokens carried and what the new rate earns since the bucket was last
//! empty). The checker records every admission with its instant (a kept reservation, and
//! `try_acquire_for`, at the due instant) and checks every window of every quota era.

use crate::decide::Snapshotting;
use crate::window::WindowChecker;
use std::time::Duration;
use tollgate::{Bucket, Clock, Denied, ManualClock, Quota, Reservation};

/// The bucket's horizon (`quota::HORIZON_NS`): 100 Julian years of nanoseconds.
const HORIZON_NS: i128 = 3_155_760_000_000_000_000;

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
            // Past the horizon (100 years) the bucket reads the clock as stopped: never.
            if at > HORIZON_NS {
                return Err(Denied::RetryAfter(Duration::MAX));
            }
            Err(Denied::RetryAfter(Duration::from_nanos(
                (at - i128::from(t)) as u64,
            )))
        }
    }
}

impl Model {
    /// Takes `cost` now, possibly ahead of the refill: `(zp after, due instant)`.
    pub fn reserve(&mut self, t: u64, cost: u64) -> Result<(i128, u64), Denied> {
        let c = i128::from(cost);
        if c > self.burst {
            return Err(Denied::ExceedsBurst);
        }
        let due = if c == 0 || self.balance_p(t) >= c * self.per {
            t
        } else {
            // Smallest integer t' with t' * tokens - zp >= cost * per.
            (c * self.per + self.zp).div_euclid(self.tokens) as u64
                + u64::from((c * self.per + self.zp).rem_euclid(self.tokens) != 0)
        };
        if c > 0 {
            self.zp = self
                .zp
                .max(i128::from(t) * self.tokens - self.burst * self.per)
                + c * self.per;
        }
        Ok((self.zp, due))
    }

    /// The state (`z · per`), as [`reserve`](Model::reserve) returns it: what a reservation's
    /// cancellation restores.
    pub fn state(&self) -> i128 {
        self.zp
    }

    /// Gives back a reservation if the state is still `after` and it is not past due: the state
    /// from `before` it comes back (as if it never happened; a full bucket comes back full).
    pub fn cancel(&mut self, t: u64, before: i128, after: i128, due: u64, cost: u64) {
        if cost > 0 && due >= t && self.zp == after {
            self.zp = before;
        }
    }

    /// Switches to `tokens / per_ns` with `burst` at `t`: the balance carries over, capped at
    /// both bursts; in debt, at least until the instant the old bucket is empty again (a debt
    /// keeps its due instant). Rounds toward fewer tokens on the model's own grid (`1 / per`).
    pub fn rescale(&mut self, t: u64, tokens: u64, per_ns: u64, burst: u64) {
        let (t2, p2, b2) = (i128::from(tokens), i128::from(per_ns), i128::from(burst));
        let t = i128::from(t);
        let (t1, p1, b1) = (self.tokens, self.per, self.burst);
        let unc = t * t1 - self.zp; // balance * p1, uncapped
        let mut b = mul_div_floor(unc.min(b1 * p1), p2, p1).min(b2 * p2);
        if unc < 0 {
            // Empty again at zp / t1 > t; the new rate's balance * p2 is (t − that) * t2, that
            // is unc * t2 / t1.
            b = b.min(mul_div_floor(unc, t2, t1));
        }
        *self = Model {
            tokens: t2,
            per: p2,
            burst: b2,
            zp: t * t2 - b,
        };
    }
}

/// Records an admission at `at`, unless `at` is past the horizon: the bucket reads its clock as
/// stopped there, so tokens due later never come due.
fn admit(w: &WindowChecker, at: u64, tokens: u64) {
    if i128::from(at) <= HORIZON_NS {
        w.admit(at, tokens);
    }
}

/// `floor(a · m / d)` for `d > 0` without forming `a · m` (which may not fit an i128).
fn mul_div_floor(a: i128, m: i128, d: i128) -> i128 {
    a.div_euclid(d) * m + (a.rem_euclid(d) * m).div_euclid(d)
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
    /// `reserve(cost)`, held until a `Resolve`.
    Reserve(u64),
    /// Resolves held reservation `i % held` (if any): cancel it, or keep it (`true`).
    Resolve(usize, bool),
    /// `try_acquire_for(cost, timeout_ns)` (sleeps the manual clock when admitted).
    AcquireFor(u64, u64),
    /// `set_quota(tokens, per_ns, burst)` (skipped if that quota is invalid).
    SetQuota(u64, u64, u64),
}

/// A reservation the checker holds: the bucket's, the model's `(after, due)`, its cost and era.
struct Held<'a> {
    r: Reservation<'a, ManualClock>,
    before: i128,
    after: i128,
    due: u64,
    cost: u64,
    era: usize,
}

/// Runs `ops` on a bucket and on the model. With `exact`, every verdict, `RetryAfter`,
/// `available()` and due instant must be identical until the first reconfiguration (after which
/// the units may round differently); otherwise, and after that, the bucket must never admit what
/// the model (kept in step with the bucket) refuses. Always: every window of every quota era,
/// whatever the clock readings, admits at most `burst + rate · Δ` (Δ plus 1 ns: due instants are
/// whole nanoseconds rounded up).
pub fn check(tokens: u64, per: u64, burst: u64, ops: &[Op], exact: bool) -> Result<(), String> {
    let quota = Quota::new(tokens, Duration::from_nanos(per), burst).unwrap();
    if exact && !quota.is_exact() {
        return Err(format!("{quota:?} is not exact"));
    }
    let mut exact = exact;
    let clock = ManualClock::new();
    let bucket = Bucket::with_clock(quota, clock.clone());
    let mut model = Model::new(tokens, per, burst);
    let mut t = 0u64;
    // Per quota era: the quota and its admissions.
    let mut eras = vec![(quota, WindowChecker::new())];
    let mut held: Vec<Held<'_>> = Vec::new();
    for op in ops {
        if i128::from(t) > HORIZON_NS {
            // Past the horizon the bucket reads its clock as stopped; the model does not.
            break;
        }
        let era = eras.len() - 1;
        let q = eras[era].0;
        clock.set(Duration::from_nanos(t));
        match *op {
            Op::Advance(d) => t = t.saturating_add(d),
            Op::Set(to) => t = to,
            Op::Acquire(cost) => {
                let got = bucket.try_acquire(cost);
                let want = model.try_acquire(t, cost);
                if exact && got != want {
                    return Err(format!("t={t} cost={cost}: bucket {got:?}, model {want:?}"));
                }
                if got.is_ok() && want.is_err() {
                    return Err(format!("over-admitted cost {cost} at t={t}"));
                }
                if got.is_ok() {
                    admit(&eras[era].1, t, cost);
                }
            }
            Op::Available => {
                let (got, want) = (bucket.available(), model.available(t));
                if exact && got != want {
                    return Err(format!("available at t={t}: bucket {got}, model {want}"));
                }
            }
            Op::Reserve(cost) => {
                let got = bucket.reserve(cost);
                let before = model.clone();
                let want = model.reserve(t, cost);
                match (got, want) {
                    // A backlog reaching past the horizon may exceed the state's range: the
                    // bucket refuses it (`gcra::reserve`), the model has no such limit.
                    (Err(Denied::RetryAfter(_)), Ok((_, due)))
                        if i128::from(due) > HORIZON_NS || !exact =>
                    {
                        // (Or, once the model only checks "never more lenient", a bucket that
                        // is stricter after rounding.)
                        model = before;
                    }
                    (Ok(r), Ok((after, due))) => {
                        let got_due = r.delay_from(0).as_nanos() as u64;
                        if exact && got_due != due {
                            return Err(format!(
                                "reserve {cost} at t={t}: due {got_due}, model {due}"
                            ));
                        }
                        held.push(Held {
                            r,
                            before: before.state(),
                            after,
                            due,
                            cost,
                            era,
                        });
                    }
                    (Err(g), Err(w)) if g == w => {}
                    (g, w) => {
                        return Err(format!(
                            "reserve {cost} at t={t}: bucket {:?}, model {w:?}",
                            g.map(|r| r.delay_from(0))
                        ))
                    }
                }
            }
            Op::Resolve(i, keep) if !held.is_empty() => {
                let h = held.swap_remove(i % held.len());
                if keep {
                    admit(&eras[h.era].1, h.r.delay_from(0).as_nanos() as u64, h.cost);
                } else {
                    h.r.cancel();
                    if h.era == era {
                        model.cancel(t, h.before, h.after, h.due, h.cost);
                    }
                }
            }
            Op::Resolve(..) => {}
            Op::AcquireFor(cost, timeout) => {
                let got = bucket.try_acquire_for(cost, Duration::from_nanos(timeout));
                // The model: reserve if due within the timeout.
                let before_for = model.clone();
                let mut m = model.clone();
                let want = match m.reserve(t, cost) {
                    Ok((_, due)) if due - t <= timeout => {
                        model = m;
                        Ok(Duration::from_nanos(due - t))
                    }
                    Ok((_, due)) => Err(Denied::RetryAfter(Duration::from_nanos(due - t))),
                    Err(e) => Err(e),
                };
                let want = if cost == 0 { Ok(Duration::ZERO) } else { want };
                // Past the horizon the bucket may refuse a backlog the model takes (see above).
                let beyond = |w: &Result<Duration, Denied>| match w {
                    Ok(d) | Err(Denied::RetryAfter(d)) => {
                        i128::from(t) + d.as_nanos() as i128 > HORIZON_NS
                    }
                    Err(_) => false,
                };
                let want = match (&got, &want) {
                    (Err(Denied::RetryAfter(_)), w) if beyond(w) => {
                        model = before_for;
                        got
                    }
                    _ => want,
                };
                if exact && got != want {
                    return Err(format!(
                        "acquire_for {cost} {timeout} at t={t}: bucket {got:?}, model {want:?}"
                    ));
                }
                if let Ok(wait) = got {
                    if !exact && want.is_err() {
                        return Err(format!("over-admitted acquire_for {cost} at t={t}"));
                    }
                    admit(&eras[era].1, t.saturating_add(wait.as_nanos() as u64), cost);
                    // The manual clock slept until the tokens were due.
                    t = clock.now();
                }
            }
            Op::SetQuota(tokens, per_ns, burst) => {
                if let Ok(next) = Quota::new(tokens, Duration::from_nanos(per_ns), burst) {
                    bucket.set_quota(next);
                    if next != q {
                        model.rescale(t, tokens, per_ns, burst);
                        eras.push((next, WindowChecker::new()));
                        // The bucket rounds in its own units from here on.
                        exact = false;
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
    for h in held.drain(..) {
        admit(&eras[h.era].1, h.r.delay_from(0).as_nanos() as u64, h.cost);
    }
    for (i, (q, w)) in eras.iter().enumerate() {
        w.check_within(q, 1)
            .map_err(|v| format!("window bound broken in era {i} ({q:?}): {v:?}"))?;
    }
    Ok(())
}

/// Once the model cannot follow the bucket's rounding exactly (inexact quotas, or after a
/// reconfiguration), it is reset after each step to the bucket's state, rounded toward more
/// tokens: the checks above then ask only "never more lenient than the continuous bucket with
/// the same state". The bucket's snapshot gives the instant it is full again, to the
/// nanosecond (rounded up): the model is made full 1 ns earlier. A full bucket tells nothing
/// more, so the model keeps whatever earlier instant it had for being full.
fn resync(bucket: &Bucket<ManualClock>, mut model: Model, t: u64) -> Model {
    let until_full = bucket.decide_snapshot(&(), 0).1.until_full();
    let full_now = i128::from(t) * model.tokens - model.burst * model.per;
    model.zp = if until_full.is_zero() {
        model.zp.min(full_now)
    } else if until_full == Duration::MAX {
        // Not full within the horizon: full at the horizon is at least as lenient.
        model
            .zp
            .min(HORIZON_NS * model.tokens - model.burst * model.per)
    } else {
        let full_at = i128::from(t) + until_full.as_nanos() as i128 - 1;
        full_at * model.tokens - model.burst * model.per
    };
    model
}
