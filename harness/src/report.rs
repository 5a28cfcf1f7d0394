//! The outputs of a comparison: the table, the CSV, the JSON and the SVG charts.

use crate::strategies::BASELINE;
use crate::{CellResult, Error, Kind, Regime};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The exact CSV header `--format csv` prints.
pub const CSV_HEADER: &str = "strategy,threads,regime,keys,ops,seconds,ops_per_sec,ns_per_op,p50_ns,p99_ns,p999_ns,admitted,bound,fairness,rounds,ops_per_sec_min,ops_per_sec_max";

/// Every cell of a comparison, in run order (regime, threads, strategy).
///
/// ```
/// use std::time::Duration;
/// use tollgate_bench::{compare, report::CSV_HEADER, strategies, Plan, Regime};
/// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(5));
/// let report = compare(&[strategies::by_name("spin").unwrap()], &plan, |_, _, _| {}).unwrap();
/// let csv = report.to_csv();
/// assert_eq!(csv.lines().next(), Some(CSV_HEADER));
/// assert!(csv.lines().nth(1).unwrap().starts_with("spin,1,deny,1,"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The measurements.
    pub cells: Vec<CellResult>,
    /// Per-cell duration, all rounds together.
    pub duration: Duration,
    /// Rounds each cell was measured in.
    pub rounds: usize,
    /// Tokens per operation.
    pub cost: u64,
    /// Seed of the key generators.
    pub seed: u64,
}

/// Numbers with an SI suffix, three significant digits: 1234567 → "1.23M".
fn si(x: f64) -> String {
    let (v, s) = if x >= 1e12 {
        (x / 1e12, "T")
    } else if x >= 1e9 {
        (x / 1e9, "G")
    } else if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        return format!("{x:.0}");
    };
    // Thresholds just below 100 and 10 so that rounding never prints "10.00M".
    if v >= 99.95 {
        format!("{v:.0}{s}")
    } else if v >= 9.995 {
        format!("{v:.1}{s}")
    } else {
        format!("{v:.2}{s}")
    }
}

/// The table's `spread` column: (fastest - slowest round) / median, in percent; `-` for one
/// round.
fn spread(c: &CellResult) -> String {
    if c.rounds.len() < 2 {
        return "-".to_owned();
    }
    let pct = (c.ops_per_sec_max - c.ops_per_sec_min) / c.ops_per_sec * 100.0;
    if pct.is_finite() {
        format!("{pct:.0}%")
    } else {
        "-".to_owned()
    }
}

fn label(c: &CellResult) -> String {
    match c.kind {
        Kind::Peer => format!("{} (peer)", c.strategy),
        _ => c.strategy.clone(),
    }
}

impl Report {
    /// `cell`'s throughput relative to the baseline strategy ([`BASELINE`], `std-mutex`) at the
    /// same threads and regime, when the baseline ran ([`Report::ratio`]): the table's
    /// `vs std-mutex` column and the JSON's `vs_std_mutex`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(5));
    /// let only_cas = compare(&[strategies::by_name("cas").unwrap()], &plan, |_, _, _| {}).unwrap();
    /// assert_eq!(only_cas.vs_std_mutex(&only_cas.cells[0]), None); // no baseline ran
    /// ```
    pub fn vs_std_mutex(&self, cell: &CellResult) -> Option<f64> {
        self.cells
            .iter()
            .find(|b| {
                b.strategy == BASELINE && b.threads == cell.threads && b.regime == cell.regime
            })
            .map(|b| Report::ratio(cell, b))
    }

