// The JVM side of `matches_jvm_checksums` in tests/smooth.rs.
//
// A Java transcription of the decision arithmetic of Guava's SmoothRateLimiter (SmoothBursty and
// SmoothWarmingUp: doSetRate, resync, reserveEarliestAvailable, storedPermitsToWaitTime, the
// canAcquire rule of tryAcquire, saturated adds) and of RateLimiter's acquire / tryAcquire /
// setRate, on a fake stopwatch that reads whole microseconds since the limiter was created, as
// Guava's does. It replays the six runs of the Rust test with the same java.util.Random seeds
// and operations, and prints for each the hash of every wait and refusal and the three probes.
// It needs nothing but a JDK (17 or later; single-file launch, no build step):
//
//     java tests/jvm/SmoothChecksums.java                          # what the Rust test expects
//     java tests/jvm/SmoothChecksums.java --guava                  # Guava's arithmetic only
//
// By default it also applies tollgate's one documented set_rate deviation (see `Smooth::set_rate`
// in src/smooth.rs): each setRate remembers the next free time of the state it replaced (before
// its own resync); when a setRate follows an earlier one and its converted next free time is at
// most the value the previous setRate remembered, it moves it on to that value + 1 µs (capped at
// tollgate's 2^53 - 1 µs). In effect, two setRate calls with no request between them that moved
// the next free time move it on by 1 µs; Guava leaves it. `--guava` turns that off, and then the
// program prints the checksums tollgate matched before it had the deviation.
//
// Written from Guava's formulas, not copied from its source.

import java.util.Random;

public final class SmoothChecksums {
    /** tollgate's largest next free time, 2^53 - 1 µs. */
    static final long MAX_MICROS = (1L << 53) - 1;

    /** A manual stopwatch in nanoseconds; the limiter is created at 0. */
    static final class FakeClock {
        long nanos;

        long readMicros() {
            return nanos / 1000;
        }

        void sleepMicros(long micros) {
            if (micros > 0) {
                nanos += micros * 1000;
            }
        }
    }

    /** Guava's smooth limiter state and parameters, bursty or warming up. */
    static final class Limiter {
        final FakeClock clock;
        final boolean warming;
        final boolean tollgateRule;
        // Constants of the mode.
        final double maxBurstSeconds;
        final long warmupPeriodMicros;
        final double coldFactor;
        // Derived from the rate.
        double stableIntervalMicros;
        double maxPermits;
        double thresholdPermits;
        double slope;
        // The state.
        double storedPermits;
        long nextFreeTicketMicros;
        // tollgate's deviation: the next free time the last setRate replaced.
        boolean hasRetired;
        long retiredNext;

        private Limiter(FakeClock clock, boolean warming, double maxBurstSeconds,
                long warmupPeriodMicros, double coldFactor, boolean tollgateRule) {
            this.clock = clock;
            this.warming = warming;
            this.maxBurstSeconds = maxBurstSeconds;
            this.warmupPeriodMicros = warmupPeriodMicros;
            this.coldFactor = coldFactor;
            this.tollgateRule = tollgateRule;
        }

        static Limiter bursty(FakeClock clock, double rate, double maxBurstSeconds, boolean rule) {
            Limiter l = new Limiter(clock, false, maxBurstSeconds, 0, 0.0, rule);
            l.convert(rate, clock.readMicros()); // the constructor's setRate: not a reconfiguration
            return l;
        }

        static Limiter warming(FakeClock clock, double rate, long warmupMicros, double coldFactor,
                boolean rule) {
            Limiter l = new Limiter(clock, true, 0.0, warmupMicros, coldFactor, rule);
            l.convert(rate, clock.readMicros());
            return l;
        }

        double coolDownIntervalMicros() {
            return warming ? warmupPeriodMicros / maxPermits : stableIntervalMicros;
        }

        /** Idle time since the next free time becomes stored permits. */
        void resync(long now) {
            if (now > nextFreeTicketMicros) {
                double earned = (now - nextFreeTicketMicros) / coolDownIntervalMicros();
                storedPermits = Math.min(maxPermits, storedPermits + earned);
                nextFreeTicketMicros = now;
            }
        }

        /** Resync, the new stable interval, then the mode's maxima and the stored rescale. */
        void convert(double rate, long now) {
            resync(now);
            stableIntervalMicros = 1_000_000L / rate;
            double oldMax = maxPermits;
            if (warming) {
                double coldInterval = stableIntervalMicros * coldFactor;
                thresholdPermits = 0.5 * warmupPeriodMicros / stableIntervalMicros;
                maxPermits = thresholdPermits
                        + 2.0 * warmupPeriodMicros / (stableIntervalMicros + coldInterval);
                slope = (coldInterval - stableIntervalMicros) / (maxPermits - thresholdPermits);
                if (oldMax == Double.POSITIVE_INFINITY) {
                    storedPermits = 0.0;
                } else if (oldMax == 0.0) {
                    storedPermits = maxPermits; // starts cold
                } else {
                    storedPermits = storedPermits * maxPermits / oldMax;
                }
            } else {
                maxPermits = maxBurstSeconds * rate;
                if (oldMax == Double.POSITIVE_INFINITY) {
                    storedPermits = maxPermits;
                } else if (oldMax == 0.0) {
                    storedPermits = 0.0; // starts empty
                } else {
                    storedPermits = storedPermits * maxPermits / oldMax;
                }
            }
        }

