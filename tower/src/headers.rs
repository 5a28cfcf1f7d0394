//! [`RateLimitHeaders`]: which rate-limit headers go out, and their values, all computed from
//! one [`Decision`].
//!
//! The values are documented on [`RateLimitHeaders`]; the lists of a policy of several quotas
//! are written in `list.rs` here.

mod list;

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tollgate::Denied;

use crate::backend::Decision;
use crate::error::Error;

/// The largest Structured Fields integer (RFC 9651 §3.3.1: at most 15 digits).
const SF_MAX: u64 = 999_999_999_999_999;

static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit headers the layer sends, and their values:
///
/// * `Retry-After` (RFC 9110 §10.2.3, delay-seconds) on a refusal: the exact wait rounded **up**
///   to whole seconds, at least 1 — never `0`, which clients read as "retry now" — and at most
///   the integer cap below (a wait of "never" too).
/// * `RateLimit-Policy: "name";q=Q;w=W` and `RateLimit: "name";r=R;t=T` as defined by
///   draft-ietf-httpapi-ratelimit-headers-10 (Structured Fields lists). For a token bucket:
///   `q` = the burst, `w` = the seconds an empty bucket takes to fill up again (rounded up, at
///   least 1), so a client that sends at most `q` requests per `w` seconds is never refused;
///   `r` = whole tokens left after this request; `t` = seconds until the bucket is full again
///   (rounded up), capped on a refusal at `Retry-After` so the two never disagree.
/// * `X-RateLimit-Limit` / `-Remaining` / `-Reset` (legacy, opt-in): `q`, `r`, `t` as above
///   (`Reset` is a delay in seconds, not a timestamp).
///
/// Integers, `Retry-After` included, are capped at 999,999,999,999,999, the largest Structured
/// Fields integer.
///
/// **One decision, one quota.** Every value of a response comes from one [`Decision`]: its
/// verdict, its snapshot, and the quota (or policy) that decision and snapshot were made under
/// — for tollgate's limiters, read with the decision
/// (`tollgate::Limiter::decide_snapshots_limits`), so a `Bucket::set_quota` racing the decision
/// never pairs one quota's `r`/`t` with another's `q`/`w`. Hence, for every response:
///
/// * `r <= q` (also for each quota of a policy);
/// * on a refusal, `t <= Retry-After`;
/// * `t <= w`, and for a cost within the burst `Retry-After <= w`, unless the bucket is in debt
///   (reservations taken ahead of the refill, `tollgate::Bucket::reserve`) or the clock stepped
///   back, and up to the limiter's rounding, which `t` and `Retry-After` report as they report
///   any wait, rounded up (a client that came back after `w` alone would be refused): an
///   inexact quota (`tollgate::Quota::is_exact`, e.g. 3/s) rounds toward refusing, so a bucket
///   it emptied at a reading off its grid is full again up to one unit's refill (a nanosecond
///   for most) after `w`, and `t` (or `Retry-After` for the whole burst) reads `w + 1`; a
///   `tollgate::Bucket::set_quota` carries that rounding into the new quota as one unit of the
///   old quota owed (`tollgate::gcra::rescale`), up to that unit's worth of tokens at the new
///   rate past `w` (microseconds for most pairs of quotas; from a unit of half a token into
///   one request an hour, half an hour).
///
/// A **policy of several quotas** (a [`Decision`] with a
/// [`policy`](crate::Decision::policy) of two or more, e.g. `tollgate::MultiBucket`):
/// `RateLimit-Policy` lists one item per quota, in the policy's order
/// (`"5-per-1s";q=5;w=1, "20-per-60s";q=20;w=60`); `RateLimit` describes the tightest quota
/// (the fewest remaining tokens, ties broken by the one full last) under its name; the legacy
/// headers describe that quota too; `Retry-After` is the policy's wait, the slowest quota's
/// (a client that waits only for the quota that looks tightest would be refused again). Each
/// quota is named by [`quota_names`](RateLimitHeaders::quota_names), else `"{q}-per-{w}s"`
/// after the [`policy_name`](RateLimitHeaders::policy_name) and a `-` if one was set; a name
/// that repeats an earlier one gets `-{position}` (from 1) appended. A policy of one quota is
/// written as a single limit is.
///
/// Default: `Retry-After` and the IETF `RateLimit` / `RateLimit-Policy` fields on refusals;
/// nothing extra on admitted responses; no legacy `X-RateLimit-*`; policy name `"default"`.
///
/// ```
/// use tollgate_tower::RateLimitHeaders;
/// let all = RateLimitHeaders::default().on_success(true).legacy(true);
/// let none = RateLimitHeaders::none();
/// let named = RateLimitHeaders::default().policy_name("per-ip").unwrap();
/// assert!(RateLimitHeaders::default().policy_name("caf\u{e9}").is_err());
/// # let _ = (all, none, named);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    retry_after: bool,
    ietf: bool,
    legacy: bool,
    on_success: bool,
    /// The policy name as a serialized sf-string (quoted, escaped).
    name: String,
    /// The name set by `policy_name` and a `-` (empty by default): what the derived names of a
    /// several-quota policy start with.
    prefix: String,
    /// The names given by `quota_names` (validated, not yet quoted), by quota index.
    quota_names: Vec<String>,
}

