//! The keyed limiter's index: a flat, open-addressed table of 16-byte slots that we own.
//!
//! A slot is one 128-bit word `fingerprint << 64 | state`: the key's fingerprint (`0` = empty)
//! and its [`gcra`](crate::gcra) state (for `Limits`, a record's handle). The buffer is zeroed
//! atomics allocated up front, whose pages optimized builds leave untouched until used (the
//! optimizer's choice, not a guarantee); its regions: `layout`. The protocol and why a probe
//! never misses a present key: [docs/guarantees.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/guarantees.md#the-keyed-index).

mod layout;
mod migrate;
mod probe;
#[cfg(feature = "persist")]
mod scan;
mod slot;
mod sweep;
#[cfg(all(test, not(tollgate_loom)))]
mod tests;

use crate::sync::{AtomicU128, AtomicU64, Mutex, MutexGuard};
use alloc::boxed::Box;
use core::hash::BuildHasher;
use layout::{capacity, encode, region_in, MIN_ACTIVE};
use migrate::Migration;
#[cfg(feature = "persist")]
pub(crate) use slot::is_fingerprint;
pub(crate) use slot::{fingerprint, seeded_hasher, Hasher};
pub(crate) use sweep::Step;

/// The table. Not generic: it sees only fingerprints.
pub(crate) struct Index {
    slots: Box<[AtomicU128]>,
    /// The whole table's length in slots (the largest region), a power of two.
    cap: usize,
    /// The current region and whether a migration is in progress ([`encode`]). Written only
    /// under the mutex, when a migration starts or ends; read with `Acquire` by every probe.
    layout: AtomicU64,
    /// Odd while entries move (a migration step, an eviction's shift back): a lock-free miss is
    /// trusted only if this was even and did not change around it.
    rebuilds: AtomicU64,
    /// Serializes every change of a fingerprint or of `layout`.
    lock: Mutex<Meta>,
    /// Two random words drawn per index and never saved (the second odd), mixed into every
    /// fingerprint's home slot ([`Index::home`]): whoever chooses fingerprints (a state file
    /// does, and its seed makes every key's predictable) cannot choose slots, so probe chains
    /// stay as short as random ones. Zeros (each fingerprint its own home) under loom, whose
    /// models are written against the fingerprints' own slots, and in tests that build
    /// clusters by hand.
    secret: [u64; 2],
}

/// What the mutex guards: the live count, the incremental sweep's position and the migration.
struct Meta {
    live: usize,
    /// The slot (of the current region, in [`visit_order`](sweep::visit_order)) the sweep examines next.
    cursor: usize,
    /// Slots the current pass has still to examine.
    pass_left: usize,
    /// The earliest full instant of the entries this pass saw not full, inserted since it
    /// began, or moved unexamined by an eviction's shift: when the pass ends, a lower bound on
    /// every live entry's full instant (a migration restarts the pass: see `start_migration`).
    pass_min: u64,
    migration: Option<Migration>,
    /// Passes restarted by a migration's start ([`Locked::restarts`]).
    restarts: u64,
    /// Entries moved from an old region to a new one, ever (counted for the tests).
    #[cfg(test)]
    migrated: u64,
}

impl Index {
    /// A table for at most `max_keys` live entries.
    pub(crate) fn new(max_keys: usize) -> Self {
        let cap = capacity(max_keys);
        let first = MIN_ACTIVE.min(cap);
        // Room for the regions at the back (half the table at most) unless there is only one.
        let len = if first == cap { cap } else { cap + cap / 2 };
        let region = region_in(cap, first);
        Index {
            secret: if cfg!(tollgate_loom) {
                [0; 2]
            } else {
                let random = foldhash::quality::RandomState::default();
                [random.hash_one(0u8), random.hash_one(1u8) | 1]
            },
            slots: (0..len).map(|_| AtomicU128::new(0)).collect(),
            cap,
            layout: AtomicU64::new(encode(region, false)),
            rebuilds: AtomicU64::new(0),
            lock: Mutex::new(Meta {
                live: 0,
                cursor: 0,
                pass_left: first,
                pass_min: u64::MAX,
                migration: None,
                restarts: 0,
                #[cfg(test)]
                migrated: 0,
            }),
        }
    }

    /// A table whose home slots are the fingerprints' own bits (tests' hand-built clusters).
    #[cfg(test)]
    pub(crate) fn plain(max_keys: usize) -> Self {
        let mut ix = Index::new(max_keys);
        ix.secret = [0; 2];
        ix
    }

    /// A table whose home slots are mixed with the given secret (the second word odd).
    #[cfg(test)]
    pub(crate) fn with_secret(max_keys: usize, secret: [u64; 2]) -> Self {
        let mut ix = Index::new(max_keys);
        ix.secret = [secret[0], secret[1] | 1];
        ix
    }

