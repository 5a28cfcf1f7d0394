//! `Smooth` against Guava's `SmoothRateLimiter`, on `ManualClock`.
//!
//! * The `RateLimiterTest` sequences, ported: every wait is asserted to the microsecond (the
//!   values come from running Guava's algorithm), and also printed the way Guava's test prints
//!   it (`R1.38`, Java's `%3.2f`, half-up) and compared with Guava's own expected strings.
//! * Differential runs: a plain-`f64` transcription of Guava plus tollgate's documented
//!   `set_rate` deviation (`Reference`, in `testkit/src/guava.rs`) against `Smooth` over many
//!   random operations; and six fixed runs driven by a port of `java.util.Random` whose
//!   checksums were computed on the JVM by `tests/jvm/SmoothChecksums.java`, a Java
//!   transcription of Guava's `SmoothRateLimiter`/`RateLimiter` decision code with the same
//!   deviation (`java tests/jvm/SmoothChecksums.java`; `--guava` leaves the deviation out).

use std::time::Duration;
use tollgate::{Clock, ConfigError, ManualClock, Smooth};

use tollgate_testkit::guava;
use tollgate_testkit::rng;

use guava::Reference;
use rng::Rng;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Records what Guava's `FakeStopwatch` records: `R` = a wait imposed by the limiter, `U` = a
/// sleep by the user, both in microseconds.
struct Rec {
    clock: ManualClock,
    limiter: Smooth<ManualClock>,
    events: Vec<(char, u64)>,
}

impl Rec {
    fn bursty(rate: f64) -> Rec {
        let clock = ManualClock::new();
        let limiter =
            Smooth::bursty_with_clock(rate, Duration::from_secs(1), clock.clone()).unwrap();
        Rec {
            clock,
            limiter,
            events: vec![],
        }
    }

    fn warming(rate: f64, warmup: Duration, cold_factor: f64) -> Rec {
        let clock = ManualClock::new();
        let limiter =
            Smooth::warming_up_with_clock(rate, warmup, cold_factor, clock.clone()).unwrap();
        Rec {
            clock,
            limiter,
            events: vec![],
        }
    }

    fn acquire(&mut self, permits: u64) -> Duration {
        let before = self.clock.now();
        let wait = self.limiter.acquire(permits);
        // The limiter slept through the clock, exactly its wait.
        assert_eq!(self.clock.now() - before, wait.as_nanos() as u64);
        self.events.push(('R', wait.as_micros() as u64));
        wait
    }

    fn acquire_n(&mut self, times: usize) {
        for _ in 0..times {
            self.acquire(1);
        }
    }

    fn try_acquire(&mut self, permits: u64, timeout: Duration) -> bool {
        let before = self.clock.now();
        let ok = self.limiter.try_acquire(permits, timeout);
        if ok {
            self.events.push(('R', (self.clock.now() - before) / 1000));
        } else {
            assert_eq!(self.clock.now(), before, "a refusal must not sleep");
        }
        ok
    }

    fn sleep_millis(&mut self, ms: u64) {
        self.clock.advance(MS(ms));
        self.events.push(('U', ms * 1000));
    }

    /// Asserts the exact microseconds, and Guava's printed form, then clears.
    fn expect(&mut self, micros: &[(char, u64)], guava: &str) {
        assert_eq!(self.events, micros);
        assert_eq!(guava_format(&self.events), guava);
        self.events.clear();
    }
}

/// Guava's `FakeStopwatch` format: `R` or `U`, then seconds as Java's `%3.2f` (half-up).
fn guava_format(events: &[(char, u64)]) -> String {
    let parts: Vec<String> = events
        .iter()
        .map(|&(c, us)| {
            let cs = (us + 5000) / 10_000;
            format!("{c}{}.{:02}", cs / 100, cs % 100)
        })
        .collect();
    parts.join(", ")
}

fn r(us: &[u64]) -> Vec<(char, u64)> {
    us.iter().map(|&u| ('R', u)).collect()
}

fn u(ms: u64) -> (char, u64) {
    ('U', ms * 1000)
}

fn cat(parts: &[&[(char, u64)]]) -> Vec<(char, u64)> {
    parts.concat()
}

#[test]
fn guava_warm_up_example_waits_to_the_millisecond() {
    let clock = ManualClock::new();
    let limiter =
        Smooth::warming_up_with_clock(2.0, Duration::from_secs(4), 3.0, clock.clone()).unwrap();
    let waits: Vec<Duration> = (0..8).map(|_| limiter.acquire(1)).collect();
    let expected: Vec<Duration> = [0, 1375, 1125, 875, 625, 500, 500, 500].map(MS).to_vec();
    assert_eq!(waits, expected);
    assert_eq!(clock.now(), 5_500_000_000);
}

#[test]
fn bursty_five_per_second_spaces_permits_200ms_apart() {
    let mut t = Rec::bursty(5.0);
    t.acquire_n(3);
    t.expect(&r(&[0, 200_000, 200_000]), "R0.00, R0.20, R0.20");
}

