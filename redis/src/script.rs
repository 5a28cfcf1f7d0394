//! The server-side script (`gcra.lua`) and its exact parameters: a [`tollgate::Quota`] turned into
//! integers that Lua's doubles hold exactly, and the decoding of the script's reply back into
//! `tollgate::gcra` states, verdicts and snapshots.
//!
//! # Time and representation
//!
//! The model is `tollgate::gcra` with the clock reading `now_ns = (server µs − ORIGIN) × 1000`,
//! the server's `TIME` since 2020-01-01T00:00:00Z. The quota earns `mul / div` units per
//! nanosecond, i.e. exactly `a` units every `b` microseconds (`a / b = 1000·mul / div` reduced).
//! The script never handles the 63-bit absolute state: it counts whole `b`-periods `n` (the
//! *base*) and keeps the state relative to `n·a` units, which is at most `a + burst·scale` while
//! the key exists. So every intermediate value is an integer below 2^53 when
//!
//! * `(a + 1) · b ≤ 2^53` (the units earned inside one period, and its division), and
//! * `burst · scale + 2a ≤ 2^51` (the relative state plus a cost, with headroom for a sum),
//!
//! which [`Params::new`] checks, in the script's unit: when `b = 1` (every exact quota) each
//! state the model reaches at whole microseconds is a sum of multiples of `a` and `scale`, so the
//! script counts in units of `k = gcd(a, scale)` of the quota's (`a`, `scale`, the burst and
//! every state divided by `k`; [`Params`] multiplies back), otherwise `k = 1`. For a quota whose
//! token refills in a whole number of microseconds the second condition then reads "refilling
//! the whole burst takes at most 2^51 µs, about 71 years"; rates up to 10^9 per second fit.
//!
//! The script returns the state it found; this module rebuilds the absolute state in 128-bit
//! arithmetic and runs `tollgate::gcra` on it, so the waits and snapshots *are* the model's, and a
//! verdict or new state that disagrees with it is reported as [`Error::Reply`] instead of being
//! trusted.
//!
//! # A state written under another quota
//!
//! Each stored state carries its quota's tag `a.b.scale.burst_units`. A state under another tag
//! (a deploy that changes the limit, `quota_for` on some processes only) is converted by the
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
    pub(crate) quota: Quota,
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

impl Params {
    /// Checks that the script holds `quota` exactly (see the module docs).
    pub(crate) fn new(quota: Quota) -> Result<Params, Error> {
        let (mul, div) = quota.units_per_ns();
        let scale = u128::from(quota.scale());
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
        let burst_units = u128::from(quota.burst()) * scale;
        // Checked: a long prime period makes `a` and `b` both near 2^62 (and `a` up to 1000x
        // more), so `(a + 1) * b` may leave even 128 bits.
        let exact_period = (a + 1).checked_mul(b).is_some_and(|x| x <= EXACT);
        let fits = 2u128
            .checked_mul(a)
            .and_then(|x| x.checked_add(burst_units))
            .is_some_and(|x| x <= EXACT / 4);
        if !exact_period || !fits {
            return Err(Error::Config(format!(
                "{quota:?} does not fit the Redis script's exact range ({a} units per {b} us \
                 need (a + 1) x b <= 2^53, and burst x {scale} units + 2a <= 2^51): lower the \
                 burst or use a coarser rate or a shorter period"
            )));
        }
        let (k, a, b, scale, burst_units) = (
            k as u64,
            a as u64,
            b as u64,
            scale as u64,
            burst_units as u64,
        );
        Ok(Params {
            quota,
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
        let now = t
            .checked_mul(1000)
            .filter(|ns| Duration::from_nanos(*ns) < tollgate::HORIZON)
            .ok_or_else(|| {
                Error::Reply(format!("server time {t} us is past tollgate's horizon"))
            })?;
        let before = self.state_of(prev)?;
        let disagree = || {
            Error::Reply(format!(
                "the script and tollgate::gcra disagree (reply {reply:?}, cost {cost}); \
                 is another writer using this key prefix?"
            ))
        };
        match status {
            "1" => {
                let taken = parse(Some(taken))?;
                let after = match gcra::try_acquire(before, now, &self.quota, taken) {
                    Ok(Some(after)) if taken >= cost => {
                        // The base the script wrote is this time's.
                        if parse(Some(n))? != t / self.b {
                            return Err(disagree());
                        }
                        let base = u128::from(t / self.b) * u128::from(self.a);
                        let next = base + u128::from(parse(Some(next))?);
                        if next * u128::from(self.k) != u128::from(after) {
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
                    snapshot: gcra::snapshot(after, now, &self.quota),
                    state: after,
                    now_ns: now,
                })
            }
            "0" => match gcra::try_acquire(before, now, &self.quota, cost) {
                Err(denied) => Ok(Decision {
                    verdict: Err(denied),
                    taken: 0,
                    snapshot: gcra::snapshot(before, now, &self.quota),
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
        // One per second: bursts up to ~2.25 million fit, 2^40 does not.
        let one = Quota::per_second(1).unwrap();
        assert!(Params::new(one.with_burst(2_000_000).unwrap()).is_ok());
        assert!(matches!(
            Params::new(one.with_burst(1 << 40).unwrap()),
            Err(Error::Config(_))
        ));
        // One per day: a token is 8.64e10 units of 1 us; the burst refills in at most 2^51 us
        // (about 71 years).
        let day = Quota::new(1, Duration::from_secs(86_400), 26_000).unwrap();
        assert!(Params::new(day).is_ok());
        assert!(Params::new(day.with_burst(26_100).unwrap()).is_err());
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

    /// The one-string reply: a fresh key's admission decodes to the model's state, a refusal to
    /// the model's wait; short, non-numeric, overflowing, pre-origin and inconsistent replies
    /// are `Error::Reply`, never a panic or a trusted verdict.
    #[test]
    fn string_replies_decode_or_fail_cleanly() {
        let p = Params::new(Quota::per_second(10).unwrap()).unwrap();
        let (sec, usec) = (1_796_148_287u64, 623_389u64);
        let t = sec * 1_000_000 + usec - ORIGIN_UNIX_US;
        let after = gcra::try_acquire(gcra::FULL, t * 1000, &p.quota, 1)
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
            next + u128::from(40 * p.quota.scale() / p.k)
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
