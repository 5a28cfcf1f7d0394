//! # tollgate-rls
//!
//! An Envoy rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`) on tollgate's
//! exact token buckets, reading envoyproxy/ratelimit's YAML configuration. See `README.md` for
//! the command line, the configuration and every difference from envoyproxy/ratelimit.
//!
//! The binary is `tollgate-rls`; this library is what it is made of, so that tests can run the
//! service in-process on a [`tollgate::ManualClock`] ([`server::run`] with
//! [`engine::RlsClock::manual`]).
//!
//! * [`config`]: the YAML, its validation and the descriptor lookup;
//! * [`engine`]: the only module that uses tollgate and tollgate-redis — the local backend
//!   (per-limit keyed tables, all or nothing across a request), the Redis backend (one script
//!   call per request) and saved state;
//! * [`service`]: one request's decision, whatever the transport;
//! * [`grpc`], [`http`]: the two ports; [`conn`]: their connections (a cap, deadlines, the
//!   idle timeout); [`server`]: startup, reload, drain.

pub mod config;
pub mod conn;
pub mod engine;
#[cfg(fuzzing)]
pub mod fuzzing;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod server;
pub mod service;
mod wire;
