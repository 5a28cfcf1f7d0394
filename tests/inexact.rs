//! Inexact quotas (`Quota::is_exact() == false`): what a full bucket admits at one reading, the
//! bound on the one rounding (a cap off the unit grid rounds up to a whole unit), and why that
//! rounding cannot be avoided without admitting what the continuous bucket refuses.
//!
//! A reading `now` is on the unit grid when the units earned by then are whole (`now · mul`
//! divisible by `div`, `Quota::units_per_ns`). Off it, a full bucket admits its whole burst in
//! one request, or `burst − 1` requests of one token and the last one `⌈div / mul⌉` ns later at
//! most (1 ns when the quota earns a unit per nanosecond or more).
#![cfg(feature = "keyed")]

use std::time::Duration;
use tollgate::{
    gcra, Bucket, Denied, KeyedLimiter, KeyedMultiLimiter, Limits, ManualClock, MultiBucket, Quota,
    ShardedBucket, HORIZON,
};
use tollgate_testkit::model::Model;

const HORIZON_NS: u64 = 3_155_760_000_000_000_000;
const MINUTE: u64 = 60_000_000_000;
const DAY: u64 = 1440 * MINUTE;

/// `(tokens, per_ns, burst)`: 7 per minute, hour, day, 30 days and 365 days; 3/s (half a
/// nanosecond per unit); a prime rate; large bursts, one of which earns a unit only every
/// 429,154 ns (1 per hour with a burst of 2^40).
fn quotas() -> Vec<(u64, u64, u64)> {
    vec![
        (7, MINUTE, 7),
        (7, 60 * MINUTE, 7),
        (7, DAY, 7),
        (7, 30 * DAY, 7),
        (7, 365 * DAY, 7),
        (3, 1_000_000_000, 3),
        (7, 30 * DAY, 1000),
        (999_999_937, 1_000_000_000, 50),
        (3, 1_000_000_000, 1 << 30),
        (1, 60 * MINUTE, 1 << 40),
    ]
}

fn quota(&(tokens, per, burst): &(u64, u64, u64)) -> Quota {
    let q = Quota::new(tokens, Duration::from_nanos(per), burst).unwrap();
    assert!(!q.is_exact(), "{q:?}");
    q
}

/// Readings: the origin, the first nanoseconds, 1 s, 10^8 s, the last before the horizon, and a
/// grid reading of the quota with its neighbours.
fn readings(q: &Quota) -> Vec<u64> {
    let div = q.units_per_ns().1;
    let grid = div * (100_000_000_000_000_000 / div);
    vec![
        0,
        1,
        2,
        1_000_000_000,
        100_000_000_000_000_000,
        grid - 1,
        grid,
        grid + 1,
        HORIZON_NS - 1,
    ]
}

/// `(⌊now · mul / div⌋, ⌈now · mul / div⌉)`: the units earned by `now`, rounded down and up.
fn earned(q: &Quota, now: u64) -> (u128, u128) {
    let (mul, div) = q.units_per_ns();
    let n = u128::from(now) * u128::from(mul);
    (n / u128::from(div), n.div_ceil(u128::from(div)))
}

/// One request of `cost` tokens at the clock's reading.
type Acquire = Box<dyn Fn(u64) -> Result<(), Denied>>;

/// Every limiter that starts its buckets full, each deciding one request at the clock's reading.
/// With `one_at_a_time`, a `ShardedBucket` of 4 shards only for bursts below `8 × 4` tokens:
/// it then takes no leases, so which shard the test's thread runs on changes nothing; above,
/// a thread that moves to another CPU may leave tokens in its old shard's lease (by design, at
/// most an eighth of the burst: docs/sharded.md).
fn limiters(q: Quota, clock: &ManualClock, one_at_a_time: bool) -> Vec<(&'static str, Acquire)> {
    let bucket = Bucket::with_clock(q, clock.clone());
    let multi = MultiBucket::with_clock(Limits::new([q]).unwrap(), clock.clone());
    let one = ShardedBucket::with_clock(q, 1, clock.clone());
    let four = ShardedBucket::with_clock(q, 4, clock.clone());
    let keyed: KeyedLimiter<u64, Quota, ManualClock> =
        KeyedLimiter::with_clock(q, 16, clock.clone());
    let keyed_multi: KeyedMultiLimiter<u64, ManualClock> =
        KeyedLimiter::with_clock(Limits::new([q]).unwrap(), 16, clock.clone());
    let mut all: Vec<(&'static str, Acquire)> = vec![
        ("Bucket", Box::new(move |c| bucket.try_acquire(c))),
        ("MultiBucket", Box::new(move |c| multi.try_acquire(c))),
        (
            "ShardedBucket (1 shard)",
            Box::new(move |c| one.try_acquire(c)),
        ),
        (
            "KeyedLimiter (new key)",
            Box::new(move |c| keyed.try_acquire(&7, c)),
        ),
        (
            "KeyedMultiLimiter (new key)",
            Box::new(move |c| keyed_multi.try_acquire(&7, c)),
        ),
    ];
    if !one_at_a_time || q.burst() < 32 {
        all.push((
            "ShardedBucket (4 shards)",
            Box::new(move |c| four.try_acquire(c)),
        ));
    }
    all
}

