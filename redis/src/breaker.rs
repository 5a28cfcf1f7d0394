//! The breaker: after a failure that is the limiter's own evidence that the server cannot
//! answer, only one probe decision per interval goes to Redis; the others fail at once, so
//! nothing queues behind a dead or stopped server.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// After a connection failure or timeout, only one probe decision per interval goes to Redis;
/// the others fail at once (so nothing queues behind a dead or stopped server).
///
/// A probe reports its outcome when its call ends (or gives its pass back when dropped); a
/// probe whose future is kept but never polled again (parked in a struct, a `select!` arm
/// that is not polled again) reports nothing, and its own timeout never fires. Such a probe
/// holds the breaker open for at most its deadline plus one interval: past that, the next
/// caller takes the probe over, and the parked probe's later report (outcome or drop) changes
/// nothing. A probe whose call is still polled ends by its deadline, so among live probes one
/// is out at a time.
#[derive(Debug)]
pub(crate) struct Breaker {
    start: Instant,
    down: AtomicBool,
    /// The probe out now: `0` if none, else the instant (ns since `start`) from which the next
    /// caller may take it over: its start plus its call's time (at least 1 ns) plus one
    /// interval. Past its call's time a probe still polled has ended (its timeout fired), so
    /// only a parked one can be taken over. Successive probes' values strictly increase, so
    /// the value names its probe: set by compare-and-swap in `pass`, cleared only by a
    /// compare-and-swap from the owner's own value, so that a superseded probe's report finds
    /// another value and changes nothing. Saturating: `u64::MAX` (an interval of
    /// `Duration::MAX`) is never taken over.
    probing: AtomicU64,
    last_probe: AtomicU64,
    interval: Duration,
}

pub(crate) enum Pass {
    Normal,
    /// The probe of its interval; `previous`: the last probe's instant before it, which a
    /// probe given back unused restores; `at`: its own instant (stored in `last_probe`);
    /// `until`: its value in `probing`.
    Probe {
        previous: u64,
        at: u64,
        until: u64,
    },
}

impl Breaker {
    /// A closed breaker that probes once per `interval` while open.
    pub(crate) fn new(interval: Duration) -> Breaker {
        Breaker {
            start: Instant::now(),
            down: AtomicBool::new(false),
            probing: AtomicU64::new(0),
            last_probe: AtomicU64::new(0),
            interval,
        }
    }

    fn now(&self) -> u64 {
        Self::ns(self.start.elapsed())
    }

