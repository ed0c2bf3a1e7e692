//! The result shape shared by every `ferrite bench` subcommand, with a plain-text
//! table and dependency-free SVG charts.
//!
//! `--json` prints one [`Report`]: `{"suite": …, "command": …, "environment": {…},
//! "results": [{"bench", "variant", "param", "threads", "mops", "p50_ns", "p99_ns", …}]}`,
//! where `environment` is one [`Environment`] record for every suite.

pub mod chart;
pub mod env;

pub use env::{Environment, LatencyInjection};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One measured cell.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchResult {
    /// The operation or mix (e.g. `lookup`, `insert`, `mixed`, `random`).
    pub bench: String,
    /// What is compared (index, log kind, update method, …).
    pub variant: String,
    /// The varied parameter (entry size, dirty lines, …) or null.
    pub param: Option<Value>,
    pub threads: u32,
    /// Million operations per second.
    pub mops: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<f64>,
    /// Further metrics: `fences_per_op`, `lines_per_op`, `p999_ns`, …
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl BenchResult {
    pub fn new(bench: &str, variant: &str, param: Option<Value>, threads: u32, mops: f64) -> Self {
        BenchResult {
            bench: bench.into(),
            variant: variant.into(),
            param,
            threads,
            mops,
            p50_ns: None,
            p99_ns: None,
            extra: BTreeMap::new(),
        }
    }

    /// Adds a named metric.
    pub fn with(mut self, key: &str, v: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), v.into());
        self
    }

    /// The parameter as a number, when it is one.
    pub fn param_f64(&self) -> Option<f64> {
        self.param.as_ref().and_then(Value::as_f64)
    }

    fn param_text(&self) -> String {
        match &self.param {
            None | Some(Value::Null) => "-".into(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        }
    }
}

