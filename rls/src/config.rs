//! envoyproxy/ratelimit's YAML configuration: loading (one file or a directory of them),
//! validation with errors that name the file, line and field, and the descriptor lookup.
//!
//! Matching follows envoyproxy/ratelimit: at each level of the config tree a request entry
//! `(key, value)` first matches a descriptor with that key and exactly that value, then the
//! first descriptor (in file order) with that key whose value is a `*` pattern matching the
//! value, then the descriptor with that key and no value. A limit applies when the descriptor
//! that carries it is matched by the request's *last* entry; no match is no limit.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use saphyr::{MarkedYamlOwned, YamlDataOwned, YamlLoader};

/// The unit of a `rate_limit`, as envoyproxy/ratelimit's proto enum (a month is 30 days, a
/// year 365).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit's length.
    pub fn duration(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }

    /// The value of `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The proto3 JSON name of the unit.
    pub fn json_name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit named `s` in any case, as envoyproxy/ratelimit reads it (Go's
    /// `strings.ToUpper`, Unicode's mapping: `ſecond` is `SECOND` there too).
    fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }
}

/// The core's horizon, 100 years of 365.25 days, in seconds: a quota holds `rate x horizon +
/// burst` state units in 63 bits (`tollgate::Quota::new`).
const HORIZON_S: u128 = 3_155_760_000;

/// The largest `requests_per_unit` the core's 63-bit state holds per `unit`, with `burst`
/// (`None`: burst = requests_per_unit). The state must hold `ceil(rpu x horizon / unit) +
/// burst <= 2^63 - 1`, which is monotone in both, so this is a bound: every smaller rate fits
/// the state (the Redis script's exact range is a separate check, not a bound on the rate).
fn most_per_unit(unit: Unit, burst: Option<u64>) -> Option<u64> {
    let max = u128::from(u64::MAX >> 1);
    let p = u128::from(unit.duration().as_secs());
    let most = match burst {
        // rpu x horizon / p + rpu <= max  <=>  rpu <= max x p / (horizon + p)
        None => max * p / (HORIZON_S + p),
        // ceil(rpu x horizon / p) <= max - burst  <=>  rpu <= (max - burst) x p / horizon
        Some(b) => max.checked_sub(u128::from(b))? * p / HORIZON_S,
    };
    u64::try_from(most).ok()
}

/// One rate of a limit: `requests_per_unit` per `unit`, a bucket of `burst`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens earned per unit (0: the limit refuses every hit).
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
    /// The bucket's capacity (default `requests_per_unit`; an extension).
    pub burst: u64,
    /// The optional `name`, reported in `current_limit` and used by `replaces`.
    pub name: String,
}

/// What a matched descriptor does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `unlimited: true`: answered `OK` without touching state.
    Unlimited,
    /// One to four rates that must all hold (`rate_limit`, or the `rate_limits` extension).
    /// A rate with `requests_per_unit: 0` refuses every hit.
    Rates(Vec<Rate>),
}

/// A configured limit: where it sits in the config tree and what it does.
#[derive(Debug)]
pub struct Limit {
    /// The domain.
    pub domain: String,
    /// The descriptor path in the config (`key` or `key_value` per level, joined by `.`):
    /// with the domain, what identifies the limit across reloads.
    pub path: String,
    /// The identity across reloads: domain and path, joined by `\x1f`. It names the limit's
    /// table, its Redis policy and its saved state; no two limits of a loaded config have one
    /// (a domain holds no `\x1f` and a config whose paths coincide is refused).
    pub id: String,
    /// What it does.
    pub kind: Kind,
    /// The names this limit's match drops from the request (`replaces`).
    pub replaces: Vec<String>,
    /// `shadow_mode`.
    pub shadow: bool,
    /// `detailed_metric`: metrics are labelled with the request's values.
    pub detailed_metric: bool,
    /// Whether the limit keeps one bucket per distinct request value (some level of its path
    /// has no value, or a `*` pattern without `share_threshold`).
    pub per_value: bool,
    /// Where it was defined (`file:line`), for logs.
    pub origin: String,
    /// The `name`s of its rates (for `replaces`; empty names left out).
    pub names: Vec<String>,
    /// Whether its metric label is the same for every request (no `detailed_metric` and no
    /// `value_to_metric` on its path): its counters are then resolved once.
    pub fixed_metric: bool,
    /// The counters of a limit with a fixed metric label, resolved at its first decision.
    pub counters: std::sync::OnceLock<crate::metrics::Counters>,
}

impl Limit {
    /// Whether another limit has the same definition (what reload keeps state for).
    pub fn same_definition(&self, other: &Limit) -> bool {
        self.kind == other.kind && self.per_value == other.per_value
    }

    /// The rate with `requests_per_unit: 0`, if any: the limit refuses every hit.
    pub fn blocking_rate(&self) -> Option<&Rate> {
        match &self.kind {
            Kind::Rates(r) => r.iter().find(|r| r.requests_per_unit == 0),
            Kind::Unlimited => None,
        }
    }
}

/// The backend a config is loaded for, which decides the rates it must hold: every backend
/// needs a rate the core's `Quota` holds; the Redis backend (`--redis`) also needs one its
/// script holds exactly (`tollgate_redis::check_quota`), a narrower range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// The local backend: the core's check only.
    #[default]
    Local,
    /// The Redis backend: the core's check and the script's. Its `on_redis_error = local`
    /// fallback decides the same limits, so the Redis check covers it too.
    Redis,
}

/// The default of [`LoadOptions::max_descriptors`] (`--max-descriptors`).
pub const DEFAULT_MAX_DESCRIPTORS: usize = 100_000;

/// How a config is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// The backend the rates must suit.
    pub target: Target,
    /// The most descriptors (at every level, with a limit or not) the config's files may
    /// define in all (`--max-descriptors`). A loaded descriptor costs some kilobytes while the
    /// file is parsed and about 1.5 KB in the local backend when its every level has a value
    /// (a table of one), so the bound keeps a mistaken or generated file from taking the
    /// process's memory, at start or on a reload (which keeps the old config serving). The
    /// file's mappings are bounded as it is parsed, by four per descriptor (a descriptor, its
    /// `rate_limit`, room for `replaces` entries and anchors) plus 1,024, so that
    /// a file far over the bound is refused before it is built.
    pub max_descriptors: usize,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            target: Target::Local,
            max_descriptors: DEFAULT_MAX_DESCRIPTORS,
        }
    }
}

/// Mappings a config may hold beyond four per allowed descriptor ([`LoadOptions`]).
const SPARE_MAPPINGS: usize = 1_024;

/// A load error: the file, line and field it concerns, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or the config path, for errors about the path itself).
    pub file: PathBuf,
    /// The 1-based line, when the error concerns a node.
    pub line: Option<usize>,
    /// The field (`descriptors[0].rate_limit.unit`), when the error concerns one.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A level of the config tree: the descriptors under one parent.
#[derive(Debug, Default)]
struct Level {
    /// key → value → child (looked up by `&str`, no allocation).
    exact: HashMap<String, HashMap<String, Node>>,
    /// `*` patterns, in file order: key, pattern parts (split on `*`), child.
    wildcard: Vec<(String, Vec<String>, Node)>,
    /// key (no value) → child.
    default: HashMap<String, Node>,
}

impl Level {
    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.default.is_empty()
    }
}

#[derive(Debug)]
struct Node {
    limit: Option<Arc<Limit>>,
    /// `share_threshold`: every value this pattern matches shares one bucket.
    share_threshold: bool,
    /// `value_to_metric`: the request's value at this level goes into the metric label.
    value_to_metric: bool,
    /// The configured value (`None`: a value-less descriptor).
    value: Option<String>,
    next: Level,
}

/// One domain's tree.
#[derive(Debug)]
struct Domain {
    root: Level,
}

/// A loaded configuration: every domain, and every limit it defines.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Domain>,
    limits: Vec<Arc<Limit>>,
    warnings: Vec<ConfigError>,
    /// Warnings past [`Config::MAX_WARNINGS`], counted only.
    warnings_not_kept: usize,
}

/// Appends `s` to a bucket with the separators (`\x1e`, `\x1f`) and the escape (`\x1b`) each
/// preceded by `\x1b`; a string without them (every ordinary one) is copied as it is.
fn push_escaped(bucket: &mut String, s: &str) {
    if !s.bytes().any(|b| matches!(b, 0x1b | 0x1e | 0x1f)) {
        bucket.push_str(s);
        return;
    }
    for c in s.chars() {
        if matches!(c, '\u{1b}' | '\u{1e}' | '\u{1f}') {
            bucket.push('\u{1b}');
        }
        bucket.push(c);
    }
}

/// What a request descriptor matched: the limit, the bucket's key (the request's entries, a
/// shared pattern in place of the value under `share_threshold`) and the metric label.
#[derive(Debug, Clone)]
pub struct Match {
    /// The limit.
    pub limit: Arc<Limit>,
    /// The bucket: the request's entries as `key\x1fvalue` joined by `\x1e`, with `\x1b`,
    /// `\x1e` and `\x1f` in a key or value escaped by a `\x1b` before them, so that no two
    /// entry lists give one bucket (a value cannot pose as further entries).
    pub bucket: String,
    /// The `descriptor` label of the limit's metrics.
    pub metric: String,
}

/// The most levels a descriptor path may have in a config (deeper trees are refused at load).
const MAX_DEPTH: usize = 32;

/// The most bytes of descriptor paths (each with its domain) a config's load may build. A path
/// repeats every key and value above its descriptor, so without a bound a file's load grows
/// with its size squared: one 400 KB key over 2,000 small limits (a 540 KB file) made 2.3 GB
/// of ids and paths, and over 20,000 limitless descriptors copied 8 GB (seconds). A path is
/// built only for a descriptor with a limit (its id) or nested descriptors (their parent).
/// 64 MiB is a million limits with 64-byte ids.
const MAX_PATH_BYTES: usize = 64 << 20;

impl Config {
    /// Loads `path`: one YAML file, or a directory whose `*.yaml`/`*.yml` entries (links
    /// followed, names starting with `.` skipped) each hold one domain.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_sources(&read_sources(path)?)
    }

    /// Builds a configuration from `(file name, YAML text)` pairs, one domain each, for the
    /// local backend ([`Target::Local`]).
    pub fn from_sources(sources: &[(PathBuf, String)]) -> Result<Config, ConfigError> {
        Config::from_sources_for(sources, Target::Local)
    }

    /// [`Config::from_sources`], for `target`: a rate `target` cannot hold is refused.
    pub fn from_sources_for(
        sources: &[(PathBuf, String)],
        target: Target,
    ) -> Result<Config, ConfigError> {
        Config::from_sources_with(
            sources,
            LoadOptions {
                target,
                ..LoadOptions::default()
            },
        )
    }

    /// [`Config::from_sources`], under `options`: a rate `options.target` cannot hold is
    /// refused, and so is a config of more than `options.max_descriptors` descriptors.
    pub fn from_sources_with(
        sources: &[(PathBuf, String)],
        options: LoadOptions,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut domain_files: HashMap<String, PathBuf> = HashMap::new();
        let mut path_bytes = 0;
        let mut descriptors = 0;
        let mut mappings = options
            .max_descriptors
            .saturating_mul(4)
            .saturating_add(SPARE_MAPPINGS);
        for (file, text) in sources {
            let mut p = Parser {
                file,
                limits: &mut config.limits,
                warnings: &mut config.warnings,
                warnings_not_kept: &mut config.warnings_not_kept,
                warned: HashSet::new(),
                ids: HashMap::new(),
                domain: String::new(),
                path_bytes: &mut path_bytes,
                descriptors: &mut descriptors,
                mappings: &mut mappings,
                max_descriptors: options.max_descriptors,
                target: options.target,
            };
            let (name, domain) = p.file(text)?;
            if let Some(first) = domain_files.get(&name) {
                return Err(ConfigError {
                    file: file.clone(),
                    line: None,
                    field: "domain".into(),
                    message: format!(
                        "duplicate domain {name:?}: already defined in {}",
                        first.display()
                    ),
                });
            }
            domain_files.insert(name.clone(), file.clone());
            config.domains.insert(name, domain);
        }
        Ok(config)
    }

    /// Every limit, in load order.
    pub fn limits(&self) -> &[Arc<Limit>] {
        &self.limits
    }

    /// What the load ignored or replaced, each with its file, line and field: fields
    /// envoyproxy/ratelimit knows, written in a mapping that does not take them (which it
    /// ignores too, and which cannot loosen a limit; those that could are refused), an
    /// `unlimited` limit's invalid `unit`, and a field written twice in one mapping (the later
    /// value replacing the earlier, as there).
    /// The first [`MAX_WARNINGS`](Config::MAX_WARNINGS) of them; the rest are counted in
    /// [`warnings_not_kept`](Config::warnings_not_kept).
    pub fn warnings(&self) -> &[ConfigError] {
        &self.warnings
    }

    /// The most warnings a config keeps: a file that repeats a field a million times costs
    /// a count, not a message per repeat.
    pub const MAX_WARNINGS: usize = 1_000;

    /// How many warnings the load met past the [`MAX_WARNINGS`](Config::MAX_WARNINGS) kept.
    pub fn warnings_not_kept(&self) -> usize {
        self.warnings_not_kept
    }

    /// The number of domains.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// The limit a request descriptor's entries match in `domain`, if any.
    pub fn lookup<'a, I>(&self, domain: &str, entries: I) -> Option<Match>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: ExactSizeIterator,
    {
        let d = self.domains.get(domain)?;
        let entries = entries.into_iter();
        let n = entries.len();
        let mut level = &d.root;
        let mut found: Option<Arc<Limit>> = None;
        let mut bucket = String::new();
        let mut metric = String::new();
        let mut detailed = String::new();
        for (i, (key, value)) in entries.enumerate() {
            let (node, via_pattern) = match level.exact.get(key).and_then(|m| m.get(value)) {
                Some(n) => (Some(n), None),
                None => match level
                    .wildcard
                    .iter()
                    .find(|(k, parts, _)| k == key && wildcard_match(parts, value))
                {
                    Some((_, _, n)) => (Some(n), n.value.as_deref()),
                    None => (level.default.get(key), None),
                },
            };
            let Some(node) = node else { break };
            if i > 0 {
                bucket.push('\u{1e}');
                metric.push('.');
                detailed.push('.');
            }
            push_escaped(&mut bucket, key);
            bucket.push('\u{1f}');
            let shared = via_pattern.filter(|_| node.share_threshold);
            push_escaped(&mut bucket, shared.unwrap_or(value));
            metric.push_str(key);
            detailed.push_str(key);
            let shown = match (&node.value, shared) {
                (_, Some(p)) => Some(p),
                (Some(v), None) if via_pattern.is_none() => Some(v.as_str()),
                _ if node.value_to_metric => Some(value),
                (Some(p), None) => Some(p.as_str()),
                (None, None) => None,
            };
            if let Some(v) = shown {
                metric.push('_');
                metric.push_str(v);
            }
            detailed.push('_');
            detailed.push_str(shared.unwrap_or(value));
            if i + 1 == n {
                found = node.limit.clone();
            }
            if node.next.is_empty() {
                break;
            }
            level = &node.next;
        }
        let limit = found?;
        let metric = if limit.detailed_metric {
            detailed
        } else {
            metric
        };
        Some(Match {
            limit,
            bucket,
            metric,
        })
    }
}

