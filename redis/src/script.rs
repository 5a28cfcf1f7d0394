//! The server-side script (`gcra.lua`) and its exact parameters: a [`tollgate::Quota`] turned into
//! integers that Lua's doubles hold exactly, and the decoding of the script's reply back into
//! `tollgate::gcra` states, verdicts and snapshots.
//!
//! # Time and representation
//!
//! The model is `tollgate::gcra` with the clock reading `now_ns = (server µs − ORIGIN) × 1000`,
//! the server's `TIME` since 2020-01-01T00:00:00Z, on the *script quota*: the configured
//! quota's rate and burst in a state unit the script chooses (`Params::model`,
//! [`crate::script_quota`]). It earns `mul / div` units per nanosecond, i.e. exactly `a` units
//! every `b` microseconds (`a / b = 1000·mul / div` reduced). The script never handles the
//! 63-bit absolute state: it counts whole `b`-periods `n` (the *base*) and keeps the state
//! relative to `n·a` units, which is at most `a + burst·scale` while the key exists. So every
//! intermediate value is an integer below 2^53 when
//!
//! * `(a + 1) · b ≤ 2^53` (the units earned inside one period, and its division), and
//! * `burst · scale + 2a ≤ 2^51` (the relative state plus a cost, with headroom for a sum),
//!
//! in the script's unit: when `b = 1` each state the model reaches at whole microseconds is a
//! sum of multiples of `a` and `scale`, so the script counts in units of `k = gcd(a, scale)` of
//! the model's (`a`, `scale`, the burst and every state divided by `k`; [`Params`] multiplies
//! back), otherwise `k = 1`.
//!
//! # The script's unit, exact at every microsecond
//!
//! The server's clock reads whole microseconds, so the model never needs the core's precision
//! between them. A rate of `t` tokens per `p` ns (reduced) earns `1000·t·s / p` units per
//! microsecond at `s` units per token; with `gcd(t, p) = 1` that is a whole number exactly when
//! `s0 = p / gcd(p, 1000)` divides `s`. At such a unit the units earned by every reading are an
//! integer (`a·u` at `u` µs), the earned floor and ceiling agree, and every decision is the
//! continuous token bucket's at that reading, with no rounding — even where the quota at this
//! unit is not [`is_exact`](tollgate::Quota::is_exact), which describes readings between
//! microseconds (7 per 30 days at `s0 = 2.592e12`: 7 units per µs, 7/1000 per ns). At `s0`
//! the script's unit is coarsest (`k = gcd(a, s) = s / s0` for any multiple), so `s0` is the one
//! exact candidate. [`Params::new`] picks, in order:
//!
//! 1. the quota's own unit when it already earns whole units per microsecond (every exact
//!    quota: the script quota is the quota itself);
//! 2. `s0`, when the core holds it (`rate × 100 years + burst` in 63 bits at `s0`: at most about
//!    2,900 units per µs) and the script does (`burst·s0 + 2a ≤ 2^51`);
//! 3. the quota's own unit when it fits (`b > 1`);
//! 4. the largest unit that fits: at `s` with `g = gcd(s, s0)` and `m = s / g` the model earns
//!    `a0·m` units per `s0 / g` µs (`a0 = 1000·t / gcd(p, 1000)`, reduced), every bound grows
//!    with `m`, so for each divisor `g` of `s0` (`s0` factored in full) the largest `m` that
//!    fits, and the largest `g·m`. Such a model earns `⌊a·u / b⌋` units by `u` µs: a bucket off
//!    the unit grid rounds toward refusing by less than one unit, as the core's inexact quotas
//!    do;
//! 5. none: [`Error::Config`], naming the bounds at one unit per token.
//!
//! A refusal's wait is the model's: the continuous bucket's wait rounded up to the nanosecond
//! (at a µs-exact unit), so a retry at any reading at or after it finds the tokens.
//!
//! The script returns the state it found; this module rebuilds the absolute state in 128-bit
//! arithmetic and runs `tollgate::gcra` on it, so the waits and snapshots *are* the model's, and a
//! verdict or new state that disagrees with it is reported as [`Error::Reply`] instead of being
//! trusted.
//!
//! # A state written under another quota
//!
//! Each stored state carries its quota's tag `a.b.scale.burst_units`. A state under another tag
//! (a deploy that changes the limit, `quota_for` on some processes only, or a client that holds
//! the same quota in another unit, such as the core's, during a rolling deploy) is converted by the
//! script as `tollgate::gcra::rescale(state, now, old, new)` does, with the old quota's
//! parameters taken from the tag: the old balance at the server's time (refilled at the old rate
//! since it was written), carried over in units — fractions of a token kept — and capped at the
//! new burst; in debt (the server's clock stepped back), the later of the state that is empty
//! again at the old due instant and the debt converted. Every step rounds toward fewer tokens,
//! so the converted state is never below `rescale`'s (never more tokens), and at most a few
//! units above it:
//!
//! * exact integers below 2^53 throughout, except: a fraction of a token carried across
//!   different scales whose product leaves 2^53 (a double product of values ≤ 2^51 is within
//!   one unit; one is subtracted and the result floored: at most 2 units short); a debt of 2^52
//!   units or more (bounded from above in doubles: at most 2^-47 of itself more); the due instant,
//!   rounded up to the server's whole microsecond; and a clock stepped back by 2^52 of the old
//!   quota's units (17 days or more) or a due instant 2^51 µs away, read as "never" (2^63 units
//!   above the base, which [`Params`] reads as tollgate's largest state);
//! * equal scales and exact products: exactly `rescale`'s state.
//!
//! The script validates the tag and state first (`a, b, scale ≥ 1`, `(a + 1)·b ≤ 2^53`,
//! `burst_units + 2a ≤ 2^51`, a positive whole number of tokens, `z ≤ a + burst_units`, plain
//! decimal integers) and replies with an error otherwise. It returns the converted state, in this
//! quota's tag and relative to the current base, in the reply's `prev` field, so the verdict is
//! checked against `tollgate::gcra` on it like any other; a foreign tag in a reply is an
//! [`Error::Reply`]. A refusal writes nothing; an admission writes under this quota's tag.
//!
//! Since every admission spends tokens the key held under the reader's quota and a conversion
//! never adds any, a key with two live quotas admits at most the larger burst plus the larger
//! rate over any window.

