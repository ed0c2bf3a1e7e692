//! Minimal SVG charts (line and grouped bar), written without dependencies so
//! every benchmark can drop a picture beside its table.
//!
//! Colours: an index (or baseline) has one fixed colour in every chart
//! ([`INDEX_COLORS`], looked up by the series' name or [`Series::key`]); other
//! series take the remaining palette in order.

use std::fmt::Write as _;

/// A named line of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Name the colour is looked up by (default: `name`), e.g. the index of a
    /// series named "ferrite lookup".
    pub key: Option<String>,
    /// Drawn dashed (a second operation of the same index, …).
    pub dashed: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            key: None,
            dashed: false,
        }
    }

    /// Takes its colour from `key` (an index name) instead of its own name.
    pub fn keyed(mut self, key: impl Into<String>) -> Series {
        self.key = Some(key.into());
        self
    }

    pub fn dashed(mut self, dashed: bool) -> Series {
        self.dashed = dashed;
        self
    }

    fn color_key(&self) -> &str {
        self.key.as_deref().unwrap_or(&self.name)
    }
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const L: f64 = 70.0;
const R: f64 = 190.0;
const T: f64 = 40.0;
const B: f64 = 50.0;

/// The fixed colour of every index and baseline `ferrite bench` knows, so the
/// same index looks the same in every chart.
pub const INDEX_COLORS: &[(&str, &str)] = &[
    ("ferrite", "#c0392b"),
    ("ferrite-dram", "#e67e22"),
    ("btreemap", "#1f77b4"),
    ("btreemap-u64", "#6baed6"),
    ("redb", "#2ca02c"),
    ("redb-nosync", "#98df8a"),
    ("best peer", "#7f7f7f"),
    // The buffer manager's designs and its outside anchors (`ferrite bench buffer`).
    ("main-memory", "#08519c"),
    ("pm-direct", "#525252"),
    ("basic-pm", "#6a3d9a"),
    ("ssd-bm", "#a6761d"),
    ("three-tier", "#e31a1c"),
    ("lmdb", "#33a02c"),
    ("sqlite", "#1b9e77"),
    ("the bar", "#222222"),
];

/// Colours of series that are not indexes, in order (none is an index colour).
const OTHER_COLORS: [&str; 10] = [
    "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939", "#ad494a",
    "#7b4173", "#3182bd",
];

/// The fixed colour of an index or baseline, if `name` is one.
pub fn index_color(name: &str) -> Option<&'static str> {
    INDEX_COLORS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, c)| c)
}

/// Colours for series keyed by `keys`, in order: index colours where the key is
/// an index, the other palette in first-seen order otherwise (equal keys share
/// a colour).
pub fn colors<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'static str> {
    let mut seen: Vec<(&str, &'static str)> = Vec::new();
    let mut next = 0;
    keys.into_iter()
        .map(|k| {
            if let Some(c) = index_color(k) {
                return c;
            }
            if let Some(&(_, c)) = seen.iter().find(|(s, _)| *s == k) {
                return c;
            }
            let c = OTHER_COLORS[next % OTHER_COLORS.len()];
            next += 1;
            seen.push((k, c));
            c
        })
        .collect()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * e >= v {
            return m * e;
        }
    }
    10.0 * e
}

/// A y axis: maps values to pixels and says where its ticks go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum YAxis {
    /// 0 ..= max, a tick every `step` (max is a multiple of it).
    Linear { max: f64, step: f64 },
    /// 10^lo ..= 10^hi, log-spaced.
    Log { lo: f64, hi: f64 },
}

impl YAxis {
    fn fit(ys: &[f64], log: bool) -> YAxis {
        let max = ys.iter().cloned().fold(0.0, f64::max);
        if !log {
            // Three to five ticks of a round step, the top one just above the data.
            let step = nice_max(max / 5.0);
            let max = ((max / step).ceil() * step).max(step);
            return YAxis::Linear { max, step };
        }
        let pos: Vec<f64> = ys.iter().cloned().filter(|y| *y > 0.0).collect();
        if pos.is_empty() {
            return YAxis::Log { lo: 0.0, hi: 1.0 };
        }
        let min = pos.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = pos.iter().cloned().fold(0.0, f64::max);
        let lo = min.log10().floor();
        let mut hi = max.log10().ceil();
        if hi <= lo {
            hi = lo + 1.0;
        }
        YAxis::Log { lo, hi }
    }

