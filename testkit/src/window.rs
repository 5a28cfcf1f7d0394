//! `WindowChecker`: records every admission with the clock reading it was decided at (or, for a
//! reservation, the instant it is due) and checks **every** window against the continuous
//! token bucket's bound `admitted(window) ≤ burst + rate · Δ`, in exact integers.

use std::sync::Mutex;
use tollgate::Quota;

/// A window that admitted more than the bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// First and last instant of the window (ns).
    pub from: u64,
    pub to: u64,
    /// Tokens admitted with instants in `from..=to`.
    pub admitted: u128,
    /// The bound `burst + rate · (to − from)` as the exact rational `bound_num / per_ns`.
    pub bound_num: i128,
    pub per_ns: i128,
}

/// Thread-safe log of admissions.
#[derive(Debug, Default)]
pub struct WindowChecker {
    events: Mutex<Vec<(u64, u64)>>,
}

impl WindowChecker {
    /// An empty log.
    pub fn new() -> WindowChecker {
        WindowChecker::default()
    }

    /// Records `tokens` admitted at instant `at` (ns since the clock's origin).
    pub fn admit(&self, at: u64, tokens: u64) {
        if tokens > 0 {
            self.events.lock().unwrap().push((at, tokens));
        }
    }

    /// Removes one earlier record of `tokens` at `at` (a reservation that was cancelled).
    pub fn retract(&self, at: u64, tokens: u64) {
        let mut ev = self.events.lock().unwrap();
        let i = ev
            .iter()
            .rposition(|&e| e == (at, tokens))
            .expect("retracting an admission that was never recorded");
        ev.swap_remove(i);
    }

    /// Total tokens recorded.
    pub fn total(&self) -> u128 {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| u128::from(e.1))
            .sum()
    }

    /// The worst window, if any window exceeds `quota` (rate `tokens/per`, capacity `burst`).
    /// O(n log n): with prefix sums `P`, a window `[t_i, t_j]` violates iff
    /// `per·(P_j − P_{i−1}) − tokens·(t_j − t_i) > per·burst`; the maximum over `i ≤ j` is a
    /// running maximum.
    pub fn check(&self, quota: &Quota) -> Result<(), Violation> {
        self.check_within(quota, 0)
    }

    /// [`check`](WindowChecker::check) against `burst + rate · (Δ + slack_ns)`: for records
    /// whose instant may be up to `slack_ns` later than the exact one. A reservation's due
    /// instant (and so `acquire`'s and `try_acquire_for`'s) is the first *whole* nanosecond at
    /// which its tokens are there; when the quota's token period is not a whole number of
    /// nanoseconds the exact instant lies up to 1 ns earlier, and two due instants rounded
    /// differently can be 1 ns closer than the refill between them: use `slack_ns = 1` there.
    /// (The slack adds `rate × 1 ns` to the bound, far below one token for any quota whose
    /// period is above 1 ns, so it can never hide a whole extra admission unless the bound is
    /// that close below a whole number.)
    pub fn check_within(&self, quota: &Quota, slack_ns: u64) -> Result<(), Violation> {
        let mut ev = self.events.lock().unwrap().clone();
        ev.sort_unstable();
        let per = i128::try_from(quota.per().as_nanos()).unwrap();
        let rate = i128::from(quota.tokens());
        let burst = i128::from(quota.burst());
        let mut prefix: i128 = 0;
        // max over i <= j of rate·t_i − per·P_{i−1}, and where it was reached.
        let mut best: Option<(i128, u64, i128)> = None;
        let mut worst: Option<(i128, Violation)> = None;
        for &(t, n) in &ev {
            let v = rate * i128::from(t) - per * prefix;
            if !matches!(best, Some(b) if v <= b.0) {
                best = Some((v, t, prefix));
            }
            prefix += i128::from(n);
            let (bv, from, p0) = best.unwrap();
            let excess = per * prefix - rate * i128::from(t) + bv
                - per * burst
                - rate * i128::from(slack_ns);
            if excess > 0 && !matches!(&worst, Some(w) if excess <= w.0) {
                let bound =
                    burst * per + rate * (i128::from(t) - i128::from(from) + i128::from(slack_ns));
                worst = Some((
                    excess,
                    Violation {
                        from,
                        to: t,
                        admitted: (prefix - p0) as u128,
                        bound_num: bound,
                        per_ns: per,
                    },
                ));
            }
        }
        worst.map_or(Ok(()), |w| Err(w.1))
    }
}