use crate::Error;
use std::time::Duration;
use tollgate::{gcra, Denied, Quota, Snapshot};

/// The origin of the model's clock, in Unix microseconds (2020-01-01T00:00:00Z): a decision at
/// server time `T` µs is `tollgate::gcra` at `now_ns = (T − ORIGIN_UNIX_US) × 1000`. Valid until
/// tollgate's [`HORIZON`](tollgate::HORIZON) (100 years, i.e. until 2119).
pub const ORIGIN_UNIX_US: u64 = 1_577_836_800_000_000;
/// 2^53: Lua doubles hold every integer below it.
const EXACT: u128 = 1 << 53;

/// The script's source: `gcra.lua` after a first line that says whether the script honours a
/// client-given time (feature `test-support` only). The production script reads its time from
/// `TIME`, whatever its arguments: a client sending one could otherwise write a state dated
/// beyond the horizon, with no TTL, under any key.
#[cfg(not(feature = "test-support"))]
pub(crate) const SOURCE: &str = concat!("local TEST_CLOCK = false\n", include_str!("gcra.lua"));
/// The script's source, with the test clock (feature `test-support`; see the production one).
#[cfg(feature = "test-support")]
pub(crate) const SOURCE: &str = concat!("local TEST_CLOCK = true\n", include_str!("gcra.lua"));
/// The production script's source, for tests that run it as a client of their own would
/// (feature `test-support`).
#[cfg(feature = "test-support")]
pub const PRODUCTION_SOURCE: &str = concat!("local TEST_CLOCK = false\n", include_str!("gcra.lua"));

/// A quota as the script needs it, checked to fit the script's exact range.
#[derive(Clone, Debug)]
pub(crate) struct Params {
    /// The quota as configured: what the limiter reports ([`RedisLimiter::quota_for`],
    /// outcomes) and the local fallback's share is taken of.
    ///
    /// [`RedisLimiter::quota_for`]: crate::RedisLimiter::quota_for
    pub(crate) quota: Quota,
    /// The same rate and burst in the unit the script counts in (see the module docs): every
    /// state, decision, snapshot and lease is this quota's.
    pub(crate) model: Quota,
    /// The script's unit is `k` of the quota's state units (see the module docs): `a`, `b`,
    /// `scale`, `burst_units` and every state the script handles are in script units.
    k: u64,
    a: u64,
    b: u64,
    /// The quota's fingerprint `a.b.scale.burst_units`, stored with each state: the script
    /// converts a state written under another quota (see the module docs).
    tag: String,
    /// `tag, a, b, burst_units, scale` as the script's arguments, formatted once.
    strs: [String; 5],
}

fn gcd(mut x: u128, mut y: u128) -> u128 {
    while y != 0 {
        (x, y) = (y, x % y);
    }
    x
}

/// 2^51: the bound on the relative state plus a cost and headroom (see the module docs).
const STATE_BOUND: u128 = EXACT / 4;

/// A quota's script-unit parameters, checked against the script's range.
struct Fit {
    k: u64,
    a: u64,
    b: u64,
    scale: u64,
    burst_units: u64,
}

/// The script's parameters of `model` (a quota in its own unit), or which bound it breaks.
fn fit(model: &Quota) -> Result<Fit, String> {
    let (mul, div) = model.units_per_ns();
    let scale = u128::from(model.scale());
    let am = 1000 * u128::from(mul);
    let g = gcd(am, u128::from(div));
    let (a, b) = (am / g, u128::from(div) / g);
    // The coarsest exact unit on the microsecond clock: when a whole number of state units
    // is earned per microsecond (b = 1), every state the model reaches at whole
    // microseconds is a sum of multiples of `a` (earned) and `scale` (costs), so it is a
    // multiple of k = gcd(a, scale), and dividing every quantity by k changes no decision.
    // Otherwise (b > 1) earned units are rounded, and k = 1.
    let k = if b == 1 { gcd(a, scale) } else { 1 };
    let (a, scale) = (a / k, scale / k);
    let burst_units = u128::from(model.burst()) * scale;
    // Checked: a long prime period makes `a` and `b` both near 2^62 (and `a` up to 1000x
    // more), so `(a + 1) * b` may leave even 128 bits.
    let exact_period = (a + 1).checked_mul(b).is_some_and(|x| x <= EXACT);
    let fits = 2u128
        .checked_mul(a)
        .and_then(|x| x.checked_add(burst_units))
        .is_some_and(|x| x <= STATE_BOUND);
    if !exact_period || !fits {
        return Err(format!(
            "{a} units per {b} us at {scale} units per token need (a + 1) x b <= 2^53 and \
             burst x {scale} + 2a <= 2^51"
        ));
    }
    // Each is at most 2^53 by the checks above.
    Ok(Fit {
        k: k as u64,
        a: a as u64,
        b: b as u64,
        scale: scale as u64,
        burst_units: burst_units as u64,
    })
}

