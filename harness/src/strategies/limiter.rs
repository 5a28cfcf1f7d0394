//! The [`RateLimiter`] trait every strategy implements, and the [`Strategy`] factory the runner
//! builds a fresh limiter from for every cell.

use crate::BuildError;
use std::fmt;
use tollgate::{DefaultClock, Denied, Quota};

/// One synchronization strategy around a rate-limit decision: what the harness measures.
///
/// Implement it for your own limiter, wrap it in a [`Strategy`] and hand it to
/// [`crate::cli::main_with`] or [`crate::compare()`] to compare it with the built-ins.
///
/// Keyed limiters override [`try_acquire_key`](RateLimiter::try_acquire_key) and
/// [`is_keyed`](RateLimiter::is_keyed); the runner then draws a key per operation from
/// `--keys N` keys and checks the bound per key.
///
/// ```
/// use std::sync::Mutex;
/// use tollgate::{gcra, Clock, Denied, ManualClock, Quota};
/// use tollgate_bench::RateLimiter;
///
/// struct MyMutex { state: Mutex<u64>, quota: Quota, clock: ManualClock }
/// impl RateLimiter for MyMutex {
///     fn try_acquire(&self, cost: u64) -> Result<(), Denied> {
///         let now = self.clock.now();
///         let mut state = self.state.lock().unwrap();
///         if let Some(next) = gcra::try_acquire(*state, now, &self.quota, cost)? {
///             *state = next;
///         }
///         Ok(())
///     }
///     fn name(&self) -> &str { "my-mutex" }
/// }
///
/// let limiter = MyMutex { state: Mutex::new(gcra::FULL), quota: Quota::per_second(2).unwrap(), clock: ManualClock::new() };
/// assert!(limiter.try_acquire(2).is_ok());
/// assert!(limiter.try_acquire(1).is_err());
/// assert_eq!(limiter.try_acquire_key(7, 0), Ok(())); // unkeyed: the key is ignored
/// assert!(!limiter.is_keyed());
/// ```
pub trait RateLimiter: Send + Sync {
    /// Takes `cost` tokens if they are available now; a refusal changes nothing.
    fn try_acquire(&self, cost: u64) -> Result<(), Denied>;

    /// The strategy's name, as scripts select it (`std-mutex`, `cas`, ...).
    fn name(&self) -> &str;

    /// Takes `cost` tokens from `key`'s bucket. Unkeyed limiters ignore the key (the default).
    fn try_acquire_key(&self, key: u64, cost: u64) -> Result<(), Denied> {
        let _ = key;
        self.try_acquire(cost)
    }

    /// Whether every key has its own bucket (then the runner counts admissions per key and
    /// checks every key against its own bound).
    fn is_keyed(&self) -> bool {
        false
    }

    /// Further quotas that every admission must also hold (a policy of several quotas): the
    /// runner checks the cell's bound for each of them too, and reports the tightest. None by
    /// default.
    fn extra_quotas(&self) -> Vec<Quota> {
        Vec::new()
    }

    /// Whether the limiter is tollgate's `ShardedBucket`, which counts its writes to shared
    /// cache lines (`tollgate::counters`): then the runner reports them. `false` by default.
    fn counts_shared_writes(&self) -> bool {
        false
    }
}

/// Who wrote a strategy: tollgate's own synchronization strategies, a peer crate shown for
/// reference, or a user's.
///
/// ```
/// use tollgate_bench::{strategies, Kind};
/// let all = strategies::builtins();
/// assert_eq!(all.iter().find(|s| s.name() == "cas").unwrap().kind(), Kind::Tollgate);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A tollgate strategy: the core's decision function under some synchronization.
    Tollgate,
    /// Another crate, for reference (labelled "peer" in every output).
    Peer,
    /// A strategy the user plugged in.
    Custom,
}

/// What a strategy is built from for one cell: the quota (per key, for keyed strategies), the
/// number of keys and the clock every tollgate strategy of the cell reads.
///
/// ```
/// use tollgate::{DefaultClock, Quota};
/// use tollgate_bench::Setup;
/// let setup = Setup { quota: Quota::per_second(10).unwrap(), keys: 1, clock: DefaultClock::default() };
/// assert_eq!(setup.quota.burst(), 10);
/// ```
#[derive(Debug, Clone)]
pub struct Setup {
    /// The quota of the limiter (of each key's bucket, for keyed strategies).
    pub quota: Quota,
    /// How many distinct keys the run draws from (1 for unkeyed strategies).
    pub keys: u64,
    /// The cell's clock, created just before the limiter: its origin starts the bound's window.
    pub clock: DefaultClock,
}

