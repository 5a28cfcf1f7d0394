//! Reservations against references: a `Bucket` (one quota) or a `MultiBucket` (1 to 4 quotas)
//! on a manual clock, driven by reserve (costs 0, 1, a burst, past a burst, `u64::MAX`), cancel
//! or drop of any held reservation in any order (at the current reading, or just before, at or
//! after its due instant, or before the reading it was made at), try_acquire and its snapshot
//! forms, `try_acquire_for`, available and drain, with readings that advance, step back or
//! jump to the edges (the horizon, `u64::MAX`). The references run in lockstep, one per quota: `gcra`'s pure
//! decision on a state of its own and, for exact quotas, the exact rational model of the test
//! kit (`testkit/src/model.rs`), until a drain (which the model lacks) or a reading past the
//! horizon (where the bucket reads its clock as stopped and the model does not).
//!
//! Checked, as the docs promise (`Bucket::reserve`, `Reservation::cancel`,
//! `MultiBucket::reserve`, `MultiReservation::cancel`, `gcra::reserve`, `gcra::cancel`,
//! docs/guarantees.md):
//! * reserve: `ExceedsBurst` iff the cost exceeds the smallest burst; else due at the largest
//!   per-quota due instant (the model's, to the nanosecond, for exact quotas), `RetryAfter(MAX)`
//!   only for a backlog due past the horizon; a `Bucket` debits as of the reading, a
//!   `MultiBucket` every quota as of the due instant; cost 0 takes nothing and is due at once;
//! * cancel: each quota gets the state from before the reservation back iff the cost is not 0,
//!   it is not yet due at the canceller's reading and the quota's state is still the one the
//!   reservation left; otherwise nothing (checked through every quota's snapshot and every
//!   later decision); `gcra::cancel` never gives back more than the reservation took;
//! * `try_acquire_for` (timeouts zero, `Duration::MAX` and in between): a reservation due
//!   within the timeout, the manual clock slept to its due instant, else `RetryAfter(wait)`
//!   and nothing taken;
//! * try_acquire, `try_acquire_or_snapshot`, `try_acquire_snapshot`, `decide_snapshots`,
//!   available: verdicts, exact waits and snapshots as the references', the models' for exact
//!   quotas;
//! * at the end, every quota's admissions within `burst_i + rate_i·(Δ + 1 ns)` (exact
//!   rationals; one unit of slack for inexact quotas; the 1 ns because a due instant is the
//!   first whole nanosecond at which the tokens are there): `try_acquire` at its reading;
//!   `try_acquire_for`, and a reservation that was dropped, held to the end or whose cancel
//!   gave nothing back, at its due instant; a cancelled one not at all; readings past the
//!   horizon count at the horizon.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tollgate::{
    gcra, Bucket, Clock, Denied, Limiter, Limits, ManualClock, MultiBucket, MultiReservation,
    Quota, Reservation, Snapshot, Snapshots, HORIZON,
};

#[path = "common/bytes.rs"]
mod bytes;
#[path = "common/multi_quota.rs"]
mod multi_quota;
#[path = "common/units_window.rs"]
mod units_window;
use tollgate_testkit::model::Model;

use bytes::Bytes;
use multi_quota::{model_of, quota};

/// The bucket's horizon in nanoseconds: past it, readings count as the horizon.
const H: u64 = HORIZON.as_secs() * 1_000_000_000;

/// The limiter under test.
enum Subject {
    One(Bucket<ManualClock>),
    Many(Box<MultiBucket<ManualClock>>),
}