/// The reduced rate of `quota`: `t` tokens per `p` ns, `gcd(t, p) = 1`.
fn reduced(quota: &Quota) -> (u64, u64) {
    // A valid quota's period fits in 64 bits of nanoseconds.
    let per = quota.per().as_nanos() as u64;
    let g = gcd(quota.tokens().into(), per.into()) as u64;
    (quota.tokens() / g, per / g)
}

/// `x · y mod n`.
fn mul_mod(x: u64, y: u64, n: u64) -> u64 {
    (u128::from(x) * u128::from(y) % u128::from(n)) as u64
}

/// `x^e mod n`.
fn pow_mod(mut x: u64, mut e: u64, n: u64) -> u64 {
    let mut r = 1 % n;
    while e > 0 {
        if e & 1 == 1 {
            r = mul_mod(r, x, n);
        }
        x = mul_mod(x, x, n);
        e >>= 1;
    }
    r
}

/// Whether `n` is prime: Miller–Rabin with the first twelve primes as bases, which decide
/// every `n` below 2^64 (no strong pseudoprime to all of them is that small).
fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    if let Some(&p) = BASES.iter().find(|&&p| n.is_multiple_of(p)) {
        return n == p;
    }
    let s = (n - 1).trailing_zeros();
    let d = (n - 1) >> s;
    BASES.iter().all(|&a| {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            return true;
        }
        (1..s).any(|_| {
            x = mul_mod(x, x, n);
            x == n - 1
        })
    })
}

/// A factor of the composite `n` other than 1 and `n` (Pollard's rho, Floyd's cycle finding,
/// one gcd per batch of steps): `n`'s prime factors are all above 2^16 here, so one of them,
/// at most 2^32, is found in about 2^16 steps.
fn split(n: u64) -> u64 {
    const BATCH: usize = 64;
    let n128 = u128::from(n);
    let gcd_n = |x: u64| gcd(x.into(), n128) as u64;
    for c in 1u128.. {
        let f = |x: u64| ((u128::from(x) * u128::from(x) + c) % n128) as u64;
        let (mut x, mut y) = (2u64, 2u64);
        loop {
            let (x0, y0) = (x, y);
            // A product shares a factor with `n` iff one of its terms does.
            let mut q = 1u64;
            for _ in 0..BATCH {
                x = f(x);
                y = f(f(y));
                q = mul_mod(q, x.abs_diff(y), n);
            }
            if gcd_n(q) == 1 {
                continue;
            }
            // Replay the batch one step at a time: the first term sharing a factor.
            let (mut x, mut y) = (x0, y0);
            let d = loop {
                x = f(x);
                y = f(f(y));
                let d = gcd_n(x.abs_diff(y));
                if d != 1 {
                    break d;
                }
            };
            if d != n {
                return d;
            }
            // The cycle closed on `n` itself: another polynomial.
            break;
        }
    }
    unreachable!("every composite has a nontrivial factor")
}

/// The prime factors of `n > 0`, with repeats, in no particular order: trial division below
/// 2^16, then the cofactor split whole (it has at most three prime factors, all above 2^16).
fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut d = 2u64;
    while d < 1 << 16 && d * d <= n {
        while n.is_multiple_of(d) {
            n /= d;
            out.push(d);
        }
        d += 1;
    }
    let mut rest = vec![n];
    while let Some(m) = rest.pop() {
        if m == 1 {
            continue;
        }
        if is_prime(m) {
            out.push(m);
        } else {
            let f = split(m);
            rest.extend([f, m / f]);
        }
    }
    out
}

/// The divisors of `n > 0`, in no particular order.
fn divisors(n: u64) -> Vec<u64> {
    let mut primes = prime_factors(n);
    primes.sort_unstable();
    let mut out = vec![1u64];
    for run in primes.chunk_by(|x, y| x == y) {
        let len = out.len();
        let mut pow = 1;
        for &p in run {
            pow *= p;
            out.extend_from_within(..len);
            let end = out.len();
            for x in &mut out[end - len..] {
                *x *= pow;
            }
        }
    }
    out
}

