//! The `tollgate-bench` command line.
//!
//! ```text
//! tollgate-bench compare [--threads 1,2,4] [--duration 500ms] [--rounds N] [--strategies a,b]
//!                        [--regime allow|deny|mixed]... [--keys N] [--cost N]
//!                        [--rate N] [--burst N] [--format table|csv|json] [--out DIR] [--seed N]
//!                        [--redis URL]
//! tollgate-bench list
//! ```
//!
//! Exit status: 0 when every cell stayed within its bound; 1 when a strategy admitted more
//! than its bound (the results are printed first, then one `error:` line per violation), a
//! cell failed, or the results could not be written (an output file, or stdout: a full disk,
//! a closed pipe); 2 for bad options (the plan too, e.g. `--threads` × `--keys` past the
//! per-key recording cap). Nothing panics when stdout or stderr cannot be written: progress
//! and diagnostics that cannot reach stderr are dropped.

use crate::compare::{check, compare};
use crate::strategies;
use crate::{Plan, Regime, Strategy};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Writes one line to stderr and ignores a failure: progress and diagnostics must never end the
/// run (`eprintln!` panics when stderr cannot be written, e.g. under `2>/dev/full`).
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Writes `body` to stdout and flushes it. A failure (a full disk, a closed pipe as in
/// `| head -1`) is reported on stderr and makes the exit status 1: the results did not all
/// reach their reader.
fn write_stdout(body: &str) -> Result<(), ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(body.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) => {
            note!("error: cannot write the results to stdout: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// Set to `1` to offer the deliberately broken strategies `broken-always-admit` and
/// `broken-keyed-hot-key` (tests only).
pub const TEST_STRATEGIES_ENV: &str = "TOLLGATE_BENCH_TEST_STRATEGIES";

#[derive(Parser, Debug)]
#[command(
    name = "tollgate-bench",
    version,
    about = "Compare lock strategies around tollgate's exact rate-limit decision (and peers)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run every strategy × thread count × regime and print throughput, latency, fairness and
    /// the admitted-vs-bound check. Exits 1 if any strategy admits more than its bound.
    Compare(Box<CompareArgs>),
    /// List the strategies this binary knows.
    List,
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Thread counts, comma-separated [default: 1, 2 and 2 x available cores]
    #[arg(long, value_delimiter = ',', value_parser = parse_threads, value_name = "N,N,...")]
    threads: Vec<usize>,
    /// Time per cell, all rounds together: a number and a unit (ns, us, ms, s), e.g. 500ms
    /// [default: 1 s, shortened so all cells together measure for at most 100 s]
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    duration: Option<Duration>,
    /// Rounds per cell: each round runs every strategy of one threads x regime for
    /// duration / rounds on a fresh limiter, in an order rotated by one per round; each cell
    /// reports its median round (every round is checked against its own bound)
    #[arg(long, default_value_t = Plan::DEFAULT_ROUNDS, value_parser = parse_rounds, value_name = "N")]
    rounds: usize,
    /// Strategies, comma-separated (see `tollgate-bench list`) [default: all]
    #[arg(long, value_delimiter = ',', value_name = "NAME,NAME,...")]
    strategies: Vec<String>,
    /// Regimes: repeat the option or separate with commas [default: allow,deny,mixed]
    #[arg(long, value_enum, value_delimiter = ',')]
    regime: Vec<Regime>,
    /// Distinct keys keyed strategies draw from, uniformly per operation
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    keys: u64,
    /// Tokens per operation
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    cost: u64,
    /// Tokens per second, replacing every selected regime's default
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    rate: Option<u64>,
    /// Capacity in tokens, replacing every selected regime's default
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    burst: Option<u64>,
    /// Output on stdout
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write compare.csv, compare.json and compare-<regime>.svg into this directory
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Seed of the per-thread key generators
    #[arg(long, default_value_t = 0x5EED)]
    seed: u64,
    /// Also compare every cell with this strategy (one of those run): the median per-round
    /// throughput ratio, the rounds at least as fast, and the p99 ratio, e.g. `--vs cas`
    #[arg(long, value_name = "NAME")]
    vs: Option<String>,
    /// A Redis server (`redis://host:port`): adds the strategies `redis`, `redis-lease` and
    /// `redis-lua-baseline` (a fresh key prefix per round of a cell)
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Csv,
    Json,
}

/// A whole number from 1 to `max`; the errors name `what` (e.g. "thread count").
fn parse_count(s: &str, what: &str, max: usize) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a {what} (a whole number, 1 to {max})"))?;
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{what} {n} is out of range (1 to {max})"))
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    parse_count(s, "thread count", 4096)
}

fn parse_rounds(s: &str) -> Result<usize, String> {
    parse_count(s, "number of rounds", 1000)
}

/// Parses `500ms`, `1s`, `2.5s`, `250us`, `100ns` (also `µs`). Between 1 µs and 1 hour.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!("`{s}` has no unit: write e.g. 500ms or 1s (units: ns, us, ms, s)")
        })?;
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: write e.g. 500ms or 1s"))?;
    let ns_per = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{s}`: use ns, us, ms or s"
            ))
        }
    };
    let ns = value * ns_per;
    if !ns.is_finite() || !(1e3..=3.6e12).contains(&ns) {
        return Err(format!("duration `{s}` is out of range (1us to 1h)"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// The registry this binary offers: the built-ins, `extra`, and (only with
/// `TOLLGATE_BENCH_TEST_STRATEGIES=1`) the broken test strategies.
fn registry(extra: Vec<Strategy>) -> Vec<Strategy> {
    let mut all = strategies::builtins();
    all.extend(extra);
    if std::env::var(TEST_STRATEGIES_ENV).is_ok_and(|v| v == "1") {
        all.push(strategies::always_admit());
        all.push(strategies::keyed_hot_key());
    }
    all
}

fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    let mut cmd = Cli::command();
    cmd.build();
    let err = match cmd.find_subcommand_mut("compare") {
        Some(sub) => sub.error(clap::error::ErrorKind::InvalidValue, msg),
        None => cmd.error(clap::error::ErrorKind::InvalidValue, msg),
    };
    let _ = err.print();
    ExitCode::from(2)
}

/// The CLI's `main`: parses `std::env::args`, runs, and returns the exit status. `extra`
/// strategies are offered next to the built-ins (and run by default), so your own binary can
/// compare your limiter with one line: `fn main() -> ExitCode { cli::main_with(vec![mine]) }`.
///
/// ```no_run
/// use std::process::ExitCode;
/// fn main() -> ExitCode {
///     tollgate_bench::cli::main_with(Vec::new())
/// }
/// ```
pub fn main_with(extra: Vec<Strategy>) -> ExitCode {
    main_from(std::env::args_os(), extra)
}

