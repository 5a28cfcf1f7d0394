//! Random quotas and schedules against the exact reference model in the test kit (`testkit/src/model.rs`):
//! advance or set the clock (readings may step back), try_acquire, available, reserve, cancel or
//! keep a held reservation (any order), try_acquire_for, set_quota. Every window of every quota
//! era is checked against `burst + rate·Δ`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

#[path = "common/bytes.rs"]
mod bytes;
use tollgate_testkit::model;

use bytes::Bytes;
use model::{check, Op};

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mode = b.u64();
    // Keep the model's i128 products in range: tokens < 2^34, period < 2^40 ns, burst < 2^20.
    let (mut tokens, per, burst) = (
        b.u64() % (1 << 34) + 1,
        b.u64() % (1 << 40) + 1,
        b.u64() % (1 << 20) + 1,
    );
    if mode & 1 == 0 {
        // Steer half the inputs to exact quotas (reduced numerator 1 or 2).
        tokens = if mode & 2 == 0 { 1 } else { 2 };
    }
    let Ok(quota) = tollgate::Quota::new(tokens, Duration::from_nanos(per), burst) else {
        return;
    };
    let step = per / tokens + 1;
    let mut ops = Vec::new();
    while let Some(kind) = b.u8() {
        let x = b.u64();
        ops.push(match kind % 10 {
            0 => Op::Advance(x % (step * 4)),
            1 => Op::Set(x % (step * 64)),
            2 | 3 => Op::Acquire(x % (burst + 2)),
            4 => Op::Available,
            5 => Op::Reserve(x % (burst + 2)),
            6 => Op::Resolve((x >> 1) as usize % 16, x & 1 == 1),
            7 => Op::AcquireFor(x % (burst + 2), (x >> 32) % (step * 8)),
            8 => Op::SetQuota(
                // Within the model's ranges (see above), near the first quota so that eras
                // stay comparable: rate and burst within a factor of 4 either way.
                (tokens * (1 + (x & 15)) / 4).max(1),
                per,
                (burst * (1 + ((x >> 4) & 15)) / 4).max(1),
            ),
            _ => Op::Resolve((x >> 1) as usize % 16, x & 1 == 1),
        });
        if ops.len() > 256 {
            break;
        }
    }
    if let Err(e) = check(tokens, per, burst, &ops, quota.is_exact()) {
        panic!("{quota:?}: {e}\nops: {ops:?}");
    }
});
