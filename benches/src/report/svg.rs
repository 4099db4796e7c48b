//! The charts, hand-written SVG: throughput against claimers, one panel per backend, one line
//! per batch size (solid: broker, dashed: raw-SQL ceiling), one queue, log scales; and the
//! soak's curves over time ([`render_soak`]).

use std::fmt::Write;

use crate::backend::Backend;
use crate::report::{ClaimCell, Report};
use crate::soak::Sample;
use crate::stats::{rate, whole_i32};

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_T: f64 = 40.0;
const PLOT_W: f64 = 320.0;
const PLOT_H: f64 = 210.0;
const CLAIMERS: [usize; 4] = [1, 4, 16, 64];
const COLORS: [(usize, &str); 3] = [(1, "#1f77b4"), (10, "#ff7f0e"), (100, "#2ca02c")];

/// The y range in powers of ten covering every rate of the report.
fn decades(r: &Report) -> (i32, i32) {
    let rates: Vec<f64> = r
        .claims
        .iter()
        .flat_map(|c| [c.broker_rate(), c.raw_rate()])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rates.iter().copied().fold(0.0, f64::max);
    if rates.is_empty() {
        return (2, 6);
    }
    let (lo, hi) = (whole_i32(lo.log10().floor()), whole_i32(hi.log10().ceil()));
    (lo, hi.max(lo + 1))
}

/// Renders the chart for the one-queue cells of `r`.
pub fn render(r: &Report) -> String {
    let backends: Vec<Backend> =
        Backend::ALL.into_iter().filter(|b| r.claims.iter().any(|c| c.backend == *b)).collect();
    let cols = 2usize;
    let rows = backends.len().div_ceil(cols).max(1);
    let width = PANEL_W * cols as f64;
    let height = PANEL_H * rows as f64 + 40.0;
    let range = decades(r);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    legend(&mut out);
    for (i, backend) in backends.iter().enumerate() {
        let x0 = PANEL_W * (i % cols) as f64;
        let y0 = 40.0 + PANEL_H * (i / cols) as f64;
        panel(&mut out, r, *backend, (x0, y0), range);
    }
    out.push_str("</svg>\n");
    out
}

fn legend(out: &mut String) {
    let mut x = 20.0;
    for (batch, color) in COLORS {
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="20" x2="{}" y2="20" stroke="{color}" stroke-width="2"/><text x="{}" y="24">batch {batch}</text>"#,
            x + 24.0,
            x + 28.0
        );
        x += 100.0;
    }
    let _ = writeln!(
        out,
        r##"<line x1="{x}" y1="20" x2="{}" y2="20" stroke="#555" stroke-width="2" stroke-dasharray="5,4"/><text x="{}" y="24">raw-SQL ceiling</text>"##,
        x + 24.0,
        x + 28.0
    );
}

fn px(origin: (f64, f64), range: (i32, i32), claimers_index: usize, value: f64) -> (f64, f64) {
    let x = origin.0 + MARGIN_L + PLOT_W * claimers_index as f64 / (CLAIMERS.len() - 1) as f64;
    let span = f64::from(range.1 - range.0);
    let frac = ((value.max(1.0).log10() - f64::from(range.0)) / span).clamp(0.0, 1.0);
    (x, origin.1 + MARGIN_T + PLOT_H * (1.0 - frac))
}

