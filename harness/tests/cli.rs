//! The `tollgate-bench` binary, run as a user runs it.

use std::collections::BTreeSet;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate-bench");
const HEADER: &str = "strategy,threads,regime,keys,ops,seconds,ops_per_sec,ns_per_op,p50_ns,p99_ns,p999_ns,admitted,bound,fairness,rounds,ops_per_sec_min,ops_per_sec_max";

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("TOLLGATE_BENCH_TEST_STRATEGIES")
        .output()
        .expect("the binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The strategies the binary offers, from `tollgate-bench list`.
fn strategy_names() -> Vec<String> {
    let out = run(&["list"]);
    assert!(out.status.success());
    text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect()
}

#[test]
fn bad_options_are_rejected_clearly_without_panicking() {
    let cases: &[(&[&str], &str)] = &[
        (&["compare", "--threads", "0"], "out of range"),
        (&["compare", "--threads", "1,x"], "not a thread count"),
        (&["compare", "--threads", "99999"], "out of range"),
        (&["compare", "--duration", "10"], "no unit"),
        (&["compare", "--duration", "0s"], "out of range"),
        (&["compare", "--duration", "5parsecs"], "unknown unit"),
        (&["compare", "--duration", "2h"], "unknown unit"),
        (&["compare", "--rounds", "0"], "out of range"),
        (&["compare", "--rounds", "1001"], "out of range"),
        (&["compare", "--rounds", "x"], "not a number of rounds"),
        (
            &["compare", "--duration", "10us", "--rounds", "11"],
            "lengthen --duration or lower --rounds",
        ),
        (
            &["compare", "--strategies", "nope"],
            "unknown strategy `nope`",
        ),
        (
            &["compare", "--strategies", "broken-always-admit"],
            "unknown strategy",
        ),
        (&["compare", "--regime", "sometimes"], "invalid value"),
        (&["compare", "--keys", "0"], "invalid value"),
        (&["compare", "--cost", "0"], "invalid value"),
        (&["compare", "--rate", "0"], "invalid value"),
        (&["compare", "--burst", "0"], "invalid value"),
        (&["compare", "--burst", "-5"], "unexpected argument"),
        (&["compare", "--format", "xml"], "invalid value"),
        (&["compare", "--seed", "abc"], "invalid value"),
        (&["compare", "--frobnicate"], "unexpected argument"),
        (
            &["compare", "--regime", "deny", "--cost", "5000"],
            "exceeds the burst",
        ),
        (
            &["compare", "--rate", "18446744073709551615"],
            "does not fit",
        ),
        (&["compare", "--out", "/proc/version/x"], "--out"),
        // Per-key admission counts of 512 threads x 2^24 keys: 64 GiB, refused before
        // anything is allocated (it aborted the process on allocation).
        (
            &[
                "compare",
                "--strategies",
                "keyed",
                "--regime",
                "mixed",
                "--threads",
                "512",
                "--keys",
                "16777216",
            ],
            "--threads 512 with --keys 16777216: a keyed strategy's per-key admission counts",
        ),
        (
            &["compare", "--strategies", "cas", "--vs", "sharded"],
            "not among the strategies run",
        ),
        (&[], "Usage"),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    let mut cases = cases.to_vec();
    if cfg!(feature = "peers") {
        // A configuration a peer cannot express is refused before anything runs.
        cases.push((
            &[
                "compare",
                "--burst",
                "5000000000",
                "--strategies",
                "governor",
            ],
            "governor cannot hold a burst",
        ));
    }
    for (args, needle) in &cases {
        let out = run(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed results");
    }
}

#[test]
fn help_lists_every_option_and_list_every_strategy() {
    let out = run(&["compare", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for opt in [
        "--threads",
        "--duration",
        "--rounds",
        "--strategies",
        "--regime",
        "--keys",
        "--cost",
        "--rate",
        "--burst",
        "--format",
        "--out",
        "--seed",
        "--vs",
    ] {
        assert!(help.contains(opt), "{opt} missing from --help");
    }
    let names = strategy_names();
    for s in [
        "std-mutex",
        "parking-lot-mutex",
        "spin",
        "cas",
        "cas-backoff",
        "cas-coarse",
    ] {
        assert!(
            names.iter().any(|n| n == s),
            "{s} missing from list: {names:?}"
        );
    }
    #[cfg(feature = "peers")]
    {
        let list = text(&run(&["list"]).stdout);
        assert!(
            list.contains("governor ") && list.contains("peer"),
            "{list}"
        );
        assert!(names.iter().any(|n| n == "governor-keyed"));
    }
}

/// One parsed CSV line.
struct Row {
    strategy: String,
    threads: usize,
    regime: String,
    keys: u64,
    ops: u64,
    ops_per_sec: f64,
    admitted: u64,
    bound: u64,
    fairness: f64,
    rounds: u64,
    ops_per_sec_min: f64,
    ops_per_sec_max: f64,
}

fn parse_csv(csv: &str) -> Vec<Row> {
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(HEADER));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 17, "{l}");
            for (i, v) in f.iter().enumerate().skip(4) {
                assert!(
                    v.parse::<f64>().is_ok(),
                    "column {i} of {l} is not a number"
                );
            }
            Row {
                strategy: f[0].to_owned(),
                threads: f[1].parse().unwrap(),
                regime: f[2].to_owned(),
                keys: f[3].parse().unwrap(),
                ops: f[4].parse().unwrap(),
                ops_per_sec: f[6].parse().unwrap(),
                admitted: f[11].parse().unwrap(),
                bound: f[12].parse().unwrap(),
                fairness: f[13].parse().unwrap(),
                rounds: f[14].parse().unwrap(),
                ops_per_sec_min: f[15].parse().unwrap(),
                ops_per_sec_max: f[16].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
fn a_short_run_of_every_strategy_prints_one_csv_line_per_cell_within_bounds() {
    let out = run(&[
        "compare",
        "--duration",
        "50ms",
        "--threads",
        "1,2",
        "--format",
        "csv",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let rows = parse_csv(&stdout);
    let names = strategy_names();
    let mut expected = BTreeSet::new();
    for s in &names {
        for t in [1, 2] {
            for r in ["allow", "deny", "mixed"] {
                expected.insert((s.clone(), t, r.to_owned()));
            }
        }
    }
    let got: BTreeSet<_> = rows
        .iter()
        .map(|r| (r.strategy.clone(), r.threads, r.regime.clone()))
        .collect();
    assert_eq!(rows.len(), expected.len(), "one line per cell");
    assert_eq!(got, expected);
    for r in &rows {
        assert!(r.ops > 0, "{} did nothing", r.strategy);
        assert!(
            r.admitted <= r.bound,
            "{} admitted {} > {}",
            r.strategy,
            r.admitted,
            r.bound
        );
        assert!((0.0..=1.0).contains(&r.fairness));
        assert_eq!(r.rounds, 5, "the default rounds");
        assert!(
            r.ops_per_sec_min <= r.ops_per_sec && r.ops_per_sec <= r.ops_per_sec_max,
            "{}: median {} outside {}..{}",
            r.strategy,
            r.ops_per_sec,
            r.ops_per_sec_min,
            r.ops_per_sec_max
        );
        let keyed = r.strategy.contains("keyed");
        assert_eq!(r.keys, if keyed { 1000 } else { 1 }, "{}", r.strategy);
        match r.regime.as_str() {
            // Allow: everything admitted (the bound is far away).
            "allow" => assert_eq!(r.admitted, r.ops, "{}", r.strategy),
            // Deny: every round's drain took every key's burst; 1 token/s refills next to
            // nothing, so (with at least 64 operations per thread) most operations are refused.
            "deny" => {
                let drained = r.rounds * r.keys * 1000;
                assert!(r.admitted >= drained, "{}", r.strategy);
                assert!(r.admitted - drained < r.ops / 2, "{}", r.strategy);
            }
            _ => {}
        }
    }
}

#[test]
fn a_strategy_over_its_bound_fails_the_run() {
    let out = Command::new(BIN)
        .args([
            "compare",
            "--strategies",
            "cas,broken-always-admit",
            "--duration",
            "20ms",
            "--threads",
            "1",
            "--regime",
            "deny",
            "--format",
            "csv",
            // 1 token/s, burst 10: the >= 64 operations every thread runs exceed the bound of
            // 10 + ceil(elapsed in s) however loaded the machine is.
            "--rate",
            "1",
            "--burst",
            "10",
        ])
        .env("TOLLGATE_BENCH_TEST_STRATEGIES", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("CORRECTNESS: broken-always-admit admitted"),
        "{stderr}"
    );
    assert!(!stderr.contains("CORRECTNESS: cas "), "{stderr}");
    // The results still come out, so the reader sees what happened.
    let rows = parse_csv(&stdout);
    assert_eq!(rows.len(), 2);
    let broken = rows
        .iter()
        .find(|r| r.strategy == "broken-always-admit")
        .unwrap();
    assert!(broken.admitted > broken.bound);
}

/// One key over its own bound fails the run with an error line naming the key, even though
/// the sum over the keys (the CSV's `admitted` and `bound`) stays within the sum of their
/// bounds; the CSV header is unchanged.
#[test]
fn a_keyed_strategy_over_one_keys_bound_fails_the_run_naming_the_key() {
    let out = Command::new(BIN)
        .args([
            "compare",
            "--strategies",
            "keyed,broken-keyed-hot-key",
            "--duration",
            "20ms",
            "--threads",
            "1",
            "--regime",
            "mixed",
            "--rounds",
            "1",
            "--format",
            "csv",
            // 16 keys at 1 token/s, burst 1: a bound of 2 per key, 32 in all; key 0 of the
            // broken strategy has a burst of 10 (see tests/strategies.rs for why key 0 is drawn
            // often enough however slow the machine).
            "--keys",
            "16",
            "--rate",
            "1",
            "--burst",
            "1",
        ])
        .env("TOLLGATE_BENCH_TEST_STRATEGIES", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: CORRECTNESS: "))
        .unwrap_or_else(|| panic!("no CORRECTNESS line: {stderr}"));
    assert!(
        line.starts_with("error: CORRECTNESS: broken-keyed-hot-key admitted ")
            && line.contains(" tokens on key 0, more than its bound ")
            && line.ends_with("at 1 thread(s), regime mixed, round 1 of 1"),
        "{line}"
    );
    assert!(!stderr.contains("CORRECTNESS: keyed "), "{stderr}");
    let rows = parse_csv(&stdout);
    let broken = rows
        .iter()
        .find(|r| r.strategy == "broken-keyed-hot-key")
        .unwrap();
    assert!(broken.admitted <= broken.bound, "the sum hides it");
}

/// Output that cannot be written never panics: stderr on a full device is ignored (the
/// results still go to stdout, status 0), stdout on a full device or a closed pipe is status 1
/// with an `error:` line on stderr.
#[cfg(target_os = "linux")]
#[test]
fn unwritable_stdout_or_stderr_is_an_exit_status_not_a_panic() {
    use std::process::Stdio;
    let args = [
        "compare",
        "--strategies",
        "cas",
        "--threads",
        "1",
        "--duration",
        "10ms",
        "--rounds",
        "1",
        "--format",
        "csv",
    ];
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let cmd = || {
        let mut c = Command::new(BIN);
        c.env_remove("TOLLGATE_BENCH_TEST_STRATEGIES");
        c
    };

    let out = cmd().args(args).stderr(full()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr on /dev/full");
    assert_eq!(parse_csv(&text(&out.stdout)).len(), 3);

    let out = cmd().args(args).stdout(full()).output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stdout on /dev/full: {err}");
    assert!(
        err.contains("error: cannot write the results to stdout"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = cmd().args(["list"]).stdout(full()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

    // A violation reported on an unwritable stderr is still status 1.
    let out = Command::new(BIN)
        .args([
            "compare",
            "--strategies",
            "broken-always-admit",
            "--threads",
            "1",
        ])
        .args(["--duration", "10ms", "--rounds", "1", "--regime", "deny"])
        .env("TOLLGATE_BENCH_TEST_STRATEGIES", "1")
        .stderr(full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));

    // `| head -1` that exits before the results come: the pipe is closed (EPIPE).
    let mut child = cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "closed stdout: {err}");
    assert!(
        err.contains("Broken pipe") && !err.contains("panicked"),
        "{err}"
    );
}

/// The case that aborted the process on allocation, under a 4 GB address-space limit: now a
/// clear error before anything is allocated.
#[cfg(target_os = "linux")]
#[test]
fn too_many_threads_times_keys_is_an_error_under_an_address_space_limit() {
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 4000000 && exec \"$0\" \"$@\""])
        .arg(BIN)
        .args(["compare", "--threads", "512", "--keys", "16777216"])
        .args(["--regime", "mixed", "--duration", "10ms", "--rounds", "1"])
        .env_remove("TOLLGATE_BENCH_TEST_STRATEGIES")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("64.0 GiB, over the 4.0 GiB cap; lower --threads or --keys"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn out_dir_gets_csv_json_and_one_chart_per_regime() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-out");
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(&[
        "compare",
        "--strategies",
        "std-mutex,cas",
        "--duration",
        "10ms",
        "--threads",
        "1,2",
        "--regime",
        "allow",
        "--regime",
        "mixed",
        "--format",
        "json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2 * 2);
    assert_eq!(cells[0]["strategy"], "std-mutex");
    assert_eq!(cells[0]["vs_std_mutex"], 1.0);
    assert_eq!(json["rounds"], 5);
    let rounds = cells[1]["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 5);
    // Two strategies: cas runs second, first, second, ... (rotated per round).
    let positions: Vec<u64> = rounds
        .iter()
        .map(|r| r["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, [1, 0, 1, 0, 1]);
    let csv = std::fs::read_to_string(dir.join("compare.csv")).unwrap();
    assert_eq!(parse_csv(&csv).len(), 8);
    let file_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("compare.json")).unwrap()).unwrap();
    assert_eq!(file_json["cells"].as_array().unwrap().len(), 8);
    for regime in ["allow", "mixed"] {
        let svg = std::fs::read_to_string(dir.join(format!("compare-{regime}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("std-mutex") && svg.contains("cas"));
    }
    assert!(!dir.join("compare-deny.svg").exists());
}

/// The sharded bucket's cells carry what scales with cores, counted by the bucket; others
/// carry `null`. Every cell has its admissions per thread.
#[test]
fn json_cells_carry_the_sharded_bucket_counters_and_admissions_per_thread() {
    let out = run(&[
        "compare",
        "--strategies",
        "cas,sharded",
        "--duration",
        "20ms",
        "--threads",
        "2",
        "--regime",
        "mixed",
        "--rounds",
        "2",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let cells = json["cells"].as_array().unwrap();
    let cell = |name: &str| cells.iter().find(|c| c["strategy"] == name).unwrap();
    let (cas, sharded) = (cell("cas"), cell("sharded"));
    assert!(cas["central_cas_per_admission"].is_null());
    assert!(cas["shared_writes_per_refusal"].is_null());
    let per_admission = sharded["central_cas_per_admission"].as_f64().unwrap();
    let per_refusal = sharded["shared_writes_per_refusal"].as_f64().unwrap();
    assert!((0.0..=2.0).contains(&per_admission), "{per_admission}");
    assert!(per_refusal >= 0.0, "{per_refusal}");
    for c in [cas, sharded] {
        let (min, max) = (
            c["admitted_per_thread_min"].as_u64().unwrap(),
            c["admitted_per_thread_max"].as_u64().unwrap(),
        );
        assert!(min <= max && max > 0, "{c}");
    }
}

#[test]
fn table_has_one_row_per_cell_and_the_ratio_to_std_mutex() {
    let out = run(&[
        "compare",
        "--strategies",
        "cas,std-mutex",
        "--duration",
        "10ms",
        "--threads",
        "1,3",
        "--regime",
        "deny",
        "--keys",
        "7",
        "--cost",
        "2",
        "--rate",
        "500",
        "--burst",
        "10",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let rows: Vec<&str> = table.lines().filter(|l| l.contains(" deny ")).collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(rows
        .iter()
        .filter(|r| r.starts_with("std-mutex"))
        .all(|r| r.ends_with("1.00x")));
    assert!(table.starts_with("strategy") && table.contains("vs std-mutex"));
    // The machine it ran on, with the table.
    assert!(table.lines().any(|l| l.starts_with("machine: ")), "{table}");
}

#[test]
fn vs_adds_a_column_against_the_named_strategy() {
    let out = run(&[
        "compare",
        "--strategies",
        "cas,sharded",
        "--vs",
        "cas",
        "--duration",
        "20ms",
        "--threads",
        "1,2",
        "--regime",
        "allow,deny",
        "--rounds",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.lines().next().unwrap().ends_with("vs cas"), "{table}");
    // The table's rows, before its notes (the sharded bucket's counters follow them).
    let rows: Vec<&str> = table
        .lines()
        .take_while(|l| !l.starts_with("Mops/s, ns/op"))
        .filter(|l| l.contains(" allow ") || l.contains(" deny "))
        .collect();
    assert_eq!(rows.len(), 8, "{table}");
    assert!(
        table.contains("central CAS / admission  shared-line writes / refusal"),
        "{table}"
    );
    // Against itself: 1.00x, every round at least as fast, the same p99.
    for r in rows.iter().filter(|r| r.starts_with("cas ")) {
        assert!(r.ends_with("1.00x 4/4 p99 1.0x"), "{r}");
    }
    for r in rows.iter().filter(|r| r.starts_with("sharded ")) {
        let col = r.rsplit("  ").next().unwrap();
        assert!(col.contains("/4 p99 ") && col.ends_with('x'), "{r}");
    }
    assert!(
        table.contains("vs cas = the same ratio against cas"),
        "{table}"
    );
}