/// Whether `value` matches a `*` pattern split on `*` (each `*` matches any run of bytes).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return value.is_empty(),
    };
    let Some(mut v) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return v.is_empty();
    };
    if v.len() < last.len() + middle.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let Some(end) = v.len().checked_sub(last.len()) else {
        return false;
    };
    if !v.is_char_boundary(end) || &v[end..] != last.as_str() {
        return false;
    }
    v = &v[..end];
    for part in middle {
        match v.find(part.as_str()) {
            Some(i) => v = &v[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// The `(file name, YAML text)` pairs of `path` ([`config_files`]), what [`Config::load`]
/// loads: a caller that digests them loads the very text it digested.
pub fn read_sources(path: &Path) -> Result<Vec<(PathBuf, String)>, ConfigError> {
    let files = config_files(path)?;
    let mut sources = Vec::with_capacity(files.len());
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| ConfigError {
            file: f.clone(),
            line: None,
            field: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        sources.push((f, text));
    }
    Ok(sources)
}

/// The YAML files of `path`: itself if a file, else its `*.yaml`/`*.yml` entries (links
/// followed, dot entries skipped), sorted by name.
pub fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let err = |message: String| ConfigError {
        file: path.to_owned(),
        line: None,
        field: String::new(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if meta.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    let dir = std::fs::read_dir(path).map_err(|e| err(format!("cannot list: {e}")))?;
    for entry in dir {
        let entry = entry.map_err(|e| err(format!("cannot list: {e}")))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let p = entry.path();
        // Follows links (a ConfigMap's entries are links into `..data/`).
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => files.push(p),
            Ok(_) => {}
            Err(e) => return Err(err(format!("cannot read {}: {e}", p.display()))),
        }
    }
    files.sort();
    Ok(files)
}

/// What a descriptor inherits from the levels above it.
#[derive(Clone, Copy, Default)]
struct Above {
    /// Some level above keeps a bucket per value.
    per_value: bool,
    /// Some level above has `value_to_metric`.
    value_to_metric: bool,
}

/// The mappings of envoyproxy/ratelimit's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The file: `domain`, `descriptors`.
    File,
    /// A descriptor: `key`, `value`, `rate_limit`, `descriptors`, `shadow_mode`,
    /// `detailed_metric`, `value_to_metric`, `share_threshold`.
    Descriptor,
    /// A `rate_limit`: `unit`, `requests_per_unit`, `unlimited`, `name`, `replaces`.
    RateLimit,
    /// A `replaces` entry: `name`.
    Replaces,
}

impl Place {
    fn what(self) -> &'static str {
        match self {
            Place::File => "the file's top level",
            Place::Descriptor => "a descriptor",
            Place::RateLimit => "a rate_limit",
            Place::Replaces => "a replaces entry",
        }
    }
}

/// What the load does with a field written where it does not belong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Misplaced {
    /// Ignored, with a warning.
    Ignored,
    /// Refused, with where the field belongs.
    Refused(&'static str),
}

/// The field names envoyproxy/ratelimit knows (its `validKeys`): it refuses any other name
/// anywhere in a file, and accepts these in any mapping, ignoring one where its schema does
/// not take it.
const KNOWN_FIELDS: [&str; 14] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
];

/// What becomes of field `name` written in `place`, which does not take it: `None` for a
/// name envoyproxy/ratelimit does not know (refused as unknown there and here) and for its
/// `quota_mode` and `metadata` in a descriptor (refused here as not supported). A known field
/// loads ignored, as there, where ignoring it can only make the service stricter or change no
/// decision (a misplaced `shadow_mode` leaves the limit enforced, a misplaced `name` or
/// `replaces` leaves a limit unreplaced, `domain`, `key` or `value` in a `rate_limit` name
/// nothing the descriptor does not); it is refused where ignoring it would silently drop a
/// limit the file writes: a `rate_limit` outside a descriptor, `descriptors` inside a
/// `rate_limit` or a `replaces` entry, a `unit` or `requests_per_unit` outside a `rate_limit`
/// (a limit without its `rate_limit:`), and a `share_threshold` inside a `rate_limit` (every
/// value would get its own bucket instead of sharing one); and, whatever the name, where its
/// value holds a rate ([`holds_rate`], checked by [`Parser::misplaced`]).
fn misplaced(name: &str, place: Place) -> Option<Misplaced> {
    if !KNOWN_FIELDS.contains(&name) {
        if UNSUPPORTED_FIELDS.contains(&name) && place != Place::Descriptor {
            return Some(Misplaced::Ignored);
        }
        return None;
    }
    Some(match (name, place) {
        ("rate_limit", _) => Misplaced::Refused("rate_limit belongs in a descriptor"),
        ("descriptors", Place::RateLimit | Place::Replaces) => {
            Misplaced::Refused("descriptors belong in a descriptor, beside its rate_limit")
        }
        ("unit" | "requests_per_unit", Place::File | Place::Descriptor) => {
            Misplaced::Refused("a rate belongs in a descriptor's rate_limit")
        }
        ("share_threshold", Place::RateLimit) => {
            Misplaced::Refused("share_threshold belongs in the descriptor, beside its rate_limit")
        }
        _ => Misplaced::Ignored,
    })
}

/// The fields read as numbers or flags, which refuse a float where they are read, with their
/// own message ([`Parser::fields`] checks the others).
const TYPED_FIELDS: [&str; 7] = [
    "requests_per_unit",
    "burst",
    "unlimited",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
];

/// The fields that write a rate: a misplaced field whose value holds one of them is refused.
const RATE_FIELDS: [&str; 4] = ["rate_limit", "rate_limits", "unit", "requests_per_unit"];

/// Whether `n` holds a rate: a mapping with a key of [`RATE_FIELDS`] at any depth (through
/// tags and merged mappings, which are mapping values too). `depth`: the node's nesting below
/// the field, never past the loader's own bound ([`MAX_NESTING`]).
fn holds_rate(n: &MarkedYamlOwned, depth: usize) -> bool {
    if depth > MAX_NESTING {
        return false;
    }
    match &n.data {
        YamlDataOwned::Mapping(m) => m.iter().any(|(k, v)| {
            key_name(k).is_some_and(|name| RATE_FIELDS.contains(&name.as_ref()))
                || holds_rate(v, depth + 1)
        }),
        YamlDataOwned::Sequence(s) => s.iter().any(|e| holds_rate(e, depth + 1)),
        YamlDataOwned::Tagged(_, inner) => holds_rate(inner, depth + 1),
        _ => false,
    }
}

struct Parser<'a> {
    file: &'a Path,
    limits: &'a mut Vec<Arc<Limit>>,
    /// What the load ignores ([`Config::warnings`]).
    warnings: &'a mut Vec<ConfigError>,
    /// Warnings past [`Config::MAX_WARNINGS`].
    warnings_not_kept: &'a mut usize,
    /// The keys (line, column) already warned about as a field written twice.
    warned: HashSet<(usize, usize)>,
    /// The ids of the file's limits so far, each with where it was defined: an id names one
    /// table (and one Redis policy), so a second limit with it is refused. Files have distinct
    /// domains, free of the id's `\x1f`, so their ids differ.
    ids: HashMap<String, String>,
    /// The domain of the file being parsed.
    domain: String,
    /// The bytes of the paths built so far (all files), up to [`MAX_PATH_BYTES`].
    path_bytes: &'a mut usize,
    /// The descriptors loaded so far (all files), up to `max_descriptors`.
    descriptors: &'a mut usize,
    /// The mappings the files still parsed may hold ([`LoadOptions`]).
    mappings: &'a mut usize,
    /// [`LoadOptions::max_descriptors`].
    max_descriptors: usize,
    /// The backend the rates must suit.
    target: Target,
}

type Map = saphyr::AnnotatedMapping<'static, MarkedYamlOwned>;

fn line_of(n: &MarkedYamlOwned) -> usize {
    n.span.start.line()
}

/// The field path of field `name` of the mapping at field path `at` (empty: the top level).
fn field_at(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_owned()
    } else {
        format!("{at}.{name}")
    }
}

/// The most collections (mappings, lists) one file may nest in one another. A valid config
/// nests about two per descriptor level (a list, then a mapping), so [`MAX_DEPTH`] levels need
/// about 70 and a config somewhat deeper still reaches the descriptor check with its clearer
/// error. The bound is what keeps the load off the stack: saphyr's own `Parser::load` recurses
/// once per nesting level (block nesting has no limit there; flow nesting stops at 255), and a
/// few thousand nested `-` overflowed a reload thread's stack, aborting the process.
const MAX_NESTING: usize = 128;

/// How much more than the file itself its anchors and aliases may make saphyr's loader copy,
/// in nodes weighed by [`weight`]. The loader copies an anchored node when it is complete and
/// an aliased one at each alias; its own budget counts alias copies only, in nodes (a mapping
/// key as one node whatever it holds, a scalar as one whatever its length), so these grew
/// without bound under it: ten aliases of the previous anchor's key per line (six short lines:
/// half a gigabyte), a 1 MB scalar aliased 2,000 times (2 GB), 120 nested anchors over a
/// 300 KB list (each level a copy: 1.9 GB).
const MAX_COPIED: u64 = 100_000;

/// A node's weight in [`MAX_COPIED`]: one, and one more per 64 bytes of a scalar's text.
fn weight(scalar_len: usize) -> u64 {
    1 + (scalar_len / 64) as u64
}

