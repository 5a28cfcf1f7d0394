//! Hostile config files: the loader answers `Ok` or an error for any text, without overflowing
//! the stack, expanding aliases without bound, taking the square of a file's size in time or
//! memory, or panicking (a reload must go on serving the old config on a bad file).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tollgate::ManualClock;
use tollgate_rls::config::{Config, ConfigError, LoadOptions};
use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
use tollgate_rls::service::{Descriptor, Request, Service};

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_sources(&[(PathBuf::from("test.yaml"), yaml.to_owned())])
}

/// The error refusing a config (a config that loads fails the test naming its size, not
/// printing it: a hostile one can be megabytes).
fn refused(r: Result<Config, ConfigError>) -> ConfigError {
    match r {
        Ok(c) => panic!("loaded, with {} limits", c.limits().len()),
        Err(e) => e,
    }
}

/// Loads `yaml` on a thread with the stack of a reload's blocking thread (tokio's 2 MiB).
fn load_on_reload_stack(yaml: String) -> Result<Config, ConfigError> {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || load(&yaml))
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn deep_block_nesting_is_refused_without_recursing() {
    // Block nesting has no limit in saphyr's parser, whose loading recurses once per level:
    // 4,000 nested lists (or mappings) overflow a 2 MiB stack, an abort, not an error.
    let depth = 4_000;
    let lists: String = (0..depth)
        .map(|i| format!("{}-\n", " ".repeat(i)))
        .collect();
    let maps: String = (0..depth)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .collect();
    for nested in [lists, maps] {
        let e = refused(load_on_reload_stack(format!(
            "domain: d\ndescriptors:\n{nested}"
        )));
        assert!(e.message.contains("nested deeper than"), "{e}");
    }
    // A config at the deepest descriptor level loads; one level more is refused by the
    // descriptor check, with its own message, not by the nesting bound.
    let tree = |levels: usize| {
        let mut s = String::from("domain: d\ndescriptors:\n");
        for i in 0..levels {
            let pad = "  ".repeat(2 * i + 1);
            s.push_str(&format!("{pad}- key: k{i}\n"));
            if i + 1 < levels {
                s.push_str(&format!("{pad}  descriptors:\n"));
            } else {
                s.push_str(&format!(
                    "{pad}  rate_limit: {{unit: second, requests_per_unit: 1}}\n"
                ));
            }
        }
        s
    };
    let c = load_on_reload_stack(tree(32)).unwrap();
    assert_eq!(c.limits().len(), 1);
    let e = refused(load_on_reload_stack(tree(33)));
    assert!(e.message.contains("deeper than 32 levels"), "{e}");
}

#[test]
fn anchors_and_aliases_copy_within_a_bound_of_the_file() {
    // saphyr's alias budget counts a mapping key as one node whatever it holds: each anchor
    // below holds ten copies of the previous one in its key, so six lines expand to a million
    // nodes (seven to ten million) under that budget.
    let mut s = String::from("a0: &a0 {? [x, x, x, x, x, x, x, x, x, x] : v}\n");
    for i in 1..7 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} {{? [{refs}] : v}}\n"));
    }
    let e = refused(load(&format!("{s}domain: d\n")));
    assert!(e.message.contains("billion-laughs"), "{e}");
    // The plain form (aliases in values) is refused as well.
    let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let e = refused(load(&format!("{s}domain: d\n")));
    assert!(e.message.contains("billion-laughs"), "{e}");
    // Alias copies weigh a scalar's bytes: a 1 MB scalar aliased 2,000 times would copy 2 GB.
    let e = refused(load(&format!(
        "domain: d\na: &a {}\nx: [{}]\n",
        "v".repeat(1 << 20),
        "*a, ".repeat(2_000)
    )));
    assert!(e.message.contains("billion-laughs"), "{e}");
    // An anchored node is copied when complete: 120 nested anchors over a 300 KB list were
    // 120 copies of it (1.9 GB).
    let opened: String = (0..120).map(|i| format!("&a{i} [")).collect();
    let e = refused(load(&format!(
        "domain: d\nx: {opened}{}{}\n",
        "v, ".repeat(100_000),
        "]".repeat(120)
    )));
    assert!(e.message.contains("billion-laughs"), "{e}");
    // Aliases within the budget still load.
    let c = load(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 5}\n  - key: b\n    rate_limit: *r\n",
    )
    .unwrap();
    assert_eq!(c.limits().len(), 2);
}