    /// Saturating: a span past u64::MAX ns (`Duration::MAX`) means "never".
    fn ns(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// A pass for a call that must be answered by `deadline`: `Normal` while closed;
    /// while open, the probe once it is due and no live probe holds it (`None` otherwise).
    /// The clock is read only while open: a closed breaker costs one load per call.
    pub(crate) fn pass(&self, deadline: Instant) -> Option<Pass> {
        if !self.down.load(Ordering::Acquire) {
            return Some(Pass::Normal);
        }
        let at = Instant::now();
        let now = Self::ns(at.saturating_duration_since(self.start));
        let within = deadline.saturating_duration_since(at);
        let interval = Self::ns(self.interval);
        // Saturating: an interval of `Duration::MAX` means "never probe again".
        let due = self
            .last_probe
            .load(Ordering::Acquire)
            .saturating_add(interval);
        let held = self.probing.load(Ordering::Acquire);
        if now < due || (held != 0 && now < held) {
            return None;
        }
        let until = now
            .saturating_add(Self::ns(within).max(1))
            .saturating_add(interval);
        if self
            .probing
            .compare_exchange(held, until, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        let previous = self.last_probe.swap(now, Ordering::AcqRel);
        Some(Pass::Probe {
            previous,
            at: now,
            until,
        })
    }

    /// Whether `pass` may still report: a normal pass always, a probe only while it holds
    /// `probing` (which this clears).
    fn own(&self, pass: &Pass) -> bool {
        match *pass {
            Pass::Normal => true,
            Pass::Probe { until, .. } => self
                .probing
                .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
        }
    }

    /// Gives a pass back unused (the state is unchanged).
    /// A probe given back unused leaves the probe due at once for the next caller: its
    /// interval restarts only from a probe that got an answer, so a probe dropped by an
    /// impatient caller does not hold recovery back a whole interval. A superseded probe
    /// changes nothing (its successor's instant stays in `last_probe`).
    ///
    /// `last_probe` is restored while the probe still holds `probing`, and the slot freed
    /// after, so that a caller who finds the slot free finds the probe due: the release takes
    /// effect at once, at the freeing. `last_probe` still holds this probe's `at` only if no
    /// probe was taken since (each takes it over with its own, later, instant), so restoring it
    /// needs no ownership check; a superseded probe finds another instant there and another
    /// value in `probing`, and changes neither.
    pub(crate) fn release(&self, pass: Pass) {
        if let Pass::Probe { previous, at, .. } = pass {
            let _ =
                self.last_probe
                    .compare_exchange(at, previous, Ordering::AcqRel, Ordering::Acquire);
            hook();
            self.own(&pass);
        }
    }

    /// Ends a pass; `Some(true)` if this opened the breaker, `Some(false)` if it closed it.
    /// A superseded probe's outcome is stale evidence: it changes nothing (`None`).
    pub(crate) fn done(&self, pass: Pass, unavailable: bool) -> Option<bool> {
        if !self.own(&pass) {
            return None;
        }
        if unavailable {
            if !self.down.swap(true, Ordering::AcqRel) {
                self.last_probe.store(self.now(), Ordering::Release);
                return Some(true);
            }
        } else if self.down.load(Ordering::Acquire) && self.down.swap(false, Ordering::AcqRel) {
            return Some(false);
        }
        None
    }
}

/// Holds a call's pass until the call reports its outcome ([`finish`](Self::finish)). Dropped
/// without one (the caller gave up: a client disconnect, a `select!`, an outer timeout), it gives
/// the pass back unused: a caller's impatience is not evidence about the server, so it moves
/// nothing, and a probe pass becomes available to the next caller.
pub(crate) struct BreakerGuard<'a> {
    breaker: &'a Breaker,
    pass: Option<Pass>,
    /// Told of the openings and closings this guard causes.
    observe: &'a crate::observe::Observer,
}

impl<'a> BreakerGuard<'a> {
    pub(crate) fn new(
        breaker: &'a Breaker,
        pass: Pass,
        observe: &'a crate::observe::Observer,
    ) -> BreakerGuard<'a> {
        BreakerGuard {
            breaker,
            pass: Some(pass),
            observe,
        }
    }

    pub(crate) fn finish(mut self, unavailable: bool) {
        if let Some(p) = self.pass.take() {
            let changed = self.breaker.done(p, unavailable);
            self.observe.breaker(changed);
        }
    }
}

impl Drop for BreakerGuard<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.pass.take() {
            self.breaker.release(p);
        }
    }
}

/// Code a unit test runs in `release` between restoring `last_probe` and freeing the slot.
#[cfg(test)]
type Hook = Box<dyn FnMut()>;