/// `text`'s YAML documents, every scalar left as its source text (saphyr's `Representation`,
/// after YAML's own quoting, escapes and folding): string fields take that text, as a Go
/// string field of envoyproxy/ratelimit does, and [`resolve`] resolves numbers and flags as
/// yaml.v2 does. A mapping key that repeats an earlier one of its mapping (written again, or
/// an alias of a scalar written earlier) is tagged apart ([`REPEATED_KEY`]), so that the loader
/// keeps both, as yaml.v2 does.
///
/// The parser's events are fed to the loader here, one at a time (not by the recursive
/// `Parser::load`), with the nesting bounded by [`MAX_NESTING`] and what anchors and aliases
/// copy by [`MAX_COPIED`] beyond the file's own weight: loading recurses no deeper than that,
/// and its memory stays within a constant of the file's.
///
/// `mappings` is what the config's files may still hold: each mapping parsed takes one, and a
/// file past it is refused as it is read (over the descriptors bound, `max_descriptors`).
fn load_yaml(
    text: &str,
    mappings: &mut usize,
    max_descriptors: usize,
) -> Result<Vec<MarkedYamlOwned>, YamlFault> {
    use saphyr_parser::{Event, ScalarStyle, ScanError, SpannedEventReceiver};
    let mut loader: YamlLoader<'_, MarkedYamlOwned> = YamlLoader::default();
    loader.early_parse(false);
    // Per open collection: its weight so far (itself included, aliases expanded) and its
    // anchor id (0: none).
    let mut open: Vec<(u64, usize)> = Vec::new();
    // Per open collection, for the keys written twice: whether it is a mapping, the nodes it
    // holds so far (in a mapping, an even count means the next node is a key), its scalar keys
    // so far (text, style, tag), how many of them repeat an earlier one, and whether its last
    // key is a merge key.
    type Keys = HashSet<(String, ScalarStyle, Option<saphyr_parser::Tag>)>;
    let mut keys: Vec<(bool, usize, Keys, usize, bool)> = Vec::new();
    // The anchor ids of lists: yaml.v2 merges an alias of a mapping only (an alias of a list
    // of mappings fails its decoding, while the loader's copy would be a list like any other).
    let mut list_anchors: HashSet<usize> = HashSet::new();
    // Per anchor id: the weight of its node, aliases expanded.
    let mut sizes: HashMap<usize, u64> = HashMap::new();
    // Per anchor id of a scalar: its text, style and tag, which an alias used as a key
    // repeats.
    let mut anchored: HashMap<usize, (String, ScalarStyle, Option<saphyr_parser::Tag>)> =
        HashMap::new();
    // The weight of the nodes written in the file, and of the copies the loader makes.
    let (mut parsed, mut copied) = (0u64, 0u64);
    for next in saphyr_parser::Parser::new_from_str(text) {
        let (mut ev, span) = next.map_err(YamlFault::Invalid)?;
        // An alias weighs what its anchor's node weighs, also when it is made a scalar below.
        let alias_of = match &ev {
            Event::Alias(id) => Some(*id),
            _ => None,
        };
        if let Event::Scalar(text, style, aid, tag) = &ev {
            if *aid > 0 {
                anchored.insert(*aid, (text.to_string(), *style, tag.as_deref().cloned()));
            }
        }
        if matches!(
            ev,
            Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
        ) {
            if let Some((true, nodes, seen, repeats, merge)) = keys.last_mut() {
                let mut copy = None;
                if *nodes % 2 == 1 && *merge {
                    if let Event::Alias(id) = &ev {
                        if list_anchors.contains(id) {
                            return Err(YamlFault::Refused(ScanError::new(
                                span.start,
                                "a merge key (<<) given an alias of a list: yaml.v2 merges an \
                                 alias of a mapping only, and refuses the file (a list of \
                                 aliases merges)"
                                    .into(),
                            )));
                        }
                    }
                }
                if *nodes % 2 == 0 {
                    match &mut ev {
                        Event::Scalar(text, style, _, tag) => {
                            let sig = (text.to_string(), *style, tag.as_deref().cloned());
                            if seen.contains(&sig) {
                                *repeats += 1;
                                *tag = Some(Cow::Owned(repeated_key_tag(*repeats, sig.2.as_ref())));
                            } else {
                                seen.insert(sig);
                            }
                        }
                        // An alias of a scalar as a key is that scalar's text as a key to
                        // yaml.v2: one repeating an earlier key is given as a copy of the
                        // scalar tagged apart, as a repeated scalar key is (the loader refuses
                        // an alias repeating a key). yaml.v2's merge key is a scalar `<<`,
                        // never an alias: an alias of one is the ordinary key `<<` there
                        // (unknown to envoyproxy/ratelimit), so it is given as `!!str <<`.
                        Event::Alias(id) => {
                            if let Some(sig) = anchored.get(id) {
                                let merge_alias;
                                let sig = if sig.0 == "<<" {
                                    let tag = saphyr_parser::Tag {
                                        handle: YAML_TAG.into(),
                                        suffix: "str".into(),
                                    };
                                    merge_alias = (sig.0.clone(), sig.1, Some(tag));
                                    copy = Some(Event::Scalar(
                                        Cow::Owned(sig.0.clone()),
                                        sig.1,
                                        0,
                                        merge_alias.2.clone().map(Cow::Owned),
                                    ));
                                    &merge_alias
                                } else {
                                    sig
                                };
                                if seen.contains(sig) {
                                    *repeats += 1;
                                    let tag = repeated_key_tag(*repeats, sig.2.as_ref());
                                    copy = Some(Event::Scalar(
                                        Cow::Owned(sig.0.clone()),
                                        sig.1,
                                        0,
                                        Some(Cow::Owned(tag)),
                                    ));
                                } else {
                                    seen.insert(sig.clone());
                                }
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(copy) = copy {
                    ev = copy;
                }
                if *nodes % 2 == 0 {
                    *merge = match &ev {
                        Event::Scalar(text, style, _, tag) => {
                            is_merge_scalar(text, *style, tag.as_deref())
                        }
                        _ => false,
                    };
                }
                *nodes += 1;
            }
        }
        match &ev {
            Event::SequenceStart(aid, _) => {
                if *aid > 0 {
                    list_anchors.insert(*aid);
                }
                keys.push((false, 0, HashSet::new(), 0, false))
            }
            Event::MappingStart(..) => keys.push((true, 0, HashSet::new(), 0, false)),
            Event::SequenceEnd | Event::MappingEnd => {
                keys.pop();
            }
            _ => {}
        }
        let closed = match &ev {
            Event::SequenceStart(aid, _) | Event::MappingStart(aid, _) => {
                if matches!(ev, Event::MappingStart(..)) {
                    let Some(left) = mappings.checked_sub(1) else {
                        return Err(YamlFault::OverBound(ScanError::new(
                            span.start,
                            format!(
                                "more mappings than {max_descriptors} descriptors hold (four \
                                 each, plus {SPARE_MAPPINGS}): a config defines at most \
                                 {max_descriptors} descriptors (--max-descriptors)"
                            ),
                        )));
                    };
                    *mappings = left;
                }
                if open.len() >= MAX_NESTING {
                    return Err(YamlFault::Invalid(ScanError::new(
                        span.start,
                        format!("collections nested deeper than {MAX_NESTING}"),
                    )));
                }
                parsed += 1;
                open.push((1, *aid));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => open.pop(),
            // An anchor not yet complete (an alias inside its own anchor) is left to the
            // loader, which refuses or empties it; it weighs one here.
            _ if alias_of.is_some() => {
                let w = alias_of.and_then(|id| sizes.get(&id).copied()).unwrap_or(1);
                parsed += 1;
                copied = copied.saturating_add(w);
                Some((w, 0))
            }
            Event::Scalar(v, _, aid, _) => {
                let w = weight(v.len());
                parsed = parsed.saturating_add(w);
                Some((w, *aid))
            }
            _ => None,
        };
        if let Some((w, aid)) = closed {
            if aid > 0 {
                sizes.insert(aid, w);
                copied = copied.saturating_add(w);
            }
            if let Some(parent) = open.last_mut() {
                parent.0 = parent.0.saturating_add(w);
            }
        }
        if copied > parsed.saturating_add(MAX_COPIED) {
            return Err(YamlFault::Invalid(ScanError::new(
                span.start,
                format!(
                    "anchors and aliases copy more than the file holds by over {MAX_COPIED} \
                     nodes (possible billion-laughs attack)"
                ),
            )));
        }
        loader.on_event(ev, span);
        // An error the loader met (an alias past its node budget, an alias as a key repeating
        // an earlier key) stops it without failing the parse.
        if let Some(e) = loader.error() {
            return Err(YamlFault::Invalid(e.clone()));
        }
    }
    Ok(loader.into_documents())
}

/// Why [`load_yaml`] refused a text.
enum YamlFault {
    /// Not YAML, or YAML past a bound of its own (nesting, alias copies).
    Invalid(saphyr::ScanError),
    /// More mappings than the descriptors bound allows ([`LoadOptions`]).
    OverBound(saphyr::ScanError),
    /// YAML that yaml.v2 fails to decode, whatever the field: a merge of an alias of a list.
    Refused(saphyr::ScanError),
}

/// Whether a node is a null scalar (`~`, `null`, nothing).
fn is_null(n: &MarkedYamlOwned) -> bool {
    matches!(resolve(n), Some((_, Resolved::Null)))
}

/// The handle of the tag [`load_yaml`] gives a mapping key that repeats an earlier key of its
/// mapping (same text, style and tag): saphyr's loader refuses a key twice, while yaml.v2's
/// non-strict decoding keeps both, the later value replacing the earlier, and merges each of
/// several merge keys in turn. The suffix numbers the repeat (so no two are equal) and keeps
/// the key's own tag ([`original_tag`]); nothing reads this handle as a tag of its own.
const REPEATED_KEY: &str = "tag:tollgate-rls,repeated:";

fn repeated_key_tag(n: usize, own: Option<&saphyr_parser::Tag>) -> saphyr_parser::Tag {
    let suffix = match own {
        Some(t) => format!("{n}\0{}\0{}", t.handle, t.suffix),
        None => n.to_string(),
    };
    saphyr_parser::Tag {
        handle: REPEATED_KEY.into(),
        suffix,
    }
}

/// A scalar's tag as written: [`REPEATED_KEY`]'s mark taken off, and a tag of YAML's own
/// ([`YAML_TAG`]) under that handle however it was written (`!!int`, the verbatim
/// `!<tag:yaml.org,2002:int>`, a `%TAG` prefix ending elsewhere in it): yaml.v2 compares the
/// whole tag, so each of those is its `!!int`.
fn original_tag(tag: Option<&saphyr_parser::Tag>) -> Option<Cow<'_, saphyr_parser::Tag>> {
    let t = tag?;
    let t = if t.handle != REPEATED_KEY {
        Cow::Borrowed(t)
    } else {
        let mut parts = t.suffix.splitn(3, '\0');
        let (_, handle, suffix) = (parts.next(), parts.next()?, parts.next()?);
        Cow::Owned(saphyr_parser::Tag {
            handle: handle.into(),
            suffix: suffix.into(),
        })
    };
    if t.handle == YAML_TAG {
        return Some(t);
    }
    let whole = format!("{}{}", t.handle, t.suffix);
    Some(match whole.strip_prefix(YAML_TAG) {
        Some(own) => Cow::Owned(saphyr_parser::Tag {
            handle: YAML_TAG.into(),
            suffix: own.into(),
        }),
        None => t,
    })
}

/// The handle of YAML's own tags (`!!str`, `!!merge`).
const YAML_TAG: &str = "tag:yaml.org,2002:";

/// Whether a mapping key is YAML's merge key as yaml.v2 takes one (its `isMerge`): the scalar
/// `<<`, implicit (plain and untagged, or under the non-specific tag `!` quoted or not, which
/// yaml.v2's parser marks implicit as it marks a plain scalar) or tagged `!!merge` (quoted or
/// not). A quoted `<<` and `!!str <<` are ordinary keys.
fn is_merge_key(k: &MarkedYamlOwned) -> bool {
    let YamlDataOwned::Representation(text, style, tag) = &k.data else {
        return false;
    };
    is_merge_scalar(text, *style, tag.as_ref())
}

/// [`is_merge_key`] for a scalar's text, style and tag (as [`load_yaml`] gives it).
fn is_merge_scalar(
    text: &str,
    style: saphyr_parser::ScalarStyle,
    tag: Option<&saphyr_parser::Tag>,
) -> bool {
    text == "<<"
        && match original_tag(tag) {
            None => style == saphyr_parser::ScalarStyle::Plain,
            Some(t) => is_non_specific(&t) || (t.handle == YAML_TAG && t.suffix == "merge"),
        }
}

/// Whether a tag is the non-specific `!`, however written (`!`, `!<!>`, a `%TAG` handle whose
/// prefix is `!` with no suffix): yaml.v2 compares the whole tag with `!`.
fn is_non_specific(t: &saphyr_parser::Tag) -> bool {
    (t.handle.is_empty() && t.suffix == "!") || (t.handle == "!" && t.suffix.is_empty())
}

/// A scalar as yaml.v2 resolves it (its `resolve`, YAML 1.1's types) for the fields of
/// envoyproxy/ratelimit: what a string, integer or flag field makes of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolved {
    /// `~`, `null`, `Null`, `NULL` or nothing, plain; or `!!null`: an empty string, 0, false.
    Null,
    /// `y`, `yes`, `on`, `true` (`n`, `no`, `off`, `false`) in three casings, plain; or
    /// under `!!bool`.
    Bool(bool),
    /// A whole number as Go's `strconv.ParseInt(s, 0, 64)` reads it once yaml.v2 has dropped
    /// every `_`: a sign, then `0x`, `0o`, `0b` or a leading `0` (octal) or decimal digits;
    /// plain, or under `!!int`. Saturated beyond `i128`: out of every field's range anyway.
    Int(i128),
    /// A value only a string field takes (as its text): a timestamp under `!!timestamp`.
    Other,
    /// A string field's bytes written in base64 under `!!binary`, which yaml.v2 decodes
    /// ([`go_base64`]); the text is valid base64 (other text fails the whole file there).
    Binary,
    /// A float to yaml.v2 (`1.0`, `1e3`, `.5`, `08`, `.inf`, plain; a float or a 64-bit signed
    /// integer under `!!float`):
    /// no leaf envoyproxy/ratelimit's key check accepts ([`key_check_refuses`]).
    Float,
    /// A string: quoted, `!!str`, a plain scalar that is none of the above, or under a tag
    /// yaml.v2 does not resolve (`!x`, `!!merge`), which leaves the text.
    Text,
}

/// A plain untagged scalar's type under yaml.v2 ([`Resolved`]).
fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Resolved::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Resolved::Bool(false)
        }
        _ => {}
    }
    match go_int(text) {
        Some(i) => Resolved::Int(i),
        None if go_float(text) => Resolved::Float,
        None => Resolved::Text,
    }
}