#[test]
fn immediate_try_acquire() {
    let mut t = Rec::bursty(1.0);
    assert!(t.try_acquire(1, Duration::ZERO));
    assert!(!t.try_acquire(1, Duration::ZERO));
}

#[test]
fn smallest_positive_rate_acquires_exactly_once() {
    // Guava's testDoubleMinValueCanAcquireExactlyOnce.
    let mut t = Rec::bursty(f64::from_bits(1));
    assert!(t.try_acquire(1, Duration::ZERO));
    assert!(!t.try_acquire(1, Duration::ZERO));
    t.sleep_millis(i32::MAX as u64);
    assert!(!t.try_acquire(1, Duration::ZERO));
}

#[test]
fn simple_rate_update() {
    let t = Rec::bursty(5.0);
    assert_eq!(t.limiter.rate(), 5.0);
    t.limiter.set_rate(10.0).unwrap();
    assert_eq!(t.limiter.rate(), 10.0);
    for bad in [0.0, -10.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0] {
        assert_eq!(
            t.limiter.set_rate(bad),
            Err(ConfigError::InvalidRate),
            "{bad}"
        );
    }
    assert_eq!(t.limiter.rate(), 10.0);
}

#[test]
fn zero_permits_are_free_and_change_nothing() {
    // Guava throws IllegalArgumentException for 0 permits; here they are a no-op.
    let mut t = Rec::bursty(5.0);
    assert_eq!(t.acquire(0), Duration::ZERO);
    assert!(t.try_acquire(0, Duration::ZERO));
    t.acquire(1);
    assert_eq!(t.acquire(0), Duration::ZERO);
    assert!(t.try_acquire(0, Duration::ZERO));
    assert_eq!(t.acquire(1), MS(200));
    assert_eq!(t.clock.now(), 200_000_000);
}

#[test]
fn simple_with_wait() {
    let mut t = Rec::bursty(5.0);
    t.acquire(1);
    t.sleep_millis(200);
    t.acquire(1);
    t.acquire(1);
    t.expect(
        &cat(&[&r(&[0]), &[u(200)], &r(&[0, 200_000])]),
        "R0.00, U0.20, R0.00, R0.20",
    );
}

#[test]
fn simple_acquire_return_values() {
    let mut t = Rec::bursty(5.0);
    assert_eq!(t.acquire(1), Duration::ZERO);
    t.sleep_millis(200);
    assert_eq!(t.acquire(1), Duration::ZERO);
    assert_eq!(t.acquire(1), MS(200));
    t.expect(
        &cat(&[&r(&[0]), &[u(200)], &r(&[0, 200_000])]),
        "R0.00, U0.20, R0.00, R0.20",
    );
}

#[test]
fn simple_acquire_earliest_available_is_in_past() {
    let mut t = Rec::bursty(5.0);
    assert_eq!(t.acquire(1), Duration::ZERO);
    t.sleep_millis(400);
    assert_eq!(t.acquire(1), Duration::ZERO);
    assert_eq!(t.acquire(1), Duration::ZERO);
    assert_eq!(t.acquire(1), MS(200));
}

#[test]
fn one_second_burst() {
    let mut t = Rec::bursty(5.0);
    t.sleep_millis(1000);
    t.sleep_millis(1000);
    t.acquire(1);
    t.acquire(1);
    t.acquire(3);
    t.acquire(1);
    t.acquire(1);
    t.expect(
        &cat(&[&[u(1000), u(1000)], &r(&[0, 0, 0, 0, 200_000])]),
        "U1.00, U1.00, R0.00, R0.00, R0.00, R0.00, R0.20",
    );
}

#[test]
fn create_warmup_parameter_validation() {
    let c = ManualClock::new;
    assert!(Smooth::warming_up_with_clock(1.0, Duration::from_nanos(1), 3.0, c()).is_ok());
    assert!(Smooth::warming_up_with_clock(1.0, Duration::ZERO, 3.0, c()).is_ok());
    let err = |rate, warmup, cf| Smooth::warming_up_with_clock(rate, warmup, cf, c()).unwrap_err();
    let s = Duration::from_secs(1);
    assert_eq!(
        err(0.0, Duration::from_nanos(1), 3.0),
        ConfigError::InvalidRate
    );
    for rate in [-1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(err(rate, s, 3.0), ConfigError::InvalidRate);
    }
    for cf in [0.999, 0.0, -3.0, f64::NAN, f64::INFINITY] {
        assert_eq!(err(1.0, s, cf), ConfigError::InvalidFactor);
    }
    // Java has no Duration this long; its `long` microseconds stop at i64::MAX.
    assert_eq!(err(1.0, Duration::MAX, 3.0), ConfigError::InvalidDuration);
    // Rates whose trapezoid (or burst) would overflow f64 are far above the highest rate.
    assert_eq!(
        err(1e300, Duration::from_secs(1 << 40), 3.0),
        ConfigError::RateTooHigh
    );
    let bursty_err = |rate, burst| Smooth::bursty_with_clock(rate, burst, c()).unwrap_err();
    assert_eq!(bursty_err(1e300, Duration::MAX), ConfigError::RateTooHigh);
    // At the highest rate the longest warm-up and burst still fit.
    assert!(
        Smooth::warming_up_with_clock(1e6, Duration::from_micros(i64::MAX as u64), 3.0, c())
            .is_ok()
    );
    assert!(Smooth::bursty_with_clock(1e6, Duration::MAX, c()).is_ok());
    assert_eq!(bursty_err(0.0, s), ConfigError::InvalidRate);
    assert_eq!(bursty_err(f64::NAN, s), ConfigError::InvalidRate);
    // ... and set_rate to a rate too high is refused, changing nothing.
    let big = Smooth::bursty_with_clock(1.0, Duration::MAX, c()).unwrap();
    assert_eq!(big.set_rate(1e300), Err(ConfigError::RateTooHigh));
    assert_eq!(big.rate(), 1.0);
}