    /// Fraction of the plot height (0 = bottom) of value `y`.
    fn frac(&self, y: f64) -> f64 {
        match *self {
            YAxis::Linear { max, .. } => y / max,
            YAxis::Log { lo, hi } => (y.max(1e-300).log10() - lo) / (hi - lo),
        }
    }

    fn ticks(&self) -> Vec<f64> {
        match *self {
            YAxis::Linear { max, step } => {
                let n = (max / step).round() as usize;
                (0..=n).map(|i| step * i as f64).collect()
            }
            YAxis::Log { lo, hi } => {
                let mut v = Vec::new();
                let mults: &[f64] = if hi - lo <= 2.0 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let mut e = lo;
                while e <= hi {
                    for m in mults {
                        let t = m * 10f64.powf(e);
                        if t <= 10f64.powf(hi) * 1.0001 {
                            v.push(t);
                        }
                    }
                    e += 1.0;
                }
                v
            }
        }
    }
}

fn frame(
    svg: &mut String,
    title: &str,
    x_label: &str,
    y_label: &str,
    y: YAxis,
    y_fmt: &dyn Fn(f64) -> String,
) {
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>
"#,
        (L + W - R) / 2.0,
        esc(title),
        (L + W - R) / 2.0,
        H - 10.0,
        esc(x_label),
        (T + H - B) / 2.0,
        esc(y_label)
    );
    for v in y.ticks() {
        let py = H - B - (H - B - T) * y.frac(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{L}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - R,
            L - 6.0,
            py + 4.0,
            esc(&y_fmt(v))
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{L}" y1="{T}" x2="{L}" y2="{}" stroke="black"/>"#,
        H - B,
        W - R,
        H - B,
        H - B
    );
}