/// The floats of yaml.v2's resolver besides `!!float` (its `resolve`): `.inf`, `.nan` and their
/// signed and capitalised forms; a text starting with `.` that Go's `ParseFloat` reads; a text
/// starting with a digit or a sign that is no integer and, its `_` dropped, matches
/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` within `f64`'s range (`08`, whose
/// octal fails, is the float 8 there; `1e400` stays a string).
fn go_float(text: &str) -> bool {
    if matches!(
        text,
        ".inf"
            | ".Inf"
            | ".INF"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
    ) {
        return true;
    }
    let plain: Cow<'_, str> = match text.as_bytes().first() {
        Some(b'.') => Cow::Borrowed(text),
        Some(b) if b.is_ascii_digit() || *b == b'+' || *b == b'-' => {
            Cow::Owned(text.replace('_', ""))
        }
        _ => return false,
    };
    yaml_style_float(&plain) && plain.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Whether `s` matches yaml.v2's `yamlStyleFloat` (see [`go_float`]). yaml.v2 hands a text
/// starting with `.` to Go's `ParseFloat` without the pattern, which reads there just what the
/// pattern matches (no `_`, no `inf` after a `.`).
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let from = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    } else {
        if !digits(&mut i) {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// Whether envoyproxy/ratelimit's key check (`validateYamlKeys`, which takes strings, ints,
/// flags and nulls as leaves and fails "error checking config" on anything else) refuses the
/// scalar `n` as yaml.v2 decodes it into an `interface{}`: a float, or a plain whole number
/// past `int64` (a `uint64` there up to `2^64 - 1` unless written with a `+`, which Go's
/// `ParseUint` refuses; a float when its digits, `_` dropped, match the float pattern; a
/// string otherwise, in hexadecimal or binary).
fn key_check_refuses(n: &MarkedYamlOwned) -> bool {
    match resolve(n) {
        Some((_, Resolved::Float)) => true,
        Some((text, Resolved::Int(i))) => {
            i64::try_from(i).is_err()
                && ((u64::try_from(i).is_ok() && !text.starts_with('+'))
                    || yaml_style_float(&text.replace('_', "")))
        }
        _ => false,
    }
}

/// `text` as yaml.v2 reads an integer ([`Resolved::Int`]), if it is one.
fn go_int(text: &str) -> Option<i128> {
    if !text.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-') {
        return None;
    }
    let plain: Cow<'_, str> = if text.contains('_') {
        Cow::Owned(text.replace('_', ""))
    } else {
        Cow::Borrowed(text)
    };
    let (negative, rest) = match plain.as_bytes().first() {
        Some(b'-') => (true, &plain[1..]),
        Some(b'+') => (false, &plain[1..]),
        _ => (false, plain.as_ref()),
    };
    let lower = rest.get(..2).map(str::to_ascii_lowercase);
    let (radix, digits) = match lower.as_deref() {
        Some("0x") => (16, &rest[2..]),
        Some("0o") => (8, &rest[2..]),
        Some("0b") => (2, &rest[2..]),
        _ if rest.len() > 1 && rest.starts_with('0') => (8, &rest[1..]),
        _ => (10, rest),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Only the magnitude's sign is out of range: every digit is valid.
    let magnitude = u128::from_str_radix(digits, radix)
        .map_or(i128::MAX, |m| i128::try_from(m).unwrap_or(i128::MAX));
    Some(if negative { -magnitude } else { magnitude })
}

/// Whether yaml.v2 takes `text`, read as `i` by [`go_int`], as an `!!int`: its resolver gives
/// an integer only where Go's `ParseInt` (64-bit signed) or `ParseUint` (64-bit, no sign)
/// reads the text, in any base; past that the text is a string or a float there, which the
/// `!!int` tag refuses ("cannot decode"), failing the whole file.
fn go_int_fits(text: &str, i: i128) -> bool {
    i64::try_from(i).is_ok() || (u64::try_from(i).is_ok() && !text.starts_with(['+', '-']))
}

/// `text` as Go's `base64.StdEncoding.DecodeString` decodes it (yaml.v2's `!!binary`): the
/// standard alphabet, padded with `=` to whole groups of four, `\r` and `\n` skipped wherever
/// they stand, and the unused low bits of a padded group ignored. `None` for anything else
/// (a space, a missing or inner `=`), which yaml.v2 refuses, failing the whole file.
fn go_base64(text: &str) -> Option<Vec<u8>> {
    let b: Vec<u8> = text
        .bytes()
        .filter(|c| !matches!(c, b'\r' | b'\n'))
        .collect();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let sextet = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let groups = b.len() / 4;
    let mut out = Vec::with_capacity(groups * 3);
    for (i, g) in b.chunks_exact(4).enumerate() {
        // Padding only ends the text: `xx==` or `xxx=`.
        let pad = match (g[2], g[3]) {
            (b'=', b'=') => 2,
            (_, b'=') => 1,
            _ => 0,
        };
        if pad > 0 && i + 1 < groups {
            return None;
        }
        let mut n = 0u32;
        for &c in &g[..4 - pad] {
            n = n << 6 | sextet(c)?;
        }
        n <<= 6 * pad;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Some(out)
}

/// Whether yaml.v2 reads `text` as a timestamp (its `parseTimestamp`): four digits and `-`,
/// then one of Go's layouts `2006-1-2T15:4:5.999999999Z07:00` (`T` or `t`),
/// `2006-1-2 15:4:5.999999999` or `2006-1-2`, as Go's `time.Parse` reads them: a month, day,
/// hour, minute or second of one or two digits, each in its range (the day in its month's),
/// a fraction of any number of digits after `.` or `,` (or none), one or more spaces where the
/// layout has one, a zone `Z` or `±hh:mm` (hours to 24, minutes to 60), nothing after.
fn go_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    // Go's `getnum`: one digit, or two.
    fn num(r: &mut &[u8]) -> Option<u32> {
        let d = |i: usize| {
            r.get(i)
                .filter(|c| c.is_ascii_digit())
                .map(|c| u32::from(c - b'0'))
        };
        let first = d(0)?;
        Some(match d(1) {
            Some(second) => {
                *r = &r[2..];
                first * 10 + second
            }
            None => {
                *r = &r[1..];
                first
            }
        })
    }
    fn lit(r: &mut &[u8], c: u8) -> Option<()> {
        (r.first() == Some(&c)).then(|| *r = &r[1..])
    }
    // The time of day and its fraction: `15:4:5.999999999`.
    fn clock(r: &mut &[u8]) -> Option<()> {
        let hour = num(r)?;
        lit(r, b':')?;
        let minute = num(r)?;
        lit(r, b':')?;
        let second = num(r)?;
        if hour >= 24 || minute >= 60 || second >= 60 {
            return None;
        }
        if r.len() >= 2 && matches!(r[0], b'.' | b',') && r[1].is_ascii_digit() {
            let digits = r[1..].iter().take_while(|c| c.is_ascii_digit()).count();
            *r = &r[1 + digits..];
        }
        Some(())
    }
    let parse = || -> Option<()> {
        let year: u32 = text[..4].parse().ok()?;
        let mut r = &b[5..];
        let month = num(&mut r)?;
        lit(&mut r, b'-')?;
        let day = num(&mut r)?;
        let leap =
            year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if day < 1 || day > days {
            return None;
        }
        match r.first() {
            None => {}
            Some(b'T' | b't') => {
                r = &r[1..];
                clock(&mut r)?;
                if lit(&mut r, b'Z').is_none() {
                    // `±hh:mm`, two digits each.
                    let z = r.get(..6)?;
                    let two = |p: &[u8]| -> Option<u32> {
                        p.iter()
                            .all(u8::is_ascii_digit)
                            .then(|| u32::from(p[0] - b'0') * 10 + u32::from(p[1] - b'0'))
                    };
                    if !matches!(z[0], b'+' | b'-') || z[3] != b':' {
                        return None;
                    }
                    if two(&z[1..3])? > 24 || two(&z[4..6])? > 60 {
                        return None;
                    }
                    r = &r[6..];
                }
            }
            Some(b' ') => {
                while r.first() == Some(&b' ') {
                    r = &r[1..];
                }
                clock(&mut r)?;
            }
            Some(_) => return None,
        }
        r.is_empty().then_some(())
    };
    parse().is_some()
}

/// Why yaml.v2 fails the whole file on the scalar `n` (decoding it, wherever it stands: a
/// field read, ignored or replaced by a later one), or `None` when it decodes.
fn undecodable(n: &MarkedYamlOwned) -> Option<String> {
    let YamlDataOwned::Representation(text, _, tag) = &n.data else {
        return None;
    };
    if resolve(n).is_some() {
        return None;
    }
    let tag = original_tag(tag.as_ref())?;
    Some(if tag.suffix == "binary" {
        "!!binary value contains invalid base64 data: yaml.v2 refuses the file".into()
    } else {
        format!(
            "{text:?} is not a !!{}: yaml.v2 refuses the file (\"cannot decode\")",
            tag.suffix
        )
    })
}

/// The refusal of a merge key whose value is not a mapping or a list of mappings.
const MERGE_TAKES_MAPPINGS: &str =
    "a merge key (<<) takes a mapping or a list of mappings: yaml.v2 refuses the file";

/// What the merge key value `v` merges, in the order yaml.v2 merges it (its `decoder.merge`):
/// `v` itself, or each entry of its list from the last, so that an earlier mapping's fields
/// win over a later one's. Each node comes with its mapping (through tags, [`untagged`]), or
/// `None` where it is not one, which fails the file there ([`MERGE_TAKES_MAPPINGS`]).
fn merge_sources(
    v: &MarkedYamlOwned,
) -> impl DoubleEndedIterator<Item = (&MarkedYamlOwned, Option<&Map>)> {
    let list = match &untagged(v).data {
        YamlDataOwned::Sequence(s) => s.as_slice(),
        _ => std::slice::from_ref(v),
    };
    list.iter().rev().map(|n| match &untagged(n).data {
        YamlDataOwned::Mapping(m) => (n, Some(m)),
        _ => (n, None),
    })
}

/// Why yaml.v2 fails the whole file on mapping entry `(k, v)` as it decodes the file into a
/// generic map (wherever the mapping stands: every value is decoded, one a later one replaces
/// too), with the node at fault: a mapping or a list as a key ("invalid map key"), or a merge
/// key whose value is not a mapping or a list of mappings. Tags on collections count for
/// nothing there ([`untagged`]).
fn entry_fault<'n>(
    k: &'n MarkedYamlOwned,
    v: &'n MarkedYamlOwned,
) -> Option<(&'n MarkedYamlOwned, &'static str)> {
    if matches!(
        untagged(k).data,
        YamlDataOwned::Mapping(_) | YamlDataOwned::Sequence(_)
    ) {
        return Some((
            k,
            "a mapping or a list as a key: yaml.v2 refuses the file (\"invalid map key\")",
        ));
    }
    if !is_merge_key(k) {
        return None;
    }
    // The first in the file, of all its merge would fail on.
    merge_sources(v)
        .rev()
        .find(|(_, m)| m.is_none())
        .map(|(n, _)| (n, MERGE_TAKES_MAPPINGS))
}

/// The first node of `doc` that fails yaml.v2's decoding ([`undecodable`], [`entry_fault`], an
/// alias inside its own anchor), with why and, where `path` is given (holding the top level's
/// entry), its entry there: each node visited is added with its parent's entry and its step,
/// so that [`field_path`] names it (a key's is its mapping's; a merged mapping's fields are its
/// mapping's). Without `path` no step is made, and the entry is 0.
#[allow(clippy::type_complexity)]
fn first_undecodable<'n>(
    doc: &'n MarkedYamlOwned,
    mut path: Option<&mut Vec<(usize, Segment<'n>)>>,
) -> Option<(&'n MarkedYamlOwned, usize, Cow<'static, str>)> {
    // A step from entry `at`, made only with a path.
    let mut step = |at: usize, s: &dyn Fn() -> Segment<'n>| match path.as_deref_mut() {
        Some(path) => {
            path.push((at, s()));
            path.len() - 1
        }
        None => 0,
    };
    // A stack, not recursion: aliases copy nodes, so a value can nest deeper than the file.
    let mut stack = vec![(doc, 0)];
    while let Some((n, at)) = stack.pop() {
        match &n.data {
            YamlDataOwned::Mapping(m) => {
                for (k, v) in m {
                    if let Some((node, why)) = entry_fault(k, v) {
                        return Some((node, at, Cow::Borrowed(why)));
                    }
                }
                for (k, v) in m {
                    stack.push((k, at));
                    if is_merge_key(k) {
                        stack.push((v, at));
                        continue;
                    }
                    let name = || {
                        Segment::Name(match &k.data {
                            YamlDataOwned::Representation(text, ..) => {
                                key_name(k).unwrap_or(Cow::Borrowed(text))
                            }
                            _ => Cow::Borrowed("?"),
                        })
                    };
                    stack.push((v, step(at, &name)));
                }
            }
            YamlDataOwned::Sequence(s) => {
                for (i, e) in s.iter().enumerate() {
                    stack.push((e, step(at, &|| Segment::Index(i))));
                }
            }
            YamlDataOwned::Tagged(_, inner) => stack.push((inner, at)),
            // saphyr's loader gives an alias of an anchor still open (inside its own node) as
            // a bad value; yaml.v2 fails decoding it.
            YamlDataOwned::BadValue => {
                return Some((
                    n,
                    at,
                    Cow::Borrowed(
                        "an alias inside its own anchor: yaml.v2 refuses the file (\"anchor \
                         value contains itself\")",
                    ),
                ))
            }
            // Only a tagged scalar can fail to decode.
            YamlDataOwned::Representation(_, _, Some(_)) => {
                if let Some(why) = undecodable(n) {
                    return Some((n, at, Cow::Owned(why)));
                }
            }
            _ => {}
        }
    }
    None
}

/// A mapping key's name as yaml.v2 decodes it for envoyproxy/ratelimit: a scalar it resolves
/// as a string, its text (under `!!binary`, the decoded text; bytes that are not UTF-8 can
/// name no field, and are shown with `\u{FFFD}` in their place). `None` for any other key.
fn key_name(k: &MarkedYamlOwned) -> Option<Cow<'_, str>> {
    match resolve(k)? {
        (text, Resolved::Text) => Some(Cow::Borrowed(text)),
        (text, Resolved::Binary) => {
            Some(Cow::Owned(binary_text(text).unwrap_or_else(|b| {
                String::from_utf8_lossy(&b).into_owned()
            })))
        }
        _ => None,
    }
}

/// The fields envoyproxy/ratelimit knows beyond [`KNOWN_FIELDS`]: they take effect only in a
/// descriptor, where tollgate-rls refuses them ([`Parser::unknown`]); elsewhere they are
/// ignored, as there ([`misplaced`]).
const UNSUPPORTED_FIELDS: [&str; 2] = ["quota_mode", "metadata"];

/// tollgate-rls's extensions to envoyproxy/ratelimit's fields.
const EXTENSION_FIELDS: [&str; 2] = ["burst", "rate_limits"];

/// Whether the key check takes `name`: ratelimit's `validKeys` ([`KNOWN_FIELDS`] and
/// [`UNSUPPORTED_FIELDS`]) and tollgate-rls's extensions.
fn key_check_takes(name: &str) -> bool {
    KNOWN_FIELDS.contains(&name)
        || UNSUPPORTED_FIELDS.contains(&name)
        || EXTENSION_FIELDS.contains(&name)
}

/// A node without its tags. saphyr keeps a collection's tag unless it is one of YAML's own
/// (`!!map`, `!!null`, `!!str` on a mapping are dropped there, `!foo` or a verbatim tag is kept);
/// yaml.v2's parser keeps none, so it decodes any tagged collection as the collection.
fn untagged(mut n: &MarkedYamlOwned) -> &MarkedYamlOwned {
    while let YamlDataOwned::Tagged(_, inner) = &n.data {
        n = inner;
    }
    n
}

/// A step of a field path: a field's name, or an index in a list.
enum Segment<'n> {
    Name(Cow<'n, str>),
    Index(usize),
}

/// The field path (`descriptors[0].name`) of entry `at` of `path`, where each entry is its
/// parent's index and its own step, and entry 0 is the file's top level.
fn field_path(path: &[(usize, Segment<'_>)], mut at: usize) -> String {
    let mut steps = Vec::new();
    while at != 0 {
        steps.push(&path[at].1);
        at = path[at].0;
    }
    let mut f = String::new();
    for step in steps.iter().rev() {
        match step {
            Segment::Name(name) => {
                if !f.is_empty() {
                    f.push('.');
                }
                f.push_str(name);
            }
            Segment::Index(i) => f.push_str(&format!("[{i}]")),
        }
    }
    f
}

/// A type of envoyproxy/ratelimit's config structs as yaml.v2 decodes a value into it (its
/// `YamlDescriptor`, `YamlRateLimit`, `yamlReplaces` and their fields' Go types), for a value
/// the load does not read because a later one replaces it ([`Parser::replaced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GoType {
    /// A Go `string`: any scalar.
    Text,
    /// A Go `bool`: a flag.
    Flag,
    /// A Go `uint32` (`requests_per_unit`).
    Count,
    /// `metadata`, a Go `map[string]interface{}`: any mapping.
    Metadata,
    /// A descriptor.
    Descriptor,
    /// A `rate_limit` (a pointer to its struct: null is none).
    RateLimit,
    /// A `replaces` entry.
    Replace,
    /// `descriptors`: a list of descriptors.
    Descriptors,
    /// `replaces`: a list of replaces entries.
    ReplacesList,
    /// `rate_limits`, tollgate-rls's extension: a list of `rate_limit`s. envoyproxy/ratelimit's
    /// structs have no such field (yaml.v2 skips it); an earlier one is checked by this
    /// reader's own rule, as yaml.v2 checks an earlier `descriptors` or `rate_limit`.
    RateLimits,
    /// `burst`, tollgate-rls's extension in a `rate_limit`: a whole number in `0..=u64::MAX`.
    /// envoyproxy/ratelimit's structs have no such field (yaml.v2 skips it); one in a value
    /// a later one replaces is checked by this reader's own rule, as [`GoType::RateLimits`].
    Burst,
}

