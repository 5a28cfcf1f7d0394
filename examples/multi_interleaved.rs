//! One `Bucket` against a two-quota `MultiBucket`, and a `KeyedLimiter` against a
//! `KeyedMultiLimiter` with two quotas per key, timed in interleaved blocks: 1,500 pairs of
//! blocks of 20,000 `try_acquire(1)` calls each, alternating, on the quanta clock. The single
//! limits use the quotas of `benches/multi.rs` (`allow`: every call admitted; `deny`: the first
//! quota drained, the second holding tokens); the keyed ones those of `benches/keyed.rs` (a
//! quota per second and one per minute, every key drained first in `deny`) on 10,000 uniform
//! keys in a table for 16,384 (`uniform10k-fit`) and on 16 keys (`hot16`), each keyed
//! scenario over 30 pairs of tables built afresh (fresh hash seeds), 50 pairs of blocks each.
//! Alternating the two shares whatever load there is between them, where criterion's runs,
//! one after the other, do not.
//!
//! Prints each side's fastest block, the median of the per-pair ratios, and that median over
//! two classes of pairs told apart by the reference's own block (the `Bucket`'s, the
//! `KeyedLimiter`'s): **quiet** (within 5 % of the fastest block of its round) and
//! **disturbed** (more than 12 % above it). On a shared host the guest's
//! core runs in one state or the other for seconds at a time, and the 128-bit compare-and-swap
//! is hit much harder by the disturbed one than the bucket's 64-bit one (`docs/benchmarks.md`),
//! so a plain median says more about the host than the code.
//!
//! ```text
//! cargo run --release --example multi_interleaved
//! ```
use std::hint::black_box;
use std::time::Duration;
use tollgate::{Bucket, KeyedLimiter, KeyedMultiLimiter, Limits, MultiBucket, QuantaClock, Quota};
use tollgate_testkit::contention::key_stream;
use tollgate_testkit::interleave::{report, time_pairs};
use tollgate_testkit::quotas::multi_bench;

/// Keyed pairs of tables built afresh, with fresh hash seeds (see
/// `tollgate_testkit::interleave::report`), the pairs of blocks shared out among them.
const KEYED_ROUNDS: usize = 30;

fn main() {
    let size = (20_000, 1_500);
    println!("bucket against a two-quota MultiBucket:");
    for (regime, deny) in [("allow", false), ("deny", true)] {
        let q = &multi_bench(deny)[..2];
        let bucket = Bucket::with_clock(q[0], QuantaClock::new());
        let policy =
            MultiBucket::with_clock(Limits::new(q.iter().copied()).unwrap(), QuantaClock::new());
        if deny {
            bucket.try_acquire(1).unwrap();
            policy.try_acquire(1).unwrap();
        }
        let blocks = time_pairs(
            size,
            || black_box(&bucket).try_acquire(1).is_ok(),
            || black_box(&policy).try_acquire(1).is_ok(),
        );
        report(regime, &[blocks]);
    }
    println!("KeyedLimiter against a two-quota KeyedMultiLimiter:");
    for (keys, name) in [(10_000, "uniform10k-fit"), (16, "hot16")] {
        let stream = key_stream(keys, 0x1234);
        for (regime, (tokens, burst), drained) in [
            ("allow", (1_000_000_000, 1_000_000_000), false),
            ("deny", (1, 1_000), true),
        ] {
            let second = Quota::new(tokens, Duration::from_secs(1), burst).unwrap();
            let minute = Quota::new(60 * tokens, Duration::from_secs(60), 60 * burst).unwrap();
            let take = if drained { burst } else { 1 };
            let rounds: Vec<Vec<(f64, f64)>> = (0..KEYED_ROUNDS)
                .map(|_| {
                    let single: KeyedLimiter<u64, _, _> =
                        KeyedLimiter::with_clock(second, 16_384, QuantaClock::new());
                    let policy: KeyedMultiLimiter<u64, _> = KeyedMultiLimiter::with_clock(
                        Limits::new([second, minute]).unwrap(),
                        16_384,
                        QuantaClock::new(),
                    );
                    for k in &stream {
                        let _ = single.try_acquire(k, take);
                        let _ = policy.try_acquire(k, take);
                    }
                    let i = std::cell::Cell::new(0usize);
                    let next = || {
                        let k = &stream[i.get() & 0xFFFF];
                        i.set(i.get() + 1);
                        k
                    };
                    time_pairs(
                        (size.0, size.1 / KEYED_ROUNDS),
                        || black_box(&single).try_acquire(next(), 1).is_ok(),
                        || black_box(&policy).try_acquire(next(), 1).is_ok(),
                    )
                })
                .collect();
            report(&format!("{name} {regime}"), &rounds);
        }
    }
}
