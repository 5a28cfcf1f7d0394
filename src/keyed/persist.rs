//! [`KeyedLimiter`]'s saved state (feature `persist`): a `KEYED` frame (default quota,
//! fingerprint seed, override count), one `OVERRIDE` frame per override, `ENTRIES` frames (each
//! tracked bucket not full: fingerprint and the units it lacks at the anchor), and a `FLOOR`
//! frame (where untracked keys start). A table of [`Limits`] writes its own kinds
//! (`KEYED_MULTI`, `OVERRIDE_MULTI`, `MULTI_ENTRIES`) with quota counts, every quota of a key
//! from one consistent read of its record.
//!
//! # A save walks the table while decisions go on
//!
//! The walk holds the index's mutex for one chunk of about [`CHUNK`] slots (ended at an empty
//! slot), then writes it without the mutex, each entry one load. It misses no entry tracked
//! when the save began unless that entry was evicted (full) first:
//!
//! * entries move only under the mutex, never while a chunk is read;
//! * a chunk ends at an empty slot `b`; every entry still to visit lies after `b` with its home
//!   after `b` (a probe cannot pass an empty slot), and an eviction's shift moves entries toward
//!   their homes only, so none crosses `b` into the part already read (the walk starts after an
//!   empty slot, so this holds around the region's end too);
//! * a migration's old region is walked first, then every region that became current.
//!
//! Keys inserted after the walk passed them, or evicted during it, restore as untracked keys,
//! which start full as of the floor (the latest eviction reading, read after the walk). So a
//! restore gives each key no more than it had at some instant of the save (a state read after
//! the save's reading holds fewer tokens at it, and the restore refills from the anchor, taken
//! after it); what was admitted after the walk read a key can be handed out again.

use super::{KeyedLimiter, KeyedLimiterBuilder, KeyedPolicy};
use crate::clock::Clock;
use crate::gcra;
use crate::limits::{Limits, MAX_LIMITS};
use crate::persist::format::{
    kind, Cursor, FrameReader, FrameWriter, Limiter, Payload, ENTRIES_PER_FRAME,
};
use crate::persist::{
    downtime, inherent_persist, restored_state, restored_states, sealed, RestoreError, Saved,
};
use crate::quota::{Quota, HORIZON_NS};
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::hash::Hash;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::time::SystemTime;

/// Slots a save reads per hold of the index's mutex (then on to the next empty slot); under
/// loom one, so the models' tiny tables are walked in several chunks with moves between them.
const CHUNK: usize = if cfg!(tollgate_loom) { 1 } else { 4096 };

/// The most override policies a restore accepts.
const MAX_OVERRIDES: u64 = 1 << 24;

/// The farthest from its home slot a restore places an entry (a table at most half full of
/// random homes puts one that far about once in 10^21 entries); farther, it is not tracked and
/// raises the floor instead, as an entry past `max_keys` does: so a restore is O(entries).
const MAX_RESTORE_PROBE: usize = 256;

/// The frame kinds of a table of `P`: the table-wide frame, an override's and the entries'.
fn kinds<P: KeyedPolicy>() -> (u8, u8, u8) {
    if P::SEVERAL {
        (kind::KEYED_MULTI, kind::OVERRIDE_MULTI, kind::MULTI_ENTRIES)
    } else {
        (kind::KEYED, kind::OVERRIDE, kind::ENTRIES)
    }
}

/// Writes a policy's quotas (with their count, for a table of [`Limits`]).
fn put_quotas<P: KeyedPolicy>(p: &mut Payload, quotas: &[Quota]) {
    if P::SEVERAL {
        p.u8(quotas.len() as u8);
    }
    for q in quotas {
        p.quota(q);
    }
}

/// Reads a policy written by [`put_quotas`] onto the end of `out`; returns how many quotas.
fn get_quotas<P: KeyedPolicy>(
    c: &mut Cursor<'_>,
    out: &mut Vec<Quota>,
) -> Result<usize, RestoreError> {
    let n = if P::SEVERAL { usize::from(c.u8()?) } else { 1 };
    if n == 0 || n > MAX_LIMITS {
        return Err(RestoreError::Corrupt("an invalid number of quotas"));
    }
    let start = out.len();
    for _ in 0..n {
        out.push(c.quota()?);
    }
    if P::SEVERAL {
        Limits::new(out[start..].iter().copied()).map_err(RestoreError::Config)?;
    }
    Ok(n)
}

/// What a restore reads before the wall clock: the saved policies and the fingerprint seed.
#[derive(Debug)]
pub struct Head {
    /// The saved quotas, flat: the default's first, then each override's.
    quotas: Vec<Quota>,
    /// How many quotas the default policy holds.
    default: usize,
    seed: u64,
    /// Each saved override's quotas, by fingerprint: where in `quotas`, and how many.
    overrides: HashMap<u64, (usize, usize)>,
    /// The pairs a restore was given ([`KeyedLimiterBuilder::restore_paired_at`]): for each
    /// quota here, the position of the saved quota it takes its state from (`None`: full).
    /// `None` for every other restore: quotas paired by [`restored_states`].
    pairs: Option<Vec<Option<usize>>>,
}