impl Default for RateLimitHeaders {
    fn default() -> Self {
        RateLimitHeaders {
            retry_after: true,
            ietf: true,
            legacy: false,
            on_success: false,
            name: "\"default\"".to_owned(),
            prefix: String::new(),
            quota_names: Vec::new(),
        }
    }
}

impl RateLimitHeaders {
    /// No rate-limit headers at all (the rejection's status and body only).
    pub fn none() -> Self {
        RateLimitHeaders {
            retry_after: false,
            ietf: false,
            legacy: false,
            on_success: false,
            ..RateLimitHeaders::default()
        }
    }

    /// `Retry-After` on refusals (default on).
    pub fn retry_after(self, on: bool) -> Self {
        RateLimitHeaders {
            retry_after: on,
            ..self
        }
    }

    /// The IETF `RateLimit` and `RateLimit-Policy` fields (default on).
    pub fn ietf(self, on: bool) -> Self {
        RateLimitHeaders { ietf: on, ..self }
    }

    /// The legacy `X-RateLimit-Limit/-Remaining/-Reset` headers (default off).
    pub fn legacy(self, on: bool) -> Self {
        RateLimitHeaders { legacy: on, ..self }
    }

    /// The IETF and legacy headers on admitted responses too, not only on refusals (default
    /// off: it costs a few header allocations per request).
    pub fn on_success(self, on: bool) -> Self {
        RateLimitHeaders {
            on_success: on,
            ..self
        }
    }

    /// The policy name in `RateLimit` and `RateLimit-Policy` (default `default`): non-empty
    /// printable ASCII, else [`Error::InvalidPolicyName`]. Give nested layers distinct names.
    /// With a policy of several quotas, the derived quota names start with this name and a
    /// `-` (`"per-key-5-per-1s"`).
    pub fn policy_name(self, name: &str) -> Result<Self, Error> {
        validate(name)?;
        Ok(RateLimitHeaders {
            name: quote(name),
            prefix: format!("{name}-"),
            ..self
        })
    }

    /// Names for the quotas of a policy of several quotas, in the policy's order (default:
    /// `"{q}-per-{w}s"`, see above); quotas past the end of `names` keep the default, names past
    /// the last quota are unused. Each name must be non-empty printable ASCII, else
    /// [`Error::InvalidPolicyName`].
    ///
    /// ```
    /// use tollgate_tower::RateLimitHeaders;
    /// let h = RateLimitHeaders::default().quota_names(["per-second", "per-day"]).unwrap();
    /// assert!(RateLimitHeaders::default().quota_names([""]).is_err());
    /// # let _ = h;
    /// ```
    pub fn quota_names<I>(self, names: I) -> Result<Self, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let quota_names = names
            .into_iter()
            .map(|n| validate(n.as_ref()).map(|()| n.as_ref().to_owned()))
            .collect::<Result<_, _>>()?;
        Ok(RateLimitHeaders {
            quota_names,
            ..self
        })
    }

    /// Whether admitted responses carry headers.
    pub(crate) fn on_admitted(&self) -> bool {
        self.on_success && (self.ietf || self.legacy)
    }

    /// The headers of an admitted response (`None` if there are none to add).
    pub(crate) fn admitted(&self, decision: &Decision) -> Option<HeaderMap> {
        if !self.on_admitted() {
            return None;
        }
        let mut map = HeaderMap::new();
        self.write(decision, &mut map);
        (!map.is_empty()).then_some(map)
    }

    /// Appends the headers for `decision` (refused or admitted) to `map`.
    pub(crate) fn write(&self, decision: &Decision, map: &mut HeaderMap) {
        let retry = match decision.verdict {
            Err(Denied::RetryAfter(wait)) => Some(retry_after_secs(wait)),
            _ => None,
        };
        if self.retry_after {
            if let Some(secs) = retry {
                map.insert(RETRY_AFTER, HeaderValue::from(secs));
            }
        }
        if !self.ietf && !self.legacy {
            return;
        }
        let Some(quota) = decision.quota else { return };
        let (q, w) = q_w(&quota);
        let rt = decision.snapshot.map(|snap| {
            let r = snap.remaining().min(q);
            let mut t = secs_up(snap.until_full());
            if let Some(retry) = retry {
                t = t.min(retry);
            }
            (r, t.min(SF_MAX))
        });
        let several = decision.policy.filter(|p| p.len() > 1);
        if let (true, Some(policy)) = (self.ietf, several) {
            list::write(self, &policy, rt, map);
        } else if self.ietf {
            map.append(
                &RATELIMIT_POLICY,
                value(format!("{};q={q};w={w}", self.name)),
            );
            if let Some((r, t)) = rt {
                map.append(&RATELIMIT, value(format!("{};r={r};t={t}", self.name)));
            }
        }
        if self.legacy {
            map.insert(&X_LIMIT, HeaderValue::from(q));
            if let Some((r, t)) = rt {
                map.insert(&X_REMAINING, HeaderValue::from(r));
                map.insert(&X_RESET, HeaderValue::from(t));
            }
        }
    }
}

