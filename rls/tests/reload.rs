//! Hot reload in-process (ManualClock): unchanged limits keep their buckets, changed ones carry
//! them over, removed ones are retired (resumed if they come back), an invalid config leaves
//! the old one serving; a file
//! edit, a rename over the file and a ConfigMap's `..data` link swap are each noticed.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

const V1: &str = "domain: r\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

fn with_probe(base: &str, probe: u32) -> String {
    format!("{base}  - key: probe\n    rate_limit: {{unit: minute, requests_per_unit: {probe}}}\n")
}

/// Waits (at most 2 s) until the `probe` limit answers with `rpu` requests per unit.
async fn until_probe(s: &mut Rls, rpu: u32) -> Duration {
    let t0 = Instant::now();
    loop {
        let out = s.ok(req("r", vec![desc_hits(&[("probe", "p")], 0)])).await;
        if out.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
            == Some(rpu)
        {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "no reload within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn replace_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn buckets_survive_reloads_as_their_limits_do() {
    let mut s = Rls::start(&with_probe(V1, 1)).await;
    let cfg = s.dir.path().join("config.yaml");
    let mut drain = req("r", vec![desc(&[("user", "alice")])]);
    drain.hits_addend = 3;
    assert_eq!(s.ok(drain).await.overall_code, OK);
    let alice = || req("r", vec![desc(&[("user", "alice")])]);
    // Another limit changes: alice's limit is unchanged and stays drained.
    std::fs::write(&cfg, with_probe(V1, 2)).unwrap();
    until_probe(&mut s, 2).await;
    assert_eq!(brief(&s.ok(alice()).await), vec![(OVER, 0, Some(20))]);
    // alice's limit changes to 6 a minute: still drained, now a token every 10 s.
    replace_by_rename(
        &cfg,
        &with_probe(
            &V1.replace("requests_per_unit: 3", "requests_per_unit: 6"),
            3,
        ),
    );
    until_probe(&mut s, 3).await;
    assert_eq!(brief(&s.ok(alice()).await), vec![(OVER, 0, Some(10))]);
    s.clock.advance(Duration::from_secs(10));
    assert_eq!(s.ok(alice()).await.overall_code, OK);
    // An invalid config: logged, and the old one keeps serving.
    std::fs::write(&cfg, "domain: r\ndescriptors: [").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(brief(&s.ok(alice()).await), vec![(OVER, 0, Some(10))]);
    // Removed, then added back: alice's bucket resumes (converted back to 3 a minute).
    std::fs::write(&cfg, with_probe("domain: r\ndescriptors:\n", 4)).unwrap();
    until_probe(&mut s, 4).await;
    assert_eq!(brief(&s.ok(alice()).await), vec![(OK, 0, None)], "no limit");
    std::fs::write(&cfg, with_probe(V1, 5)).unwrap();
    until_probe(&mut s, 5).await;
    assert_eq!(brief(&s.ok(alice()).await), vec![(OVER, 0, Some(20))]);
    s.stop().await;
}

#[tokio::test]
async fn a_configmap_link_swap_is_noticed() {
    // The service watches a directory laid out as the kubelet lays out a ConfigMap.
    let mut s = Rls::start(&with_probe(V1, 1)).await;
    let dir = s.dir.path().to_owned();
    std::fs::remove_file(dir.join("config.yaml")).unwrap();
    let lay = |version: &str, probe: u32| {
        let v = dir.join(version);
        std::fs::create_dir(&v).unwrap();
        std::fs::write(v.join("config.yaml"), with_probe(V1, probe)).unwrap();
        // Swap `..data` atomically: a new link renamed over the old one.
        let tmp = dir.join("..data_tmp");
        std::os::unix::fs::symlink(version, &tmp).unwrap();
        std::fs::rename(&tmp, dir.join("..data")).unwrap();
    };
    lay("..v1", 7);
    std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
    until_probe(&mut s, 7).await;
    lay("..v2", 8);
    let took = until_probe(&mut s, 8).await;
    assert!(took < Duration::from_secs(2));
    s.stop().await;
}

#[tokio::test]
async fn hostile_files_leave_the_old_config_serving() {
    // Each file is refused by the loader on the reload's blocking thread (a 2 MiB stack):
    // thousands of nested block lists (which recursed once per level in saphyr's loading and
    // aborted the process) and an alias bomb through complex keys (seconds and gigabytes).
    let mut s = Rls::start(&with_probe(V1, 1)).await;
    let cfg = s.dir.path().join("config.yaml");
    let deep: String = (0..4_000)
        .map(|i| format!("{}-\n", " ".repeat(i)))
        .collect();
    let mut bomb = String::from("a0: &a0 {? [x, x, x, x, x, x, x, x, x, x] : v}\n");
    for i in 1..7 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} {{? [{refs}] : v}}\n"));
    }
    for (n, text) in [
        format!("domain: r\ndescriptors:\n{deep}"),
        format!("{bomb}domain: r\n"),
    ]
    .into_iter()
    .enumerate()
    {
        replace_by_rename(&cfg, &text);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let out = s.ok(req("r", vec![desc_hits(&[("probe", "p")], 0)])).await;
        let rpu = out.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit);
        assert_eq!(rpu, Some(1), "file {n}: the old config serves");
    }
    // A valid file after them is still picked up.
    replace_by_rename(&cfg, &with_probe(V1, 2));
    until_probe(&mut s, 2).await;
    s.stop().await;
}

fn load(yaml: &str) -> tollgate_rls::config::Config {
    let source = (std::path::PathBuf::from("c.yaml"), yaml.to_owned());
    tollgate_rls::config::Config::from_sources(&[source]).unwrap()
}

/// Decides one hit of `key: value` in domain `r` on `s`: whether it is admitted.
fn one(s: &tollgate_rls::service::Service, key: &str, value: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    one_on(&rt, s, key, value)
}

/// A limit that leaves the config for a while and comes back (a file read while half written,
/// made `unlimited` or 0 per unit, an edit reverted) resumes its buckets: no value gets a
/// second burst within its window. Once every bucket is full again, nothing is kept.
#[test]
fn a_limit_that_leaves_and_comes_back_resumes_its_buckets() {
    use tollgate::ManualClock;
    use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
    use tollgate_rls::service::Service;
    let other = "  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let full = format!("domain: r\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n{other}");
    let gone = format!("domain: r\ndescriptors:\n{other}");
    let zero = full.replace("requests_per_unit: 3", "requests_per_unit: 0");
    let open = full.replace("{unit: hour, requests_per_unit: 3}", "{unlimited: true}");
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    let local = LocalBackend::new(RlsClock::manual(clock.clone()), 1_000);
    let s = Service::new(load(&full), Backend::Local(local), false);
    let admitted = |n: usize| (0..n).filter(|_| one(&s, "user", "alice")).count();
    assert_eq!(admitted(10), 3);
    for away in [&gone, &zero, &open] {
        s.reload(load(away));
        s.reload(load(&full));
        assert_eq!(
            admitted(10),
            0,
            "a second burst after a reload through:\n{away}"
        );
    }
    // An hour on, alice's bucket is full again: the retired table goes at the next reload,
    // so the limit comes back as a new table (added, not kept), which answers as it would have.
    clock.advance(Duration::from_secs(3_600));
    s.reload(load(&gone));
    let Backend::Local(local) = s.backend() else {
        unreachable!()
    };
    let applied = local.apply(&load(&full));
    assert_eq!(
        applied.added, 1,
        "user comes back as a new table: {applied:?}"
    );
    s.reload(load(&full));
    assert_eq!(admitted(10), 3);
}

