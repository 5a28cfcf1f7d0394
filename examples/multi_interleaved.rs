//! One `Bucket` against a two-quota `MultiBucket`, and a `KeyedLimiter` against a
//! `KeyedMultiLimiter` with two quotas per key, timed in interleaved blocks: 1,500 pairs of
//! blocks of 20,000 `try_acquire(1)` calls each, alternating, on the quanta clock. The single
//! limits use the quotas of `benches/multi.rs` (`allow`: every call admitted; `deny`: the first
//! quota drained, the second holding tokens); the keyed ones those of `benches/keyed.rs` (a
//! quota per second and one per minute, every key drained first in `deny`) on 10,000 uniform
//! keys in a table for 16,384 (`uniform10k-fit`) and on 16 keys (`hot16`). Alternating the two
//! shares whatever load there is between them, where criterion's runs, one after the other,
//! do not.
//!
//! Prints each side's fastest block, the median of the per-pair ratios, and that median over
//! two classes of pairs told apart by the reference's own block (the `Bucket`'s, the
//! `KeyedLimiter`'s): **quiet** (within 5 % of its fastest block) and **disturbed** (more than
//! 12 % above it). On a shared host the guest's
//! core runs in one state or the other for seconds at a time, and the 128-bit compare-and-swap
//! is hit much harder by the disturbed one than the bucket's 64-bit one (see
//! `docs/benchmarks.md`, 2026-12-03), so a plain median says more about the host than the code.
//!
//! ```text
//! cargo run --release --example multi_interleaved
//! ```
use std::hint::black_box;
use std::time::Duration;
use std::time::Instant;
use tollgate::{Bucket, KeyedLimiter, KeyedMultiLimiter, Limits, MultiBucket, QuantaClock, Quota};
use tollgate_testkit::contention::key_stream;
use tollgate_testkit::quotas::multi_bench;

/// Nanoseconds per call of `f` over `n` calls.
fn block(n: u32, f: impl Fn() -> bool) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// The median of `v` (`NaN` if empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Times `pairs` alternating blocks of `reference` and `new` and prints the line for `name`.
fn compare(
    name: &str,
    (n, pairs): (u32, usize),
    reference: impl Fn() -> bool,
    new: impl Fn() -> bool,
) {
    let blocks: Vec<(f64, f64)> = (0..pairs)
        .map(|_| (block(n, &reference), block(n, &new)))
        .collect();
    let b = blocks.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    let m = blocks.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let class = |keep: &dyn Fn(f64) -> bool| -> (usize, f64) {
        let r: Vec<f64> = blocks
            .iter()
            .filter(|p| keep(p.0))
            .map(|p| p.1 / p.0)
            .collect();
        (r.len(), median(r))
    };
    let all = class(&|_| true).1;
    let quiet = class(&|x| x <= b * 1.05);
    let disturbed = class(&|x| x > b * 1.12);
    println!(
        "{name}: {b:.2} ns against {m:.2} ns (fastest blocks: {:.3}x), median of per-pair ratios {all:.3}x; quiet pairs {} at {:.3}x, disturbed pairs {} at {:.3}x",
        m / b,
        quiet.0,
        quiet.1,
        disturbed.0,
        disturbed.1
    );
}

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
        compare(
            regime,
            size,
            || black_box(&bucket).try_acquire(1).is_ok(),
            || black_box(&policy).try_acquire(1).is_ok(),
        );
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
            let single: KeyedLimiter<u64, _> =
                KeyedLimiter::with_clock(second, 16_384, QuantaClock::new());
            let policy: KeyedMultiLimiter<u64, _> = KeyedMultiLimiter::with_clock(
                Limits::new([second, minute]).unwrap(),
                16_384,
                QuantaClock::new(),
            );
            let take = if drained { burst } else { 1 };
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
            compare(
                &format!("{name} {regime}"),
                size,
                || black_box(&single).try_acquire(next(), 1).is_ok(),
                || black_box(&policy).try_acquire(next(), 1).is_ok(),
            );
        }
    }
}
