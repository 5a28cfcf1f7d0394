//! # tollgate-bench
//!
//! A lock-strategy harness: the same exact rate-limit decision ([`tollgate::gcra::try_acquire`]
//! on a `u64` state) under every synchronization strategy — mutexes, a spin lock, CAS loops,
//! sharding — and against the peers you would otherwise pick, measured side by side, with the
//! correctness of every strategy checked in every cell.
//!
//! * [`RateLimiter`] — the trait every strategy implements; implement it to compare your own.
//! * [`Strategy`] — a named factory of limiters; [`strategies::builtins`] lists the built-ins.
//! * [`Plan`] — what a comparison runs: cells (strategy × threads × [`Regime`]), validated
//!   before anything runs ([`plan`], pure data).
//! * [`run_cell`] runs one cell once ([`run`]); [`compare()`] runs a plan
//!   ([`compare`](mod@compare)), each cell in interleaved [`Round`]s whose median it reports
//!   ([`cell`]).
//! * [`Error`] — why a plan, a strategy, a cell or an output failed.
//! * [`Report`] — the table, CSV, JSON and SVG outputs; [`Report::violations`] are the cells
//!   where a strategy admitted more than `burst + rate × elapsed`.
//! * [`cli`] — the `tollgate-bench compare` command line, reusable with your own strategies.
//! * [`machine`] — the CPU model and load printed with the table.
//! * [`strategies::redis`] — `redis`, `redis-lease` and the plain Lua baseline (`--redis URL`).
//!
//! ```
//! use std::time::Duration;
//! use tollgate_bench::{compare, strategies, Plan, Regime};
//! let plan = Plan::new(vec![1, 2], vec![Regime::Mixed], Duration::from_millis(5));
//! let report = compare(&strategies::builtins(), &plan, |_, _, _| {}).unwrap();
//! assert!(report.violations().is_empty());
//! println!("{}", report.to_table());
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

pub mod cell;
pub mod cli;
pub mod compare;
mod error;
pub mod machine;
pub mod plan;
pub mod report;
pub mod rng;
pub mod run;
pub mod strategies;

pub use cell::{BusiestKey, CellResult, Round};
pub use compare::compare;
pub use error::{BuildError, Error};
pub use plan::{CellSpec, Plan, Regime};
pub use report::Report;
pub use run::run_cell;
pub use strategies::{Kind, RateLimiter, Setup, Strategy};