impl GoType {
    /// The type of field `name` of this struct, or `None`: a name the struct has not, whose
    /// value yaml.v2's non-strict decoding skips without decoding it.
    fn field(self, name: &str) -> Option<GoType> {
        use GoType::*;
        Some(match (self, name) {
            (Descriptor, "key" | "value") => Text,
            (Descriptor, "rate_limit") => RateLimit,
            (Descriptor, "descriptors") => Descriptors,
            (
                Descriptor,
                "shadow_mode" | "quota_mode" | "detailed_metric" | "value_to_metric"
                | "share_threshold",
            ) => Flag,
            (Descriptor, "metadata") => Metadata,
            (RateLimit, "requests_per_unit") => Count,
            (RateLimit, "burst") => Burst,
            (RateLimit, "unit" | "name") => Text,
            (RateLimit, "unlimited") => Flag,
            (RateLimit, "replaces") => ReplacesList,
            (Replace, "name") => Text,
            _ => return None,
        })
    }

    /// What a value of this type is, for the error on one that is not.
    fn expected(self) -> &'static str {
        match self {
            GoType::Text => "expected a string",
            GoType::Flag => "expected true or false (or yes/no, on/off)",
            GoType::Count => "expected a whole number in 0..=4294967295",
            GoType::Burst => "expected a whole number in 0..=18446744073709551615",
            GoType::Descriptors | GoType::ReplacesList | GoType::RateLimits => "expected a list",
            GoType::Metadata | GoType::Descriptor | GoType::RateLimit | GoType::Replace => {
                "expected a mapping"
            }
        }
    }
}

/// A fault [`generic_fields`] finds: the node and why.
type Fault<'n> = (&'n MarkedYamlOwned, String);