/// Admissions whose instants are known only to lie in an interval: a call to a remote limiter
/// is decided at some instant between the caller's readings just before and just after it
/// (on the clock the decisions are made on, e.g. the realtime clock a local `redis-server`'s
/// `TIME` reads). Checks every window `[lo_i, hi_j]` in exact integers: the admissions whose
/// whole interval lies inside it were decided inside it, so they are at most
/// `burst + rate · (hi_j − lo_i)`. Sound whatever the intervals (it never reports a window a
/// correct limiter could exceed); sharp for short intervals.
#[derive(Debug, Default)]
pub struct SpanChecker {
    events: Mutex<Vec<(u64, u64, u64)>>,
}

impl SpanChecker {
    /// An empty log.
    pub fn new() -> SpanChecker {
        SpanChecker::default()
    }

    /// Records `tokens` admitted at some instant in `lo..=hi` (ns).
    pub fn admit(&self, lo: u64, hi: u64, tokens: u64) {
        assert!(lo <= hi, "an interval ends before it starts: {lo}..={hi}");
        if tokens > 0 {
            self.events.lock().unwrap().push((lo, hi, tokens));
        }
    }

    /// Total tokens recorded.
    pub fn total(&self) -> u128 {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| u128::from(e.2))
            .sum()
    }

    /// The tightest window against `burst + rate · (Δ + slack_ns)`: the one whose admissions
    /// exceed the bound most, or come closest to it (`None` when nothing was admitted).
    /// `Violation::admitted` counts the admissions whose interval lies inside `from..=to`.
    /// O(n²): each interval's start against every interval's end.
    pub fn tightest(&self, quota: &Quota, slack_ns: u64) -> Option<Violation> {
        let mut ev = self.events.lock().unwrap().clone();
        // By end: a window ending at `hi_j` holds the admissions up to `j` that start late
        // enough.
        ev.sort_unstable_by_key(|e| (e.1, e.0));
        let per = i128::try_from(quota.per().as_nanos()).unwrap();
        let rate = i128::from(quota.tokens());
        let burst = i128::from(quota.burst());
        let slack = i128::from(slack_ns);
        let mut worst: Option<(i128, Violation)> = None;
        for &(from, _, _) in &ev {
            let mut admitted: i128 = 0;
            for &(lo, hi, n) in &ev {
                if lo < from {
                    continue;
                }
                admitted += i128::from(n);
                let bound = burst * per + rate * (i128::from(hi) - i128::from(from) + slack);
                let excess = per * admitted - bound;
                if !matches!(&worst, Some(w) if excess <= w.0) {
                    worst = Some((
                        excess,
                        Violation {
                            from,
                            to: hi,
                            admitted: admitted as u128,
                            bound_num: bound,
                            per_ns: per,
                        },
                    ));
                }
            }
        }
        worst.map(|w| w.1)
    }

    /// Every window against `burst + rate · (Δ + slack_ns)`: the worst one if any exceeds it.
    /// `slack_ns` covers a limiter's own rounding of the instants it decides at (a server
    /// clock read in whole microseconds: 1 µs).
    pub fn check_within(&self, quota: &Quota, slack_ns: u64) -> Result<(), Violation> {
        match self.tightest(quota, slack_ns) {
            Some(v) if v.admitted as i128 * v.per_ns > v.bound_num => Err(v),
            _ => Ok(()),
        }
    }
}