        /** RateLimiter.setRate, plus tollgate's deviation when enabled. */
        void setRate(double rate) {
            long now = clock.readMicros();
            long replaced = nextFreeTicketMicros;
            convert(rate, now);
            if (tollgateRule) {
                if (hasRetired && nextFreeTicketMicros <= retiredNext) {
                    nextFreeTicketMicros = Math.min(retiredNext + 1, MAX_MICROS);
                }
                hasRetired = true;
                retiredNext = replaced;
            }
        }

        double permitsToTime(double permits) {
            return stableIntervalMicros + permits * slope;
        }

        /** The cost of taking `take` of the `stored` permits: the trapezoid's area (warming up). */
        long storedPermitsToWaitTime(double stored, double take) {
            if (!warming) {
                return 0L;
            }
            double above = stored - thresholdPermits;
            long micros = 0L;
            if (above > 0.0) {
                double fromAbove = Math.min(above, take);
                double length = permitsToTime(above) + permitsToTime(above - fromAbove);
                micros = (long) (fromAbove * length / 2.0);
                take -= fromAbove;
            }
            return micros + (long) (stableIntervalMicros * take);
        }

        /** Takes the permits; returns the moment the caller may go (before this request's cost). */
        long reserveEarliestAvailable(int permits, long now) {
            resync(now);
            long moment = nextFreeTicketMicros;
            double fromStored = Math.min(permits, storedPermits);
            double fresh = permits - fromStored;
            long wait = storedPermitsToWaitTime(storedPermits, fromStored)
                    + (long) (fresh * stableIntervalMicros);
            nextFreeTicketMicros = saturatedAdd(nextFreeTicketMicros, wait);
            storedPermits -= fromStored;
            return moment;
        }

        long reserveAndGetWaitLength(int permits, long now) {
            return Math.max(reserveEarliestAvailable(permits, now) - now, 0);
        }

        /** RateLimiter.acquire, returning the wait in microseconds (Guava returns seconds). */
        long acquire(int permits) {
            long wait = reserveAndGetWaitLength(permits, clock.readMicros());
            clock.sleepMicros(wait);
            return wait;
        }

        /** RateLimiter.tryAcquire with a timeout in microseconds. */
        boolean tryAcquire(int permits, long timeoutMicros) {
            long timeout = Math.max(timeoutMicros, 0);
            long now = clock.readMicros();
            if (nextFreeTicketMicros - timeout > now) {
                return false;
            }
            clock.sleepMicros(reserveAndGetWaitLength(permits, now));
            return true;
        }
    }

    /** Guava's LongMath.saturatedAdd. */
    static long saturatedAdd(long a, long b) {
        long sum = a + b;
        if (((a ^ b) < 0) | ((a ^ sum) >= 0)) {
            return sum;
        }
        return Long.MAX_VALUE + ((sum >>> 63) ^ 1);
    }

    /** One run: the seed and limiter of a row of the Rust test's table. */
    static void run(long seed, boolean bursty, double rate, double dur, double coldFactor,
            boolean rule) {
        FakeClock clock = new FakeClock();
        Limiter l = bursty
                ? Limiter.bursty(clock, rate, dur, rule)
                : Limiter.warming(clock, rate, (long) dur, coldFactor, rule);
        Random rnd = new Random(seed);
        long h = 17;
        for (int i = 0; i < 2000; i++) {
            int op = rnd.nextInt(10);
            if (op < 5) {
                int permits = 1 + rnd.nextInt(5);
                h = h * 31 + l.acquire(permits);
            } else if (op < 8) {
                long micros = rnd.nextInt(3_000_000);
                long nanos = rnd.nextInt(1000);
                clock.nanos += micros * 1000 + nanos;
            } else if (op < 9) {
                int permits = 1 + rnd.nextInt(3);
                long timeout = rnd.nextInt(500_000);
                h = h * 31 + (l.tryAcquire(permits, timeout) ? 1 : 0);
            } else {
                l.setRate(0.25 + rnd.nextInt(4000) / 100.0);
            }
        }
        long p1 = l.acquire(1);
        long p2 = l.acquire(1);
        long p3 = l.acquire(3);
        System.out.printf("seed %d: hash %d, probes [%d, %d, %d]%n", seed, h, p1, p2, p3);
    }

    public static void main(String[] args) {
        boolean rule = true;
        for (String a : args) {
            switch (a) {
                case "--guava" -> rule = false;
                case "--tollgate-set-rate-rule" -> rule = true;
                default -> {
                    System.err.println("usage: java SmoothChecksums.java [--guava | --tollgate-set-rate-rule]");
                    System.exit(2);
                }
            }
        }
        System.out.println(rule
                ? "Guava's SmoothRateLimiter plus tollgate's set_rate deviation"
                : "Guava's SmoothRateLimiter");
        run(12345, true, 5.0, 1.0, 0.0, rule);
        run(12346, false, 2.0, 4_000_000.0, 3.0, rule);
        run(12347, true, 0.3, 3.5, 0.0, rule);
        run(12348, false, 7.0, 1_234_567.0, 10.0, rule);
        run(12349, true, 1234.5, 0.25, 0.0, rule);
        run(12350, false, 0.5, 10_000_000.0, 1.5, rule);
    }
}
