//! The breaker: after a failure that is the limiter's own evidence that the server cannot
//! answer, only one probe decision per interval goes to Redis; the others fail at once, so
//! nothing queues behind a dead or stopped server.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// After a connection failure or timeout, only one probe decision per interval goes to Redis;
/// the others fail at once (so nothing queues behind a dead or stopped server).
#[derive(Debug)]
pub(crate) struct Breaker {
    start: Instant,
    down: AtomicBool,
    probing: AtomicBool,
    last_probe: AtomicU64,
    interval: Duration,
}

pub(crate) enum Pass {
    Normal,
    /// The probe of its interval; `previous`: the last probe's instant before it, which a
    /// probe given back unused restores.
    Probe {
        previous: u64,
    },
}

impl Breaker {
    /// A closed breaker that probes once per `interval` while open.
    pub(crate) fn new(interval: Duration) -> Breaker {
        Breaker {
            start: Instant::now(),
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            last_probe: AtomicU64::new(0),
            interval,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn pass(&self) -> Option<Pass> {
        if !self.down.load(Ordering::Acquire) {
            return Some(Pass::Normal);
        }
        let now = self.now();
        // Saturating: an interval past u64::MAX ns (`Duration::MAX`) means "never probe again".
        let due = self
            .last_probe
            .load(Ordering::Acquire)
            .saturating_add(u64::try_from(self.interval.as_nanos()).unwrap_or(u64::MAX));
        if now >= due
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let previous = self.last_probe.swap(now, Ordering::AcqRel);
            return Some(Pass::Probe { previous });
        }
        None
    }

    /// Gives a pass back unused (the state is unchanged).
    /// A probe given back unused leaves the probe due at once for the next caller: its
    /// interval restarts only from a probe that got an answer, so a probe dropped by an
    /// impatient caller does not hold recovery back a whole interval.
    pub(crate) fn release(&self, pass: Pass) {
        if let Pass::Probe { previous } = pass {
            self.last_probe.store(previous, Ordering::Release);
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Ends a pass; `Some(true)` if this opened the breaker, `Some(false)` if it closed it.
    pub(crate) fn done(&self, pass: Pass, unavailable: bool) -> Option<bool> {
        let mut changed = None;
        if unavailable {
            if !self.down.swap(true, Ordering::AcqRel) {
                self.last_probe.store(self.now(), Ordering::Release);
                changed = Some(true);
            }
        } else if self.down.load(Ordering::Acquire) && self.down.swap(false, Ordering::AcqRel) {
            changed = Some(false);
        }
        if let Pass::Probe { .. } = pass {
            self.probing.store(false, Ordering::Release);
        }
        changed
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

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(interval: Duration) -> Breaker {
        started_ago(Duration::ZERO, interval)
    }

    /// A closed breaker whose clock started `ago` (so a probe `ago` after its start is due).
    fn started_ago(ago: Duration, interval: Duration) -> Breaker {
        Breaker {
            start: Instant::now() - ago,
            down: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            last_probe: AtomicU64::new(0),
            interval,
        }
    }

    /// A guard dropped before its call finished changes nothing: a closed breaker stays closed,
    /// and an open one's probe pass is free again.
    #[test]
    fn a_dropped_guard_moves_nothing() {
        let b = breaker(Duration::ZERO);
        drop(BreakerGuard::new(
            &b,
            b.pass().unwrap(),
            &crate::observe::Observer::default(),
        ));
        assert!(matches!(b.pass(), Some(Pass::Normal)), "still closed");
        b.done(Pass::Normal, true);
        drop(BreakerGuard::new(
            &b,
            b.pass().expect("a probe"),
            &crate::observe::Observer::default(),
        ));
        let probe = b.pass().expect("the dropped probe's pass is free again");
        BreakerGuard::new(&b, probe, &crate::observe::Observer::default()).finish(false);
        assert!(
            matches!(b.pass(), Some(Pass::Normal)),
            "closed by the probe's reply"
        );
    }

    #[test]
    fn breaker_lets_one_probe_through_per_interval() {
        let b = breaker(Duration::ZERO);
        assert!(matches!(b.pass(), Some(Pass::Normal)));
        b.done(Pass::Normal, true);
        let probe = b.pass().expect("a probe is due");
        assert!(matches!(probe, Pass::Probe { .. }));
        assert!(b.pass().is_none(), "one probe at a time");
        b.release(probe);
        let probe = b.pass().expect("a released probe is due again");
        b.done(probe, false);
        assert!(
            matches!(b.pass(), Some(Pass::Normal)),
            "a successful probe closes it"
        );

        let slow = breaker(Duration::from_secs(3600));
        slow.done(Pass::Normal, true);
        assert!(slow.pass().is_none(), "no probe before the interval");
    }

    /// A probe given back unused (its caller gave up) is due again at once, whatever the
    /// interval; one that got an answer restarts the interval.
    #[test]
    fn a_probe_given_back_is_due_again_at_once() {
        let b = started_ago(Duration::from_secs(10), Duration::from_secs(5));
        b.down.store(true, Ordering::Relaxed);
        let probe = b.pass().expect("due: 10 s since the last");
        assert!(b.pass().is_none(), "one at a time");
        b.release(probe);
        let probe = b.pass().expect("given back: due again");
        b.done(probe, true);
        assert!(b.pass().is_none(), "answered: the interval restarts");
    }

    /// An interval past `u64::MAX` ns (`Duration::MAX`) saturates: once down, the breaker never
    /// lets a probe through (an unchecked add would panic in debug builds and, wrapped in
    /// release, make every decision a probe).
    #[test]
    fn a_huge_probe_interval_neither_panics_nor_probes() {
        let b = started_ago(Duration::from_secs(1), Duration::MAX);
        b.done(Pass::Normal, true); // a failure: down, last_probe = now (> 0)
        let r = std::panic::catch_unwind(|| b.pass().is_none());
        assert_eq!(
            r.ok(),
            Some(true),
            "pass() with an interval of Duration::MAX must neither panic nor let a probe through"
        );
    }
}
