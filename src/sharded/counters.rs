//! What the sharded bucket writes to shared cache lines, counted per thread for the harness
//! (feature `counters`, off by default: every hook below compiles to nothing without it).
//!
//! A *shared line* is one that more than one core writes: the central word's line (its CAS
//! attempts, failed or not, the hand-out count and scan records beside it), the read-mostly
//! line (`dry_all`), and another shard's lease (emptied by a scan, or handed a near lease by a
//! refill). A shard's own lease is not one: threads are homed by CPU, so only its own core
//! writes it but for those two.

#[cfg(feature = "counters")]
mod on {
    use core::cell::Cell;

    std::thread_local! {
        static COUNTS: Cell<super::Counts> = const { Cell::new(super::Counts::ZERO) };
        /// Shared-line writes of the decision under way.
        static PENDING: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn central_cas() {
        COUNTS.with(|c| {
            let mut n = c.get();
            n.central_cas += 1;
            c.set(n);
        });
        shared_write();
    }

    pub(crate) fn shared_write() {
        PENDING.with(|p| p.set(p.get() + 1));
    }

    pub(crate) fn settle(admitted: bool) {
        let pending = PENDING.with(|p| p.replace(0));
        COUNTS.with(|c| {
            let mut n = c.get();
            if admitted {
                n.admitting_writes += pending;
            } else {
                n.refusing_writes += pending;
            }
            c.set(n);
        });
    }

    pub(crate) fn advance() {
        COUNTS.with(|c| {
            let mut n = c.get();
            n.advances += 1;
            c.set(n);
        });
    }

    pub(crate) fn take() -> super::Counts {
        PENDING.with(|p| p.set(0));
        COUNTS.with(|c| c.replace(super::Counts::ZERO))
    }
}

/// The calling thread's counts since its last [`take`], for every
/// [`ShardedBucket`](crate::ShardedBucket) it decided on. Counted on the paths that reach the
/// central word only (a spend from the lease writes no shared line), so the caller counts its
/// decisions.
#[cfg(feature = "counters")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Compare-and-swap attempts on the central word, failed ones included.
    pub central_cas: u64,
    /// Writes to shared lines by decisions that admitted.
    pub admitting_writes: u64,
    /// Writes to shared lines by decisions that refused.
    pub refusing_writes: u64,
    /// Near leases taken by refusals (advances): each writes the central line (the hand-out
    /// count and the CAS), counted in `refusing_writes` too.
    pub advances: u64,
}

#[cfg(feature = "counters")]
impl Counts {
    const ZERO: Counts = Counts {
        central_cas: 0,
        admitting_writes: 0,
        refusing_writes: 0,
        advances: 0,
    };
}

/// Returns the calling thread's counts and starts them again from zero.
#[cfg(feature = "counters")]
pub fn take() -> Counts {
    on::take()
}

/// A CAS attempt on the central word (also a shared-line write).
#[inline(always)]
pub(super) fn central_cas() {
    #[cfg(feature = "counters")]
    on::central_cas();
}

/// An advance taken (a near lease with a refusal).
#[inline(always)]
pub(super) fn advance() {
    #[cfg(feature = "counters")]
    on::advance();
}

/// A write to a shared line other than the central word's CAS.
#[inline(always)]
pub(super) fn shared_write() {
    #[cfg(feature = "counters")]
    on::shared_write();
}

/// The end of a decision that reached the central word: the shared-line writes since the last
/// are the admission's or the refusal's.
#[inline(always)]
pub(super) fn settle(admitted: bool) {
    #[cfg(feature = "counters")]
    on::settle(admitted);
    #[cfg(not(feature = "counters"))]
    let _ = admitted;
}