/// The quota the script decides `quota` with: the same rate and burst, in a unit of the
/// script's choice (see the module docs), with its script parameters.
fn choose(quota: Quota) -> Result<(Quota, Fit), Error> {
    // The quota's own unit, when it already earns whole units per microsecond: exact at every
    // server reading (every exact quota).
    let own = match fit(&quota) {
        Ok(f) if f.b == 1 => return Ok((quota, f)),
        own => own.ok(),
    };
    // t / p tokens per ns earn 1000·t·s / p units per µs at s units per token: a whole number
    // (b = 1) iff s0 = p / gcd(p, 1000) divides s (gcd(t, p) = 1). At s0 itself the script
    // unit is the coarsest (k = s / s0 for any multiple), so s0 is the one exact candidate.
    let (t, p) = reduced(&quota);
    let s0 = p / gcd(p.into(), 1000) as u64;
    if let Ok(q) = quota.with_scale(s0) {
        if let Ok(f) = fit(&q) {
            return Ok((q, f));
        }
    }
    if let Some(f) = own {
        return Ok((quota, f));
    }
    // Inexact at some readings: the finest unit that fits. A scale s with g = gcd(s, s0) and
    // m = s / g earns a = a0·m units per b = s0 / g µs (a0 = 1000·t / gcd(p, 1000), reduced),
    // so every bound grows with m: for each divisor g the largest m that fits, and the
    // largest scale over all g (b = 1, g = s0, failed above for every m).
    let a0 = 1000 * u128::from(t) / gcd(p.into(), 1000);
    let burst = u128::from(quota.burst());
    // The core's own bound on the unit: rate × HORIZON + burst in 63 bits.
    let need = (tollgate::HORIZON.as_nanos() * u128::from(t)).div_ceil(u128::from(p)) + burst;
    let core_max = ((1u128 << 63) - 1) / need;
    let mut candidates: Vec<u128> = divisors(s0)
        .into_iter()
        .filter(|&g| g < s0)
        .filter_map(|g| {
            let (g, b) = (u128::from(g), u128::from(s0 / g));
            let m = (EXACT / b).checked_sub(1)? / a0;
            let m = m.min(STATE_BOUND / (burst * g + 2 * a0));
            let m = m.min(core_max / g);
            (m >= 1).then_some(g * m)
        })
        .collect();
    candidates.sort_unstable_by(|x, y| y.cmp(x));
    candidates.dedup();
    for s in candidates {
        // The bounds above are conservative (m sharing a factor with s0 / g only lowers a and
        // b); the quota's own validation and the script's checks decide.
        let Ok(q) = quota.with_scale(s as u64) else {
            continue;
        };
        if let Ok(f) = fit(&q) {
            return Ok((q, f));
        }
    }
    let why = fit(&quota.with_scale(1).unwrap_or(quota))
        .err()
        .unwrap_or_default();
    Err(Error::Config(format!(
        "{quota:?} does not fit the Redis script's exact range at any state unit (at one unit \
         per token: {why}): lower the burst or use a coarser rate or a shorter period"
    )))
}

impl Params {
    /// Checks that the script holds `quota` and picks the unit it counts in (see the module
    /// docs).
    pub(crate) fn new(quota: Quota) -> Result<Params, Error> {
        let (model, f) = choose(quota)?;
        let Fit {
            k,
            a,
            b,
            scale,
            burst_units,
        } = f;
        Ok(Params {
            quota,
            model,
            k,
            a,
            b,
            tag: format!("{a}.{b}.{scale}.{burst_units}"),
            strs: [
                format!("{a}.{b}.{scale}.{burst_units}"),
                a.to_string(),
                b.to_string(),
                burst_units.to_string(),
                scale.to_string(),
            ],
        })
    }

    /// The quota's own arguments (tag, a, b, burst units, scale), formatted once at build.
    pub(crate) fn quota_strs(&self) -> &[String; 5] {
        &self.strs
    }

    /// The absolute state in the script's `prev` field: `FULL` for none, else `n·a + z` under
    /// this quota's tag. The script converts a state written under another quota into this
    /// quota's tag before replying (see the module docs), so a foreign tag here means the reply
    /// is not the script's: [`Error::Reply`]. A converted debt may be up to `NEVER` = 2^63 units
    /// above the base (a debt beyond what the script holds exactly); the sum saturates at
    /// tollgate's largest state, 2^63 − 1, which the model refuses until past the horizon.
    pub(crate) fn state_of(&self, stored: &str) -> Result<u64, Error> {
        const MAX_STATE: u128 = (1 << 63) - 1;
        if stored.is_empty() {
            return Ok(gcra::FULL);
        }
        let mut it = stored.split(' ');
        let (tag, n, z) = (it.next(), it.next(), it.next());
        if tag != Some(self.tag.as_str()) || it.next().is_some() {
            return Err(Error::Reply(format!(
                "the script returned {stored:?}, not a state under this quota's tag {:?}",
                self.tag
            )));
        }
        // In the quota's units (script units times k), checked: n and a·k may each be large.
        let base = u128::from(parse(n)?).saturating_mul(u128::from(self.a) * u128::from(self.k));
        let z = u128::from(parse(z)?);
        if base > MAX_STATE || z > MAX_STATE + 1 {
            return Err(Error::Reply(format!(
                "stored state {stored:?} is out of range"
            )));
        }
        Ok((base + z * u128::from(self.k)).min(MAX_STATE) as u64)
    }

    /// This quota's five arguments in a policy's call: tag, a, b, burst units, scale.
    pub(crate) fn quota_args(&self) -> [String; 5] {
        self.strs.clone()
    }

    /// The absolute state (the quota's units) that the script wrote as `next`, relative to the
    /// base at server time `t` µs.
    pub(crate) fn written_state(&self, t: u64, next: &str) -> Result<u128, Error> {
        let base = u128::from(t / self.b) * u128::from(self.a);
        Ok((base + u128::from(parse(Some(next))?)) * u128::from(self.k))
    }