/// The fields of mapping `m` as yaml.v2 decodes it into a generic map for envoyproxy/ratelimit's
/// key check: a merge key's mapping (or each of its list's, the earlier winning) merged where
/// it stands, a name written again replacing the earlier value; merged mappings nested as deep
/// as [`Parser::fields`] allows. A key that is not a string, or a merge key whose value is not
/// a mapping or a list of them, is a fault.
#[allow(clippy::type_complexity)]
fn generic_fields(
    m: &Map,
) -> Result<Vec<(Cow<'_, str>, &MarkedYamlOwned, &MarkedYamlOwned)>, Fault<'_>> {
    fn walk<'n>(
        m: &'n Map,
        merges: usize,
        out: &mut Vec<(Cow<'n, str>, &'n MarkedYamlOwned, &'n MarkedYamlOwned)>,
        index: &mut HashMap<Cow<'n, str>, usize>,
    ) -> Result<(), Fault<'n>> {
        for (k, v) in m {
            if is_merge_key(k) {
                if merges >= MAX_NESTING {
                    return Err((k, format!("merge keys nested deeper than {MAX_NESTING}")));
                }
                for (s, sm) in merge_sources(v) {
                    let Some(sm) = sm else {
                        return Err((s, MERGE_TAKES_MAPPINGS.into()));
                    };
                    walk(sm, merges + 1, out, index)?;
                }
                continue;
            }
            let Some(name) = key_name(k) else {
                return Err((k, "a key that is not a string".into()));
            };
            // A mapping of a few fields is searched, a longer one looked up in `index`
            // (built once it is past `FEW`): a file's mappings cost their length, not its
            // square, and the common small one no hashing.
            const FEW: usize = 8;
            let at = if out.len() < FEW {
                out.iter().position(|(n, ..)| *n == name)
            } else {
                if index.is_empty() {
                    index.extend(out.iter().enumerate().map(|(i, (n, ..))| (n.clone(), i)));
                }
                index.get(&name).copied()
            };
            match at {
                Some(i) => out[i] = (name, k, v),
                None => {
                    if !index.is_empty() {
                        index.insert(name.clone(), out.len());
                    }
                    out.push((name, k, v));
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::with_capacity(m.len());
    walk(m, 0, &mut out, &mut HashMap::new())?;
    Ok(out)
}

/// The text yaml.v2 decodes a `!!binary` scalar to ([`Resolved::Binary`]), or its bytes when
/// they are not UTF-8.
fn binary_text(text: &str) -> Result<String, Vec<u8>> {
    String::from_utf8(go_base64(text).unwrap_or_default()).map_err(|e| e.into_bytes())
}

/// A scalar node's source text (after YAML's quoting, escapes and folding) and its type as
/// yaml.v2 resolves it. `None` for a collection, or a scalar whose core tag its text does not
/// fit, which fails the whole file there ([`undecodable`]): `!!int x`, an `!!int` past 64
/// bits, `!!float x`, `!!timestamp x`, `!!binary` that is not base64.
fn resolve(n: &MarkedYamlOwned) -> Option<(&str, Resolved)> {
    let YamlDataOwned::Representation(text, style, tag) = &n.data else {
        return None;
    };
    let plain = *style == saphyr_parser::ScalarStyle::Plain;
    let resolved = match original_tag(tag.as_ref()) {
        None if plain => resolve_plain(text),
        None => Resolved::Text,
        Some(t) if t.handle == YAML_TAG => {
            let implicit = resolve_plain(text);
            match (t.suffix.as_str(), implicit) {
                ("str", _) => Resolved::Text,
                ("binary", _) if go_base64(text).is_some() => Resolved::Binary,
                ("null", Resolved::Null) | ("bool", Resolved::Bool(_)) => implicit,
                ("int", Resolved::Int(i)) if go_int_fits(text, i) => implicit,
                // yaml.v2 turns an integer that is an `int64` there into a float, no other.
                ("float", Resolved::Float) => Resolved::Float,
                ("float", Resolved::Int(i)) if i64::try_from(i).is_ok() => Resolved::Float,
                ("timestamp", _) if go_timestamp(text) => Resolved::Other,
                ("binary" | "null" | "bool" | "int" | "float" | "timestamp", _) => return None,
                _ => Resolved::Text,
            }
        }
        Some(_) => Resolved::Text,
    };
    Some((text.as_str(), resolved))
}

impl Parser<'_> {
    /// Keeps `w` as a warning of the load, or counts it past [`Config::MAX_WARNINGS`].
    fn warn(&mut self, w: ConfigError) {
        if self.warnings.len() < Config::MAX_WARNINGS {
            self.warnings.push(w);
        } else {
            *self.warnings_not_kept += 1;
        }
    }

    fn err(&self, node: Option<&MarkedYamlOwned>, field: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: node.map(line_of),
            field: field.to_owned(),
            message,
        }
    }

    fn file(&mut self, text: &str) -> Result<(String, Domain), ConfigError> {
        let docs = load_yaml(text, self.mappings, self.max_descriptors).map_err(|fault| {
            let (e, what) = match &fault {
                YamlFault::Invalid(e) => (e, "not valid YAML: "),
                YamlFault::OverBound(e) | YamlFault::Refused(e) => (e, ""),
            };
            ConfigError {
                file: self.file.to_owned(),
                line: Some(e.marker().line()),
                field: String::new(),
                message: format!("{what}{}", e.info()),
            }
        })?;
        if docs.len() > 1 {
            return Err(self.err(
                docs.get(1),
                "",
                "more than one YAML document: one domain per file".into(),
            ));
        }
        let Some(doc) = docs.first() else {
            return Err(self.err(
                None,
                "domain",
                "an empty file: the domain is missing".into(),
            ));
        };
        let map = self.mapping(doc, "the file")?;
        let mut domain = None;
        let mut descriptors = None;
        for (name, k, v) in self.fields(map, "", true)? {
            match name.as_str() {
                "domain" => domain = Some((self.string(v, "domain")?, v)),
                "descriptors" => {
                    if let Some(earlier) = descriptors.replace(v) {
                        self.replaced(earlier, GoType::Descriptors, "descriptors")?;
                    }
                }
                other => self.misplaced(k, v, "", other, Place::File, true)?,
            }
        }
        let domain = match domain {
            // Table ids and Redis keys are `DOMAIN\x1fPATH` and `DOMAIN\x1fBUCKET`: with no
            // `\x1f` in a domain, their first `\x1f` ends it, so two domains never share one.
            Some((d, v)) if d.contains('\u{1f}') => {
                return Err(self.err(
                    Some(v),
                    "domain",
                    format!(
                        "{d:?} holds the control character \\x1f, which ends the domain in \
                         table ids and Redis keys"
                    ),
                ))
            }
            Some((d, _)) if !d.is_empty() => d,
            _ => {
                return Err(self.err(
                    Some(doc),
                    "domain",
                    "missing or empty: every file names its domain".into(),
                ))
            }
        };
        let mut root = Level::default();
        self.domain.clone_from(&domain);
        if let Some(d) = descriptors {
            self.level(d, "", "descriptors", &mut root, 0, Above::default())?;
        }
        self.key_check(doc)?;
        Ok((domain, Domain { root }))
    }

    fn unknown(&self, k: &MarkedYamlOwned, at: &str, name: &str) -> ConfigError {
        let field = field_at(at, name);
        let message = match name {
            "quota_mode" => {
                "quota_mode is not supported by tollgate-rls (refused rather than ignored)".into()
            }
            "metadata" => {
                "metadata (response dynamic metadata) is not supported by tollgate-rls (refused \
                 rather than ignored)"
                    .into()
            }
            _ => format!("unknown field {name:?}"),
        };
        self.err(Some(k), &field, message)
    }

    /// A field that `place` does not take, with its value `v`: refused if envoyproxy/ratelimit
    /// does not know it either ([`Parser::unknown`]); else as [`misplaced`] decides, a warning
    /// or an error, and refused whenever `v` holds a rate ([`holds_rate`]): ignored, the field
    /// would take that limit with it. An ignored value still gets envoyproxy/ratelimit's key
    /// check, once the file is parsed ([`Parser::key_check`]).
    ///
    /// `key_checked`: whether envoyproxy/ratelimit's key check reads the mapping; where it does
    /// not (a `rate_limit` a later one replaces in its generic map, whose fields still fill the
    /// struct) a name it does not know is ignored, as a known misplaced one is (with a warning,
    /// refused where its value holds a rate).
    fn misplaced(
        &mut self,
        k: &MarkedYamlOwned,
        v: &MarkedYamlOwned,
        at: &str,
        name: &str,
        place: Place,
        key_checked: bool,
    ) -> Result<(), ConfigError> {
        let effect = match misplaced(name, place) {
            Some(effect) => effect,
            None if !key_checked => Misplaced::Ignored,
            None => return Err(self.unknown(k, at, name)),
        };
        let field = field_at(at, name);
        match effect {
            Misplaced::Ignored if holds_rate(v, 0) => Err(self.err(
                Some(k),
                &field,
                format!(
                    "{name:?} is not a field of {} and holds a rate: envoyproxy/ratelimit \
                     ignores it there, which would drop that limit (refused rather than \
                     ignored); a rate belongs in a descriptor's rate_limit",
                    place.what()
                ),
            )),
            Misplaced::Ignored => {
                let w = self.err(
                    Some(k),
                    &field,
                    format!(
                        "{name:?} is not a field of {}: ignored, as envoyproxy/ratelimit \
                         ignores it",
                        place.what()
                    ),
                );
                self.warn(w);
                Ok(())
            }
            Misplaced::Refused(belongs) => Err(self.err(
                Some(k),
                &field,
                format!(
                    "{name:?} is not a field of {}: envoyproxy/ratelimit ignores it there, \
                     which would drop what it limits (refused rather than ignored); {belongs}",
                    place.what()
                ),
            )),
        }
    }

    /// A mapping, through any tag on it: yaml.v2's parser keeps no tag of a collection, so
    /// that `!foo {..}`, `!!null {..}` or `!!str {..}` is the mapping to it.
    fn mapping<'n>(&self, n: &'n MarkedYamlOwned, field: &str) -> Result<&'n Map, ConfigError> {
        match &untagged(n).data {
            YamlDataOwned::Mapping(m) => Ok(m),
            _ => Err(self.err(Some(n), field, "expected a mapping".into())),
        }
    }

    /// A field's name: a scalar yaml.v2 resolves as a string ([`key_name`];
    /// envoyproxy/ratelimit's key check refuses any other key, a number, a flag or null).
    fn key(&self, k: &MarkedYamlOwned, at: &str) -> Result<String, ConfigError> {
        match key_name(k) {
            Some(name) => Ok(name.into_owned()),
            None => Err(self.expected(k, at, "a key that is not a string")),
        }
    }

    /// The error for a node `n` of the wrong type: yaml.v2's own refusal where it cannot
    /// decode the scalar at all ([`undecodable`]), else `what`.
    fn expected(&self, n: &MarkedYamlOwned, field: &str, what: &str) -> ConfigError {
        self.err(
            Some(n),
            field,
            undecodable(n).unwrap_or_else(|| what.into()),
        )
    }

    /// Decodes `v`, a value of field `field` that a later value replaces (so the load does not
    /// read it), as yaml.v2's struct decoding decodes it into envoyproxy/ratelimit's field of
    /// type `ty`: every occurrence of a field is decoded in turn, and a type error in any fails
    /// the file after the whole decode (`*yaml.TypeError`). Only the types count: names its
    /// structs have not are skipped undecoded, as there, and nothing else is checked (no key,
    /// unit or name rule: those read the value kept). A null is any field's zero value, and a
    /// tag on a collection counts for nothing ([`untagged`]). What fails yaml.v2's decoding
    /// into a generic map (a scalar it cannot decode, a collection as a key, a bad merge) is
    /// refused by [`Parser::key_check`] wherever it stands. tollgate-rls's own `rate_limits`
    /// is checked the same way, by this reader's rule ([`GoType::RateLimits`]), and so is its
    /// `burst` in a `rate_limit` ([`GoType::Burst`]).
    fn replaced(&self, v: &MarkedYamlOwned, ty: GoType, field: &str) -> Result<(), ConfigError> {
        let own_field = ty == GoType::RateLimits;
        // Each node visited, with its parent's index here and its step from the parent, as in
        // the key check: the field path of a refused node is built only then. A stack, not
        // recursion: aliases copy nodes, so a value can nest deeper than the file does. Each
        // collection's entries are pushed reversed, so that they pop in document order.
        let mut path: Vec<(usize, Segment<'_>)> = vec![(0, Segment::Index(0))];
        let mut stack = vec![(v, ty, 0)];
        while let Some((n, ty, at)) = stack.pop() {
            let n = untagged(n);
            let fits = match (&n.data, ty) {
                _ if is_null(n) => true,
                (YamlDataOwned::Representation(..), _) => match (resolve(n), ty) {
                    (Some(_), GoType::Text) => true,
                    (Some((_, Resolved::Bool(_))), GoType::Flag) => true,
                    (Some((_, Resolved::Int(i))), GoType::Count) => {
                        (0..=i128::from(u32::MAX)).contains(&i)
                    }
                    (Some((_, Resolved::Int(i))), GoType::Burst) => {
                        (0..=i128::from(u64::MAX)).contains(&i)
                    }
                    _ => false,
                },
                (YamlDataOwned::Mapping(_), GoType::Metadata) => true,
                (
                    YamlDataOwned::Mapping(m),
                    GoType::Descriptor | GoType::RateLimit | GoType::Replace,
                ) => {
                    let from = stack.len();
                    for (k, v) in m {
                        if is_merge_key(k) {
                            // Each merged mapping is decoded into the same struct, in the
                            // file's order (a merge of anything else is the key check's
                            // refusal).
                            stack.extend(
                                merge_sources(v)
                                    .rev()
                                    .filter(|(_, m)| m.is_some())
                                    .map(|(n, _)| (n, ty, at)),
                            );
                        } else if let Some(name) = key_name(k) {
                            if let Some(fty) = ty.field(&name) {
                                path.push((at, Segment::Name(name)));
                                stack.push((v, fty, path.len() - 1));
                            }
                        }
                    }
                    stack[from..].reverse();
                    true
                }
                (
                    YamlDataOwned::Sequence(s),
                    GoType::Descriptors | GoType::ReplacesList | GoType::RateLimits,
                ) => {
                    let ety = match ty {
                        GoType::Descriptors => GoType::Descriptor,
                        GoType::RateLimits => GoType::RateLimit,
                        _ => GoType::Replace,
                    };
                    let from = stack.len();
                    for (i, e) in s.iter().enumerate() {
                        path.push((at, Segment::Index(i)));
                        stack.push((e, ety, path.len() - 1));
                    }
                    stack[from..].reverse();
                    true
                }
                _ => false,
            };
            if !fits {
                let rest = field_path(&path, at);
                let f = match rest.as_bytes().first() {
                    None => field.to_owned(),
                    Some(b'[') => format!("{field}{rest}"),
                    Some(_) => format!("{field}.{rest}"),
                };
                // yaml.v2 truncates a float in range into a Go integer; refusing it is this
                // reader's own rule, as for a value it keeps.
                let float_count =
                    ty == GoType::Count && matches!(resolve(n), Some((_, Resolved::Float)));
                let what = if own_field {
                    format!(
                        "{}: tollgate-rls checks the types of a rate_limits that a later one \
                         replaces, as yaml.v2 checks envoyproxy/ratelimit's fields",
                        ty.expected()
                    )
                } else if ty == GoType::Burst {
                    format!(
                        "{}: tollgate-rls checks the type of its burst in a value that a later \
                         one replaces, as yaml.v2 checks envoyproxy/ratelimit's fields",
                        ty.expected()
                    )
                } else if float_count {
                    format!(
                        "{}: tollgate-rls refuses a float here, also in a value a later one \
                         replaces (yaml.v2 would truncate it)",
                        ty.expected()
                    )
                } else {
                    format!(
                        "{}: yaml.v2 decodes a value that a later one replaces too, and refuses \
                         the file on this one (\"cannot unmarshal\")",
                        ty.expected()
                    )
                };
                return Err(self.expected(n, &f, &what));
            }
        }
        Ok(())
    }

    /// A mapping's fields, each with its name, every one written in the order yaml.v2 decodes
    /// them for envoyproxy/ratelimit: a caller assigns each in turn, so a field set later
    /// replaces one set earlier (a `rate_limit` field by field, as yaml.v2 decodes a later one
    /// into the struct the earlier one filled), and every value written is checked, as yaml.v2
    /// decodes each.
    ///
    /// A name the mapping itself writes twice (in one quoting style or two) is kept so, as
    /// yaml.v2's non-strict decoding keeps it, with a warning naming the later line. A merge
    /// key (`<<`, [`is_merge_key`]) brings in the fields of its mapping, or of each mapping of
    /// its list, where it stands: in document order with the mapping's own fields, and within
    /// a list the later mappings first, so that the earlier one's fields win.
    ///
    /// `key_checked`: whether envoyproxy/ratelimit's key check reads the mapping, or not (a
    /// `rate_limit` that a later one in its mapping replaces in the generic map, though its
    /// fields still fill the struct). A float is refused in a mapping the key check reads only.
    #[allow(clippy::type_complexity)]
    fn fields<'n>(
        &mut self,
        map: &'n Map,
        at: &str,
        key_checked: bool,
    ) -> Result<Vec<(String, &'n MarkedYamlOwned, &'n MarkedYamlOwned)>, ConfigError> {
        let mut out = Vec::with_capacity(map.len());
        self.fields_merged(map, at, 0, &mut out)?;
        if !key_checked {
            return Ok(out);
        }
        // envoyproxy/ratelimit's key check reads the mapping as yaml.v2 decodes it into a map,
        // where a later field replaces an earlier one: it checks each name's last value. The
        // number and flag fields refuse a float themselves, where they are read.
        let mut last: HashMap<&str, usize> = HashMap::with_capacity(out.len());
        for (i, (name, ..)) in out.iter().enumerate() {
            last.insert(name, i);
        }
        for (i, (name, _, v)) in out.iter().enumerate() {
            if last.get(name.as_str()) == Some(&i)
                && !TYPED_FIELDS.contains(&name.as_str())
                && key_check_refuses(v)
            {
                return Err(self.float_refused(v, &field_at(at, name)));
            }
        }
        Ok(out)
    }

    /// envoyproxy/ratelimit's first pass over the file, where the parser does not follow it:
    /// yaml.v2 decodes the whole file into a generic map (failing on any scalar it cannot
    /// decode, [`undecodable`], a mapping or list as a key or a merge key that merges no
    /// mapping, [`entry_fault`], or an alias inside its own anchor, wherever it stands), then
    /// `validateYamlKeys` walks it: every mapping's keys must be strings it knows
    /// ([`key_check_takes`]), every list must hold mappings, and every leaf must be a string,
    /// an int, a flag or null ([`key_check_refuses`]). The parser checks the fields it reads
    /// as it reads them; this reaches what it ignores (a misplaced field's mapping or list,
    /// the value a later field replaced is decoded too) with the same rules: a mapping as
    /// yaml.v2 decodes it into a map ([`generic_fields`]), a name's last value only, `metadata`
    /// unchecked.
    fn key_check(&self, doc: &MarkedYamlOwned) -> Result<(), ConfigError> {
        // Every node, keys and merged mappings included, without field paths; the rare file
        // that fails is walked again with them, for the refused node's.
        if first_undecodable(doc, None).is_some() {
            let mut path = vec![(0, Segment::Index(0))];
            if let Some((n, at, why)) = first_undecodable(doc, Some(&mut path)) {
                return Err(self.err(Some(n), &field_path(&path, at), why.into_owned()));
            }
        }
        // Each node visited, with its parent's index here and its name in the parent: the
        // field path of a refused node is built only then.
        let mut path: Vec<(usize, Segment<'_>)> = vec![(0, Segment::Index(0))];
        let mut stack = vec![(doc, 0)];
        while let Some((n, at)) = stack.pop() {
            let n = untagged(n);
            match &n.data {
                YamlDataOwned::Mapping(m) => {
                    let fields = generic_fields(m)
                        .map_err(|(node, why)| self.err(Some(node), &field_path(&path, at), why))?;
                    for (name, k, v) in fields {
                        if !key_check_takes(name.as_ref()) {
                            return Err(self.unknown(k, &field_path(&path, at), &name));
                        }
                        if name != "metadata" {
                            path.push((at, Segment::Name(name)));
                            stack.push((v, path.len() - 1));
                        }
                    }
                }
                YamlDataOwned::Sequence(s) => {
                    for (i, e) in s.iter().enumerate() {
                        path.push((at, Segment::Index(i)));
                        if !matches!(untagged(e).data, YamlDataOwned::Mapping(_)) {
                            return Err(self.err(
                                Some(e),
                                &field_path(&path, path.len() - 1),
                                "a list holding something other than a mapping, which \
                                 envoyproxy/ratelimit's key check refuses"
                                    .into(),
                            ));
                        }
                        stack.push((e, path.len() - 1));
                    }
                }
                _ if key_check_refuses(n) => {
                    return Err(self.float_refused(n, &field_path(&path, at)))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The error for a scalar [`key_check_refuses`].
    fn float_refused(&self, v: &MarkedYamlOwned, field: &str) -> ConfigError {
        let text = resolve(v).map_or("", |(t, _)| t);
        self.err(
            Some(v),
            field,
            format!(
                "{text} is a number yaml.v2 reads as a float (or past 64-bit integers), which \
                 envoyproxy/ratelimit's key check refuses (\"error checking config\"); quote it \
                 for its text"
            ),
        )
    }

    /// [`Parser::fields`]'s walk: the fields of `map` and of what its merge keys merge
    /// ([`merge_sources`]), `merges` deep in merged mappings. [`generic_fields`] walks the same
    /// merges but stays apart, as it builds what differs: yaml.v2's generic map for the key
    /// check, where a later name replaces an earlier one across merged mappings and a key is
    /// only a name or not; here the parser gets every field written, in order, a name its own
    /// mapping writes twice is warned about, and a key that names no field is refused with the
    /// parser's error ([`Parser::key`], which names a scalar yaml.v2 cannot decode as such).
    fn fields_merged<'n>(
        &mut self,
        map: &'n Map,
        at: &str,
        merges: usize,
        out: &mut Vec<(String, &'n MarkedYamlOwned, &'n MarkedYamlOwned)>,
    ) -> Result<(), ConfigError> {
        // The line of each name the mapping itself writes, looked up in a map, not by a scan:
        // a mapping of many fields (a file of 40,000 unknown ones took ten seconds scanning)
        // costs its length, not its square.
        let mut own: HashMap<String, usize> = HashMap::with_capacity(map.len());
        for (k, v) in map {
            if is_merge_key(k) {
                // A merged mapping's own merges nest no deeper than the file's collections.
                if merges >= MAX_NESTING {
                    return Err(self.err(
                        Some(k),
                        at,
                        format!("merge keys nested deeper than {MAX_NESTING}"),
                    ));
                }
                for (s, m) in merge_sources(v) {
                    let Some(m) = m else {
                        return Err(self.err(Some(s), at, MERGE_TAKES_MAPPINGS.into()));
                    };
                    self.fields_merged(m, at, merges + 1, out)?;
                }
                continue;
            }
            let name = self.key(k, at)?;
            if let Some(earlier) = own.insert(name.clone(), line_of(k)) {
                self.twice(k, at, &name, earlier);
            }
            out.push((name, k, v));
        }
        Ok(())
    }

    /// The warning for field `name` written again at `k` in one mapping, first at line
    /// `earlier`: once per key in the file, however often an alias or a merge copies its
    /// mapping.
    fn twice(&mut self, k: &MarkedYamlOwned, at: &str, name: &str, earlier: usize) {
        if !self
            .warned
            .insert((k.span.start.line(), k.span.start.col()))
        {
            return;
        }
        let field = field_at(at, name);
        let what = if name == "rate_limit" {
            "its fields replace those of the earlier one (the others stay; a null one drops them all)"
        } else {
            "this value replaces the earlier one"
        };
        let w = self.err(
            Some(k),
            &field,
            format!(
                "{name:?} twice in one mapping (also at line {earlier}): {what}, as \
                 envoyproxy/ratelimit (yaml.v2) reads it"
            ),
        );
        self.warn(w);
    }

    /// A string field: the scalar's source text, as yaml.v2 fills a Go string (`1.0`, `007`,
    /// `True` stay as written); null (`~`, `null`, nothing) is the empty string; under
    /// `!!binary`, the text the base64 decodes to. Bytes that are not UTF-8 are refused: no
    /// request's descriptor (a protobuf string) or response field could hold them.
    fn string(&self, n: &MarkedYamlOwned, field: &str) -> Result<String, ConfigError> {
        match resolve(n) {
            Some((_, Resolved::Null)) => Ok(String::new()),
            Some((text, Resolved::Binary)) => binary_text(text).map_err(|_| {
                self.err(
                    Some(n),
                    field,
                    "!!binary decodes to bytes that are not UTF-8: no request's descriptor \
                     holds them"
                        .into(),
                )
            }),
            Some((text, _)) => Ok(text.to_owned()),
            None => Err(self.expected(n, field, "expected a string")),
        }
    }

    /// A flag as yaml.v2 reads one: `true`, `yes`, `on`, `y` (and their opposites) in three
    /// casings; null is false.
    fn boolean(&self, n: &MarkedYamlOwned, field: &str) -> Result<bool, ConfigError> {
        match resolve(n) {
            Some((_, Resolved::Bool(b))) => Ok(b),
            Some((_, Resolved::Null)) => Ok(false),
            _ => Err(self.expected(n, field, "expected true or false (or yes/no, on/off)")),
        }
    }

    /// A whole number in `0..=max` as yaml.v2 reads one ([`Resolved::Int`]); `None` for null,
    /// which is 0 to a Go integer field (the caller decides what an absent value means).
    fn integer(
        &self,
        n: &MarkedYamlOwned,
        field: &str,
        max: u64,
    ) -> Result<Option<u64>, ConfigError> {
        match resolve(n) {
            Some((text, Resolved::Int(i))) => u64::try_from(i)
                .ok()
                .filter(|v| *v <= max)
                .map(Some)
                .ok_or_else(|| self.err(Some(n), field, format!("{text} is not in 0..={max}"))),
            Some((_, Resolved::Null)) => Ok(None),
            _ => Err(self.expected(n, field, "expected a whole number")),
        }
    }

    /// A list, through any tag on it (as [`Parser::mapping`]); null is the empty list.
    fn sequence<'n>(
        &self,
        n: &'n MarkedYamlOwned,
        field: &str,
    ) -> Result<&'n [MarkedYamlOwned], ConfigError> {
        match &untagged(n).data {
            YamlDataOwned::Sequence(s) => Ok(s),
            _ if is_null(n) => Ok(&[]),
            _ => Err(self.err(Some(n), field, "expected a list".into())),
        }
    }

    fn level(
        &mut self,
        list: &MarkedYamlOwned,
        parent_path: &str,
        field: &str,
        level: &mut Level,
        depth: usize,
        above: Above,
    ) -> Result<(), ConfigError> {
        if depth >= MAX_DEPTH {
            return Err(self.err(
                Some(list),
                field,
                format!("descriptors nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        // The composite keys (`key` or `key_value`) of this level's descriptors: like
        // envoyproxy/ratelimit, two with one composite key are refused, even when their keys
        // and values differ (`a` + `b_c` and `a_b` + `c`), since the path built from it names
        // the limit's table.
        let mut seen: HashSet<String> = HashSet::new();
        for (i, item) in self.sequence(list, field)?.iter().enumerate() {
            let at = format!("{field}[{i}]");
            *self.descriptors += 1;
            if *self.descriptors > self.max_descriptors {
                return Err(self.err(
                    Some(item),
                    &at,
                    format!(
                        "more than {} descriptors in the config (--max-descriptors)",
                        self.max_descriptors
                    ),
                ));
            }
            let map = self.mapping(item, &at)?;
            let mut key = None;
            let mut value = None;
            // Every `rate_limit` since the last null one: yaml.v2 decodes each into the
            // struct the earlier ones filled (a null one empties the pointer).
            let mut rate_limit: Vec<&MarkedYamlOwned> = Vec::new();
            let mut rate_limits = None;
            let mut nested = None;
            let (mut shadow, mut detailed, mut to_metric, mut share) = (false, false, false, false);
            let mut share_at = None;
            for (name, k, v) in self.fields(map, &at, true)? {
                let f = format!("{at}.{name}");
                match name.as_str() {
                    "key" => key = Some(self.string(v, &f)?),
                    "value" => value = Some(self.string(v, &f)?),
                    // Null (`rate_limit:` with nothing) is no limit, as a nil pointer is
                    // to envoyproxy/ratelimit.
                    "rate_limit" if is_null(v) => {
                        for earlier in rate_limit.drain(..) {
                            self.replaced(earlier, GoType::RateLimit, &f)?;
                        }
                    }
                    "rate_limit" => rate_limit.push(v),
                    "rate_limits" => {
                        if let Some(earlier) = rate_limits.take() {
                            self.replaced(earlier, GoType::RateLimits, &f)?;
                        }
                        rate_limits = (!is_null(v)).then_some(v);
                    }
                    "descriptors" => {
                        if let Some(earlier) = nested.replace(v) {
                            self.replaced(earlier, GoType::Descriptors, &f)?;
                        }
                    }
                    "shadow_mode" => shadow = self.boolean(v, &f)?,
                    "detailed_metric" => detailed = self.boolean(v, &f)?,
                    "value_to_metric" => to_metric = self.boolean(v, &f)?,
                    "share_threshold" => {
                        share = self.boolean(v, &f)?;
                        share_at = Some(k);
                    }
                    other => self.misplaced(k, v, &at, other, Place::Descriptor, true)?,
                }
            }
            let key = match key {
                Some(k) if !k.is_empty() => k,
                _ => {
                    return Err(self.err(
                        Some(item),
                        &format!("{at}.key"),
                        "missing or empty: every descriptor has a key".into(),
                    ))
                }
            };
            let value = value.filter(|v| !v.is_empty());
            let path_part = match &value {
                Some(v) => format!("{key}_{v}"),
                None => key.clone(),
            };
            let join = |part: &str| {
                if parent_path.is_empty() {
                    part.to_owned()
                } else {
                    format!("{parent_path}.{part}")
                }
            };
            if seen.contains(&path_part) {
                return Err(self.err(
                    Some(item),
                    &at,
                    format!(
                        "duplicate descriptor composite key '{}.{}' (key, or key_value: \
                         another descriptor at this level has it)",
                        self.domain,
                        join(&path_part)
                    ),
                ));
            }
            seen.insert(path_part.clone());
            let is_pattern = value.as_deref().is_some_and(|v| v.contains('*'));
            if share && !is_pattern {
                return Err(self.err(
                    share_at,
                    &format!("{at}.share_threshold"),
                    "share_threshold needs a value with a '*' pattern".into(),
                ));
            }
            let own_per_value = value.is_none() || (is_pattern && !share);
            let kind = match (rate_limit.first(), rate_limits) {
                (Some(a), Some(_)) => {
                    return Err(self.err(
                        Some(a),
                        &at,
                        "rate_limit and rate_limits together: use one".into(),
                    ))
                }
                (Some(_), None) => {
                    let f = format!("{at}.rate_limit");
                    let (kind, replaces, name) = self.rate(&rate_limit, &f, true)?;
                    Some((kind, replaces, name))
                }
                (None, Some(list)) => {
                    let f = format!("{at}.rate_limits");
                    let items = self.sequence(list, &f)?;
                    if items.is_empty() || items.len() > 4 {
                        return Err(self.err(
                            Some(list),
                            &f,
                            format!("{} rates: between 1 and 4", items.len()),
                        ));
                    }
                    let mut rates = Vec::new();
                    let mut each_replaces = Vec::new();
                    for (j, r) in items.iter().enumerate() {
                        let (kind, rep, _) = self.rate(&[r], &format!("{f}[{j}]"), false)?;
                        if let Kind::Rates(mut one) = kind {
                            rates.append(&mut one);
                        }
                        each_replaces.push(rep);
                    }
                    // The rates are one limit: a match drops every request descriptor whose
                    // limit has a replaced name, so a rate replacing another rate's name would
                    // switch the whole limit off (refused as the `rate_limit` form refuses a
                    // limit replacing its own name).
                    for (j, rep) in each_replaces.iter().enumerate() {
                        let own = rep
                            .iter()
                            .find(|n| rates.iter().any(|r| !r.name.is_empty() && r.name == **n));
                        if let Some(name) = own {
                            return Err(self.err(
                                items.get(j),
                                &format!("{f}[{j}].replaces"),
                                format!(
                                    "a limit replacing its own name {name:?} (a rate of this \
                                     descriptor's rate_limits has it)"
                                ),
                            ));
                        }
                    }
                    let replaces = each_replaces.concat();
                    Some((Kind::Rates(rates), replaces, None))
                }
                (None, None) => None,
            };
            let mut node = Node {
                limit: None,
                share_threshold: share,
                value_to_metric: to_metric,
                value: value.clone(),
                next: Level::default(),
            };
            let per_value = own_per_value || above.per_value;
            let any_to_metric = to_metric || above.value_to_metric;
            let path = if nested.is_some() || kind.is_some() {
                let path = join(&path_part);
                let bytes = self.domain.len() + 1 + path.len();
                *self.path_bytes = self.path_bytes.saturating_add(bytes);
                if *self.path_bytes > MAX_PATH_BYTES {
                    return Err(self.err(
                        Some(item),
                        &at,
                        format!(
                            "the descriptor paths (each repeating the keys and values above it) \
                             exceed {} MiB in all: shorten the keys and values above many \
                             descriptors",
                            MAX_PATH_BYTES >> 20
                        ),
                    ));
                }
                path
            } else {
                String::new()
            };
            if let Some(n) = nested {
                self.level(
                    n,
                    &path,
                    &format!("{at}.descriptors"),
                    &mut node.next,
                    depth + 1,
                    Above {
                        per_value,
                        value_to_metric: any_to_metric,
                    },
                )?;
            }
            if let Some((kind, replaces, unlimited_name)) = kind {
                let mut names: Vec<String> = match &kind {
                    Kind::Rates(r) => r.iter().map(|r| r.name.clone()).collect(),
                    Kind::Unlimited => unlimited_name.into_iter().collect(),
                };
                names.retain(|n| !n.is_empty());
                let domain = self.domain.clone();
                let id = format!("{domain}\u{1f}{path}");
                let origin = format!("{}:{}", self.file.display(), line_of(item));
                // Paths of two levels can coincide (`key: a.b` beside `key: a` holding
                // `key: b`): one id would be one table, shared by two limits.
                if let Some(first) = self.ids.get(&id) {
                    return Err(self.err(
                        Some(item),
                        &at,
                        format!(
                            "duplicate descriptor composite key '{domain}.{path}': the limit at \
                             {first} has it too"
                        ),
                    ));
                }
                self.ids.insert(id.clone(), origin.clone());
                let limit = Arc::new(Limit {
                    domain: domain.clone(),
                    path: path.clone(),
                    id,
                    kind,
                    replaces,
                    shadow,
                    detailed_metric: detailed,
                    per_value,
                    origin,
                    names,
                    fixed_metric: !detailed && !any_to_metric,
                    counters: std::sync::OnceLock::new(),
                });
                self.limits.push(limit.clone());
                node.limit = Some(limit);
            }
            match value {
                Some(v) if is_pattern => {
                    let parts = v.split('*').map(str::to_owned).collect();
                    level.wildcard.push((key, parts, node));
                }
                Some(v) => {
                    level.exact.entry(key).or_default().insert(v, node);
                }
                None => {
                    level.default.insert(key, node);
                }
            }
        }
        Ok(())
    }

    /// Parses one `rate_limit` block, written as one mapping or several (`blocks`, at least
    /// one: a `rate_limit` written twice in a descriptor, each block's fields replacing the
    /// earlier ones'): its kind, its `replaces` names and (for an unlimited one) its name.
    /// `single`: the `rate_limit` form (where `unlimited` is allowed).
    #[allow(clippy::type_complexity)]
    fn rate(
        &mut self,
        blocks: &[&MarkedYamlOwned],
        field: &str,
        single: bool,
    ) -> Result<(Kind, Vec<String>, Option<String>), ConfigError> {
        let n = blocks[0];
        // The key check reads the last block only (the generic map keeps a name's last value):
        // the fields before `checked_from` come from blocks it never sees.
        let mut fields = Vec::new();
        let mut checked_from = 0;
        for (i, b) in blocks.iter().enumerate() {
            let map = self.mapping(b, field)?;
            let last = i + 1 == blocks.len();
            if last {
                checked_from = fields.len();
            }
            fields.append(&mut self.fields(map, field, last)?);
        }
        // A `replaces` list that a later one replaces is decoded, not read.
        let last_replaces = fields.iter().rposition(|(key, ..)| key == "replaces");
        let mut unit = None;
        let mut rpu = None;
        let mut unlimited = false;
        let mut name = String::new();
        let mut replaces = Vec::new();
        let mut burst = None;
        for (i, (key, k, v)) in fields.into_iter().enumerate() {
            let f = format!("{field}.{key}");
            let key_checked = i >= checked_from;
            match key.as_str() {
                "unit" => unit = Some((self.string(v, &f)?, v)),
                // Null is 0, as in a Go integer field.
                "requests_per_unit" => {
                    rpu = Some(self.integer(v, &f, u64::from(u32::MAX))?.unwrap_or(0))
                }
                "unlimited" if single => unlimited = self.boolean(v, &f)?,
                "name" => name = self.string(v, &f)?,
                // Null is no burst (the default), as if the extension were not written.
                "burst" => burst = self.integer(v, &f, u64::MAX)?.map(|b| (b, v)),
                "replaces" if Some(i) != last_replaces => {
                    self.replaced(v, GoType::ReplacesList, &f)?
                }
                "replaces" => {
                    for (j, r) in self.sequence(v, &f)?.iter().enumerate() {
                        let rf = format!("{f}[{j}]");
                        let m = self.mapping(r, &rf)?;
                        let mut rname = String::new();
                        for (rname_key, rk, rv) in self.fields(m, &rf, key_checked)? {
                            match rname_key.as_str() {
                                "name" => rname = self.string(rv, &format!("{rf}.name"))?,
                                other if single => self.misplaced(
                                    rk,
                                    rv,
                                    &rf,
                                    other,
                                    Place::Replaces,
                                    key_checked,
                                )?,
                                other => return Err(self.unknown(rk, &rf, other)),
                            }
                        }
                        if rname.is_empty() {
                            return Err(self.err(
                                Some(r),
                                &rf,
                                "a replaces entry without a name".into(),
                            ));
                        }
                        replaces.push(rname);
                    }
                }
                other if single => {
                    self.misplaced(k, v, field, other, Place::RateLimit, key_checked)?
                }
                other => return Err(self.unknown(k, field, other)),
            }
        }
        if !name.is_empty() && replaces.contains(&name) {
            return Err(self.err(
                Some(n),
                &format!("{field}.replaces"),
                format!("a limit replacing its own name {name:?}"),
            ));
        }
        if unlimited {
            // envoyproxy/ratelimit refuses a valid unit beside `unlimited: true` and ignores
            // any other (an empty or null one is no unit): an unlimited limit never reads it.
            match unit {
                Some((u, v)) if Unit::parse(&u).is_some() => {
                    return Err(self.err(
                        Some(v),
                        &format!("{field}.unit"),
                        "an unlimited limit takes no unit".into(),
                    ))
                }
                Some((u, v)) if !u.is_empty() => {
                    let w = self.err(
                        Some(v),
                        &format!("{field}.unit"),
                        format!("{u:?} is not a unit: ignored, as the limit is unlimited"),
                    );
                    self.warn(w);
                }
                _ => {}
            }
            if let Some((_, v)) = burst {
                return Err(self.err(
                    Some(v),
                    &format!("{field}.burst"),
                    "an unlimited limit takes no burst".into(),
                ));
            }
            return Ok((Kind::Unlimited, replaces, Some(name)));
        }
        let unit = match unit {
            Some((u, v)) => Unit::parse(&u).ok_or_else(|| {
                self.err(
                    Some(v),
                    &format!("{field}.unit"),
                    format!(
                        "invalid unit {u:?}: one of second, minute, hour, day, week, month, year"
                    ),
                )
            })?,
            None => {
                return Err(self.err(
                    Some(n),
                    &format!("{field}.unit"),
                    "missing (or set unlimited: true)".into(),
                ))
            }
        };
        let rpu = rpu.unwrap_or(0) as u32;
        let burst_given = burst.is_some();
        let burst = match burst {
            Some((0, v)) => {
                return Err(self.err(
                    Some(v),
                    &format!("{field}.burst"),
                    "0: a bucket holds at least one token".into(),
                ))
            }
            Some((b, _)) => b,
            None => u64::from(rpu).max(1),
        };
        let rate = Rate {
            requests_per_unit: rpu,
            unit,
            burst,
            name,
        };
        if rpu > 0 {
            if let Err(mut e) = crate::engine::check_rate(&rate, self.target) {
                let explicit = burst_given.then_some(burst);
                if let Some(most) =
                    most_per_unit(unit, explicit).filter(|m| (1..u64::from(rpu)).contains(m))
                {
                    let with = if explicit.is_some() {
                        "this burst"
                    } else {
                        "burst = requests_per_unit"
                    };
                    e.push_str(&format!(
                        "; the 63-bit state holds at most {most} requests_per_unit per {} with {with}",
                        format!("{unit:?}").to_lowercase()
                    ));
                }
                e.push_str("; for no limit, write `unlimited: true`");
                return Err(self.err(Some(n), field, e));
            }
        }
        Ok((Kind::Rates(vec![rate]), replaces, None))
    }
}
