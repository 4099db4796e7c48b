//! The chart: throughput against claimers, one panel per backend, one line per batch size
//! (solid: broker, dashed: raw-SQL ceiling), one queue, log scales. Hand-written SVG.

use std::fmt::Write;

use crate::backend::Backend;
use crate::report::{ClaimCell, Report};
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