/// A reservation held by the target.
enum Ticket<'a> {
    One(Reservation<'a, ManualClock>),
    Many(MultiReservation<'a, ManualClock>),
}

impl Subject {
    /// The reservation and its due instant (the clock reads `now`).
    fn reserve(&self, now: u64, cost: u64) -> Result<(Ticket<'_>, u64), Denied> {
        match self {
            Subject::One(b) => b.reserve(cost).map(|r| {
                let due = r.delay_from(0).as_nanos() as u64;
                assert_eq!(r.delay(), Duration::from_nanos(due.saturating_sub(now)));
                (Ticket::One(r), due)
            }),
            // `delay` is `due − now`, saturating: a due instant before `now` reads as `now`,
            // which the references never expect for a reservation made at `now`.
            Subject::Many(m) => m.reserve(cost).map(|r| {
                let due = now + r.delay().as_nanos() as u64;
                (Ticket::Many(r), due)
            }),
        }
    }

    fn snapshots(&self) -> Vec<Snapshot> {
        match self {
            Subject::One(b) => b.decide_snapshots(&(), 0).1.as_slice().to_vec(),
            Subject::Many(m) => m.decide_snapshots(&(), 0).1.as_slice().to_vec(),
        }
    }
}

impl Ticket<'_> {
    fn cancel(self) {
        match self {
            Ticket::One(r) => r.cancel(),
            Ticket::Many(r) => r.cancel(),
        }
    }
}

/// An operation named in a failure message, formatted only then.
struct Label<'a>(&'a [Quota], &'static str, u64, u64);

impl std::fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Label(quotas, op, cost, t) = self;
        write!(f, "{quotas:?}: {op} {cost} at {t}")
    }
}

/// A held reservation with what the references remember of it.
struct Held<'a> {
    ticket: Ticket<'a>,
    cost: u64,
    /// The reading it was made at.
    at: u64,
    due: u64,
    /// Each quota's reference state before and after it.
    before: Vec<u64>,
    after: Vec<u64>,
    /// Each exact quota's model state (`z · per`) before and after it, while the model runs.
    model: Vec<Option<(i128, i128)>>,
}

/// The reference: one `gcra` state and (for exact quotas, until dropped) one model per quota.
struct Reference {
    quotas: Vec<Quota>,
    states: Vec<u64>,
    models: Vec<Option<Model>>,
    /// `MultiBucket`: every quota debited as of the due instant; `Bucket`: as of the reading.
    as_of_due: bool,
}

impl Reference {
    fn smallest_burst(&self) -> u64 {
        self.quotas.iter().map(Quota::burst).min().unwrap()
    }

    /// `try_acquire(cost)` at `now`: the verdict (the longest wait among the refusing quotas),
    /// applied if admitted. Each exact quota's model must decide as `gcra` does.
    fn try_acquire(&mut self, now: u64, cost: u64) -> Result<(), Denied> {
        if cost == 0 {
            return Ok(());
        }
        if cost > self.smallest_burst() {
            return Err(Denied::ExceedsBurst);
        }
        let mut next = self.states.clone();
        let mut longest: Option<Duration> = None;
        for (i, q) in self.quotas.iter().enumerate() {
            let got = gcra::try_acquire(self.states[i], now, q, cost);
            if let Some(m) = &self.models[i] {
                let by_model = m.clone().try_acquire(now, cost);
                assert_eq!(
                    got.map(drop),
                    by_model,
                    "quota {i} {q:?}: cost {cost} at {now}"
                );
            }
            match got {
                Ok(after) => next[i] = after.unwrap(),
                Err(Denied::RetryAfter(d)) => longest = Some(longest.map_or(d, |l| l.max(d))),
                Err(e) => panic!("{e:?} from quota {i} for cost {cost} <= its burst"),
            }
        }
        if let Some(d) = longest {
            return Err(Denied::RetryAfter(d));
        }
        self.states = next;
        for m in self.models.iter_mut().flatten() {
            m.try_acquire(now, cost).unwrap();
        }
        Ok(())
    }