/// A whole benchmark run.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Report {
    pub suite: String,
    /// The exact command line that produced the report.
    pub command: String,
    /// Machine and settings: CPU, flush instruction, pool durability, build, …
    #[serde(default)]
    pub environment: Environment,
    pub results: Vec<BenchResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(suite: &str) -> Report {
        Report {
            suite: suite.into(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            ..Report::default()
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialise")
    }

    /// A fixed-width table of every result; extra metrics named in `extra_cols`
    /// get their own columns.
    pub fn table(&self, extra_cols: &[&str]) -> String {
        let mut head = vec![
            "bench", "variant", "param", "thr", "Mops/s", "p50 ns", "p99 ns",
        ];
        head.extend_from_slice(extra_cols);
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| {
                let mut row = vec![
                    r.bench.clone(),
                    r.variant.clone(),
                    r.param_text(),
                    r.threads.to_string(),
                    format!("{:.3}", r.mops),
                    r.p50_ns.map_or("-".into(), |v| format!("{v:.0}")),
                    r.p99_ns.map_or("-".into(), |v| format!("{v:.0}")),
                ];
                for c in extra_cols {
                    row.push(match r.extra.get(*c) {
                        Some(Value::Number(n)) => {
                            let f = n.as_f64().unwrap_or(0.0);
                            if f.fract() == 0.0 && f.abs() < 1e15 {
                                format!("{f:.0}")
                            } else {
                                format!("{f:.3}")
                            }
                        }
                        Some(v) => v.to_string().trim_matches('"').to_string(),
                        None => "-".into(),
                    });
                }
                row
            })
            .collect();
        let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            for (i, c) in cells.iter().enumerate() {
                let _ = write!(out, "{:<width$}  ", c, width = w[i]);
            }
            out.truncate(out.trim_end().len());
            out.push('\n');
        };
        line(
            &mut out,
            &head.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        );
        line(
            &mut out,
            &w.iter().map(|&n| "-".repeat(n)).collect::<Vec<_>>(),
        );
        for r in &rows {
            line(&mut out, r);
        }
        out
    }

    /// Markdown version of [`Report::table`] for `docs/BENCHMARKS.md`.
    pub fn markdown(&self, extra_cols: &[&str]) -> String {
        let t = self.table(extra_cols);
        let mut out = String::new();
        for (i, l) in t.lines().enumerate() {
            if i == 1 {
                let n = t.lines().next().map_or(0, |h| {
                    h.split("  ").filter(|s| !s.trim().is_empty()).count()
                });
                out.push_str(&format!("|{}\n", " --- |".repeat(n)));
                continue;
            }
            let cells: Vec<&str> = l
                .split("  ")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }

    /// Writes `<dir>/<stem>.json`, `.md` (table) and `.svg` (the chart) and returns
    /// the chart's path. Every `ferrite bench` uses this so results land in one place.
    pub fn write_outputs(
        &self,
        dir: &std::path::Path,
        stem: &str,
        extra_cols: &[&str],
        svg: &str,
    ) -> std::io::Result<std::path::PathBuf> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(format!("{stem}.json")), self.to_json())?;
        let md = format!(
            "Command: `{}`\n\nMachine: {}\n\nBuild: {}\n\n{}",
            self.command,
            self.environment.summary(),
            self.environment.build_line(),
            self.markdown(extra_cols)
        );
        std::fs::write(dir.join(format!("{stem}.md")), md)?;
        let chart = dir.join(format!("{stem}.svg"));
        std::fs::write(&chart, svg)?;
        Ok(chart)
    }

    /// Prints the JSON (`json`) or the table, then where the chart is.
    pub fn print(&self, json: bool, extra_cols: &[&str], chart: Option<&std::path::Path>) {
        if json {
            println!("{}", self.to_json());
        } else {
            print!("{}", self.table(extra_cols));
            for n in &self.notes {
                println!("note: {n}");
            }
            println!("machine: {}", self.environment.summary());
            if let Some(c) = chart {
                println!("chart: {}", c.display());
            }
        }
    }

    /// Results as chart series: one series per (variant, bench) over the numeric
    /// param, for line charts.
    pub fn series_by_param(&self, filter: impl Fn(&BenchResult) -> bool) -> Vec<chart::Series> {
        let mut map: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let benches: std::collections::BTreeSet<&str> =
            self.results.iter().map(|r| r.bench.as_str()).collect();
        for r in self.results.iter().filter(|r| filter(r)) {
            if let Some(x) = r.param_f64() {
                let name = if benches.len() > 1 {
                    format!("{} {}", r.variant, r.bench)
                } else {
                    r.variant.clone()
                };
                map.entry(name).or_default().push((x, r.mops));
            }
        }
        map.into_iter()
            .map(|(name, mut points)| {
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart::Series::new(name, points)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_shared_shape() {
        let mut r = Report::new("log");
        r.results.push(
            BenchResult::new("append", "poplog", Some(64.into()), 1, 2.5)
                .with("fences_per_op", 1.0),
        );
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        let e = &v["results"][0];
        assert_eq!(e["bench"], "append");
        assert_eq!(e["variant"], "poplog");
        assert_eq!(e["param"], 64);
        assert_eq!(e["threads"], 1);
        assert_eq!(e["mops"], 2.5);
        assert_eq!(e["fences_per_op"], 1.0);
        assert!(e.get("p50_ns").is_none());
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back.results, r.results);
    }

    #[test]
    fn table_lists_every_result_with_extra_columns() {
        let mut r = Report::new("x");
        r.results
            .push(BenchResult::new("lookup", "ferrite", None, 2, 3.25).with("fences_per_op", 0.5));
        r.results
            .push(BenchResult::new("insert", "btreemap", None, 1, 1.0));
        let t = r.table(&["fences_per_op"]);
        assert_eq!(t.lines().count(), 4);
        assert!(t.contains("3.250") && t.contains("0.500") && t.contains("btreemap"));
        let md = r.markdown(&["fences_per_op"]);
        assert!(md.lines().nth(1).unwrap().starts_with("| --- |"));
        assert_eq!(md.lines().count(), 4);
    }

    #[test]
    fn series_group_by_variant() {
        let mut r = Report::new("x");
        for (v, x, y) in [("a", 2.0, 1.0), ("a", 1.0, 2.0), ("b", 1.0, 3.0)] {
            r.results
                .push(BenchResult::new("append", v, Some(x.into()), 1, y));
        }
        let s = r.series_by_param(|_| true);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points, vec![(1.0, 2.0), (2.0, 1.0)]);
    }
}
