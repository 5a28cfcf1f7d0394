//! The deadline-ordered queue of wakers behind the cancellable wake-ups (the timer thread, a
//! frozen [`ManualClock`](crate::ManualClock)), and their handle, whose drop removes its entry.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::task::Waker;
use std::sync::{Mutex, MutexGuard};

/// Wakers by deadline (`Instant` or clock nanoseconds) and a unique key; the caller locks.
pub(crate) struct WakeQueue<K> {
    entries: BTreeMap<(K, u64), Waker>,
    seq: u64,
}

/// An entry's key in a [`WakeQueue`].
pub(crate) type Key<K> = (K, u64);

impl<K: Ord + Copy> WakeQueue<K> {
    pub(crate) const fn new() -> WakeQueue<K> {
        WakeQueue {
            entries: BTreeMap::new(),
            seq: 0,
        }
    }

    /// Queues a clone of `waker` for `at`; returns its key.
    pub(crate) fn insert(&mut self, at: K, waker: &Waker) -> Key<K> {
        let key = (at, self.seq);
        self.seq = self.seq.wrapping_add(1);
        self.entries.insert(key, waker.clone());
        key
    }

    /// Removes an entry (if not woken yet) and returns its waker: drop it after releasing the
    /// lock, since dropping a waker may drop a task and its registrations, which take the lock.
    #[must_use = "drop the waker outside the lock"]
    pub(crate) fn remove(&mut self, key: &Key<K>) -> Option<Waker> {
        self.entries.remove(key)
    }

    pub(crate) fn contains(&self, key: &Key<K>) -> bool {
        self.entries.contains_key(key)
    }

    pub(crate) fn next(&self) -> Option<K> {
        self.entries.keys().next().map(|k| k.0)
    }

    /// Removes and returns the wakers due at `now`, earliest first (wake them outside the lock).
    pub(crate) fn take_due(&mut self, now: K) -> Vec<Waker> {
        let mut due = Vec::new();
        while let Some(entry) = self.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Wakes each waker; one that panics does not stop the others (nor the caller's thread).
pub(crate) fn wake_all(wakers: Vec<Waker>) {
    for waker in wakers {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
    }
}

/// Owns a [`WakeQueue`] behind a lock: the timer, a frozen manual clock.
pub(crate) trait LockedQueue<K> {
    /// Runs `f` with the queue locked; `f` must not wake or drop wakers.
    fn with_queue<R>(&self, f: impl FnOnce(&mut WakeQueue<K>) -> R) -> R;
}

/// One registration in a queue owned by `Q`: dropping it removes the entry.
pub(crate) struct QueueHandle<Q: LockedQueue<K>, K: Ord + Copy> {
    queue: Q,
    /// `None`: nothing queued (woken at once, or detached).
    key: Option<Key<K>>,
}

impl<Q: LockedQueue<K>, K: Ord + Copy> QueueHandle<Q, K> {
    pub(crate) fn new(queue: Q, key: Option<Key<K>>) -> Self {
        QueueHandle { queue, key }
    }

    /// Whether the entry has been woken (is no longer queued).
    pub(crate) fn is_fired(&self) -> bool {
        self.key
            .map_or(true, |key| !self.queue.with_queue(|q| q.contains(&key)))
    }

    /// Leaves the entry queued: it wakes its waker at its deadline.
    pub(crate) fn detach(mut self) {
        self.key = None;
    }
}

impl<Q: LockedQueue<K>, K: Ord + Copy> Drop for QueueHandle<Q, K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let waker = self.queue.with_queue(|q| q.remove(&key));
            drop(waker); // outside the lock
        }
    }
}

/// A [`WakeQueue`] behind its own mutex, shared by the clones of a frozen manual clock.
pub(crate) struct SharedQueue<K>(Mutex<WakeQueue<K>>);

impl<K: Ord + Copy> SharedQueue<K> {
    pub(crate) const fn new() -> Self {
        SharedQueue(Mutex::new(WakeQueue::new()))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, WakeQueue<K>> {
        crate::sync::ignore_poison(self.0.lock())
    }
}

impl<K: Ord + Copy> LockedQueue<K> for Arc<SharedQueue<K>> {
    fn with_queue<R>(&self, f: impl FnOnce(&mut WakeQueue<K>) -> R) -> R {
        f(&mut self.lock())
    }
}