    /// Decodes a reply, `"<status> <sec> <usec> <taken> <n> <next> <prev>"` (see `gcra.lua`),
    /// into the decision (`taken` tokens for an admission, which is `cost` unless leasing) and
    /// the snapshot, checked against `tollgate::gcra`.
    pub(crate) fn decode(&self, reply: &str, cost: u64) -> Result<Decision, Error> {
        let mut it = reply.splitn(7, ' ');
        let mut field = || {
            it.next()
                .ok_or_else(|| Error::Reply(format!("expected 7 fields, got {reply:?}")))
        };
        let (status, sec, usec, taken) = (field()?, field()?, field()?, field()?);
        let (n, next, prev) = (field()?, field()?, field()?);
        // The server's Unix microseconds, then the model's clock (from the origin).
        let t = parse(Some(sec))?
            .checked_mul(1_000_000)
            .and_then(|s| s.checked_add(parse(Some(usec)).ok()?))
            .and_then(|us| us.checked_sub(ORIGIN_UNIX_US))
            .ok_or_else(|| Error::Reply(format!("server time in {reply:?} is out of range")))?;
        let now = server_ns(t)?;
        let before = self.state_of(prev)?;
        let disagree = || disagreement(&reply, cost);
        match status {
            "1" => {
                let taken = parse(Some(taken))?;
                let after = match gcra::try_acquire(before, now, &self.model, taken) {
                    Ok(Some(after)) if taken >= cost => {
                        // The base the script wrote is this time's.
                        if parse(Some(n))? != t / self.b {
                            return Err(disagree());
                        }
                        if self.written_state(t, next)? != u128::from(after) {
                            return Err(disagree());
                        }
                        after
                    }
                    // A read: nothing taken, nothing written.
                    Ok(None) if cost == 0 => before,
                    _ => return Err(disagree()),
                };
                Ok(Decision {
                    verdict: Ok(()),
                    taken,
                    snapshot: gcra::snapshot(after, now, &self.model),
                    state: after,
                    now_ns: now,
                })
            }
            "0" => match gcra::try_acquire(before, now, &self.model, cost) {
                Err(denied) => Ok(Decision {
                    verdict: Err(denied),
                    taken: 0,
                    snapshot: gcra::snapshot(before, now, &self.model),
                    state: before,
                    now_ns: now,
                }),
                Ok(_) => Err(disagree()),
            },
            _ => Err(Error::Reply(format!("unknown status in {reply:?}"))),
        }
    }
}

/// One decoded decision.
#[derive(Debug)]
pub(crate) struct Decision {
    pub(crate) verdict: Result<(), Denied>,
    /// Tokens debited in Redis (the cost, or a lease's whole take).
    pub(crate) taken: u64,
    /// The bucket right after the decision, in Redis.
    pub(crate) snapshot: Snapshot,
    /// The bucket's absolute `tollgate::gcra` state right after the decision (its theoretical
    /// arrival time in units): a lease's tokens are the `taken × scale` units just below it.
    pub(crate) state: u64,
    /// The model's clock reading (ns since the origin): the server's `TIME` when the script ran.
    pub(crate) now_ns: u64,
}

/// The model's clock (ns since the origin) at the script's time `t` (µs since the origin); a
/// time at or past tollgate's [`HORIZON`](tollgate::HORIZON) is an error (the core takes no
/// later instant).
pub(crate) fn server_ns(t: u64) -> Result<u64, Error> {
    t.checked_mul(1000)
        .filter(|ns| Duration::from_nanos(*ns) < tollgate::HORIZON)
        .ok_or_else(|| Error::Reply(format!("server time {t} us is past tollgate's horizon")))
}

/// The error for a reply (`reply`, to a call of `cost`) that `tollgate::gcra` does not
/// reproduce: never trusted.
pub(crate) fn disagreement(reply: &dyn std::fmt::Debug, cost: u64) -> Error {
    Error::Reply(format!(
        "the script and tollgate::gcra disagree (reply {reply:?}, cost {cost}); is another \
         writer using this key prefix?"
    ))
}

