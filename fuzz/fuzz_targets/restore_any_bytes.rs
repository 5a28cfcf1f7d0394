//! Any byte string fed to a restore is an error or a valid state, never a panic: raw bytes, and
//! valid saved states of every limiter with fuzzer-chosen bytes overwritten (past the magic
//! number and the checksums, so the parsers behind them are reached too). A restored limiter
//! then decides without panicking and never holds more than its burst.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::{Duration, SystemTime};
use tollgate::{
    Bucket, KeyedLimiter, KeyedMultiLimiter, Limits, ManualClock, MultiBucket, Quota,
    ShardedBucket, Smooth,
};

#[path = "common/bytes.rs"]
mod bytes;
use bytes::Bytes;

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

/// CRC-32 (IEEE, reflected), as the format's frames use: lets edits keep frames valid.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Recomputes every frame's checksum and the end frame's file checksum after edits, where the
/// frame structure is still intact (otherwise leaves the bytes as they are).
fn fix_checksums(file: &mut [u8]) {
    let mut at = 10;
    while at + 9 <= file.len() {
        let len = u32::from_le_bytes(file[at + 1..at + 5].try_into().unwrap()) as usize;
        let end = at + 5 + len;
        if end + 4 > file.len() {
            return;
        }
        if file[at] == 0x7f && len == 12 {
            let whole = crc32(&file[..at]);
            file[at + 13..at + 17].copy_from_slice(&whole.to_le_bytes());
        }
        let crc = crc32(&file[at..end]);
        file[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        at = end + 4;
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let mode = b.u8().unwrap_or(0);
    let quota = Quota::per_second(b.u64() % 1000 + 1)
        .unwrap()
        .with_burst(b.u64() % 100 + 1)
        .unwrap();
    let (saved_at, restored_at) = (b.u64() >> 1, b.u64() >> 1);
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(b.u64() >> 8));
    let mut file = Vec::new();
    match mode % 6 {
        0 => {
            let bucket = Bucket::with_clock(quota, clock.clone());
            let _ = bucket.try_acquire(b.u64() % 200);
            bucket.save_at(&mut file, wall(saved_at)).unwrap();
        }
        1 => {
            let bucket = ShardedBucket::with_clock(quota, (b.u64() % 8) as usize, clock.clone());
            let _ = bucket.try_acquire(b.u64() % 200);
            bucket.save_at(&mut file, wall(saved_at)).unwrap();
        }
        2 => {
            let limiter = Smooth::bursty_with_clock(
                quota.tokens() as f64,
                Duration::from_secs(1),
                clock.clone(),
            )
            .unwrap();
            limiter.acquire(b.u64() % 20);
            limiter.save_at(&mut file, wall(saved_at)).unwrap();
        }
        3 => {
            let limits = Limits::new([quota, Quota::per_second(3).unwrap()]).unwrap();
            let bucket = MultiBucket::with_clock(limits, clock.clone());
            let _ = bucket.try_acquire(b.u64() % 200);
            bucket.save_at(&mut file, wall(saved_at)).unwrap();
        }
        4 => {
            let limiter = KeyedLimiter::with_clock(quota, 64, clock.clone());
            for _ in 0..b.u64() % 100 {
                let _ = limiter.try_acquire(&(b.u64() % 80), b.u64() % 200);
            }
            limiter.save_at(&mut file, wall(saved_at)).unwrap();
        }
        _ => {
            let limiter = keyed_multi(quota, clock.clone());
            for _ in 0..b.u64() % 100 {
                let _ = limiter.try_acquire(&(b.u64() % 80), b.u64() % 200);
            }
            limiter.save_at(&mut file, wall(saved_at)).unwrap();
        }
    }
    // Raw bytes (mode bit 3), or the saved state with edits at chosen offsets.
    if mode & 8 != 0 {
        file = b.0.to_vec();
    } else {
        while let (Some(at), Some(v)) = (b.u8(), b.u8()) {
            if !file.is_empty() {
                let i = usize::from(at) * file.len() / 256;
                file[i] = v;
            }
        }
        if mode & 16 != 0 {
            fix_checksums(&mut file);
        }
        let cut = file.len() - (usize::from(mode >> 5) % 3).min(file.len());
        file.truncate(cut);
    }
    let clock = ManualClock::new();
    let at = wall(restored_at);
    match mode % 6 {
        0 => {
            let r = Bucket::with_clock(quota, clock);
            let _ = r.restore_at(&file[..], at);
            assert!(r.available() <= quota.burst());
            let _ = r.try_acquire(1);
        }
        1 => {
            let r = ShardedBucket::with_clock(quota, 3, clock);
            let _ = r.restore_at(&file[..], at);
            assert!(r.available() <= quota.burst());
            let _ = r.try_acquire(1);
        }
        2 => {
            let r = Smooth::bursty_with_clock(2.0, Duration::from_secs(1), clock).unwrap();
            let _ = r.restore_at(&file[..], at);
            let _ = r.try_acquire(1, Duration::ZERO);
        }
        3 => {
            let limits = Limits::new([quota, Quota::per_second(3).unwrap()]).unwrap();
            let r = MultiBucket::with_clock(limits, clock);
            let _ = r.restore_at(&file[..], at);
            assert!(r.available() <= quota.burst());
            let _ = r.try_acquire(1);
        }
        4 => {
            if let Ok(r) =
                KeyedLimiter::<u64, _, _>::builder(quota, 64, clock).restore_at(&file[..], at)
            {
                assert!(r.len() <= 64);
                for k in 0..80 {
                    assert!(r.available(&k) <= quota.burst());
                    let _ = r.try_acquire(&k, 1);
                }
            }
        }
        _ => {
            let b = KeyedMultiLimiter::<u64, _>::builder(multi_limits(quota), 64, clock)
                .override_quota(3, Limits::from(quota));
            if let Ok(r) = b.restore_at(&file[..], at) {
                assert!(r.len() <= 64);
                for k in 0..80 {
                    assert!(r.available(&k) <= quota.burst());
                    let _ = r.try_acquire(&k, 1);
                }
            }
        }
    }
});

/// The fuzzed quota and one per 3 s, burst 7.
fn multi_limits(quota: Quota) -> Limits {
    Limits::new([quota, Quota::new(1, Duration::from_secs(3), 7).unwrap()]).unwrap()
}

/// A per-key policy table of 64 keys, key 3 with the fuzzed quota alone.
fn keyed_multi(quota: Quota, clock: ManualClock) -> KeyedMultiLimiter<u64, ManualClock> {
    KeyedMultiLimiter::builder(multi_limits(quota), 64, clock)
        .override_quota(3, Limits::from(quota))
        .build()
        .unwrap()
}