#[test]
fn zero_warmup_stores_nothing() {
    // Guava: maxPermits = 0 and coolDown = 0/0, so idle time turns its stored permits into NaN
    // and it stops limiting. Here nothing is stored and every permit costs the stable interval.
    let mut t = Rec::warming(5.0, Duration::ZERO, 3.0);
    t.acquire_n(3);
    t.sleep_millis(10_000);
    t.acquire_n(3);
    t.expect(
        &cat(&[
            &r(&[0, 200_000, 200_000]),
            &[u(10_000)],
            &r(&[0, 200_000, 200_000]),
        ]),
        "R0.00, R0.20, R0.20, U10.00, R0.00, R0.20, R0.20",
    );
}

#[test]
fn warm_up() {
    let mut t = Rec::warming(2.0, MS(4000), 3.0);
    let cold = [
        0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000, 500_000, 500_000,
    ];
    let cold_s = "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50";
    t.acquire_n(8);
    t.expect(&r(&cold), cold_s);
    t.sleep_millis(500); // repays the last acquire
    t.sleep_millis(4000); // cold again
    t.acquire_n(8);
    t.expect(
        &cat(&[&[u(500), u(4000)], &r(&cold)]),
        &format!("U0.50, U4.00, {cold_s}"),
    );
    t.sleep_millis(500);
    t.sleep_millis(2000); // not cold yet: it would take 2 more seconds
    t.acquire_n(8);
    t.expect(
        &cat(&[
            &[u(500), u(2000)],
            &r(&[
                0, 500_000, 500_000, 500_000, 500_000, 500_000, 500_000, 500_000,
            ]),
        ]),
        "U0.50, U2.00, R0.00, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50, R0.50",
    );
}

#[test]
fn warm_up_with_cold_factor() {
    let mut t = Rec::warming(5.0, MS(4000), 10.0);
    let cold = [
        0, 1_752_500, 1_257_500, 762_500, 300_227, 200_000, 200_000, 200_000,
    ];
    let cold_s = "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20";
    t.acquire_n(8);
    t.expect(&r(&cold), cold_s);
    t.sleep_millis(200);
    t.sleep_millis(4000);
    t.acquire_n(8);
    t.expect(
        &cat(&[&[u(200), u(4000)], &r(&cold)]),
        &format!("U0.20, U4.00, {cold_s}"),
    );
    t.sleep_millis(200);
    t.sleep_millis(1000); // still warm: 3 more seconds to go cold
    t.acquire_n(8);
    t.expect(
        &cat(&[
            &[u(200), u(1000)],
            &r(&[
                0, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000,
            ]),
        ]),
        "U0.20, U1.00, R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20",
    );
}

#[test]
fn warm_up_with_cold_factor_1() {
    let mut t = Rec::warming(5.0, MS(4000), 1.0);
    let flat = [
        0, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000, 200_000,
    ];
    let flat_s = "R0.00, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20, R0.20";
    t.acquire_n(8);
    t.expect(&r(&flat), flat_s);
    t.sleep_millis(340);
    t.acquire_n(8);
    t.expect(&cat(&[&[u(340)], &r(&flat)]), &format!("U0.34, {flat_s}"));
}

#[test]
fn warm_up_and_update() {
    let mut t = Rec::warming(2.0, MS(4000), 3.0);
    t.acquire_n(8);
    t.expect(
        &r(&[
            0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000, 500_000, 500_000,
        ]),
        "R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50",
    );
    t.sleep_millis(4500); // cold again (warm-up + repaying the last acquire)
    t.acquire_n(3); // somewhere in the warm-up
    t.limiter.set_rate(4.0).unwrap(); // double the rate
    t.acquire(1); // repays the last acquire at the old rate
    t.acquire_n(4);
    t.expect(
        &cat(&[
            &[u(4500)],
            &r(&[
                0, 1_375_000, 1_125_000, 875_000, 343_750, 281_250, 250_000, 250_000,
            ]),
        ]),
        "U4.50, R0.00, R1.38, R1.13, R0.88, R0.34, R0.28, R0.25, R0.25",
    );
    t.sleep_millis(4250); // cold again
    t.acquire_n(11); // the same area (time), twice the permits
    t.expect(
        &cat(&[
            &[u(4250)],
            &r(&[
                0, 718_750, 656_250, 593_750, 531_250, 468_750, 406_250, 343_750, 281_250, 250_000,
                250_000,
            ]),
        ]),
        "U4.25, R0.00, R0.72, R0.66, R0.59, R0.53, R0.47, R0.41, R0.34, R0.28, R0.25, R0.25",
    );
}