pub(crate) fn parse(s: Option<&str>) -> Result<u64, Error> {
    let s = s.ok_or_else(|| Error::Reply("missing field".into()))?;
    s.parse()
        .map_err(|_| Error::Reply(format!("{s:?} is not an integer")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_origin_is_the_origin() {
        assert!(SOURCE.contains(&format!("local ORIGIN = {ORIGIN_UNIX_US}\n")));
    }

    #[test]
    fn range_is_checked_at_construction() {
        // 1000/s: 1000 units per us, a token is 10^6 units.
        let p = Params::new(Quota::per_second(1000).unwrap()).unwrap();
        // In script units of k = 1000: one unit per microsecond, a token is 1000.
        assert_eq!((p.k, p.a, p.b), (1000, 1, 1));
        assert_eq!(
            p.strs,
            ["1.1.1000.1000000", "1", "1", "1000000", "1000"].map(String::from)
        );
        // 10^9/s and an odd rate fit.
        assert!(Params::new(Quota::per_second(1_000_000_000).unwrap()).is_ok());
        assert!(Params::new(Quota::per_second(999_999_937).unwrap()).is_ok());
        // One per second: exact at every microsecond (a token is 10^6 units, one earned per
        // µs) while the burst refills within 2^51 µs (about 71 years); beyond, a coarser unit
        // that rounds toward refusing; beyond 2^51 − 2 whole tokens, no unit fits.
        let one = Quota::per_second(1).unwrap();
        let p = Params::new(one.with_burst(2_000_000_000).unwrap()).unwrap();
        assert_eq!((p.a, p.b, p.model.scale() / p.k), (1, 1, 1_000_000));
        let p = Params::new(one.with_burst(1 << 40).unwrap()).unwrap();
        assert!(p.b > 1 && p.model.scale() < 1_000_000, "{p:?}");
        assert!(Params::new(one.with_burst((1 << 51) - 2).unwrap()).is_ok());
        let e = Params::new(one.with_burst((1 << 51) - 1).unwrap()).unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("2^51") && m.contains("2^53")),
            "{e}"
        );
        // One per day: a token is 8.64e10 units of one per µs, exact while the burst refills
        // in at most 2^51 µs; a larger burst takes a coarser, inexact unit.
        let day = Quota::new(1, Duration::from_secs(86_400), 26_000).unwrap();
        assert_eq!(Params::new(day).unwrap().b, 1);
        assert!(Params::new(day.with_burst(26_100).unwrap()).unwrap().b > 1);
    }

    /// Months are 30 days and years 365 (as tollgate-rls's units).
    const MONTH: Duration = Duration::from_secs(2_592_000);
    const YEAR: Duration = Duration::from_secs(31_536_000);

    /// Ordinary rates whose own unit the script cannot hold (7 per month: 8.64e14 units per
    /// token, 7000 per 3 µs) are held in the unit `s0 = p / gcd(p, 1000)`, whole units per
    /// microsecond, so exact at every server reading; the large odd ones per minute to week, which
    /// no µs-exact unit holds within the core's range, in the finest unit that fits.
    #[test]
    fn ordinary_rates_are_held() {
        for (n, per) in [7, 14, 17, 21, 28, 31]
            .map(|n| (n, MONTH))
            .into_iter()
            .chain([7, 14, 17, 21, 28, 29].map(|n| (n, YEAR)))
        {
            let q = Quota::new(n, per, n).unwrap();
            let p = Params::new(q).unwrap_or_else(|e| panic!("{n} per {per:?}: {e}"));
            let (t, pn) = reduced(&q);
            let s0 = pn / gcd(pn.into(), 1000) as u64;
            assert_eq!(p.model, q.with_scale(s0).unwrap(), "{n} per {per:?}");
            assert_eq!((p.b, p.k), (1, 1), "{n} per {per:?}");
            assert_eq!(u128::from(p.a), 1000 * u128::from(t) / gcd(pn.into(), 1000));
            assert_eq!(p.quota, q);
        }
        let month = Params::new(Quota::new(7, MONTH, 7).unwrap()).unwrap();
        assert_eq!(
            month.strs,
            [
                "7.1.2592000000000.18144000000000",
                "7",
                "1",
                "18144000000000",
                "2592000000000"
            ]
            .map(String::from)
        );
        for (n, secs) in [
            (292_899, 60),
            (381_007, 3600),
            (613_297, 86_400),
            (847_649, 604_800),
        ] {
            let q = Quota::new(n, Duration::from_secs(secs), n).unwrap();
            let p = Params::new(q).unwrap_or_else(|e| panic!("{n} per {secs} s: {e}"));
            assert_eq!(
                (p.model.tokens(), p.model.per(), p.model.burst()),
                (n, q.per(), n)
            );
        }
    }

    /// Random rates and bursts over the whole range (fixed seed): `Params::new` builds or
    /// refuses with `Error::Config`, never panics; a built one satisfies the script's range in
    /// its own unit, its model has the quota's rate and burst, is exact at every microsecond
    /// (b = 1) whenever the unit `s0` fits, and a refused one fits at no unit of the search
    /// (not even one unit per token).
    #[test]
    fn params_build_in_range_or_refuse() {
        use tollgate_testkit::random_quotas::log_uniform;
        use tollgate_testkit::rng::Rng;
        let mut rng = Rng(0x7a11_6a7e_5ca1_e000);
        let (mut built, mut exact_us, mut refused) = (0, 0, 0);
        for i in 0..30_000 {
            let tokens = match i % 3 {
                0 => log_uniform(&mut rng, u64::from(u32::MAX)),
                _ => log_uniform(&mut rng, u64::MAX),
            };
            let per = match rng.below(3) {
                0 => {
                    [1, 60, 3600, 86_400, 604_800, 2_592_000, 31_536_000][rng.below(7) as usize]
                        * 1_000_000_000
                }
                _ => log_uniform(&mut rng, u64::MAX),
            };
            let burst = match rng.below(3) {
                0 => tokens,
                _ => log_uniform(&mut rng, u64::MAX),
            };
            let Ok(q) = Quota::new(tokens, Duration::from_nanos(per), burst) else {
                continue;
            };
            let r = std::panic::catch_unwind(|| Params::new(q));
            let r = r.unwrap_or_else(|_| panic!("{q:?}: Params::new panicked"));
            let (t, pn) = reduced(&q);
            let s0 = pn / gcd(pn.into(), 1000) as u64;
            let at_s0 = q.with_scale(s0).ok().filter(|m| fit(m).is_ok());
            let p = match r {
                Ok(p) => p,
                Err(Error::Config(_)) => {
                    refused += 1;
                    assert!(at_s0.is_none(), "{q:?}");
                    assert!(fit(&q).is_err(), "{q:?}");
                    assert!(fit(&q.with_scale(1).unwrap()).is_err(), "{q:?}");
                    continue;
                }
                Err(e) => panic!("{q:?}: {e}"),
            };
            built += 1;
            let m = p.model;
            assert_eq!((m.tokens(), m.per(), m.burst()), (tokens, q.per(), burst));
            assert_eq!(p.quota, q);
            let (a, b, k) = (u128::from(p.a), u128::from(p.b), u128::from(p.k));
            assert!((a + 1) * b <= EXACT, "{q:?}");
            assert!(u128::from(burst) * u128::from(m.scale()) / k + 2 * a <= STATE_BOUND);
            // `a / b` script units per µs are the model's `mul / div` per ns.
            let (mul, div) = m.units_per_ns();
            assert_eq!(a * k * u128::from(div), 1000 * u128::from(mul) * b, "{q:?}");
            assert_eq!(u128::from(m.scale()) % k, 0);
            assert_eq!(
                p.b == 1,
                at_s0.is_some() || fit(&q).is_ok_and(|f| f.b == 1),
                "{q:?}"
            );
            exact_us += u32::from(p.b == 1);
            let _ = t;
        }
        assert!(
            built > 10_000 && exact_us > 2000 && refused > 100,
            "{built} {exact_us} {refused}"
        );
    }

    /// A valid quota with a long, odd period (one token per ~146 years: `per` prime and above
    /// 2^62 ns, so `a ≈ 1000 × 2^62` and `b ≈ 2^62`) is `Error::Config`: the range check's
    /// products are checked (unchecked, `(a + 1) × b` overflowed u128 and panicked).
    #[test]
    fn range_check_never_overflows() {
        // 2^62 + 135 is prime; 1 token per that many ns, burst 1, is a valid tollgate quota.
        let per = Duration::from_nanos((1 << 62) + 135);
        let quota = Quota::new(1, per, 1).unwrap();
        let r = std::panic::catch_unwind(|| matches!(Params::new(quota), Err(Error::Config(_))));
        assert_eq!(
            r.ok(),
            Some(true),
            "{quota:?} {:?}: expected Error::Config, not a panic",
            quota.units_per_ns()
        );
    }

    /// `prime_factors` multiplies back to `n` with every factor prime, on the hard cases
    /// (primes near 2^64, squares and cubes of primes above 2^16, Carmichael numbers, strong
    /// pseudoprimes to small bases) and a seeded sweep checked by trial division.
    #[test]
    fn factoring_is_complete() {
        use tollgate_testkit::rng::Rng;
        let slow_prime = |n: u64| {
            n >= 2
                && (2..)
                    .take_while(|d| d * d <= n)
                    .all(|d| !n.is_multiple_of(d))
        };
        let check = |n: u64| {
            let f = prime_factors(n);
            assert_eq!(f.iter().product::<u64>(), n, "{n}: {f:?}");
            assert!(f.iter().all(|&p| is_prime(p)), "{n}: {f:?}");
            let mut d = divisors(n);
            d.sort_unstable();
            d.dedup();
            assert!(d.iter().all(|&x| n.is_multiple_of(x)), "{n}");
            assert_eq!(d.len(), {
                let mut f = f.clone();
                f.sort_unstable();
                f.chunk_by(|x, y| x == y)
                    .map(|r| r.len() + 1)
                    .product::<usize>()
            });
        };
        for n in [
            1,
            2,
            18_446_744_073_709_551_557,
            18_446_744_073_709_551_615,
            (1 << 62) + 135,
            65_537 * 65_537,
            65_537 * 65_537 * 65_537,
            4_294_967_291 * 4_294_967_279,
            561,
            3_215_031_751,
            3_825_123_056_546_413_051,
        ] {
            check(n);
        }
        assert!(!is_prime(3_215_031_751) && !is_prime(3_825_123_056_546_413_051));
        let mut rng = Rng(0x0fac_7012);
        for _ in 0..2000 {
            let n = 1 + rng.below(1 << 24);
            assert_eq!(is_prime(n), slow_prime(n), "{n}");
            check(n);
            check(rng.below(u64::MAX) + 1);
        }
    }

    /// A period whose unit grid `s0` is the product of two primes above 2^16 (an odd number of
    /// nanoseconds) takes a unit made of one of them: 1 per 2^50 ns (13 days) with a burst of 2
    /// fits only at such a unit (b = the other prime), and 1,000 per 65,537 × 65,539 ns is
    /// held in a unit of 65,537·m, not in halves of a token (b = s0 ≈ 2^32 leaves m ≤ 2).
    #[test]
    fn large_prime_factors_of_the_grid_are_split() {
        let (q1, q2) = (33_554_467u64, 33_554_473u64);
        let q = Quota::new(1, Duration::from_nanos(q1 * q2), 2).unwrap();
        let p = Params::new(q).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.model.scale() >= q1 && p.b <= q2, "{p:?}");
        let q = Quota::new(1000, Duration::from_nanos(65_537 * 65_539), 1000).unwrap();
        let p = Params::new(q).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.model.scale() >= 65_537 && p.b <= 65_539, "{p:?}");
        // Three primes above 2^16 (a u64 holds at most three): 7 per that many ns.
        let (r1, r2, r3) = (65_537u64, 65_539, 65_543);
        let q = Quota::new(7, Duration::from_nanos(r1 * r2 * r3), 7).unwrap();
        let p = Params::new(q).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.b <= r2 * r3, "{p:?}");
    }

    /// The one-string reply: a fresh key's admission decodes to the model's state, a refusal to
    /// the model's wait; short, non-numeric, overflowing, pre-origin and inconsistent replies
    /// are `Error::Reply`, never a panic or a trusted verdict.
    #[test]
    fn string_replies_decode_or_fail_cleanly() {
        let p = Params::new(Quota::per_second(10).unwrap()).unwrap();
        let (sec, usec) = (1_796_148_287u64, 623_389u64);
        let t = sec * 1_000_000 + usec - ORIGIN_UNIX_US;
        let after = gcra::try_acquire(gcra::FULL, t * 1000, &p.model, 1)
            .unwrap()
            .unwrap();
        let n = t / p.b;
        let next = u128::from(after) / u128::from(p.k) - u128::from(n) * u128::from(p.a);
        let ok = format!("1 {sec} {usec} 1 {n} {next} ");
        let d = p.decode(&ok, 1).unwrap();
        assert_eq!(
            (d.verdict, d.taken, d.state, d.now_ns),
            (Ok(()), 1, after, t * 1000)
        );
        // The written state must be the model's, at this time's base.
        assert!(matches!(
            p.decode(&format!("1 {sec} {usec} 1 {n} {} ", next + 1), 1),
            Err(Error::Reply(_))
        ));
        assert!(matches!(
            p.decode(&format!("1 {sec} {usec} 1 {} {next} ", n + 1), 1),
            Err(Error::Reply(_))
        ));
        // A refusal is checked against the model too: a full bucket admits, so "0" is wrong.
        assert!(matches!(
            p.decode(&format!("0 {sec} {usec} 0 - - "), 1),
            Err(Error::Reply(_))
        ));
        let drained = format!(
            "{} {} {}",
            p.tag,
            n,
            next + u128::from(40 * p.model.scale() / p.k)
        );
        let refused = p
            .decode(&format!("0 {sec} {usec} 0 - - {drained}"), 1)
            .unwrap();
        assert!(matches!(refused.verdict, Err(Denied::RetryAfter(_))));
        for bad in [
            String::new(),
            "1".to_owned(),
            format!("1 {sec} {usec} 1 {n}"),
            format!("1 x {usec} 1 {n} {next} "),
            format!("1 18446744073709551615 {usec} 1 {n} {next} "),
            format!("1 {} 0 1 0 0 ", ORIGIN_UNIX_US / 1_000_000 - 1),
            format!("2 {sec} {usec} 1 {n} {next} "),
            format!("1 {sec} {usec} 1 {n} {next} garbage"),
        ] {
            assert!(matches!(p.decode(&bad, 1), Err(Error::Reply(_))), "{bad:?}");
        }
    }

    /// The client reads the script's `prev` field: none is full, this quota's tag is `k·(n·a + z)`
    /// (a converted debt saturates at tollgate's largest state), and another quota's tag — which
    /// the script converts before replying — is a reply error, never read as full.
    #[test]
    fn reply_state_is_this_quotas_or_an_error() {
        let p = Params::new(Quota::per_second(10).unwrap()).unwrap();
        assert_eq!(p.state_of("").unwrap(), gcra::FULL);
        assert!(matches!(p.state_of("other 1 2"), Err(Error::Reply(_))));
        let s = format!("{} 3 7", p.tag);
        assert_eq!(p.state_of(&s).unwrap(), p.k * (3 * p.a + 7));
        assert!(p.state_of(&format!("{s} 1")).is_err());
        assert!(p.state_of(&format!("{} x 7", p.tag)).is_err());
        assert!(p
            .state_of(&format!("{} 99999999999999999 7", p.tag))
            .is_err());
        // The script's "never" (2^63 units above the base) saturates; more is not the script's.
        let never = format!("{} 3 9223372036854775808", p.tag);
        assert_eq!(p.state_of(&never).unwrap(), (1 << 63) - 1);
        assert!(p
            .state_of(&format!("{} 3 9223372036854775809", p.tag))
            .is_err());
    }
}

