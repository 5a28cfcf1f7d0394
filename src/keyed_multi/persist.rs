//! [`KeyedMultiLimiter`]'s saved state (feature `persist`): a `KEYED_MULTI` frame (default
//! policy, fingerprint seed, override count), one `OVERRIDE_MULTI` frame per override policy,
//! `MULTI_ENTRIES` frames (each tracked key with a quota that is not full: its fingerprint and
//! the units each of its quotas lacks at the anchor), and a `FLOOR` frame (where untracked keys
//! start), read after the entries.
//!
//! The save walks the index as [`KeyedLimiter::save`](crate::KeyedLimiter::save) does (one
//! chunk under the index's mutex at a time, decisions going on) and reads each key's record
//! with one consistent read, so each key is saved as of some instant during the save, every
//! quota at the same instant. A key evicted between the walk and its read is skipped (it was
//! full, and restores as an untracked key from the floor, read after the walk), unless it was
//! re-inserted into the same record meanwhile: then its state after the re-insertion is saved,
//! a real state of the key and no more lenient than the floor.
//! The guarantees and what a concurrent save can miss are `KeyedLimiter`'s (see
//! `src/keyed/persist.rs`).

use super::policy::Policy;
use super::{KeyedMultiLimiter, KeyedMultiLimiterBuilder};
use crate::clock::Clock;
use crate::keyed::persist::{read_floor, walk, write_floor, CHUNK};
use crate::limits::{Limits, MAX_LIMITS};
use crate::persist::format::ENTRIES_PER_FRAME;
use crate::persist::format::{kind, Cursor, FrameReader, FrameWriter, Limiter, Payload};
use crate::persist::{downtime, lack, restored_state, wall_ns, RestoreError};
use crate::quota::{Quota, HORIZON_NS};
use crate::sync::{Backoff, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::hash::Hash;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::time::SystemTime;

/// The most override policies a restore accepts.
const MAX_OVERRIDES: u64 = 1 << 24;

/// One saved key: its fingerprint, its quota count and what each quota lacks (or, restored,
/// each quota's state).
type Entry = (u64, usize, [u64; MAX_LIMITS]);

/// Writes a policy: its quota count, then its quotas.
fn put_limits(p: &mut Payload, limits: &Limits) {
    p.u8(limits.quotas().len() as u8);
    for q in limits.quotas() {
        p.quota(q);
    }
}

/// Reads a policy written by [`put_limits`].
fn get_limits(c: &mut Cursor<'_>) -> Result<Limits, RestoreError> {
    let n = usize::from(c.u8()?);
    if n == 0 || n > MAX_LIMITS {
        return Err(RestoreError::Corrupt("an invalid number of quotas"));
    }
    let mut quotas: [Option<Quota>; MAX_LIMITS] = [None; MAX_LIMITS];
    for q in &mut quotas[..n] {
        *q = Some(c.quota()?);
    }
    Limits::new(quotas.into_iter().flatten()).map_err(RestoreError::Config)
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiter<K, C> {
    /// Writes every tracked key whose quotas are not all full (feature `persist`), the
    /// override policies, the fingerprint seed and where untracked keys start, anchored to the
    /// wall clock ([`SystemTime::now`]); restore with [`KeyedMultiLimiterBuilder::restore`].
    /// A restart then keeps every quota's spend: a per-day quota is not handed out again by a
    /// deploy.
    ///
    /// Streams as [`KeyedLimiter::save`](crate::KeyedLimiter::save) does: one chunk of the
    /// table at a time, decisions going on; each key's quotas are saved together, as of one
    /// instant during the save. The file holds the seed: keep it private.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let per_day = Quota::new(1_000, Duration::from_secs(86_400), 1_000).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_day]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits.clone(), 100, ManualClock::new());
    /// limiter.try_acquire(&"alice", 10).unwrap();
    /// let mut file = Vec::new();
    /// limiter.save(&mut file).unwrap();
    /// let restored = KeyedMultiLimiter::<&str, _>::builder(limits, 100, ManualClock::new())
    ///     .restore(&file[..])
    ///     .unwrap();
    /// assert!(restored.available(&"alice") <= 1); // the second's 10 are spent
    /// ```
    pub fn save<W: Write>(&self, w: W) -> io::Result<()> {
        self.save_with(w, SystemTime::now)
    }

    /// [`save`](KeyedMultiLimiter::save) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limiter: KeyedMultiLimiter<u8, _> =
    ///     KeyedMultiLimiter::with_clock(Limits::from(Quota::per_second(1).unwrap()), 10, ManualClock::new());
    /// let mut file = Vec::new();
    /// limiter.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// ```
    pub fn save_at<W: Write>(&self, w: W, wall: SystemTime) -> io::Result<()> {
        self.save_with(w, || wall)
    }

    fn save_with<W: Write>(&self, w: W, wall: impl FnOnce() -> SystemTime) -> io::Result<()> {
        // The clock, then the wall clock: see `Bucket::save`.
        let now = self.clock.now();
        let wall = wall_ns(wall())?;
        let mut fw = FrameWriter::start(w, Limiter::KeyedMulti, wall)?;
        let mut p = Payload::default();
        put_limits(&mut p, &self.policy.limits);
        p.u64(self.seed).u64(self.overrides.len() as u64);
        fw.frame(kind::KEYED_MULTI, &p.0)?;
        for (&fp, policy) in &self.overrides {
            let mut p = Payload::default();
            p.u64(fp);
            put_limits(&mut p, &policy.limits);
            fw.frame(kind::OVERRIDE_MULTI, &p.0)?;
        }
        let mut entries: Vec<Entry> = Vec::new();
        walk(&self.index, CHUNK, |chunk| {
            entries.clear();
            for &(fp, h) in chunk {
                let policy = self.policy_of(fp);
                let Some(states) = self.record_of(fp, h as usize, policy) else {
                    continue;
                };
                let mut lacks = [0u64; MAX_LIMITS];
                for ((l, q), &s) in lacks.iter_mut().zip(policy.limits.quotas()).zip(&states) {
                    *l = lack(s, now, q);
                }
                if lacks.iter().any(|&l| l > 0) {
                    entries.push((fp, policy.len, lacks));
                }
            }
            for part in entries.chunks(ENTRIES_PER_FRAME) {
                let mut p = Payload::default();
                p.u32(part.len() as u32);
                for &(fp, n, lacks) in part {
                    p.u64(fp).u8(n as u8);
                    for &l in &lacks[..n] {
                        p.u64(l);
                    }
                }
                fw.frame(kind::MULTI_ENTRIES, &p.0)?;
            }
            Ok::<(), io::Error>(())
        })?;
        write_floor(&mut fw, &self.table, now)?;
        fw.finish().map(drop)
    }

    /// The states of record `h` if it still belongs to `fp` (one consistent read, retried
    /// while a writer holds it).
    fn record_of(&self, fp: u64, h: usize, policy: &Policy) -> Option<[u64; MAX_LIMITS]> {
        let mut backoff = Backoff::default();
        loop {
            match self.records.read::<MAX_LIMITS>(h, policy.len) {
                Some((_, owner, states)) => return (owner == fp).then_some(states),
                None => backoff.snooze(),
            }
        }
    }

    /// Makes every key the table does not track hold no tokens in any quota now (feature
    /// `persist`), as [`KeyedLimiter::drain`](crate::KeyedLimiter::drain): what a process
    /// that cannot restore its state should do instead of starting full. Untracked keys start
    /// from "full one burst's refill of the slowest quota of any policy from now" (a quota
    /// that refills faster starts a little in debt); call it on a limiter just built.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), Quota::per_second(5).unwrap()]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits, 100, ManualClock::new());
    /// limiter.drain();
    /// assert_eq!(limiter.available(&"anyone"), 0);
    /// assert_eq!(limiter.try_acquire(&"anyone", 1), Err(Denied::RetryAfter(Duration::from_millis(200))));
    /// ```
    pub fn drain(&self) {
        self.table.drain(self.clock.now());
    }

    /// Tracks entries read from a saved table (states, not lacks), keeping the stricter state
    /// of each quota of a fingerprint seen twice. An entry that finds the table full is not
    /// tracked; the floor for untracked keys is raised to the instant it would be full
    /// instead, so no key starts more lenient than its saved state.
    fn restore_entries(&self, entries: &[Entry]) {
        let mut locked = self.index.lock();
        for &(fp, n, states) in entries {
            let policy = self.policy_of(fp);
            debug_assert_eq!(n, policy.len);
            if let Some(h) = self.index.load(fp) {
                // A key the walk met twice (moved meanwhile): each quota's larger state.
                let h = h as usize;
                // Nothing else holds a record while a restore builds the limiter.
                let locked_record = self.records.try_lock(h, n);
                debug_assert!(locked_record.is_some(), "a record held during a restore");
                if let Some((seq, owner, cur)) = locked_record {
                    let mut next = cur;
                    for (x, &s) in next.iter_mut().zip(&states[..n]) {
                        *x = (*x).max(s);
                    }
                    if owner == fp {
                        self.records.write_unlock(h, seq, &next[..n]);
                    } else {
                        self.records.unlock_unchanged(h, seq);
                    }
                }
                continue;
            }
            let full_at = policy.full_at(&states[..n]);
            if self.table.len.load(Ordering::SeqCst) >= self.max_keys {
                let floor = full_at.min(HORIZON_NS);
                self.table.evicted_at.fetch_max(floor, Ordering::SeqCst);
                continue;
            }
            // Unreachable (fewer live keys than records), but never more lenient if it were:
            // the key starts from the floor, raised to its saved state's full instant.
            let Some(h) = self.take_record() else {
                self.table
                    .evicted_at
                    .fetch_max(full_at.min(HORIZON_NS), Ordering::SeqCst);
                continue;
            };
            self.records.claim(h, fp, &states[..n]);
            locked.insert(fp, h as u64, full_at);
            self.table.len.fetch_add(1, Ordering::SeqCst);
            self.table.next_full_at.fetch_min(full_at, Ordering::SeqCst);
        }
        // The gauge of the keys tracked, set under the index's mutex as insertions set it (a
        // review's finding, 2026-12-04: a restored table reported none).
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe.inserted(self.table.len.load(Ordering::SeqCst));
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "persist")))]
impl<K: Hash + Eq + Clone, C: Clock + Clone> KeyedMultiLimiterBuilder<K, C> {
    /// Builds the limiter from a state written by [`KeyedMultiLimiter::save`] (feature
    /// `persist`): the saved fingerprint seed (so the saved keys are found again), every saved
    /// key's quotas refilled over the downtime measured on the wall clock
    /// ([`SystemTime::now`]), and where untracked keys start. This builder's policies apply: a
    /// key's quotas saved under other quotas are converted by position, each as
    /// [`Bucket::set_quota`](crate::Bucket::set_quota) converts. A key whose saved policy has
    /// another number of quotas than its policy here refuses the whole restore
    /// ([`RestoreError::LimitsChanged`]): which saved quota became which is not known.
    ///
    /// Saved keys beyond this builder's `max_keys` are not tracked: the floor for untracked
    /// keys is raised to the instant each such key would be full, so no key starts more
    /// lenient than its saved state.
    ///
    /// Errors: [`RestoreError`] for unreadable input; nothing is built then. The suggested
    /// recovery is a limiter built as configured and then
    /// [`drain`](KeyedMultiLimiter::drain)ed, never a full one.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tollgate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let per_minute = Quota::new(60, Duration::from_secs(60), 60).unwrap();
    /// let limits = Limits::new([Quota::per_second(10).unwrap(), per_minute]).unwrap();
    /// let limiter = KeyedMultiLimiter::with_clock(limits.clone(), 100, ManualClock::new());
    /// limiter.try_acquire(&"alice", 10).unwrap();
    /// let mut file = Vec::new();
    /// limiter.save_at(&mut file, SystemTime::UNIX_EPOCH).unwrap();
    /// let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    /// let restored = KeyedMultiLimiter::<&str, _>::builder(limits, 100, ManualClock::new())
    ///     .restore_at(&file[..], later)
    ///     .unwrap();
    /// // A second later: the second holds 10 again, the minute 51.
    /// assert_eq!(restored.available(&"alice"), 10);
    /// assert_eq!(restored.try_acquire_snapshots(&"alice", 0).1.as_slice()[1].remaining(), 51);
    /// ```
    pub fn restore<R: Read>(self, r: R) -> Result<KeyedMultiLimiter<K, C>, RestoreError> {
        self.restore_with(r, SystemTime::now)
    }

