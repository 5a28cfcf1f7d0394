//! # tollgate-tower
//!
//! A tower layer (axum, hyper, tonic) on tollgate's exact limiters.
//!
//! * [`RateLimitLayer`] / [`RateLimit`] — the layer and its service: a refused request is
//!   answered at once with 429 from `call` (never back-pressure through `poll_ready`, never a
//!   dropped connection); clones share one limit.
//! * [`Backend`] — the one small trait between the layer and a limiter: [`tollgate::Bucket`],
//!   [`tollgate::ShardedBucket`], [`tollgate::KeyedLimiter`], [`tollgate::MultiBucket`] (a
//!   policy of several quotas, all or nothing), and (feature `redis`)
//!   `tollgate_redis::RedisLimiter`; [`Decision`] carries the verdict and the snapshot the
//!   headers are computed from (no second clock read), and for a policy a [`PolicyReport`]
//!   (every quota, which one refused).
//! * Keys ([`KeyExtractor`]): [`Global`], [`PeerIp`], [`ClientIp`] (behind trusted proxies,
//!   walking `X-Forwarded-For` / `Forwarded` from the right, see [`ProxyHeader`]),
//!   [`HeaderKey`], [`key_fn`]; IPv6 grouped by [`IpGrouping`] (default /64); [`MissingKey`]
//!   for requests without a key.
//! * [`Cost`] — tokens per request ([`UnitCost`] or a closure).
//! * [`RateLimitHeaders`] — `Retry-After` (rounded up, at least 1), the IETF `RateLimit` /
//!   `RateLimit-Policy` fields, the legacy `X-RateLimit-*`; [`Rejection`] — the refusal's
//!   status, content type and body, or gRPC `RESOURCE_EXHAUSTED`.
//!
//! ```
//! use std::net::{IpAddr, SocketAddr};
//! use axum::{routing::get, Router};
//! use tollgate::{KeyedLimiter, Quota};
//! use tollgate_tower::{PeerIp, RateLimitLayer};
//!
//! let per_ip: KeyedLimiter<IpAddr> = KeyedLimiter::new(Quota::per_second(100).unwrap(), 100_000);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "ok" }))
//!     .layer(RateLimitLayer::new(per_ip).key(PeerIp::new()));
//! // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
//! # let _ = app.into_make_service_with_connect_info::<SocketAddr>();
//! ```
#![doc(test(attr(deny(warnings))))]

mod backend;
mod cost;
mod error;
mod headers;
mod key;
mod layer;
mod proxy;
mod rejection;
mod report;

pub use backend::{Backend, Check, Decision};
pub use cost::{Cost, UnitCost};
pub use error::Error;
pub use headers::RateLimitHeaders;
pub use key::{
    key_fn, ClientIp, FnKey, Global, HeaderKey, IpGrouping, KeyExtractor, KeyType, MissingKey,
    PeerIp,
};
pub use layer::{RateLimit, RateLimitBody, RateLimitLayer, ResponseFuture};
pub use proxy::ProxyHeader;
pub use rejection::Rejection;
pub use report::PolicyReport;
