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

/// `pairs` alternating blocks of `reference` and `new`: (reference's, new's) ns per call.
fn time_pairs(
    (n, pairs): (u32, usize),
    reference: impl Fn() -> bool,
    new: impl Fn() -> bool,
) -> Vec<(f64, f64)> {
    (0..pairs)
        .map(|_| (block(n, &reference), block(n, &new)))
        .collect()
}

/// Prints the line for `name` from `rounds` of pairs. A pair is quiet or disturbed by its
/// reference block against the fastest reference block of its own round: each keyed round
/// builds its two tables afresh, with fresh random hash seeds, and a seed sets how long the
/// probes of a few keys run (16 keys in the smallest region, 64 slots, collide differently
/// under each), so one seed's pair of tables would measure that seed's luck on either side.
fn report(name: &str, rounds: &[Vec<(f64, f64)>]) {
    let all_blocks = rounds.iter().flatten();
    let b = all_blocks.clone().map(|p| p.0).fold(f64::MAX, f64::min);
    let m = all_blocks.map(|p| p.1).fold(f64::MAX, f64::min);
    // (reference block / its round's fastest, new / reference) per pair.
    let pairs: Vec<(f64, f64)> = rounds
        .iter()
        .flat_map(|round| {
            let fastest = round.iter().map(|p| p.0).fold(f64::MAX, f64::min);
            round.iter().map(move |p| (p.0 / fastest, p.1 / p.0))
        })
        .collect();
    let class = |keep: &dyn Fn(f64) -> bool| -> (usize, f64) {
        let r: Vec<f64> = pairs.iter().filter(|p| keep(p.0)).map(|p| p.1).collect();
        (r.len(), median(r))
    };
    let all = class(&|_| true).1;
    let quiet = class(&|x| x <= 1.05);
    let disturbed = class(&|x| x > 1.12);
    println!(
        "{name}: {b:.2} ns against {m:.2} ns (fastest blocks: {:.3}x), median of per-pair ratios {all:.3}x; quiet pairs {} at {:.3}x, disturbed pairs {} at {:.3}x",
        m / b,
        quiet.0,
        quiet.1,
        disturbed.0,
        disturbed.1
    );
}

/// Keyed pairs of tables built afresh, with fresh hash seeds (see [`report`]), the pairs of
/// blocks shared out among them.
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
                    let single: KeyedLimiter<u64, _> =
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
