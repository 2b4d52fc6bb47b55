//! `halctl bench --plot PATH`: an SVG of each scenario's p50 (bar) and p99
//! (whisker) beside its baseline's, on a logarithmic time axis. Plain SVG
//! text, no plotting library.

use std::fmt::Write;

use super::report::Line;
use crate::out;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 250.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 70.0;
const ROW: f64 = 40.0;
const BAR: f64 = 12.0;
const HAL: &str = "#2b6cb0";
const BASE: &str = "#a0aec0";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG document for `lines`.
pub fn svg(lines: &[Line], title: &str) -> String {
    let values = lines.iter().flat_map(|l| {
        [
            Some(l.p50_ns),
            Some(l.p99_ns),
            l.baseline_p50_ns,
            l.baseline_p99_ns,
        ]
        .into_iter()
        .flatten()
    });
    let (lo, hi) = values
        .filter(|&v| v > 0)
        .fold((u64::MAX, 1u64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let lo_exp = (lo.max(1) as f64).log10().floor().min(2.0) as i32;
    let hi_exp = ((hi as f64).log10().ceil() as i32).max(lo_exp + 1);
    let plot_w = WIDTH - LEFT - RIGHT;
    let x = |ns: u64| -> f64 {
        let v = (ns.max(1) as f64)
            .log10()
            .clamp(lo_exp as f64, hi_exp as f64);
        LEFT + (v - lo_exp as f64) / (hi_exp - lo_exp) as f64 * plot_w
    };
    let height = TOP + ROW * lines.len() as f64 + 50.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="34" width="12" height="10" fill="{HAL}"/><text x="{}" y="43">hal p50 (bar), p99 (whisker)</text><rect x="{}" y="34" width="12" height="10" fill="{BASE}"/><text x="{}" y="43">baseline, same run</text>"#,
        LEFT + 16.0,
        LEFT + 220.0,
        LEFT + 236.0
    );
    let bottom = TOP + ROW * lines.len() as f64;
    for e in lo_exp..=hi_exp {
        let gx = x(10u64.saturating_pow(e as u32));
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{bottom}" stroke="#e2e8f0"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle" fill="#4a5568">{}</text>"##,
            bottom + 16.0,
            esc(&out::nanos(10u64.saturating_pow(e as u32)))
        );
    }
    for (i, l) in lines.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 8.0,
            y + ROW / 2.0 + 4.0,
            esc(&l.label())
        );
        let mut bar = |yy: f64, p50: u64, p99: u64, color: &str| {
            let x0 = LEFT;
            let x50 = x(p50);
            let x99 = x(p99.max(p50));
            let mid = yy + BAR / 2.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="{yy:.1}" width="{:.1}" height="{BAR}" fill="{color}"/><line x1="{x50:.1}" y1="{mid:.1}" x2="{x99:.1}" y2="{mid:.1}" stroke="{color}" stroke-width="2"/><line x1="{x99:.1}" y1="{:.1}" x2="{x99:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"/>"#,
                (x50 - x0).max(1.0),
                yy + 2.0,
                yy + BAR - 2.0
            );
        };
        bar(y + 6.0, l.p50_ns, l.p99_ns, HAL);
        if let (Some(b50), Some(b99)) = (l.baseline_p50_ns, l.baseline_p99_ns) {
            bar(y + 6.0 + BAR + 2.0, b50, b99, BASE);
        }
        let summary = match (l.gbps, l.baseline_gbps, l.ratio_p50) {
            (Some(g), Some(b), Some(r)) => format!("{g:.1} vs {b:.1} GB/s ({r:.2}x)"),
            (_, _, Some(r)) => format!(
                "{} vs {} ({r:.2}x)",
                out::nanos(l.p50_ns),
                out::nanos(l.baseline_p50_ns.unwrap_or(0))
            ),
            _ => format!("p50 {}", out::nanos(l.p50_ns)),
        };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            WIDTH - RIGHT + 8.0,
            y + ROW / 2.0 + 4.0,
            esc(&summary)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" fill="#4a5568">time per operation, logarithmic (read-bandwidth: time of one pass)</text>"##,
        bottom + 36.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{summarize, Line};

    #[test]
    fn svg_has_a_row_per_line() {
        let v = summarize(vec![100, 200, 5000]);
        let lines = vec![
            Line::new("export", "cpu-shm", v, Some(("raw <memfd>", v))),
            Line::new("import-cached", "cpu-shm", v, None),
        ];
        let doc = svg(&lines, "t & t");
        assert!(doc.starts_with("<svg"));
        assert!(doc.trim_end().ends_with("</svg>"));
        assert!(doc.contains("import-cached"));
        assert!(doc.contains("t &amp; t"));
        assert_eq!(doc.matches("<rect").count(), 3 + 3);
    }
}