/// Retired tables hold at most `--max-keys` values in all: past it the oldest goes (its limit,
/// if it comes back, starts full).
#[test]
fn retired_tables_are_bounded_by_max_keys_oldest_first() {
    use tollgate::ManualClock;
    use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
    use tollgate_rls::service::Service;
    let limit =
        |k: &str| format!("  - key: {k}\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n");
    let filler = "  - key: f\n    value: v\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let cfg = |keys: &[&str]| {
        let mut y = format!("domain: r\ndescriptors:\n{filler}");
        for k in keys {
            y.push_str(&limit(k));
        }
        load(&y)
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    // Two values in all: `a` and `b` one each while both are configured, `b` two alone.
    let local = LocalBackend::new(RlsClock::manual(clock.clone()), 2);
    let s = Service::new(cfg(&["a", "b"]), Backend::Local(local), false);
    let hit = |k: &str| one(&s, k, "x");
    assert!(hit("a") && hit("b"));
    s.reload(cfg(&["b"])); // a retired (one value)
    s.reload(cfg(&[])); // b retired (two values): three in all, a goes
    s.reload(cfg(&["a", "b"]));
    assert!(hit("a"), "a's table was dropped: a new bucket");
    assert!(!hit("b"), "b resumes");
}

/// A saved file restored under a config where one limit has another number of rates: that
/// limit's rates are paired with the saved ones as a reload pairs them (the hourly rate keeps
/// its buckets, the daily one is new: full), the file's other tables are restored as saved.
#[test]
fn a_limit_whose_number_of_rates_changed_since_the_save_keeps_its_paired_rates() {
    use tollgate::ManualClock;
    use tollgate_rls::engine::{Backend, LocalBackend, Restored, RlsClock};
    use tollgate_rls::service::Service;
    let other = "  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
    let saved = format!("domain: r\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n{other}");
    let two_rates = format!(
        "domain: r\ndescriptors:\n  - key: user\n    rate_limits:\n      - {{unit: hour, requests_per_unit: 3}}\n      - {{unit: day, requests_per_unit: 10}}\n{other}"
    );
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    let service = |yaml: &str| {
        let local = LocalBackend::new(RlsClock::manual(clock.clone()), 1_000);
        Service::new(load(yaml), Backend::Local(local), false)
    };
    fn local(s: &Service) -> &LocalBackend {
        match s.backend() {
            Backend::Local(l) => l,
            _ => unreachable!(),
        }
    }
    let s = service(&saved);
    let admitted =
        |s: &Service, key: &str, n: usize| (0..n).filter(|_| one(s, key, "alice")).count();
    assert_eq!(admitted(&s, "user", 1), 1);
    assert_eq!(admitted(&s, "other", 2), 2);
    let mut file = Vec::new();
    local(&s).save(&mut file).unwrap();

    // The same config: both tables as saved.
    let same = service(&saved);
    assert_eq!(
        local(&same).restore(&file[..]),
        Restored::Ok {
            tables: 2,
            drained: 0,
            retired: 0
        }
    );
    assert_eq!(admitted(&same, "user", 10), 2);
    assert_eq!(admitted(&same, "other", 10), 3);

    // `user` gained a rate: alice keeps the 2 tokens of her hour, a value never seen starts
    // full; `other` keeps alice's 3 tokens.
    let changed = service(&two_rates);
    assert_eq!(
        local(&changed).restore(&file[..]),
        Restored::Ok {
            tables: 2,
            drained: 0,
            retired: 0
        }
    );
    assert_eq!(admitted(&changed, "other", 10), 3, "restored, not drained");
    assert_eq!(admitted(&changed, "user", 10), 2, "the hour's 2 left");
    assert_eq!(admitted(&changed, "user", 10), 0);
    assert!(one(&changed, "user", "bob"), "a new value: full");

    // A reload that changes the number of rates does the same to the live table.
    s.reload(load(&two_rates));
    assert_eq!(admitted(&s, "other", 10), 3, "kept");
    assert_eq!(admitted(&s, "user", 10), 2, "the hour's 2 left");
    assert!(one(&s, "user", "bob"), "a new value: full");
}

/// The local backend of `s`.
fn local_of(s: &tollgate_rls::service::Service) -> &tollgate_rls::engine::LocalBackend {
    match s.backend() {
        tollgate_rls::engine::Backend::Local(l) => l,
        _ => unreachable!(),
    }
}

/// A service on the local backend with `max_keys` values, on `clock`.
fn local_service(
    yaml: &str,
    clock: &tollgate::ManualClock,
    max_keys: usize,
) -> tollgate_rls::service::Service {
    use tollgate_rls::engine::{Backend, LocalBackend, RlsClock};
    let local = LocalBackend::new(RlsClock::manual(clock.clone()), max_keys);
    tollgate_rls::service::Service::new(load(yaml), Backend::Local(local), false)
}

const USER: &str = "  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";
const OTHER: &str = "  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";

fn manual() -> tollgate::ManualClock {
    let clock = tollgate::ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    clock
}

/// A service of `USER` and `OTHER` (1,000 values) where alice took `hits` of user's 3 an hour,
/// then a reload removed `user` (its table retired), and the file it saved then.
fn saved_after_removal(
    clock: &tollgate::ManualClock,
    hits: usize,
) -> (tollgate_rls::service::Service, Vec<u8>) {
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let s = local_service(&full, clock, 1_000);
    assert_eq!((0..hits).filter(|_| one(&s, "user", "alice")).count(), hits);
    s.reload(load(&gone));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    (s, file)
}

/// A limit retired by a reload, then saved and restored (the process restarted) under a
/// config still without it, resumes its buckets when a later reload brings it back, as it
/// would have in the running process: no second burst across the restart.
#[test]
fn a_retired_table_survives_a_restart_and_resumes_when_its_limit_comes_back() {
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let (_, file) = saved_after_removal(&clock, 3);

    let restarted = local_service(&gone, &clock, 1_000);
    assert!(matches!(
        local_of(&restarted).restore(&file[..]),
        tollgate_rls::engine::Restored::Ok { .. }
    ));
    restarted.reload(load(&full));
    let admitted = (0..10).filter(|_| one(&restarted, "user", "alice")).count();
    assert_eq!(admitted, 0, "a second burst across the restart");
    assert!(one(&restarted, "user", "bob"), "another value starts full");
}

