//! One `Bucket` against a two-quota `MultiBucket`, timed in interleaved blocks: 200 pairs of
//! blocks of 200,000 `try_acquire(1)` calls each, alternating, on the quanta clock, with the
//! quotas of `benches/multi.rs` (`allow`: every call admitted; `deny`: the first quota drained,
//! the second holding tokens). Prints each side's fastest block and the median of the per-pair
//! ratios: on a loaded machine a block that ran undisturbed is the cost of the code, and
//! alternating the two shares whatever load there is between them, where criterion's runs, one
//! after the other, do not.
//!
//! ```text
//! cargo run --release --example multi_interleaved
//! ```
use std::hint::black_box;
use std::time::Instant;
use tollgate::{Bucket, Limits, MultiBucket, QuantaClock};
use tollgate_testkit::quotas::multi_bench;

/// Nanoseconds per call of `f` over `n` calls.
fn block(n: u32, f: impl Fn() -> bool) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() {
    let (n, pairs) = (200_000, 200);
    for (regime, deny) in [("allow", false), ("deny", true)] {
        let q = &multi_bench(deny)[..2];
        let bucket = Bucket::with_clock(q[0], QuantaClock::new());
        let policy =
            MultiBucket::with_clock(Limits::new(q.iter().copied()).unwrap(), QuantaClock::new());
        if deny {
            bucket.try_acquire(1).unwrap();
            policy.try_acquire(1).unwrap();
        }
        let (mut b, mut m, mut ratios) = (f64::MAX, f64::MAX, Vec::new());
        for _ in 0..pairs {
            let x = block(n, || black_box(&bucket).try_acquire(1).is_ok());
            let y = block(n, || black_box(&policy).try_acquire(1).is_ok());
            (b, m) = (b.min(x), m.min(y));
            ratios.push(y / x);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "{regime}: bucket {b:.2} ns, multi {m:.2} ns (fastest blocks: {:.3}x), median of per-pair ratios {:.3}x",
            m / b,
            ratios[pairs / 2]
        );
    }
}