#[test]
fn warm_up_and_update_with_cold_factor() {
    let mut t = Rec::warming(5.0, MS(4000), 10.0);
    t.acquire_n(8);
    t.expect(
        &r(&[
            0, 1_752_500, 1_257_500, 762_500, 300_227, 200_000, 200_000, 200_000,
        ]),
        "R0.00, R1.75, R1.26, R0.76, R0.30, R0.20, R0.20, R0.20",
    );
    t.sleep_millis(4200);
    t.acquire_n(3);
    t.limiter.set_rate(10.0).unwrap();
    t.acquire(1);
    t.acquire_n(4);
    t.expect(
        &cat(&[
            &[u(4200)],
            &r(&[
                0, 1_752_500, 1_257_500, 762_500, 195_625, 104_602, 100_000, 100_000,
            ]),
        ]),
        "U4.20, R0.00, R1.75, R1.26, R0.76, R0.20, R0.10, R0.10, R0.10",
    );
    t.sleep_millis(4100);
    t.acquire_n(11);
    t.expect(
        &cat(&[
            &[u(4100)],
            &r(&[
                0, 938_125, 814_375, 690_625, 566_875, 443_125, 319_375, 195_625, 104_602, 100_000,
                100_000,
            ]),
        ]),
        "U4.10, R0.00, R0.94, R0.81, R0.69, R0.57, R0.44, R0.32, R0.20, R0.10, R0.10, R0.10",
    );
}

#[test]
fn bursty_and_update() {
    let mut t = Rec::bursty(1.0);
    t.acquire(1); // no wait
    t.acquire(1); // 1 s: repays the previous one
    t.limiter.set_rate(2.0).unwrap();
    t.acquire(1); // 1 s: the previous one was at the old rate
    t.acquire(2); // 0.5 s: the new rate
    t.acquire(4); // 1 s
    t.acquire(1); // 2 s
    t.expect(
        &r(&[0, 1_000_000, 1_000_000, 500_000, 1_000_000, 2_000_000]),
        "R0.00, R1.00, R1.00, R0.50, R1.00, R2.00",
    );
}

#[test]
fn simple_weights() {
    let mut t = Rec::bursty(1.0);
    for p in [1, 1, 2, 4, 8, 1] {
        t.acquire(p);
    }
    t.expect(
        &r(&[0, 1_000_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000]),
        "R0.00, R1.00, R1.00, R2.00, R4.00, R8.00",
    );
}

#[test]
fn try_acquire_no_wait_allowed() {
    let mut t = Rec::bursty(5.0);
    assert!(t.try_acquire(1, Duration::ZERO));
    assert!(!t.try_acquire(1, Duration::ZERO));
    assert!(!t.try_acquire(1, Duration::ZERO));
    t.sleep_millis(100);
    assert!(!t.try_acquire(1, Duration::ZERO));
    t.expect(&[('R', 0), u(100)], "R0.00, U0.10");
}

#[test]
fn try_acquire_some_wait_allowed() {
    let mut t = Rec::bursty(5.0);
    assert!(t.try_acquire(1, Duration::ZERO));
    assert!(t.try_acquire(1, MS(200)));
    assert!(!t.try_acquire(1, MS(100)));
    t.sleep_millis(100);
    assert!(t.try_acquire(1, MS(100)));
    t.expect(
        &[('R', 0), ('R', 200_000), u(100), ('R', 100_000)],
        "R0.00, R0.20, U0.10, R0.10",
    );
}

#[test]
fn try_acquire_overflow() {
    for huge in [Duration::from_micros(i64::MAX as u64), Duration::MAX] {
        let mut t = Rec::bursty(5.0);
        assert!(t.try_acquire(1, Duration::ZERO));
        t.sleep_millis(100);
        assert!(t.try_acquire(1, huge));
        t.expect(&[('R', 0), u(100), ('R', 100_000)], "R0.00, U0.10, R0.10");
    }
}

#[test]
fn try_acquire_negative_timeouts_are_zero() {
    // Guava's testTryAcquire_negative: negative timeouts count as zero; a Duration is never
    // negative, so the port uses zero.
    let mut t = Rec::bursty(5.0);
    assert!(t.try_acquire(5, Duration::ZERO));
    t.sleep_millis(900);
    assert!(!t.try_acquire(1, Duration::ZERO));
    t.sleep_millis(100);
    assert!(t.try_acquire(1, Duration::ZERO));
    t.expect(
        &[('R', 0), u(900), u(100), ('R', 0)],
        "R0.00, U0.90, U0.10, R0.00",
    );
}