#[test]
fn a_mapping_of_many_fields_costs_its_length_not_its_square() {
    // 100,000 unknown fields: a scan of the fields seen per field took minutes; one pass takes
    // a second or two in a debug build. The bound is loose, for slow machines.
    let fields: String = (0..100_000).map(|i| format!("k{i}: 1\n")).collect();
    for yaml in [
        format!("domain: d\n{fields}"),
        format!(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n{}",
            fields
                .lines()
                .map(|l| format!("      {l}\n"))
                .collect::<String>()
        ),
    ] {
        let t = Instant::now();
        let e = refused(load(&yaml));
        assert!(e.message.contains("unknown field"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}

#[test]
fn paths_repeating_a_long_key_are_bounded() {
    // A 200 KB key over 400 small limits (an 80 KB file besides the key): each limit's id and
    // path repeat the key, 160 MB of them. Paths past 64 MiB in all are refused.
    let big = "x".repeat(200_000);
    let tree =
        |kids: &str| format!("domain: d\ndescriptors:\n  - key: {big}\n    descriptors:\n{kids}");
    let limits: String = (0..400)
        .map(|i| {
            format!("      - {{key: c{i}, rate_limit: {{unit: second, requests_per_unit: 1}}}}\n")
        })
        .collect();
    let e = refused(load(&tree(&limits)));
    assert!(e.message.contains("MiB"), "{e}");
    assert!(e.field.starts_with("descriptors[0].descriptors["), "{e}");
    // So are the paths of descriptors holding descriptors (each the parent of a level).
    let parents: String = (0..400)
        .map(|i| format!("      - {{key: c{i}, descriptors: []}}\n"))
        .collect();
    let e = refused(load(&tree(&parents)));
    assert!(e.message.contains("MiB"), "{e}");
    // A descriptor with neither builds no path: 20,000 of them under the key load.
    let leaves: String = (0..20_000)
        .map(|i| format!("      - {{key: c{i}}}\n"))
        .collect();
    assert_eq!(load(&tree(&leaves)).unwrap().limits().len(), 0);
    // The key over a few limits loads.
    let few: String = limits.lines().take(10).map(|l| format!("{l}\n")).collect();
    assert_eq!(load(&tree(&few)).unwrap().limits().len(), 10);
}

/// The configs of this crate's tests and README: every raw string literal of `rls/tests/*.rs`
/// and every YAML block of `rls/README.md` that names a domain (read at run time, so configs
/// added to the tests join the seeds).
fn seed_configs() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut seeds = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap();
        for chunk in src.split("r#\"").skip(1) {
            if let Some((yaml, _)) = chunk.split_once("\"#") {
                if yaml.contains("domain:") {
                    seeds.push(yaml.to_owned());
                }
            }
        }
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for chunk in readme.split("```yaml\n").skip(1) {
        if let Some((yaml, _)) = chunk.split_once("```") {
            if yaml.contains("domain:") {
                seeds.push(yaml.to_owned());
            }
        }
    }
    seeds
}

/// Bytes a mutation inserts: YAML's indicators, whitespace, a NUL, a byte that is not UTF-8
/// (read back as U+FFFD), a BOM, a `\x1f`.
const BYTES: &[u8] = b"-:?,[]{}#&*!|>'\"%@` \t\n\r\0\xff\x1f_*.0123456789";

/// Snippets a mutation inserts at a line's start or in place of a word.
const SNIPPETS: &[&str] = &[
    "&a ",
    "*a",
    "&b [*a, *a, *a]",
    "<<: *a\n",
    "? ",
    "? [x]\n: y\n",
    "!!binary ",
    "!!int ",
    "!!str ",
    "!foo ",
    "%YAML 1.2\n---\n",
    "---\n",
    "...\n",
    "|\n  x\n",
    ">-\n  x\n",
    "\u{feff}",
    "\"\\0\"",
    "'",
    "~",
    "null",
    "true",
    "yes",
    "1e400",
    "99999999999999999999",
    "-1",
    ".inf",
    ".nan",
    "0x",
    "0o17",
    "0xFFFFFFFF",
    "4294967296",
    "18446744073709551616",
    "-0",
    "1_000",
    "SECOND",
    "Minute",
    "unknown",
    "unlimited: true",
    "burst: 1",
    "shadow_mode: true",
    "share_threshold: true",
    "value: \"*\"",
    "value: a*b*",
    "replaces: [{name: x}]",
    "name: x",
    "descriptors: []",
    "descriptors:\n  - key: k\n",
    "rate_limits: []",
    "quota_mode: true",
    "domain: d\n",
    "key: \"\"",
    "value: \"\"",
    "\u{2603}",
    "ſecond",
];

fn mutate(rng: &mut tollgate_testkit::rng::Rng, text: &str, seeds: &[String]) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(2) {
        let at =
            |rng: &mut tollgate_testkit::rng::Rng, b: &[u8]| rng.below(b.len() as u64 + 1) as usize;
        match rng.below(10) {
            0 => {
                let i = at(rng, &b);
                b.insert(i, BYTES[rng.below(BYTES.len() as u64) as usize]);
            }
            1 => {
                let i = at(rng, &b);
                let j = (i + 1 + rng.below(16) as usize).min(b.len());
                b.drain(i..j);
            }
            2 => {
                let i = at(rng, &b);
                let j = (i + 1 + rng.below(64) as usize).min(b.len());
                let span = b[i..j].to_vec();
                for _ in 0..1 + rng.below(3) {
                    b.splice(j..j, span.iter().copied());
                }
            }
            3 | 4 => {
                // A snippet at a line's start or in place of a word.
                let s = SNIPPETS[rng.below(SNIPPETS.len() as u64) as usize].as_bytes();
                let i = at(rng, &b);
                let start = b[..i]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                if rng.below(2) == 0 {
                    b.splice(start..start, s.iter().copied());
                } else {
                    let end = b[i..]
                        .iter()
                        .position(|c| matches!(c, b' ' | b'\n' | b',' | b'}' | b']'))
                        .map_or(b.len(), |p| i + p);
                    b.splice(i..end, s.iter().copied());
                }
            }
            5 => {
                // A line of another seed in place of one of this text.
                let other = &seeds[rng.below(seeds.len() as u64) as usize];
                let lines: Vec<&str> = other.lines().collect();
                let line = lines[rng.below(lines.len() as u64) as usize];
                let i = at(rng, &b);
                let start = b[..i]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                b.splice(start..end, line.bytes());
            }
            6 => {
                // A line indented more or less (or by a tab).
                let i = at(rng, &b);
                let start = b[..i]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                let (end, with): (usize, &[u8]) = match rng.below(3) {
                    0 => (start, b"  "),
                    1 => (start, b"\t"),
                    _ => ((start + 2).min(b.len()), b""),
                };
                b.splice(start..end, with.iter().copied());
            }
            7 => {
                // Two lines swapped.
                let mut lines: Vec<&[u8]> = b.split(|&c| c == b'\n').collect();
                let n = lines.len() as u64;
                lines.swap(rng.below(n) as usize, rng.below(n) as usize);
                b = lines.join(&b'\n');
            }
            8 => {
                let i = at(rng, &b);
                b.truncate(i);
            }
            _ => {
                let i = at(rng, &b).min(b.len().saturating_sub(1));
                if let Some(c) = b.get_mut(i) {
                    c.make_ascii_uppercase();
                }
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn mutated_configs_load_or_are_refused_and_what_loads_decides() {
    let seeds = seed_configs();
    assert!(seeds.len() >= 5, "{} seeds", seeds.len());
    // Every seed is a config the tests load (or refuse on purpose): none panics.
    let valid = seeds.iter().filter(|s| load(s).is_ok()).count();
    eprintln!("{valid} of {} seeds load", seeds.len());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let clock = ManualClock::new();
    // Fixed by default; `HOSTILE_SEED` and `HOSTILE_ROUNDS` run a longer campaign by hand.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rounds = env("HOSTILE_ROUNDS", 5_000);
    let mut rng = tollgate_testkit::rng::Rng(env("HOSTILE_SEED", 0x5eed_c0f1).max(1));
    let (mut loaded, mut decided) = (0, 0);
    let started = Instant::now();
    for _ in 0..rounds {
        let seed = &seeds[rng.below(seeds.len() as u64) as usize];
        let text = mutate(&mut rng, seed, &seeds);
        let mut sources = vec![(PathBuf::from("a.yaml"), text.clone())];
        if rng.below(4) == 0 {
            let other = &seeds[rng.below(seeds.len() as u64) as usize];
            // Another file, of another domain (or of the same, refused as a duplicate).
            let other = match rng.below(4) {
                0 => other.clone(),
                _ => other.replacen("domain: ", "domain: other_", 1),
            };
            sources.push((PathBuf::from("b.yaml"), other));
        }
        let Ok(config) = Config::from_sources(&sources) else {
            continue;
        };
        loaded += 1;
        // What loads is served: each limit asked for along its own path, and a request that
        // matches nothing.
        let requests: Vec<Request> = config
            .limits()
            .iter()
            .map(|l| Request {
                domain: l.domain.clone(),
                descriptors: vec![Descriptor {
                    entries: l
                        .path
                        .split('.')
                        .map(|p| match p.split_once('_') {
                            Some((k, v)) => (k.to_owned(), v.to_owned()),
                            None => (p.to_owned(), "v".to_owned()),
                        })
                        .collect(),
                    hits_addend: Some(rng.below(3)),
                    ..Default::default()
                }],
                hits_addend: rng.below(3) as u32,
            })
            .chain([Request {
                domain: "d".into(),
                descriptors: vec![Descriptor {
                    entries: vec![("k".into(), "v".into())],
                    ..Default::default()
                }],
                hits_addend: 0,
            }])
            .collect();
        let backend = Backend::Local(LocalBackend::new(RlsClock::manual(clock.clone()), 64));
        let service = Service::new(config, backend, rng.below(8) == 0);
        for r in requests.iter().take(20) {
            let resp = rt.block_on(service.should_rate_limit(r)).unwrap();
            assert_eq!(resp.statuses.len(), r.descriptors.len());
            decided += 1;
        }
    }
    // The mutations keep enough configs loadable for the decisions to be exercised.
    assert!(loaded >= rounds / 20, "{loaded} of {rounds} loaded");
    assert!(decided >= rounds / 10, "{decided} decisions");
    eprintln!(
        "{loaded} loaded, {decided} decided, {:?}",
        started.elapsed()
    );
}

/// A request descriptor: its entries and its own `hits_addend`.
type Asked<'a> = (Vec<(&'a str, &'a str)>, Option<u64>);

/// A local service on a manual clock and its clock.
fn local(yaml: &str) -> (Service, ManualClock) {
    let clock = ManualClock::new();
    let backend = Backend::Local(LocalBackend::new(RlsClock::manual(clock.clone()), 1_000));
    (Service::new(load(yaml).unwrap(), backend, false), clock)
}

/// Decides a request on `s`: per descriptor, whether its status is `OK` and its `limit_remaining`.
fn ask(s: &Service, domain: &str, descs: Vec<Asked<'_>>, hits: u32) -> Vec<(bool, u32)> {
    let req = Request {
        domain: domain.into(),
        descriptors: descs
            .into_iter()
            .map(|(e, h)| Descriptor {
                entries: e.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
                hits_addend: h,
                ..Default::default()
            })
            .collect(),
        hits_addend: hits,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let r = rt.block_on(s.should_rate_limit(&req)).unwrap();
    r.statuses
        .iter()
        .map(|st| {
            (
                st.code == tollgate_rls::service::Code::Ok,
                st.limit_remaining,
            )
        })
        .collect()
}

const REQ_CONFIG: &str = "domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: open
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
";

#[test]
fn hostile_hit_counts_and_entries_get_ordinary_decisions() {
    let (s, _clock) = local(REQ_CONFIG);
    let a = || (vec![("user", "a")], None);
    // u64::MAX hits on one bucket, and twice on one bucket (summed, saturating): refused,
    // nothing debited (the request's other bucket keeps its tokens).
    for big in [
        vec![(vec![("user", "a")], Some(u64::MAX))],
        vec![
            (vec![("user", "a")], Some(u64::MAX)),
            (vec![("user", "a")], Some(u64::MAX)),
        ],
    ] {
        let mut descs = big;
        descs.push((vec![("user", "b")], Some(1)));
        let r = ask(&s, "d", descs, 0);
        assert!(!r[0].0, "{r:?}");
    }
    assert_eq!(
        ask(&s, "d", vec![(vec![("user", "b")], None)], 0),
        vec![(true, 4)]
    );
    // u32::MAX request hits over 1,024 descriptors of one bucket: refused.
    let r = ask(&s, "d", vec![a(); 1024], u32::MAX);
    assert!(r.iter().all(|x| !x.0));
    // A shadow-mode limit asked for u64::MAX: answered OK, not debited.
    let r = ask(&s, "d", vec![(vec![("shadow", "x")], Some(u64::MAX))], 0);
    assert_eq!(r, vec![(true, 0)]);
    assert_eq!(
        ask(&s, "d", vec![(vec![("shadow", "x")], None)], 0),
        vec![(true, 4)]
    );
    // Empty keys and values, no entries, an unknown domain: no limit, or the value-less one.
    let r = ask(
        &s,
        "d",
        vec![
            (vec![("", "")], None),
            (vec![], None),
            (vec![("user", "")], None),
        ],
        0,
    );
    assert_eq!(r, vec![(true, 0), (true, 0), (true, 4)]);
    assert_eq!(ask(&s, "nope", vec![a()], 0), vec![(true, 0)]);
    // Unlimited beside blocked: the request is refused, the unlimited status is OK.
    let r = ask(
        &s,
        "d",
        vec![
            (vec![("open", "x")], None),
            (vec![("blocked", "x")], None),
            a(),
        ],
        0,
    );
    assert_eq!(r, vec![(true, u32::MAX), (false, 0), (true, 5)]);
    // Nothing was debited from `user: a` by any of the above.
    assert_eq!(ask(&s, "d", vec![a()], 0), vec![(true, 4)]);
}

fn load_with(sources: &[(&str, String)], max_descriptors: usize) -> Result<Config, ConfigError> {
    let sources: Vec<(PathBuf, String)> = sources
        .iter()
        .map(|(f, t)| (PathBuf::from(f), t.clone()))
        .collect();
    Config::from_sources_with(
        &sources,
        LoadOptions {
            max_descriptors,
            ..LoadOptions::default()
        },
    )
}

/// Every descriptor costs memory while its file is parsed and once loaded (a table of one in
/// the local backend for a descriptor of exact values): unbounded, a generated file of a
/// million descriptors would take gigabytes. A config defines at most `--max-descriptors` (every level, with
/// a limit or not, summed over its files), and a file holding far more mappings than that
/// allows is refused as it is read, before it is built.
#[test]
fn a_config_over_the_descriptor_bound_is_refused() {
    let flat = |n: usize, domain: &str| {
        let mut s = format!("domain: {domain}\ndescriptors:\n");
        for i in 0..n {
            s.push_str(&format!(
                "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
            ));
        }
        s
    };
    assert_eq!(
        load_with(&[("a.yaml", flat(10, "a"))], 10)
            .unwrap()
            .limits()
            .len(),
        10
    );
    let e = refused(load_with(&[("a.yaml", flat(11, "a"))], 10));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(23), "descriptors[10]"),
        "{e}"
    );
    assert!(e.message.contains("more than 10 descriptors"), "{e}");
    assert!(e.message.contains("--max-descriptors"), "{e}");
    // Nested descriptors count, and so do the descriptors of every file.
    let nested = "domain: n\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n";
    assert!(load_with(&[("n.yaml", nested.into())], 2).is_ok());
    let e = refused(load_with(&[("n.yaml", nested.into())], 1));
    assert_eq!(e.field, "descriptors[0].descriptors[0]", "{e}");
    let e = refused(load_with(
        &[("a.yaml", flat(6, "a")), ("b.yaml", flat(5, "b"))],
        10,
    ));
    assert_eq!(e.file, PathBuf::from("b.yaml"), "{e}");
    // Mappings past four per descriptor and the spare 1,024 are refused while parsing, here
    // replaces entries of one descriptor.
    let many: String = (0..2_000).map(|i| format!("{{name: n{i}}}, ")).collect();
    let e = refused(load_with(
        &[(
            "r.yaml",
            format!(
                "domain: r\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, \
                 replaces: [{many}]}}\n"
            ),
        )],
        1,
    ));
    assert!(
        e.message
            .starts_with("more mappings than 1 descriptors hold"),
        "{e}"
    );
    // The default bound, 100,000, loads a config of that many.
    assert_eq!(
        load_with(
            &[("a.yaml", flat(1_000, "a"))],
            tollgate_rls::config::DEFAULT_MAX_DESCRIPTORS
        )
        .unwrap()
        .limits()
        .len(),
        1_000
    );
}

/// A reload onto a config over the bound keeps the old one serving.
#[test]
fn a_reload_over_the_descriptor_bound_keeps_the_old_config() {
    let dir = std::env::temp_dir().join(format!("rls-maxdesc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.yaml");
    std::fs::write(
        &path,
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    )
    .unwrap();
    let clock = ManualClock::new();
    let s = Service::new(
        Config::load(&path).unwrap(),
        Backend::Local(LocalBackend::new(RlsClock::manual(clock), 1_000)),
        false,
    )
    .with_max_descriptors(2);
    assert_eq!(s.load_options().max_descriptors, 2);
    std::fs::write(
        &path,
        "domain: d\ndescriptors:\n  - key: a\n  - key: b\n  - key: c\n",
    )
    .unwrap();
    assert!(!tollgate_rls::server::reload(&path, &s));
    // Still limited: one hit an hour for `a`.
    assert_eq!(
        ask(&s, "d", vec![(vec![("a", "x")], None)], 1),
        vec![(true, 0)]
    );
    assert_eq!(
        ask(&s, "d", vec![(vec![("a", "x")], None)], 1),
        vec![(false, 0)]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