#[cfg(test)]
mod measure {
    use super::*;
    use tollgate_testkit::rng::Rng;

    /// tollgate-rls's units (a month is 30 days, a year 365).
    const UNITS: [(&str, u64); 7] = [
        ("second", 1),
        ("minute", 60),
        ("hour", 3600),
        ("day", 86_400),
        ("week", 604_800),
        ("month", 2_592_000),
        ("year", 31_536_000),
    ];

    /// Every rate of 1..=20,000 per 30 days and per 365 days, with burst = rate, is held.
    #[test]
    fn every_rate_to_20000_per_month_or_year_is_held() {
        for secs in [2_592_000, 31_536_000] {
            let per = Duration::from_secs(secs);
            for n in 1..=20_000u64 {
                let q = Quota::new(n, per, n).unwrap();
                if let Err(e) = Params::new(q) {
                    panic!("{n} per {secs} s: {e}");
                }
            }
        }
    }

    /// The counts the README quotes: per unit, of 1..=20,000 and of 20,000 rates drawn from
    /// 1..=u32::MAX (burst = rate, fixed seed), how many are refused and how many held exact at
    /// every microsecond. `cargo test -p tollgate-redis --lib count_refusals -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn count_refusals() {
        for (name, secs) in UNITS {
            let per = Duration::from_secs(secs);
            let (mut refused, mut exact_us) = (0, 0);
            for n in 1..=20_000u64 {
                match choose(Quota::new(n, per, n).unwrap()) {
                    Err(_) => refused += 1,
                    Ok((_, f)) => exact_us += u32::from(f.b == 1),
                }
            }
            eprintln!("{name}, 1..=20000: {refused} refused, {exact_us} exact at every us");
            let mut rng = Rng(7);
            let (mut valid, mut refused, mut exact_us) = (0, 0, 0);
            for _ in 0..20_000 {
                let n = 1 + rng.below(u64::from(u32::MAX));
                let Ok(q) = Quota::new(n, per, n) else {
                    continue;
                };
                valid += 1;
                match choose(q) {
                    Err(_) => refused += 1,
                    Ok((_, f)) => exact_us += u32::from(f.b == 1),
                }
            }
            eprintln!(
                "{name}, 20000 drawn: {valid} valid quotas, {refused} refused, {exact_us} exact \
                 at every us"
            );
        }
    }
}
