//! Hostile config files: the loader answers `Ok` or an error for any text, without overflowing
//! the stack, expanding aliases without bound, taking the square of a file's size in time or
//! memory, or panicking (a reload must go on serving the old config on a bad file).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tollgate_rls::config::{Config, ConfigError};

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_sources(&[(PathBuf::from("test.yaml"), yaml.to_owned())])
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
        let e = load_on_reload_stack(format!("domain: d\ndescriptors:\n{nested}")).unwrap_err();
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
    let e = load_on_reload_stack(tree(33)).unwrap_err();
    assert!(e.message.contains("deeper than 32 levels"), "{e}");
}

#[test]
fn aliases_through_complex_keys_do_not_expand_without_bound() {
    // saphyr's alias budget counts a mapping key as one node whatever it holds: each anchor
    // below holds ten copies of the previous one in its key, so six lines expand to a million
    // nodes (seven to ten million) under that budget.
    let mut s = String::from("a0: &a0 {? [x, x, x, x, x, x, x, x, x, x] : v}\n");
    for i in 1..7 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} {{? [{refs}] : v}}\n"));
    }
    let e = load(&format!("{s}domain: d\n")).unwrap_err();
    assert!(e.message.contains("aliases expand"), "{e}");
    // The plain form (aliases in values) is refused as well.
    let mut s = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        s.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let e = load(&format!("{s}domain: d\n")).unwrap_err();
    assert!(e.message.contains("aliases expand"), "{e}");
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
        let e = load(&yaml).unwrap_err();
        assert!(e.message.contains("unknown field"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}

#[test]
fn ids_repeating_a_long_key_are_bounded() {
    // A 200 KB key over 400 small limits (an 80 KB file besides the key): each limit's id and
    // path repeat the key, 160 MB of them. Ids past 64 MiB in all are refused.
    let big = "x".repeat(200_000);
    let kids: String = (0..400)
        .map(|i| {
            format!("      - {{key: c{i}, rate_limit: {{unit: second, requests_per_unit: 1}}}}\n")
        })
        .collect();
    let e = load(&format!(
        "domain: d\ndescriptors:\n  - key: {big}\n    descriptors:\n{kids}"
    ))
    .unwrap_err();
    assert!(e.message.contains("MiB"), "{e}");
    assert!(e.field.starts_with("descriptors[0].descriptors["), "{e}");
    // The same key over a few limits loads.
    let kids: String = kids.lines().take(10).map(|l| format!("{l}\n")).collect();
    let c = load(&format!(
        "domain: d\ndescriptors:\n  - key: {big}\n    descriptors:\n{kids}"
    ))
    .unwrap();
    assert_eq!(c.limits().len(), 10);
}