/// A saved table whose limit the config at start does not have (edited during the downtime,
/// or read half written) is kept aside as a reload would retire it: a later reload that
/// brings the limit back resumes its buckets.
#[test]
fn a_saved_table_whose_limit_is_missing_at_start_resumes_when_it_comes_back() {
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let s = local_service(&full, &clock, 1_000);
    assert_eq!((0..10).filter(|_| one(&s, "user", "alice")).count(), 3);
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();

    let restarted = local_service(&gone, &clock, 1_000);
    assert!(matches!(
        local_of(&restarted).restore(&file[..]),
        tollgate_rls::engine::Restored::Ok { .. }
    ));
    assert!(
        one(&restarted, "other", "alice"),
        "not configured: no limit"
    );
    restarted.reload(load(&full));
    let admitted = (0..10).filter(|_| one(&restarted, "user", "alice")).count();
    assert_eq!(admitted, 0, "a second burst across the restart");
    // Rates changed while away: resumed and converted (6 an hour: a token every 10 min).
    let six = full.replace("requests_per_unit: 3", "requests_per_unit: 6");
    let again = local_service(&gone, &clock, 1_000);
    local_of(&again).restore(&file[..]);
    again.reload(load(&six));
    assert!(!one(&again, "user", "alice"), "converted, not full");
    clock.advance(Duration::from_secs(600));
    assert!(one(&again, "user", "alice"));
    assert!(!one(&again, "user", "alice"));
    // Another number of rates: the hourly rate paired with the saved one (alice's hour still
    // spent), the daily one new (bob admitted).
    let two = full.replace(
        "    rate_limit: {unit: hour, requests_per_unit: 3}\n  - key: other",
        "    rate_limits:\n      - {unit: hour, requests_per_unit: 3}\n      - {unit: day, requests_per_unit: 10}\n  - key: other",
    );
    assert_ne!(two, full);
    let paired = local_service(&gone, &clock, 1_000);
    local_of(&paired).restore(&file[..]);
    paired.reload(load(&two));
    assert!(!one(&paired, "user", "alice"), "the hour still spent");
    assert!(one(&paired, "user", "bob"), "a new value: full");
}

/// A retired table whose buckets are all full holds nothing a new table would not: not saved
/// when full at the save, dropped when full by the restore (refilled over the downtime).
#[test]
fn retired_tables_whose_buckets_are_all_full_are_not_kept_across_a_restart() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let restore = |file: &[u8]| local_of(&local_service(&gone, &clock, 1_000)).restore(file);
    let (s, file) = saved_after_removal(&clock, 1);
    let kept = Restored::Ok {
        tables: 1,
        drained: 0,
        retired: 1,
    };
    assert_eq!(restore(&file), kept);
    // 20 minutes on, alice's bucket is full again: the retired table is not saved.
    clock.advance(Duration::from_secs(1_200));
    let mut later = Vec::new();
    local_of(&s).save(&mut later).unwrap();
    assert!(later.len() < file.len(), "{} {}", later.len(), file.len());
    let none = Restored::Ok {
        tables: 1,
        drained: 0,
        retired: 0,
    };
    assert_eq!(restore(&later), none);
    // Not full at the save, full by the restore: dropped.
    let fast = "  - key: fast\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let s = local_service(&format!("{full}{fast}"), &clock, 1_000);
    assert!(one(&s, "fast", "alice"));
    s.reload(load(&gone));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    assert_eq!(restore(&file), kept, "restored at once: kept");
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(restore(&file), none, "a second later, full: dropped");
}

/// The retired tables a file restores hold at most `--max-keys` values in all, as `apply`
/// bounds them: the newest kept, the older ones dropped (their limits, if they come back,
/// start full).
#[test]
fn retired_tables_restored_are_bounded_by_max_keys_newest_kept() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let cfg = |keys: &[&str]| tiny_config(keys);
    let s = local_service(&cfg(&["a", "b"]), &clock, 1_000);
    assert!(one(&s, "a", "x") && one(&s, "b", "x"));
    s.reload(load(&cfg(&["b"]))); // a retired
    s.reload(load(&cfg(&[]))); // b retired, after a
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    // One value of retired tables: b alone is kept.
    let small = local_service(&cfg(&[]), &clock, 1);
    assert_eq!(
        local_of(&small).restore(&file[..]),
        Restored::Ok {
            tables: 1,
            drained: 0,
            retired: 1
        }
    );
    small.reload(load(&cfg(&["a", "b"])));
    assert!(one(&small, "a", "x"), "a's table was dropped: a new bucket");
    assert!(!one(&small, "b", "x"), "b resumes");
    // Room for both: both resume.
    let big = local_service(&cfg(&[]), &clock, 2);
    local_of(&big).restore(&file[..]);
    big.reload(load(&cfg(&["a", "b"])));
    assert!(!one(&big, "a", "x") && !one(&big, "b", "x"));
}

/// A table whose buckets are all full takes no room among the retired tables kept at a
/// restore, as a reload keeps them: with room for one value, a full current table saved after
/// a drained retired one (newer in the file) must not push the drained one out.
#[test]
fn a_full_table_takes_no_room_among_retired_tables_restored() {
    let clock = manual();
    let cfg = |keys: &[&str]| tiny_config(keys);
    let s = local_service(&cfg(&["a", "b"]), &clock, 1);
    assert!(one(&s, "a", "x"));
    s.reload(load(&cfg(&["b"]))); // a retired, drained; b current and full
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    let restarted = local_service(&cfg(&[]), &clock, 1);
    local_of(&restarted).restore(&file[..]);
    restarted.reload(load(&cfg(&["a"])));
    assert!(
        !one(&restarted, "a", "x"),
        "a second burst across the restart"
    );
}

/// A file of earlier builds (a record of an id and the table's bytes alone, tag 1) restores
/// as before; a record this build does not know makes the file damaged (every bucket drained),
/// as an earlier build reading this build's records does.
#[test]
fn a_file_of_id_and_table_records_still_restores_and_an_unknown_record_drains() {
    use tollgate::{KeyedMultiLimiter, Limits, Quota};
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let limits = Limits::new(vec![Quota::new(3, Duration::from_secs(3_600), 3).unwrap()]).unwrap();
    let table = KeyedMultiLimiter::<String, _>::with_clock(limits, 1_000, clock.clone());
    table.try_acquire(&"user\u{1f}alice".to_owned(), 3).unwrap();
    let mut blob = Vec::new();
    table.save(&mut blob).unwrap();
    const MAGIC: &[u8] = b"TGRLS\x01\r\n";
    let file_with = |tag: u8| {
        let id = b"r\x1fuser";
        let mut file = MAGIC.to_vec();
        file.push(tag);
        file.extend((id.len() as u32).to_le_bytes());
        file.extend(id);
        file.extend((blob.len() as u64).to_le_bytes());
        file.extend(&blob);
        file.push(0);
        file.extend(MAGIC);
        file
    };
    let s = local_service(&full, &clock, 1_000);
    assert_eq!(
        local_of(&s).restore(&file_with(1)[..]),
        Restored::Ok {
            tables: 1,
            drained: 0,
            retired: 0
        }
    );
    assert!(!one(&s, "user", "alice"), "restored drained");
    assert!(one(&s, "user", "bob"));
    assert!(one(&s, "other", "alice"), "not in the file: full");
    let s = local_service(&full, &clock, 1_000);
    assert!(matches!(
        local_of(&s).restore(&file_with(9)[..]),
        Restored::Damaged(_)
    ));
    assert!(!one(&s, "other", "alice"), "damaged: drained");
    // Such a record holds no rates to pair: under another number of rates, its table alone
    // starts drained.
    let two = full.replace(
        "    rate_limit: {unit: hour, requests_per_unit: 3}\n  - key: other",
        "    rate_limits:\n      - {unit: hour, requests_per_unit: 3}\n      - {unit: day, requests_per_unit: 10}\n  - key: other",
    );
    assert_ne!(two, full);
    let s = local_service(&two, &clock, 1_000);
    assert_eq!(
        local_of(&s).restore(&file_with(1)[..]),
        Restored::Ok {
            tables: 1,
            drained: 1,
            retired: 0
        }
    );
    assert!(!one(&s, "user", "bob"), "drained for every value");
    assert!(one(&s, "other", "alice"), "not in the file: full");
}

