//! The local backend: one `KeyedMultiLimiter` per limit (its rates as one policy, a bucket
//! per distinct request value), all or nothing across a request's descriptors, and the saved
//! state of `--state`.
//!
//! # All or nothing across tables
//!
//! Each table decides one key atomically, but a request's descriptors live in several tables
//! (or several keys of one). A request is decided at one clock reading (`RlsClock::pin`), with
//! the stripes of its enforced buckets locked (every decision on an enforced bucket takes its
//! stripe, in index order, so two requests never deadlock):
//!
//! 1. every enforced bucket is checked without writing (`available >= need`: exactly the
//!    verdict of a take at that reading);
//! 2. if all hold, each is debited (`try_acquire_snapshots`); nothing else can debit them in
//!    between (their stripes are held) and the reading is the same, so each take admits;
//! 3. if one does not hold, nothing is debited: the refusing buckets are asked for their exact
//!    wait with a take that refuses (and so writes nothing), the others are read.
//!
//! The one exception: a table that is full (`--max-keys` values tracked, none of them full)
//! refuses a *new* value at step 2 (the keyed limiter's rule) though step 1 saw a full bucket.
//! Buckets of full tables are debited first, so that exception keeps the debits of earlier
//! buckets of other full tables only, unless the table fills up during the request (two new
//! values for its last free slot, or another request's meanwhile): then the request's earlier
//! new values keep theirs too. Never an over-admission, at worst an under-admission.

use super::{blocked, limits_of, Demand, Outcome, RlsClock, Wait};
use crate::config::{Config, Kind, Limit, Rate, Unit};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::SystemTime;
use tollgate::persist::RestoreError;
use tollgate::{KeyedMultiLimiter, Limiter, Limits};

/// Stripes of the per-bucket locks (a power of two).
const STRIPES: usize = 1024;

/// The saved state's magic.
const MAGIC: &[u8; 8] = b"TGRLS\x01\r\n";

/// The most bytes of a limit id or a rate name that a restore reads whole. `save` writes names
/// of any length (a config may have longer ones); a restore reads past a longer one without
/// holding it (`get_id`, `get_string`).
const MAX_NAME: usize = 1 << 20;

/// How a restore's messages name a limit id over `MAX_NAME` (not held).
const LONG_ID: &str = "a limit id over 1 MiB";

/// A saved table record (files of earlier builds): the limit id (`u32` length, UTF-8), then
/// the table's bytes (`u64` length, `KeyedMultiLimiter::save`). Integers are little-endian.
const TABLE: u8 = 1;

/// A saved table record with its limit's definition and table size, enough to rebuild the
/// table as a retired one when the config does not have its limit: the limit id (`u32`
/// length, UTF-8); `per_value` (`u8`, 0 or 1); the number of rates (`u8`, 1 to 4), each rate's
/// `requests_per_unit` (`u32`), unit (`u8`, second to year: 0 to 6), `burst` (`u64`) and name
/// (`u32` length, UTF-8); the table size (`u64`); then the table's bytes (`u64` length,
/// `KeyedMultiLimiter::save`). Builds that know only `TABLE` take a file with it as damaged.
const DEFINED_TABLE: u8 = 2;

/// A limit's buckets.
struct Table {
    buckets: Buckets,
    /// The limit (of a table restored as retired, a stand-in with only the saved id and
    /// definition: `get_definition`).
    limit: Arc<Limit>,
    /// The table's `max_keys`.
    size: usize,
    /// How many takes of more than nothing were made on the table: a decision adds one after
    /// its take (`Release`), so a reload that reads it (`Acquire`) before saving the table
    /// and finds it unchanged once no decision runs knows the save holds every debit
    /// (`LocalBackend::commit`).
    takes: AtomicU64,
}

/// A table's buckets: one bucket per value, under the limit's rates as one policy.
type Keyed = KeyedMultiLimiter<String, RlsClock>;

/// A table's buckets: built, or converted by a reload and checked at the table's first use.
// Every table lives in an `Arc`: the common variant stays inline, one load from a decision.
#[allow(clippy::large_enum_variant)]
enum Buckets {
    Ready(Keyed),
    Converted(Box<Converted>),
}

/// A table a reload converted (`LocalBackend::prepare`) from a save of `from`, made while
/// decisions went on. Its first use, after the swap (no decision reaches `from` any more),
/// takes the buckets built if `from` was not debited since their save (its `takes` are still
/// `takes`), else converts `from` again, now that it holds every debit: no debit is lost, and
/// the swap itself converts nothing. Other first uses wait for that one.
struct Converted {
    buckets: OnceLock<Keyed>,
    /// The buckets built and the table they were built from; taken by the first use, so that
    /// the old table is dropped then.
    built: Mutex<Option<(Keyed, Arc<Table>)>>,
    /// `from`'s takes before the save the buckets were built from.
    takes: u64,
    limits: Limits,
    wall: SystemTime,
    clock: RlsClock,
}

impl Converted {
    /// `built`: buckets of `limits` carried over from a save of `from` as of `wall`, made
    /// after reading `takes` from `from`.
    fn new(
        built: Keyed,
        from: Arc<Table>,
        takes: u64,
        limits: Limits,
        clock: RlsClock,
        wall: SystemTime,
    ) -> Converted {
        Converted {
            buckets: OnceLock::new(),
            built: Mutex::new(Some((built, from))),
            takes,
            limits,
            wall,
            clock,
        }
    }

    #[cold]
    fn first_use(&self, limit: &Arc<Limit>, size: usize) -> &Keyed {
        self.buckets.get_or_init(|| {
            let built = self
                .built
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match built {
                Some((l, from)) if from.takes.load(Ordering::Acquire) == self.takes => l,
                // `None` is not met (the use that takes them sets the buckets): drained then,
                // erring toward refusing.
                built => convert_buckets(
                    built.as_ref().map(|(_, from)| &**from),
                    limit,
                    self.limits.clone(),
                    size,
                    &self.clock,
                    self.wall,
                ),
            }
        })
    }
}

impl Table {
    fn new(limiter: Keyed, limit: Arc<Limit>, size: usize) -> Table {
        Table {
            buckets: Buckets::Ready(limiter),
            limit,
            size,
            takes: AtomicU64::new(0),
        }
    }

    /// A table of `limit` (of `size` values) converted from another ([`Converted`]).
    fn converted(converted: Converted, limit: Arc<Limit>, size: usize) -> Table {
        Table {
            buckets: Buckets::Converted(Box::new(converted)),
            limit,
            size,
            takes: AtomicU64::new(0),
        }
    }

    /// The buckets (a converted table's first use checks them here, once).
    #[inline]
    fn limiter(&self) -> &Keyed {
        match &self.buckets {
            Buckets::Ready(l) => l,
            Buckets::Converted(c) => match c.buckets.get() {
                Some(l) => l,
                None => c.first_use(&self.limit, self.size),
            },
        }
    }