    /// `reserve(cost)` at `now` if due within `limit` ns (`try_acquire_for`'s timeout):
    /// `(states after, due)`, applied if granted. Each exact quota's model must be due when
    /// `gcra` says that quota is (past the horizon iff refused), and is debited alike.
    fn reserve(&mut self, now: u64, cost: u64, limit: u64) -> Result<(Vec<u64>, u64), Denied> {
        if cost > self.smallest_burst() {
            return Err(Denied::ExceedsBurst);
        }
        if cost == 0 {
            return Ok((self.states.clone(), now));
        }
        let mut due: Result<u64, Denied> = Ok(now);
        for (i, (s, q)) in self.states.iter().zip(&self.quotas).enumerate() {
            let own = gcra::reserve(*s, now, q, cost).map(|r| r.1);
            if let Some(m) = &self.models[i] {
                let by_model = m.clone().reserve(now, cost).unwrap().1;
                let by_model = (by_model <= H)
                    .then_some(by_model)
                    .ok_or(Denied::RetryAfter(Duration::MAX));
                assert_eq!(own, by_model, "quota {i} {q:?}: reserve {cost} at {now}");
            }
            due = due.and_then(|d| Ok(d.max(own?)));
        }
        let due = due?;
        if due - now > limit {
            return Err(Denied::RetryAfter(Duration::from_nanos(due - now)));
        }
        let debit_at = if self.as_of_due { due } else { now };
        let mut next = Vec::new();
        for (s, q) in self.states.iter().zip(&self.quotas) {
            next.push(gcra::reserve(*s, debit_at, q, cost)?.0);
        }
        self.states.clone_from(&next);
        for m in self.models.iter_mut().flatten() {
            m.reserve(debit_at, cost).unwrap();
        }
        Ok((next, due))
    }

    /// The cancel rule, per quota: `before` back iff `cost > 0`, not yet due at `now` and the
    /// state still `after`. Returns which quotas got their tokens back.
    fn cancel(&mut self, now: u64, h: &Held<'_>) -> Vec<bool> {
        let live = h.cost > 0 && h.due >= now;
        let mut back = Vec::new();
        for i in 0..self.quotas.len() {
            let untouched = self.states[i] == h.after[i];
            if let (Some(m), Some((before, after))) = (&mut self.models[i], h.model[i]) {
                // Exact quotas: the model's state is `after` exactly when the reference's is.
                assert_eq!(m.state() == after, untouched, "quota {i}: cancel at {now}");
                m.cancel(now, before, after, h.due, h.cost);
            }
            if live && untouched {
                self.states[i] = h.before[i];
            }
            back.push(live && untouched);
        }
        back
    }

    fn snapshots(&self, now: u64) -> Vec<Snapshot> {
        let pairs = self.states.iter().zip(&self.quotas);
        pairs.map(|(s, q)| gcra::snapshot(*s, now, q)).collect()
    }