#[test]
fn try_acquire_timeout_truncates_to_micros() {
    let mut t = Rec::bursty(5.0);
    assert!(t.try_acquire(1, Duration::ZERO));
    // Next free in 200 000 µs; 199 999.999 µs truncates to 199 999 µs: refused.
    assert!(!t.try_acquire(1, Duration::from_nanos(199_999_999)));
    assert!(t.try_acquire(1, Duration::from_nanos(200_000_999)));
}

#[test]
fn infinite_rates_are_rejected() {
    // Guava's testInfinity_* use +inf as "unlimited"; here it is a ConfigError, and a finite
    // limiter is never switched to it.
    let c = ManualClock::new;
    let inf = f64::INFINITY;
    assert_eq!(
        Smooth::bursty_with_clock(inf, MS(1000), c()).unwrap_err(),
        ConfigError::InvalidRate
    );
    assert_eq!(
        Smooth::warming_up_with_clock(inf, MS(10_000), 3.0, c()).unwrap_err(),
        ConfigError::InvalidRate
    );
    let mut t = Rec::bursty(2.0);
    assert_eq!(t.limiter.set_rate(inf), Err(ConfigError::InvalidRate));
    t.acquire_n(3);
    t.expect(&r(&[0, 500_000, 500_000]), "R0.00, R0.50, R0.50");
}

#[test]
fn highest_rate_then_slow() {
    // The finite analogue of Guava's testInfinity_BustyTimeElapsed: the highest rate, time
    // passes, then 2 permits/s: first the saved-up 1 s burst (2 permits), then the free
    // request, then 0.5 s each.
    let mut t = Rec::bursty(1e6);
    t.sleep_millis(1000);
    t.limiter.set_rate(2.0).unwrap();
    t.acquire_n(5);
    t.expect(
        &cat(&[&[u(1000)], &r(&[0, 0, 0, 500_000, 500_000])]),
        "U1.00, R0.00, R0.00, R0.00, R0.50, R0.50",
    );
}

#[test]
fn rates_above_one_per_microsecond_are_rejected() {
    // Above 1e6 permits/s the stable interval is under 1 µs and Guava's whole-microsecond
    // truncation charges a single permit 0 µs: nothing would be limited.
    let c = ManualClock::new;
    for rate in [1_000_000.5, 2e6, 1e9, 1e300, f64::MAX] {
        assert_eq!(
            Smooth::bursty_with_clock(rate, MS(1000), c()).unwrap_err(),
            ConfigError::RateTooHigh,
            "{rate}"
        );
        assert_eq!(
            Smooth::warming_up_with_clock(rate, MS(1000), 3.0, c()).unwrap_err(),
            ConfigError::RateTooHigh,
            "{rate}"
        );
    }
    assert!(ConfigError::RateTooHigh.to_string().contains("1,000,000"));
    // 1e6 itself is limited: one permit per microsecond.
    let clock = c();
    let limiter = Smooth::bursty_with_clock(1e6, Duration::ZERO, clock.clone()).unwrap();
    assert!(limiter.try_acquire(1, Duration::ZERO));
    assert!(!limiter.try_acquire(1, Duration::ZERO));
    clock.advance(Duration::from_micros(1));
    assert!(limiter.try_acquire(1, Duration::ZERO));
    // set_rate refuses too, and changes nothing.
    assert_eq!(limiter.set_rate(1e7), Err(ConfigError::RateTooHigh));
    assert_eq!(limiter.rate(), 1e6);
}

/// java.util.Random, for weights and for replaying the JVM-checked runs.
struct JavaRandom(u64);

impl JavaRandom {
    fn new(seed: u64) -> JavaRandom {
        JavaRandom((seed ^ 0x5DEECE66D) & ((1 << 48) - 1))
    }

    fn next(&mut self, bits: u32) -> i32 {
        self.0 = (self.0.wrapping_mul(0x5DEECE66D).wrapping_add(0xB)) & ((1 << 48) - 1);
        (self.0 >> (48 - bits)) as i32
    }

    fn next_int(&mut self, bound: i32) -> i32 {
        let mut r = self.next(31);
        let m = bound - 1;
        if bound & m == 0 {
            return ((bound as i64 * r as i64) >> 31) as i32;
        }
        let mut u = r;
        loop {
            r = u % bound;
            if u.wrapping_sub(r).wrapping_add(m) >= 0 {
                return r;
            }
            u = self.next(31);
        }
    }
}

/// Guava's `measureTotalTimeMillis`: acquire `permits` in random chunks, then 1 more to repay.
fn measure_total_time_millis(t: &mut Rec, mut permits: i32, rng: &mut JavaRandom) -> u64 {
    let start = t.clock.now();
    while permits > 0 {
        let next = rng.next_int(permits).max(1);
        permits -= next;
        t.acquire(next as u64);
    }
    t.acquire(1);
    (t.clock.now() - start) / 1_000_000
}