/// A hostile or damaged definition record: a table size past `--max-keys` is dropped before
/// any table is built (nothing allocated for it); a definition no build writes makes the file
/// damaged.
#[test]
fn a_saved_definition_is_checked_before_a_table_is_built() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let (_, file) = saved_after_removal(&clock, 1);
    // The retired table's record first: magic, tag, id, per-value, one rate, its size.
    let id = b"r\x1fuser";
    let at = 8 + 1 + 4;
    assert_eq!(&file[at..at + id.len()], id);
    let def = at + id.len();
    let size = def + 2 + (4 + 1 + 8 + 4);
    assert_eq!(
        file[size..size + 8],
        500u64.to_le_bytes(),
        "two limits share 1,000"
    );
    let restore = |f: &[u8]| local_of(&local_service(&gone, &clock, 1_000)).restore(f);
    let patched = |at: usize, bytes: &[u8]| {
        let mut f = file.clone();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    };
    assert_eq!(
        restore(&patched(size, &u64::MAX.to_le_bytes())),
        Restored::Ok {
            tables: 1,
            drained: 0,
            retired: 0
        }
    );
    for (what, f) in [
        ("size 0", patched(size, &0u64.to_le_bytes())),
        ("per-value 2", patched(def, &[2])),
        ("five rates", patched(def + 1, &[5])),
        ("0 per unit", patched(def + 2, &0u32.to_le_bytes())),
        ("unit 7", patched(def + 6, &[7])),
        (
            "a name past the file",
            patched(def + 15, &u32::MAX.to_le_bytes()),
        ),
    ] {
        assert!(matches!(restore(&f), Restored::Damaged(_)), "{what}");
    }
}

/// The cap on the number of retired tables (`LocalBackend::MAX_RETIRED_TABLES`).
const CAP: usize = tollgate_rls::engine::LocalBackend::MAX_RETIRED_TABLES;

/// Limits of one exact value each (key `k`, value `x`, 1 an hour) for each key: tables of one
/// value, the smallest a limit makes.
fn tiny_limits<K: std::fmt::Display>(keys: impl IntoIterator<Item = K>) -> String {
    keys.into_iter()
        .map(|k| {
            format!("  - key: {k}\n    value: x\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n")
        })
        .collect()
}

/// A config of `other` and `tiny_limits` of `keys`.
fn tiny_config<K: std::fmt::Display>(keys: impl IntoIterator<Item = K>) -> String {
    format!("domain: r\ndescriptors:\n{OTHER}{}", tiny_limits(keys))
}

/// The keys `k0` to `kN` for `range`.
fn numbered(range: std::ops::Range<usize>) -> impl Iterator<Item = String> {
    range.map(|i| format!("k{i}"))
}

/// Retired tables are bounded in number, not only in values: a table of one value costs a few
/// KB whatever its size, so thousands of them would hold far more memory than `--max-keys`
/// says. Past the cap, a reload drops the oldest (their limits, if they come back, start full).
#[test]
fn retired_tables_are_capped_in_number_oldest_dropped() {
    let clock = manual();
    let n = CAP + 64;
    let cfg = |limits: std::ops::Range<usize>| tiny_config(numbered(limits));
    // Room for every value: only the cap on tables binds.
    let s = local_service(&cfg(0..n), &clock, 100_000);
    assert!((0..n).all(|i| one(&s, &format!("k{i}"), "x")));
    s.reload(load(&cfg(64..n))); // the 64 oldest retired
    s.reload(load(&cfg(0..0))); // the others retired: one table too many per old one
    s.reload(load(&cfg(0..n)));
    let full: Vec<usize> = (0..n).filter(|&i| one(&s, &format!("k{i}"), "x")).collect();
    assert_eq!(
        full,
        (0..64).collect::<Vec<_>>(),
        "the oldest dropped, the rest resume"
    );
}

/// The retired tables a file restores are capped in number as a reload caps them, the newest
/// records of the file kept: a file of many tiny tables of limits not configured makes at most
/// the cap's number of tables.
#[test]
fn retired_tables_restored_are_capped_in_number_newest_kept() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let n = CAP + 64;
    let all = tiny_config(numbered(0..n));
    let none = format!("domain: r\ndescriptors:\n{OTHER}");
    let s = local_service(&all, &clock, 100_000);
    assert!((0..n).all(|i| one(&s, &format!("k{i}"), "x")));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    // The file's order of the tables (the later, the newer): the ids `r\x1fk{i}_x`, each
    // after its `u32` length.
    let mut order = Vec::new();
    for at in 4..file.len() {
        let Some(digits) = file[at..].strip_prefix(b"r\x1fk") else {
            continue;
        };
        let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
        let id_len = 3 + len + 2;
        if digits[len..].starts_with(b"_x") && file[at - 4..at] == (id_len as u32).to_le_bytes() {
            order.push(
                std::str::from_utf8(&digits[..len])
                    .unwrap()
                    .parse::<usize>()
                    .unwrap(),
            );
        }
    }
    assert_eq!(order.len(), n);

    let restarted = local_service(&none, &clock, 100_000);
    assert_eq!(
        local_of(&restarted).restore(&file[..]),
        Restored::Ok {
            tables: 1,
            drained: 0,
            retired: CAP
        }
    );
    restarted.reload(load(&all));
    let (older, newer) = order.split_at(n - CAP);
    assert!(
        older
            .iter()
            .all(|&i| one(&restarted, &format!("k{i}"), "x")),
        "the oldest records dropped: their limits start full"
    );
    assert!(
        newer
            .iter()
            .all(|&i| !one(&restarted, &format!("k{i}"), "x")),
        "the newest records kept: no second burst"
    );
}

