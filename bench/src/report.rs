//! The bench's output: Markdown tables on stdout, the same figures as JSON, and an SVG chart of the hedging
//! scenario's latency distributions (plotters).

use std::path::Path;

use plotters::prelude::*;
use serde_json::json;

/// One measured line: a value per column (missing where a column does not apply).
pub(crate) struct Row {
    pub(crate) label: String,
    pub(crate) unit: &'static str,
    pub(crate) values: Vec<Option<f64>>,
    /// Ratios or remarks, printed in the last column.
    pub(crate) note: String,
}

/// A scenario's results.
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) columns: Vec<String>,
    pub(crate) rows: Vec<Row>,
}

impl Table {
    pub(crate) fn new(title: &str, columns: &[&str]) -> Table {
        Table {
            title: title.to_owned(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// The table in Markdown.
    pub(crate) fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n| |", self.title);
        for c in &self.columns {
            out.push_str(&format!(" {c} |"));
        }
        out.push_str(" |\n|---|");
        for _ in &self.columns {
            out.push_str("---:|");
        }
        out.push_str("---|\n");
        for r in &self.rows {
            out.push_str(&format!("| {} |", r.label));
            for v in &r.values {
                match v {
                    Some(v) => out.push_str(&format!(" {} {} |", format_value(*v), r.unit)),
                    None => out.push_str(" – |"),
                }
            }
            out.push_str(&format!(" {} |\n", r.note));
        }
        out
    }

    /// The table as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "title": self.title,
            "columns": self.columns,
            "rows": self.rows.iter().map(|r| json!({
                "label": r.label,
                "unit": r.unit,
                "values": r.values,
                "note": r.note,
            })).collect::<Vec<_>>(),
        })
    }
}

fn format_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The median of `samples` (0 for none).
pub(crate) fn median(samples: &[f64]) -> f64 {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    }
}

/// Writes every table as one JSON document.
pub(crate) fn write_json(
    path: &Path,
    tables: &[Table],
    meta: serde_json::Value,
) -> Result<(), String> {
    let doc = json!({
        "meta": meta,
        "tables": tables.iter().map(Table::json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Points of a curve: (latency in µs, fraction of calls slower).
type Curve = Vec<(f64, f64)>;

/// The fraction of `sorted` above each of its values: the survival curve, thinned to about 400 points.
fn survival(sorted: &[u64]) -> Curve {
    let n = sorted.len();
    let step = (n / 400).max(1);
    (0..n)
        .step_by(step)
        .chain(std::iter::once(n.saturating_sub(1)))
        .map(|i| {
            let x = sorted[i].max(1) as f64;
            let above = (n - i - 1) as f64 / n as f64;
            (x, above.max(1.0 / (10.0 * n as f64)))
        })
        .collect()
}

/// The hedging chart: how many calls are slower than each latency, without and with hedging, and what
/// theory predicts, on log-log axes.
pub(crate) fn hedging_chart(
    path: &Path,
    unhedged: &[u64],
    hedged: &[u64],
    theory: &[(f64, f64)],
    delay: u64,
) -> Result<(), String> {
    if unhedged.is_empty() || hedged.is_empty() {
        return Err("no samples for the chart".into());
    }
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max_x = unhedged
        .iter()
        .chain(hedged)
        .copied()
        .max()
        .unwrap_or(1)
        .max(1000) as f64
        * 1.2;
    let n = unhedged.len().max(hedged.len()) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Hedging on a long tail: calls slower than x (hedging delay {delay} µs)"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d((100f64..max_x).log_scale(), (0.1 / n..1f64).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("latency (µs)")
        .y_desc("fraction of calls slower")
        .draw()
        .map_err(|e| err(&e))?;
    let series = [
        ("no hedging", survival(unhedged), RGBColor(200, 40, 40)),
        ("hedging at p95", survival(hedged), RGBColor(30, 100, 200)),
        ("theory", theory.to_vec() as Curve, RGBColor(90, 90, 90)),
    ];
    for (name, points, color) in series {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The theoretical hedged survival curve from the unhedged sample: P(min(L1, delay + L2) > x).
pub(crate) fn theory_curve(unhedged: &[u64], delay: u64) -> Vec<(f64, f64)> {
    let n = unhedged.len() as f64;
    if unhedged.is_empty() {
        return Vec::new();
    }
    let survival = |t: u64| (unhedged.len() - unhedged.partition_point(|&x| x <= t)) as f64 / n;
    let max = unhedged.last().copied().unwrap_or(1) + delay;
    let mut out = Vec::new();
    let mut x = 100f64;
    while x <= max as f64 * 1.05 {
        let t = x as u64;
        let s = if t < delay {
            survival(t)
        } else {
            survival(t) * survival(t - delay)
        };
        out.push((x, s.max(0.1 / n)));
        x *= 1.03;
    }
    out
}

/// One side-by-side line: a value per client, medians over the repetitions.
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) unit: &'static str,
    pub(crate) higher_is_better: bool,
    pub(crate) samples: Vec<Vec<f64>>,
}

impl Line {
    pub(crate) fn new(
        label: impl Into<String>,
        unit: &'static str,
        higher_is_better: bool,
    ) -> Line {
        Line {
            label: label.into(),
            unit,
            higher_is_better,
            samples: vec![Vec::new(); 3],
        }
    }

    /// The medians, with grpc-channel's over each other client's and the direction that is better.
    pub(crate) fn row(&self) -> Row {
        let values: Vec<f64> = self.samples.iter().map(|s| median(s)).collect();
        let ratio = |other: f64| values[0] / other;
        Row {
            label: self.label.clone(),
            unit: self.unit,
            values: values.iter().map(|v| Some(*v)).collect(),
            note: format!(
                "{:.2}x tonic, {:.2}x raw h2 ({})",
                ratio(values[1]),
                ratio(values[2]),
                if self.higher_is_better {
                    "↑ better"
                } else {
                    "↓ better"
                }
            ),
        }
    }
}
