//! A `KeyedLimiter` with a tiny table (1 to 4 keys, up to 8 keys in play) or a small one (33 to
//! 96 keys, up to 96 in play: its active region doubles from 64 slots by migrations, so
//! decisions, sweeps and evictions run during them), per-key quotas, optionally fail-open,
//! driven through inserts, evictions, sweeps and clock readings that step back, against one
//! exact reference bucket per key (`testkit/src/model.rs`).
//!
//! Checked after every step: `len() <= max_keys`; a tracked admission is one the key's reference
//! (which saw exactly the key's tracked admissions, at their readings) admits too — never more
//! lenient, whatever the reading order; while the readings have been monotone, every verdict,
//! `RetryAfter` and `available()` equals the reference's, except a new key refused because the
//! table is full (exact quotas). At the end: every key's tracked admissions, at their readings,
//! stay within `burst + rate·Δ` in every window (`testkit/src/window.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tollgate::{Denied, KeyedLimiter, ManualClock, Quota};

#[path = "common/bytes.rs"]
mod bytes;
#[path = "common/quota.rs"]
mod quota;
use tollgate_testkit::model;
use tollgate_testkit::window;

use bytes::Bytes;
use model::Model;
use quota::quota;
use window::WindowChecker;

/// Keys in play with a tiny table, and with a small one.
const KEYS: u8 = 8;
const KEYS_SMALL_TABLE: u8 = 96;

fn model_of(q: &Quota) -> Model {
    Model::new(q.tokens(), q.per().as_nanos() as u64, q.burst())
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u64();
    let small_table = (flags >> 40) & 1 == 1;
    let (max_keys, keys) = if small_table {
        // Bits 16.., apart from the bits that choose fail-open (2) and the per-key quotas (3..),
        // so that every size is fuzzed with both policies and any number of own quotas.
        (((flags >> 16) % 64 + 33) as usize, KEYS_SMALL_TABLE)
    } else {
        ((flags % 4 + 1) as usize, KEYS)
    };
    let fail_open = flags & 4 != 0;
    let Some(default) = quota(&mut b) else { return };
    let clock = ManualClock::new();
    let mut builder = KeyedLimiter::builder(default, max_keys, clock.clone()).fail_open(fail_open);
    // Up to two keys with their own quota.
    for k in 0..(flags >> 3) % 3 {
        let Some(q) = quota(&mut b) else { return };
        builder = builder.override_quota(k as u8, q);
    }
    let limiter = builder.build().unwrap();
    let quotas: Vec<Quota> = (0..keys).map(|k| limiter.quota_for(&k)).collect();
    let mut models: Vec<Model> = quotas.iter().map(model_of).collect();
    let windows: Vec<WindowChecker> = (0..keys).map(|_| WindowChecker::new()).collect();
    // The step of the slowest refill, to keep clock moves on the quotas' scale.
    let step = quotas
        .iter()
        .map(|q| q.per().as_nanos() as u64 / q.tokens() + 1)
        .max()
        .unwrap();
    let (mut t, mut latest, mut monotone) = (0u64, 0u64, true);
    let mut n = 0;
    while let Some(kind) = b.u8() {
        n += 1;
        if n > 512 {
            break;
        }
        let x = b.u64();
        let key = (x >> 56) as u8 % keys;
        let (q, exact) = (quotas[key as usize], quotas[key as usize].is_exact());
        match kind % 6 {
            0 => t = t.saturating_add(x % (step * 4)).min(1 << 50),
            1 => t = t.saturating_sub(x % (step * 4)), // a stale or stepped-back reading
            2 => {
                // Evicts the full buckets at this reading.
                clock.set(Duration::from_nanos(t));
                limiter.sweep();
            }
            3 => {
                clock.set(Duration::from_nanos(t));
                if monotone && exact {
                    let want = models[key as usize].available(t);
                    assert_eq!(limiter.available(&key), want, "available({key}) at {t}");
                }
            }
            _ => {
                clock.set(Duration::from_nanos(t));
                let cost = x % (q.burst() + 2);
                let before = limiter.counters();
                let got = limiter.try_acquire(&key, cost);
                let after = limiter.counters();
                let untracked = after.admitted_untracked > before.admitted_untracked;
                let table_full = after.refused_table_full > before.refused_table_full;
                let model = &mut models[key as usize];
                if got.is_ok() && !untracked {
                    // Never more lenient than the key's exact bucket.
                    assert_eq!(
                        model.try_acquire(t, cost),
                        Ok(()),
                        "key {key} admitted {cost} at {t} beyond its bucket ({q:?})"
                    );
                    windows[key as usize].admit(t, cost);
                } else if monotone && exact && !table_full && !untracked {
                    let mut probe = model.clone();
                    assert_eq!(
                        got,
                        probe.try_acquire(t, cost),
                        "key {key} cost {cost} at {t}"
                    );
                }
                if untracked {
                    assert!(fail_open && got.is_ok());
                }
                if table_full {
                    assert!(matches!(got, Err(Denied::RetryAfter(d)) if d > Duration::ZERO));
                }
            }
        }
        monotone &= t >= latest;
        latest = latest.max(t);
        assert!(limiter.len() <= max_keys);
    }
    for (key, w) in windows.iter().enumerate() {
        if let Err(v) = w.check(&quotas[key]) {
            panic!("key {key} over its bound: {v:?} ({:?})", quotas[key]);
        }
    }
});
