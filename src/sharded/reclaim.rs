//! Reclaiming idle shards' leases: a decision the central word refuses spends from another
//! shard's lease instead, so tokens leased to a shard whose threads went idle serve the shards
//! still asking.
//!
//! * **When.** Only on a refusal of the central word, and only while some lease may still hold
//!   units: before `leased_until`, the reading from which every lease taken so far has lapsed
//!   (raised by each new lease, on its own cache line, written once per lease). After it, or
//!   with no lease ever taken, a refusal reads that one line more and nothing else.
//! * **How much.** At most [`PROBES`] other shards per refusal, from a cursor kept on the
//!   refused shard's line that moves on past the shards it found holding nothing, so every other
//!   shard is probed within `⌈(shards − 1) / PROBES⌉` refusals of a shard. A probe reads the
//!   shard's line, and writes it only to spend. A round that found nothing and reached the last
//!   other shard lets the refusal record `dry_until` as usual: until then (one token period)
//!   the shard's one-token refusals are answered from its own line and probe nothing, so a
//!   shard probes at most `⌈(shards − 1) / PROBES⌉` rounds per token period.
//! * **Why it is sound.** A probe is [`Lease::spend`], the debit any thread of that shard makes:
//!   the same CAS on the same frontier, all or nothing. The lease protocol never assumed that
//!   its spenders live on its shard, so the window bound is untouched; a lease being replaced
//!   (`LOCKED`) is skipped.

use super::lease::Lease;
use super::Earned;
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// The most other shards one refusal probes.
pub(super) const PROBES: usize = 4;

/// What a round of probes found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Probed {
    /// A lease paid the cost.
    Paid,
    /// None of the probed leases could; `wrapped`: this round reached the last of the other
    /// shards in the cursor's order (and the cursor starts over).
    Unpaid { wrapped: bool },
}

/// Spends `cost_units` at a reading with `earned` units from the lease of one of at most
/// [`PROBES`] shards other than `home`, starting at `home`'s cursor. Only for more than one
/// shard.
#[inline(never)]
pub(super) fn reclaim(
    shards: &[CachePadded<Lease>],
    home: usize,
    e: Earned,
    burst_units: u64,
    cost_units: u64,
) -> Probed {
    let n = shards.len();
    debug_assert!(n > 1);
    let others = n - 1;
    let cursor = shards[home].probe();
    let start = (cursor % others as u64) as usize;
    for i in 0..PROBES.min(others) {
        let offset = (start + i) % others;
        let victim = &shards[(home + 1 + offset) % n];
        if victim.units(e) >= cost_units && victim.spend(e, burst_units, cost_units).is_ok() {
            // Start here next time: what paid once may pay again.
            shards[home].set_probe(offset as u64);
            return Probed::Paid;
        }
    }
    let end = start + PROBES.min(others);
    shards[home].set_probe(if end >= others { 0 } else { end as u64 });
    Probed::Unpaid {
        wrapped: end >= others,
    }
}

/// Whether a refusal at `now` may find units in some lease: before the reading from which
/// every lease taken so far has lapsed.
#[inline(always)]
pub(super) fn leases_may_hold(leased_until: &AtomicU64, now: u64) -> bool {
    now < leased_until.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::super::ShardedBucket;
    use super::PROBES;
    use crate::{Clock, Denied, ManualClock, Quota};
    use core::time::Duration;

    /// A full bucket of 1,000 at 1,000/s on `shards` shards and its clock.
    fn bucket(shards: usize) -> (ShardedBucket<ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let quota = Quota::per_second(1_000).unwrap();
        (
            ShardedBucket::with_clock(quota, shards, clock.clone()),
            clock,
        )
    }

    /// Admissions of one token on `shard` at the clock's reading until `refusals` refusals in a
    /// row.
    fn drain_on(bucket: &ShardedBucket<ManualClock>, shard: usize, refusals: usize) -> u64 {
        let (mut got, mut refused) = (0, 0);
        while refused < refusals {
            let now = bucket.read_mostly.clock.now();
            match bucket.decide_on(shard, now, 1) {
                Ok(()) => {
                    got += 1;
                    refused = 0;
                }
                Err(_) => refused += 1,
            }
        }
        got
    }

    /// Frozen clock, 8 shards. Shard 3 takes 1 and a lease of ⌊999 / 64⌋ = 15 and goes idle;
    /// shard 0 drains the rest: the central word's 984, then, refused by the word, the 15 of
    /// shard 3's lease, found within ⌈7 / PROBES⌉ refusals. Exactly the burst, nothing lost.
    #[test]
    fn a_refused_shard_spends_an_idle_shards_lease() {
        let (bucket, clock) = bucket(8);
        let now = clock.now();
        assert_eq!(bucket.decide_on(3, now, 1), Ok(()));
        let leased = bucket.shards[3].units(bucket.earned(now)) / bucket.read_mostly.quota.scale();
        assert_eq!(leased, 15);
        let got = drain_on(&bucket, 0, 7usize.div_ceil(PROBES) + 1);
        assert_eq!(1 + got, 1_000);
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.stranded_tokens(), 0.0);
        // Refused now, with the central word's wait: the next token in 1 ms.
        assert_eq!(
            bucket.decide_on(5, now, 1),
            Err(Denied::RetryAfter(Duration::from_millis(1)))
        );
    }

    /// Each of 7 idle shards holds a lease; one shard alone drains them all, probing at most
    /// `PROBES` shards per refusal.
    #[test]
    fn one_shard_reclaims_the_leases_of_every_other() {
        let (bucket, clock) = bucket(8);
        let now = clock.now();
        for shard in 1..8 {
            assert_eq!(bucket.decide_on(shard, now, 1), Ok(()));
        }
        let got = drain_on(&bucket, 0, 7usize.div_ceil(PROBES) + 1);
        assert_eq!(7 + got, 1_000);
        assert_eq!(bucket.available(), 0);
    }

    /// A lease whose units the clock passed holds nothing to reclaim, and once every lease
    /// has lapsed a refusal probes nothing (`leased_until` is behind the reading): the word
    /// alone decides, as a `Bucket` would.
    #[test]
    fn lapsed_leases_are_not_reclaimed_and_then_not_probed() {
        let (bucket, clock) = bucket(2);
        assert_eq!(bucket.decide_on(1, clock.now(), 1), Ok(()));
        // Shard 0 drains the word (and shard 1's lease of 62).
        assert_eq!(drain_on(&bucket, 0, 2), 999);
        let until = bucket.leased_until.load(crate::sync::Ordering::Relaxed);
        assert!(until > clock.now());
        // A second later: 1,000 tokens earned, the word full again, every lease lapsed.
        clock.advance(Duration::from_secs(1));
        assert!(clock.now() >= until);
        assert!(!super::leases_may_hold(&bucket.leased_until, clock.now()));
        assert_eq!(bucket.available(), 1_000);
    }

    /// A reclaim takes the cost whole from one lease or nothing: a cost above what any one
    /// lease holds is refused while the leases keep their tokens.
    #[test]
    fn a_reclaim_is_all_or_nothing() {
        let (bucket, clock) = bucket(2);
        let now = clock.now();
        assert_eq!(bucket.decide_on(1, now, 1), Ok(())); // a lease of 62 on shard 1
        assert_eq!(bucket.decide_on(0, now, 937), Ok(())); // the word's 937, no lease
        assert!(bucket.decide_on(0, now, 63).is_err());
        assert_eq!(bucket.available(), 62);
        assert_eq!(bucket.decide_on(0, now, 62), Ok(()));
        assert_eq!(bucket.available(), 0);
    }
}