/// A limit id or a rate name over 1 MiB (what a restore reads whole) is saved as any other:
/// the restore reads past it without holding it, restores a configured limit of such an id or
/// name, and does not take the file as damaged (which would drain every other table). A
/// retired table of such a limit is not kept.
#[test]
fn an_id_or_rate_name_over_1_mib_does_not_damage_the_file() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let long_key = "k".repeat((1 << 20) + 1);
    let long_name = "n".repeat((1 << 20) + 1);
    let long = format!(
        "  - key: {long_key}\n    rate_limit: {{unit: hour, requests_per_unit: 1}}\n  - key: named\n    rate_limit: {{unit: hour, requests_per_unit: 1, name: {long_name}}}\n"
    );
    let all = format!("domain: r\ndescriptors:\n{USER}{OTHER}{long}");
    let s = local_service(&all, &clock, 1_000);
    assert_eq!((0..3).filter(|_| one(&s, "user", "alice")).count(), 3);
    assert!(one(&s, &long_key, "alice") && one(&s, "named", "alice"));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();

    let restarted = local_service(&all, &clock, 1_000);
    assert_eq!(
        local_of(&restarted).restore(&file[..]),
        Restored::Ok {
            tables: 4,
            drained: 0,
            retired: 0
        }
    );
    assert!(one(&restarted, "other", "alice"), "not drained: restored");
    assert!(!one(&restarted, "user", "alice"), "restored drained");
    assert!(!one(&restarted, &long_key, "alice"), "a long id restored");
    assert!(
        !one(&restarted, "named", "alice"),
        "a long rate name restored"
    );
    assert!(one(&restarted, &long_key, "bob"));

    // Not configured: their tables are not kept; the rest of the file is restored.
    let short = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let restarted = local_service(&short, &clock, 1_000);
    assert_eq!(
        local_of(&restarted).restore(&file[..]),
        Restored::Ok {
            tables: 2,
            drained: 0,
            retired: 0
        }
    );
    assert!(one(&restarted, "other", "alice"), "not drained: restored");
    restarted.reload(load(&all));
    assert!(!one(&restarted, "user", "alice"), "restored drained");
    assert!(one(&restarted, "named", "alice"), "not kept: starts full");
}

/// The records of a saved file (tag 2 only), each whole, in the file's order.
fn records(file: &[u8]) -> Vec<&[u8]> {
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    let mut at = 8;
    while file[at] != 0 {
        assert_eq!(file[at], 2);
        let start = at;
        at += 1;
        at += 4 + u32_at(at); // the id
        let rates = file[at + 1] as usize;
        at += 2;
        for _ in 0..rates {
            at += 4 + 1 + 8;
            at += 4 + u32_at(at); // the name
        }
        at += 8; // the size
        at += 8 + u64_at(at); // the table
        out.push(&file[start..at]);
    }
    out
}

/// A file that repeats a limit's record makes one table of it, its last record's: a retired
/// table kept by an earlier record goes when a later one is full.
#[test]
fn a_file_repeating_a_retired_limit_keeps_its_last_record() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let (_, drained) = saved_after_removal(&clock, 3);
    let drained = records(&drained)[0]; // user's, retired
    let mut file = Vec::new();
    local_of(&local_service(&full, &clock, 1_000))
        .save(&mut file)
        .unwrap();
    let id = b"r\x1fuser";
    let untouched = *records(&file)
        .iter()
        .find(|r| r[5..5 + id.len()] == id[..])
        .unwrap(); // user's, full
    let file_of = |recs: &[&[u8]]| {
        let mut f = b"TGRLS\x01\r\n".to_vec();
        for r in recs {
            f.extend_from_slice(r);
        }
        f.push(0);
        f.extend_from_slice(b"TGRLS\x01\r\n");
        f
    };
    let retired = |n| Restored::Ok {
        tables: 0,
        drained: 0,
        retired: n,
    };
    let restarted = local_service(&gone, &clock, 1_000);
    let f = file_of(&[drained, drained, drained]);
    assert_eq!(
        local_of(&restarted).restore(&f[..]),
        retired(1),
        "one table"
    );
    restarted.reload(load(&full));
    assert!(!one(&restarted, "user", "alice"), "resumed drained");
    let restarted = local_service(&gone, &clock, 1_000);
    let f = file_of(&[untouched, drained]);
    assert_eq!(local_of(&restarted).restore(&f[..]), retired(1), "the last");
    let restarted = local_service(&gone, &clock, 1_000);
    let f = file_of(&[drained, untouched]);
    assert_eq!(
        local_of(&restarted).restore(&f[..]),
        retired(0),
        "the last, full"
    );
    restarted.reload(load(&full));
    assert!(one(&restarted, "user", "alice"), "starts full");
}

/// `record` (a saved record, tag 2) as earlier builds wrote it (tag 1): the id and the
/// table's bytes alone.
fn without_definition(record: &[u8]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap()) as usize;
    let id_end = 5 + u32_at(1);
    let mut at = id_end + 2;
    for _ in 0..record[id_end + 1] {
        at += 4 + 1 + 8;
        at += 4 + u32_at(at); // the name
    }
    at += 8; // the size
    let mut old = vec![1];
    old.extend_from_slice(&record[1..id_end]);
    old.extend_from_slice(&record[at..]);
    old
}

/// A record of earlier builds (without the definition a retired table needs) of a limit not
/// configured replaces the id's earlier record as any later record does: the retired table
/// an earlier record kept goes, and the limit starts full if it comes back.
#[test]
fn a_record_of_earlier_builds_replaces_an_earlier_retired_record() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let (_, file) = saved_after_removal(&clock, 3);
    let drained = records(&file)[0].to_vec(); // user's, retired
    let old = without_definition(&drained);
    let retired = |n| Restored::Ok {
        tables: 0,
        drained: 0,
        retired: n,
    };
    let restarted = local_service(&gone, &clock, 1_000);
    let f = file_of_records(&[old.clone(), drained.clone()]);
    assert_eq!(local_of(&restarted).restore(&f[..]), retired(1), "the last");
    restarted.reload(load(&full));
    assert!(!one(&restarted, "user", "alice"), "resumed drained");
    let restarted = local_service(&gone, &clock, 1_000);
    let f = file_of_records(&[drained, old]);
    assert_eq!(
        local_of(&restarted).restore(&f[..]),
        retired(0),
        "the last, without a definition"
    );
    restarted.reload(load(&full));
    assert!(one(&restarted, "user", "alice"), "starts full");
}

/// A config of one limit, `user`, with `rates` (each a `rate_limits` item, flow style).
fn user_rates(rates: &[&str]) -> String {
    let mut y = String::from("domain: r\ndescriptors:\n  - key: user\n    rate_limits:\n");
    for r in rates {
        y.push_str(&format!("      - {r}\n"));
    }
    y
}

/// How many of `n` hits of `user: value` are admitted.
fn admitted(s: &tollgate_rls::service::Service, value: &str, n: usize) -> usize {
    (0..n).filter(|_| one(s, "user", value)).count()
}