#[test]
fn time_to_warm_up_is_honoured_even_with_weights() {
    let mut rng = JavaRandom::new(20_240_601);
    let warmup_permits = 10;
    for _trial in 0..100 {
        for cold_factor in [2.0, 3.0, 10.0] {
            for qps in [4.0, 2.0, 1.0, 0.5, 0.1] {
                // With warmupPermits = max − threshold:
                // warmup = (1 + cold_factor) · warmupPermits · stable / 2.
                let warmup_millis =
                    ((1.0 + cold_factor) * warmup_permits as f64 / (2.0 * qps) * 1000.0) as u64;
                let mut t = Rec::warming(qps, MS(warmup_millis), cold_factor);
                assert_eq!(
                    measure_total_time_millis(&mut t, warmup_permits, &mut rng),
                    warmup_millis,
                    "cold factor {cold_factor}, qps {qps}"
                );
            }
        }
    }
}

#[test]
fn we_never_get_a_burst_more_than_one_sec() {
    let mut rng = JavaRandom::new(7);
    let mut t = Rec::bursty(1.0);
    for rate in [1000, 1, 10, 1_000_000, 10, 1] {
        t.sleep_millis(rate as u64 * 1000);
        t.limiter.set_rate(rate as f64).unwrap();
        // One second of work may go in a burst ...
        assert!(
            measure_total_time_millis(&mut t, rate, &mut rng) <= 1000,
            "rate {rate}"
        );
        // ... but work beyond that takes at least one second.
        assert!(
            measure_total_time_millis(&mut t, rate, &mut rng) >= 1000,
            "rate {rate}"
        );
    }
}

/// A rate spread over many orders of magnitude.
fn random_rate(rng: &mut Rng) -> f64 {
    let r = 10f64.powf(rng.unit() * 8.0 - 3.0); // 0.001 ..= 100 000 per second
    if rng.below(4) == 0 {
        r.round().max(1.0) // whole rates are common in practice
    } else {
        r
    }
}

/// A mismatch between `Smooth` and Guava: where, and by how many microseconds the wait differed
/// (`None`: a `try_acquire` decided differently).
struct Mismatch {
    context: String,
    micros: Option<i64>,
}

/// Runs `cases` random limiters for `steps` random operations each, `Smooth` against
/// `Reference`; returns the operations compared and the mismatches (a case stops at its first).
/// `long`: maximum bursts and warm-ups beyond 2^21 µs (up to 123 s).
fn differential(seed: u64, cases: u32, steps: u32, long: bool) -> (u64, Vec<Mismatch>) {
    let mut rng = Rng(seed);
    let mut ops = 0;
    let mut mismatches = vec![];
    for case in 0..cases {
        let origin = rng.below(5_000_000_000);
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(origin));
        let rate = random_rate(&mut rng);
        let (limiter, mut reference) = if case % 2 == 0 {
            let burst_ms = if long { [3500, 60_000] } else { [1000, 2097] }[rng.below(2) as usize];
            let burst_ms = [0, 1, 250, 1000, burst_ms][rng.below(5) as usize];
            (
                Smooth::bursty_with_clock(rate, MS(burst_ms), clock.clone()).unwrap(),
                Reference::bursty(rate, MS(burst_ms).as_secs_f64()),
            )
        } else {
            let warmup_us = if long {
                [4_000_000, 123_456_789]
            } else {
                [2_000_000, 1 << 21]
            }[rng.below(2) as usize];
            let warmup_us = [1, 2, 999, 500_000, warmup_us][rng.below(5) as usize];
            let cold_factor = [1.0, 1.5, 3.0, 10.0, 1.0 + rng.unit() * 20.0][rng.below(5) as usize];
            (
                Smooth::warming_up_with_clock(
                    rate,
                    Duration::from_micros(warmup_us),
                    cold_factor,
                    clock.clone(),
                )
                .unwrap(),
                Reference::warming(rate, warmup_us as i64, cold_factor),
            )
        };
        let mut prev = String::new();
        for step in 0..steps {
            let now_us = ((clock.now() - origin) / 1000) as i64;
            let before = format!(
                "case {case} step {step} now {now_us} {reference:?} stored_bits {:x}",
                reference.stored.to_bits()
            );
            let (got, want) = match rng.below(10) {
                0..=3 => {
                    let big = rng.below(8) == 0;
                    let permits = 1 + rng.below(if big { 1000 } else { 4 });
                    let want = reference.reserve(permits, now_us);
                    (
                        Some(limiter.acquire(permits).as_micros() as i64),
                        Some(want),
                    )
                }
                4..=5 => {
                    let permits = 1 + rng.below(3);
                    let timeout_us = rng.below(2 * (reference.stable as u64).clamp(1, 10_000_000));
                    let want = reference.try_acquire(permits, timeout_us as i64, now_us);
                    let t0 = clock.now();
                    let ok = limiter.try_acquire(permits, Duration::from_micros(timeout_us));
                    (ok.then(|| ((clock.now() - t0) / 1000) as i64), want)
                }
                6..=8 => {
                    // Idle time: sub-microsecond parts exercise the truncation to micros.
                    let scale = (reference.stable as u64).clamp(1, 50_000_000);
                    clock.advance(Duration::from_nanos(
                        rng.below(scale * 3000) + rng.below(1000),
                    ));
                    (None, None)
                }
                _ => {
                    let new_rate = if rng.below(2) == 0 {
                        rate * (0.25 + rng.unit() * 4.0)
                    } else {
                        random_rate(&mut rng)
                    };
                    limiter.set_rate(new_rate).unwrap();
                    reference.set_rate(new_rate, now_us);
                    (None, None)
                }
            };
            ops += 1;
            if got != want {
                mismatches.push(Mismatch {
                    context: format!("{prev}\n  {before}: got {got:?}, Guava {want:?}"),
                    micros: got.zip(want).map(|(g, w)| g - w),
                });
                break;
            }
            prev = before;
        }
    }
    (ops, mismatches)
}