/// [`main_with`] on explicit arguments (the first is the program name).
///
/// ```
/// use std::process::ExitCode;
/// let code = tollgate_bench::cli::main_from(["tollgate-bench", "compare", "--threads", "0"], Vec::new());
/// assert_eq!(code, ExitCode::from(2));
/// ```
pub fn main_from<I, T>(args: I, extra: Vec<Strategy>) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` go to stdout: failing to print them is a failure.
            let printed = e.print().is_ok();
            return ExitCode::from(match (e.use_stderr(), printed) {
                (true, _) => 2,
                (false, true) => 0,
                (false, false) => 1,
            });
        }
    };
    let registry = registry(extra);
    match cli.command {
        Command::List => {
            let width = registry.iter().map(|s| s.name().len()).max().unwrap_or(0);
            let mut out = String::new();
            for s in &registry {
                let kind = match s.kind() {
                    crate::Kind::Tollgate => "tollgate",
                    crate::Kind::Peer => "peer",
                    crate::Kind::Custom => "custom",
                };
                out.push_str(&format!(
                    "{:width$}  {kind:8}  {}\n",
                    s.name(),
                    s.description()
                ));
            }
            match write_stdout(&out) {
                Ok(()) => ExitCode::SUCCESS,
                Err(code) => code,
            }
        }
        Command::Compare(args) => run_compare(*args, registry),
    }
}

fn run_compare(args: CompareArgs, mut registry: Vec<Strategy>) -> ExitCode {
    if let Some(url) = &args.redis {
        registry.extend(strategies::redis::strategies(url));
    }
    // Strategies: in registry order, unknown names rejected with the list of known ones.
    let selected: Vec<Strategy> = if args.strategies.is_empty() {
        registry
    } else {
        let mut wanted: Vec<String> = Vec::new();
        for name in &args.strategies {
            let name = name.trim().to_owned();
            if !registry.iter().any(|s| s.name() == name) {
                let known: Vec<&str> = registry.iter().map(|s| s.name()).collect();
                return usage_error(format!(
                    "unknown strategy `{name}`; known strategies: {}",
                    known.join(", ")
                ));
            }
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
        registry.retain(|s| wanted.iter().any(|w| w == s.name()));
        registry
    };

    if let Some(vs) = &args.vs {
        if !selected.iter().any(|s| s.name() == vs.trim()) {
            let run: Vec<&str> = selected.iter().map(|s| s.name()).collect();
            return usage_error(format!(
                "--vs {vs}: not among the strategies run ({})",
                run.join(", ")
            ));
        }
    }
    let mut threads = args.threads.clone();
    if threads.is_empty() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        threads = vec![1, 2, 2 * cores];
    }
    threads.sort_unstable();
    threads.dedup();
    let mut regimes = args.regime.clone();
    if regimes.is_empty() {
        regimes = Regime::ALL.to_vec();
    }
    regimes.sort_unstable();
    regimes.dedup();

    let cells = selected.len() * threads.len() * regimes.len();
    let duration = args
        .duration
        .unwrap_or_else(|| Plan::default_duration(cells));
    let plan = Plan {
        threads,
        regimes,
        keys: args.keys,
        cost: args.cost,
        rate: args.rate,
        burst: args.burst,
        duration,
        rounds: args.rounds,
        seed: args.seed,
    };
    if let Err(e) = check(&selected, &plan) {
        return usage_error(e);
    }
    if let Some(dir) = &args.out {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return usage_error(format!("--out {}: {e}", dir.display()));
        }
    }

    let bar = indicatif::ProgressBar::with_draw_target(
        Some((cells * plan.rounds) as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} runs  eta {eta}  {msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    let started = Instant::now();
    let result = compare(&selected, &plan, |done, _, label| {
        bar.set_position(done as u64);
        bar.set_message(label.to_owned());
    });
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            note!("error: {e}");
            return ExitCode::from(1);
        }
    };
    note!(
        "tollgate-bench: {} cells ({} strategies x {} thread counts x {} regimes) at {:?} each in {} interleaved rounds of {:?}, {:.1} s in all",
        cells,
        selected.len(),
        plan.threads.len(),
        plan.regimes.len(),
        duration,
        plan.rounds,
        plan.round_duration(),
        started.elapsed().as_secs_f64()
    );

    let body = match args.format {
        Format::Table => format!(
            "{}{}\n",
            report.to_table_vs(args.vs.as_deref().map(str::trim)),
            crate::machine::describe()
        ),
        Format::Csv => report.to_csv(),
        Format::Json => report.to_json() + "\n",
    };
    let mut status = match write_stdout(&body) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    };
    if let Some(dir) = &args.out {
        match report.write_dir(dir) {
            Ok(paths) => {
                for p in paths {
                    note!("wrote {}", p.display());
                }
            }
            Err(e) => {
                note!("error: {e}");
                status = ExitCode::from(1);
            }
        }
    }
    let violations = report.violation_messages();
    if !violations.is_empty() {
        for v in &violations {
            note!("error: CORRECTNESS: {v}");
        }
        note!(
            "error: {} cell(s) admitted more than an exact limiter may; see above",
            violations.len()
        );
        status = ExitCode::from(1);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("5000ns"), Ok(Duration::from_micros(5)));
        for bad in [
            "",
            "5",
            "ms",
            "1.2.3s",
            "10 parsecs",
            "0s",
            "2h",
            "1e3s",
            "-1s",
            "99999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn threads() {
        assert_eq!(parse_threads("4"), Ok(4));
        for bad in ["0", "-1", "x", "5000", ""] {
            assert!(parse_threads(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rounds() {
        assert_eq!(parse_rounds("1"), Ok(1));
        assert_eq!(parse_rounds("1000"), Ok(1000));
        for bad in ["0", "-1", "x", "1001", "", "18446744073709551616"] {
            assert!(parse_rounds(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
