//! envoyproxy/ratelimit's YAML: configs in its documented format (written for these tests)
//! load unchanged and match as it matches; every invalid config is refused with its file,
//! line and field; a directory loads as a Kubernetes ConfigMap mount lays it out.

mod support;

use std::path::PathBuf;
use support::TempDir;
use tollgate_rls::config::{Config, ConfigError, Kind, Rate, Target, Unit};

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_sources(&[(PathBuf::from("test.yaml"), yaml.to_owned())])
}

fn load_for(yaml: &str, target: Target) -> Result<Config, ConfigError> {
    Config::from_sources_for(&[(PathBuf::from("test.yaml"), yaml.to_owned())], target)
}

/// The error refusing `yaml`: at `line`, in `field`, its message holding `words`.
fn refused(yaml: &str, line: usize, field: &str, words: &str) -> ConfigError {
    let e = load(yaml).expect_err(yaml);
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(line), field),
        "{yaml}\n{e}"
    );
    assert!(e.message.contains(words), "{yaml}\n{e}");
    e
}

/// Asserts that `c`'s warning `i` says `words`.
fn assert_warning_says(c: &Config, i: usize, words: &str) {
    let w = &c.warnings()[i];
    assert!(w.message.contains(words), "{w}");
}

/// The limit path and bucket a request's entries match.
fn lookup(c: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<(String, String)> {
    c.lookup(domain, entries.iter().copied()).map(|m| {
        (
            m.limit.path.clone(),
            m.bucket.replace(['\u{1e}', '\u{1f}'], "|"),
        )
    })
}

/// A config in the documented format: nested descriptors, values and value-less keys,
/// wildcards, units, shadow mode, names and replaces, unlimited.
const EDGE: &str = r#"
# Limits for the edge proxy.
domain: edge_proxy
descriptors:
  # Each client address: 50 a second.
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 50

  # A tenant's traffic, and tighter limits on some of its paths.
  - key: tenant
    descriptors:
      - key: path
        value: /api/upload
        rate_limit:
          unit: minute
          requests_per_unit: 10
      - key: path
        value: /api/*
        rate_limit:
          unit: hour
          requests_per_unit: 1000
      - key: path
        rate_limit:
          unit: day
          requests_per_unit: 100000

  - key: database
    value: users
    shadow_mode: true
    rate_limit:
      unit: Second
      requests_per_unit: 500
      name: users_db

  - key: database
    value: users_batch
    rate_limit:
      unit: second
      requests_per_unit: 5000
      replaces:
        - name: users_db

  - key: internal
    rate_limit:
      unlimited: true

  - key: banned
    rate_limit:
      unit: year
      requests_per_unit: 0

  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: week
      requests_per_unit: 7
"#;

#[test]
fn a_documented_config_loads_and_matches_as_envoyproxy_ratelimit() {
    let c = load(EDGE).unwrap();
    assert_eq!(c.domain_count(), 1);
    assert_eq!(c.limits().len(), 9);
    // A value-less key: a bucket per value.
    assert_eq!(
        lookup(&c, "edge_proxy", &[("remote_address", "10.0.0.1")]),
        Some(("remote_address".into(), "remote_address|10.0.0.1".into()))
    );
    // Nested: exact value before the pattern before the value-less key.
    let t = |p| lookup(&c, "edge_proxy", &[("tenant", "acme"), ("path", p)]).map(|x| x.0);
    assert_eq!(t("/api/upload").as_deref(), Some("tenant.path_/api/upload"));
    assert_eq!(t("/api/list").as_deref(), Some("tenant.path_/api/*"));
    assert_eq!(t("/static/x").as_deref(), Some("tenant.path"));
    // The request's depth must be the config's: the parent alone has no limit, nor a deeper one.
    assert_eq!(lookup(&c, "edge_proxy", &[("tenant", "acme")]), None);
    assert_eq!(
        lookup(&c, "edge_proxy", &[("remote_address", "a"), ("x", "y")]),
        None
    );
    // Entries in another order do not match.
    assert_eq!(
        lookup(&c, "edge_proxy", &[("path", "/api/x"), ("tenant", "acme")]),
        None
    );
    // A pattern without share_threshold: a bucket per value; with it, one shared bucket.
    assert_eq!(
        lookup(&c, "edge_proxy", &[("tenant", "a"), ("path", "/api/x")])
            .unwrap()
            .1,
        "tenant|a\u{0}path|/api/x".replace('\u{0}', "|")
    );
    assert_eq!(
        lookup(&c, "edge_proxy", &[("files", "files/a.pdf")])
            .unwrap()
            .1,
        lookup(&c, "edge_proxy", &[("files", "files/b.csv")])
            .unwrap()
            .1
    );
    assert_eq!(lookup(&c, "edge_proxy", &[("files", "other")]), None);
    // Units (case-insensitive), shadow, names, replaces, unlimited, 0 per unit.
    let by_path = |p: &str| c.limits().iter().find(|l| l.path == p).unwrap().clone();
    let users = by_path("database_users");
    assert!(users.shadow);
    assert_eq!(users.names, vec!["users_db".to_owned()]);
    match &users.kind {
        Kind::Rates(r) => assert_eq!(
            (r[0].unit, r[0].requests_per_unit, r[0].burst),
            (Unit::Second, 500, 500)
        ),
        Kind::Unlimited => panic!(),
    }
    assert_eq!(
        by_path("database_users_batch").replaces,
        vec!["users_db".to_owned()]
    );
    assert_eq!(by_path("internal").kind, Kind::Unlimited);
    assert!(by_path("banned").blocking_rate().is_some());
    assert!(by_path("remote_address").per_value);
    assert!(
        by_path("tenant.path_/api/upload").per_value,
        "under a value-less parent"
    );
    assert!(!by_path("database_users").per_value);
    assert!(
        !by_path("files_files/*").per_value,
        "share_threshold: one bucket"
    );
    assert_eq!(Unit::Month.duration().as_secs(), 30 * 86_400);
    assert_eq!(Unit::Year.duration().as_secs(), 365 * 86_400);
    assert_eq!(Unit::Week.proto(), 7);
}

#[test]
fn patterns_may_hold_several_stars() {
    let c = load(
        "domain: w\ndescriptors:\n  - key: p\n    value: a*b*c\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    for (v, hit) in [
        ("abc", true),
        ("a-b-c", true),
        ("axxbyyc", true),
        ("acb", false),
        ("ab", false),
        ("xabc", false),
        ("abcx", false),
    ] {
        assert_eq!(lookup(&c, "w", &[("p", v)]).is_some(), hit, "{v}");
    }
}

#[test]
fn extensions_burst_and_several_rates() {
    let c = load(
        r#"
domain: ext
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 10, burst: 20, name: burst}
      - {unit: day, requests_per_unit: 10000, name: daily}
"#,
    )
    .unwrap();
    match &c.limits()[0].kind {
        Kind::Rates(r) => {
            assert_eq!(r.len(), 2);
            assert_eq!((r[0].burst, r[1].burst), (20, 10000));
        }
        Kind::Unlimited => panic!(),
    }
}

/// `(line, field, words in the message)` of each invalid config's error.
#[test]
fn invalid_configs_name_the_file_line_and_field() {
    let cases: &[(&str, usize, &str, &str)] = &[
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", 5, "descriptors[0].rate_limit.unit", "invalid unit"),
        ("domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 4, "descriptors[0].quota_mode", "not supported"),
        ("domain: d\ndescriptors:\n  - key: k\n    metadata: {a: b}\n", 4, "descriptors[0].metadata", "not supported"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, colour: red}\n", 4, "descriptors[0].rate_limit.colour", "unknown field"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", 6, "descriptors[0].rate_limit.unit", "unlimited"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, "descriptors[0].rate_limit.requests_per_unit", "not in"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", 4, "descriptors[0].rate_limit.requests_per_unit", "not in"),
        ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n", 4, "descriptors[1]", "duplicate"),
        ("domain: d\ndescriptors:\n  - value: v\n", 3, "descriptors[0].key", "missing"),
        ("descriptors: []\n", 1, "domain", "missing"),
        ("domain: ''\n", 1, "domain", "missing"),
        ("domain: d\nextra: 1\n", 2, "extra", "unknown field"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", 5, "descriptors[0].share_threshold", "pattern"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: []\n", 4, "descriptors[0]", "together"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 1}, {unit: second, requests_per_unit: 1}, {unit: second, requests_per_unit: 1}, {unit: second, requests_per_unit: 1}, {unit: second, requests_per_unit: 1}]\n", 4, "descriptors[0].rate_limits", "between 1 and 4"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 0}\n", 4, "descriptors[0].rate_limit.burst", "at least one"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: a\n      replaces: [{name: a}]\n", 5, "descriptors[0].rate_limit.replaces", "own name"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", 4, "descriptors[0].rate_limit.replaces[0]", "without a name"),
        ("domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: n\n        rate_limit: {unit: minute}\n        shadow_mode: maybe\n", 7, "descriptors[0].descriptors[0].shadow_mode", "true or false"),
        ("domain: d\ndescriptors: [\n", 3, "", "not valid YAML"),
        ("domain: d\n---\ndomain: e\n", 3, "", "one domain per file"),
        // A `rate_limits` entry replacing another entry's name: the limit would drop itself.
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 1, name: x}\n      - {unit: hour, requests_per_unit: 10, replaces: [{name: x}]}\n", 6, "descriptors[0].rate_limits[1].replaces", "own name"),
        // One composite key (`key` or `key_value`) twice: siblings, `a` + `b_c` and `a_b` + `c` are both `a_b_c` (refused by envoyproxy too).
        ("domain: d\ndescriptors:\n  - key: a\n    value: b_c\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: a_b\n    value: c\n    rate_limit: {unit: second, requests_per_unit: 100}\n", 6, "descriptors[1]", "duplicate descriptor composite key 'd.a_b_c'"),
        // Siblings without limits: a key with `_` against a key and value.
        ("domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a_b\n", 5, "descriptors[1]", "duplicate descriptor composite key 'd.a_b'"),
        // One composite key at two levels: `a.b` at the root and `b` under `a`.
        ("domain: d\ndescriptors:\n  - key: a.b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 100}\n", 7, "descriptors[1].descriptors[0]", "duplicate descriptor composite key 'd.a.b'"),
    ];
    for (yaml, line, field, words) in cases {
        let e = load(yaml).expect_err(yaml);
        assert_eq!(e.file, PathBuf::from("test.yaml"));
        assert_eq!(e.line, Some(*line), "{yaml}\n{e}");
        assert_eq!(e.field, *field, "{yaml}\n{e}");
        assert!(e.message.contains(words), "{yaml}\n{e}");
        let shown = e.to_string();
        assert!(shown.starts_with(&format!("test.yaml:{line}")), "{shown}");
    }
    // A burst the core holds and the Redis script does not (2^51 − 1: beyond 2^51 even in
    // whole tokens): refused for Redis only.
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2251799813685247}\n";
    assert!(load(yaml).is_ok());
    let e = load_for(yaml, Target::Redis).expect_err(yaml);
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(4), "descriptors[0].rate_limit")
    );
    assert!(
        e.message.starts_with("not a rate the Redis backend holds"),
        "{e}"
    );
}

#[test]
fn a_directory_loads_as_a_configmap_mount() {
    let dir = TempDir::new("configmap");
    let v1 = dir.path().join("..2026_12_04_v1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("a.yaml"), "domain: a\n").unwrap();
    std::fs::write(v1.join("b.yml"), "domain: b\n").unwrap();
    std::fs::write(v1.join("notes.txt"), "not yaml").unwrap();
    std::os::unix::fs::symlink("..2026_12_04_v1", dir.path().join("..data")).unwrap();
    for f in ["a.yaml", "b.yml", "notes.txt"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), dir.path().join(f)).unwrap();
    }
    std::fs::write(dir.path().join(".hidden.yaml"), "not: [valid").unwrap();
    let c = Config::load(dir.path()).unwrap();
    assert_eq!(c.domain_count(), 2);
    // Two files of one domain: refused, naming both.
    std::fs::write(dir.path().join("c.yaml"), "domain: a\n").unwrap();
    let e = Config::load(dir.path()).unwrap_err();
    assert!(e.to_string().contains("duplicate domain"), "{e}");
    assert!(e.file.ends_with("c.yaml"), "{e}");
    // A missing path is an error naming it.
    let e = Config::load(&dir.path().join("missing")).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn hostile_files_are_refused_not_panicked_on() {
    let deep = format!(
        "domain: d\ndescriptors:\n{}",
        (0..40)
            .map(|i| format!(
                "{}- key: k{i}\n{}  descriptors:\n",
                "  ".repeat(2 * i + 1),
                "  ".repeat(2 * i + 1)
            ))
            .collect::<String>()
    );
    assert!(load(&deep).is_err());
    let mut rng = tollgate_testkit::rng::Rng(45);
    for _ in 0..300 {
        let n = rng.below(200) as usize;
        let alphabet = b" -:{}[]*&!|>'\"#\nkeyvaluedomain0123";
        let bytes: String = (0..n)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char)
            .collect();
        let _ = load(&bytes);
    }
}

#[test]
fn metric_labels_carry_request_values_only_when_asked() {
    let c = load(
        r#"
domain: m
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: files
    value: files/*
    rate_limit: {unit: second, requests_per_unit: 1}
"#,
    )
    .unwrap();
    let metric = |e: &[(&str, &str)]| c.lookup("m", e.iter().copied()).unwrap().metric;
    assert_eq!(metric(&[("plain", "secret")]), "plain");
    assert_eq!(metric(&[("detailed", "v1")]), "detailed_v1");
    assert_eq!(
        metric(&[("route", "/a"), ("method", "GET")]),
        "route_/a.method_GET"
    );
    assert_eq!(metric(&[("files", "files/x")]), "files_files/*");
}

/// A value cannot pose as further entries: `k1 = "A\x1ek2\x1fB"` under a value-less `k1` and
/// the entries `k1 = A, k2 = B` under `k1: A → k2` are two buckets (with one Redis key space
/// for a domain, equal buckets would be one key, shared by two limits).
#[test]
fn a_value_holding_the_separators_is_its_own_bucket() {
    let c = load(
        r#"
domain: d
descriptors:
  - key: k1
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: k1
    value: A
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 7}
"#,
    )
    .unwrap();
    let posing = c.lookup("d", [("k1", "A\u{1e}k2\u{1f}B")]).unwrap();
    let nested = c.lookup("d", [("k1", "A"), ("k2", "B")]).unwrap();
    assert_ne!(posing.limit.path, nested.limit.path);
    assert_ne!(posing.bucket, nested.bucket);
    // The escape itself is escaped: a trailing `\x1b` cannot swallow the separator after it.
    let a = c.lookup("d", [("k1", "x\u{1b}")]).unwrap();
    let b = c.lookup("d", [("k1", "x")]).unwrap();
    assert_ne!(a.bucket, b.bucket);
}

/// envoyproxy/ratelimit names a limit by its composite key (`key_value` per level, joined by
/// `.`); two descriptors with one composite key would share one table, the looser limit then
/// admitting for the tighter one, so such a config is refused, naming the key (those cases are
/// in `invalid_configs_name_the_file_line_and_field`). Here: two domains whose ids would
/// coincide, and the ids of paths holding `_` and `.` without a collision.
#[test]
fn descriptors_with_one_composite_key_are_refused() {
    // Domain `x\x1fa` with key `b`, and domain `x` with key `a\x1fb`, would be one table id:
    // a domain holding the id's separator is refused.
    let e = Config::from_sources(&[
        (PathBuf::from("a.yaml"), "domain: \"x\\x1fa\"\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n".into()),
        (PathBuf::from("b.yaml"), "domain: x\ndescriptors:\n  - key: \"a\\x1fb\"\n    rate_limit: {unit: second, requests_per_unit: 100}\n".into()),
    ])
    .expect_err("one table id");
    assert_eq!((e.field.as_str(), e.line), ("domain", Some(1)), "{e}");
    assert!(e.message.contains("control character \\x1f"), "{e}");
    assert!(e.file.ends_with("a.yaml"), "{e}");
    // Keys and values holding `_` and `.` without a collision load; each id is the domain and
    // the path joined by `\x1f` (the name saved state and Redis policies go by).
    let c = load(
        "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: a.b\n    descriptors:\n      - key: c_d\n        value: e.f\n        rate_limit: {unit: second, requests_per_unit: 100}\n",
    )
    .unwrap();
    let ids: Vec<&str> = c.limits().iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["d\u{1f}a_b_c", "d\u{1f}a.b.c_d_e.f"]);
}

/// envoyproxy/ratelimit reads `key`, `value` and `name` into string fields, which keep a
/// scalar's text: `value: 007` matches a request's `007`, not `7` (a float is refused by its
/// key check: `a_float_in_a_string_field_is_refused_as_the_key_check_refuses_it`).
#[test]
fn string_fields_keep_the_scalars_text() {
    for v in [
        "007", "0x10", "0o17", "True", "yes", "1_000", "+5", "-0", "1e400", "1.0.0",
    ] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: {v}\n    value: {v}\n    rate_limit: {{unit: second, requests_per_unit: 1, name: {v}}}\n"
        ))
        .unwrap();
        assert_eq!(
            lookup(&c, "d", &[(v, v)]).map(|x| x.0),
            Some(format!("{v}_{v}")),
            "{v}"
        );
        match &c.limits()[0].kind {
            Kind::Rates(r) => assert_eq!(r[0].name, v),
            Kind::Unlimited => panic!(),
        }
    }
    // Null is no value (a value-less descriptor), as an empty string field is there; quoted,
    // it is the text.
    for (text, path) in [("~", "k"), ("null", "k"), ("", "k"), ("'null'", "k_null")] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    value: {text}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        ))
        .unwrap();
        assert_eq!(c.limits()[0].path, path, "{text}");
    }
    // The domain too; numbers and flags are still read as numbers and flags.
    let c = load("domain: 007\ndescriptors:\n  - key: k\n    shadow_mode: True\n    rate_limit: {unit: second, requests_per_unit: 0x10}\n").unwrap();
    assert!(c.lookup("007", [("k", "v")]).is_some());
    assert!(c.limits()[0].shadow);
    match &c.limits()[0].kind {
        Kind::Rates(r) => assert_eq!(r[0].requests_per_unit, 16),
        Kind::Unlimited => panic!(),
    }
}

/// YAML merge keys (`<<: *anchor`), which yaml.v2 resolves for envoyproxy/ratelimit both in
/// its key check and in its decoding: a file sharing a `rate_limit` block through one loads
/// there, each descriptor's own fields overriding the merged ones.
#[test]
fn merge_keys_load_as_yaml_v2_merges_them() {
    let c = load(
        "domain: d
descriptors:
  - key: base
    rate_limit: &per_minute
      unit: minute
      requests_per_unit: 5
  - key: user
    rate_limit:
      <<: *per_minute
      requests_per_unit: 3
      name: users
",
    )
    .unwrap();
    let m = c.lookup("d", [("user", "u")]).unwrap();
    let Kind::Rates(rates) = &m.limit.kind else {
        panic!("{:?}", m.limit.kind)
    };
    assert_eq!(
        (
            rates[0].requests_per_unit,
            rates[0].unit,
            rates[0].name.as_str()
        ),
        (3, Unit::Minute, "users")
    );
    // A list of mappings: the earlier one's fields first; a merged mapping's own merge; a
    // whole descriptor merged.
    let c = load(
        "domain: d
descriptors:
  - &hourly
    key: a
    rate_limit: &h {unit: hour, requests_per_unit: 7}
  - key: b
    rate_limit:
      <<: [{requests_per_unit: 2}, *h]
  - key: c
    rate_limit: {<<: {<<: *h, unit: day}}
  - <<: *hourly
    key: e
",
    )
    .unwrap();
    let rate = |k: &str| match &c.lookup("d", [(k, "x")]).unwrap().limit.kind {
        Kind::Rates(r) => (r[0].requests_per_unit, r[0].unit),
        other => panic!("{other:?}"),
    };
    assert_eq!(rate("a"), (7, Unit::Hour));
    assert_eq!(rate("b"), (2, Unit::Hour));
    assert_eq!(rate("c"), (7, Unit::Day));
    assert_eq!(rate("e"), (7, Unit::Hour));
    // A merge key takes mappings only.
    assert!(load("domain: d\ndescriptors:\n  - key: a\n    <<: 5\n").is_err());
}

/// Fields envoyproxy/ratelimit reads as absent: `rate_limit` null (`rate_limit:` with
/// nothing, as a template may leave it) is a descriptor without a limit there (a nil
/// pointer), and an unlimited limit's unit is refused only when it names a unit (an empty
/// or null one is no unit).
#[test]
fn null_rate_limits_and_units_load_as_envoyproxy_ratelimit_reads_them() {
    let c = load(
        "domain: d
descriptors:
  - key: a
    rate_limit:
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit: ~
  - key: e
    rate_limit: {unlimited: true, unit: ''}
  - key: f
    rate_limit:
      unlimited: true
      unit:
",
    )
    .unwrap();
    assert!(c.lookup("d", [("a", "x")]).is_none());
    assert!(c.lookup("d", [("a", "x"), ("b", "y")]).is_some());
    assert!(c.lookup("d", [("c", "x")]).is_none());
    for k in ["e", "f"] {
        let m = c.lookup("d", [(k, "x")]).unwrap();
        assert_eq!(m.limit.kind, Kind::Unlimited, "{k}");
    }
    // A unit named beside unlimited is still refused.
    assert!(load(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n"
    )
    .is_err());
}

/// envoyproxy/ratelimit takes any `requests_per_unit` of its `uint32` field, and operators
/// write 4,294,967,295 to mean "no limit in practice". A rate the state cannot hold is refused,
/// never rounded down (that would throttle a service meant to be unlimited), with the bound
/// and the way to say "no limit". The core's 63-bit state holds
/// `ceil(rpu x 100 years / unit) + burst`: with burst = requests_per_unit only `second` is
/// bound within `uint32`, at floor((2^63 - 1) / 3,155,760,001) = 2,922,710,229.
#[test]
fn requests_per_unit_beyond_the_state_is_refused_with_the_bound_and_the_hint() {
    let yaml = |unit: &str, rpu: u64, burst: Option<u64>| {
        let burst = burst.map_or(String::new(), |b| format!(", burst: {b}"));
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {unit}, \
             requests_per_unit: {rpu}{burst}}}\n"
        )
    };
    let at = "test.yaml:4: descriptors[0].rate_limit: ";
    let hint = "; for no limit, write `unlimited: true`";
    assert!(load(&yaml("second", 2_922_710_229, None)).is_ok());
    for rpu in [2_922_710_230, 4_294_967_295] {
        let e = load(&yaml("second", rpu, None)).unwrap_err().to_string();
        assert!(e.starts_with(at), "{e}");
        assert!(
            e.ends_with(&format!(
                "; the 63-bit state holds at most 2922710229 requests_per_unit per second \
                 with burst = requests_per_unit{hint}"
            )),
            "{e}"
        );
    }
    assert!(load(&yaml("minute", 4_294_967_295, None)).is_ok());
    // An explicit burst takes its share of the state: (2^63 - 1 - burst) x 60 s / 100 years.
    let e = load(&yaml(
        "minute",
        4_294_967_295,
        Some(9_000_000_000_000_000_000),
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(at)
            && e.ends_with(&format!(
                "; the 63-bit state holds at most 4246939631 requests_per_unit per minute \
                 with this burst{hint}"
            )),
        "{e}"
    );
    // That bound is the core's: its largest rate fits the state, one more does not.
    let per = std::time::Duration::from_secs(60);
    let b = 9_000_000_000_000_000_000;
    assert!(tollgate::Quota::new(4_246_939_631, per, b).is_ok());
    assert!(tollgate::Quota::new(4_246_939_632, per, b).is_err());
    // Hour to year: the state holds 4,294,967,295, and so does the Redis script (in a coarser
    // state unit of its own): both backends load it. Beyond the state, both backends refuse
    // with the bound.
    for unit in ["hour", "day", "week", "month", "year"] {
        let text = yaml(unit, 4_294_967_295, None);
        assert!(load(&text).is_ok(), "{unit}");
        if let Err(e) = load_for(&text, Target::Redis) {
            panic!("{unit}: {e}");
        }
    }
    let e = load_for(&yaml("second", 4_294_967_295, None), Target::Redis)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(at) && e.contains("holds at most 2922710229") && e.ends_with(hint),
        "{e}"
    );
}

/// Rates far below the top of `uint32`, each refilling within its unit, whose core quota the
/// Redis script cannot hold in the core's own state unit (7 per month: 8.64e14 units per
/// token); tollgate-redis holds them in a unit of its own (exact at every microsecond where it
/// fits), so both backends load them.
const ORDINARY: [(&str, u32); 8] = [
    ("minute", 292_899),
    ("hour", 381_007),
    ("day", 613_297),
    ("week", 847_649),
    ("month", 7),
    ("month", 31),
    ("year", 7),
    ("year", 29),
];

fn one_rate(unit: &str, rpu: u64) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {unit}, \
         requests_per_unit: {rpu}}}\n"
    )
}

/// Ordinary rates load on every backend.
#[test]
fn ordinary_rates_load_on_every_backend() {
    for (unit, rpu) in ORDINARY {
        for target in [None, Some(Target::Local), Some(Target::Redis)] {
            let yaml = one_rate(unit, rpu.into());
            let r = match target {
                None => load(&yaml),
                Some(t) => load_for(&yaml, t),
            };
            if let Err(e) = r {
                panic!("{rpu} per {unit} ({target:?}): {e}");
            }
        }
    }
}

/// Loaded for the Redis backend, a rate its script cannot hold in any state unit is refused
/// with the rate's line and field and the way to say "no limit", and no bound: the script's
/// range is no bound on the rate (4,294,967,291 per month is refused while 4,294,967,295 per
/// month loads). The local backend loads the same rates. With an explicit burst the boundary is
/// exact: one per second holds a burst of 2^51 − 2 whole tokens, not 2^51 − 1.
#[test]
fn rates_the_redis_script_cannot_hold_are_refused_for_redis() {
    let at = "test.yaml:4: descriptors[0].rate_limit: not a rate the Redis backend holds: ";
    let hint = "; for no limit, write `unlimited: true`";
    let burst = |b: u64| {
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, \
             requests_per_unit: 1, burst: {b}}}\n"
        )
    };
    let refused = [
        one_rate("month", 4_294_967_291),
        one_rate("month", 2_853_156_413),
        one_rate("year", 4_294_967_291),
        one_rate("year", 1_149_820_463),
        burst((1 << 51) - 1),
    ];
    for yaml in &refused {
        assert!(load(yaml).is_ok(), "{yaml}");
        let e = load_for(yaml, Target::Redis).unwrap_err().to_string();
        assert!(e.starts_with(at) && e.ends_with(hint), "{yaml}: {e}");
        assert!(!e.contains("holds at most"), "{yaml}: {e}");
    }
    assert!(load_for(&one_rate("month", 4_294_967_295), Target::Redis).is_ok());
    assert!(load_for(&burst((1 << 51) - 2), Target::Redis).is_ok());
    assert!(load_for(&one_rate("hour", 20), Target::Redis).is_ok());
}

/// `requests_per_unit` outside `uint32` is refused with its line and the range, never
/// wrapped or clamped.
#[test]
fn requests_per_unit_outside_u32_is_refused_with_the_range() {
    for (rpu, want) in [
        ("4294967296", "4294967296 is not in 0..=4294967295"),
        ("-1", "-1 is not in 0..=4294967295"),
        (
            "18446744073709551616",
            "18446744073709551616 is not in 0..=4294967295",
        ),
        (
            "-99999999999999999999999",
            "-99999999999999999999999 is not in 0..=4294967295",
        ),
        ("4.5", "expected a whole number"),
        ("\"7\"", "expected a whole number"),
    ] {
        let yaml = format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      \
             requests_per_unit: {rpu}\n"
        );
        let e = load(&yaml).unwrap_err().to_string();
        assert!(
            e.starts_with("test.yaml:6: descriptors[0].rate_limit.requests_per_unit: ")
                && e.ends_with(want),
            "{rpu}: {e}"
        );
    }
}

/// Two merge keys in one mapping: yaml.v2 merges each in turn, in document order with the
/// mapping's own fields (a field set later replacing one set earlier), so a file sharing a
/// unit and a rate through two anchors loads there and here alike.
#[test]
fn two_merge_keys_in_one_mapping_merge_in_document_order() {
    let c = load(
        "domain: d
descriptors:
  - key: hourly
    rate_limit: &per_hour {unit: hour, requests_per_unit: 1}
  - key: base
    rate_limit: &seven {unit: day, requests_per_unit: 7, name: seven}
  - key: a
    rate_limit:
      <<: *seven
      <<: *per_hour
  - key: b
    rate_limit:
      <<: *per_hour
      name: own
      <<: *seven
      <<: {requests_per_unit: 3}
",
    )
    .unwrap();
    let rate = |k: &str| match &c.lookup("d", [(k, "x")]).unwrap().limit.kind {
        Kind::Rates(r) => (r[0].requests_per_unit, r[0].unit, r[0].name.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(rate("a"), (1, Unit::Hour, "seven".to_owned()));
    // Document order throughout: `name: own` is replaced by the later merge's name.
    assert_eq!(rate("b"), (3, Unit::Day, "seven".to_owned()));
    // A quoted `<<` is an ordinary key (unknown).
    let bad = "domain: d\ndescriptors:\n  - key: a\n    \"<<\": {value: b}\n    <<: {value: c}\n";
    assert!(load(bad).is_err(), "{bad}");
}

/// envoyproxy/ratelimit knows fourteen field names and accepts each in any mapping, ignoring
/// it where its schema does not take it: a file with a known field out of place loads there.
/// Here it loads too, the field ignored with a warning naming its line, unless ignoring it
/// would silently drop a limit the file writes (a `rate_limit` outside a descriptor, a rate
/// without its `rate_limit:`, `descriptors` or `share_threshold` inside a `rate_limit`):
/// that is refused, saying where the field belongs.
#[test]
fn misplaced_known_fields_are_ignored_unless_that_drops_a_limit() {
    let c = load(
        "domain: d
shadow_mode: true
descriptors:
  - key: a
    name: a_limit
    domain: other
    unlimited: true
    replaces: [{name: b_limit}]
    rate_limit:
      unit: minute
      requests_per_unit: 5
      shadow_mode: true
      detailed_metric: true
      value: v
      replaces: [{name: x, key: k, unit: second}]
",
    )
    .unwrap();
    let l = &c.limits()[0];
    // The misplaced fields change nothing: enforced, limited, per value.
    assert!(!l.shadow && !l.detailed_metric && l.per_value);
    assert_eq!(l.replaces, vec!["x".to_owned()]);
    assert!(matches!(&l.kind, Kind::Rates(r) if r[0].requests_per_unit == 5));
    let warned = warned(&c);
    assert_eq!(
        warned,
        [
            (Some(2), "shadow_mode"),
            (Some(5), "descriptors[0].name"),
            (Some(6), "descriptors[0].domain"),
            (Some(7), "descriptors[0].unlimited"),
            (Some(8), "descriptors[0].replaces"),
            (Some(12), "descriptors[0].rate_limit.shadow_mode"),
            (Some(13), "descriptors[0].rate_limit.detailed_metric"),
            (Some(14), "descriptors[0].rate_limit.value"),
            (Some(15), "descriptors[0].rate_limit.replaces[0].key"),
            (Some(15), "descriptors[0].rate_limit.replaces[0].unit"),
        ]
    );
    assert_warning_says(&c, 0, "ignored");
    let cases: &[(&str, usize, &str, &str)] = &[
        // A rate without its `rate_limit:`.
        ("domain: d\ndescriptors:\n  - key: a\n    unit: second\n    requests_per_unit: 1\n", 4, "descriptors[0].unit", "rate_limit"),
        ("domain: d\nrate_limit: {unit: second, requests_per_unit: 1}\n", 2, "rate_limit", "belongs in a descriptor"),
        ("domain: d\nrequests_per_unit: 1\n", 2, "requests_per_unit", "rate_limit"),
        // Nested descriptors indented one level too deep.
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      descriptors:\n        - key: b\n          rate_limit: {unit: second, requests_per_unit: 1}\n", 7, "descriptors[0].rate_limit.descriptors", "beside its rate_limit"),
        ("domain: d\ndescriptors:\n  - key: a\n    value: p*\n    rate_limit: {unit: second, requests_per_unit: 1, share_threshold: true}\n", 5, "descriptors[0].rate_limit.share_threshold", "beside its rate_limit"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      rate_limit: {unit: second}\n", 6, "descriptors[0].rate_limit.rate_limit", "belongs in a descriptor"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, replaces: [{name: b, descriptors: []}]}\n", 4, "descriptors[0].rate_limit.replaces[0].descriptors", "beside its rate_limit"),
        // Names envoyproxy/ratelimit does not know are refused anywhere, as there; so are
        // known ones in tollgate's own `rate_limits` entries.
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, colour: red}\n", 4, "descriptors[0].rate_limit.colour", "unknown field"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{unit: second, shadow_mode: true}]\n", 4, "descriptors[0].rate_limits[0].shadow_mode", "unknown field"),
    ];
    for (yaml, line, field, words) in cases {
        refused(yaml, *line, field, words);
    }
}

/// A misplaced known field is ignored only with all it holds: one whose value holds a rate
/// (a `rate_limit`, `rate_limits`, `unit` or `requests_per_unit` at any depth: a limit indented
/// under the wrong field) is refused, since ignoring it would drop that limit silently.
#[test]
fn a_misplaced_field_holding_a_rate_is_refused() {
    let cases: &[(&str, usize, &str)] = &[
        // A rate_limit indented under a misplaced `unlimited:`: the descriptor had no limit.
        ("domain: d\ndescriptors:\n  - key: a\n    unlimited:\n      rate_limit: {unit: second, requests_per_unit: 1}\n", 4, "descriptors[0].unlimited"),
        ("domain: d\nvalue:\n  descriptors:\n    - key: a\n      rate_limit: {unit: second, requests_per_unit: 1}\n", 2, "value"),
        ("domain: d\ndescriptors:\n  - key: a\n    replaces: [{name: b, rate_limit: {unit: second, requests_per_unit: 1}}]\n", 4, "descriptors[0].replaces"),
        ("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 9\n      value: {requests_per_unit: 1}\n", 7, "descriptors[0].rate_limit.value"),
        ("domain: d\ndescriptors:\n  - key: a\n    name: !!map {rate_limits: [{unit: second, requests_per_unit: 1}]}\n", 4, "descriptors[0].name"),
    ];
    for (yaml, line, field) in cases {
        refused(yaml, *line, field, "holds a rate");
    }
    // A misplaced field holding no rate is still ignored.
    let c = load("domain: d\ndescriptors:\n  - key: a\n    replaces: [{name: b}]\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
    assert_eq!(c.warnings().len(), 1);
}

/// envoyproxy/ratelimit refuses a valid unit beside `unlimited: true` and ignores any other:
/// an unlimited limit with a unit that is not one loads there, and here (with a warning).
#[test]
fn an_unlimited_limits_invalid_unit_is_ignored_as_envoyproxy_ratelimit_ignores_it() {
    for unit in ["fortnight", "unknown", "UNKNOWN"] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: {unit}\n"
        ))
        .unwrap();
        assert_eq!(c.limits()[0].kind, Kind::Unlimited);
        let w = &c.warnings()[0];
        assert_eq!(
            (w.line, w.field.as_str()),
            (Some(6), "descriptors[0].rate_limit.unit")
        );
    }
    for unit in ["second", "Day", "WEEK"] {
        let e = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unlimited: true, unit: {unit}}}\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("takes no unit"), "{e}");
    }
}

/// Units are read in any case with Unicode's upper-case mapping, as envoyproxy/ratelimit
/// reads them (`strings.ToUpper`): `ſecond` (long s) and `mınute` (dotless i) name units there.
#[test]
fn units_are_read_as_go_upper_cases_them() {
    for (unit, want) in [
        ("ſecond", Unit::Second),
        ("mınute", Unit::Minute),
        ("Hour", Unit::Hour),
    ] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n"
        ))
        .unwrap();
        match &c.limits()[0].kind {
            Kind::Rates(r) => assert_eq!(r[0].unit, want, "{unit}"),
            Kind::Unlimited => panic!(),
        }
    }
}

/// The rate of the limit a request's one entry `(k, "x")` matches: requests per unit, unit
/// and name.
fn rate_of(c: &Config, k: &str) -> (u32, Unit, String) {
    match &c.lookup("d", [(k, "x")]).expect(k).limit.kind {
        Kind::Rates(r) => (r[0].requests_per_unit, r[0].unit, r[0].name.clone()),
        other => panic!("{k}: {other:?}"),
    }
}

/// yaml.v2's non-strict `Unmarshal`, which envoyproxy/ratelimit uses for its key check (a
/// generic map) and its decoding (structs), keeps a field written twice in one mapping: the
/// later value replaces the earlier, and a later `rate_limit` (a pointer to a struct there)
/// is decoded into the earlier one, replacing only the fields it writes. Such a file loads
/// here with the same meaning and a warning naming the later line.
#[test]
fn a_field_written_twice_keeps_the_later_with_a_warning() {
    let c = load(
        "domain: first
domain: d
descriptors:
  - key: a
    key: b
    \"key\": c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: e
    rate_limit:
      unit: second
      requests_per_unit: 5
      name: five
    rate_limit:
      requests_per_unit: 10
      unit: minute
      unit: hour
  - key: f
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limit:
  - key: g
    rate_limit: {unit: second, requests_per_unit: 5}
    rate_limit: ~
    rate_limit: {unit: day}
",
    )
    .unwrap();
    assert_eq!(c.domain_count(), 1);
    assert!(c.lookup("first", [("c", "x")]).is_none());
    assert!(c.lookup("d", [("a", "x")]).is_none());
    assert_eq!(rate_of(&c, "c"), (1, Unit::Second, String::new()));
    assert_eq!(rate_of(&c, "e"), (10, Unit::Hour, "five".to_owned()));
    // A null `rate_limit` is a nil pointer there: no limit, and a later one starts afresh.
    assert!(c.lookup("d", [("f", "x")]).is_none());
    assert_eq!(rate_of(&c, "g"), (0, Unit::Day, String::new()));
    let warned = warned(&c);
    assert_eq!(
        warned,
        [
            (Some(2), "domain"),
            (Some(5), "descriptors[0].key"),
            (Some(6), "descriptors[0].key"),
            (Some(13), "descriptors[1].rate_limit"),
            (Some(16), "descriptors[1].rate_limit.unit"),
            (Some(19), "descriptors[2].rate_limit"),
            (Some(22), "descriptors[3].rate_limit"),
            (Some(23), "descriptors[3].rate_limit"),
        ]
    );
    assert_warning_says(&c, 0, "twice");
    assert_warning_says(&c, 0, "line 1");
    assert_warning_says(&c, 3, "(the others stay; a null one drops them all)");
    // A merged descriptor's `rate_limit` and the descriptor's own are combined the same way,
    // in document order.
    let c = load(
        "domain: d
descriptors:
  - &hourly
    key: a
    rate_limit: {unit: hour, requests_per_unit: 7, name: seven}
  - <<: *hourly
    key: b
    rate_limit: {requests_per_unit: 3}
  - rate_limit: {requests_per_unit: 3}
    <<: *hourly
    key: c
",
    )
    .unwrap();
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    assert_eq!(rate_of(&c, "b"), (3, Unit::Hour, "seven".to_owned()));
    assert_eq!(rate_of(&c, "c"), (7, Unit::Hour, "seven".to_owned()));
    // What a field set twice holds is still checked: yaml.v2 decodes both values.
    let e = load(
        "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n    shadow_mode: true\n",
    )
    .unwrap_err();
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(4), "descriptors[0].shadow_mode")
    );
}

/// yaml.v2 compares a node's whole tag: YAML's own tags written verbatim
/// (`!<tag:yaml.org,2002:int>`) or through a `%TAG` prefix are the `!!` ones, here too: an
/// integer, a merge key, and a `!!binary` string decoded.
#[test]
fn core_tags_written_verbatim_or_through_a_prefix_are_the_short_ones() {
    let c = load(
        "%TAG !y! tag:yaml.org,2002:i
---
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: !<tag:yaml.org,2002:int> 0x10}
  - key: b
    rate_limit: {unit: second, requests_per_unit: !y!nt '7'}
  - key: c
    rate_limit:
      !<tag:yaml.org,2002:merge> <<: {unit: minute, requests_per_unit: 3}
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "a"), (16, Unit::Second, String::new()));
    assert_eq!(rate_of(&c, "b"), (7, Unit::Second, String::new()));
    assert_eq!(rate_of(&c, "c"), (3, Unit::Minute, String::new()));
    for binary in ["!!binary", "!<tag:yaml.org,2002:binary>"] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: a\n    value: {binary} aGVsbG8=\n    \
             rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        ))
        .unwrap_or_else(|e| panic!("{binary}: {e}"));
        assert_eq!(c.limits()[0].path, "a_hello", "{binary}");
    }
}

/// yaml.v2 takes as a merge key a `<<` that is plain and untagged or tagged `!!merge`
/// (`tag:yaml.org,2002:merge`, whatever its quoting); `!!str <<` or a quoted `<<` is an
/// ordinary key. `!!merge` on any other scalar, and a tag yaml.v2 does not resolve (`!x`),
/// leave the text, which a string field (or a field name) takes as written.
#[test]
fn merge_tagged_keys_merge_as_yaml_v2_takes_them() {
    let c = load(
        "domain: d
descriptors:
  - key: a
    rate_limit: &h {unit: hour, requests_per_unit: 7}
  - key: b
    rate_limit:
      !!merge <<: *h
      requests_per_unit: 3
  - key: c
    rate_limit:
      <<: {unit: minute}
      !!merge \"<<\": *h
      !!merge <<: {requests_per_unit: 2}
  - !!merge key: !!merge e
    value: !custom v
    rate_limit: {unit: !!merge second, requests_per_unit: 1, name: !x n}
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "b"), (3, Unit::Hour, String::new()));
    assert_eq!(rate_of(&c, "c"), (2, Unit::Hour, String::new()));
    let m = c.lookup("d", [("e", "v")]).unwrap();
    assert_eq!(m.limit.path, "e_v");
    assert!(
        matches!(&m.limit.kind, Kind::Rates(r) if r[0].name == "n" && r[0].unit == Unit::Second)
    );
    // `!!str <<` and `"<<"` are a field named `<<`, which neither knows.
    for bad in [
        "domain: d\ndescriptors:\n  - key: a\n    !!str <<: {value: b}\n",
        "domain: d\ndescriptors:\n  - key: a\n    '<<': {value: b}\n",
    ] {
        let e = load(bad).expect_err(bad);
        assert!(e.message.contains("unknown field \"<<\""), "{e}");
    }
}

/// yaml.v2 resolves plain scalars under YAML 1.1 as Go reads numbers: `010` is octal (8),
/// `0b101`, `0o17`, `0x1F` and `1_000` are integers, `+5` is 5, and `y`, `yes`, `on` (and
/// `n`, `no`, `off`, in three casings) are flags; a null integer is 0 and a null flag false.
/// Numbers that resolve as floats there (`1e3`, `1.0`, `08`, `.5`) are refused there by the
/// key check (a float is no leaf it accepts), and here.
#[test]
fn numbers_and_flags_resolve_as_yaml_v2_resolves_them() {
    for (text, want) in [
        ("010", 8),
        ("-0", 0),
        ("0b101", 5),
        ("0o17", 15),
        ("0x1F", 31),
        ("0X10", 16),
        ("1_000", 1000),
        ("+5", 5),
        ("+0x10", 16),
        ("0_10", 8),
        ("1_000_000_000", 1_000_000_000),
        ("~", 0),
        ("", 0),
        ("null", 0),
        ("!!int 12", 12),
        ("!!int '12'", 12),
    ] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {text}\n"
        ))
        .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(rate_of(&c, "k").0, want, "{text}");
    }
    for text in [
        "1e3",
        "1.0",
        "08",
        ".5",
        "5.",
        "'5'",
        "yes",
        "0x",
        "0b2",
        "-1",
        "0x1_0000_0000",
        ".inf",
        "2001-01-01",
        "!!str 5",
    ] {
        let yaml = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: {text}\n"
        );
        let e = load(&yaml).expect_err(&yaml);
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(6), "descriptors[0].rate_limit.requests_per_unit"),
            "{text}"
        );
    }
    for (text, want) in [
        ("y", true),
        ("Y", true),
        ("yes", true),
        ("Yes", true),
        ("YES", true),
        ("on", true),
        ("On", true),
        ("ON", true),
        ("true", true),
        ("TRUE", true),
        ("n", false),
        ("N", false),
        ("no", false),
        ("No", false),
        ("NO", false),
        ("off", false),
        ("Off", false),
        ("OFF", false),
        ("False", false),
        ("~", false),
        ("", false),
        ("!!bool yes", true),
    ] {
        let c = load(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: {text}\n    detailed_metric: {text}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n  - key: u\n    rate_limit: {{unlimited: {text}}}\n"
        ));
        if want {
            let c = c.unwrap_or_else(|e| panic!("{text}: {e}"));
            let l = &c.limits()[0];
            assert!(l.shadow && l.detailed_metric, "{text}");
            assert_eq!(c.limits()[1].kind, Kind::Unlimited, "{text}");
        } else {
            // Not unlimited, a rate without a unit: refused, after the flags were read.
            let e = c.expect_err(text);
            assert_eq!(e.field, "descriptors[1].rate_limit.unit", "{text}");
            let c = load(&format!(
                "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: {text}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
            ))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!(!c.limits()[0].shadow, "{text}");
        }
    }
    for text in ["yES", "1", "'yes'", "t", "!!str true", "maybe"] {
        let yaml = format!("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: {text}\n");
        let e = load(&yaml).expect_err(&yaml);
        assert_eq!(e.field, "descriptors[0].shadow_mode", "{text}");
    }
}

/// A file that repeats a field many times keeps the first `MAX_WARNINGS` warnings and counts
/// the rest: what a load holds for its warnings is bounded, whatever the file.
#[test]
fn warnings_past_the_most_kept_are_counted() {
    use tollgate_rls::config::Config;
    let repeats = Config::MAX_WARNINGS + 500;
    let mut y = String::from("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n");
    for _ in 0..=repeats {
        y.push_str("      unit: minute\n");
    }
    y.push_str("      requests_per_unit: 3\n");
    let c = load(&y).unwrap();
    assert_eq!(c.warnings().len(), Config::MAX_WARNINGS);
    assert_eq!(c.warnings_not_kept(), 500);
    assert!(c.lookup("d", [("a", "x")]).is_some());
}

/// Each of `c`'s warnings as its line and field.
fn warned(c: &tollgate_rls::config::Config) -> Vec<(Option<usize>, &str)> {
    c.warnings()
        .iter()
        .map(|w| (w.line, w.field.as_str()))
        .collect()
}

/// yaml.v2's parser marks a scalar under the non-specific tag `!` implicit whatever its quoting,
/// as it marks a plain untagged one, and its `isMerge` takes an implicit `<<` as the merge
/// key: `! <<` and `! "<<"` merge there, and here (also written `!<!>`).
#[test]
fn a_merge_key_under_the_non_specific_tag_merges() {
    let c = load(
        "domain: d
descriptors:
  - key: a
    rate_limit: &h {unit: hour, requests_per_unit: 7}
  - key: b
    rate_limit:
      ! <<: *h
      requests_per_unit: 3
  - key: c
    rate_limit:
      ! \"<<\": *h
  - key: e
    rate_limit:
      !<!> '<<': {unit: minute, requests_per_unit: 2}
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "b"), (3, Unit::Hour, String::new()));
    assert_eq!(rate_of(&c, "c"), (7, Unit::Hour, String::new()));
    assert_eq!(rate_of(&c, "e"), (2, Unit::Minute, String::new()));
    // `!x <<` stays a field named `<<`, which neither knows.
    let bad = "domain: d\ndescriptors:\n  - key: a\n    !x <<: {value: b}\n";
    let e = load(bad).expect_err(bad);
    assert!(e.message.contains("unknown field \"<<\""), "{e}");
}

/// An alias used as a mapping key is its anchor's scalar as a key to yaml.v2: one repeating an
/// earlier key of its mapping keeps the later value there, as a scalar written twice does, and
/// here too, with the same warning naming the alias's line.
#[test]
fn an_alias_key_repeating_a_key_keeps_the_later_with_a_warning() {
    let c = load(
        "domain: d
descriptors:
  - &k key: a
    *k : b
    rate_limit: {&u unit: second, requests_per_unit: 1, *u : minute}
  - *k : e
    key: f
    rate_limit: {unit: hour, requests_per_unit: 2}
",
    )
    .unwrap();
    assert!(c.lookup("d", [("a", "x")]).is_none());
    assert_eq!(rate_of(&c, "b"), (1, Unit::Minute, String::new()));
    assert_eq!(rate_of(&c, "f"), (2, Unit::Hour, String::new()));
    assert_eq!(
        warned(&c),
        [
            (Some(4), "descriptors[0].key"),
            (Some(5), "descriptors[0].rate_limit.unit"),
            (Some(7), "descriptors[1].key"),
        ]
    );
    assert_warning_says(&c, 0, "also at line 3");
}

/// envoyproxy/ratelimit decodes a file twice: into a generic map for its key check, which
/// takes strings, ints, flags and nulls as leaves and fails "error checking config" on a
/// float (a `float64` there: `1.0`, `1e3`, `.5`, `08`, `.inf`, anything under `!!float`) or a
/// whole number past `int64` (`uint64`), then into its structs. A string field holding one is
/// refused by the first pass, so here too; its text quoted, or a number yaml.v2 reads as an
/// int or a string, loads as written. Only a name's last value is checked, as the generic map
/// keeps only that one.
#[test]
fn a_float_in_a_string_field_is_refused_as_the_key_check_refuses_it() {
    let with_value = |v: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    value: {v}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    for v in [
        "1.0",
        "1e3",
        ".5",
        "+.5",
        "5.",
        "1_000.5",
        "08",
        "09_9",
        ".inf",
        "-.Inf",
        ".NaN",
        "1e-400",
        "!!float 1",
        "!!float 0x10",
        "9223372036854775808",
        "18446744073709551615",
        "0xFFFF_FFFF_FFFF_FFFF",
        "99999999999999999999",
        "-9223372036854775809",
    ] {
        let yaml = with_value(v);
        refused(&yaml, 4, "descriptors[0].value", "key check");
    }
    for (v, text) in [
        ("'1.0'", "1.0"),
        ("\"1e3\"", "1e3"),
        ("!!str 1.0", "1.0"),
        ("1e400", "1e400"),
        ("9223372036854775807", "9223372036854775807"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("0x1_0000_0000_0000_0000", "0x1_0000_0000_0000_0000"),
        ("+0xFFFF_FFFF_FFFF_FFFF", "+0xFFFF_FFFF_FFFF_FFFF"),
        ("1.0.0", "1.0.0"),
        ("2001-01-01", "2001-01-01"),
        ("1e", "1e"),
        ("inf", "inf"),
    ] {
        let c = load(&with_value(v)).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(c.limits()[0].path, format!("k_{text}"), "{v}");
    }
    // The domain, a rate's `unit` and `name`, a `replaces` name, an ignored field.
    for (yaml, line, field) in [
        ("domain: 1.5\ndescriptors: []\n", 1, "domain"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: 1.0, requests_per_unit: 1}\n",
            4,
            "descriptors[0].rate_limit.unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: 2.5}\n",
            4,
            "descriptors[0].rate_limit.name",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      shadow_mode: 1.0\n",
            7,
            "descriptors[0].rate_limit.shadow_mode",
        ),
    ] {
        refused(yaml, line, field, "key check");
    }
    // yaml.v2 makes a float under `!!float` of a float or an `int64` only, failing the file on
    // other text wherever it stands.
    for v in [
        "!!float x",
        "!!float ~",
        "!!float 0xFFFF_FFFF_FFFF_FFFF",
        "!!float 1e400",
    ] {
        for yaml in [with_value(v), with_value(&format!("{v}\n    value: v"))] {
            let e = load(&yaml).expect_err(&yaml);
            assert_eq!(e.line, Some(4), "{v}: {e}");
            assert!(e.message.contains("not a !!float"), "{v}: {e}");
        }
    }
    // A float written before the value that replaces it is not in the key check's map.
    let c = load(
        "domain: d\ndescriptors:\n  - key: k\n    value: 1.0\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    assert_eq!(c.limits()[0].path, "k_v");
}

/// yaml.v2 decodes a `!!binary` scalar's base64 (Go's standard encoding: padded, `\r` and `\n`
/// skipped) and fills a string field, or names a field, with the text; envoyproxy/ratelimit
/// then reads that text. Text that is not such base64 fails the whole file there, wherever it
/// stands (an ignored field, a value a later one replaces), and a flag or number under
/// `!!binary` is a type error. Bytes that are not UTF-8 are refused here (no request's
/// descriptor holds them).
#[test]
fn binary_scalars_decode_as_yaml_v2_decodes_them() {
    // `ZA==` d, `a2V5` key, `aGVsbG8=` hello, `c2Vjb25k` second, `bjE=` n1.
    let c = load(
        "domain: !!binary ZA==
descriptors:
  - !!binary a2V5: a
    value: !!binary |
      aGVs
      bG8=
    name: !!binary bjE=
    rate_limit:
      unit: !!binary c2Vjb25k
      requests_per_unit: 3
      name: !!binary bjE=
      replaces: [{name: !!binary aGVsbG8=}]
",
    )
    .unwrap();
    let l = &c.limits()[0];
    assert_eq!((l.domain.as_str(), l.path.as_str()), ("d", "a_hello"));
    assert_eq!(
        l.kind,
        Kind::Rates(vec![Rate {
            requests_per_unit: 3,
            unit: Unit::Second,
            burst: 3,
            name: "n1".into()
        }])
    );
    assert_eq!(l.replaces, vec!["hello".to_owned()]);
    // The descriptor's `name` is ignored, its value decoded.
    assert_eq!(warned(&c), [(Some(7), "descriptors[0].name")]);
    let with = |field: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    {field}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    for (field, words) in [
        ("value: !!binary aGVsbG8", "invalid base64"),
        ("value: !!binary aGV sbG8=", "invalid base64"),
        ("value: !!binary =aGVsbG8", "invalid base64"),
        ("value: !!binary aGVsbG8=aGVsbG8=", "invalid base64"),
        ("value: !!binary ~", "invalid base64"),
        // Ignored, or replaced by a later value: decoded all the same.
        ("name: !!binary aGVsbG8", "invalid base64"),
        ("value: !!binary aGVsbG8\n    value: v", "invalid base64"),
        ("shadow_mode: !!binary dHJ1ZQ==", "expected true or false"),
        ("value: !!binary /w==", "not UTF-8"),
    ] {
        let yaml = with(field);
        let e = load(&yaml).expect_err(&yaml);
        assert_eq!(e.line, Some(4), "{field}: {e}");
        assert!(e.message.contains(words), "{field}: {e}");
    }
    let e = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: !!binary MQ==}\n").unwrap_err();
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(4), "descriptors[0].rate_limit.requests_per_unit"),
        "{e}"
    );
    // A key that is not UTF-8 names no field.
    let e = load("domain: d\n!!binary /w==: x\n").unwrap_err();
    assert!(e.message.contains("unknown field"), "{e}");
}

/// yaml.v2's resolver makes an integer of what Go's `ParseInt` or `ParseUint` reads in 64
/// bits; past that a text is a string (or a float), which the `!!int` tag refuses ("cannot
/// decode"), failing the whole file wherever it stands. Untagged, the same text is a string.
#[test]
fn an_int_tag_past_64_bits_fails_the_file() {
    let with = |field: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    {field}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    for field in [
        "value: !!int 0x1_0000_0000_0000_0000",
        "value: !!int 0o2_000_000_000_000_000_000_000",
        "value: !!int 0b1_0000000000000000000000000000000000000000000000000000000000000000",
        "value: !!int -0x8000_0000_0000_0001",
        "value: !!int +0xFFFF_FFFF_FFFF_FFFF",
        "value: !!int 99999999999999999999",
        "name: !!int 0x1_0000_0000_0000_0000",
        "value: !!int 0x1_0000_0000_0000_0000\n    value: v",
    ] {
        let yaml = with(field);
        let e = load(&yaml).expect_err(&yaml);
        assert_eq!(e.line, Some(4), "{field}: {e}");
        assert!(e.message.contains("not a !!int"), "{field}: {e}");
    }
    for (field, path) in [
        (
            "value: !!int 0x7FFF_FFFF_FFFF_FFFF",
            "k_0x7FFF_FFFF_FFFF_FFFF",
        ),
        (
            "value: !!int -0x8000_0000_0000_0000",
            "k_-0x8000_0000_0000_0000",
        ),
        (
            "value: 0x1_0000_0000_0000_0000",
            "k_0x1_0000_0000_0000_0000",
        ),
    ] {
        let c = load(&with(field)).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(c.limits()[0].path, path);
    }
    // `ParseUint` reads it: a `uint64`, which the key check refuses.
    let e = load(&with("value: !!int 0xFFFF_FFFF_FFFF_FFFF")).unwrap_err();
    assert!(e.message.contains("key check"), "{e}");
}

/// Under `!!timestamp` yaml.v2 takes only what its `parseTimestamp` reads (Go's `time.Parse`
/// with its four layouts); other text fails the whole file. A timestamp fills a string field
/// with its text, and is a type error in a number.
#[test]
fn a_timestamp_tag_takes_timestamps_only() {
    let with = |field: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    {field}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    for (v, text) in [
        ("2001-12-14", "2001-12-14"),
        ("2001-1-2", "2001-1-2"),
        ("2000-02-29", "2000-02-29"),
        (
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14t21:59:43.10-05:00",
        ),
        ("2001-12-14T21:59:43Z", "2001-12-14T21:59:43Z"),
        (
            "2001-1-2T3:4:5,123456789123+24:00",
            "2001-1-2T3:4:5,123456789123+24:00",
        ),
        ("'2001-12-14  21:59:43.5'", "2001-12-14  21:59:43.5"),
        ("2001-12-14 0:0:0", "2001-12-14 0:0:0"),
    ] {
        let field = format!("value: !!timestamp {v}");
        let c = load(&with(&field)).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(c.limits()[0].path, format!("k_{text}"), "{field}");
    }
    for v in [
        "x",
        "'2001'",
        "12001-01-01",
        "2001-13-01",
        "2001-02-29",
        "1900-02-29",
        "2001-04-31",
        "2001-01-01T",
        "2001-01-01T24:00:00Z",
        "2001-01-01T1:60:00Z",
        "2001-01-01T1:2:3",
        "2001-01-01T1:2:3z",
        "2001-01-01T1:2:3+5:00",
        "2001-01-01T1:2:3+05:61",
        "2001-01-01T1:2:3.Z",
        "2001-001-01",
        "'2001-01-01 '",
        "'2001-01-01 1:2:3 '",
        "2001-01-01x",
        "~",
    ] {
        let field = format!("value: !!timestamp {v}");
        let yaml = with(&field);
        let e = load(&yaml).expect_err(&yaml);
        assert_eq!(e.line, Some(4), "{field}: {e}");
        assert!(e.message.contains("not a !!timestamp"), "{field}: {e}");
    }
    // Ignored, it is decoded all the same.
    let e = load(&with("name: !!timestamp x")).unwrap_err();
    assert!(e.message.contains("not a !!timestamp"), "{e}");
    let e = load("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: !!timestamp 2001-01-01}\n").unwrap_err();
    assert_eq!(
        e.field, "descriptors[0].rate_limit.requests_per_unit",
        "{e}"
    );
}

/// yaml.v2's merge key is a scalar `<<`: an alias of one used as a key is the ordinary key
/// `<<`, which envoyproxy/ratelimit's key check refuses (unknown), while the anchored `<<`
/// itself merges.
#[test]
fn an_alias_of_a_merge_key_is_an_unknown_key() {
    let merged = "domain: d
descriptors:
  - key: a
    rate_limit:
      &m <<: {unit: second, requests_per_unit: 1}
";
    let c = load(merged).unwrap();
    assert_eq!(rate_of(&c, "a"), (1, Unit::Second, String::new()));
    for (tail, line, field) in [
        (
            "  - key: b\n    rate_limit:\n      *m : {unit: minute, requests_per_unit: 2}\n",
            8,
            "descriptors[1].rate_limit.<<",
        ),
        (
            "  - key: b\n    rate_limit: {*m : {unit: minute, requests_per_unit: 2}}\n",
            7,
            "descriptors[1].rate_limit.<<",
        ),
        // Beside the merge key itself.
        (
            "  - key: b\n    rate_limit:\n      <<: {unit: minute}\n      *m : {requests_per_unit: 2}\n",
            9,
            "descriptors[1].rate_limit.<<",
        ),
    ] {
        let yaml = format!("{merged}{tail}");
        refused(&yaml, line, field, "unknown field \"<<\"");
    }
}

/// envoyproxy/ratelimit's key check walks the whole file, fields its structs ignore included:
/// in a misplaced field's mapping or list every key must be one it knows, every list must hold
/// mappings and no leaf may be a float (or past 64-bit integers), a name's last value only
/// (merges applied), `metadata` unchecked. The same is refused here, and the same loads, with
/// the misplaced field's warning.
#[test]
fn ignored_fields_are_key_checked_as_envoyproxy_ratelimit_checks_them() {
    let with = |field: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    {field}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    };
    for (field, at, words) in [
        ("name: {key: 1.5}", "descriptors[0].name.key", "key check"),
        (
            "name: {key: [{value: 1e3}]}",
            "descriptors[0].name.key[0].value",
            "key check",
        ),
        (
            "name: {key: 18446744073709551615}",
            "descriptors[0].name.key",
            "key check",
        ),
        (
            "name: {colour: red}",
            "descriptors[0].name.colour",
            "unknown field",
        ),
        (
            "name: {key: a, domain: a, value: a, descriptors: a, unlimited: a, shadow_mode: a, \
             name: a, replaces: a, detailed_metric: a, key: 1.5}",
            "descriptors[0].name.key",
            "key check",
        ),
        (
            "name: {<<: {colour: red}}",
            "descriptors[0].name.colour",
            "unknown field",
        ),
        ("name: {1: a}", "descriptors[0].name", "not a string"),
        (
            "name: [a]",
            "descriptors[0].name[0]",
            "other than a mapping",
        ),
        (
            "name: [[{key: a}]]",
            "descriptors[0].name[0]",
            "other than a mapping",
        ),
        (
            "name: {key: !!int x}",
            "descriptors[0].name.key",
            "not a !!int",
        ),
        (
            "name: {<<: {key: !!int x}}",
            "descriptors[0].name.key",
            "not a !!int",
        ),
        ("name: {!!int x: a}", "descriptors[0].name", "not a !!int"),
        ("name: !!int x", "descriptors[0].name", "not a !!int"),
        (
            "name: [{}, {key: !!int x}]",
            "descriptors[0].name[1].key",
            "not a !!int",
        ),
    ] {
        let yaml = with(field);
        refused(&yaml, 4, at, words);
    }
    for field in [
        "name: [{key: a, value: 1, shadow_mode: true}]",
        "name: {metadata: {anything: 1.5}, quota_mode: true}",
        "name: {<<: {key: 1.5}, key: a}",
        "name: {key: 1.5, key: a}",
        "name: {key: 1.5, domain: a, value: a, descriptors: a, unlimited: a, shadow_mode: a, \
         name: a, replaces: a, detailed_metric: a, value_to_metric: a, key: a}",
        "name: 1.5\n    name: x",
        "name: {key: {}}\n    name: x",
        "name: [{colour: red}]\n    name: x",
    ] {
        let c = load(&with(field)).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert!(
            warned(&c).contains(&(Some(4), "descriptors[0].name")),
            "{field}: {:?}",
            c.warnings()
        );
    }
}

/// yaml.v2's parser keeps no tag of a mapping or a list: a tagged collection decodes as the
/// collection, whatever the tag (`!!null`, `!!str`, `!!binary`, `!!map` on a list, `!!seq` on
/// a mapping, a tag of its own, a verbatim one), at the top level, as a descriptor, as a field's
/// value and as a merge key's value. The same loads here, with the same limits.
#[test]
fn a_tag_on_a_mapping_or_a_list_is_ignored_as_yaml_v2_ignores_it() {
    for tag in [
        "!!null",
        "!!str",
        "!!binary",
        "!!map",
        "!!seq",
        "!!int",
        "!foo",
        "!",
        "!<tag:yaml.org,2002:null>",
        "!<tag:example.com,2000:x>",
    ] {
        let yaml = format!(
            "--- {tag}
domain: d
descriptors: {tag}
  - {tag} {{key: a, rate_limit: {tag} {{unit: second, requests_per_unit: 1}}}}
  - key: b
    rate_limit: {{<<: {tag} {{unit: minute}}, requests_per_unit: 2}}
  - key: c
    descriptors: {tag} [{{key: d, rate_limit: {{<<: {tag} [{tag} {{unit: hour}}], requests_per_unit: 3}}}}]
  - key: e
    rate_limit: {{unit: day, requests_per_unit: 4, replaces: {tag} [{tag} {{name: n}}]}}
"
        );
        let c = load(&yaml).unwrap_or_else(|e| panic!("{tag}: {e}"));
        assert!(c.warnings().is_empty(), "{tag}: {:?}", c.warnings());
        assert_eq!(rate_of(&c, "a"), (1, Unit::Second, String::new()), "{tag}");
        assert_eq!(rate_of(&c, "b"), (2, Unit::Minute, String::new()), "{tag}");
        assert_eq!(
            lookup(&c, "d", &[("c", "x"), ("d", "y")]).map(|m| m.0),
            Some("c.d".to_owned()),
            "{tag}"
        );
        assert_eq!(rate_of(&c, "e"), (4, Unit::Day, String::new()), "{tag}");
        let e = c.lookup("d", [("e", "x")]).expect(tag);
        assert_eq!(e.limit.replaces, ["n"], "{tag}");
        assert_eq!(c.limits().len(), 4, "{tag}");
    }
    // A tag whose handle the file does not declare is not YAML, there and here.
    let e = load("domain: d\ndescriptors: !e!foo [{key: a}]\n").unwrap_err();
    assert!(e.message.starts_with("not valid YAML"), "{e}");
}

/// yaml.v2 decodes every value of the file into its generic map before envoyproxy/ratelimit's
/// key check, a value that a later one replaces too, and fails the whole file on a mapping or
/// a list used as a key ("invalid map key"), on a merge key that merges something other than
/// a mapping and on an alias inside its own anchor: refused here too, wherever it stands.
#[test]
fn a_collection_key_or_a_bad_merge_fails_the_file_wherever_it_stands() {
    let good = "[{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]";
    for (earlier, line, at, words) in [
        (
            "descriptors: [{<<: 5, key: b}]",
            2,
            "descriptors[0]",
            "merge key",
        ),
        (
            "descriptors: [{<<: [{key: b}, x]}]",
            2,
            "descriptors[0]",
            "merge key",
        ),
        (
            "descriptors: [{[x]: 5, key: b}]",
            2,
            "descriptors[0]",
            "invalid map key",
        ),
        (
            "descriptors: [{key: b, rate_limit: {{a: 1}: 5}}]",
            2,
            "descriptors[0].rate_limit",
            "invalid map key",
        ),
        (
            "descriptors:\n  - key: b\n    name: {<<: ~}\n    name: x",
            4,
            "descriptors[0].name",
            "merge key",
        ),
        // An alias inside its own anchor ("anchor value contains itself" there), in an
        // ignored field, replaced or not.
        (
            "descriptors:\n  - key: b\n    name: &x {key: *x}\n    name: x",
            4,
            "descriptors[0].name.key",
            "own anchor",
        ),
        (
            "descriptors:\n  - key: b\n    name: &x {key: [{value: *x}]}",
            4,
            "descriptors[0].name.key[0].value",
            "own anchor",
        ),
    ] {
        let yaml = format!("domain: d\n{earlier}\ndescriptors: {good}\n");
        let e = refused(&yaml, line, at, words);
        assert!(
            e.message.contains("yaml.v2 refuses the file"),
            "{yaml}\n{e}"
        );
    }
    // yaml.v2 merges an alias of a mapping, or a list of them, but not an alias of a list of
    // mappings, which the loader's copy would make look like a list written there.
    let merged = |value: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    name: &l [{{name: n}}]\n    \
             rate_limit: {{<<: {value}, unit: second, requests_per_unit: 1}}\n"
        )
    };
    let e = load(&merged("*l")).unwrap_err();
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message.contains("alias of a list"), "{e}");
    // A list holding an alias of a list: the merge is what is refused, as yaml.v2 refuses it.
    let e = load(&merged("[*l]")).unwrap_err();
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(5), "descriptors[0].rate_limit"),
        "{e}"
    );
    assert!(
        e.message
            .contains("a merge key (<<) takes a mapping or a list of mappings"),
        "{e}"
    );
    let c = load(&merged("[{name: n}]")).unwrap();
    assert_eq!(rate_of(&c, "a"), (1, Unit::Second, "n".to_owned()));
}

/// yaml.v2 decodes every occurrence of a field written twice into envoyproxy/ratelimit's
/// structs, in turn: the later is kept, but a type error in the earlier (a list field given a
/// number, a string given a list, a flag given a word) still fails the file, anywhere inside it
/// and also where a null `rate_limit` or a later list drops it. Refused here too, at that
/// value; what only the kept value is checked for (keys, units, names) is not checked in it.
#[test]
fn a_value_a_later_one_replaces_is_still_decoded() {
    let good = "[{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]";
    let rl = "rate_limit: {unit: second, requests_per_unit: 1}";
    for (yaml, line, at, words) in [
        (
            format!("domain: d\ndescriptors: 5\ndescriptors: {good}\n"),
            2,
            "descriptors",
            "expected a list",
        ),
        (
            format!("domain: d\ndescriptors: [{{key: [1]}}]\ndescriptors: {good}\n"),
            2,
            "descriptors[0].key",
            "expected a string",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: x\n  - key: a\n    shadow_mode: maybe\n\
                 descriptors: {good}\n"
            ),
            5,
            "descriptors[1].shadow_mode",
            "expected true or false",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{requests_per_unit: -1}}\n\
                 descriptors: {good}\n"
            ),
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "0..=4294967295",
        ),
        (
            format!(
                "domain: d\ndescriptors: [{{key: a, metadata: 5, quota_mode: true}}]\n\
                 descriptors: {good}\n"
            ),
            2,
            "descriptors[0].metadata",
            "expected a mapping",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    descriptors: {{key: b}}\n    \
                 descriptors: {good}\n"
            ),
            4,
            "descriptors[0].descriptors",
            "expected a list",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - <<: {{descriptors: [{{key: b, value: [c]}}]}}\n    \
                 key: a\n    descriptors: {good}\n"
            ),
            3,
            "descriptors[0].descriptors[0].value",
            "expected a string",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{requests_per_unit: x}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "expected a whole number",
        ),
        (
            // yaml.v2 truncates it: refused here by this reader's own rule, said as such.
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{requests_per_unit: 1.5}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "tollgate-rls refuses a float here",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n    rate_limit:\n".into(),
            4,
            "descriptors[0].rate_limit",
            "expected a mapping",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{replaces: [{{name: {{}}}}]}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.replaces[0].name",
            "expected a string",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      \
             replaces: x\n      replaces: [{name: b}]\n"
                .into(),
            6,
            "descriptors[0].rate_limit.replaces",
            "expected a list",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, replaces: [{name: [b]}]}\n    \
             rate_limit: {replaces: [{name: c}]}\n"
                .into(),
            4,
            "descriptors[0].rate_limit.replaces[0].name",
            "expected a string",
        ),
    ] {
        refused(&yaml, line, at, words);
    }
    // Only types count in a replaced value: a descriptor without a key, two with one key, an
    // invalid unit, a replaces entry without a name, a name envoyproxy/ratelimit does not know
    // (its key check reads the kept value only) and a float in a string field all load.
    let c = load(
        "domain: d
descriptors:
  - value: x
  - {key: a, bogus: {deep: [1]}}
  - {key: a, value: 1.5, rate_limit: {unit: fortnight, replaces: [{}]}}
descriptors:
  - key: a
    descriptors: [{}, {key: 1.5, colour: red}]
    descriptors:
      - key: b
        rate_limit: {unit: fortnight, requests_per_unit: 1, replaces: [{colour: red}]}
        rate_limit: ~
      - key: c
        rate_limit:
          unit: hour
          requests_per_unit: 2
          replaces: [{}]
          replaces: [{name: z}]
",
    )
    .unwrap();
    assert_eq!(
        lookup(&c, "d", &[("a", "x"), ("c", "y")]).map(|m| m.0),
        Some("a.c".to_owned())
    );
    assert!(lookup(&c, "d", &[("a", "x"), ("b", "y")]).is_none());
    let m = c.lookup("d", [("a", "x"), ("c", "y")]).unwrap();
    assert_eq!(m.limit.replaces, ["z"]);
    assert_eq!(c.limits().len(), 1);
}

/// tollgate-rls's `rate_limits` written twice in one mapping keeps the later, and its earlier
/// value is type-checked as an earlier `descriptors` or `rate_limit` is (each entry as a
/// `rate_limit`): a type error in it refuses the file, at that value, by this reader's own
/// rule (envoyproxy/ratelimit's structs have no such field); only types count there.
#[test]
fn an_earlier_rate_limits_is_type_checked() {
    let good = "rate_limits: [{unit: second, requests_per_unit: 1}]";
    for (earlier, line, at, words) in [
        (
            "rate_limits: 5",
            4,
            "descriptors[0].rate_limits",
            "expected a list",
        ),
        (
            "rate_limits: [7]",
            4,
            "descriptors[0].rate_limits[0]",
            "expected a mapping",
        ),
        (
            "rate_limits: [{requests_per_unit: x}]",
            4,
            "descriptors[0].rate_limits[0].requests_per_unit",
            "expected a whole number",
        ),
        (
            "rate_limits: [{unit: [second]}]",
            4,
            "descriptors[0].rate_limits[0].unit",
            "expected a string",
        ),
        (
            "rate_limits: [{replaces: [{name: {}}]}]",
            4,
            "descriptors[0].rate_limits[0].replaces[0].name",
            "expected a string",
        ),
    ] {
        for kept in [good, "rate_limits: ~"] {
            let yaml = format!("domain: d\ndescriptors:\n  - key: a\n    {earlier}\n    {kept}\n");
            let e = refused(&yaml, line, at, words);
            assert!(e.message.contains("tollgate-rls checks"), "{yaml}\n{e}");
        }
    }
    // Only types count: an invalid unit, too many rates, a nameless replaces entry or an
    // unknown field in the earlier one load; a null earlier one is no value.
    let c = load(
        "domain: d
descriptors:
  - key: a
    rate_limits: [{unit: fortnight, bogus: 1, replaces: [{}]}, {}, {}, {}, {}]
    rate_limits: ~
    rate_limits: [{unit: hour, requests_per_unit: 2}]
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "a"), (2, Unit::Hour, String::new()));
}

/// tollgate-rls's `burst` in a `rate_limit` that a later value replaces (a null or later
/// `rate_limit`, a later `rate_limits` or `descriptors`) is type-checked by this reader's own
/// rule, as an earlier `rate_limits` is, the message saying so; only its type counts there.
#[test]
fn an_earlier_burst_is_type_checked() {
    let rl = "rate_limit: {unit: second, requests_per_unit: 1}";
    let good = format!("[{{key: a, {rl}}}]");
    for (yaml, line, at, words) in [
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{burst: x}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.burst",
            "expected a whole number",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {burst: [2]}\n    \
             rate_limit: ~\n"
                .to_owned(),
            4,
            "descriptors[0].rate_limit.burst",
            "expected a whole number",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{burst: -1}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.burst",
            "0..=18446744073709551615",
        ),
        (
            format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{burst: 1.5}}\n    \
                 rate_limit: ~\n    {rl}\n"
            ),
            4,
            "descriptors[0].rate_limit.burst",
            "expected a whole number",
        ),
        (
            format!("domain: d\ndescriptors: [{{key: a, {rl}, rate_limit: {{burst: x}}}}]\ndescriptors: {good}\n"),
            2,
            "descriptors[0].rate_limit.burst",
            "expected a whole number",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{burst: {}}]\n    \
             rate_limits: [{unit: second, requests_per_unit: 1}]\n"
                .into(),
            4,
            "descriptors[0].rate_limits[0].burst",
            "expected a whole number",
        ),
    ] {
        let e = refused(&yaml, line, at, words);
        assert!(e.message.contains("tollgate-rls checks"), "{yaml}\n{e}");
    }
    // Only the type counts: a burst of 0, or below the rate, in the earlier value, and a
    // null one, load.
    let c = load(&format!(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{burst: 0}}\n    \
         rate_limit: ~\n    rate_limits: [{{unit: second, requests_per_unit: 5, burst: 1}}, {{burst: ~}}]\n    \
         rate_limits: ~\n    {rl}\n"
    ))
    .unwrap();
    assert_eq!(rate_of(&c, "a"), (1, Unit::Second, String::new()));
}

/// A `rate_limit` written twice fills one struct, but yaml.v2's generic map (and so
/// envoyproxy/ratelimit's key check) keeps the last one only: a field of an earlier one that
/// its structs do not have is ignored there, not refused, and a float in an earlier one's
/// string field is that field's text. The same loads here, the unknown field with a warning.
#[test]
fn an_earlier_rate_limit_is_not_key_checked() {
    let c = load(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, bogus: [1], name: 1.5, replaces: [{name: z, colour: red}]}
    rate_limit: {requests_per_unit: 5}
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "a"), (5, Unit::Second, "1.5".to_owned()));
    assert_eq!(c.lookup("d", [("a", "x")]).unwrap().limit.replaces, ["z"]);
    assert_eq!(
        warned(&c),
        [
            (Some(5), "descriptors[0].rate_limit"),
            (Some(4), "descriptors[0].rate_limit.bogus"),
            (Some(4), "descriptors[0].rate_limit.replaces[0].colour"),
        ]
    );
    // The kept one is key-checked, as there; and an ignored field holding a rate is refused
    // (it would drop that limit).
    for (yaml, line, at, words) in [
        (
            "  - key: a\n    rate_limit: {unit: second}\n    rate_limit: {requests_per_unit: 5, bogus: 1}\n",
            5,
            "descriptors[0].rate_limit.bogus",
            "unknown field",
        ),
        (
            "  - key: a\n    rate_limit: {unit: second}\n    rate_limit: {requests_per_unit: 5, name: 1.5}\n",
            5,
            "descriptors[0].rate_limit.name",
            "key check",
        ),
        (
            "  - key: a\n    rate_limit: {unit: second, bogus: {unit: hour}}\n    rate_limit: {requests_per_unit: 5}\n",
            4,
            "descriptors[0].rate_limit.bogus",
            "holds a rate",
        ),
    ] {
        let yaml = format!("domain: d\ndescriptors:\n{yaml}");
        refused(&yaml, line, at, words);
    }
}

/// envoyproxy/ratelimit's `quota_mode` and `metadata` take effect in a descriptor only, where
/// tollgate-rls refuses them as not supported; anywhere else its key check takes them and its
/// structs ignore them, so they load ignored here too, with a warning.
#[test]
fn quota_mode_and_metadata_outside_a_descriptor_are_ignored() {
    let c = load(
        "domain: d
quota_mode: true
metadata: {a: b}
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 1
      quota_mode: true
      metadata: {anything: [1.5]}
      replaces: [{name: b, quota_mode: true}]
",
    )
    .unwrap();
    assert_eq!(rate_of(&c, "a"), (1, Unit::Second, String::new()));
    assert_eq!(
        warned(&c),
        [
            (Some(2), "quota_mode"),
            (Some(3), "metadata"),
            (Some(9), "descriptors[0].rate_limit.quota_mode"),
            (Some(10), "descriptors[0].rate_limit.metadata"),
            (Some(11), "descriptors[0].rate_limit.replaces[0].quota_mode"),
        ]
    );
    let e = load("domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n").unwrap_err();
    assert!(e.message.contains("not supported"), "{e}");
}