fn cases_from_env(default: u32) -> u32 {
    std::env::var("SMOOTH_DIFF_CASES").map_or(default, |v| v.parse().unwrap())
}

/// With bursts and warm-ups up to 2^21 µs, every stored-permit value Guava produces is a whole
/// number of fixed-point units: bit-exact. (`SMOOTH_DIFF_CASES=20000` runs 12 million
/// operations; none differs.)
#[test]
fn matches_guava_transcription_on_random_operations() {
    let (ops, mismatches) = differential(0x5EED, cases_from_env(400), 600, false);
    for m in &mismatches {
        eprintln!("{}", m.context);
    }
    assert!(ops > 200_000);
    assert!(mismatches.is_empty(), "{} mismatches", mismatches.len());
}

/// Beyond 2^21 µs, an idle gap shorter than `warm-up / 2^21` earns a stored-permit value finer
/// than the fixed point's unit; its rounding (by at most `max · 2^-74` permit) moves a later
/// wait by one microsecond in a few cases per million operations. Nothing larger.
#[test]
fn long_warmups_differ_by_at_most_one_microsecond_rarely() {
    let (ops, mismatches) = differential(0xB16, cases_from_env(400), 600, true);
    eprintln!("{ops} operations, {} mismatches", mismatches.len());
    for m in &mismatches {
        eprintln!("{}", m.context);
        assert!(matches!(m.micros, None | Some(-1 | 1)), "{}", m.context);
    }
    assert!(
        mismatches.len() as u64 <= ops / 20_000,
        "{} mismatches",
        mismatches.len()
    );
}

/// Replays runs whose results were computed on the JVM by `tests/jvm/SmoothChecksums.java`
/// (`java tests/jvm/SmoothChecksums.java`), a Java transcription of Guava's decision code with
/// the same `java.util.Random` seeds and operations: the checksum of every wait and refusal, and
/// three final probes. The program applies Guava's arithmetic plus tollgate's one documented
/// `set_rate` deviation (two `set_rate` calls with no request between them that moved the next
/// free time move it on by 1 µs; see `Smooth::set_rate`). With `--guava` it leaves the deviation
/// out and prints the checksums of Guava alone, which tollgate matched before it had the
/// deviation: 4845020308479359943, 1113953448773396441, 8218528281018217803,
/// -6083411893860895545, -9207990814305044040 and 6565947199207368870, with the same probes.
#[test]
fn matches_jvm_checksums() {
    // (seed, bursty?, rate, burst seconds or warm-up micros, cold factor, hash, probes)
    type Run = (u64, bool, f64, f64, f64, i64, [u64; 3]);
    let runs: [Run; 6] = [
        (12345, true, 5.0, 1.0, 0.0, 7973873116926685762, [0, 0, 0]),
        (
            12346,
            false,
            2.0,
            4_000_000.0,
            3.0,
            -6554467737164881986,
            [431965, 215982, 215981],
        ),
        (12347, true, 0.3, 3.5, 0.0, 6227415016892703144, [0, 0, 0]),
        (
            12348,
            false,
            7.0,
            1_234_567.0,
            10.0,
            9062652538093637192,
            [0, 309811, 265645],
        ),
        (
            12349,
            true,
            1234.5,
            0.25,
            0.0,
            -5767384896334622889,
            [3278688, 1639344, 1639344],
        ),
        (
            12350,
            false,
            0.5,
            10_000_000.0,
            1.5,
            -1004697732860754331,
            [174566, 86945, 86720],
        ),
    ];
    for (seed, bursty, rate, dur, cold_factor, hash, probes) in runs {
        let clock = ManualClock::new();
        let limiter = if bursty {
            Smooth::bursty_with_clock(rate, Duration::from_secs_f64(dur), clock.clone()).unwrap()
        } else {
            Smooth::warming_up_with_clock(
                rate,
                Duration::from_micros(dur as u64),
                cold_factor,
                clock.clone(),
            )
            .unwrap()
        };
        let mut rnd = JavaRandom::new(seed);
        let mut h: i64 = 17;
        for _ in 0..2000 {
            let op = rnd.next_int(10);
            if op < 5 {
                let permits = 1 + rnd.next_int(5) as u64;
                let wait = limiter.acquire(permits).as_micros() as i64;
                h = h.wrapping_mul(31).wrapping_add(wait);
            } else if op < 8 {
                let ms = rnd.next_int(3_000_000) as u64;
                let ns = rnd.next_int(1000) as u64;
                clock.advance(Duration::from_nanos(ms * 1000 + ns));
            } else if op < 9 {
                let permits = 1 + rnd.next_int(3) as u64;
                let timeout = rnd.next_int(500_000) as u64;
                let ok = limiter.try_acquire(permits, Duration::from_micros(timeout));
                h = h.wrapping_mul(31).wrapping_add(ok as i64);
            } else {
                limiter
                    .set_rate(0.25 + rnd.next_int(4000) as f64 / 100.0)
                    .unwrap();
            }
        }
        assert_eq!(h, hash, "seed {seed}");
        let p1 = limiter.acquire(1).as_micros() as u64;
        let p2 = limiter.acquire(1).as_micros() as u64;
        // The third probe is measured without sleeping: try with an unbounded timeout would
        // sleep too, which is fine on a manual clock.
        let before = clock.now();
        let p3 = limiter.acquire(3).as_micros() as u64;
        assert_eq!(clock.now() - before, p3 * 1000);
        assert_eq!([p1, p2, p3], probes, "seed {seed}");
    }
}