/// A reload that adds a rate to a limit keeps the buckets of the rates it kept: a value that
/// spent its day stays refused until the day refills, while a value never seen is admitted
/// (the new rate starts full, as in a new limit), not refused for a day.
#[test]
fn a_reload_adding_a_rate_keeps_the_other_rates_buckets() {
    let clock = manual();
    let daily = "{unit: day, requests_per_unit: 3, name: daily}";
    let s = local_service(&user_rates(&[daily]), &clock, 1_000);
    assert_eq!(admitted(&s, "alice", 10), 3);
    s.reload(load(&user_rates(&[
        daily,
        "{unit: minute, requests_per_unit: 2, name: burst}",
    ])));
    assert_eq!(admitted(&s, "alice", 10), 0, "the day stays spent");
    assert_eq!(
        admitted(&s, "bob", 10),
        2,
        "a new value: the minute's burst"
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(admitted(&s, "bob", 10), 1, "the day's third");
    assert_eq!(admitted(&s, "alice", 10), 0, "the day stays spent");
    // A day on, alice's day (and both of bob's rates) has refilled.
    clock.advance(Duration::from_secs(86_400));
    assert_eq!(admitted(&s, "alice", 10), 2);
}

/// A reload that removes a rate keeps the remaining rates' buckets: the rate removed stops
/// constraining, the one kept goes on from what each value spent.
#[test]
fn a_reload_removing_a_rate_keeps_the_remaining_rates_buckets() {
    let clock = manual();
    let daily = "{unit: day, requests_per_unit: 3, name: daily}";
    let burst = "{unit: minute, requests_per_unit: 2, name: burst}";
    let s = local_service(&user_rates(&[burst, daily]), &clock, 1_000);
    assert_eq!(admitted(&s, "alice", 10), 2, "the minute's burst");
    s.reload(load(&user_rates(&[daily])));
    assert_eq!(
        admitted(&s, "alice", 10),
        1,
        "the day's third, no minute left"
    );
    assert_eq!(admitted(&s, "bob", 10), 3);
}

/// Rates are paired by a name that names one rate on each side, then by unit in config
/// order: an unnamed rate and a renamed one keep their buckets where their unit tells them
/// apart; a name given twice pairs by unit; a name kept wins over the unit (its rate's
/// buckets converted to the new unit).
#[test]
fn rates_pair_by_name_then_by_unit() {
    let clock = manual();
    let minute = "{unit: minute, requests_per_unit: 2}";
    // (before, after): alice spends the day before; after, alice is refused and bob gets 2.
    let cases = [
        (
            vec!["{unit: day, requests_per_unit: 3}"],
            vec!["{unit: day, requests_per_unit: 3}", minute],
            "unnamed",
        ),
        (
            vec!["{unit: day, requests_per_unit: 3, name: a}"],
            vec![minute, "{unit: day, requests_per_unit: 3, name: b}"],
            "renamed",
        ),
        (
            vec![
                "{unit: day, requests_per_unit: 3, name: d}",
                "{unit: hour, requests_per_unit: 5, name: d}",
            ],
            vec![
                "{unit: hour, requests_per_unit: 5, name: d}",
                "{unit: day, requests_per_unit: 3, name: d}",
                minute,
            ],
            "a name twice",
        ),
    ];
    for (before, after, what) in cases {
        let s = local_service(&user_rates(&before), &clock, 1_000);
        assert_eq!(admitted(&s, "alice", 10), 3, "{what}");
        s.reload(load(&user_rates(&after)));
        assert_eq!(admitted(&s, "alice", 10), 0, "{what}: the day stays spent");
        assert_eq!(admitted(&s, "bob", 10), 2, "{what}: a new value");
        clock.advance(Duration::from_secs(3_600));
        assert_eq!(admitted(&s, "alice", 10), 0, "{what}: the day stays spent");
    }
    // The name `x` moves from a per-day rate to a per-minute one: alice's spent day becomes
    // a spent minute (a token in 30 s); the new per-day rate `y` starts full.
    let s = local_service(
        &user_rates(&["{unit: day, requests_per_unit: 3, name: x}"]),
        &clock,
        1_000,
    );
    assert_eq!(admitted(&s, "alice", 10), 3);
    s.reload(load(&user_rates(&[
        "{unit: minute, requests_per_unit: 2, name: x}",
        "{unit: day, requests_per_unit: 3, name: y}",
    ])));
    assert_eq!(
        admitted(&s, "alice", 10),
        0,
        "the minute, converted, is spent"
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(admitted(&s, "alice", 10), 1);
}

/// A saved record whose definition has another number of rates than its table's buckets (a
/// damaged file), restored under a config with another number again: the pairing by the
/// saved rates does not fit the buckets, so the file is damaged (every bucket drained), never
/// restored as if it fit.
#[test]
fn a_definition_unlike_its_table_makes_the_file_damaged() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let two = user_rates(&[
        "{unit: hour, requests_per_unit: 3}",
        "{unit: day, requests_per_unit: 10}",
    ]);
    let s = local_service(&format!("domain: r\ndescriptors:\n{USER}"), &clock, 1_000);
    assert!(one(&s, "user", "alice"));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    // Magic, tag, id, per-value, one rate (17 bytes, no name): a second rate inserted after it.
    let def = 8 + 1 + 4 + b"r\x1fuser".len();
    assert_eq!(file[def + 1], 1);
    let mut f = file.clone();
    f[def + 1] = 2;
    let mut day = 10u32.to_le_bytes().to_vec();
    day.push(3);
    day.extend(10u64.to_le_bytes());
    day.extend(0u32.to_le_bytes());
    let after_rate = def + 2 + 17;
    f.splice(after_rate..after_rate, day);
    let three = user_rates(&[
        "{unit: hour, requests_per_unit: 3}",
        "{unit: day, requests_per_unit: 10}",
        "{unit: minute, requests_per_unit: 2}",
    ]);
    for config in [&two, &three] {
        let r = local_service(config, &clock, 1_000);
        assert!(
            matches!(local_of(&r).restore(&f[..]), Restored::Damaged(_)),
            "{config}"
        );
        assert!(!one(&r, "user", "bob"), "damaged: drained");
    }
    // The file as saved pairs under either.
    for config in [&two, &three] {
        let r = local_service(config, &clock, 1_000);
        assert!(matches!(
            local_of(&r).restore(&file[..]),
            Restored::Ok { drained: 0, .. }
        ));
        assert!(one(&r, "user", "bob"), "{config}");
    }
}

/// Retired tables are reported apart from the tracked buckets (the `tollgate_rls_retired_*`
/// gauges): memory the service holds for limits the config no longer has, until a reload
/// finds their buckets full again.
#[test]
fn retired_tables_and_their_buckets_are_reported() {
    let clock = manual();
    let full = format!("domain: r\ndescriptors:\n{USER}{OTHER}");
    let gone = format!("domain: r\ndescriptors:\n{OTHER}");
    let s = local_service(&full, &clock, 1_000);
    assert!(one(&s, "user", "alice"));
    assert!(one(&s, "user", "bob"));
    assert!(one(&s, "other", "carol"));
    assert_eq!(local_of(&s).retired(), (0, 0));
    s.reload(load(&gone));
    assert_eq!(
        local_of(&s).retired(),
        (1, 2),
        "user's table, alice and bob"
    );
    assert_eq!(local_of(&s).tracked(), 1, "carol alone is tracked");
    // Refilled (3 an hour): the next reload drops the table.
    clock.advance(Duration::from_secs(3_600));
    s.reload(load(&gone));
    assert_eq!(local_of(&s).retired(), (0, 0));
}

/// A rate kept exactly (same numbers) keeps its own buckets when the number of rates changes,
/// whatever its place among other rates of its unit: a value it refused stays refused. Paired
/// by unit in config order alone, the kept per-minute 10 would take the removed per-minute
/// 100's bucket (90 left, capped at 10): a drained value admitted 10 more at once. A restart
/// pairs them alike.
#[test]
fn a_kept_rate_keeps_its_own_buckets_among_rates_of_its_unit() {
    let clock = manual();
    let wide = "{unit: minute, requests_per_unit: 100}";
    let narrow = "{unit: minute, requests_per_unit: 10}";
    for (before, after) in [
        (vec![wide, narrow], vec![narrow]),
        (
            vec![wide, narrow],
            vec!["{unit: hour, requests_per_unit: 50}", narrow],
        ),
        (
            vec!["{unit: minute, requests_per_unit: 100, name: a}", narrow],
            vec![narrow],
        ),
    ] {
        let s = local_service(&user_rates(&before), &clock, 1_000);
        assert_eq!(admitted(&s, "alice", 20), 10, "{before:?}");
        // A restart under `after` pairs the saved rates as the reload does.
        let mut file = Vec::new();
        local_of(&s).save(&mut file).unwrap();
        let restarted = local_service(&user_rates(&after), &clock, 1_000);
        local_of(&restarted).restore(&file[..]);
        assert_eq!(
            admitted(&restarted, "alice", 20),
            0,
            "{before:?} -> {after:?} across a restart: the kept rate stays spent"
        );
        s.reload(load(&user_rates(&after)));
        assert_eq!(
            admitted(&s, "alice", 20),
            0,
            "{before:?} -> {after:?}: the kept rate stays spent"
        );
        assert_eq!(admitted(&s, "bob", 20), 10, "{after:?}: a new value");
        clock.advance(Duration::from_secs(3_600));
    }
}

/// The file of `records`, each whole, between the header and the end record.
fn file_of_records(recs: &[Vec<u8>]) -> Vec<u8> {
    let mut f = b"TGRLS\x01\r\n".to_vec();
    for r in recs {
        f.extend_from_slice(r);
    }
    f.push(0);
    f.extend_from_slice(b"TGRLS\x01\r\n");
    f
}

/// What a restore of a file of `records` records may build at `max_keys`, in table slots
/// (`LocalBackend::restored_size`): what a file `save` writes may make.
fn restore_bound(max_keys: usize, records: usize) -> usize {
    4 * max_keys + 3 * records
}

/// A file repeating a configured per-value limit's record (each built at the limit's whole
/// share of `--max-keys`) is not one this service writes: past what a saved file may make it
/// is damaged, having built a bounded number of table slots, not records × `--max-keys`.
#[test]
fn a_file_repeating_a_configured_limit_builds_a_bounded_size_then_is_damaged() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let only_user = format!("domain: r\ndescriptors:\n{USER}");
    let s = local_service(&only_user, &clock, 1_000);
    assert!(one(&s, "user", "alice"));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    let user = records(&file)[0].to_vec(); // size 1,000, configured
    let n = 200;
    let f = file_of_records(&vec![user.clone(); n]);

    let restarted = local_service(&only_user, &clock, 1_000);
    let local = local_of(&restarted);
    assert!(
        matches!(local.restore(&f[..]), Restored::Damaged(_)),
        "more than a saved file may make"
    );
    assert!(local.restored_size() <= restore_bound(1_000, n));
    assert!(!one(&restarted, "user", "bob"), "drained");

    // The record once (a saved file) is restored.
    let restarted = local_service(&only_user, &clock, 1_000);
    let f = file_of_records(&[user]);
    assert_eq!(
        local_of(&restarted).restore(&f[..]),
        Restored::Ok {
            tables: 1,
            drained: 0,
            retired: 0
        }
    );
    assert_eq!(local_of(&restarted).restored_size(), 1_000);
}