/// A number as a short axis label.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Nanoseconds with a unit that keeps the number short: `420 ns`, `1.3 µs`,
/// `12 ms`, `2.1 s`.
pub fn fmt_ns(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    if v >= 10.0 || unit == "ns" {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}

/// [`fmt_ns`] for axis ticks: `1 µs`, not `1.0 µs`.
pub fn fmt_ns_tick(ns: f64) -> String {
    fmt_ns(ns).replace(".0 ", " ")
}

fn legend(svg: &mut String, items: &[(String, &str, bool)]) {
    for (i, (n, c, dashed)) in items.iter().enumerate() {
        let y = T + 10.0 + 18.0 * i as f64;
        if *dashed {
            let _ = writeln!(
                svg,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{c}" stroke-width="3" stroke-dasharray="5,3"/>"#,
                W - R + 10.0,
                y - 4.0,
                W - R + 26.0,
                y - 4.0,
            );
        } else {
            let _ = writeln!(
                svg,
                r#"<rect x="{}" y="{}" width="12" height="12" fill="{c}"/>"#,
                W - R + 12.0,
                y - 10.0,
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">{}</text>"#,
            W - R + 30.0,
            y,
            esc(n)
        );
    }
}

/// How a line chart is drawn; [`line_chart`] is the common case.
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Space x logarithmically (sizes that double).
    pub log_x: bool,
    /// Log-scaled y axis fitted to the decades the data spans (latencies);
    /// otherwise linear from 0.
    pub log_y: bool,
    /// Named x ticks (value, label); default: the data's x values.
    pub x_ticks: Option<Vec<(f64, String)>>,
    /// Label of a y tick; default [`fmt_num`].
    pub y_format: Option<&'a dyn Fn(f64) -> String>,
}

impl<'a> LineChart<'a> {
    pub fn new(title: &'a str, x_label: &'a str, y_label: &'a str) -> LineChart<'a> {
        LineChart {
            title,
            x_label,
            y_label,
            log_x: false,
            log_y: false,
            x_ticks: None,
            y_format: None,
        }
    }

    pub fn draw(&self, series: &[Series]) -> String {
        let xs: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let ys: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .collect();
        let log_x = self.log_x;
        let tx = |x: f64| if log_x { x.max(1e-9).log2() } else { x };
        let tick_xs: Vec<f64> = match &self.x_ticks {
            Some(t) => t.iter().map(|p| p.0).collect(),
            None => Vec::new(),
        };
        let (x0, x1) = xs
            .iter()
            .chain(&tick_xs)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(tx(x)), b.max(tx(x)))
            });
        let (x0, x1) = if x0.is_finite() && x1 > x0 {
            (x0, x1)
        } else {
            (x0.min(0.0), x0.max(0.0) + 1.0)
        };
        let y = YAxis::fit(&ys, self.log_y);
        let px = |x: f64| L + (tx(x) - x0) / (x1 - x0) * (W - R - L);
        let py = |v: f64| H - B - y.frac(v) * (H - B - T);
        let mut svg = String::new();
        let y_fmt: &dyn Fn(f64) -> String = match self.y_format {
            Some(f) => f,
            None => &fmt_num,
        };
        frame(&mut svg, self.title, self.x_label, self.y_label, y, y_fmt);
        let ticks: Vec<(f64, String)> = match &self.x_ticks {
            Some(t) => t.clone(),
            None => {
                let mut t: Vec<f64> = xs.clone();
                t.sort_by(f64::total_cmp);
                t.dedup();
                let step = (t.len() / 12).max(1);
                t.into_iter()
                    .step_by(step)
                    .map(|x| (x, fmt_num(x)))
                    .collect()
            }
        };
        for (x, label) in &ticks {
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                px(*x),
                H - B + 16.0,
                esc(label)
            );
        }
        let cs = colors(series.iter().map(Series::color_key));
        for (s, c) in series.iter().zip(&cs) {
            let pts: Vec<String> = s
                .points
                .iter()
                .map(|&(x, v)| format!("{:.1},{:.1}", px(x), py(v)))
                .collect();
            let dash = if s.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            for &(x, v) in &s.points {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    px(x),
                    py(v)
                );
            }
        }
        let items: Vec<(String, &str, bool)> = series
            .iter()
            .zip(&cs)
            .map(|(s, c)| (s.name.clone(), *c, s.dashed))
            .collect();
        legend(&mut svg, &items);
        svg.push_str("</svg>\n");
        svg
    }
}

/// A line chart, y linear from 0; `log_x` spaces x logarithmically (sizes that double).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let mut c = LineChart::new(title, x_label, y_label);
    c.log_x = log_x;
    c.draw(series)
}

/// A grouped bar chart: one group per category, one bar per series (coloured
/// by the series' name, see [`colors`]).
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let cells: Vec<(String, Vec<Cell>)> = series
        .iter()
        .map(|(n, vals)| (n.clone(), vals.iter().map(|&v| Cell::value(v)).collect()))
        .collect();
    bar_chart_cells(title, y_label, categories, &cells)
}

/// One bar of [`bar_chart_cells`]: a value, or none (the run did not
/// happen: the index died or was left out), and how many wrong answers the
/// run gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub value: Option<f64>,
    pub wrong: u64,
}

impl Cell {
    pub fn value(v: f64) -> Cell {
        Cell {
            value: Some(v),
            wrong: 0,
        }
    }

    pub const MISSING: Cell = Cell {
        value: None,
        wrong: 0,
    };
}

