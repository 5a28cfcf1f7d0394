//! The IETF fields of a policy of several quotas: one `RateLimit-Policy` item per quota, and
//! `RateLimit` for the tightest quota under that quota's name.

use http::header::HeaderMap;

use super::{q_w, quote, value, RateLimitHeaders, RATELIMIT, RATELIMIT_POLICY};
use crate::report::PolicyReport;

/// Appends `RateLimit-Policy` (every quota, in the policy's order) and, when the decision
/// carried a snapshot, `RateLimit` (`rt`: the tightest quota's `r` and `t`, computed by the
/// caller exactly as for a single limit).
pub(super) fn write(
    headers: &RateLimitHeaders,
    policy: &PolicyReport,
    rt: Option<(u64, u64)>,
    map: &mut HeaderMap,
) {
    let qw: Vec<(u64, u64)> = policy.quotas().iter().map(q_w).collect();
    let names = names(headers, &qw);
    let items: Vec<String> = names
        .iter()
        .zip(&qw)
        .map(|(name, (q, w))| format!("{name};q={q};w={w}"))
        .collect();
    map.append(&RATELIMIT_POLICY, value(items.join(", ")));
    if let Some((r, t)) = rt {
        let (tightest, _, _) = policy.tightest();
        let name = &names[tightest];
        map.append(&RATELIMIT, value(format!("{name};r={r};t={t}")));
    }
}

/// The serialized sf-string name of every quota: the configured one, else `{prefix}{q}-per-{w}s`;
/// a name equal to an earlier one gets `-{position}` appended until it is unique (at most three
/// others, each append makes it longer: this ends).
fn names(headers: &RateLimitHeaders, qw: &[(u64, u64)]) -> Vec<String> {
    let mut raw: Vec<String> = Vec::with_capacity(qw.len());
    for (i, (q, w)) in qw.iter().enumerate() {
        let mut name = match headers.quota_names.get(i) {
            Some(name) => name.clone(),
            None => format!("{}{q}-per-{w}s", headers.prefix),
        };
        while raw.contains(&name) {
            name = format!("{name}-{}", i + 1);
        }
        raw.push(name);
    }
    raw.iter().map(|name| quote(name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_follow_the_prefix_and_repeats_get_their_position() {
        let qw = [(5, 1), (20, 60), (5, 1)];
        let plain = RateLimitHeaders::default();
        assert_eq!(
            names(&plain, &qw),
            ["\"5-per-1s\"", "\"20-per-60s\"", "\"5-per-1s-3\""]
        );
        let named = RateLimitHeaders::default().policy_name("per-key").unwrap();
        assert_eq!(names(&named, &qw[..1]), ["\"per-key-5-per-1s\""]);
        let given = RateLimitHeaders::default()
            .quota_names(["a\"b", "20-per-60s", "x", "unused"])
            .unwrap();
        // A given name may repeat a derived one: the later of the two is made unique.
        let qw = [(20, 60), (20, 60)];
        let one = RateLimitHeaders::default()
            .quota_names(["20-per-60s"])
            .unwrap();
        assert_eq!(names(&one, &qw), ["\"20-per-60s\"", "\"20-per-60s-2\""]);
        assert_eq!(
            names(&given, &[(1, 1), (2, 2)]),
            ["\"a\\\"b\"", "\"20-per-60s\""]
        );
    }
}
