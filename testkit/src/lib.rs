//! The one test kit of the tollgate workspace, used by every crate's integration tests, the
//! loom models, the fuzz targets and the benches (never by the core's own unit tests: a
//! dev-dependency on a crate that depends on the core would link a second copy of it, so those
//! keep the few lines of `src/test_support.rs`).
//!
//! | module | what |
//! |---|---|
//! | [`decide`] | [`decide::Snapshotting`]: any limiter's decision with its tightest snapshot, whatever the verdict |
//! | [`model`] | the exact reference model of the continuous token bucket, and a checker that drives a `Bucket` and the model through the same operations |
//! | [`window`] | [`window::WindowChecker`]: every window of admissions against `burst + rate · Δ`; [`window::SpanChecker`]: the same for admissions known up to an interval (remote decisions) |
//! | [`stall`] | [`stall::StallClock`]: a chosen thread's reading made stale, as preemption between a reading and a CAS does |
//! | [`guava`] | Guava's `SmoothRateLimiter` transcribed: the reference `Smooth` is compared with |
//! | [`rng`] | [`rng::Rng`]: the seeded xorshift generator (the only one) |
//! | [`wakers`] | counting and thread wakers, and [`wakers::block_on`] |
//! | [`quotas`] | short constructors: [`quotas::ms`], [`quotas::quota`] |
//! | [`random_quotas`] | log-uniform random quotas and quotas at the ends of a backend's range |
//! | `recorder` | (feature `metrics`) a debugging recorder, local or global, and its snapshots by series name |
//! | [`contention`] | run a closure on several threads from a spinning start line, slowest thread's time; the keyed benchmarks' key stream |
//! | [`interleave`] | two implementations timed in interleaved blocks, per-pair ratios split into quiet and disturbed pairs |
//! | [`cpus`] | the CPUs the process may run on (all, or the first two), and pinning a thread to one (Linux) |
//! | [`redis_server`] | throwaway `redis-server` processes and a three-master cluster on loopback ports |
//! | [`signal`] | [`signal::Signal`]: a writer that flags its first write (a save has begun) |
//! | [`alloc`] | [`alloc::Counting`]: a global allocator counting the bytes live and their peak |

pub mod alloc;
pub mod contention;
pub mod cpus;
pub mod decide;
pub mod guava;
pub mod interleave;
pub mod model;
pub mod quotas;
pub mod random_quotas;
#[cfg(feature = "metrics")]
pub mod recorder;
pub mod redis_server;
pub mod rng;
pub mod signal;
pub mod stall;
pub mod wakers;
pub mod window;