/// What a full bucket of `q` admits at `now`, taking one token at a time (for a burst over 1,000,
/// the first token, then `burst − 2` at once, then one: the same state, as only the first
/// admission caps): on the grid the whole burst; off it `burst − 1`, then a refusal whose wait is
/// the first reading at which the units earned, rounded down, reach the cap's rounded-up value.
fn check_one_at_a_time(
    q: &Quota,
    now: u64,
    acquire: &dyn Fn(u64) -> Result<(), Denied>,
    what: &str,
) {
    let burst = q.burst();
    let ctx = format!("{what}, {q:?}, now {now}");
    let (floor, ceil) = earned(q, now);
    let taken = if burst > 1000 {
        assert_eq!(acquire(1), Ok(()), "{ctx}");
        assert_eq!(acquire(burst - 2), Ok(()), "{ctx}");
        burst - 1
    } else {
        (0..burst - 1)
            .map(|_| acquire(1))
            .filter(Result::is_ok)
            .count() as u64
    };
    assert_eq!(taken, burst - 1, "{ctx}");
    let last = acquire(1);
    if floor == ceil {
        assert_eq!(last, Ok(()), "on the grid, the whole burst: {ctx}");
        return;
    }
    let (mul, div) = q.units_per_ns();
    // The first reading whose units earned, rounded down, reach `ceil`.
    let due = (ceil * u128::from(div)).div_ceil(u128::from(mul));
    let want = if due > u128::from(HORIZON_NS) {
        Duration::MAX
    } else {
        let wait = (due - u128::from(now)) as u64;
        // At most the time one unit takes to refill, rounded up to whole nanoseconds.
        assert!(wait <= div.div_ceil(mul), "{ctx}: {wait} ns");
        Duration::from_nanos(wait)
    };
    assert_eq!(last, Err(Denied::RetryAfter(want)), "{ctx}");
}

/// Every limiter that starts buckets full admits the whole burst as one request at every reading.
#[test]
fn a_full_bucket_admits_its_whole_burst_in_one_request_at_every_reading() {
    for spec in quotas() {
        let q = quota(&spec);
        for now in readings(&q) {
            let clock = ManualClock::new();
            clock.set(Duration::from_nanos(now));
            for (what, acquire) in limiters(q, &clock, false) {
                assert_eq!(acquire(q.burst()), Ok(()), "{what}, {q:?}, now {now}");
                assert!(acquire(1).is_err(), "{what}, {q:?}, now {now}");
            }
        }
    }
}

/// One token at a time, every limiter admits the whole burst on the unit grid and `burst − 1`
/// off it, the last token within `⌈div / mul⌉` ns (1 ns for 7 per month, 429,154 ns for 1 per
/// hour with a burst of 2^40); never, where that instant is past the horizon.
#[test]
fn one_token_at_a_time_off_the_grid_the_last_token_waits_one_units_refill_at_most() {
    let mut off_grid = 0;
    for spec in quotas() {
        let q = quota(&spec);
        for now in readings(&q) {
            let clock = ManualClock::new();
            clock.set(Duration::from_nanos(now));
            for (what, acquire) in limiters(q, &clock, true) {
                check_one_at_a_time(&q, now, &*acquire, what);
            }
            off_grid += usize::from(earned(&q, now).0 != earned(&q, now).1);
        }
    }
    assert!(off_grid > 40, "{off_grid}");
    // The bound is not always 1 ns: this quota earns a unit every 429,154 ns.
    let slow = quota(&(1, 60 * MINUTE, 1 << 40));
    let (mul, div) = slow.units_per_ns();
    assert_eq!(div.div_ceil(mul), 429_154);
    // The horizon used above is the crate's.
    assert_eq!(HORIZON, Duration::from_nanos(HORIZON_NS));
}

/// A bucket restored from a full one's saved state behaves as a new one.
#[cfg(feature = "persist")]
#[test]
fn a_restored_full_bucket_waits_as_a_new_one() {
    let wall = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for spec in quotas() {
        let q = quota(&spec);
        let mut file = Vec::new();
        Bucket::with_clock(q, ManualClock::new())
            .save_at(&mut file, wall)
            .unwrap();
        for now in readings(&q) {
            let clock = ManualClock::new();
            clock.set(Duration::from_nanos(now));
            let b = Bucket::with_clock(q, clock.clone());
            b.restore_at(&file[..], wall).unwrap();
            check_one_at_a_time(&q, now, &|c| b.try_acquire(c), "restored Bucket");
        }
    }
}