fn panel(out: &mut String, r: &Report, backend: Backend, origin: (f64, f64), range: (i32, i32)) {
    let (x0, y0) = (origin.0 + MARGIN_L, origin.1 + MARGIN_T);
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-weight="bold" font-size="14">{backend}</text><rect x="{x0}" y="{y0}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#999"/>"##,
        x0,
        y0 - 10.0
    );
    for d in range.0..=range.1 {
        let (_, y) = px(origin, range, 0, 10f64.powi(d));
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            x0 + PLOT_W,
            x0 - 6.0,
            y + 4.0,
            rate(10f64.powi(d))
        );
    }
    for (i, c) in CLAIMERS.iter().enumerate() {
        let (x, _) = px(origin, range, i, 1.0);
        let _ = writeln!(
            out,
            r#"<text x="{x}" y="{}" text-anchor="middle">{c}</text>"#,
            y0 + PLOT_H + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">claimers (jobs/s on the left)</text>"#,
        x0 + PLOT_W / 2.0,
        y0 + PLOT_H + 34.0
    );
    for (batch, color) in COLORS {
        let cells = |raw: bool| -> Vec<(f64, f64)> {
            CLAIMERS
                .iter()
                .enumerate()
                .filter_map(|(i, n)| {
                    let c = find(r, backend, *n, batch)?;
                    let v = if raw { c.raw_rate() } else { c.broker_rate() }?;
                    Some(px(origin, range, i, v))
                })
                .collect()
        };
        line(out, &cells(false), color, false);
        line(out, &cells(true), color, true);
    }
}

fn find(r: &Report, backend: Backend, claimers: usize, batch: usize) -> Option<&ClaimCell> {
    r.claims.iter().find(|c| {
        c.backend == backend
            && c.spec.queues == 1
            && c.spec.claimers == claimers
            && c.spec.batch == batch
    })
}

fn line(out: &mut String, points: &[(f64, f64)], color: &str, dashed: bool) {
    if points.is_empty() {
        return;
    }
    let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let dash = if dashed { r#" stroke-dasharray="5,4""# } else { "" };
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
        path.join(" ")
    );
    if !dashed {
        for (x, y) in points {
            let _ = writeln!(out, r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#);
        }
    }
}

/// The soak chart's file name, written next to `performance.svg` and linked from the page.
pub const SOAK_CHART: &str = "soak.svg";

const SOAK_COLORS: [(Backend, &str); 4] = [
    (Backend::Memory, "#7f7f7f"),
    (Backend::Sqlite, "#1f77b4"),
    (Backend::Postgres, "#2ca02c"),
    (Backend::MySql, "#ff7f0e"),
];

/// One curve of a soak panel: its colour, dashed or not, and `(seconds, value)` points.
struct Curve {
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// Renders the soak's curves over time, three panels side by side with one line per backend:
/// p99 pickup latency (ms), the storage's size (MiB), and the tasks held (solid) with
/// PostgreSQL's dead tuples (dashed). Linear scales from zero.
pub fn render_soak(r: &Report) -> String {
    let width = PANEL_W * 3.0;
    let height = PANEL_H + 40.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let mut x = 20.0;
    for (backend, color) in SOAK_COLORS {
        if r.soaks.iter().any(|c| c.backend == backend) {
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="20" x2="{}" y2="20" stroke="{color}" stroke-width="2"/><text x="{}" y="24">{backend}</text>"#,
                x + 24.0,
                x + 28.0
            );
            x += 100.0;
        }
    }
    let x_max = r.soaks.iter().map(|c| c.spec.duration.as_secs_f64()).fold(1.0, f64::max);
    let ms = |s: &Sample| (s.pickup.n > 0).then_some(s.pickup.p99.as_secs_f64() * 1_000.0);
    let mib = |s: &Sample| s.size_bytes.map(|b| b as f64 / (1024.0 * 1024.0));
    let panels: [(&str, Vec<Curve>); 3] = [
        ("p99 pickup, ms", curves(r, ms, None)),
        ("storage size, MiB", curves(r, mib, None)),
        (
            "tasks held (solid), dead tuples (dashed)",
            curves(r, |s| Some(s.rows as f64), Some(|s: &Sample| s.dead_rows.map(|d| d as f64))),
        ),
    ];
    for (i, (title, curves)) in panels.iter().enumerate() {
        time_panel(&mut out, (PANEL_W * i as f64, 40.0), title, curves, x_max);
    }
    out.push_str("</svg>\n");
    out
}

/// One solid curve of `measure` per backend that ran, plus a dashed one of `dashed` where it
/// has values.
fn curves(
    r: &Report,
    measure: impl Fn(&Sample) -> Option<f64>,
    dashed: Option<fn(&Sample) -> Option<f64>>,
) -> Vec<Curve> {
    let mut out = Vec::new();
    for cell in &r.soaks {
        let Ok(samples) = &cell.samples else { continue };
        let color = SOAK_COLORS.iter().find(|(b, _)| *b == cell.backend).map_or("#000", |c| c.1);
        let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
            samples.iter().filter_map(|s| Some((s.at.as_secs_f64(), f(s)?))).collect()
        };
        out.push(Curve { color, dashed: false, points: series(&measure) });
        if let Some(d) = dashed {
            out.push(Curve { color, dashed: true, points: series(&d) });
        }
    }
    out.retain(|c| !c.points.is_empty());
    out
}