    /// `cost` of `bucket`, counted in `takes` when it may write.
    fn take(
        &self,
        bucket: &String,
        cost: u64,
    ) -> (Result<(), tollgate::Refusal>, tollgate::Snapshots) {
        let r = self.limiter().decide_snapshots(bucket, cost);
        if cost > 0 {
            self.takes.fetch_add(1, Ordering::Release);
        }
        r
    }
}

/// Tables of limits the config does not have (retired by a reload, or read by a restore), at
/// most one per limit id, by age. `tables` and `ids` name the same tables (`ids[id]` is the
/// age under which `tables` holds `id`'s table), every age is below `next` (a table added is
/// the newest), and `values` is the sum of the tables' sizes. Within the caps (`fits`) after
/// `shed` and `trim`.
struct Retired {
    max_keys: usize,
    next: u64,
    /// By age, oldest first.
    tables: BTreeMap<u64, (String, Arc<Table>)>,
    /// The age of each id's table.
    ids: HashMap<String, u64>,
    values: usize,
}

impl Retired {
    fn new(max_keys: usize) -> Retired {
        Retired {
            max_keys,
            next: 0,
            tables: BTreeMap::new(),
            ids: HashMap::new(),
            values: 0,
        }
    }

    fn get(&self, id: &str) -> Option<&Arc<Table>> {
        self.tables.get(self.ids.get(id)?).map(|(_, t)| t)
    }

    fn remove(&mut self, id: &str) -> Option<Arc<Table>> {
        let (_, t) = self.tables.remove(&self.ids.remove(id)?)?;
        self.values -= t.size;
        Some(t)
    }

    fn clear(&mut self) {
        self.tables.clear();
        self.ids.clear();
        self.values = 0;
    }

    /// Adds `id`'s table as the newest, in place of the id's table here if any. May pass the
    /// caps: `shed` or `trim` restores them.
    fn add(&mut self, id: String, table: Arc<Table>) {
        self.remove(&id);
        let age = self.next;
        self.next += 1;
        self.values += table.size;
        self.ids.insert(id.clone(), age);
        self.tables.insert(age, (id, table));
    }

    /// The caps: at most `LocalBackend::MAX_RETIRED_TABLES` tables and `max_keys` values.
    fn fits(&self) -> bool {
        self.tables.len() <= LocalBackend::MAX_RETIRED_TABLES && self.values <= self.max_keys
    }

    /// Drops the oldest tables until the rest fit (`fits`).
    fn shed(&mut self) {
        while !self.fits() {
            let Some((_, (id, t))) = self.tables.pop_first() else {
                break;
            };
            self.ids.remove(&id);
            self.values -= t.size;
        }
    }

    /// Drops the tables whose buckets are all full (they hold nothing a new table would
    /// not, and take no room), then the oldest until the rest fit (`shed`).
    fn trim(&mut self) {
        let Retired {
            tables,
            ids,
            values,
            ..
        } = self;
        tables.retain(|_, (id, t)| {
            t.limiter().sweep();
            let full = t.limiter().is_empty();
            if full {
                ids.remove(id);
                *values -= t.size;
            }
            !full
        });
        self.shed();
    }
}

/// What one restore may build, in table slots (a table's size: building one allocates and
/// initializes its whole index up front, so the time a restore takes is about the sum of the
/// sizes it builds, whatever the table holds). Bounded by what a file `save` writes can
/// make, so that a file repeating records, or naming many limits of large saved sizes, costs
/// time in proportion to its bytes and `max_keys`, never to their product:
///
/// - Configured limits' tables, at their current size: at most `2 × max_keys + 2 × records`.
///   A saved file names each id once, and the current config's tables have sizes summing to
///   at most `max_keys` for the per-value ones (they share it) plus 1 per other limit (at
///   most one per record); a table whose saved buckets cannot be paired is built twice (the
///   restore tried, then a drained one). Past it the file is not one this service writes:
///   damaged (every table drained, never more lenient than the file).
/// - Retired tables, at their saved size: at most `2 × max_keys + records`. A saved file's
///   retired tables sum to at most `max_keys` (`Retired::fits`), and the tables configured
///   at save time to at most `max_keys` plus 1 per record. Past it a record is read past
///   unbuilt, as the caps drop retired tables (its limit starts full if it comes back): a
///   file saved under a larger `--max-keys` than now may exceed it, and is still restored.
///
/// `records` counts the records read so far, the current one included; the sums saturate.
struct Budget {
    max_keys: usize,
    records: usize,
    configured: usize,
    retired: usize,
}

impl Budget {
    fn new(max_keys: usize) -> Budget {
        Budget {
            max_keys,
            records: 0,
            configured: 0,
            retired: 0,
        }
    }

    /// A record read.
    fn record(&mut self) {
        self.records = self.records.saturating_add(1);
    }

    /// Spends `size` on a configured limit's table, or fails the restore past its bound.
    fn configured(&mut self, size: usize, id: &str) -> Result<(), String> {
        let bound = self
            .max_keys
            .saturating_mul(2)
            .saturating_add(self.records.saturating_mul(2));
        let spent = self.configured.saturating_add(size);
        if spent > bound {
            return Err(format!(
                "the table of {id:?} would make configured tables of {spent} values, over \
                 the {bound} a saved file of {} records may hold",
                self.records
            ));
        }
        self.configured = spent;
        Ok(())
    }

    /// Spends `size` on a retired table if within its bound: `false` reads it past unbuilt.
    fn retired(&mut self, size: usize) -> bool {
        let bound = self.max_keys.saturating_mul(2).saturating_add(self.records);
        let spent = self.retired.saturating_add(size);
        if spent > bound {
            return false;
        }
        self.retired = spent;
        true
    }

    /// Every size spent.
    fn spent(&self) -> usize {
        self.configured.saturating_add(self.retired)
    }
}