#[test]
fn creation_time_is_the_origin() {
    // Guava's stopwatch starts when the limiter is created: a limiter made at 7.0000005 s
    // counts whole microseconds from there.
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(7_000_000_500));
    let limiter = Smooth::bursty_with_clock(1.0, MS(1000), clock.clone()).unwrap();
    assert_eq!(limiter.acquire(1), Duration::ZERO);
    clock.advance(Duration::from_nanos(999_999_999)); // 999 999.999 µs → 999 999 µs
    assert!(!limiter.try_acquire(1, Duration::ZERO));
    clock.advance(Duration::from_nanos(1)); // exactly 1 s after creation
    assert!(limiter.try_acquire(1, Duration::ZERO));
}

#[test]
fn never_panics_on_extreme_inputs() {
    let clock = ManualClock::new();
    let rates = [
        f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        1e-9,
        1.0,
        1e6,
        1e9,
        1e300,
        f64::MAX,
    ];
    for &rate in &rates {
        for burst in [
            Duration::ZERO,
            Duration::from_nanos(1),
            MS(1000),
            Duration::MAX,
        ] {
            if let Ok(l) = Smooth::bursty_with_clock(rate, burst, clock.clone()) {
                exercise(&l, &clock, &rates);
            }
        }
        for warmup in [
            Duration::ZERO,
            Duration::from_nanos(1),
            MS(1000),
            Duration::from_secs(1 << 40),
        ] {
            for cf in [1.0, 3.0, 1e300] {
                if let Ok(l) = Smooth::warming_up_with_clock(rate, warmup, cf, clock.clone()) {
                    exercise(&l, &clock, &rates);
                }
            }
        }
    }
}

fn exercise(l: &Smooth<ManualClock>, clock: &ManualClock, rates: &[f64]) {
    for permits in [1, 2, u64::MAX, 1 << 53, 0] {
        let _ = l.acquire(permits);
        let _ = l.try_acquire(permits, Duration::MAX);
        let _ = l.try_acquire(permits, Duration::ZERO);
    }
    for &r in rates {
        let _ = l.set_rate(r);
        let _ = l.acquire(1);
    }
    clock.set(Duration::MAX);
    let _ = l.acquire(u64::MAX);
    clock.set(Duration::ZERO); // backwards: tolerated
    assert!(!l.try_acquire(1, Duration::ZERO) || l.acquire(1) >= Duration::ZERO);
    let _ = l.rate();
    let _ = format!("{l:?}");
}

/// Stored permits are kept in fixed point rounded toward the stricter limiter (down when
/// bursty), so a wait is never shorter than real Guava's: with a burst of a year, Guava 31.1's
/// 1,510,323 µs (rounding to nearest would give 1,510,322), and with `Duration::MAX` (a unit of
/// 1,024 permits) at least Guava's 999,040 µs at 10^6/s (rounding to nearest: 998,528).
#[test]
fn stored_permits_never_round_toward_more_than_guava_holds() {
    let clock = ManualClock::new();
    let year =
        Smooth::bursty_with_clock(1.0, Duration::from_secs(31_536_000), clock.clone()).unwrap();
    assert_eq!(year.acquire(1), Duration::ZERO);
    clock.set(Duration::from_micros(2_489_677));
    assert!(year.try_acquire(1, Duration::ZERO));
    assert!(year.try_acquire(2, Duration::ZERO));
    assert_eq!(year.acquire(1), Duration::from_micros(1_510_323));

    let clock = ManualClock::new();
    let max = Smooth::bursty_with_clock(1e6, Duration::MAX, clock.clone()).unwrap();
    assert_eq!(max.acquire(1), Duration::ZERO);
    let t = Duration::from_micros(1_000_962);
    clock.set(t);
    assert_eq!(max.acquire(1), Duration::ZERO);
    max.acquire(2_000_000);
    clock.set(t);
    // Guava waits 999,040 µs; a unit of 1,024 permits cannot hold its 1,000,960 stored permits,
    // so the crate keeps 1,000,448 and waits 512 µs longer: never shorter.
    assert_eq!(max.acquire(1), Duration::from_micros(999_552));
}
