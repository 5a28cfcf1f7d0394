//! Random quotas and schedules (advance/set the clock, try_acquire, available) against the exact
//! reference model in `tests/support/model.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;

#[path = "common/bytes.rs"]
mod bytes;
#[path = "../../tests/support/model.rs"]
mod model;

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
        ops.push(match kind % 4 {
            0 => Op::Advance(x % (step * 4)),
            1 => Op::Set(x % (step * 64)),
            2 => Op::Acquire(x % (burst + 2)),
            _ => Op::Available,
        });
        if ops.len() > 256 {
            break;
        }
    }
    if let Err(e) = check(tokens, per, burst, &ops, quota.is_exact()) {
        panic!("{quota:?}: {e}");
    }
});