/// Reads the table-wide frame and the overrides' of a table of `P`.
fn read_head<P: KeyedPolicy>(fr: &mut FrameReader<&mut dyn Read>) -> Result<Head, RestoreError> {
    let (head, over, _) = kinds::<P>();
    let mut quotas: Vec<Quota> = Vec::new();
    let (default, seed, n_overrides) = {
        let mut c = fr.expect(head)?;
        let v = (get_quotas::<P>(&mut c, &mut quotas)?, c.u64()?, c.u64()?);
        c.end()?;
        v
    };
    if n_overrides > MAX_OVERRIDES {
        return Err(RestoreError::Corrupt("too many override policies"));
    }
    let mut overrides = HashMap::new();
    for _ in 0..n_overrides {
        let mut c = fr.expect(over)?;
        let (fp, at) = (c.u64()?, quotas.len());
        let n = get_quotas::<P>(&mut c, &mut quotas)?;
        c.end()?;
        overrides.insert(fp, (at, n));
    }
    Ok(Head {
        quotas,
        default,
        seed,
        overrides,
        pairs: None,
    })
}

inherent_persist!(impl[K, P: KeyedPolicy, C: Clock] KeyedLimiter<K, P, C>);

/// Streams one chunk at a time while decisions go on (module docs). A restore into a limiter of
/// another seed cannot find the saved keys: each raises the floor for untracked keys to its
/// full instant instead ([`KeyedLimiterBuilder::restore`] builds around the saved seed).
impl<K, P: KeyedPolicy, C: Clock> sealed::Frames for KeyedLimiter<K, P, C> {
    const LIMITER: Limiter = if P::SEVERAL {
        Limiter::KeyedMulti
    } else {
        Limiter::Keyed
    };
    type Measured = u64;
    type Read = Head;

    fn measure(&self) -> u64 {
        self.clock.now()
    }

    fn write(&self, now: u64, fw: &mut FrameWriter<&mut dyn Write>) -> io::Result<()> {
        let (head, over, entries_kind) = kinds::<P>();
        let mut p = Payload::default();
        put_quotas::<P>(&mut p, P::quotas(&self.rule));
        p.u64(self.seed).u64(self.overrides.len() as u64);
        fw.frame(head, &p.0)?;
        for (&fp, rule) in &self.overrides {
            let mut p = Payload::default();
            p.u64(fp);
            put_quotas::<P>(&mut p, P::quotas(rule));
            fw.frame(over, &p.0)?;
        }
        let mut entries: Vec<(u64, usize, [u64; MAX_LIMITS])> = Vec::new();
        // Each quota position's last quota as a save records it, and every quota met so far:
        // the rules are few (the table's quotas and its overrides), and `Saved::of` runs
        // `Quota::new`'s search, so it runs once per distinct quota, however keys interleave.
        let mut units: [Option<Saved>; MAX_LIMITS] = [None; MAX_LIMITS];
        let mut met: HashMap<Quota, Saved> = HashMap::new();
        self.index.walk(CHUNK, |chunk| {
            entries.clear();
            for &(fp, word) in chunk {
                let rule = self.rule_of(fp);
                let Some(state) = P::saved(self, fp, word, rule) else {
                    continue;
                };
                let quotas = P::quotas(rule);
                let mut lacks = [0u64; MAX_LIMITS];
                for (((l, q), &s), u) in lacks
                    .iter_mut()
                    .zip(quotas)
                    .zip(P::words(&state))
                    .zip(units.iter_mut())
                {
                    let saved = match u {
                        Some(saved) if saved.is_for(q) => saved,
                        _ => u.insert(*met.entry(*q).or_insert_with(|| Saved::of(q))),
                    };
                    *l = saved.lack(s, now);
                }
                if lacks.iter().any(|&l| l > 0) {
                    entries.push((fp, quotas.len(), lacks));
                }
            }
            for part in entries.chunks(ENTRIES_PER_FRAME) {
                let mut p = Payload::default();
                p.u32(part.len() as u32);
                for &(fp, n, lacks) in part {
                    p.u64(fp);
                    if P::SEVERAL {
                        p.u8(n as u8);
                    }
                    for &l in &lacks[..n] {
                        p.u64(l);
                    }
                }
                fw.frame(entries_kind, &p.0)?;
            }
            Ok::<(), io::Error>(())
        })?;
        // Where untracked keys start: the latest eviction reading (read after the walk, so
        // covering every eviction it missed), relative to `now`.
        let floor = self.table.evicted_at.load(Ordering::SeqCst);
        let rel = i128::from(floor) - i128::from(now);
        let rel = rel.clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        let mut p = Payload::default();
        p.u8(u8::from(floor != 0)).i64(rel);
        fw.frame(kind::FLOOR, &p.0)
    }

    fn read(&self, fr: &mut FrameReader<&mut dyn Read>) -> Result<Head, RestoreError> {
        read_head::<P>(fr)
    }