    fn drop_models(&mut self) {
        self.models.iter_mut().for_each(|m| *m = None);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u64();
    let multi = flags & 1 == 1;
    let mut quotas = Vec::new();
    for _ in 0..if multi { (flags >> 1) % 4 + 1 } else { 1 } {
        let Some(q) = quota(&mut b, quotas.first().copied(), true) else {
            return;
        };
        quotas.push(q);
    }
    let clock = ManualClock::new();
    let subject = if multi {
        let limits = Limits::new(quotas.iter().copied()).unwrap();
        Subject::Many(Box::new(MultiBucket::with_clock(limits, clock.clone())))
    } else {
        Subject::One(Bucket::with_clock(quotas[0], clock.clone()))
    };
    let mut r = Reference {
        states: vec![gcra::FULL; quotas.len()],
        models: quotas
            .iter()
            .map(|q| q.is_exact().then(|| model_of(q)))
            .collect(),
        quotas: quotas.clone(),
        as_of_due: multi,
    };
    let steps: Vec<u64> = quotas
        .iter()
        .map(|q| q.refill_time(1).as_nanos().clamp(1, 1 << 40) as u64)
        .collect();
    let mut t: u64 = (flags >> 8) % (1 << 50);
    // Every quota's admissions `(instant, cost)`, instants capped at the horizon.
    let mut admitted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); quotas.len()];
    let mut held: Vec<Held<'_>> = Vec::new();
    let mut ops = 0;
    while let Some(kind) = b.u8() {
        ops += 1;
        if ops > 512 {
            break;
        }
        let x = b.u64();
        let j = (x >> 56) as usize % quotas.len();
        let (step, burst) = (steps[j], quotas[j].burst());
        let smallest = r.smallest_burst();
        let cost = match (x >> 8) % 8 {
            0..=2 => 1,
            3 => 1 + (x >> 16) % smallest.min(4),
            4 => (x >> 16) % (smallest + 2),
            5 => smallest,
            _ => {
                [0, smallest + 1, burst, burst + 1, u64::MAX, u64::MAX / 2][(x >> 16) as usize % 6]
            }
        };
        match kind % 18 {
            0 | 1 => t = t.saturating_add(x % (4 * step + 1)),
            2 => t = t.saturating_add(x % (2 * burst * step + 1)),
            3 => t = t.saturating_sub(x % (burst * step + 1)),
            4 => {
                let edges = [
                    0,
                    H - 1,
                    H,
                    H + 1,
                    1 << 62,
                    u64::MAX / 2,
                    u64::MAX - 1,
                    u64::MAX,
                ];
                t = edges[x as usize % edges.len()];
            }
            5 => {
                clock.set(Duration::from_nanos(t));
                let (got, want) = match &subject {
                    Subject::One(b) => (b.available(), gcra::available(r.states[0], t, &quotas[0])),
                    Subject::Many(m) => {
                        let each = r.states.iter().zip(&quotas);
                        (
                            m.available(),
                            each.map(|(s, q)| gcra::available(*s, t, q)).min().unwrap(),
                        )
                    }
                };
                assert_eq!(got, want, "{quotas:?}: available at {t}");
                for (i, m) in r.models.iter().enumerate() {
                    if let Some(m) = m {
                        assert_eq!(m.available(t), gcra::available(r.states[i], t, &quotas[i]));
                    }
                }
            }
            6 => {
                clock.set(Duration::from_nanos(t));
                match &subject {
                    Subject::One(b) => b.drain(),
                    Subject::Many(m) => m.drain(),
                }
                for (s, q) in r.states.iter_mut().zip(&quotas) {
                    *s = (*s).max(gcra::with_tokens(t, q, 0).unwrap());
                }
                r.drop_models();
            }
            7..=9 => {
                clock.set(Duration::from_nanos(t));
                let before = r.states.clone();
                let model_before: Vec<_> = r
                    .models
                    .iter()
                    .map(|m| m.as_ref().map(Model::state))
                    .collect();
                let want = r.reserve(t, cost, u64::MAX);
                let label = Label(&quotas, "reserve", cost, t);
                match (subject.reserve(t, cost), want) {
                    (Ok((ticket, due)), Ok((after, want_due))) => {
                        assert_eq!(due, want_due, "{label}: due");
                        let model = r
                            .models
                            .iter()
                            .zip(model_before)
                            .map(|(m, b)| Some((b?, m.as_ref()?.state())))
                            .collect();
                        held.push(Held {
                            ticket,
                            cost,
                            at: t,
                            due,
                            before,
                            after,
                            model,
                        });
                        if held.len() > 32 {
                            // Dropped: the tokens stay taken.
                            let h = held.remove(0);
                            record(&mut admitted, &h, &vec![false; quotas.len()]);
                        }
                    }
                    (Err(got), Err(want)) => assert_eq!(got, want, "{label}"),
                    (got, want) => panic!("{label}: got {:?}, want {want:?}", got.map(|g| g.1)),
                }
            }
            10..=12 if !held.is_empty() => {
                let i = (x >> 32) as usize % held.len();
                let h = held.remove(i);
                if kind % 18 == 12 {
                    // Dropped without cancel: the tokens stay taken.
                    record(&mut admitted, &h, &vec![false; quotas.len()]);
                    continue;
                }
                t = match x % 6 {
                    0 | 1 => t,
                    2 => h.due.saturating_sub(1),
                    3 => h.due,
                    4 => h.due.saturating_add(1),
                    _ => h.at.saturating_sub(x >> 16 & 0xffff),
                };
                clock.set(Duration::from_nanos(t));
                for (i, q) in quotas.iter().enumerate() {
                    // The pure rule never gives back more than the reservation took.
                    let (before, after) = (h.before[i], h.after[i]);
                    if let Some(back) = gcra::cancel(after, t, q, after, h.due, h.cost) {
                        assert!(back >= before, "{q:?}: gcra::cancel to {back} < {before}");
                    }
                }
                let back = r.cancel(t, &h);
                record(&mut admitted, &h, &back);
                h.ticket.cancel();
                assert_eq!(
                    subject.snapshots(),
                    r.snapshots(t),
                    "{quotas:?}: after cancelling {} (due {}, made at {}) at {t}",
                    h.cost,
                    h.due,
                    h.at
                );
            }
            16 | 17 => {
                clock.set(Duration::from_nanos(t));
                let timeout = match x >> 40 & 3 {
                    0 => Duration::ZERO,
                    1 => Duration::MAX,
                    _ => Duration::from_nanos((x >> 42) % (4 * burst * step + 1)),
                };
                let label = Label(&quotas, "try_acquire_for", cost, t);
                let want = match cost {
                    0 => Ok((r.states.clone(), t)),
                    _ => r.reserve(t, cost, timeout.as_nanos().min(u64::MAX.into()) as u64),
                };
                let got = match &subject {
                    Subject::One(b) => b.try_acquire_for(cost, timeout),
                    Subject::Many(m) => m.try_acquire_for(cost, timeout),
                };
                let waited = want.as_ref().map(|w| Duration::from_nanos(w.1 - t));
                assert_eq!(got, waited.map_err(|e| *e), "{label} within {timeout:?}");
                if let Ok((_, due)) = want {
                    // The manual clock slept until the tokens were due; they count then.
                    assert_eq!(clock.now(), due, "{label}: slept until");
                    t = due;
                    if cost > 0 {
                        for a in &mut admitted {
                            a.push((due.min(H), cost));
                        }
                    }
                }
            }
            _ => {
                clock.set(Duration::from_nanos(t));
                let label = Label(&quotas, "try_acquire", cost, t);
                let state_before = r.snapshots(t);
                let want = r.try_acquire(t, cost);
                match (&subject, x >> 40 & 3) {
                    (Subject::One(b), 0) => assert_eq!(b.try_acquire(cost), want, "{label}"),
                    (Subject::Many(m), 0) => assert_eq!(m.try_acquire(cost), want, "{label}"),
                    (_, 1) => {
                        let got = match &subject {
                            Subject::One(b) => b.try_acquire_or_snapshot(cost),
                            Subject::Many(m) => m.try_acquire_or_snapshot(cost),
                        };
                        // On refusal, the snapshot of the tightest quota as it stood.
                        let tightest = Snapshots::new(&state_before).unwrap().tightest().1;
                        assert_eq!(got, want.map_err(|d| (d, tightest)), "{label}");
                    }
                    (_, 3) => {
                        // The decision and the tightest quota as the decision left it.
                        #[allow(deprecated)]
                        let (got, snap) = match &subject {
                            Subject::One(b) => b.try_acquire_snapshot(cost),
                            Subject::Many(m) => m.try_acquire_snapshot(cost),
                        };
                        assert_eq!(got, want, "{label}");
                        let tightest = Snapshots::new(&r.snapshots(t)).unwrap().tightest().1;
                        assert_eq!(snap, tightest, "{label}: the tightest snapshot");
                    }
                    _ => {
                        let (got, snaps) = match &subject {
                            Subject::One(b) => b.decide_snapshots(&(), cost),
                            Subject::Many(m) => m.decide_snapshots(&(), cost),
                        };
                        assert_eq!(got.map_err(Denied::from), want, "{label}");
                        assert_eq!(snaps.as_slice(), r.snapshots(t), "{label}: snapshots");
                    }
                }
                if want.is_ok() && cost > 0 {
                    for a in &mut admitted {
                        a.push((t.min(H), cost));
                    }
                }
            }
        }
        if t > H {
            // The bucket reads its clock as stopped past the horizon; the models do not.
            r.drop_models();
        }
    }
    for h in std::mem::take(&mut held) {
        record(&mut admitted, &h, &vec![false; quotas.len()]);
    }
    for (q, a) in quotas.iter().zip(&mut admitted) {
        if let Some(v) = units_window::violation(q, a, 1) {
            panic!("{quotas:?}: quota {q:?}: {v}");
        }
    }
});

/// Counts a resolved reservation at its due instant on every quota that kept its tokens.
fn record(admitted: &mut [Vec<(u64, u64)>], h: &Held<'_>, given_back: &[bool]) {
    if h.cost == 0 {
        return;
    }
    for (a, back) in admitted.iter_mut().zip(given_back) {
        if !back {
            a.push((h.due.min(H), h.cost));
        }
    }
}
