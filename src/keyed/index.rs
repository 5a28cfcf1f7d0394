//! The keyed limiter's index: key → its one state word.
//!
//! Normally a [`papaya`] map: lookups are lock-free and write nothing shared (the epoch guard is
//! the thread's own), and an entry never moves while it is reachable, so a thread holding a
//! reference to a word can CAS it safely. Under `--cfg tollgate_loom` (papaya has no loom
//! support) it is a loom `Mutex` around a `HashMap` of `Arc`ed words: the map is then modelled
//! as a linearizable black box, while the per-key word protocol (CAS decisions, the dead bit,
//! eviction, the length budget) is the same code and is explored by the models.

use crate::sync::AtomicU64;
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};

/// Bit 63 of a word: the entry has been evicted. Decisions never CAS a dead word; whoever sees
/// one removes the entry and retries. States never reach bit 63 (they are at most 2^63 − 1).
pub(crate) const DEAD: u64 = 1 << 63;

#[cfg(not(tollgate_loom))]
pub(crate) use std::sync::Mutex;

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(tollgate_loom))]
pub(crate) struct Index<K, S> {
    map: papaya::HashMap<K, AtomicU64, S>,
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq, S: BuildHasher> Index<K, S> {
    pub(crate) fn new(hasher: S) -> Self {
        Index {
            map: papaya::HashMap::with_hasher(hasher),
        }
    }

    /// Calls `f` with the word of `key`, if present (dead or alive).
    #[inline]
    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(Option<&AtomicU64>) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.map.guard();
        f(self.map.get(key, &guard))
    }

    /// Inserts `key` with `word` unless present; `Err(dead)` says whether the present word is dead.
    pub(crate) fn try_insert(&self, key: K, word: u64) -> Result<(), bool> {
        let guard = self.map.guard();
        match self.map.try_insert(key, AtomicU64::new(word), &guard) {
            Ok(_) => Ok(()),
            Err(e) => Err(e.current.load(crate::sync::Ordering::Relaxed) & DEAD != 0),
        }
    }

    /// Removes `key` if its word is dead.
    pub(crate) fn remove_dead<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let guard = self.map.guard();
        let _ = self.map.remove_if(
            key,
            |_, w| w.load(crate::sync::Ordering::Relaxed) & DEAD != 0,
            &guard,
        );
    }

    /// Visits every entry (concurrent inserts and removals may or may not be seen).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &AtomicU64)) {
        let guard = self.map.guard();
        for (k, w) in self.map.iter(&guard) {
            f(k, w);
        }
    }
}

#[cfg(tollgate_loom)]
pub(crate) struct Index<K, S> {
    map: Mutex<std::collections::HashMap<K, loom::sync::Arc<AtomicU64>, S>>,
}

#[cfg(tollgate_loom)]
impl<K: Hash + Eq + Clone, S: BuildHasher> Index<K, S> {
    pub(crate) fn new(hasher: S) -> Self {
        Index {
            map: Mutex::new(std::collections::HashMap::with_hasher(hasher)),
        }
    }

    fn lock(
        &self,
    ) -> loom::sync::MutexGuard<'_, std::collections::HashMap<K, loom::sync::Arc<AtomicU64>, S>>
    {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(Option<&AtomicU64>) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let word = self.lock().get(key).cloned();
        f(word.as_deref())
    }

    pub(crate) fn try_insert(&self, key: K, word: u64) -> Result<(), bool> {
        let mut map = self.lock();
        if let Some(w) = map.get(&key) {
            return Err(w.load(crate::sync::Ordering::Relaxed) & DEAD != 0);
        }
        map.insert(key, loom::sync::Arc::new(AtomicU64::new(word)));
        Ok(())
    }

    pub(crate) fn remove_dead<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut map = self.lock();
        if map
            .get(key)
            .is_some_and(|w| w.load(crate::sync::Ordering::Relaxed) & DEAD != 0)
        {
            map.remove(key);
        }
    }

    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &AtomicU64)) {
        let snapshot: std::vec::Vec<_> = self
            .lock()
            .iter()
            .map(|(k, w)| (k.clone(), w.clone()))
            .collect();
        for (k, w) in &snapshot {
            f(k, w);
        }
    }
}