    /// Every saved entry refilled over the downtime and converted to its policy here (by
    /// position), in batches of one frame; then where untracked keys start.
    fn apply(
        &self,
        head: Head,
        fr: &mut FrameReader<&mut dyn Read>,
        down: u64,
    ) -> Result<(), RestoreError> {
        let (_, _, entries_kind) = kinds::<P>();
        // Before any entry: a refusal changes nothing.
        self.check_counts(&head)?;
        // The wall clock (read before `apply`), then the limiter's clock: see `Bucket::restore`.
        let now = self.clock.now();
        let found = head.seed == self.seed;
        // A file saying a key (or the floor) is full later than any save could is clamped to
        // that instant (`Table::latest_full`): drained, never fuller.
        let limit = self.table.latest_full(now);
        let entry_len = if P::SEVERAL { 17 } else { 16 };
        let mut batch = Vec::new();
        // Under another seed, an entry's fingerprint names no key here: the key it was may be
        // any key here, under any policy here. Per saved list of quotas, the most any entry
        // lacks of each quota: converted to every policy here at
        // the end, it raises the floor no less than each entry would (a conversion withholds
        // more of a bucket that lacks more).
        let mut worst: HashMap<&[Quota], [u64; MAX_LIMITS]> = HashMap::new();
        loop {
            let (k, mut c) = fr.next()?;
            if k == kind::FLOOR {
                let (evicted, rel) = (c.u8()?, c.i64()?);
                c.end()?;
                if evicted > 1 {
                    return Err(RestoreError::Corrupt("an invalid floor"));
                }
                fr.expect(kind::END)?;
                if evicted == 1 {
                    // As far from the anchor as it was.
                    let at = i128::from(now) + i128::from(rel) - i128::from(down);
                    let at = (at.clamp(0, i128::from(HORIZON_NS)) as u64).min(limit);
                    let at = at.max(self.floor_converted(&head, rel, down, now).min(limit));
                    self.table.evicted_at.fetch_max(at, Ordering::SeqCst);
                }
                self.raise_floor_from(&worst, down, now, limit);
                return Ok(());
            }
            if k != entries_kind {
                return Err(RestoreError::Corrupt("a frame out of place"));
            }
            let count = c.u32()? as usize;
            // At least `entry_len` bytes an entry (one quota): a count that cannot fit is
            // corrupt; of one quota each, the frame holds exactly the entries.
            if count.saturating_mul(entry_len) > c.remaining()
                || !P::SEVERAL && count * entry_len != c.remaining()
            {
                return Err(RestoreError::Corrupt(
                    "an entries frame of the wrong length",
                ));
            }
            batch.clear();
            for _ in 0..count {
                let fp = c.u64()?;
                let n = if P::SEVERAL { usize::from(c.u8()?) } else { 1 };
                if !super::index::is_fingerprint(fp) {
                    return Err(RestoreError::Corrupt("a fingerprint no key has"));
                }
                let (at, len) = head
                    .overrides
                    .get(&fp)
                    .copied()
                    .unwrap_or((0, head.default));
                if n != len {
                    return Err(RestoreError::Corrupt(
                        "an entry with another number of quotas than its policy",
                    ));
                }
                let rule = self.rule_of(fp);
                let new = P::quotas(rule);
                // Never met when found: `check_counts` compared this entry's pair of policies
                // (and checked the pairs given against it).
                // Not found, the entry only raises the floor, converted whatever the counts.
                if found && n != new.len() && head.pairs.is_none() {
                    return Err(RestoreError::LimitsChanged {
                        saved: n,
                        restoring: new.len(),
                    });
                }
                let mut records = [(new[0], 0u64); MAX_LIMITS];
                for (i, r) in records[..n].iter_mut().enumerate() {
                    *r = (head.quotas[at + i], c.u64()?);
                }
                if !found {
                    let lacks = worst
                        .entry(&head.quotas[at..at + n])
                        .or_insert([0; MAX_LIMITS]);
                    for (w, r) in lacks.iter_mut().zip(&records[..n]) {
                        *w = (*w).max(r.1);
                    }
                }
                let mut states = [0u64; MAX_LIMITS];
                converted_states(
                    &records[..n],
                    down,
                    now,
                    new,
                    head.pairs.as_deref(),
                    &mut states,
                );
                let mut full = true;
                for (s, q) in states[..new.len()].iter_mut().zip(new) {
                    *s = (*s).min(q.earned_floor(limit));
                    full &= gcra::is_full(*s, now, q);
                }
                if !full {
                    batch.push((fp, P::from_words(&states[..new.len()])));
                }
            }
            c.end()?;
            self.restore_entries(&batch, found);
        }
    }
}

impl<K, P: KeyedPolicy, C> KeyedLimiter<K, P, C> {
    /// Raises the floor for untracked keys to where each saved list of quotas' `worst` lacks
    /// (entries of a file saved under another seed: see `apply`), converted to each policy
    /// here, would be full; past [`MAX_PAIRS`] conversions, to `limit`, the latest instant a
    /// restore holds a key to (every untracked key drained until then: a restore only
    /// withholds).
    fn raise_floor_from(
        &self,
        worst: &HashMap<&[Quota], [u64; MAX_LIMITS]>,
        down: u64,
        now: u64,
        limit: u64,
    ) {
        if worst.is_empty() {
            return;
        }
        let here = self.distinct_rules();
        if worst.len().saturating_mul(here.len()) > MAX_PAIRS {
            self.table
                .evicted_at
                .fetch_max(limit.min(HORIZON_NS), Ordering::SeqCst);
            return;
        }
        for (&old, lacks) in worst {
            let n = old.len();
            for rule in &here {
                let new = P::quotas(rule);
                let mut records = [(new[0], 0u64); MAX_LIMITS];
                for (i, r) in records[..n].iter_mut().enumerate() {
                    *r = (old[i], lacks[i]);
                }
                let mut states = [0u64; MAX_LIMITS];
                restored_states(&records[..n], down, now, new, &mut states);
                for (s, q) in states[..new.len()].iter_mut().zip(new) {
                    *s = (*s).min(q.earned_floor(limit));
                }
                let full_at = P::full_at(rule, &P::from_words(&states[..new.len()]));
                self.table
                    .evicted_at
                    .fetch_max(full_at.min(HORIZON_NS), Ordering::SeqCst);
            }
        }
    }

