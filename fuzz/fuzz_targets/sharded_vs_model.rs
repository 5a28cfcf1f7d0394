//! A `ShardedBucket` of 1 to 8 shards on chosen shards (the `cfg(fuzzing)` hook
//! `fuzz_acquire_on_shard`: a fuzzer cannot choose the CPU it runs on), one thread, readings
//! from a manual clock that advance by steps on the scale of one token's time, step back, or
//! are older than the latest (stale). Quotas: half exact and slow, the rest at high rates (up
//! to 10^9 tokens a second, where near leases are taken: 62,500 a second and up) or anything.
//!
//! Checked, as the docs promise (`ShardedBucket`, `docs/sharded.md`):
//! * every decision: cost 0 admitted, a cost above the burst `ExceedsBurst`, else admitted or
//!   `RetryAfter(d)` with `d > 0`;
//! * with one shard, every verdict (waits included) and `available()` equal a `Bucket`'s fed
//!   the same readings (one shard takes no leases: a `Bucket`'s CAS);
//! * a refusal at a fresh reading (none later decided yet), when the input asks, is retried on
//!   the same shard at `reading + d` with nothing deciding in between: admitted, but where
//!   another shard has decided too, a one-token request may be refused again (its shard's
//!   `dry_until` recorded before another shard took from the word) with a wait of at most the
//!   near leases' room (`shards × F` tokens, at most 250 µs of rate) or one token's time,
//!   whichever is more. The docs promise the room alone (exact waits where no near lease is
//!   taken), but another shard that pools its far lease's last fraction with the word's takes
//!   the word's fraction of the token the record names: early by under one token, at any rate
//!   (the seeded schedules of `src/sharded/seeded.rs` allow that token too);
//! * `available()` never above the burst; on a frozen clock (one reading throughout) nothing
//!   lapses: what was admitted plus `available()` is the burst (for an inexact quota at a
//!   reading off its unit grid, one token less at most: the unit rounded, as by `Bucket`);
//! * at the end every window of the admissions, at their readings, within `burst + rate·Δ`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tollgate::{Bucket, Denied, ManualClock, Quota, ShardedBucket};

#[path = "common/bytes.rs"]
mod bytes;
#[path = "common/units_window.rs"]
mod units_window;

use bytes::Bytes;

/// Exact per-second rates at which near leases are taken (from 62,500 a second up).
const FAST_EXACT: [u64; 8] = [
    62_500,
    100_000,
    125_000,
    1_000_000,
    4_000_000,
    10_000_000,
    250_000_000,
    1_000_000_000,
];

/// A quota from the input: a third exact and slow (1 or 2 tokens a period, as bucket_vs_model),
/// a third at 62,500 to 10^9 tokens a second (half of them exact), a third anything.
fn quota(b: &mut Bytes<'_>) -> Option<Quota> {
    let mode = b.u64();
    let (x, y, z) = (b.u64(), b.u64(), b.u64());
    // Bursts: most small enough that the bucket is often near its limit, some up to 2^16;
    // near leases need a burst of at least 8 tokens per shard.
    let burst = if z & 1 == 0 {
        (z >> 1) % 256 + 1
    } else {
        (z >> 1) % (1 << 16) + 1
    };
    let (tokens, per) = match mode % 3 {
        0 => (1 + (mode >> 8 & 1), y % (1 << 40) + 1),
        1 if mode >> 8 & 1 == 0 => (FAST_EXACT[(x % 8) as usize], 1_000_000_000),
        1 => (62_500 + x % (1_000_000_000 - 62_500 + 1), 1_000_000_000),
        _ => (x % (1 << 34) + 1, y % (1 << 40) + 1),
    };
    Quota::new(tokens, Duration::from_nanos(per), burst).ok()
}

/// Tokens the rate earns in `ns`, rounded down.
fn tokens_in(q: &Quota, ns: u64) -> u64 {
    (u128::from(q.tokens()) * u128::from(ns) / q.per().as_nanos()) as u64
}

