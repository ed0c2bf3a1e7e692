//! Tables and charts of `ferrite bench buffer`: every experiment is a
//! [`Section`] (a title, the workload in one line, a table of at most 120
//! columns, a chart), printed as text or Markdown.

use std::fmt::Write as _;

/// One experiment's table.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// `mix`, `ycsb`, …
    pub experiment: String,
    pub title: String,
    /// The workload, tiers and measuring time, in one line above the table.
    pub workload: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Stem of its chart in the output directory (`buffer-fig8`), if any.
    pub chart: Option<String>,
    /// Lines printed after the table.
    pub notes: Vec<String>,
}

/// Longest line of a text table.
pub const MAX_WIDTH: usize = 120;

impl Section {
    /// The table as aligned text (first column left, the rest right).
    pub fn table(&self) -> String {
        let n = self.head.len();
        let mut w: Vec<usize> = self.head.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.len());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i == 0 {
                    let _ = write!(l, "{:<width$}", c, width = w[i]);
                } else {
                    let _ = write!(l, "  {:>width$}", c, width = w[i]);
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&mut out, &self.head);
        line(
            &mut out,
            &w.iter().map(|&k| "-".repeat(k)).collect::<Vec<_>>(),
        );
        for r in &self.rows {
            line(&mut out, r);
        }
        out
    }

    /// Title, workload line, table and notes for the terminal, every line
    /// within [`MAX_WIDTH`] columns (prose is wrapped).
    pub fn text(&self) -> String {
        let mut s = wrap(&format!("== {} ==", self.title), MAX_WIDTH);
        s.push_str(&wrap(&self.workload, MAX_WIDTH));
        s.push_str(&self.table());
        for n in &self.notes {
            s.push_str(&wrap(&format!("note: {n}"), MAX_WIDTH));
        }
        s
    }

    /// The same as Markdown (for docs/BENCHMARKS.md).
    pub fn markdown(&self) -> String {
        let mut s = format!("**{}** — {}\n\n", self.title, self.workload);
        let _ = writeln!(s, "| {} |", self.head.join(" | "));
        let _ = writeln!(s, "|{}", " --- |".repeat(self.head.len()));
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        if let Some(c) = &self.chart {
            let _ = writeln!(s, "\n![{}]({c}.svg)", self.title);
        }
        for n in &self.notes {
            let _ = writeln!(s, "\n{n}");
        }
        s
    }
}

/// `text` broken at spaces into lines of at most `width` columns (a longer
/// word stays whole), each ending in a newline; continuation lines are
/// indented by two spaces.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = "  ".to_string();
        }
        if !line.is_empty() && line != "  " {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.trim().is_empty() {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A throughput cell: 3 significant digits.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

/// A ratio cell: `1.23x`.
pub fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// Points of a sorted-descending count curve, thinned to about `n`
/// logarithmically spaced ranks (rank 1 = the most written line).
pub fn rank_curve(sorted_desc: &[u32], n: usize) -> Vec<(f64, f64)> {
    let len = sorted_desc.iter().take_while(|&&c| c > 0).count();
    if len == 0 {
        return Vec::new();
    }
    let mut pts = Vec::new();
    let mut last = 0usize;
    for i in 0..=n {
        let r = ((len as f64).powf(i as f64 / n as f64)).round() as usize;
        let r = r.clamp(1, len);
        if r != last {
            pts.push((r as f64, sorted_desc[r - 1] as f64));
            last = r;
        }
    }
    pts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_fit_the_width() {
        let s = Section {
            experiment: "x".into(),
            title: "T".into(),
            workload: "w".into(),
            head: [
                "data MiB",
                "main-memory",
                "pm-direct",
                "basic-pm",
                "ssd-bm",
                "three-tier",
                "lmdb",
                "sqlite",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            rows: vec![vec![
                "128".into(),
                "1.23".into(),
                "-".into(),
                "0.456".into(),
                "2.0e-3".into(),
                "1.11".into(),
                "0.5".into(),
                "0.1".into(),
            ]],
            chart: Some("buffer-x".into()),
            notes: vec!["n".into()],
        };
        let t = s.table();
        assert_eq!(t.lines().count(), 3);
        assert!(t.lines().all(|l| l.len() <= MAX_WIDTH));
        let md = s.markdown();
        assert!(md.contains("| data MiB | main-memory |") && md.contains("buffer-x.svg"));
        assert!(s.text().contains("note: n"));
        let long = "word ".repeat(100);
        let w = wrap(&long, 30);
        assert!(w.lines().all(|l| l.len() <= 30), "{w}");
        assert_eq!(w.split_whitespace().count(), 100);
    }

    #[test]
    fn numbers_and_curves() {
        assert_eq!(num(1234.5), "1234");
        assert_eq!(num(0.01234), "0.012");
        assert_eq!(num(0.0), "0");
        assert_eq!(ratio(3.0, 1.5), "2.00x");
        assert_eq!(ratio(1.0, 0.0), "-");
        let c: Vec<u32> = (1..=1000).rev().collect();
        let pts = rank_curve(&c, 20);
        assert_eq!(pts[0], (1.0, 1000.0));
        assert_eq!(pts.last().unwrap().0, 1000.0);
        assert!(pts.len() <= 21);
        assert!(rank_curve(&[0, 0], 5).is_empty());
    }
}