/// The smallest 1, 2 or 5 × 10ⁿ at or above `v` (1 for nothing to show).
pub fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 {
        return 1.0;
    }
    let decade = 10f64.powi(whole_i32(v.log10().floor()));
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * decade).find(|c| *c >= v).unwrap_or(v)
}

/// A tick label: whole numbers grouped by thousands, small ones with up to two decimals.
fn tick(v: f64) -> String {
    if v >= 100.0 || v == 0.0 {
        rate(v)
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn time_panel(out: &mut String, origin: (f64, f64), title: &str, curves: &[Curve], x_max: f64) {
    let (x0, y0) = (origin.0 + MARGIN_L, origin.1 + MARGIN_T);
    let y_max =
        nice_ceiling(curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)).fold(0.0, f64::max));
    let _ = writeln!(
        out,
        r##"<text x="{x0}" y="{}" font-weight="bold" font-size="14">{title}</text><rect x="{x0}" y="{y0}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#999"/>"##,
        y0 - 10.0
    );
    let minutes = x_max >= 120.0;
    for q in 0..=4 {
        let f = f64::from(q) / 4.0;
        let y = y0 + PLOT_H * (1.0 - f);
        let x = x0 + PLOT_W * f;
        let t = if minutes { x_max * f / 60.0 } else { x_max * f };
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            x0 + PLOT_W,
            x0 - 6.0,
            y + 4.0,
            tick(y_max * f),
            y0 + PLOT_H + 16.0,
            tick(t)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">time, {}</text>"#,
        x0 + PLOT_W / 2.0,
        y0 + PLOT_H + 34.0,
        if minutes { "min" } else { "s" }
    );
    for c in curves {
        let points: Vec<(f64, f64)> = c
            .points
            .iter()
            .map(|(t, v)| {
                (x0 + PLOT_W * (t / x_max).clamp(0.0, 1.0), y0 + PLOT_H * (1.0 - v / y_max))
            })
            .collect();
        let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let dash = if c.dashed { r#" stroke-dasharray="5,4""# } else { "" };
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"{dash}/>"#,
            path.join(" "),
            c.color
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings_are_one_two_or_five() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(12.0), 20.0);
        assert_eq!(nice_ceiling(500.0), 500.0);
        assert_eq!(nice_ceiling(501.0), 1_000.0);
        assert!((nice_ceiling(0.013) - 0.02).abs() < 1e-12);
    }

    #[test]
    fn the_soak_chart_draws_each_curve_of_each_backend_that_ran() {
        let chart = render_soak(&crate::report::markdown::tests::soak_report());
        assert!(chart.starts_with("<svg") && chart.ends_with("</svg>\n"));
        // p99 and size for SQLite and PostgreSQL, rows for both, dead tuples for PostgreSQL.
        assert_eq!(chart.matches("<polyline").count(), 7);
        assert_eq!(chart.matches("stroke-dasharray").count(), 1);
        for title in ["p99 pickup, ms", "storage size, MiB", "tasks held (solid)"] {
            assert!(chart.contains(title), "{title}");
        }
        // The failed MySQL run has a legend entry but no curve.
        assert!(chart.contains(">mysql</text>"));
        assert_eq!(chart.matches(r##"stroke="#ff7f0e" stroke-width="1.5""##).count(), 0);
    }
}
