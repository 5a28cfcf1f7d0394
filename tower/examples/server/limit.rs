//! `--limit N/s|N/min|N/h|N/d:BURST` (repeatable): a policy of one to four quotas that must all
//! hold, and the layers over it.

use std::time::Duration;

use std::hash::Hash;
use std::net::IpAddr;

use axum::Router;
use tollgate::{DefaultClock, KeyedMultiLimiter, KeyedMultiLimiterBuilder, Limits, Quota};
use tollgate_tower::{ClientIp, HeaderKey, PeerIp, RateLimitLayer};

use crate::state::Limiters;
use crate::{observed, Cli, KeyKind, Trusted, MAX_KEYS};

/// One `--limit` value: `N/UNIT:BURST`, every part required, `N` and `BURST` at least 1.
pub(crate) fn parse_limit(s: &str) -> Result<Quota, String> {
    let shape = || format!("expected N/s, N/min, N/h or N/d and a burst (5/s:10), got {s:?}");
    let (rate, burst) = s.split_once(':').ok_or_else(shape)?;
    let (n, unit) = rate.split_once('/').ok_or_else(shape)?;
    let tokens: u64 = n
        .parse()
        .map_err(|_| format!("the limit's count {n:?} is not a whole number up to 2^64-1"))?;
    let burst: u64 = burst
        .parse()
        .map_err(|_| format!("the limit's burst {burst:?} is not a whole number up to 2^64-1"))?;
    let per = match unit {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "d" => Duration::from_secs(86_400),
        other => return Err(format!("unknown unit {other:?}: use s, min, h or d")),
    };
    if tokens == 0 || burst == 0 {
        return Err("the count and the burst must be at least 1".into());
    }
    Quota::new(tokens, per, burst).map_err(|e| e.to_string())
}

/// The policy of the `--limit` flags (`None` without any).
pub(crate) fn limits(quotas: &[Quota]) -> Result<Option<Limits>, String> {
    if quotas.is_empty() {
        return Ok(None);
    }
    Limits::new(quotas.iter().copied())
        .map(Some)
        .map_err(|e| format!("too many --limit flags: {e}"))
}

/// The in-process layer over `limits`: one policy for everything (`--key global`), or a
/// `KeyedMultiLimiter` in which each key (`--key ip`, with `--trusted-proxies` or not, or
/// `--key header:NAME`) carries all the limits, in a table of at most `MAX_KEYS` keys; restored
/// from and saved to `--state` through `limiters`.
pub(crate) fn layer(app: Router, limits: Limits, cli: &Cli, limiters: &mut Limiters) -> Router {
    /// The per-key table's builder; with `--metrics` its gauges and evictions as `http-keys`,
    /// as the single-quota table's.
    fn per_key<'a, K: Hash + Eq + Clone>(
        limits: &'a Limits,
        cli: &Cli,
    ) -> impl Fn() -> KeyedMultiLimiterBuilder<K, DefaultClock> + 'a {
        let named = cli.metrics;
        move || {
            let builder =
                KeyedMultiLimiter::builder(limits.clone(), MAX_KEYS, DefaultClock::default());
            if named {
                builder.name("http-keys")
            } else {
                builder
            }
        }
    }
    match (&cli.key, &cli.trusted_proxies) {
        (KeyKind::Global, _) => app.layer(observed(
            RateLimitLayer::shared(limiters.multi(limits)),
            cli,
        )),
        (KeyKind::Ip, None) => app.layer(observed(
            RateLimitLayer::shared(limiters.keyed(per_key::<IpAddr>(&limits, cli)))
                .key(PeerIp::new()),
            cli,
        )),
        (KeyKind::Ip, Some(Trusted(trusted))) => {
            let key = ClientIp::new(trusted.iter().copied());
            let table = limiters.keyed(per_key::<IpAddr>(&limits, cli));
            app.layer(observed(RateLimitLayer::shared(table).key(key), cli))
        }
        (KeyKind::Header(name), _) => {
            let key = HeaderKey::new(name.clone());
            let table = limiters.keyed(per_key::<String>(&limits, cli));
            app.layer(observed(RateLimitLayer::shared(table).key(key), cli))
        }
    }
}