/// The local backend.
pub struct LocalBackend {
    clock: RlsClock,
    max_keys: usize,
    tables: RwLock<HashMap<String, Arc<Table>>>,
    /// Tables of limits the config no longer has (removed, or made `unlimited` or 0 per unit),
    /// oldest first, kept while some bucket is not full and within the caps
    /// (`Retired::fits`): a limit that comes back (a file read half-written, a reverted edit)
    /// resumes its buckets instead of starting full. Only a reload (`commit`, then
    /// `Retiring::finish`) and `restore` add or drop them, holding this lock from under the
    /// tables' write lock until done; a decision planned before the reload that retired one
    /// decides its limit there (`stand_in`, under the tables' read lock, so after the retired
    /// tables are complete).
    retired: Mutex<Retired>,
    stripes: Box<[Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
    /// The table sizes the last restore built (`Budget::spent`, see `restored_size`).
    restored_size: AtomicUsize,
    /// Held by a reload from `prepare` to `Retiring::finish` and by a restore: they run one
    /// at a time, so the tables a reload built from stay the ones it swaps out.
    applying: Mutex<()>,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

/// What a reload did to the tables.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Limits whose definition is unchanged: state kept.
    pub kept: usize,
    /// Limits whose rates changed: state carried over as `set_quota` converts it (where the
    /// number of rates changed, rates paired by name, then equal numbers, then unit:
    /// `rate_pairs`).
    pub converted: usize,
    /// New limits: full buckets.
    pub added: usize,
    /// Limits no longer configured (or `unlimited`, or 0 per unit): retired (see `apply`).
    pub removed: usize,
}

/// A reload's tables, built by [`LocalBackend::prepare`] and not yet swapped in
/// ([`LocalBackend::commit`]). Holds the backend's reload lock: other reloads and restores
/// wait.
pub(crate) struct Prepared<'a> {
    serial: MutexGuard<'a, ()>,
    next: HashMap<String, Arc<Table>>,
    /// The tables of `next` converted from a current or retired one (`Table::converted`).
    converted: Vec<Arc<Table>>,
    /// Ids whose table comes back from the retired ones.
    resumed: Vec<String>,
    /// Current ids the config no longer has a table for.
    removed: Vec<String>,
    applied: Applied,
}

impl std::fmt::Debug for Prepared<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

/// The tables a reload swapped out, retired by [`finish`](Retiring::finish). Holds the retired
/// tables' lock (a save, and a decision of a limit a reload removed, wait for it) and the
/// backend's reload lock, not the tables' lock: decisions go on.
pub(crate) struct Retiring<'a> {
    retired: MutexGuard<'a, Retired>,
    old: HashMap<String, Arc<Table>>,
    /// The converted tables swapped in, whose first use `finish` makes if no decision has.
    converted: Vec<Arc<Table>>,
    removed: Vec<String>,
    applied: Applied,
    _serial: MutexGuard<'a, ()>,
}

impl std::fmt::Debug for Retiring<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retiring")
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

impl Retiring<'_> {
    /// Retires the tables of limits the reload removed (oldest first past the caps, see
    /// `LocalBackend::apply`) and drops the rest of the old map; then, with only the reload
    /// lock held, makes the first use of each converted table no decision has used yet
    /// (`Table::converted`), so that decisions seldom wait for one.
    pub(crate) fn finish(self) -> Applied {
        let Retiring {
            mut retired,
            mut old,
            converted,
            removed,
            mut applied,
            _serial,
        } = self;
        for id in removed {
            if let Some(t) = old.remove(&id) {
                applied.removed += 1;
                retired.add(id, t);
            }
        }
        retired.trim();
        drop(retired);
        drop(old);
        for t in converted {
            t.limiter();
        }
        applied
    }
}

/// What a restore found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Every saved table was restored (limits not in the file start full).
    Ok {
        /// Tables of configured limits restored.
        tables: usize,
        /// Of those, tables whose limit has another number of rates than when saved, in a
        /// record without its rates (a file of earlier builds): their buckets cannot be
        /// paired rate by rate, so they start drained, never full. (A record with its rates
        /// is paired as a reload pairs it: see `apply`.)
        drained: usize,
        /// Tables of limits the config does not have (retired when saved, or configured then
        /// and not now), kept aside as a reload retires them (see `apply`): a limit that comes
        /// back resumes its buckets.
        retired: usize,
    },
    /// The file is damaged: every table starts drained.
    Damaged(String),
}

impl LocalBackend {
    /// The most retired tables kept (by a reload, see [`apply`](LocalBackend::apply), and by a
    /// restore), whatever their values: a table costs a few KB however small (a
    /// `KeyedMultiLimiter`'s fixed part, about 5 KB for one value), so `--max-keys` values
    /// alone would let a million tables of one value hold gigabytes. 4,096 such tables hold
    /// about 20 MB, half of an idle process at the default `--max-keys`; a retired table lives
    /// until its buckets refill (one window of its rates), and 4,096 limits removed within one
    /// window is far past a config's churn. A constant rather than a share of the configured
    /// limits: the config that retires tables may be one with few limits (a file read while
    /// half written), exactly when they must be kept.
    pub const MAX_RETIRED_TABLES: usize = 4_096;

    /// An empty backend: `max_keys` values in all, shared equally by the limits that keep a
    /// bucket per value.
    pub fn new(clock: RlsClock, max_keys: usize) -> LocalBackend {
        let max_keys = max_keys.max(1);
        LocalBackend {
            clock,
            max_keys,
            tables: RwLock::new(HashMap::new()),
            retired: Mutex::new(Retired::new(max_keys)),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: Default::default(),
            restored_size: AtomicUsize::new(0),
            applying: Mutex::new(()),
        }
    }

    /// The table size of `limit`: one bucket for a limit of exact values, else an equal share
    /// of `--max-keys` among the `sharing` limits that keep a bucket per value.
    fn size_for(&self, limit: &Limit, sharing: usize) -> usize {
        if !limit.per_value {
            return 1;
        }
        (self.max_keys / sharing.max(1)).max(1)
    }

    fn fresh(&self, limit: &Arc<Limit>, size: usize) -> Option<Table> {
        let limits = limits_of(limit)?;
        Some(Table::new(
            KeyedMultiLimiter::with_clock(limits, size, self.clock.clone()),
            limit.clone(),
            size,
        ))
    }

    /// Makes the tables match `config`: unchanged limits keep their table, changed ones (rates,
    /// or table size) carry their buckets over (converted as `set_quota` converts; where the
    /// number of rates changed, paired by `rate_pairs`, new rates full: `carry_over`), new ones
    /// start full, removed ones are retired: kept aside until every bucket is full again (what
    /// a new table would hold), within `max_keys` values and
    /// [`MAX_RETIRED_TABLES`](Self::MAX_RETIRED_TABLES) retired tables in all (the oldest
    /// dropped first past either), so that a limit that comes back resumes its buckets.
    ///
    /// The new tables are built without holding the lock decisions take (`prepare`), then
    /// swapped in (`commit`), then the old ones retired (`Retiring::finish`): `Service::reload`
    /// runs the three itself, swapping its config with the tables, so that no decision sees
    /// one without the other.
    pub fn apply(&self, config: &Config) -> Applied {
        self.commit(self.prepare(config)).finish()
    }