/// A file naming many limits not configured, each of a saved size of `--max-keys`, builds a
/// bounded number of table slots: past what a saved file may make, records are read past
/// unbuilt (as the caps drop retired tables), and the file is restored within the caps.
#[test]
fn a_file_of_many_large_retired_tables_builds_a_bounded_size() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let only_user = format!("domain: r\ndescriptors:\n{USER}");
    let only_other = format!("domain: r\ndescriptors:\n{OTHER}");
    let s = local_service(&only_user, &clock, 1_000);
    assert!(one(&s, "user", "alice"));
    s.reload(load(&only_other)); // user's table (of 1,000) retired
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    let id = b"r\x1fuser";
    let user = records(&file)
        .into_iter()
        .find(|r| r[5..5 + id.len()] == id[..])
        .unwrap()
        .to_vec();
    // Limits `u000` to `u199`: ids of user's length, none configured.
    let n = 200;
    let recs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut r = user.clone();
            r[5 + 2..5 + id.len()].copy_from_slice(format!("u{i:03}").as_bytes());
            r
        })
        .collect();
    let f = file_of_records(&recs);

    let restarted = local_service(&only_other, &clock, 1_000);
    let local = local_of(&restarted);
    assert_eq!(
        local.restore(&f[..]),
        Restored::Ok {
            tables: 0,
            drained: 0,
            retired: 1
        },
        "within the caps: one table of 1,000 values"
    );
    assert!(local.restored_size() <= restore_bound(1_000, n));
}

/// A file saved under a larger `--max-keys` than now is never damaged by what a restore may
/// build: its configured limits' tables are built at their current size; retired tables past
/// the bound are dropped, as the caps drop them.
#[test]
fn a_file_saved_under_a_larger_max_keys_is_restored() {
    use tollgate_rls::engine::Restored;
    let clock = manual();
    let per_value = |range: std::ops::Range<usize>| -> String {
        range
            .map(|i| {
                format!("  - key: p{i}\n    rate_limit: {{unit: hour, requests_per_unit: 3}}\n")
            })
            .collect()
    };
    let all = format!("domain: r\ndescriptors:\n{}", per_value(0..10));
    let first = format!("domain: r\ndescriptors:\n{}", per_value(0..1));
    // Ten tables of 100 values at 1,000 `--max-keys`, nine retired, each with a value taken.
    let s = local_service(&all, &clock, 1_000);
    assert!((0..10).all(|i| one(&s, &format!("p{i}"), "alice")));
    s.reload(load(&first));
    let mut file = Vec::new();
    local_of(&s).save(&mut file).unwrap();
    assert_eq!(records(&file).len(), 10);

    // At 100 `--max-keys`: the nine retired tables (100 values each) exceed what a file saved
    // at 100 may make; p0's table (now of 100) is restored.
    let restarted = local_service(&first, &clock, 100);
    let local = local_of(&restarted);
    let restored = local.restore(&file[..]);
    assert!(
        matches!(restored, Restored::Ok { tables: 1, .. }),
        "{restored:?}"
    );
    assert!(local.restored_size() <= restore_bound(100, 10));
    let left = (0..10).filter(|_| one(&restarted, "p0", "alice")).count();
    assert_eq!(left, 2, "p0 resumed");
}