    /// The slots that probes for every live entry step past before they find it (each entry's
    /// distance from its home, in the region holding it): the work a lookup of every key, or
    /// the restore that inserted them, does beyond one slot each.
    #[cfg(all(test, feature = "persist"))]
    pub(crate) fn displacement(&self) -> u64 {
        let layout = self.layout();
        let current = layout::decode(layout);
        let old = (layout & layout::MIGRATING != 0).then(|| layout::old_of(self.cap, current));
        [Some(current), old]
            .into_iter()
            .flatten()
            .flat_map(|r| (0..r.len()).map(move |i| (r, i)))
            .map(|(r, i)| {
                let fp = slot::fp_of(self.slots[r.at(i)].load(crate::sync::Ordering::Acquire));
                if fp == slot::EMPTY {
                    0
                } else {
                    (i.wrapping_sub(self.home(fp)) & r.mask) as u64
                }
            })
            .sum()
    }

    /// The slot a probe for `fp` starts from (modulo a region's length): two rounds of a
    /// folded multiply (the 128-bit product's halves xored), each keyed by a secret word, so
    /// every bit of the home depends on every bit of the fingerprint and of both words. One
    /// round is not enough: fingerprints in arithmetic progression (`i << 32 | 1`) fall into a
    /// few long runs for some secrets (about one in two hundred) and restores drop entries.
    #[inline(always)]
    pub(super) fn home(&self, fp: u64) -> usize {
        if cfg!(any(test, tollgate_loom)) && self.secret[1] == 0 {
            return fp as usize;
        }
        let first = fold(fp ^ self.secret[0], 0x9E37_79B9_7F4A_7C15);
        fold(first ^ self.secret[1], 0xD6E8_FEB8_6659_FD93) as usize
    }

    /// Takes the mutex: the only way to insert, move or remove.
    pub(crate) fn lock(&self) -> Locked<'_> {
        Locked {
            index: self,
            meta: self.lock.lock(),
        }
    }

    /// Takes the mutex if it is free now (a lookup helping a migration along never waits).
    pub(crate) fn try_lock(&self) -> Option<Locked<'_>> {
        self.lock
            .try_lock()
            .map(|meta| Locked { index: self, meta })
    }
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    p as u64 ^ (p >> 64) as u64
}

/// The index with its mutex held.
pub struct Locked<'a> {
    index: &'a Index,
    meta: MutexGuard<'a, Meta>,
}

impl core::fmt::Debug for Locked<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Locked")
            .field("live", &self.meta.live)
            .finish_non_exhaustive()
    }
}

impl Locked<'_> {
    /// Whether `fp` is tracked. Exact: only the mutex holder changes fingerprints.
    pub(crate) fn contains(&self, fp: u64) -> bool {
        self.index.find(fp).is_some()
    }

    /// The number of slots of the current region (one sweep pass examines this many).
    pub(crate) fn active(&self) -> usize {
        self.index.region().len()
    }

    /// Whether a migration is in progress: a sweep step then drains the old region first.
    pub(crate) fn migrating(&self) -> bool {
        self.meta.migration.is_some()
    }

    /// How many times a migration's start has restarted the sweep's pass ([`sweep::Sweep`]).
    pub(crate) fn restarts(&self) -> u64 {
        self.meta.restarts
    }

    /// Inserts `fp` (checked absent under this lock) with `state`, first full at `full_at_new`
    /// (folded into the pass's bound), after the insertion's growth ([`grow`](Locked::grow)).
    pub(crate) fn insert(&mut self, fp: u64, state: u64, full_at_new: u64) {
        self.grow();
        self.put(fp, state);
        self.meta.live += 1;
        self.meta.pass_min = self.meta.pass_min.min(full_at_new);
    }

    /// Whether an insertion of `fp` now lands within `max` slots of its home (what a restore
    /// checks, whatever its file holds), after the insertion's growth (whose own step then
    /// moves at most [`MIGRATE_STEP`](migrate::MIGRATE_STEP) more entries in).
    #[cfg(feature = "persist")]
    pub(crate) fn room_within(&mut self, fp: u64, max: usize) -> bool {
        self.grow();
        let ix = self.index;
        let r = ix.region();
        let home = ix.home(fp);
        (0..max.min(r.len())).any(|d| {
            let w = ix.slots[r.at(home.wrapping_add(d))].load(crate::sync::Ordering::Acquire);
            slot::fp_of(w) == slot::EMPTY
        })
    }

    /// An insertion's growth: starts a migration to a region of twice the size if live entries
    /// would pass half of the current one, and takes one migration step while one is in progress.
    fn grow(&mut self) {
        let ix = self.index;
        if self.meta.migration.is_none() {
            let r = ix.region();
            if r.len() < ix.cap && (self.meta.live + 1) * 2 > r.len() {
                self.start_migration(r);
            }
        }
        self.help_migrate();
    }
}