/// Why the last token of a burst taken off the grid must wait: two histories leave the same
/// state at the same reading, and the continuous bucket admits a token after one and refuses it
/// after the other. (1) A full bucket at an off-grid reading `t`, `burst − 1` tokens taken;
/// (2) a full bucket at reading 0 (on the grid) emptied at once, then `j` more tokens, each at
/// the reading it is due. With `⌈earned(t)⌉ = (j + 1) · scale` both states are
/// `(burst + j) · scale`. No decision on `(state, reading)` can then admit the last token of (1)
/// without over-admitting after (2), whichever unit the cap rounds to (a state holds whole units;
/// the continuous cap lies between two of them).
#[test]
fn the_last_token_off_the_grid_would_over_admit_after_another_history() {
    for spec in quotas().into_iter().filter(|&(_, _, burst)| burst <= 1000) {
        let q = quota(&spec);
        let (tokens, per, burst) = spec;
        let (mul, div) = q.units_per_ns();
        let (mul, div, scale) = (u128::from(mul), u128::from(div), u128::from(q.scale()));
        // The first `j` with an off-grid reading `t` whose units earned round up to `(j+1)·scale`.
        let (j, t) = (0..10_000u64)
            .find_map(|j| {
                let target = (u128::from(j) + 1) * scale;
                let t = (target * div - 1) / mul;
                let off = (t * mul) % div != 0 && (t * mul).div_ceil(div) == target;
                off.then_some((j, t as u64))
            })
            .unwrap_or_else(|| panic!("{q:?}: no colliding history"));

        // (1): burst − 1 tokens at `t`.
        let mut one = gcra::FULL;
        let mut model_one = Model::new(tokens, per, burst);
        for _ in 0..burst - 1 {
            one = gcra::try_acquire(one, t, &q, 1).unwrap().unwrap();
            model_one.try_acquire(t, 1).unwrap();
        }

        // (2): the burst at reading 0, then `j` tokens, token `i` at the reading it is due.
        let mut two = gcra::try_acquire(gcra::FULL, 0, &q, burst)
            .unwrap()
            .unwrap();
        let mut model_two = Model::new(tokens, per, burst);
        model_two.try_acquire(0, burst).unwrap();
        for i in 1..=j {
            let at = (u128::from(i) * scale * div).div_ceil(mul) as u64;
            assert!(at <= t);
            two = gcra::try_acquire(two, at, &q, 1).unwrap().unwrap();
            model_two.try_acquire(at, 1).unwrap();
        }

        assert_eq!(one, two, "{q:?}: j {j}, t {t}");
        assert_eq!(model_one.try_acquire(t, 1), Ok(()), "{q:?}");
        assert!(model_two.try_acquire(t, 1).is_err(), "{q:?}");
        // The same input, so the same decision: the one that never over-admits.
        assert!(gcra::try_acquire(one, t, &q, 1).is_err(), "{q:?}");
    }
}

/// A bucket capped off the grid admits nothing before the continuous bucket does: a full bucket
/// emptied at an off-grid reading, then one token at a time at the bucket's own due instants.
/// Capping at the unit below the continuous cap (so that the whole burst passes one token at a
/// time) admits early here, by less than a unit, for each of these quotas.
#[test]
fn a_bucket_capped_off_the_grid_never_admits_before_the_model() {
    for spec in quotas().into_iter().filter(|&(_, _, burst)| burst <= 1000) {
        let q = quota(&spec);
        let (tokens, per, burst) = spec;
        for start in (1..300).chain(100_000_000_000_000_000..100_000_000_000_000_300) {
            let clock = ManualClock::new();
            clock.set(Duration::from_nanos(start));
            let b = Bucket::with_clock(q, clock.clone());
            let mut model = Model::new(tokens, per, burst);
            b.try_acquire(burst).unwrap();
            model.try_acquire(start, burst).unwrap();
            let mut now = start;
            for _ in 0..20 {
                if let Err(Denied::RetryAfter(d)) = b.try_acquire(1) {
                    now += d.as_nanos() as u64;
                    clock.set(Duration::from_nanos(now));
                    assert_eq!(b.try_acquire(1), Ok(()), "{q:?} at {now}");
                }
                assert_eq!(
                    model.try_acquire(now, 1),
                    Ok(()),
                    "{q:?}: started {start}, admitted early at {now}"
                );
            }
        }
    }
}