/// Decides one hit of `key: value` in domain `r` on `rt`: whether it is admitted.
fn one_on(
    rt: &tokio::runtime::Runtime,
    s: &tollgate_rls::service::Service,
    key: &str,
    value: &str,
) -> bool {
    use tollgate_rls::service::{Code, Descriptor, Request};
    let req = Request {
        domain: "r".into(),
        descriptors: vec![Descriptor {
            entries: vec![(key.into(), value.into())],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    rt.block_on(s.should_rate_limit(&req)).unwrap().overall == Code::Ok
}

/// A reload that builds 100,000 tables does not hold up decisions meanwhile: the tables are
/// built while decisions go on, and only the swap excludes them. The bound is generous for a
/// loaded machine (100 ms, or a quarter of the reload's own time if that is longer), while a
/// reload that held decisions out for its whole build would exceed it by far.
#[test]
fn a_reload_of_100k_limits_does_not_stall_decisions() {
    let clock = manual();
    let s = std::sync::Arc::new(local_service(&tiny_config(numbered(0..0)), &clock, 1_000));
    let big = load(&tiny_config(numbered(0..99_999)));
    let (reload, count, longest) =
        reload_under_decisions(&s, big, Duration::from_millis(100), |rt, s| {
            one_on(rt, s, "other", "alice");
        });
    eprintln!(
        "reload of 100,000 limits: {reload:?}; {count} decisions during it, the longest {longest:?}"
    );
    assert!(
        count >= 10,
        "only {count} decisions ran during a reload of {reload:?}"
    );
    let bound = (reload / 4).max(Duration::from_millis(100));
    assert!(
        longest < bound,
        "a decision waited {longest:?} during a reload of {reload:?} (bound {bound:?})"
    );
}

/// Decisions racing reloads never over-admit, whether the reload keeps a limit's table (the
/// same `Arc`, debits during the build land in it) or converts it (a second rate added and
/// removed, the hourly one paired by name: a save converted while decisions debit the old
/// table). The clock advances a token at a time while the reloads run, so that the buckets have
/// tokens to debit during each build; over the run, each value is admitted at most its burst
/// plus what refilled.
#[test]
fn decisions_racing_reloads_never_over_admit() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let clock = manual();
    let hourly = "{unit: hour, requests_per_unit: 100, name: hourly}";
    let daily = "{unit: day, requests_per_unit: 100000, name: daily}";
    let filler = tiny_limits(numbered(0..3_000));
    let kept =
        "  - key: kept\n    value: x\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";
    let x = format!("{}{kept}{filler}", user_rates(&[hourly]));
    let y = format!("{}{kept}{filler}", user_rates(&[hourly, daily]));
    let s = Arc::new(local_service(&x, &clock, 1_000));
    let stop = Arc::new(AtomicBool::new(false));
    let (user, kept_n) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let deciders: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop, user, kept_n) = (s.clone(), stop.clone(), user.clone(), kept_n.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if one_on(&rt, &s, "user", "alice") {
                        user.fetch_add(1, Ordering::Relaxed);
                    }
                    if one_on(&rt, &s, "kept", "x") {
                        kept_n.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // 36 s: one token of 100 an hour, added while the deciders and the reloads run.
    let ticker = std::thread::spawn({
        let (clock, stop) = (clock.clone(), stop.clone());
        move || {
            let mut ticks = 0;
            while !stop.load(Ordering::Relaxed) {
                clock.advance(Duration::from_secs(36));
                ticks += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            ticks
        }
    });
    let reloads = 16;
    let configs: Vec<_> = (0..reloads)
        .map(|i| load(if i % 2 == 0 { &y } else { &x }))
        .collect();
    for config in configs {
        s.reload(config);
    }
    stop.store(true, Ordering::Relaxed);
    for d in deciders {
        d.join().unwrap();
    }
    let bound = 100 + ticker.join().unwrap();
    let (user, kept_n) = (user.load(Ordering::Relaxed), kept_n.load(Ordering::Relaxed));
    eprintln!("admitted: user {user}, kept {kept_n}, of at most {bound} each");
    assert!(
        user <= bound,
        "user: {user} admitted, at most {bound} refilled"
    );
    assert!(
        kept_n <= bound,
        "kept: {kept_n} admitted, at most {bound} refilled"
    );
}

/// `n` limits of a bucket per value (`p0` to `pN`, 100 an hour), and as many more as `extra`.
fn per_value_config(n: usize, extra: usize) -> String {
    let mut y = String::from("domain: r\ndescriptors:\n");
    for i in 0..n + extra {
        y.push_str(&format!(
            "  - key: p{i}\n    rate_limit: {{unit: hour, requests_per_unit: 100}}\n"
        ));
    }
    y
}

/// Reloads `s` onto `config` while a thread calls `decide` over and over, from `warm` before
/// the reload until 100 ms after it: the reload's time, the decisions that overlapped it, and
/// the longest of them.
fn reload_under_decisions(
    s: &std::sync::Arc<tollgate_rls::service::Service>,
    config: tollgate_rls::config::Config,
    warm: Duration,
    mut decide: impl FnMut(&tokio::runtime::Runtime, &tollgate_rls::service::Service) + Send + 'static,
) -> (Duration, usize, Duration) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let stop = Arc::new(AtomicBool::new(false));
    // Each decision's start and end.
    let spans = Arc::new(Mutex::new(Vec::<(Instant, Instant)>::new()));
    let decider = std::thread::spawn({
        let (s, stop, spans) = (s.clone(), stop.clone(), spans.clone());
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                decide(&rt, &s);
                mine.push((t0, Instant::now()));
            }
            *spans.lock().unwrap() = mine;
        }
    });
    std::thread::sleep(warm);
    let began = Instant::now();
    s.reload(config);
    let ended = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    decider.join().unwrap();
    let spans = spans.lock().unwrap();
    let during: Vec<Duration> = spans
        .iter()
        .filter(|(a, b)| *b >= began && *a <= ended)
        .map(|(a, b)| *b - *a)
        .collect();
    let longest = during.iter().max().copied().unwrap_or_default();
    (ended - began, during.len(), longest)
}

/// The longest decision wait during a reload that converts every table of `N` limits of a
/// bucket per value (`RLS_SWAP_LIMITS`, 99,999 by default, the most a config holds with one
/// more; adding one such limit resizes every table), each holding values, under decisions that
/// debit the tables in turn, against a reload that keeps every table. A measurement, run by hand:
/// `cargo test -p tollgate-rls --test reload -- --ignored --nocapture reload_swap_worst_case`.
#[test]
#[ignore]
fn reload_swap_worst_case() {
    let n: usize = std::env::var("RLS_SWAP_LIMITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(99_999);
    let clock = manual();
    let s = std::sync::Arc::new(local_service(&per_value_config(n, 0), &clock, 10 * n));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for i in 0..n {
        for v in 0..2 {
            one_on(&rt, &s, &format!("p{i}"), &format!("v{v}"));
        }
    }
    // The decisions reach every table (`RLS_SWAP_SPREAD` of them, all by default).
    let spread: usize = std::env::var("RLS_SWAP_SPREAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n);
    // A pause between decisions (`RLS_SWAP_PAUSE_US` microseconds, none by default).
    let pause = Duration::from_micros(
        std::env::var("RLS_SWAP_PAUSE_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    // Hits of `p0` to `p{spread - 1}` in turn, each on one of 8 values.
    let decide = move || {
        let mut i = 0usize;
        move |rt: &tokio::runtime::Runtime, s: &tollgate_rls::service::Service| {
            one_on(rt, s, &format!("p{}", i % spread), &format!("v{}", i % 8));
            i = i.wrapping_add(7919);
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
    };
    let warm = Duration::from_millis(200);
    let grown = load(&per_value_config(n, 1));
    let (reload, count, longest) = reload_under_decisions(&s, grown, warm, decide());
    eprintln!("{n} limits, every table converted, decisions on {spread}: reload {reload:?}; {count} decisions during it, the longest {longest:?}");
    let same = load(&per_value_config(n, 1));
    let (reload, count, longest) = reload_under_decisions(&s, same, warm, decide());
    eprintln!("{n} limits, every table kept, decisions on {spread}: reload {reload:?}; {count} decisions during it, the longest {longest:?}");
}