#[cfg(test)]
std::thread_local! {
    static HOOK: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn hook() {
    if let Some(mut h) = HOOK.with(|c| c.borrow_mut().take()) {
        h();
    }
}

#[cfg(not(test))]
#[inline(always)]
fn hook() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller who comes while a probe is being given back is refused only while the probe
    /// still holds its slot: once the slot is free, the probe is due (the release has taken
    /// effect), never "free but not due".
    #[test]
    fn a_released_probe_is_due_once_its_slot_is_free() {
        let b = std::rc::Rc::new(started_ago(
            Duration::from_secs(7200),
            Duration::from_secs(3600),
        ));
        b.done(Pass::Normal, true);
        // Opened an interval ago: the probe is due.
        b.last_probe.store(0, Ordering::Release);
        let probe = b.pass(later()).expect("a probe is due");
        let (inner, seen) = (b.clone(), std::rc::Rc::new(std::cell::Cell::new(None)));
        let saw = seen.clone();
        HOOK.with(|c| {
            *c.borrow_mut() = Some(Box::new(move || {
                let free = inner.probing.load(Ordering::Acquire) == 0;
                let got = inner.pass(later()).is_some();
                saw.set(Some((free, got)));
            }))
        });
        b.release(probe);
        let (free, got) = seen.get().expect("the hook ran");
        assert!(
            !free || got,
            "a caller found the probe's slot free and was refused: the probe was not due"
        );
        if !got {
            assert!(b.pass(later()).is_some(), "due once released");
        }
    }

    fn breaker(interval: Duration) -> Breaker {
        started_ago(Duration::ZERO, interval)
    }

    /// A closed breaker whose clock started `ago` (so a probe `ago` after its start is due).
    fn started_ago(ago: Duration, interval: Duration) -> Breaker {
        Breaker {
            start: Instant::now() - ago,
            down: AtomicBool::new(false),
            probing: AtomicU64::new(0),
            last_probe: AtomicU64::new(0),
            interval,
        }
    }

    /// A call's time long enough that no probe in these tests is taken over.
    fn later() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// A guard dropped before its call finished changes nothing: a closed breaker stays closed,
    /// and an open one's probe pass is free again.
    #[test]
    fn a_dropped_guard_moves_nothing() {
        let b = breaker(Duration::ZERO);
        drop(BreakerGuard::new(
            &b,
            b.pass(later()).unwrap(),
            &crate::observe::Observer::default(),
        ));
        assert!(
            matches!(b.pass(later()), Some(Pass::Normal)),
            "still closed"
        );
        b.done(Pass::Normal, true);
        drop(BreakerGuard::new(
            &b,
            b.pass(later()).expect("a probe"),
            &crate::observe::Observer::default(),
        ));
        let probe = b
            .pass(later())
            .expect("the dropped probe's pass is free again");
        BreakerGuard::new(&b, probe, &crate::observe::Observer::default()).finish(false);
        assert!(
            matches!(b.pass(later()), Some(Pass::Normal)),
            "closed by the probe's reply"
        );
    }

    #[test]
    fn breaker_lets_one_probe_through_per_interval() {
        let b = breaker(Duration::ZERO);
        assert!(matches!(b.pass(later()), Some(Pass::Normal)));
        b.done(Pass::Normal, true);
        let probe = b.pass(later()).expect("a probe is due");
        assert!(matches!(probe, Pass::Probe { .. }));
        assert!(b.pass(later()).is_none(), "one probe at a time");
        b.release(probe);
        let probe = b.pass(later()).expect("a released probe is due again");
        b.done(probe, false);
        assert!(
            matches!(b.pass(later()), Some(Pass::Normal)),
            "a successful probe closes it"
        );

        let slow = breaker(Duration::from_secs(3600));
        slow.done(Pass::Normal, true);
        assert!(slow.pass(later()).is_none(), "no probe before the interval");
    }

    /// A probe given back unused (its caller gave up) is due again at once, whatever the
    /// interval; one that got an answer restarts the interval.
    #[test]
    fn a_probe_given_back_is_due_again_at_once() {
        let b = started_ago(Duration::from_secs(10), Duration::from_secs(5));
        b.down.store(true, Ordering::Relaxed);
        let probe = b.pass(later()).expect("due: 10 s since the last");
        assert!(b.pass(later()).is_none(), "one at a time");
        b.release(probe);
        let probe = b.pass(later()).expect("given back: due again");
        b.done(probe, true);
        assert!(b.pass(later()).is_none(), "answered: the interval restarts");
    }

    /// An interval past `u64::MAX` ns (`Duration::MAX`) saturates: once down, the breaker never
    /// lets a probe through (an unchecked add would panic in debug builds and, wrapped in
    /// release, make every decision a probe).
    #[test]
    fn a_huge_probe_interval_neither_panics_nor_probes() {
        let b = started_ago(Duration::from_secs(1), Duration::MAX);
        b.done(Pass::Normal, true); // a failure: down, last_probe = now (> 0)
        let r = std::panic::catch_unwind(|| b.pass(later()).is_none());
        assert_eq!(
            r.ok(),
            Some(true),
            "pass() with an interval of Duration::MAX must neither panic nor let a probe through"
        );
    }

    /// An open breaker whose probe falls due every `interval`, with one probe `p1` taken that
    /// must be answered by `deadline` from now, then parked past `deadline + interval`, and a
    /// second probe `p2` (answered within the hour) that took it over.
    fn taken_over(interval: Duration, deadline: Duration) -> (Breaker, Pass, Pass) {
        let b = started_ago(Duration::from_secs(10), interval);
        b.done(Pass::Normal, true);
        std::thread::sleep(interval);
        let p1 = b.pass(Instant::now() + deadline).expect("due");
        assert!(b.pass(later()).is_none(), "p1 is live: one probe at a time");
        std::thread::sleep(deadline + interval + Duration::from_millis(2));
        let p2 = b
            .pass(later())
            .expect("p1 is parked past its deadline and an interval");
        assert!(b.pass(later()).is_none(), "p2 is live: one probe at a time");
        (b, p1, p2)
    }

    /// A probe parked past its deadline is taken over no sooner than its deadline plus one
    /// interval.
    #[test]
    fn a_parked_probe_is_taken_over_after_its_deadline_and_an_interval() {
        let b = started_ago(Duration::from_secs(10), Duration::from_millis(20));
        b.done(Pass::Normal, true);
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        let _parked = b.pass(t0 + Duration::from_millis(30)).expect("due");
        while b.pass(later()).is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(5),
            "taken over after {took:?}"
        );
    }

    /// A superseded probe's late failure does not reopen the breaker its successor closed.
    #[test]
    fn a_superseded_probes_late_failure_changes_nothing() {
        let (b, p1, p2) = taken_over(Duration::from_millis(5), Duration::from_millis(5));
        assert_eq!(b.done(p2, false), Some(false), "p2 closes it");
        assert_eq!(b.done(p1, true), None, "stale");
        assert!(
            matches!(b.pass(later()), Some(Pass::Normal)),
            "still closed"
        );
    }

    /// A superseded probe's late success does not close the breaker nor free its successor's
    /// probe; its successor's own failure keeps the breaker open.
    #[test]
    fn a_superseded_probes_late_success_changes_nothing() {
        let (b, p1, p2) = taken_over(Duration::from_millis(5), Duration::from_millis(5));
        assert_eq!(b.done(p1, false), None, "stale");
        assert!(b.pass(later()).is_none(), "still open, p2 still out");
        assert_eq!(b.done(p2, true), None, "already open");
        assert!(b.down.load(Ordering::Relaxed), "open");
    }

    /// A superseded probe given back (its parked future dropped) frees nothing and restores
    /// no interval: its successor keeps the probe, and once the successor is given back, the
    /// probe is due again at once.
    #[test]
    fn a_superseded_probe_given_back_changes_nothing() {
        let (b, p1, p2) = taken_over(Duration::from_millis(5), Duration::from_millis(5));
        let Pass::Probe { at, .. } = p2 else {
            unreachable!()
        };
        b.release(p1);
        assert!(b.pass(later()).is_none(), "p2 still holds the probe");
        assert_eq!(
            b.last_probe.load(Ordering::Relaxed),
            at,
            "p2's instant stays"
        );
        b.release(p2);
        let p3 = b.pass(later()).expect("p2 given back: due again at once");
        assert!(matches!(p3, Pass::Probe { .. }));
        let (b, p1, p2) = taken_over(Duration::from_millis(5), Duration::from_millis(5));
        b.release(p2);
        b.release(p1);
        assert!(b.pass(later()).is_some(), "due at once");
    }

    /// A probe of a limiter without a timeout (its deadline thirty years away, as
    /// `Inner::deadline` makes it) is not taken over.
    #[test]
    fn a_probe_without_a_deadline_is_never_taken_over() {
        const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
        let b = started_ago(Duration::from_secs(10), Duration::from_millis(1));
        b.done(Pass::Normal, true);
        std::thread::sleep(Duration::from_millis(2));
        let p = b.pass(Instant::now() + FAR).expect("due");
        let Pass::Probe { until, .. } = p else {
            unreachable!()
        };
        assert!(until >= Breaker::ns(FAR), "held for thirty years: {until}");
        std::thread::sleep(Duration::from_millis(5));
        assert!(b.pass(later()).is_none(), "never taken over");
    }
}