    /// The first half of [`apply`](Self::apply): builds the tables `config` needs without
    /// holding the lock decisions take (new tables, conversions of changed ones from a save
    /// of each), so that decisions go on meanwhile. Reloads and restores are serialized from
    /// here until [`Retiring::finish`]: the tables this reads stay the ones `commit` swaps
    /// out.
    pub(crate) fn prepare(&self, config: &Config) -> Prepared<'_> {
        let serial = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let sharing = config
            .limits()
            .iter()
            .filter(|l| l.per_value && limits_of(l).is_some())
            .count();
        // Each configured limit's table now (current, else retired), and the current ids the
        // config drops: a short hold of both locks, the only one `prepare` takes.
        let mut before: HashMap<&str, Arc<Table>> = HashMap::new();
        let mut resumed = Vec::new();
        let removed: Vec<String> = {
            let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
            let retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
            let mut configured = std::collections::HashSet::with_capacity(config.limits().len());
            for limit in config.limits() {
                if limits_of(limit).is_none() {
                    continue;
                }
                configured.insert(limit.id.as_str());
                if let Some(t) = tables.get(&limit.id) {
                    before.insert(&limit.id, t.clone());
                } else if let Some(t) = retired.get(&limit.id) {
                    before.insert(&limit.id, t.clone());
                    resumed.push(limit.id.clone());
                }
            }
            tables
                .keys()
                .filter(|id| !configured.contains(id.as_str()))
                .cloned()
                .collect()
        };
        let mut next = HashMap::with_capacity(config.limits().len());
        let mut converted = Vec::new();
        let mut applied = Applied::default();
        let wall = SystemTime::now();
        for limit in config.limits() {
            if limits_of(limit).is_none() {
                continue;
            }
            let size = self.size_for(limit, sharing);
            let table = match before.get(limit.id.as_str()) {
                // Shared: a decision's debit before the swap is the new config's too.
                Some(t) if t.limit.same_definition(limit) && t.size == size => {
                    applied.kept += 1;
                    t.clone()
                }
                Some(t) => {
                    applied.converted += 1;
                    // Read before the save: unchanged at `commit`, no take came after it.
                    let takes = t.takes.load(Ordering::Acquire);
                    let Some(limits) = limits_of(limit) else {
                        continue;
                    };
                    let l =
                        convert_buckets(Some(t), limit, limits.clone(), size, &self.clock, wall);
                    let c = Converted::new(l, t.clone(), takes, limits, self.clock.clone(), wall);
                    let table = Arc::new(Table::converted(c, limit.clone(), size));
                    converted.push(table.clone());
                    table
                }
                None => {
                    applied.added += 1;
                    match self.fresh(limit, size) {
                        Some(t) => Arc::new(t),
                        None => continue,
                    }
                }
            };
            next.insert(limit.id.clone(), table);
        }
        Prepared {
            serial,
            next,
            converted,
            resumed,
            removed,
            applied,
        }
    }

    /// The second half of [`apply`](Self::apply): swaps in the tables `prepare` built. A
    /// converted table whose source was debited after its save (a decision during the build)
    /// is converted again at its first use after the swap, when no decision reaches the source
    /// any more (`Table::converted`): no debit is lost, so no token is handed out twice across
    /// the swap, and the swap converts nothing. Holds the tables' write lock only for the
    /// swap; the caller holds the config's write lock around it, so that decisions see the
    /// old config and tables or the new ones. The tables swapped out are retired by
    /// [`Retiring::finish`], once the caller has let decisions go on.
    pub(crate) fn commit<'a>(&'a self, prepared: Prepared<'a>) -> Retiring<'a> {
        let Prepared {
            serial,
            next,
            converted,
            resumed,
            removed,
            applied,
        } = prepared;
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        // Taken under the tables' lock, as `save` and `stand_in` take it, and kept until the
        // tables swapped out are retired: neither sees the new tables without them.
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        for id in &resumed {
            retired.remove(id);
        }
        let old = std::mem::replace(&mut *tables, next);
        drop(tables);
        Retiring {
            retired,
            old,
            converted,
            removed,
            applied,
            _serial: serial,
        }
    }

    fn stripe(&self, d: &Demand) -> usize {
        (self.hasher.hash_one((&d.limit.id, &d.bucket)) as usize) & (STRIPES - 1)
    }

    /// Decides `demands` (distinct buckets): the enforced ones all or nothing, the others
    /// (shadow mode) each on its own. One outcome per demand, in order.
    pub fn decide(&self, demands: &[Demand]) -> Vec<Outcome> {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        let _pin = self.clock.pin();
        // Each demand's table, looked up once. A limit that was 0 per unit when the request
        // was planned has none, whatever a reload since made of it (the Redis fallback decides
        // after the plan): the plan made the request's other buckets reads, so a table here
        // would answer the request `OK` with nothing debited.
        let current: Vec<Option<&Arc<Table>>> = demands
            .iter()
            .map(|d| match d.limit.blocking_rate() {
                Some(_) => None,
                None => tables.get(&d.limit.id),
            })
            .collect();
        // A limit with rates and no table: a reload between the plan and this decision removed
        // it (or made it `unlimited` or 0 per unit). Only the Redis fallback decides after its
        // plan; a local decision plans under the config's read lock. The limit is decided as
        // the plan has it, as the Redis path decides it, never refused for being missing (that
        // would refuse a request no config refuses, with a wait of never): see `stand_in`.
        let missing = |(d, c): (&Demand, &Option<&Arc<Table>>)| {
            c.is_none() && d.limit.blocking_rate().is_none()
        };
        let stand_ins: Vec<Option<Arc<Table>>> = if demands.iter().zip(&current).any(missing) {
            demands
                .iter()
                .zip(&current)
                .map(|x| {
                    if missing(x) {
                        self.stand_in(&x.0.limit)
                    } else {
                        None
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let found: Vec<Option<&Arc<Table>>> = current
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.or_else(|| stand_ins.get(i)?.as_ref()))
            .collect();

        let mut out: Vec<Option<Outcome>> = vec![None; demands.len()];
        // A conversion a reload deferred runs here, before any stripe is held: a decision
        // waiting for it holds up no other.
        for t in found.iter().flatten() {
            t.limiter();
        }
        let enforced: Vec<usize> = (0..demands.len()).filter(|&i| demands[i].enforce).collect();
        let mut stripes: Vec<usize> = enforced.iter().map(|&i| self.stripe(&demands[i])).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _held: Vec<_> = stripes
            .iter()
            .map(|&s| {
                self.stripes[s]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .collect();
        // 1. Check every enforced bucket at the pinned reading.
        let mut holds = vec![true; demands.len()];
        for &i in &enforced {
            let d = &demands[i];
            holds[i] = match found[i] {
                Some(t) => t.limiter().available(d.bucket.as_str()) >= d.need(),
                None => false,
            };
        }
        let read_only = enforced.iter().any(|&i| demands[i].read);
        if !read_only && enforced.iter().all(|&i| holds[i]) {
            // 2. Debit them, full tables first (see the module docs).
            let mut order = enforced.clone();
            order.sort_by_key(|&i| match found[i] {
                Some(t) => t.limiter().len() < t.limiter().max_keys(),
                None => true,
            });
            let mut broken = false;
            for i in order {
                let d = &demands[i];
                let Some(t) = found[i] else { continue };
                let take = if broken { 0 } else { d.hits };
                let (v, s) = t.take(&d.bucket, take);
                if v.is_err() {
                    broken = true;
                }
                let mut o = Outcome::from_parts(v, &s);
                if d.hits == 0 && o.holds {
                    o = self.check_one(t, d).unwrap_or(o);
                }
                out[i] = Some(o);
            }
        } else {
            // 3. Refused: nothing is debited.
            for &i in &enforced {
                let d = &demands[i];
                out[i] = Some(match found[i] {
                    Some(t) if holds[i] => {
                        let (v, s) = t.limiter().decide_snapshots(&d.bucket, 0);
                        Outcome::from_parts(v, &s)
                    }
                    Some(t) => self.refusal(t, d),
                    None => blocked(d),
                });
            }
        }
        // Shadow-mode demands, each on its own (no stripe: no all or nothing to keep).
        for (i, d) in demands.iter().enumerate() {
            if d.enforce {
                continue;
            }
            out[i] = Some(match found[i] {
                Some(t) if d.hits == 0 => {
                    self.check_one(t, d).unwrap_or_else(|| self.refusal(t, d))
                }
                Some(t) => {
                    let (v, s) = t.take(&d.bucket, d.hits);
                    Outcome::from_parts(v, &s)
                }
                None => blocked(d),
            });
        }
        out.into_iter()
            .zip(demands)
            .map(|(o, d)| o.unwrap_or_else(|| blocked(d)))
            .collect()
    }

    /// The table that decides a demand of `limit`, a limit with rates that the config no
    /// longer has (see `decide`): the table the reload retired, its buckets as the limit left
    /// them (a drained value stays drained; a debit here is kept for the limit's return, as a
    /// debit on Redis is); else, the retired table dropped for holding only full buckets (or
    /// for `--max-keys`), a table of one full bucket under the limit's own rates, dropped
    /// after the decision. Called under the tables' read lock, which keeps `apply` and
    /// `restore` (the only writers of the retired tables, under the write lock) out.
    fn stand_in(&self, limit: &Arc<Limit>) -> Option<Arc<Table>> {
        let retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        retired
            .get(&limit.id)
            .cloned()
            .or_else(|| self.fresh(limit, 1).map(Arc::new))
    }

    /// A check-only demand: `Some` (read, holds) if one hit would pass, else `None`.
    fn check_one(&self, t: &Table, d: &Demand) -> Option<Outcome> {
        if t.limiter().available(d.bucket.as_str()) >= 1 {
            let (v, s) = t.limiter().decide_snapshots(&d.bucket, 0);
            Some(Outcome::from_parts(v, &s))
        } else {
            None
        }
    }

    /// A bucket that does not hold `need`: its exact refusal (a take of `need` that refuses,
    /// and so writes nothing, at the pinned reading, under the bucket's stripe).
    fn refusal(&self, t: &Table, d: &Demand) -> Outcome {
        let (v, s) = t.take(&d.bucket, d.need());
        let mut o = Outcome::from_parts(v, &s);
        // `holds` false by the check; a take that admitted here would be a bug in the check.
        debug_assert!(!o.holds, "a refusal's take admitted");
        o.holds = false;
        if o.wait.is_none() {
            o.wait = Some(Wait::Never);
        }
        o
    }

    /// Writes every table (`--state`), the retired ones included (those with a bucket not
    /// full, oldest first, then the current ones): `MAGIC`, then per table a
    /// `DEFINED_TABLE` record (the limit id, its definition, the table size and the table's
    /// saved bytes, `KeyedMultiLimiter::save`), then an end record. Names of any length are
    /// written (a restore reads past those over 1 MiB); one over 4 GiB (no `u32` length) fails
    /// the save.
    pub fn save<W: Write>(&self, mut w: W) -> io::Result<()> {
        // The tables are `Arc`s: copied out, so that the locks are not held while they are
        // written (a reload waiting for them would hold the config's write lock meanwhile, and
        // every decision with it). The retired tables' lock is taken under the tables' one,
        // as `apply` takes it.
        let (current, mut retired) = {
            let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
            let retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
            let current: Vec<(String, Arc<Table>)> = tables
                .iter()
                .map(|(id, t)| (id.clone(), t.clone()))
                .collect();
            let old: Vec<(String, Arc<Table>)> = retired.tables.values().cloned().collect();
            (current, old)
        };
        // A retired table whose buckets are all full holds nothing a new one would not.
        retired.retain(|(_, t)| {
            t.limiter().sweep();
            !t.limiter().is_empty()
        });
        w.write_all(MAGIC)?;
        let mut blob = Vec::new();
        for (id, t) in retired.iter().chain(&current) {
            let Kind::Rates(rates) = &t.limit.kind else {
                continue; // A table has rates (`limits_of`).
            };
            blob.clear();
            t.limiter().save(&mut blob)?;
            w.write_all(&[DEFINED_TABLE])?;
            put_bytes(&mut w, id.as_bytes())?;
            w.write_all(&[u8::from(t.limit.per_value), rates.len() as u8])?;
            for rate in rates {
                w.write_all(&rate.requests_per_unit.to_le_bytes())?;
                w.write_all(&[unit_code(rate.unit)])?;
                w.write_all(&rate.burst.to_le_bytes())?;
                put_bytes(&mut w, rate.name.as_bytes())?;
            }
            w.write_all(&(t.size as u64).to_le_bytes())?;
            w.write_all(&(blob.len() as u64).to_le_bytes())?;
            w.write_all(&blob)?;
        }
        w.write_all(&[0])?;
        w.write_all(MAGIC)?;
        w.flush()
    }

    /// Restores the tables from a file written by [`save`] (or by earlier builds: records of
    /// an id and the table's bytes alone). Each saved table whose limit is configured is
    /// rebuilt from its bytes under the limit's current rates (converted as `set_quota`
    /// converts). Each saved table with its definition whose limit is not configured is
    /// retired, as a reload retires it (see `apply`): under its saved rates, dropped if its
    /// buckets are all full by now, then within `max_keys` values and
    /// [`MAX_RETIRED_TABLES`] tables of retired tables in all (the newest records kept, the
    /// later in the file the newer; one table per id, its last record's). A damaged file
    /// drains every table.
    ///
    /// What it holds is bounded by those caps and the config, not by the file: each table's
    /// bytes are streamed into the table built, and a retired table is built as its record is
    /// read, the oldest kept dropped past the caps. A record whose table size is over
    /// `max_keys` drops itself and every retired table before it in the file, unbuilt.
    ///
    /// Its time is bounded by what a file `save` writes may make, not by the file's records
    /// times `max_keys` (building a table initializes its whole index): configured tables of
    /// at most `2 × max_keys + 2 × records` values in all (past it the file is damaged: a
    /// saved file names each limit once), retired ones of at most `2 × max_keys + records`
    /// (past it a record is read past unbuilt, as the caps drop one), `records` counting
    /// those read so far (see `Budget`). A file saved under the same or a smaller
    /// `--max-keys` never exceeds either; one saved under a larger `--max-keys` than now may
    /// drop retired tables past the second, never exceeds the first (configured tables are
    /// built at their current size), so it is never damaged by it. A limit
    /// id or rate name over 1 MiB (which `save` writes) is read past without being held: a
    /// configured limit of such an id is found by comparing it as it is read; a retired table
    /// of one is not kept.
    ///
    /// [`save`]: LocalBackend::save
    /// [`MAX_RETIRED_TABLES`]: LocalBackend::MAX_RETIRED_TABLES
    pub fn restore<R: Read>(&self, r: R) -> Restored {
        let _serial = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let mut budget = Budget::new(self.max_keys);
        let restored = self.try_restore(r, &mut budget);
        self.restored_size.store(budget.spent(), Ordering::Relaxed);
        match restored {
            Ok(restored) => restored,
            Err(why) => {
                let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
                for t in tables.values() {
                    t.limiter().drain();
                }
                Restored::Damaged(why)
            }
        }
    }

    /// The sum of the table sizes the last [`restore`](Self::restore) built (or tried to
    /// build), configured and retired: what its time is proportional to, bounded by what a
    /// file `save` writes may hold (`4 × max_keys + 3 × records`, see `Budget`). For tests.
    #[doc(hidden)]
    pub fn restored_size(&self) -> usize {
        self.restored_size.load(Ordering::Relaxed)
    }

    fn try_restore<R: Read>(&self, mut r: R, budget: &mut Budget) -> Result<Restored, String> {
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|e| format!("no header: {e}"))?;
        if &magic != MAGIC {
            return Err("not a tollgate-rls state file".into());
        }
        // The configured tables whose id is too long to read whole (`get_id`).
        let long: Vec<Arc<Table>> = {
            let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
            tables
                .values()
                .filter(|t| t.limit.id.len() > MAX_NAME)
                .cloned()
                .collect()
        };
        // One table per configured limit (a file that repeats a limit: its last record), so
        // that a file cannot make the process hold more tables than the config has.
        let mut rebuilt: HashMap<String, Table> = HashMap::new();
        // Tables of limits not configured, the newest of those built within the budget, held
        // within the caps as they are read (`Retired::shed`).
        let mut kept = Retired::new(self.max_keys);
        let mut drained = 0;
        loop {
            let [tag] = get::<1>(&mut r)?;
            if tag == 0 {
                r.read_exact(&mut magic)
                    .map_err(|e| format!("truncated end: {e}"))?;
                if &magic != MAGIC {
                    return Err("a damaged end record".into());
                }
                break;
            }
            if tag != TABLE && tag != DEFINED_TABLE {
                return Err(format!("an unknown record {tag}"));
            }
            budget.record();
            // `None`: an id over `MAX_NAME` that no configured limit has.
            let id = get_id(&mut r, &long)?;
            let shown = id.as_deref().unwrap_or(LONG_ID);
            let saved = if tag == DEFINED_TABLE {
                let (per_value, limit) = get_definition(&mut r, shown)?;
                let size = u64::from_le_bytes(get::<8>(&mut r)?);
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size == 0 || (!per_value && size != 1) {
                    return Err(format!("a table size of {size} for {shown:?}"));
                }
                Some((limit, size))
            } else {
                None
            };
            let len = u64::from_le_bytes(get::<8>(&mut r)?);
            // The table's bytes, streamed into the table built (never held whole).
            let mut blob = (&mut r).take(len);
            let current = id.as_ref().and_then(|id| {
                let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
                tables.get(id).map(|t| (t.limit.clone(), t.size))
            });
            let (id, (limit, size)) = match (id, current) {
                (Some(id), Some(current)) => (id, current),
                (Some(id), None) => {
                    // A limit not configured: this record replaces the id's earlier one,
                    // whatever its fate. A retired table, if the record has the definition
                    // (one whose rate names are all read whole) and it may be kept.
                    kept.remove(&id);
                    match saved {
                        Some((Some(limit), size)) if size <= self.max_keys => {
                            // Past the budget: read past unbuilt, as the caps drop a retired
                            // table (its limit starts full if it comes back).
                            if !budget.retired(size) {
                                finish(&mut blob, &id)?;
                                continue;
                            }
                            let limits =
                                limits_of(&limit).ok_or_else(|| format!("no rates for {id:?}"))?;
                            // Built only for a size that may be kept (at most `max_keys`),
                            // so that a size no table here may have allocates nothing.
                            let limiter =
                                KeyedMultiLimiter::builder(limits, size, self.clock.clone())
                                    .restore(&mut blob)
                                    .map_err(|e| format!("the table of {id:?}: {e}"))?;
                            finish(&mut blob, &id)?;
                            limiter.sweep();
                            if !limiter.is_empty() {
                                let table = Table::new(limiter, limit, size);
                                kept.add(id, Arc::new(table));
                                kept.shed();
                            }
                        }
                        // Too large to keep on its own: as `Retired::trim` drops the tables
                        // older than one that does not fit, it ends the newest-first run of
                        // the tables that fit.
                        Some((Some(_), _)) => {
                            kept.clear();
                            finish(&mut blob, &id)?;
                        }
                        // No definition: a record of earlier builds, or a rate name read past.
                        _ => finish(&mut blob, &id)?,
                    }
                    continue;
                }
                (None, _) => {
                    finish(&mut blob, LONG_ID)?;
                    continue;
                }
            };
            let Some(limits) = limits_of(&limit) else {
                finish(&mut blob, &id)?;
                continue;
            };
            budget.configured(size, &id)?;
            let builder = KeyedMultiLimiter::builder(limits, size, self.clock.clone());
            // A record with its rates: paired as a reload pairs them, whatever the number of
            // rates now (rates that do not fit the saved buckets: a damaged file).
            let before = saved.as_ref().and_then(|(before, _)| before.as_ref());
            let restored = match before {
                Some(before) => carry_over(builder, &mut blob, SystemTime::now(), before, &limit),
                None => builder.restore(&mut blob),
            };
            let limiter = match restored {
                Ok(l) => l,
                // Another number of rates than saved, in a record without its rates (a file
                // of earlier builds, or a rate name too long to read): the buckets cannot be
                // paired rate by rate, so this table alone starts drained; the file's other
                // tables are restored.
                Err(RestoreError::LimitsChanged { .. }) if before.is_none() => {
                    budget.configured(size, &id)?;
                    match limits_of(&limit) {
                        Some(limits) => {
                            let l = KeyedMultiLimiter::with_clock(limits, size, self.clock.clone());
                            l.drain();
                            drained += 1;
                            l
                        }
                        None => {
                            finish(&mut blob, &id)?;
                            continue;
                        }
                    }
                }
                Err(e) => return Err(format!("the table of {id:?}: {e}")),
            };
            finish(&mut blob, &id)?;
            rebuilt.insert(id, Table::new(limiter, limit, size));
        }
        let n = rebuilt.len();
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        for (id, t) in rebuilt {
            retired.remove(&id);
            tables.insert(id, Arc::new(t));
        }
        // Oldest first, as a reload retires them.
        for (id, t) in kept.tables.into_values() {
            if !tables.contains_key(&id) {
                retired.add(id, t);
            }
        }
        retired.trim();
        Ok(Restored::Ok {
            tables: n,
            drained,
            retired: retired.tables.len(),
        })
    }

    /// Tables kept aside for limits the config no longer has, and the buckets they track (the
    /// `tollgate_rls_retired_tables` and `tollgate_rls_retired_buckets` gauges): memory the
    /// service holds that [`tracked`](Self::tracked) does not count, until a reload finds
    /// the tables full or past their caps.
    pub fn retired(&self) -> (usize, usize) {
        let retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        let buckets = retired
            .tables
            .values()
            .map(|(_, t)| t.limiter().len())
            .sum();
        (retired.tables.len(), buckets)
    }

    /// Buckets tracked over all tables (the `tollgate_rls_tracked_buckets` gauge).
    pub fn tracked(&self) -> usize {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        tables.values().map(|t| t.limiter().len()).sum()
    }
}

/// `from`'s buckets carried over into a table of `limits` (`limit`'s) of `size` values, as of
/// `wall` (see `carry_over`): the buckets of a table saved and restored at once. Drained
/// where they cannot be (no `from`, a save that failed, a restore refused; not met:
/// `carry_over` pairs any numbers of rates), erring toward refusing rather than a free burst.
fn convert_buckets(
    from: Option<&Table>,
    limit: &Arc<Limit>,
    limits: Limits,
    size: usize,
    clock: &RlsClock,
    wall: SystemTime,
) -> Keyed {
    let builder = KeyedMultiLimiter::builder(limits.clone(), size, clock.clone());
    let restored = from.and_then(|from| {
        let mut saved = Vec::new();
        from.limiter().save_at(&mut saved, wall).ok()?;
        carry_over(builder, &saved[..], wall, &from.limit, limit).ok()
    });
    restored.unwrap_or_else(|| {
        let l = KeyedMultiLimiter::with_clock(limits, size, clock.clone());
        l.drain();
        l
    })
}

/// The buckets of a table saved (`saved`, at `wall`) under `before`'s rates, restored into
/// `builder` (of `after`'s rates). The same number of rates: as a restore pairs quotas (equal
/// ones, then one of the same unit where one is left on each side; the others take the
/// strictest state left). Another number: paired by [`rate_pairs`], each paired rate's buckets
/// converted as `set_quota` converts, each new rate full (as in a new table), each removed
/// rate dropped: no value is held more leniently than before under a rate it kept, nor than a
/// new limit would hold it under a new one.
fn carry_over<R: Read>(
    builder: tollgate::KeyedMultiLimiterBuilder<String, RlsClock>,
    saved: R,
    wall: SystemTime,
    before: &Limit,
    after: &Limit,
) -> Result<Keyed, RestoreError> {
    match (&before.kind, &after.kind) {
        (Kind::Rates(old), Kind::Rates(new)) if old.len() != new.len() => {
            builder.restore_paired_at(saved, wall, &rate_pairs(old, new))
        }
        _ => builder.restore_at(saved, wall),
    }
}

/// For each rate of `new`, the position in `old` of the rate whose buckets it carries over
/// (`None`: a new rate), each old rate taken at most once:
///
/// 1. by name: a non-empty name that names exactly one rate on each side;
/// 2. the rates left (unnamed, a name given twice on a side, a name not on the other side)
///    with a rate left of the same numbers (`requests_per_unit`, unit, `burst`), in config
///    order: a rate kept as it was keeps its own buckets, whatever its place among rates of
///    its unit (paired by unit alone, it could take a looser rate's buckets: a value it had
///    drained would get its burst again);
/// 3. the rates left by unit, in config order: the first left of a unit on each side, then
///    the second, and so on. A renamed rate of a unit met once on each side keeps its buckets
///    (as a restore of the same number of rates pairs it), and an unnamed rate keeps them
///    where its unit tells it apart.
///
/// New rates left over start full; old ones left over are dropped.
fn rate_pairs(old: &[Rate], new: &[Rate]) -> Vec<Option<usize>> {
    let once = |rates: &[Rate], name: &str| rates.iter().filter(|r| r.name == name).count() == 1;
    let mut pairs = vec![None; new.len()];
    let mut taken = vec![false; old.len()];
    for (pair, rate) in pairs.iter_mut().zip(new) {
        if rate.name.is_empty() || !once(new, &rate.name) || !once(old, &rate.name) {
            continue;
        }
        if let Some(i) = old.iter().position(|o| o.name == rate.name) {
            *pair = Some(i);
            taken[i] = true;
        }
    }
    let same = |a: &Rate, b: &Rate| {
        (a.requests_per_unit, a.unit, a.burst) == (b.requests_per_unit, b.unit, b.burst)
    };
    let by_unit = |a: &Rate, b: &Rate| a.unit == b.unit;
    for alike in [&same as &dyn Fn(&Rate, &Rate) -> bool, &by_unit] {
        for (pair, rate) in pairs.iter_mut().zip(new) {
            if pair.is_some() {
                continue;
            }
            if let Some(i) = (0..old.len()).find(|&i| !taken[i] && alike(&old[i], rate)) {
                *pair = Some(i);
                taken[i] = true;
            }
        }
    }
    pairs
}

/// Writes `bytes` with their `u32` length: a save fails rather than write a length that is not
/// theirs (a file every restore would take as damaged).
fn put_bytes<W: Write>(w: &mut W, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name over 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(bytes)
}

fn get<const N: usize>(r: &mut impl Read) -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)
        .map_err(|e| format!("truncated: {e}"))?;
    Ok(b)
}

/// Reads the rest of a record's table bytes (`rest`: what a restore of the table left of
/// them) and checks that they were all there.
fn finish<R: Read>(rest: &mut io::Take<R>, id: &str) -> Result<(), String> {
    io::copy(rest, &mut io::sink()).map_err(|e| format!("truncated: {e}"))?;
    if rest.limit() != 0 {
        return Err(format!("truncated in the table of {id:?}"));
    }
    Ok(())
}

/// A length-prefixed UTF-8 string: `Some` when at most `MAX_NAME` bytes (read whole, checked
/// before allocating), else `None`, its bytes read past in chunks and never held, as `save`
/// writes a name of any length.
fn get_string(r: &mut impl Read, what: &str) -> Result<Option<String>, String> {
    let len = u32::from_le_bytes(get::<4>(r)?) as usize;
    if len > MAX_NAME {
        let skipped = io::copy(&mut r.take(len as u64), &mut io::sink())
            .map_err(|e| format!("truncated: {e}"))?;
        if skipped != len as u64 {
            return Err(format!("truncated in {what}"));
        }
        return Ok(None);
    }
    let mut b = vec![0u8; len];
    r.read_exact(&mut b)
        .map_err(|e| format!("truncated: {e}"))?;
    String::from_utf8(b)
        .map(Some)
        .map_err(|_| format!("{what} not UTF-8"))
}

/// A record's limit id: one of at most `MAX_NAME` bytes read whole; a longer one compared, in
/// chunks as it is read and never held, with the ids of `long` (the configured tables whose
/// id is over `MAX_NAME`): that id if one is equal, else `None` (a limit not configured).
fn get_id(r: &mut impl Read, long: &[Arc<Table>]) -> Result<Option<String>, String> {
    let len = u32::from_le_bytes(get::<4>(r)?) as usize;
    if len <= MAX_NAME {
        let mut b = vec![0u8; len];
        r.read_exact(&mut b)
            .map_err(|e| format!("truncated: {e}"))?;
        return String::from_utf8(b)
            .map(Some)
            .map_err(|_| "a limit name not UTF-8".to_owned());
    }
    let mut alike: Vec<&str> = long
        .iter()
        .map(|t| t.limit.id.as_str())
        .filter(|id| id.len() == len)
        .collect();
    let mut chunk = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < len {
        let n = chunk.len().min(len - at);
        r.read_exact(&mut chunk[..n])
            .map_err(|e| format!("truncated: {e}"))?;
        alike.retain(|id| id.as_bytes()[at..at + n] == chunk[..n]);
        at += n;
    }
    Ok(alike.first().map(|id| (*id).to_owned()))
}

const UNITS: [Unit; 7] = [
    Unit::Second,
    Unit::Minute,
    Unit::Hour,
    Unit::Day,
    Unit::Week,
    Unit::Month,
    Unit::Year,
];

fn unit_code(unit: Unit) -> u8 {
    UNITS.iter().position(|u| *u == unit).unwrap_or(0) as u8
}

/// A saved limit definition (`per_value`, then one to four rates): `per_value`, and the limit
/// of a retired table, with the saved id (its other fields are not saved; a table uses none
/// of them), or `None` where a rate name is over `MAX_NAME` (read past, not held: such a
/// table is not kept as a retired one).
fn get_definition(r: &mut impl Read, id: &str) -> Result<(bool, Option<Arc<Limit>>), String> {
    let [per_value, n] = get::<2>(r)?;
    if per_value > 1 || !(1..=4).contains(&n) {
        return Err(format!("a damaged definition of {id:?}"));
    }
    let mut rates = Vec::with_capacity(usize::from(n));
    let mut whole = true;
    for _ in 0..n {
        let requests_per_unit = u32::from_le_bytes(get::<4>(r)?);
        let [unit] = get::<1>(r)?;
        let unit = *UNITS
            .get(usize::from(unit))
            .ok_or_else(|| format!("an unknown unit {unit} in {id:?}"))?;
        let burst = u64::from_le_bytes(get::<8>(r)?);
        let name = get_string(r, "a rate name")?.unwrap_or_else(|| {
            whole = false;
            String::new()
        });
        rates.push(Rate {
            requests_per_unit,
            unit,
            burst,
            name,
        });
    }
    let (domain, path) = id.split_once('\x1f').unwrap_or(("", id));
    let limit = Limit {
        domain: domain.to_owned(),
        path: path.to_owned(),
        id: id.to_owned(),
        names: rates
            .iter()
            .filter(|r| !r.name.is_empty())
            .map(|r| r.name.clone())
            .collect(),
        kind: Kind::Rates(rates),
        replaces: Vec::new(),
        shadow: false,
        detailed_metric: false,
        per_value: per_value == 1,
        origin: "the saved state".to_owned(),
        fixed_metric: true,
        counters: std::sync::OnceLock::new(),
    };
    if limits_of(&limit).is_none() {
        return Err(format!("a definition of {id:?} without valid rates"));
    }
    Ok((per_value == 1, whole.then(|| Arc::new(limit))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    /// `n` limits of a bucket per value (`p0` to `pN`, 100 an hour).
    fn per_value(n: usize) -> Config {
        let mut y = String::from("domain: r\ndescriptors:\n");
        for i in 0..n {
            y.push_str(&format!(
                "  - key: p{i}\n    rate_limit: {{unit: hour, requests_per_unit: 100}}\n"
            ));
        }
        Config::from_sources(&[(PathBuf::from("c.yaml"), y)]).unwrap()
    }

    /// Tables debited after a reload saved them (decisions during its build) are converted
    /// again at their first use after the swap, with every debit; the swap converts nothing,
    /// and tables not debited keep the buckets the build made.
    #[test]
    fn tables_debited_during_a_build_are_converted_again_at_their_first_use() {
        let clock = tollgate::ManualClock::new();
        clock.advance(Duration::from_secs(1_000_000));
        let backend = LocalBackend::new(RlsClock::manual(clock), 100_000);
        let n = 256;
        backend.apply(&per_value(n));
        // One more limit of a bucket per value: every table is resized, so converted.
        let p = backend.prepare(&per_value(n + 1));
        assert_eq!(p.applied.converted, n);
        let debited = n / 2;
        {
            let tables = backend.tables.read().unwrap();
            for i in 0..debited {
                let (r, _) = tables[&format!("r\u{1f}p{i}")].take(&"v".to_string(), 1);
                assert!(r.is_ok());
            }
        }
        let unused =
            |t: &Table| matches!(&t.buckets, Buckets::Converted(c) if c.buckets.get().is_none());
        let retiring = backend.commit(p);
        {
            let tables = backend.tables.read().unwrap();
            assert_eq!(
                tables.values().filter(|t| unused(t)).count(),
                n,
                "converted at the swap"
            );
            // A decision's first use converts a debited table again, with the debit.
            assert_eq!(tables["r\u{1f}p0"].limiter().available("v"), 99);
        }
        retiring.finish();
        let tables = backend.tables.read().unwrap();
        for i in 0..n {
            let t = &tables[&format!("r\u{1f}p{i}")];
            assert!(!unused(t), "p{i}: not used by the reload's end");
            let left = t.limiter().available("v");
            assert_eq!(left, if i < debited { 99 } else { 100 }, "p{i}");
        }
    }
}