    /// [`restore`](KeyedMultiLimiterBuilder::restore) with the wall-clock time given.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use tollgate::{persist::RestoreError, KeyedMultiLimiter, Limits, ManualClock, Quota};
    /// let b = KeyedMultiLimiter::<u32, _>::builder(Limits::from(Quota::per_second(1).unwrap()), 10, ManualClock::new());
    /// let err = b.restore_at(&b"TOLLGATE\x09\x00"[..], SystemTime::UNIX_EPOCH).unwrap_err();
    /// assert!(matches!(err, RestoreError::UnsupportedVersion(9)));
    /// ```
    pub fn restore_at<R: Read>(
        self,
        r: R,
        wall: SystemTime,
    ) -> Result<KeyedMultiLimiter<K, C>, RestoreError> {
        self.restore_with(r, || wall)
    }

    fn restore_with<R: Read>(
        self,
        r: R,
        wall: impl FnOnce() -> SystemTime,
    ) -> Result<KeyedMultiLimiter<K, C>, RestoreError> {
        let mut fr = FrameReader::open(r, Limiter::KeyedMulti)?;
        let (default, seed, n_overrides) = {
            let mut c = fr.expect(kind::KEYED_MULTI)?;
            let v = (get_limits(&mut c)?, c.u64()?, c.u64()?);
            c.end()?;
            v
        };
        if n_overrides > MAX_OVERRIDES {
            return Err(RestoreError::Corrupt("too many override policies"));
        }
        // The saved quotas alone (a boxed slice: memory in proportion to the input's frames).
        let default: Box<[Quota]> = default.quotas().into();
        let mut saved: HashMap<u64, Box<[Quota]>> = HashMap::new();
        for _ in 0..n_overrides {
            let mut c = fr.expect(kind::OVERRIDE_MULTI)?;
            let (fp, limits) = (c.u64()?, get_limits(&mut c)?);
            c.end()?;
            saved.insert(fp, limits.quotas().into());
        }
        let down = downtime(fr.wall_ns(), wall())?;
        let limiter = self
            .build_seeded(Some(seed))
            .map_err(RestoreError::Config)?;
        // The wall clock (read by `downtime`), then the limiter's clock: see `Bucket::restore`.
        let now = limiter.clock.now();
        let mut batch: Vec<Entry> = Vec::new();
        loop {
            let (k, mut c) = fr.next()?;
            match k {
                kind::MULTI_ENTRIES => {
                    let count = c.u32()? as usize;
                    // At least 17 bytes an entry (one quota): a count that cannot fit is corrupt.
                    if count.saturating_mul(17) > c.remaining() {
                        return Err(RestoreError::Corrupt(
                            "an entries frame of the wrong length",
                        ));
                    }
                    batch.clear();
                    for _ in 0..count {
                        let fp = c.u64()?;
                        let n = usize::from(c.u8()?);
                        if fp < 2 {
                            return Err(RestoreError::Corrupt("a fingerprint no key has"));
                        }
                        let old = saved.get(&fp).unwrap_or(&default);
                        if n != old.len() {
                            return Err(RestoreError::Corrupt(
                                "an entry with another number of quotas than its policy",
                            ));
                        }
                        let new = limiter.policy_of(fp);
                        if n != new.len {
                            return Err(RestoreError::LimitsChanged {
                                saved: n,
                                restoring: new.len,
                            });
                        }
                        let mut states = [0u64; MAX_LIMITS];
                        let mut full = true;
                        for (i, s) in states[..n].iter_mut().enumerate() {
                            let (o, q) = (&old[i], &new.limits.quotas()[i]);
                            *s = restored_state(c.u64()?, down, now, o, q);
                            full &= crate::gcra::is_full(*s, now, q);
                        }
                        if !full {
                            batch.push((fp, n, states));
                        }
                    }
                    c.end()?;
                    limiter.restore_entries(&batch);
                }
                kind::FLOOR => {
                    let floor = read_floor(&mut c, now, down)?;
                    fr.expect(kind::END)?;
                    if let Some(at) = floor {
                        limiter.table.evicted_at.fetch_max(at, Ordering::SeqCst);
                    }
                    return Ok(limiter);
                }
                _ => return Err(RestoreError::Corrupt("a frame out of place")),
            }
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use crate::{KeyedMultiLimiter, Limits, ManualClock, Quota};
    use core::time::Duration;

    /// The save reads a record by the handle the walk found under the key's slot; if, in
    /// between, the key was evicted and its record handed to another key, the read must be
    /// skipped, not saved as the first key's state (which would restore it with the other key's
    /// spend). The interleaving, made deterministic: the slot read, the hand-over, the record
    /// read.
    #[test]
    fn a_record_handed_to_another_key_is_not_saved_as_the_first() {
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
        let policy = limiter.policy_of(fp1).clone();
        assert!(limiter.record_of(fp1, h as usize, &policy).is_some());
        clock.advance(Duration::from_secs(60));
        limiter.try_acquire(&2, 2).unwrap(); // evicts key 1, takes its record
        assert_eq!(limiter.index.load(fp2), Some(h), "the same record");
        assert_eq!(limiter.record_of(fp1, h as usize, &policy), None);
        assert!(limiter.record_of(fp2, h as usize, &policy).is_some());
    }
}
