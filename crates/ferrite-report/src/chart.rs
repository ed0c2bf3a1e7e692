//! Minimal SVG charts (line and grouped bar), written without dependencies so
//! every benchmark can drop a picture beside its table.

use std::fmt::Write as _;

/// A named line of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const L: f64 = 70.0;
const R: f64 = 190.0;
const T: f64 = 40.0;
const B: f64 = 50.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

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

fn frame(svg: &mut String, title: &str, x_label: &str, y_label: &str, y_max: f64) {
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
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let y = H - B - (H - B - T) * i as f64 / 5.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{L}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            W - R,
            L - 6.0,
            y + 4.0,
            fmt_num(v)
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

fn fmt_num(v: f64) -> String {
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

fn legend(svg: &mut String, names: &[String]) {
    for (i, n) in names.iter().enumerate() {
        let y = T + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            W - R + 12.0,
            y - 10.0,
            COLORS[i % COLORS.len()],
            W - R + 30.0,
            y,
            esc(n)
        );
    }
}

/// A line chart; `log_x` spaces x logarithmically (sizes that double).
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> String {
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .collect();
    let tx = |x: f64| if log_x { x.max(1e-9).log2() } else { x };
    let (x0, x1) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(tx(x)), b.max(tx(x)))
        });
    let (x0, x1) = if x0.is_finite() && x1 > x0 {
        (x0, x1)
    } else {
        (x0.min(0.0), x0.max(0.0) + 1.0)
    };
    let y_max = nice_max(ys.iter().cloned().fold(0.0, f64::max));
    let px = |x: f64| L + (tx(x) - x0) / (x1 - x0) * (W - R - L);
    let py = |y: f64| H - B - y / y_max * (H - B - T);
    let mut svg = String::new();
    frame(&mut svg, title, x_label, y_label, y_max);
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let step = (ticks.len() / 12).max(1);
    for x in ticks.iter().step_by(step) {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(*x),
            H - B + 16.0,
            fmt_num(*x)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for &(x, y) in &s.points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(x),
                py(y)
            );
        }
    }
    legend(
        &mut svg,
        &series.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
    );
    svg.push_str("</svg>\n");
    svg
}

/// A grouped bar chart: one group per category, one bar per series.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.1.iter().cloned())
            .fold(0.0, f64::max),
    );
    let mut svg = String::new();
    frame(&mut svg, title, "", y_label, y_max);
    let gw = (W - R - L) / categories.len().max(1) as f64;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    for (ci, cat) in categories.iter().enumerate() {
        let gx = L + gw * ci as f64 + gw * 0.1;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            gx + gw * 0.4,
            H - B + 16.0,
            esc(cat)
        );
        for (si, (_, vals)) in series.iter().enumerate() {
            let v = vals.get(ci).copied().unwrap_or(0.0);
            let h = v / y_max * (H - B - T);
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                gx + bw * si as f64,
                H - B - h,
                bw.max(1.0),
                h,
                COLORS[si % COLORS.len()],
                fmt_num(v)
            );
        }
    }
    legend(
        &mut svg,
        &series.iter().map(|s| s.0.clone()).collect::<Vec<_>>(),
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_draws_one_polyline_per_series() {
        let s = vec![
            Series {
                name: "a<b".into(),
                points: vec![(8.0, 1.0), (64.0, 2.0)],
            },
            Series {
                name: "c".into(),
                points: vec![(8.0, 0.5)],
            },
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
    fn nice_max_rounds_up() {
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(101.0), 200.0);
    }
}