    /// The floor for untracked keys, `rel` ns after the save's reading, carried to this
    /// limiter's policies as `set_quota` carries a bucket: the latest instant at which a key
    /// full at the saved floor under its saved policy, converted to its policy here, is full
    /// (0 when no policy changed or the floor was not ahead: the instant alone then says it).
    ///
    /// The instant alone is not enough across a change: a key empty under a fast saved rate
    /// lacks only what a slower rate (or a larger burst) refills over the same span. An
    /// untracked key may go through any pair of [`policy_pairs`](Self::policy_pairs); the floor
    /// takes the strictest.
    fn floor_converted(&self, head: &Head, rel: i64, down: u64, now: u64) -> u64 {
        let Ok(ahead) = u64::try_from(rel) else {
            return 0;
        };
        if ahead == 0 {
            return 0;
        }
        let mut latest = 0u64;
        // Past `MAX_PAIRS` pairs (another seed, thousands of policies on each side): the
        // latest instant, which the caller cuts to the latest a restore holds a key to.
        let Some(pairs) = self.policy_pairs(head) else {
            return u64::MAX;
        };
        for (old, rule) in pairs {
            let new = P::quotas(rule);
            // Equal policies with no pairs given: the instant alone says it. Pairs given may
            // move a state to another position (or drop it), whatever the quotas.
            if old == new && head.pairs.is_none() {
                continue;
            }
            // Full at the floor: lacking, at the save's reading, what `ahead` ns earn (rounded
            // up, toward fewer tokens).
            let mut records = [(new[0], 0u64); MAX_LIMITS];
            for (r, q) in records.iter_mut().zip(old) {
                *r = (*q, q.earned_ceil(ahead));
            }
            // Another count (a file of another seed: `check_counts`) pairs no quota: each here
            // takes the strictest state any saved one converts to.
            let mut states = [0u64; MAX_LIMITS];
            let pairs = head.pairs.as_deref();
            converted_states(&records[..old.len()], down, now, new, pairs, &mut states);
            let full_at = P::full_at(rule, &P::from_words(&states[..new.len()]));
            latest = latest.max(full_at.min(HORIZON_NS));
        }
        latest
    }

