//! loom models of `MultiBucket` with one and three quotas, whose stores have padding slots (one
//! quota: the pair word's second slot; three: the fourth word) that must stay copies of the last
//! quota's slot. The decisions judge them too: a padding slot stricter than its quota (a
//! cancellation that gave the quota its tokens back but not the padding) refuses what the quota
//! admits, and one more lenient (a drain that raised only the quota) goes on with a state of its
//! own.
//!
//! * A reservation racing the cancellation of an earlier one and a drain: the outcome (the new
//!   reservation's delay, every quota's state, what the policy then holds) is one that a serial
//!   order of the three explains, each quota decided by `gcra`'s pure functions.
//! * Two decisions racing for the last tokens of a nearly empty bucket: never more admitted
//!   than a serial order admits.
//!
//! In every interleaving the padding slots equal the last quota's, read by each thread right
//! after its own step and once all have returned (`MultiBucket::slots`, only under
//! `--cfg tollgate_loom`): checked only at the end, a later reservation or drain would often
//! bring a padding slot left behind level again.
//!
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p tollgate-loom-tests --release --target-dir target/loom --test multi_padding`
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tollgate::{gcra, Limits, MultiBucket, Quota};
use tollgate_loom_tests::{at, PerThread};

const MS: u64 = 1_000_000;

fn q(tokens: u64, per_ms: u64, burst: u64) -> Quota {
    Quota::new(tokens, Duration::from_millis(per_ms), burst).unwrap()
}

/// One token per second, burst 2: the reservation leaves one token, which a drain takes.
fn one_quota() -> Vec<Quota> {
    vec![q(1, 1000, 2)]
}

/// The first quota has a burst of 1: the earlier reservation empties it, so a drain after it
/// raises only the other two (the last with the padding), and a cancellation after the drain
/// gives the first quota alone its token back (writing the word, the padding unchanged). A
/// cancellation before the drain gives every quota its token back (the padding with the last).
/// The last has a burst of 2, so a reservation after a drain that left the padding behind does
/// not bring it level again (it is debited as of 1 s, when the drained quota is still in debt).
fn three_quotas() -> Vec<Quota> {
    vec![q(1, 1000, 1), q(1, 1000, 3), q(1, 1000, 2)]
}

/// The reference: each quota's state, decided by `gcra` as `MultiBucket` decides it.
#[derive(Clone, Debug)]
struct Reference {
    quotas: Vec<Quota>,
    states: Vec<u64>,
}

/// A reservation the reference made: the states before and after it, its due instant.
#[derive(Clone, Debug)]
struct Ticket {
    before: Vec<u64>,
    after: Vec<u64>,
    due: u64,
    cost: u64,
}

impl Reference {
    fn new(quotas: &[Quota]) -> Reference {
        let states = vec![gcra::FULL; quotas.len()];
        let quotas = quotas.to_vec();
        Reference { quotas, states }
    }

    /// Due when the last quota holds `cost`; every quota debited as of then.
    fn reserve(&mut self, now: u64, cost: u64) -> Ticket {
        let pairs = || self.states.iter().zip(&self.quotas);
        let due = pairs()
            .map(|(&s, q)| gcra::reserve(s, now, q, cost).unwrap().1)
            .fold(now, u64::max);
        let before = self.states.clone();
        let after: Vec<u64> = pairs()
            .map(|(&s, q)| gcra::reserve(s, due, q, cost).unwrap().0)
            .collect();
        self.states.clone_from(&after);
        Ticket {
            before,
            after,
            due,
            cost,
        }
    }

    /// `gcra::cancel`'s rule on each quota; a quota that gets its tokens back gets its state
    /// from before the reservation.
    fn cancel(&mut self, now: u64, t: &Ticket) {
        for (i, q) in self.quotas.iter().enumerate() {
            if gcra::cancel(self.states[i], now, q, t.after[i], t.due, t.cost).is_some() {
                self.states[i] = t.before[i];
            }
        }
    }

    /// Every quota the stricter of its state and an empty one.
    fn drain(&mut self, now: u64) {
        for (s, q) in self.states.iter_mut().zip(&self.quotas) {
            *s = (*s).max(gcra::with_tokens(now, q, 0).unwrap());
        }
    }

    /// All or nothing: admitted iff every quota holds `cost` at `now`.
    fn try_acquire(&mut self, now: u64, cost: u64) -> bool {
        let next: Option<Vec<u64>> = self
            .states
            .iter()
            .zip(&self.quotas)
            .map(|(&s, q)| gcra::try_acquire(s, now, q, cost).ok().flatten())
            .collect();
        next.map(|n| self.states = n).is_some()
    }

    /// Whole tokens every quota holds at `now`.
    fn available(&self, now: u64) -> u64 {
        let pairs = self.states.iter().zip(&self.quotas);
        pairs
            .map(|(&s, q)| gcra::available(s, now, q))
            .min()
            .unwrap()
    }
}

/// Every slot, read in one atomic step, if a padding slot differs from the last quota's (`n`
/// quotas). Returned, not asserted: a panic on one model thread while others run aborts loom.
fn padding_differs(policy: &MultiBucket<PerThread>, n: usize) -> Option<[u64; 4]> {
    let slots = policy.slots();
    slots[n..]
        .iter()
        .any(|&s| s != slots[n - 1])
        .then_some(slots)
}

/// Every quota's slot once the model's threads have returned, the padding checked, and the
/// padding checks the threads made on the way (`seen`).
fn checked_slots(policy: &MultiBucket<PerThread>, n: usize, seen: &[Option<[u64; 4]>]) -> Vec<u64> {
    let last = padding_differs(policy, n);
    let bad: Vec<_> = seen.iter().chain([&last]).flatten().collect();
    assert!(
        bad.is_empty(),
        "a padding slot is not a copy of quota {}: {bad:?}",
        n - 1
    );
    policy.slots()[..n].to_vec()
}

/// What the policy holds at `now` (the calling thread's reading is left at `now`): the least
/// any slot holds, the padding included, so a padding slot left behind would show here too.
fn available_at(policy: &MultiBucket<PerThread>, now: u64) -> u64 {
    at(now);
    policy.available()
}

/// The three steps after the earlier reservation, all at reading 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// A reservation of 1, kept.
    Reserve,
    /// The earlier reservation (of 1, at 0) cancelled.
    Cancel,
    /// A drain.
    Drain,
}
use Step::{Cancel, Drain, Reserve};

/// The new reservation's delay (ns), every quota's state after the three steps, and what the
/// policy holds at 0 and 2 s.
type Outcome = (u64, Vec<u64>, u64, u64);

/// The outcomes of every serial order of the `racing` steps, each followed by the `then` steps
/// in order.
fn serial_outcomes(quotas: &[Quota], racing: &[Step], then: &[Step]) -> Vec<Outcome> {
    let mut start = Reference::new(quotas);
    let earlier = start.reserve(0, 1);
    let mut out = Vec::new();
    for order in permutations(racing) {
        let mut r = start.clone();
        let mut delay = 0;
        for &step in order.iter().chain(then) {
            match step {
                Reserve => delay = r.reserve(0, 1).due,
                Cancel => r.cancel(0, &earlier),
                Drain => r.drain(0),
            }
        }
        let held = (r.available(0), r.available(2000 * MS));
        out.push((delay, r.states.clone(), held.0, held.1));
    }
    out.sort();
    out.dedup();
    out
}

fn permutations(steps: &[Step]) -> Vec<Vec<Step>> {
    if steps.len() <= 1 {
        return vec![steps.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..steps.len() {
        let mut rest = steps.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

/// `step` on `policy` of `n` quotas at reading 0 (not the cancellation: the main thread holds
/// the earlier reservation), then the padding checked (whatever the other threads do meanwhile,
/// every consistent read has the padding equal to the last quota); a reservation's delay in ns.
fn run(policy: &MultiBucket<PerThread>, n: usize, step: Step) -> (Option<u64>, Option<[u64; 4]>) {
    at(0);
    let delay = match step {
        // Kept: dropping a reservation keeps its tokens taken.
        Reserve => Some(policy.reserve(1).unwrap().delay().as_nanos() as u64),
        Drain => {
            policy.drain();
            None
        }
        Cancel => unreachable!("the main thread cancels"),
    };
    (delay, padding_differs(policy, n))
}

/// After an earlier reservation of 1 at 0, the `racing` steps race (the reservation and the
/// drain each on a thread of its own, the cancellation on the main thread, which holds the
/// earlier reservation), then the `then` steps run on the main thread; the outcome is a serial
/// order's, and the padding slots stay copies of the last quota's. At most `preemptions`
/// preemptions, fewer if `LOOM_MAX_PREEMPTIONS` says so.
fn reserve_cancel_drain(quotas: Vec<Quota>, racing: &[Step], then: &[Step], preemptions: usize) {
    let allowed = serial_outcomes(&quotas, racing, then);
    let n = quotas.len();
    let (racing, then) = (racing.to_vec(), then.to_vec());
    let mut builder = loom::model::Builder::new();
    let bound = builder
        .preemption_bound
        .map_or(preemptions, |p| p.min(preemptions));
    builder.preemption_bound = Some(bound);
    builder.check(move || {
        let limits = Limits::new(quotas.iter().copied()).unwrap();
        let policy = Arc::new(MultiBucket::with_clock(limits, PerThread));
        at(0);
        let mut earlier = Some(policy.reserve(1).unwrap());
        let threads: Vec<_> = racing
            .iter()
            .filter(|&&s| s != Cancel)
            .map(|&step| {
                let p = policy.clone();
                thread::spawn(move || run(&p, n, step))
            })
            .collect();
        let mut seen = Vec::new();
        if racing.contains(&Cancel) {
            earlier.take().unwrap().cancel();
            seen.push(padding_differs(&policy, n));
        }
        let mut delay = None;
        for t in threads {
            let (d, padding) = t.join().unwrap();
            delay = delay.or(d);
            seen.push(padding);
        }
        for &step in &then {
            match step {
                Cancel => {
                    earlier.take().unwrap().cancel();
                    seen.push(padding_differs(&policy, n));
                }
                _ => {
                    let (d, padding) = run(&policy, n, step);
                    delay = delay.or(d);
                    seen.push(padding);
                }
            }
        }
        let states = checked_slots(&policy, n, &seen);
        let held = (available_at(&policy, 0), available_at(&policy, 2000 * MS));
        let outcome = (delay.unwrap(), states, held.0, held.1);
        assert!(
            allowed.contains(&outcome),
            "{n} quotas, {racing:?} racing, then {then:?}: {outcome:?} is not explained by any \
             serial order; allowed: {allowed:?}"
        );
    });
}

/// The three race, at `LOOM_MAX_PREEMPTIONS` (the pair word: a small model).
#[test]
fn one_quota_reserve_races_a_cancel_and_a_drain() {
    reserve_cancel_drain(one_quota(), &[Reserve, Cancel, Drain], &[], usize::MAX);
}

/// The three race on the sequence lock at one preemption: at two, this model ran past loom's
/// 1000 branches per execution after minutes (loom names spin loops as the usual cause: the
/// sequence lock's readers wait while a writer holds `seq` odd). Every pair of the three races
/// at `LOOM_MAX_PREEMPTIONS` in the models below.
#[test]
fn three_quotas_reserve_races_a_cancel_and_a_drain() {
    reserve_cancel_drain(three_quotas(), &[Reserve, Cancel, Drain], &[], 1);
}

/// The drain after the race raises what a cancellation before the reservation gave back (the
/// padding with the last).
#[test]
fn three_quotas_reserve_races_a_cancel_then_a_drain() {
    reserve_cancel_drain(three_quotas(), &[Reserve, Cancel], &[Drain], usize::MAX);
}

/// A cancellation after the drain gives the first quota alone its token back; one before it,
/// every quota (the padding with the last).
#[test]
fn three_quotas_cancel_races_a_drain_then_a_reserve() {
    reserve_cancel_drain(three_quotas(), &[Cancel, Drain], &[Reserve], usize::MAX);
}

/// The cancellation after both gives nothing back (a reservation came since).
#[test]
fn three_quotas_reserve_races_a_drain_then_a_cancel() {
    reserve_cancel_drain(three_quotas(), &[Reserve, Drain], &[Cancel], usize::MAX);
}

/// Two decisions of `costs` at reading 0 race on a bucket whose quotas were first debited by
/// `taken` at 0; the verdicts and the final states are a serial order's, and the padding slots
/// stay copies of the last quota's.
fn two_decisions_race(quotas: Vec<Quota>, taken: u64, costs: [u64; 2]) {
    let n = quotas.len();
    let mut allowed = Vec::new();
    for first in 0..2 {
        let mut r = Reference::new(&quotas);
        assert!(r.try_acquire(0, taken));
        let mut verdicts = [false; 2];
        for i in [first, 1 - first] {
            verdicts[i] = r.try_acquire(0, costs[i]);
        }
        allowed.push((verdicts, r.states.clone(), r.available(1000 * MS)));
    }
    loom::model(move || {
        let limits = Limits::new(quotas.iter().copied()).unwrap();
        let policy = Arc::new(MultiBucket::with_clock(limits, PerThread));
        at(0);
        policy.try_acquire(taken).unwrap();
        let handles = costs.map(|cost| {
            let p = policy.clone();
            thread::spawn(move || {
                at(0);
                let admitted = p.try_acquire(cost).is_ok();
                (admitted, padding_differs(&p, n))
            })
        });
        let joined = handles.map(|h| h.join().unwrap());
        let verdicts = joined.map(|j| j.0);
        let states = checked_slots(&policy, n, &joined.map(|j| j.1));
        let outcome = (verdicts, states, available_at(&policy, 1000 * MS));
        assert!(
            allowed.contains(&outcome),
            "{n} quotas, costs {costs:?}: {outcome:?} is not explained by any serial order; \
             allowed: {allowed:?}"
        );
    });
}

/// Three quotas, the last (repeated by the padding) and the second holding one token each:
/// exactly one of two 1-token decisions is admitted.
#[test]
fn three_quotas_two_decisions_race_for_the_last_token() {
    two_decisions_race(vec![q(1, 1000, 3), q(1, 1000, 2), q(1, 1000, 2)], 1, [1, 1]);
}

/// Three quotas, the last holding two tokens: a decision of 1 and one of 2, never both.
#[test]
fn three_quotas_decisions_of_one_and_two_race_for_the_last_two_tokens() {
    two_decisions_race(vec![q(1, 1000, 4), q(1, 1000, 5), q(1, 1000, 3)], 1, [1, 2]);
}

/// One quota (the pair word's second slot its padding), holding one token.
#[test]
fn one_quota_two_decisions_race_for_the_last_token() {
    two_decisions_race(vec![q(1, 1000, 2)], 1, [1, 1]);
}