/// [`bar_chart`] whose cells may be missing or wrong: a missing cell is
/// drawn as a "×" on the axis instead of a bar of height 0 (which would read
/// as "measured, and zero"), and a cell with wrong answers as a pale bar
/// under a "✗", so that a fast wrong index does not look like a winner; a
/// line under the chart says what the marks mean when any is drawn.
pub fn bar_chart_cells(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<Cell>)],
) -> String {
    let y = YAxis::fit(
        &series
            .iter()
            .flat_map(|s| s.1.iter().filter_map(|c| c.value))
            .collect::<Vec<_>>(),
        false,
    );
    let y_max = match y {
        YAxis::Linear { max, .. } => max,
        YAxis::Log { .. } => unreachable!("bar charts are linear"),
    };
    let mut svg = String::new();
    frame(&mut svg, title, "", y_label, y, &fmt_num);
    let cs = colors(series.iter().map(|s| s.0.as_str()));
    let gw = (W - R - L) / categories.len().max(1) as f64;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    let (mut any_missing, mut any_wrong) = (false, false);
    for (ci, cat) in categories.iter().enumerate() {
        let gx = L + gw * ci as f64 + gw * 0.1;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            gx + gw * 0.4,
            H - B + 16.0,
            esc(cat)
        );
        for (si, (_, cells)) in series.iter().enumerate() {
            let x = gx + bw * si as f64;
            let cell = cells.get(ci).copied().unwrap_or(Cell::MISSING);
            let Some(v) = cell.value.filter(|v| v.is_finite()) else {
                any_missing = true;
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{}">×<title>not measured</title></text>"#,
                    x + bw / 2.0,
                    H - B - 3.0,
                    cs[si],
                );
                continue;
            };
            let h = v / y_max * (H - B - T);
            let (opacity, note) = if cell.wrong > 0 {
                any_wrong = true;
                (
                    r#" fill-opacity="0.35""#,
                    format!(" ({} wrong answers)", cell.wrong),
                )
            } else {
                ("", String::new())
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"{opacity}><title>{}{note}</title></rect>"#,
                x,
                H - B - h,
                bw.max(1.0),
                h,
                cs[si],
                fmt_num(v)
            );
            if cell.wrong > 0 {
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{}">✗</text>"#,
                    x + bw / 2.0,
                    H - B - h - 3.0,
                    cs[si],
                );
            }
        }
    }
    let items: Vec<(String, &str, bool)> = series
        .iter()
        .zip(&cs)
        .map(|(s, c)| (s.0.clone(), *c, false))
        .collect();
    legend(&mut svg, &items);
    let marks: Vec<&str> = [
        (any_wrong, "✗ pale bar: wrong answers (not comparable)"),
        (
            any_missing,
            "×: not measured (the index died or was left out)",
        ),
    ]
    .iter()
    .filter(|m| m.0)
    .map(|m| m.1)
    .collect();
    if !marks.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text>"#,
            (L + W - R) / 2.0,
            H - 12.0,
            esc(&marks.join("; "))
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_draws_one_polyline_per_series() {
        let s = vec![
            Series::new("a<b", vec![(8.0, 1.0), (64.0, 2.0)]),
            Series::new("c", vec![(8.0, 0.5)]),
        ];
        let svg = line_chart("t", "x", "y", &s, true);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn bar_chart_draws_a_bar_per_cell() {
        let svg = bar_chart(
            "t",
            "Mops/s",
            &["lookup".into(), "insert".into()],
            &[("x".into(), vec![1.0, 2.0]), ("y".into(), vec![3.0, 0.0])],
        );
        assert_eq!(svg.matches("<rect x=").count(), 4 + 2); // 4 bars + 2 legend swatches
    }

    #[test]
    fn missing_and_wrong_cells_are_marked_not_drawn_as_plain_bars() {
        let cells = vec![
            (
                "x".to_string(),
                vec![Cell::value(1.0), Cell::MISSING, Cell::value(f64::NAN)],
            ),
            (
                "y".to_string(),
                vec![
                    Cell {
                        value: Some(3.0),
                        wrong: 7,
                    },
                    Cell::value(2.0),
                ],
            ),
        ];
        let cats: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let svg = bar_chart_cells("t", "Mops/s", &cats, &cells);
        // Bars for the three measured cells only, plus two legend swatches.
        assert_eq!(svg.matches("<rect x=").count(), 3 + 2);
        // x's two unmeasured cells and y's third (absent) one.
        assert_eq!(svg.matches("<title>not measured</title>").count(), 3);
        assert_eq!(svg.matches("fill-opacity=\"0.35\"").count(), 1);
        assert!(svg.contains("3.0 (7 wrong answers)"));
        assert!(svg.contains("✗ pale bar: wrong answers") && svg.contains("×: not measured"));
        // The axis fits the measured values (3.0), not NaN.
        assert!(!svg.contains("NaN"));
        // A chart without marks has no legend line for them.
        let plain = bar_chart("t", "y", &cats[..1], &[("x".into(), vec![1.0])]);
        assert!(!plain.contains("not measured") && !plain.contains("wrong answers"));
    }

    #[test]
    fn nice_max_rounds_up() {
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(101.0), 200.0);
    }

    #[test]
    fn an_index_has_the_same_colour_in_every_chart() {
        let a = colors(["btreemap", "ferrite", "log-a"]);
        let b = colors(["log-b", "redb", "ferrite", "btreemap"]);
        assert_eq!(a[1], b[2]);
        assert_eq!(a[0], b[3]);
        assert_eq!(a[1], index_color("ferrite").unwrap());
        // Other series never take an index's colour, and equal keys share one.
        let c = colors(["x", "y", "x"]);
        assert!(c.iter().all(|c| INDEX_COLORS.iter().all(|(_, i)| i != c)));
        assert_eq!(c[0], c[2]);
        assert_ne!(c[0], c[1]);
        let bars = bar_chart("t", "y", &["a".into()], &[("redb".into(), vec![1.0])]);
        assert!(bars.contains(index_color("redb").unwrap()));
    }

    #[test]
    fn a_linear_axis_ends_just_above_the_data() {
        assert_eq!(
            YAxis::fit(&[2.67, 1.0], false),
            YAxis::Linear {
                max: 3.0,
                step: 1.0
            }
        );
        let y = YAxis::fit(&[101.0], false);
        assert_eq!(y.ticks().last().copied(), Some(125.0));
        assert!(y.frac(101.0) <= 1.0);
        assert_eq!(YAxis::fit(&[], false).ticks(), vec![0.0, 1.0]);
    }

    #[test]
    fn a_log_axis_spans_the_decades_of_the_data() {
        let y = YAxis::fit(&[420.0, 950.0, 2_000.0, 30_000.0], true);
        assert_eq!(y, YAxis::Log { lo: 2.0, hi: 5.0 });
        let t = y.ticks();
        assert_eq!(t.first().copied(), Some(100.0));
        assert_eq!(t.last().copied(), Some(100_000.0));
        // Every data point is inside the plot.
        for v in [420.0, 950.0, 2_000.0, 30_000.0] {
            let f = y.frac(v);
            assert!((0.0..=1.0).contains(&f), "{v} at {f}");
        }
        // Narrow data gets intermediate ticks.
        let y = YAxis::fit(&[300.0, 900.0], true);
        assert_eq!(y, YAxis::Log { lo: 2.0, hi: 3.0 });
        assert!(y.ticks().contains(&500.0));
    }

    #[test]
    fn a_log_chart_labels_its_ticks_in_units() {
        let s = vec![
            Series::new("ferrite lookup", vec![(0.0, 400.0), (1.0, 2500.0)])
                .keyed("ferrite")
                .dashed(true),
        ];
        let mut c = LineChart::new("t", "x", "y");
        c.log_y = true;
        c.y_format = Some(&fmt_ns_tick);
        c.x_ticks = Some(vec![(0.0, "p50".into()), (1.0, "p99".into())]);
        let svg = c.draw(&s);
        assert!(svg.contains(">100 ns<") && svg.contains(">10 µs<") && svg.contains(">1 µs<"));
        assert!(svg.contains(">p99<"));
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains(index_color("ferrite").unwrap()));
    }

    #[test]
    fn durations_get_short_units() {
        assert_eq!(fmt_ns(421.0), "421 ns");
        assert_eq!(fmt_ns(1323.0), "1.3 µs");
        assert_eq!(fmt_ns(35_677.0), "36 µs");
        assert_eq!(fmt_ns(4_063_089.0), "4.1 ms");
        assert_eq!(fmt_ns(12_068_149.0), "12 ms");
    }
}