    /// Every pair of a saved policy and the policy here that one key may go through, as far as
    /// fingerprints tell, the saved default and the default here first. Under this limiter's
    /// seed: that pair, each saved override and this limiter's rule for its fingerprint, the
    /// saved default and each override here the file does not name. Under another seed the
    /// overrides' fingerprints name other keys on each side, so only the first pair is sure and
    /// any saved policy may meet any policy here: every pair of distinct ones (strictest).
    /// `None` where another seed's pairs would number more than [`MAX_PAIRS`].
    fn policy_pairs<'a>(&'a self, head: &'a Head) -> Option<Vec<(&'a [Quota], &'a P::Rule)>> {
        let default = &head.quotas[..head.default];
        let mut pairs: Vec<(&[Quota], &P::Rule)> = alloc::vec![(default, &self.rule)];
        if head.seed != self.seed {
            let saved = distinct(
                core::iter::once(default).chain(
                    head.overrides
                        .values()
                        .map(|&(at, n)| &head.quotas[at..at + n]),
                ),
                |q| q,
            );
            let here = self.distinct_rules();
            if saved.len().saturating_mul(here.len()) > MAX_PAIRS {
                return None;
            }
            for old in &saved {
                for rule in &here {
                    pairs.push((old, rule));
                }
            }
            return Some(pairs);
        }
        for (&fp, &(at, n)) in &head.overrides {
            pairs.push((&head.quotas[at..at + n], self.rule_of(fp)));
        }
        for (&fp, rule) in &self.overrides {
            if !head.overrides.contains_key(&fp) {
                pairs.push((default, rule));
            }
        }
        Some(pairs)
    }

    /// This limiter's rules, one per distinct list of quotas, the default first.
    fn distinct_rules(&self) -> Vec<&P::Rule> {
        distinct(
            core::iter::once(&self.rule).chain(self.overrides.values()),
            |r| P::quotas(r),
        )
    }

    /// [`RestoreError::LimitsChanged`] if any pair of policies a key may go through
    /// ([`policy_pairs`](Self::policy_pairs)) has another number of quotas on each side.
    /// Decided by the policies alone, before any entry is read: a file with no entries (every
    /// key full, or none ever seen) is refused as one with entries is, where converting only
    /// the floor would let the verdict depend on which keys were tracked at the save.
    ///
    /// Saved under another seed, only the defaults are compared: an override's fingerprint
    /// there names no key here, so pairing it with the rule its fingerprint falls to here
    /// would refuse the very policies saved (an override of another count than the default).
    /// No entry of such a file is tracked (each only raises the floor, converted to the
    /// strictest), so no key's state is carried across a count it cannot be matched with.
    ///
    /// With pairs given ([`KeyedLimiterBuilder::restore_paired_at`]), counts may differ: each
    /// pair of policies must instead have one pair per quota here, each naming a position its
    /// saved policy has, else [`RestoreError::BadPairs`].
    fn check_counts(&self, head: &Head) -> Result<(), RestoreError> {
        let pairs = if head.seed == self.seed {
            // Under this limiter's seed: as many pairs as policies on both sides together.
            self.policy_pairs(head).unwrap_or_default()
        } else {
            alloc::vec![(&head.quotas[..head.default], &self.rule)]
        };
        for &(old, rule) in &pairs {
            let new = P::quotas(rule);
            if let Some(given) = &head.pairs {
                if given.len() != new.len() || given.iter().flatten().any(|&i| i >= old.len()) {
                    return Err(RestoreError::BadPairs {
                        pairs: given.len(),
                        quotas: new.len(),
                        saved: old.len(),
                    });
                }
                continue;
            }
            if old.len() != new.len() {
                return Err(RestoreError::LimitsChanged {
                    saved: old.len(),
                    restoring: new.len(),
                });
            }
        }
        Ok(())
    }

    /// Tracks `(fp, state)` entries read from a saved table (`found`: saved under this
    /// limiter's seed), keeping the stricter state of each quota of a fingerprint seen twice,
    /// and of an entry and where its key, untracked here, starts now. An entry not found,
    /// meeting a full table (a save racing insertions may hold a few more than `max_keys`), or
    /// landing farther than [`MAX_RESTORE_PROBE`] slots from its home is not tracked: it raises
    /// the floor for untracked keys to its full instant instead.
    fn restore_entries(&self, entries: &[(u64, P::State)], found: bool) {
        let mut locked = self.index.lock();
        let t = &self.table;
        for (fp, state) in entries {
            let (fp, rule) = (*fp, self.rule_of(*fp));
            if found && locked.contains(fp) {
                // A key the walk met twice (moved meanwhile): the later state is the larger.
                P::merge(self, fp, rule, state);
                continue;
            }
            // No more lenient than where the key starts untracked (a live table's floor after
            // a drain, a clock stepped back or an earlier restore): a restore only withholds.
            // Read under the mutex, as an insertion reads it (`KeyedLimiter::insert`).
            let state = &stricter::<P>(rule, state, &self.start_state(rule));
            let full_at = P::full_at(rule, state);
            if !found
                || t.len.load(Ordering::SeqCst) >= self.max_keys
                || !locked.room_within(fp, MAX_RESTORE_PROBE)
                || !P::place(self, &mut locked, fp, rule, state, full_at)
            {
                t.evicted_at
                    .fetch_max(full_at.min(HORIZON_NS), Ordering::SeqCst);
                continue;
            }
            t.len.fetch_add(1, Ordering::SeqCst);
            t.next_full_at.fetch_min(full_at, Ordering::SeqCst);
        }
        // The gauge of the keys tracked, set under the index's mutex as insertions set it.
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe.inserted(t.len.load(Ordering::SeqCst));
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<K: Hash + Eq + Clone, P: KeyedPolicy, C: Clock + Clone> KeyedLimiterBuilder<K, P, C> {
    /// Builds the limiter from a state written by [`KeyedLimiter::save`] (feature `persist`):
    /// the saved fingerprint seed (so the saved entries are found again), every saved entry
    /// refilled over the downtime measured on the wall clock ([`SystemTime::now`]), and where
    /// untracked keys start (saved under another policy, converted as `set_quota` converts a
    /// bucket). This builder's policies apply; an entry saved under another quota is converted
    /// as [`Bucket::set_quota`](crate::Bucket::set_quota) converts (for a policy of several,
    /// each quota paired with an equal saved one, else the one of the same period where only
    /// one is left on each side, whatever their order; quotas left unpaired take the strictest
    /// of the saved ones left); another number of quotas refuses the whole restore
    /// ([`RestoreError::LimitsChanged`]; a table of [`Limits`] can be restored with its quotas
    /// paired by the caller instead: [`restore_paired`](KeyedLimiterBuilder::restore_paired)),
    /// decided by the policies alone (the default saved and here, each override saved or set
    /// here), whether or not the file holds entries. Streams:
    /// one frame in memory at a time, and the file's overrides (at most 2^24). Saved entries beyond `max_keys` are not tracked: each
    /// raises the floor for untracked keys to the instant it would be full (new keys may be
    /// refused until then), so no key starts more lenient than its saved state.
    ///
    /// Errors: [`RestoreError`] for unreadable input; nothing is built then. Recover with a
    /// limiter built as configured and then [`drain`](KeyedLimiter::drain)ed, never a full one.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// let q = Quota::per_second(10).unwrap();
    /// let limiter = KeyedLimiter::with_clock(q, 100, ManualClock::new());
    /// limiter.try_acquire(&"alice", 10).unwrap();
    /// let mut file = Vec::new();
    /// limiter.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// let later = SystemTime::UNIX_EPOCH + Duration::from_millis(500);
    /// let restored = KeyedLimiter::<&str, Quota, _>::builder(q, 100, ManualClock::new())
    ///     .restore_at(&file[..], later)
    ///     .unwrap();
    /// assert_eq!(restored.available(&"alice"), 5);
    /// assert_eq!(restored.available(&"bob"), 10);
    /// ```
    pub fn restore<R: Read>(self, r: R) -> Result<KeyedLimiter<K, P, C>, RestoreError> {
        self.restore_with(r, SystemTime::now, None)
    }

    /// [`restore`](KeyedLimiterBuilder::restore) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{persist::RestoreError, KeyedLimiter, ManualClock, Quota};
    /// let b = KeyedLimiter::<u32, Quota, _>::builder(Quota::per_second(1).unwrap(), 10, ManualClock::new());
    /// let err = b.restore_at(&b"TOLLGATE\x09\x00"[..], SystemTime::UNIX_EPOCH).unwrap_err();
    /// assert!(matches!(err, RestoreError::UnsupportedVersion(9)));
    /// ```
    pub fn restore_at<R: Read>(
        self,
        r: R,
        wall: SystemTime,
    ) -> Result<KeyedLimiter<K, P, C>, RestoreError> {
        self.restore_with(r, || wall, None)
    }

    /// The head, the wall clock, the limiter built around the saved seed, then its entries
    /// (through `pairs` where given: see [`restore_paired_at`]).
    ///
    /// [`restore_paired_at`]: KeyedLimiterBuilder::restore_paired_at
    fn restore_with<R: Read>(
        self,
        mut r: R,
        wall: impl FnOnce() -> SystemTime,
        pairs: Option<&[Option<usize>]>,
    ) -> Result<KeyedLimiter<K, P, C>, RestoreError> {
        use sealed::Frames;
        let mut fr = FrameReader::open(&mut r as &mut dyn Read, KeyedLimiter::<K, P, C>::LIMITER)?;
        let mut head = read_head::<P>(&mut fr)?;
        head.pairs = pairs.map(<[Option<usize>]>::to_vec);
        let down = downtime(fr.wall_ns(), wall())?;
        let limiter = self
            .build_seeded(Some(head.seed))
            .map_err(RestoreError::Config)?;
        limiter.apply(head, &mut fr, down)?;
        Ok(limiter)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedLimiterBuilder<K, Limits, C> {
    /// [`restore`](KeyedLimiterBuilder::restore) with the quotas paired as the caller names
    /// them, so that a policy that gained or lost quotas keeps the state of those it kept:
    /// quota `j` of this builder's policy takes the state its saved quota `pairs[j]` (a
    /// position in the saved policy) had, refilled over the downtime and converted as
    /// [`Bucket::set_quota`](crate::Bucket::set_quota) converts (the balance carried, capped
    /// at the new burst; a debt kept); `None` starts it full for every key, as a new limiter
    /// does. A saved quota no pair names is dropped; one named twice constrains both. The
    /// counts may differ (no [`RestoreError::LimitsChanged`]).
    ///
    /// The pairs apply by position to every policy a key may go through (the default, and each
    /// override saved or set here): each must have `pairs.len()` quotas here and a saved
    /// quota at every position named, else [`RestoreError::BadPairs`] and nothing is built.
    /// Untracked keys start as of the saved floor (one instant for the table, every quota
    /// included), the paired quotas converted as the entries are. So no key's paired quota
    /// starts more lenient than saved, and no unpaired quota more lenient than in a new
    /// limiter. Otherwise as [`restore`](KeyedLimiterBuilder::restore).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::persist::RestoreError;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let per_day = Quota::new(100, Duration::from_secs(86_400), 100).unwrap();
    /// let per_minute = Quota::new(10, Duration::from_secs(60), 10).unwrap();
    /// let saved = KeyedMultiLimiter::with_clock(Limits::new([per_day]).unwrap(), 100, ManualClock::new());
    /// saved.try_acquire(&"alice", 100).unwrap();
    /// let mut file = Vec::new();
    /// saved.save(&mut file).unwrap();
    /// // A per-minute quota added in front: new, so full; the per-day one keeps alice's spend.
    /// let both = Limits::new([per_minute, per_day]).unwrap();
    /// let builder = || KeyedMultiLimiter::<&str, _>::builder(both.clone(), 100, ManualClock::new());
    /// let restored = builder().restore_paired(&file[..], &[None, Some(0)]).unwrap();
    /// assert_eq!(restored.available(&"alice"), 0);
    /// assert_eq!(restored.available(&"bob"), 10);
    /// // One pair per quota here, each naming a saved quota.
    /// let err = builder().restore_paired(&file[..], &[Some(0)]);
    /// assert!(matches!(err, Err(RestoreError::BadPairs { pairs: 1, quotas: 2, saved: 1 })));
    /// ```
    pub fn restore_paired<R: Read>(
        self,
        r: R,
        pairs: &[Option<usize>],
    ) -> Result<KeyedLimiter<K, Limits, C>, RestoreError> {
        self.restore_with(r, SystemTime::now, Some(pairs))
    }

    /// [`restore_paired`](KeyedLimiterBuilder::restore_paired) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let per_second = Quota::per_second(10).unwrap();
    /// let per_hour = Quota::new(1_000, Duration::from_secs(3_600), 1_000).unwrap();
    /// let saved = KeyedMultiLimiter::with_clock(
    ///     Limits::new([per_second, per_hour]).unwrap(),
    ///     100,
    ///     ManualClock::new(),
    /// );
    /// saved.try_acquire(&7u32, 10).unwrap();
    /// let mut file = Vec::new();
    /// saved.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// // The per-second quota removed: the per-hour one (saved at position 1) keeps its spend.
    /// let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    /// let restored = KeyedMultiLimiter::<u32, _>::builder(Limits::new([per_hour]).unwrap(), 100, ManualClock::new())
    ///     .restore_paired_at(&file[..], later, &[Some(1)])
    ///     .unwrap();
    /// assert_eq!(restored.available(&7), 990);
    /// ```
    pub fn restore_paired_at<R: Read>(
        self,
        r: R,
        wall: SystemTime,
        pairs: &[Option<usize>],
    ) -> Result<KeyedLimiter<K, Limits, C>, RestoreError> {
        self.restore_with(r, || wall, Some(pairs))
    }
}

/// The states, under quotas `new` at reading `now`, of buckets saved as `saved` (each quota
/// and its lack), `down` ns ago: through `pairs` where given and fitting (quota `j` from the
/// saved quota `pairs[j]` names, by [`restored_state`]; `None`, full), else as
/// [`restored_states`] pairs them (which, for counts that differ, gives each quota the
/// strictest of the saved ones: never more lenient).
fn converted_states(
    saved: &[(Quota, u64)],
    down: u64,
    now: u64,
    new: &[Quota],
    pairs: Option<&[Option<usize>]>,
    out: &mut [u64],
) {
    match pairs {
        Some(pairs)
            if pairs.len() == new.len() && pairs.iter().flatten().all(|&i| i < saved.len()) =>
        {
            for ((o, q), pair) in out.iter_mut().zip(new).zip(pairs) {
                *o = match *pair {
                    Some(i) => restored_state(saved[i].1, down, now, &saved[i].0, q),
                    None => gcra::FULL,
                };
            }
        }
        _ => restored_states(saved, down, now, new, out),
    }
}

/// Each quota's stricter state of `a` and `b` (the later instant), under `rule`.
fn stricter<P: KeyedPolicy>(rule: &P::Rule, a: &P::State, b: &P::State) -> P::State {
    let n = P::quotas(rule).len();
    let mut words = [0u64; MAX_LIMITS];
    for ((w, &x), &y) in words[..n].iter_mut().zip(P::words(a)).zip(P::words(b)) {
        *w = x.max(y);
    }
    P::from_words(&words[..n])
}

/// The most pairs of a saved and a present policy a restore into a limiter of another seed
/// converts one by one; past it, every untracked key is held to the strictest instant (see
/// `raise_floor_from`), so that a file of many policies restored into a limiter of many costs
/// a bounded time.
const MAX_PAIRS: usize = 1 << 16;

/// The items of `items` whose quota lists (`quotas`) differ, each list's first, in order.
fn distinct<'a, T: ?Sized + 'a>(
    items: impl Iterator<Item = &'a T>,
    quotas: impl Fn(&'a T) -> &'a [Quota],
) -> Vec<&'a T> {
    let mut seen = std::collections::HashSet::new();
    items.filter(|t| seen.insert(quotas(t))).collect()
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::keyed::policy::sealed::Sealed;
    use crate::test_support::Xorshift;
    use crate::ManualClock;
    use core::time::Duration;

    /// A walk in chunks of a few slots, with insertions (migrations), sweeps (shifts) and
    /// admissions between chunks, reads every entry tracked when it began unless it was
    /// evicted (full) first, each with at least the state it had then.
    #[test]
    fn a_walk_misses_no_entry_that_stays_tracked() {
        let q = Quota::per_second(1).unwrap().with_burst(100).unwrap();
        let (mut read, mut missed) = (0, 0);
        for seed in 1..=40u64 {
            let mut rng = Xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let clock = ManualClock::new();
            // Nearly half full (long clusters), with buckets that fill up during the walk.
            let limiter = KeyedLimiter::with_clock(q, 256, clock.clone());
            let n = 150 + rng.next() % 100;
            for k in 0..n {
                limiter.try_acquire(&k, 1 + rng.next() % 10).unwrap();
            }
            let start: Vec<(u64, u64, u64)> = (0..n)
                .map(|k| {
                    let fp = limiter.fingerprint(&k);
                    (k, fp, limiter.index.load(fp).unwrap())
                })
                .collect();
            let mut seen: HashMap<u64, u64> = HashMap::new();
            let mut next_key = 1_000_000u64;
            let chunk = 1 + (rng.next() % 4) as usize;
            limiter
                .index
                .walk(chunk, |entries| {
                    for &(fp, s) in entries {
                        let e = seen.entry(fp).or_insert(0);
                        *e = (*e).max(s);
                    }
                    for _ in 0..rng.next() % 3 {
                        match rng.next() % 4 {
                            0 => {
                                for _ in 0..rng.next() % 4 {
                                    let _ = limiter.try_acquire(&next_key, 1 + rng.next() % 100);
                                    next_key += 1;
                                }
                            }
                            1 if rng.next() % 4 == 0 => {
                                clock.advance(Duration::from_millis(rng.next() % 300));
                                limiter.sweep();
                            }
                            _ => {
                                let k = 1_000_000 + rng.next() % (next_key - 999_999);
                                let _ = limiter.try_acquire(&k, 1);
                            }
                        }
                    }
                    Ok::<(), ()>(())
                })
                .unwrap();
            let now = clock.now();
            for (k, fp, s0) in start {
                match seen.get(&fp) {
                    Some(&s) => {
                        read += 1;
                        assert!(s >= s0, "seed {seed}: key {k}");
                    }
                    None => {
                        missed += 1;
                        assert!(gcra::full_at(s0, &q) <= now, "seed {seed}: key {k} missed");
                    }
                }
            }
        }
        // Both cases happen: entries read, and entries evicted before the walk reached them.
        assert!(read > 500 && missed > 50, "read {read}, missed {missed}");
    }

    /// A record handed to another key between the walk's slot read and the save's record read
    /// is skipped, not saved as the first key's state (the interleaving, made deterministic).
    #[test]
    fn a_record_handed_to_another_key_is_not_saved_as_the_first() {
        use crate::{KeyedMultiLimiter, Limits};
        let clock = ManualClock::new();
        let limits = Limits::new([
            Quota::new(1, Duration::from_secs(1), 2).unwrap(),
            Quota::new(60, Duration::from_secs(60), 5).unwrap(),
        ])
        .unwrap();
        let limiter = KeyedMultiLimiter::<u8, _>::with_clock(limits, 1, clock.clone());
        limiter.try_acquire(&1, 1).unwrap();
        let (fp1, fp2) = (limiter.fingerprint(&1u8), limiter.fingerprint(&2u8));
        let h = limiter.index.load(fp1).unwrap();
        let rule = limiter.rule_of(fp1).clone();
        assert!(Limits::saved(&limiter, fp1, h, &rule).is_some());
        clock.advance(Duration::from_secs(60));
        limiter.try_acquire(&2, 2).unwrap(); // evicts key 1, takes its record
        assert_eq!(limiter.index.load(fp2), Some(h), "the same record");
        assert_eq!(Limits::saved(&limiter, fp1, h, &rule), None);
        assert!(Limits::saved(&limiter, fp2, h, &rule).is_some());
    }

    /// A keyed file of `entries` (fingerprint, units lacking), quota `q`, seed 7, and the
    /// floor `floor` (relative to the save's reading), as a save would frame it.
    fn keyed_file(q: &Quota, entries: &[(u64, u64)], floor: Option<i64>) -> Vec<u8> {
        let mut file = Vec::new();
        let mut fw = FrameWriter::start(&mut file, Limiter::Keyed, 1 << 60).unwrap();
        let mut p = Payload::default();
        p.quota(q).u64(7).u64(0);
        fw.frame(kind::KEYED, &p.0).unwrap();
        for part in entries.chunks(ENTRIES_PER_FRAME) {
            let mut p = Payload::default();
            p.u32(part.len() as u32);
            for &(fp, lack) in part {
                p.u64(fp).u64(lack);
            }
            fw.frame(kind::ENTRIES, &p.0).unwrap();
        }
        let mut p = Payload::default();
        p.u8(u8::from(floor.is_some())).i64(floor.unwrap_or(0));
        fw.frame(kind::FLOOR, &p.0).unwrap();
        fw.finish().unwrap();
        file
    }

    /// A file whose fingerprints share their low 32 bits (no key or seed needed to write one)
    /// restores with at most twice the probe work of a file of as many random fingerprints and
    /// tracks every entry, under each of eight fixed secrets: homes drawn from the fingerprints'
    /// own bits would make each entry probe past all the ones before it (and drop those landing
    /// past `MAX_RESTORE_PROBE`). The work is counted, not timed: the slots the restore's probes
    /// stepped past (the restored table's displacement), the same on every machine and load.
    #[test]
    fn a_clustered_file_restores_as_fast_as_a_random_one() {
        let q = Quota::per_second(10).unwrap().with_burst(100).unwrap();
        let n = 20_000u64;
        let lack = 50 * q.scale();
        let mut rng = Xorshift(0x5EED_C1A5_7E2E_D000);
        let clustered: Vec<_> = (0..n).map(|i| (((i + 1) << 32) | 1, lack)).collect();
        let random: Vec<_> = (0..n).map(|_| (rng.next() | 1, lack)).collect();
        let files = [
            keyed_file(&q, &clustered, None),
            keyed_file(&q, &random, None),
        ];
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1 << 60);
        for _ in 0..8 {
            let secret = [rng.next(), rng.next()];
            let work = files.each_ref().map(|file| {
                let restored =
                    KeyedLimiter::<u64, Quota, _>::builder(q, n as usize, ManualClock::new())
                        .index_secret(secret)
                        .restore_at(&file[..], at)
                        .unwrap();
                assert_eq!(restored.len(), n as usize, "secret {secret:x?}");
                restored.index.displacement()
            });
            assert!(
                work[0] <= 2 * work[1],
                "secret {secret:x?}: clustered {}, random {} slots probed past",
                work[0],
                work[1]
            );
        }
    }

    /// A key lacking more than any save can say (a quarter of `u64`'s range of units) and a
    /// floor at the end of time are clamped to the most a save can hold (full within two
    /// refills of the longest burst): drained, never fuller, and no lockout for a century.
    #[test]
    fn a_restore_clamps_what_no_save_can_hold() {
        let q = Quota::per_second(10).unwrap();
        let mut rng = Xorshift(0x0DEB_7C1A_3BED_0001);
        let fp = rng.next() | 1;
        let file = keyed_file(&q, &[(fp, u64::MAX / 4)], Some(i64::MAX));
        let clock = ManualClock::new();
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1 << 60);
        let restored = KeyedLimiter::<u64, Quota, _>::builder(q, 16, clock.clone())
            .restore_at(&file[..], at)
            .unwrap();
        assert_eq!(restored.len(), 1);
        let tracked = || {
            restored
                .index
                .load(fp)
                .map(|s| gcra::available(s, clock.now(), &q))
        };
        assert_eq!((tracked(), restored.available(&1)), (Some(0), 0));
        clock.advance(Duration::from_secs(2));
        assert_eq!((tracked(), restored.available(&1)), (Some(10), 10));
    }

    /// A floor at the end of time saved under another quota converts without overflow and is
    /// clamped as one under the same quota is: drained, full within two refills of the burst.
    #[test]
    fn a_floor_at_the_end_of_time_under_another_quota_is_clamped() {
        let old = Quota::per_second(1_000_000_000).unwrap();
        let file = keyed_file(&old, &[], Some(i64::MAX));
        for new in [
            Quota::per_second(10).unwrap(),
            Quota::new(7, Duration::from_nanos(333), 5).unwrap(),
        ] {
            let clock = ManualClock::new();
            let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1 << 60);
            let restored = KeyedLimiter::<u64, Quota, _>::builder(new, 16, clock.clone())
                .restore_at(&file[..], at)
                .unwrap();
            assert_eq!(restored.available(&1), 0, "{new:?}");
            // Over three refills of the burst: past the clamp's two.
            clock.advance(3 * new.burst() as u32 * new.per() / new.tokens() as u32 + new.per());
            assert_eq!(restored.available(&1), new.burst(), "{new:?}");
        }
    }
}