type Build = dyn Fn(&Setup) -> Result<Box<dyn RateLimiter>, BuildError> + Send + Sync;

/// A named factory of [`RateLimiter`]s: the runner builds a fresh limiter for every cell.
///
/// ```
/// use tollgate::{gcra, Bucket, Quota};
/// use tollgate_bench::{Kind, RateLimiter, Setup, Strategy};
///
/// struct Plain(Bucket);
/// impl RateLimiter for Plain {
///     fn try_acquire(&self, cost: u64) -> Result<(), tollgate::Denied> { self.0.try_acquire(cost) }
///     fn name(&self) -> &str { "plain" }
/// }
/// let s = Strategy::new("plain", Kind::Custom, |setup: &Setup| {
///     Ok(Box::new(Plain(Bucket::with_clock(setup.quota, setup.clock))) as Box<dyn RateLimiter>)
/// })
/// .with_description("the bucket, unwrapped");
/// let setup = Setup { quota: Quota::per_second(3).unwrap(), keys: 1, clock: Default::default() };
/// let limiter = s.build(&setup).unwrap();
/// assert!(limiter.try_acquire(3).is_ok());
/// assert_eq!((s.name(), s.kind(), s.description()), ("plain", Kind::Custom, "the bucket, unwrapped"));
/// # let _ = gcra::FULL;
/// ```
pub struct Strategy {
    name: String,
    kind: Kind,
    description: String,
    build: Box<Build>,
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Strategy")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Strategy {
    /// A strategy called `name` whose limiters `build` makes. `build` reports a configuration
    /// it cannot express (e.g. a burst too large for a peer) as an `Err` ([`BuildError`]: any
    /// error, or a message, converts with `?` or `.into()`).
    ///
    /// ```
    /// use tollgate::Bucket;
    /// use tollgate_bench::{strategies::Cas, Kind, RateLimiter, Strategy};
    /// let s = Strategy::new("cas-again", Kind::Custom, |setup| {
    ///     Ok(Box::new(Cas::new(Bucket::with_clock(setup.quota, setup.clock))) as Box<dyn RateLimiter>)
    /// });
    /// assert_eq!(s.name(), "cas-again");
    /// ```
    pub fn new(
        name: impl Into<String>,
        kind: Kind,
        build: impl Fn(&Setup) -> Result<Box<dyn RateLimiter>, BuildError> + Send + Sync + 'static,
    ) -> Strategy {
        Strategy {
            name: name.into(),
            kind,
            description: String::new(),
            build: Box::new(build),
        }
    }

    /// The same strategy with a one-line description (shown by `tollgate-bench list`).
    ///
    /// ```
    /// let s = tollgate_bench::strategies::always_admit().with_description("broken on purpose");
    /// assert_eq!(s.description(), "broken on purpose");
    /// ```
    pub fn with_description(mut self, description: impl Into<String>) -> Strategy {
        self.description = description.into();
        self
    }

    /// The name scripts select it by.
    ///
    /// ```
    /// assert_eq!(tollgate_bench::strategies::always_admit().name(), "broken-always-admit");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Tollgate's, a peer's or the user's.
    ///
    /// ```
    /// use tollgate_bench::Kind;
    /// assert_eq!(tollgate_bench::strategies::always_admit().kind(), Kind::Custom);
    /// ```
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The one-line description (may be empty).
    ///
    /// ```
    /// assert!(!tollgate_bench::strategies::always_admit().description().is_empty());
    /// ```
    pub fn description(&self) -> &str {
        &self.description
    }

    /// A fresh limiter for one cell.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate_bench::{strategies, Setup};
    /// let setup = Setup { quota: Quota::per_second(1).unwrap(), keys: 1, clock: Default::default() };
    /// let cas = strategies::by_name("cas").unwrap();
    /// let limiter = cas.build(&setup).unwrap();
    /// assert!(limiter.try_acquire(1).is_ok());
    /// assert!(limiter.try_acquire(1).is_err());
    /// ```
    pub fn build(&self, setup: &Setup) -> Result<Box<dyn RateLimiter>, BuildError> {
        (self.build)(setup)
    }
}
