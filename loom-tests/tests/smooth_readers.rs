//! loom model: `Smooth` readers racing two reconfigurations (`set_rate` twice, so the slot the
//! reader's word names can be rewritten while it reads). A read-only result (`rate()`, a
//! refusal) must be one that some serial order explains: a rate that was in force, a refusal
//! the state at that time implies.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test smooth_readers`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{ManualClock, Smooth};

#[test]
fn readers_race_two_rate_changes() {
    loom::model(|| {
        let clock = ManualClock::new();
        let limiter =
            Arc::new(Smooth::bursty_with_clock(1.0, Duration::from_secs(1), clock).unwrap());
        // The next permit is free at 1 s whatever the rate: every reader at 0 is refused.
        assert_eq!(limiter.acquire(1), Duration::ZERO);
        let writer = {
            let limiter = limiter.clone();
            thread::spawn(move || {
                limiter.set_rate(2.0).unwrap();
                limiter.set_rate(4.0).unwrap();
            })
        };
        let r1 = limiter.rate();
        let refused = !limiter.try_acquire(1, Duration::ZERO);
        let r2 = limiter.rate();
        writer.join().unwrap();
        assert!([1.0, 2.0, 4.0].contains(&r1), "{r1}");
        assert!([1.0, 2.0, 4.0].contains(&r2), "{r2}");
        assert!(r2 >= r1, "rates go 1, 2, 4: {r1} then {r2}");
        assert!(refused);
        assert_eq!(limiter.rate(), 4.0);
    });
}