/// `q` and `w` of a quota: the burst, and the seconds an empty bucket takes to fill (rounded
/// up, at least 1), both capped to Structured Fields integers.
fn q_w(quota: &tollgate::Quota) -> (u64, u64) {
    let q = quota.burst().min(SF_MAX);
    let w = secs_up(quota.refill_time(quota.burst())).clamp(1, SF_MAX);
    (q, w)
}

/// A policy name: non-empty printable ASCII (what an sf-string holds).
fn validate(name: &str) -> Result<(), Error> {
    if name.is_empty() || !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(Error::InvalidPolicyName);
    }
    Ok(())
}

/// `name` (validated) as a serialized sf-string: quoted, `"` and `\` escaped.
fn quote(name: &str) -> String {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// A header value from text we formatted ourselves (printable ASCII by construction).
fn value(text: String) -> HeaderValue {
    HeaderValue::try_from(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `Retry-After` for an exact wait: whole seconds rounded up, at least 1, and at most
/// [`SF_MAX`] like every integer the layer writes. A wait of "never" (`Duration::MAX`) would
/// otherwise read 18446744073709551615, which clients parsing a signed 64-bit integer (Go's
/// `strconv.Atoi`, Java's `Long.parseLong`) reject, then retry on their own schedule; the cap
/// is still 31 million years.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    secs_up(wait).clamp(1, SF_MAX)
}

/// Whole seconds, rounded up (`Duration::MAX` saturates).
fn secs_up(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Quota, Snapshot};

    #[test]
    fn huge_values_are_capped_to_structured_field_integers() {
        let quota = Quota::new(1, Duration::from_secs(1), 1 << 40).unwrap();
        let d = Decision::new(
            Err(Denied::RetryAfter(Duration::MAX)),
            Some(Snapshot::new(u64::MAX, Duration::MAX)),
            Some(quota),
        );
        let mut map = HeaderMap::new();
        RateLimitHeaders::default().legacy(true).write(&d, &mut map);
        assert_eq!(map[RETRY_AFTER], "999999999999999");
        assert_eq!(
            map[&RATELIMIT_POLICY],
            "\"default\";q=1099511627776;w=999999999999999"
        );
        assert_eq!(
            map[&RATELIMIT],
            "\"default\";r=1099511627776;t=999999999999999"
        );
        assert_eq!(map[&X_RESET], "999999999999999");
    }

    #[test]
    fn retry_after_rounds_up_to_at_least_one_second() {
        let ns = Duration::from_nanos;
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(ns(1)), 1);
        assert_eq!(retry_after_secs(ns(999_999_999)), 1);
        assert_eq!(retry_after_secs(ns(1_000_000_000)), 1);
        assert_eq!(retry_after_secs(ns(1_000_000_001)), 2);
        assert_eq!(retry_after_secs(Duration::MAX), SF_MAX);
        assert_eq!(retry_after_secs(Duration::from_secs(SF_MAX)), SF_MAX);
        assert_eq!(retry_after_secs(Duration::from_secs(SF_MAX + 1)), SF_MAX);
    }

    #[test]
    fn policy_names_are_escaped_sf_strings() {
        let h = RateLimitHeaders::default().policy_name(r#"a"b\c"#).unwrap();
        assert_eq!(h.name, r#""a\"b\\c""#);
        assert_eq!(
            RateLimitHeaders::default().policy_name(""),
            Err(Error::InvalidPolicyName)
        );
        assert_eq!(
            RateLimitHeaders::default().policy_name("a\nb"),
            Err(Error::InvalidPolicyName)
        );
    }

    #[test]
    fn nothing_without_quota_or_snapshot() {
        let d = Decision::new(Err(Denied::RetryAfter(Duration::from_nanos(1))), None, None);
        let mut map = HeaderMap::new();
        RateLimitHeaders::default().legacy(true).write(&d, &mut map);
        assert_eq!(map.len(), 1);
        assert_eq!(map[RETRY_AFTER], "1");
        assert_eq!(RateLimitHeaders::none().admitted(&d), None);
        assert_eq!(RateLimitHeaders::default().admitted(&d), None);
    }
}
