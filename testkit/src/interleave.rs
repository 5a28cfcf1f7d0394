//! Two implementations timed in interleaved blocks of calls, so that whatever load the host
//! puts on the core falls on both alike (criterion's runs, one after the other, do not share
//! it), and the per-pair ratios sorted by the host's state: on a shared host a guest's core
//! runs quiet or disturbed for seconds at a time (`docs/benchmarks.md`, "Method").
//! Used by the `multi_interleaved` and `sharded_interleaved` examples.

use std::hint::black_box;
use std::time::Instant;

/// Nanoseconds per call of `f` over `n` calls.
pub fn block(n: u32, f: impl Fn() -> bool) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// The median of `v` (`NaN` if empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `pairs` alternating blocks of `reference` and `new`: (reference's, new's) ns per call.
pub fn time_pairs(
    (n, pairs): (u32, usize),
    reference: impl Fn() -> bool,
    new: impl Fn() -> bool,
) -> Vec<(f64, f64)> {
    (0..pairs)
        .map(|_| (block(n, &reference), block(n, &new)))
        .collect()
}

/// Prints the line for `name` from `rounds` of pairs: each side's fastest block, the median of
/// the per-pair ratios (new / reference), and that median over the **quiet** pairs (the
/// reference block within 5 % of the fastest reference block of its own round) and the
/// **disturbed** ones (more than 12 % above it). Rounds are for state that changes the
/// measure from one instance to the next: a keyed round builds its two tables afresh, with
/// fresh random hash seeds, and a seed sets how long the probes of a few keys run (16 keys in
/// the smallest region, 64 slots, collide differently under each), so one seed's pair of
/// tables would measure that seed's luck on either side.
pub fn report(name: &str, rounds: &[Vec<(f64, f64)>]) {
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

/// [`time_pairs`] on `threads` threads at once: each block is `n` calls on every thread, all
/// released together (a barrier), and its time is the aggregate time per call: from the first
/// thread's first call to the last thread's last, over `threads × n` calls (throughput's
/// inverse). Each thread reads the clock itself around its calls: with more threads than
/// CPUs a thread released by the barrier may run only after others have finished, so one
/// thread's view of the block would miss their calls. The calling thread is one of them; the
/// others live for the whole run, so a block costs no thread start. The threads share the
/// closures as `dyn Fn`, an indirect call per decision on both sides; [`time_pairs`] stays the
/// one-thread measure because it calls them monomorphized, without that call.
pub fn time_pairs_on(
    threads: usize,
    (n, pairs): (u32, usize),
    reference: &(dyn Fn() -> bool + Sync),
    new: &(dyn Fn() -> bool + Sync),
) -> Vec<(f64, f64)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = threads.max(1);
    let barrier = std::sync::Barrier::new(threads);
    let origin = Instant::now();
    // Nanoseconds since `origin`: the block's first start and last end, over its threads.
    let first = AtomicU64::new(u64::MAX);
    let last = AtomicU64::new(0);
    let since = |t: Instant| u64::try_from(t.duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
    let run = |f: &(dyn Fn() -> bool + Sync)| {
        let start = Instant::now();
        for _ in 0..n {
            black_box(f());
        }
        let end = Instant::now();
        first.fetch_min(since(start), Ordering::Relaxed);
        last.fetch_max(since(end), Ordering::Relaxed);
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(|| {
                for _ in 0..pairs {
                    for f in [reference, new] {
                        barrier.wait();
                        run(f);
                        barrier.wait();
                    }
                }
            });
        }
        let calls = f64::from(n) * threads as f64;
        (0..pairs)
            .map(|_| {
                let mut times = [0.0; 2];
                for (t, f) in times.iter_mut().zip([reference, new]) {
                    barrier.wait();
                    run(f);
                    // Every thread's clock readings are in once all have passed the barrier,
                    // and none writes again before the next block's barrier.
                    barrier.wait();
                    let span =
                        last.swap(0, Ordering::Relaxed) - first.swap(u64::MAX, Ordering::Relaxed);
                    *t = span as f64 / calls;
                }
                (times[0], times[1])
            })
            .collect()
    })
}