    /// `a`'s throughput relative to `b`'s, for two cells of the same threads and regime: the
    /// median of the per-round ratios `a.rounds[i] / b.rounds[i]` (rounds of one index ran in
    /// the same round, a few cells apart, so each ratio compares two runs seconds apart, and a
    /// burst of load that slows a few rounds moves few ratios); of an even count, the mean of the middle
    /// two. Cells with different round counts (not from one [`compare`](crate::compare()) run)
    /// compare their median rounds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Report, Regime};
    /// let s = vec![strategies::by_name("cas").unwrap(), strategies::by_name("std-mutex").unwrap()];
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(10));
    /// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
    /// let (cas, mutex) = (&report.cells[0], &report.cells[1]);
    /// assert!(Report::ratio(cas, mutex) > 0.0);
    /// assert_eq!(Report::ratio(cas, cas), 1.0);
    /// ```
    pub fn ratio(a: &CellResult, b: &CellResult) -> f64 {
        if a.rounds.len() != b.rounds.len() || a.rounds.is_empty() {
            return a.ops_per_sec / b.ops_per_sec;
        }
        let mut r: Vec<f64> = a
            .rounds
            .iter()
            .zip(&b.rounds)
            .map(|(x, y)| x.ops_per_sec / y.ops_per_sec)
            .collect();
        r.sort_by(f64::total_cmp);
        let n = r.len();
        if n % 2 == 1 {
            r[n / 2]
        } else {
            (r[n / 2 - 1] + r[n / 2]) / 2.0
        }
    }

    /// `cell` against the strategy `other` at the same threads and regime, when it ran: the
    /// median per-round throughput ratio ([`Report::ratio`]), the rounds in which `cell` was at
    /// least as fast, the round count, and `cell`'s p99 over `other`'s. The table's `vs NAME`
    /// column (`compare --vs NAME`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let s = vec![strategies::by_name("cas").unwrap(), strategies::by_name("spin").unwrap()];
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(10));
    /// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
    /// let (ratio, won, rounds, _) = report.vs(&report.cells[0], "cas").unwrap();
    /// assert_eq!((ratio, won, rounds), (1.0, rounds, report.rounds));
    /// assert!(report.vs(&report.cells[0], "std-mutex").is_none()); // did not run
    /// ```
    pub fn vs(&self, cell: &CellResult, other: &str) -> Option<(f64, usize, usize, f64)> {
        let b = self.cells.iter().find(|b| {
            b.strategy == other && b.threads == cell.threads && b.regime == cell.regime
        })?;
        let won = cell
            .rounds
            .iter()
            .zip(&b.rounds)
            .filter(|(x, y)| x.ops_per_sec >= y.ops_per_sec)
            .count();
        let p99 = cell.p99_ns as f64 / b.p99_ns.max(1) as f64;
        Some((Report::ratio(cell, b), won, cell.rounds.len(), p99))
    }

    /// Cells whose strategy admitted more than the bound.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(5));
    /// let report = compare(&[strategies::always_admit()], &plan, |_, _, _| {}).unwrap();
    /// assert_eq!(report.violations().len(), 1);
    /// ```
    pub fn violations(&self) -> Vec<&CellResult> {
        self.cells.iter().filter(|c| c.over_bound()).collect()
    }

    /// One line per violating cell, saying what its first round over the bound admitted
    /// against that round's bound: for a keyed strategy with a key over its own bound, that
    /// key, its tokens and its bound; otherwise the tokens of all keys against the sum of
    /// their bounds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(5));
    /// let report = compare(&[strategies::always_admit()], &plan, |_, _, _| {}).unwrap();
    /// assert!(report.violation_messages()[0].contains("broken-always-admit admitted"));
    /// ```
    pub fn violation_messages(&self) -> Vec<String> {
        self.violations()
            .iter()
            .map(|c| {
                let first = c.first_round_over_bound();
                let round = match first {
                    Some(r) => format!(", round {} of {}", r.index + 1, c.rounds.len()),
                    None => ", all rounds together".to_owned(),
                };
                let what = match (first, first.and_then(|r| r.key_over_bound())) {
                    (_, Some(k)) => format!(
                        "admitted {} tokens on key {}, more than its bound {} (burst + rate x elapsed, per key)",
                        k.admitted, k.key, k.bound
                    ),
                    (Some(r), None) => format!(
                        "admitted {} tokens, more than the bound {} (burst + rate x elapsed{})",
                        r.admitted,
                        r.bound,
                        if r.busiest_key.is_some() { ", summed over the keys" } else { "" }
                    ),
                    (None, None) => format!(
                        "admitted {} tokens, more than the bound {} (burst + rate x elapsed)",
                        c.admitted, c.bound
                    ),
                };
                format!(
                    "{} {what} at {} thread(s), regime {}{round}",
                    c.strategy,
                    c.threads,
                    c.regime.name(),
                )
            })
            .collect()
    }

    /// The human-readable table: one row per strategy × threads × regime.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let plan = Plan::new(vec![1], vec![Regime::Allow], Duration::from_millis(5));
    /// let report = compare(&[strategies::by_name("std-mutex").unwrap()], &plan, |_, _, _| {}).unwrap();
    /// let table = report.to_table();
    /// assert!(table.starts_with("strategy"));
    /// assert!(table.contains("1.00x"));
    /// ```
    pub fn to_table(&self) -> String {
        self.to_table_vs(None)
    }

    /// [`to_table`](Report::to_table) with one more column when `vs` names a strategy that
    /// ran: each cell against it ([`Report::vs`]) as `ratio won/rounds p99-ratio`, e.g.
    /// `1.04x 4/5 p99 0.9x`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let s = vec![strategies::by_name("cas").unwrap(), strategies::by_name("std-mutex").unwrap()];
    /// let plan = Plan::new(vec![1], vec![Regime::Deny], Duration::from_millis(10));
    /// let report = compare(&s, &plan, |_, _, _| {}).unwrap();
    /// let table = report.to_table_vs(Some("cas"));
    /// assert!(table.lines().next().unwrap().ends_with("vs cas"));
    /// assert!(table.contains("1.00x 5/5 p99 1.0x"));
    /// ```
    pub fn to_table_vs(&self, vs: Option<&str>) -> String {
        let mut header = vec![
            "strategy".to_owned(),
            "threads".to_owned(),
            "regime".to_owned(),
            "Mops/s".to_owned(),
            "spread".to_owned(),
            "ns/op".to_owned(),
            "p50".to_owned(),
            "p99".to_owned(),
            "p999".to_owned(),
            "fairness".to_owned(),
            "adm/thread".to_owned(),
            "admitted".to_owned(),
            "bound".to_owned(),
            "vs std-mutex".to_owned(),
        ];
        if let Some(name) = vs {
            header.push(format!("vs {name}"));
        }
        let mut rows: Vec<Vec<String>> = vec![header.clone()];
        for c in &self.cells {
            let mut row = vec![
                label(c),
                c.threads.to_string(),
                c.regime.name().to_owned(),
                format!("{:.2}", c.ops_per_sec / 1e6),
                spread(c),
                format!("{:.1}", c.ns_per_op),
                c.p50_ns.to_string(),
                c.p99_ns.to_string(),
                c.p999_ns.to_string(),
                format!("{:.2}", c.fairness),
                format!(
                    "{}-{}",
                    si(c.admitted_per_thread_min as f64),
                    si(c.admitted_per_thread_max as f64)
                ),
                si(c.admitted as f64),
                format!(
                    "{}{}",
                    si(c.bound as f64),
                    if c.over_bound() { " EXCEEDED" } else { "" }
                ),
                self.vs_std_mutex(c)
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
            ];
            if let Some(name) = vs {
                row.push(self.vs(c, name).map_or_else(
                    || "-".to_owned(),
                    |(r, won, n, p99)| format!("{r:.2}x {won}/{n} p99 {p99:.1}x"),
                ));
            }
            rows.push(row);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        let mut last_regime = None;
        for (n, row) in rows.iter().enumerate() {
            if n > 0 {
                let regime = self.cells[n - 1].regime;
                if last_regime.is_some_and(|r| r != regime) {
                    out.push('\n');
                }
                last_regime = Some(regime);
            }
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                if i == 0 || i == 2 {
                    let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                } else {
                    let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if n == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        let _ = writeln!(
            out,
            "\nMops/s, ns/op and fairness: the median of {} round(s); spread = (fastest - slowest round) / median;\n\
             vs std-mutex = the median of the per-round ratios (each round runs every strategy once, one after the other){}\n\
             latencies in ns (every 64th op sampled, all rounds); admitted and bound in tokens, summed over the rounds\n\
             (each round checked against its own bound, keyed strategies' also key by key); fairness = min/max ops per thread;\n\
             adm/thread = the fewest and the most operations admitted by one thread, in the median round",
            self.rounds,
            vs.map_or_else(String::new, |name| format!(
                ";\nvs {name} = the same ratio against {name}, the rounds at least as fast as {name}'s, and p99 over {name}'s p99"
            ))
        );
        let counted: Vec<&CellResult> = self
            .cells
            .iter()
            .filter(|c| c.central_cas_per_admission.is_some())
            .collect();
        if !counted.is_empty() {
            let _ = writeln!(
                out,
                "\nwhat scales with cores (sharded bucket, counted by it, all rounds):\n\
                 strategy  threads  regime  central CAS / admission  shared-line writes / refusal  of them advances (2 writes each) / refusal"
            );
            for c in counted {
                let _ = writeln!(
                    out,
                    "{:<8}  {:>7}  {:<6}  {:>23.4}  {:>28.2e}  {:>41.2e}",
                    c.strategy,
                    c.threads,
                    c.regime.name(),
                    c.central_cas_per_admission.unwrap_or(0.0),
                    c.shared_writes_per_refusal.unwrap_or(0.0),
                    c.advances_per_refusal.unwrap_or(0.0)
                );
            }
        }
        out
    }

    /// The CSV: [`CSV_HEADER`], then one line per cell.
    ///
    /// ```
    /// use tollgate_bench::{report::{Report, CSV_HEADER}};
    /// let empty = Report { cells: vec![], duration: Default::default(), rounds: 5, cost: 1, seed: 0 };
    /// assert_eq!(empty.to_csv(), format!("{CSV_HEADER}\n"));
    /// ```
    pub fn to_csv(&self) -> String {
        let mut out = String::with_capacity(128 * (self.cells.len() + 1));
        out.push_str(CSV_HEADER);
        out.push('\n');
        for c in &self.cells {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{:.6},{:.0},{:.2},{},{},{},{},{},{:.4},{},{:.0},{:.0}",
                c.strategy,
                c.threads,
                c.regime.name(),
                c.keys,
                c.ops,
                c.seconds,
                c.ops_per_sec,
                c.ns_per_op,
                c.p50_ns,
                c.p99_ns,
                c.p999_ns,
                c.admitted,
                c.bound,
                c.fairness,
                c.rounds.len(),
                c.ops_per_sec_min,
                c.ops_per_sec_max
            );
        }
        out
    }

    /// The JSON: `{"tool", "version", "duration_ms", "rounds", "cost", "seed", "cells": [...]}`
    /// where each cell carries every CSV column (but `rounds` is the list of its rounds: `index`,
    /// `position`, `ops`, `seconds`, `ops_per_sec`, `admitted`, `bound`, and for keyed
    /// strategies `busiest_key`: `{"key", "admitted", "bound"}`, the key that admitted the most
    /// against its own bound) plus `kind` and `vs_std_mutex`.
    ///
    /// ```
    /// use tollgate_bench::report::Report;
    /// let empty = Report { cells: vec![], duration: Default::default(), rounds: 5, cost: 1, seed: 0 };
    /// assert!(empty.to_json().contains("\"cells\": []"));
    /// ```
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Cell<'a> {
            #[serde(flatten)]
            cell: &'a CellResult,
            vs_std_mutex: Option<f64>,
        }
        #[derive(serde::Serialize)]
        struct Json<'a> {
            tool: &'static str,
            version: &'static str,
            duration_ms: f64,
            rounds: usize,
            cost: u64,
            seed: u64,
            cells: Vec<Cell<'a>>,
        }
        let json = Json {
            tool: "tollgate-bench compare",
            version: env!("CARGO_PKG_VERSION"),
            duration_ms: self.duration.as_secs_f64() * 1e3,
            rounds: self.rounds,
            cost: self.cost,
            seed: self.seed,
            cells: self
                .cells
                .iter()
                .map(|cell| Cell {
                    cell,
                    vs_std_mutex: self.vs_std_mutex(cell),
                })
                .collect(),
        };
        // Non-finite floats (a cell with no operation) become null rather than an error.
        serde_json::to_string_pretty(&json).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Writes `compare.csv`, `compare.json` and one `compare-<regime>.svg` per regime into
    /// `dir` (created if missing); returns the paths written.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_bench::{compare, strategies, Plan, Regime};
    /// let plan = Plan::new(vec![1, 2], vec![Regime::Allow], Duration::from_millis(5));
    /// let report = compare(&[strategies::by_name("cas").unwrap()], &plan, |_, _, _| {}).unwrap();
    /// let dir = std::env::temp_dir().join(format!("tollgate-bench-doc-{}", std::process::id()));
    /// let written = report.write_dir(&dir).unwrap();
    /// assert_eq!(written.len(), 3);
    /// assert!(std::fs::read_to_string(dir.join("compare-allow.svg")).unwrap().contains("<svg"));
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn write_dir(&self, dir: &Path) -> Result<Vec<PathBuf>, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut written = Vec::new();
        for (name, body) in [
            ("compare.csv", self.to_csv()),
            ("compare.json", self.to_json()),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, body).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
        for regime in Regime::ALL {
            if self.cells.iter().any(|c| c.regime == regime) {
                let path = dir.join(format!("compare-{}.svg", regime.name()));
                self.write_svg(regime, &path)?;
                written.push(path);
            }
        }
        Ok(written)
    }

    /// Draws throughput (Mops/s) against threads for `regime`, one line per strategy, as SVG.
    ///
    /// ```
    /// use tollgate_bench::{report::Report, Regime};
    /// let empty = Report { cells: vec![], duration: Default::default(), rounds: 5, cost: 1, seed: 0 };
    /// let path = std::env::temp_dir().join(format!("tollgate-bench-empty-{}.svg", std::process::id()));
    /// empty.write_svg(Regime::Mixed, &path).unwrap();
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn write_svg(&self, regime: Regime, path: &Path) -> Result<(), Error> {
        use plotters::prelude::*;
        let cells: Vec<&CellResult> = self.cells.iter().filter(|c| c.regime == regime).collect();
        let mut names: Vec<(String, Kind)> = Vec::new();
        for c in &cells {
            if !names.iter().any(|(n, _)| *n == c.strategy) {
                names.push((c.strategy.clone(), c.kind));
            }
        }
        let max_threads = cells.iter().map(|c| c.threads).max().unwrap_or(1).max(2);
        let max_mops = cells
            .iter()
            .map(|c| c.ops_per_sec / 1e6)
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max)
            // Head room: the legend sits in the top part of the plot, above the lines.
            * 1.6;
        let err = |e: &dyn std::fmt::Display| Error::Chart {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("tollgate-bench compare: {} regime", regime.name()),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(1f64..max_threads as f64, 0f64..max_mops)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("Mops/s (all threads)")
            .x_labels(max_threads.min(16))
            .x_label_formatter(&|x| {
                if x.fract() == 0.0 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .max_light_lines(0)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (name, kind)) in names.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|c| c.strategy == *name)
                .map(|c| (c.threads as f64, c.ops_per_sec / 1e6))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let legend = if *kind == Kind::Peer {
                format!("{name} (peer)")
            } else {
                name.clone()
            };
            let width = if *kind == Kind::Peer { 1 } else { 2 };
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
                .map_err(|e| err(&e))?
                .label(legend)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
                });
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{si, Report};
    use crate::cell::{CellResult, Round};
    use crate::{Kind, Regime};

    fn cell(per_round: &[f64]) -> CellResult {
        let rounds: Vec<Round> = per_round
            .iter()
            .enumerate()
            .map(|(index, &ops_per_sec)| Round {
                index,
                position: 0,
                ops: ops_per_sec as u64,
                seconds: 1.0,
                ops_per_sec,
                admitted: 0,
                bound: 0,
                thread_admitted_min: 0,
                thread_admitted_max: 0,
                counters: None,
                busiest_key: None,
            })
            .collect();
        let mut sorted = per_round.to_vec();
        sorted.sort_by(f64::total_cmp);
        CellResult {
            strategy: "s".to_owned(),
            kind: Kind::Custom,
            threads: 1,
            regime: Regime::Allow,
            keys: 1,
            ops: 0,
            seconds: 0.0,
            ops_per_sec: sorted[(sorted.len() - 1) / 2],
            ops_per_sec_min: sorted[0],
            ops_per_sec_max: sorted[sorted.len() - 1],
            ns_per_op: 0.0,
            p50_ns: 0,
            p99_ns: 0,
            p999_ns: 0,
            admitted: 0,
            bound: 0,
            fairness: 1.0,
            admitted_per_thread_min: 0,
            admitted_per_thread_max: 0,
            central_cas_per_admission: None,
            shared_writes_per_refusal: None,
            advances_per_refusal: None,
            rounds,
        }
    }

    /// Rounds pair by index: round `i` of `a` is compared with round `i` of `b` (they ran next
    /// to each other), not the median round of one with the median round of the other.
    #[test]
    fn ratios_are_the_median_of_paired_rounds() {
        let (a, b) = (cell(&[4.0, 1.0, 4.0]), cell(&[2.0, 0.5, 2.0]));
        assert_eq!(Report::ratio(&a, &b), 2.0);
        // Paired ratios 1/3, 2, 3/2: median 3/2; the medians' ratio would be 2/2.
        let (a, b) = (cell(&[1.0, 2.0, 3.0]), cell(&[3.0, 1.0, 2.0]));
        assert_eq!(
            (a.ops_per_sec / b.ops_per_sec, Report::ratio(&a, &b)),
            (1.0, 1.5)
        );
        // Even counts: the mean of the middle two; other round counts: the medians.
        assert_eq!(
            Report::ratio(&cell(&[1.0, 2.0, 3.0, 4.0]), &cell(&[1.0; 4])),
            2.5
        );
        assert_eq!(Report::ratio(&cell(&[3.0]), &cell(&[1.0, 2.0])), 3.0);
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(999.0), "999");
        assert_eq!(si(1234.0), "1.23k");
        assert_eq!(si(12_345_678.0), "12.3M");
        assert_eq!(si(1_000_000_000.0), "1.00G");
        assert_eq!(si(9_996_000.0), "10.0M");
        assert_eq!(si(99_960.0), "100k");
    }
}