/// The most a retry at a named wait may be refused again with: the room other shards' near
/// leases take by the docs, `shards × F` tokens (at most 250 µs of rate, one near lease at
/// least), `F = min(64, rate × 16 µs, burst / (8 × shards))`, or one token's time, whichever
/// is more (see the top: a pooled fraction); zero (exact waits) with one shard.
fn room_ns(q: &Quota, shards: u64) -> u64 {
    if shards < 2 {
        return 0;
    }
    let f = tokens_in(q, 16_000).min(64).min(q.burst() / (8 * shards));
    let room = if f == 0 {
        0
    } else {
        (shards * f).min(tokens_in(q, 250_000)).max(f)
    };
    q.refill_time(room.max(1)).as_nanos() as u64
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let Some(quota) = quota(&mut b) else { return };
    let flags = b.u64();
    let clock = ManualClock::new();
    let bucket = ShardedBucket::with_clock(quota, (flags % 8 + 1) as usize, clock.clone());
    let n = bucket.shards();
    // With one shard, a `Bucket` on its own clock, fed the same readings.
    let one_clock = ManualClock::new();
    let one = (n == 1).then(|| Bucket::with_clock(quota, one_clock.clone()));
    // Every reading the same: nothing lapses, nothing is earned.
    let frozen = flags >> 8 & 15 == 0;
    let burst = quota.burst();
    // One token's time (ns, at least 1): the clock's steps are on its scale.
    let step = quota.refill_time(1).as_nanos().clamp(1, 1 << 40) as u64;
    let room = room_ns(&quota, n as u64);
    // Readings start anywhere below 2^50 ns (13 days); stay below 2^62.
    let mut t: u64 = (flags >> 12) % (1 << 50);
    let mut latest = 0u64;
    let mut shards_used = 0u16;
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    let mut total: u64 = 0;
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 512 {
            break;
        }
        let x = b.u64();
        let (now, cost, shard) = match kind % 12 {
            0 | 1 if !frozen => {
                t = (t + x % (4 * step + 1)).min(1 << 62);
                continue;
            }
            2 if !frozen => {
                // A long pause: up to twice the burst's time.
                t = (t + x % (2 * burst.min(1 << 20) * step + 1)).min(1 << 62);
                continue;
            }
            3 if !frozen => {
                // The clock set back (a stepped-back reading).
                t = t.saturating_sub(x % (burst.min(1 << 20) * step + 1));
                continue;
            }
            4 => {
                clock.set(Duration::from_nanos(t));
                let got = bucket.available();
                assert!(got <= burst, "available {got} above the burst {burst}");
                if let Some(one) = &one {
                    one_clock.set(Duration::from_nanos(t));
                    assert_eq!(got, one.available(), "available at {t}, one shard");
                }
                continue;
            }
            5 if !frozen => {
                // A stale reading: older than the latest, by up to twice the burst's time.
                let back = (x >> 8) % (2 * burst.min(1 << 20) * step + 1);
                (t.saturating_sub(back), x & 255, (x >> 32) as usize % n)
            }
            _ => (t, x & 255, (x >> 32) as usize % n),
        };
        // Costs: mostly 1, some up to 4, some up to burst + 1 (the edges 0, burst, burst + 1
        // included).
        let cost = match cost % 8 {
            0..=3 => 1,
            4 => 1 + (x >> 16) % burst.min(4),
            5 => (x >> 16) % (burst + 2),
            6 => burst,
            _ => [0, burst + 1, burst.saturating_sub(1).max(1)][((x >> 16) % 3) as usize],
        };
        let retry = x >> 40 & 1 == 1;
        let fresh = now >= latest;
        shards_used |= 1 << shard;
        let decide = |at: u64| {
            let got = bucket.fuzz_acquire_on_shard(shard, at, cost);
            if let Some(one) = &one {
                one_clock.set(Duration::from_nanos(at));
                let want = one.try_acquire(cost);
                assert_eq!(
                    got, want,
                    "{quota:?}, one shard, cost {cost} at {at}: sharded {got:?}, bucket {want:?}"
                );
            }
            match got {
                Ok(()) => {}
                Err(Denied::ExceedsBurst) => assert!(cost > burst, "ExceedsBurst for {cost}"),
                Err(Denied::RetryAfter(d)) => {
                    assert!(cost > 0 && cost <= burst, "{got:?} for cost {cost}");
                    assert!(!d.is_zero(), "a zero wait for cost {cost} at {at}");
                }
                Err(e) => panic!("{e:?} for cost {cost}"),
            }
            if cost == 0 {
                assert_eq!(got, Ok(()), "cost 0");
            }
            got
        };
        let verdict = decide(now);
        latest = latest.max(now);
        match verdict {
            Ok(()) => {
                admitted.push((now, cost));
                total += cost;
            }
            Err(Denied::RetryAfter(d)) if fresh && retry && !frozen && d != Duration::MAX => {
                // Back at the instant named, on the same shard: nothing decided in between.
                let at = now.saturating_add(d.as_nanos() as u64);
                if at >= 1 << 62 {
                    continue;
                }
                match decide(at) {
                    Ok(()) => {
                        admitted.push((at, cost));
                        total += cost;
                    }
                    Err(Denied::RetryAfter(again)) => {
                        let others = shards_used & !(1 << shard) != 0;
                        assert!(
                            others && cost == 1 && again.as_nanos() <= u128::from(room),
                            "{quota:?}, {n} shards (used {shards_used:#b}): cost {cost} on \
                             shard {shard} refused at {now} with {d:?}, and at {at} again \
                             with {again:?} (room {room} ns)"
                        );
                    }
                    Err(e) => panic!("{e:?} on a retry of cost {cost}"),
                }
                t = t.max(at);
                latest = latest.max(at);
            }
            Err(_) => {}
        }
    }
    if frozen {
        clock.set(Duration::from_nanos(t));
        let left = bucket.available();
        // An inexact quota's reading off the unit grid rounds the units earned both ways (a
        // debit from the ceiling, `available` from the floor): one unit, so one whole token
        // fewer in `available` at most, as a `Bucket`'s.
        let least = burst - u64::from(!quota.is_exact());
        assert!(
            (least..=burst).contains(&(total + left)),
            "{quota:?}, {n} shards, frozen at {t}: admitted {total} + available {left}"
        );
    }
    if let Some(v) = units_window::violation(&quota, &mut admitted, 0) {
        panic!("{quota:?}, {n} shards: {v}");
    }
});
