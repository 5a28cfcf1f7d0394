//! Plug your own strategy into the harness and compare it with the built-ins.
//!
//! ```text
//! cargo run --release -p tollgate-bench --example custom_strategy
//! cargo run --release -p tollgate-bench --example custom_strategy -- compare --regime deny --threads 1,2,8
//! ```
//!
//! The strategy here is a reader-writer lock that decides refusals under the *read* lock (a
//! refusal writes nothing) and takes the write lock only to admit: a bet that pays in the deny
//! regime. It applies the same pure decision function as every built-in, so the harness checks
//! its admissions against the same bound. With no arguments the example runs a short
//! comparison against `std-mutex` and `cas`; with arguments it is the full `tollgate-bench` CLI,
//! with `rwlock-read-deny` added to the strategies.

use std::process::ExitCode;
use std::sync::RwLock;
use tollgate::{gcra, Clock, DefaultClock, Denied, Quota};
use tollgate_bench::{cli, Kind, RateLimiter, Setup, Strategy};

struct RwLockReadDeny {
    state: RwLock<u64>,
    quota: Quota,
    clock: DefaultClock,
}

impl RateLimiter for RwLockReadDeny {
    fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
        let now = self.clock.now();
        {
            // Fast path: a refusal under the shared lock. Admission can't be decided here (two
            // readers could both admit the last token), so it falls through.
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            gcra::try_acquire(*state, now, &self.quota, cost)?;
        }
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if let Some(next) = gcra::try_acquire(*state, now, &self.quota, cost)? {
            *state = next;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "rwlock-read-deny"
    }
}

fn rwlock_read_deny() -> Strategy {
    Strategy::new("rwlock-read-deny", Kind::Custom, |setup: &Setup| {
        Ok(Box::new(RwLockReadDeny {
            state: RwLock::new(gcra::FULL),
            quota: setup.quota,
            clock: setup.clock,
        }) as Box<dyn RateLimiter>)
    })
    .with_description("CUSTOM: RwLock, refusals under the read lock (examples/custom_strategy.rs)")
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    if args.len() == 1 {
        args.extend(
            [
                "compare",
                "--strategies",
                "std-mutex,cas,rwlock-read-deny",
                "--threads",
                "1,2",
                "--duration",
                "200ms",
            ]
            .map(String::from),
        );
    }
    cli::main_from(args, vec![rwlock_read_deny()])
}
