//! Charts for the benchmark report (plotters, SVG): line charts of a value against message
//! size, one line per series, sizes on a log2 axis ([`draw`], perftest's); and any bench's
//! comparison JSON as grouped bars, ours beside the baseline per row ([`comparison`]).
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

use crate::util::{Error, Result};

/// One line: its name, `(size in bytes, value)` points, and whether it is a baseline (drawn
/// dashed in the same colour as the series it is compared with).
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points.
    pub points: Vec<(u64, f64)>,
    /// Colour index (ours and its baseline share one).
    pub color: usize,
    /// Dashed (the baseline).
    pub dashed: bool,
}

fn size_label(x: f64) -> String {
    let b = 2f64.powf(x).round() as u64;
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Draws `series` into an SVG at `path`; the y axis is logarithmic when `log_y`.
pub fn draw(path: &Path, title: &str, y_label: &str, series: &[Series], log_y: bool) -> Result<()> {
    let err = |e: String| Error::new(format!("chart {}: {e}", path.display()));
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    let (mut y0, mut y1) = (f64::MAX, f64::MIN);
    for &(x, y) in pts() {
        let lx = (x.max(1) as f64).log2();
        x0 = x0.min(lx);
        x1 = x1.max(lx);
        if y > 0.0 && y.is_finite() {
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 || y0 > y1 {
        return Err(err("no data".into()));
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    let xr = (x0 - 0.3)..(x1 + 0.3);
    macro_rules! body {
        ($chart:expr, $map:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc("message size [bytes]")
                .y_desc(y_label)
                .x_labels(12)
                .x_label_formatter(&|x| size_label(*x))
                .draw()
                .map_err(|e| err(e.to_string()))?;
            for s in series {
                let color = palette[s.color % palette.len()];
                let data: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .filter(|p| p.1 > 0.0 && p.1.is_finite())
                    .map(|&(x, y)| ((x.max(1) as f64).log2(), $map(y)))
                    .collect();
                let style = color.stroke_width(2);
                if s.dashed {
                    chart
                        .draw_series(DashedLineSeries::new(data.clone(), 6, 4, style))
                        .map_err(|e| err(e.to_string()))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1))
                        });
                } else {
                    chart
                        .draw_series(LineSeries::new(data.clone(), style))
                        .map_err(|e| err(e.to_string()))?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
                        });
                }
                chart
                    .draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| err(e.to_string()))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|e| err(e.to_string()))?;
        }};
    }
    if log_y {
        let c = b
            .build_cartesian_2d(xr, ((y0 * 0.8)..(y1 * 1.25)).log_scale())
            .map_err(|e| err(e.to_string()))?;
        body!(c, |y: f64| y);
    } else {
        let c = b
            .build_cartesian_2d(xr, 0f64..(y1 * 1.15))
            .map_err(|e| err(e.to_string()))?;
        body!(c, |y: f64| y);
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// One row of a comparison chart, read from the JSON.
struct Bar {
    label: String,
    ours: f64,
    baseline: f64,
    ratio: f64,
    /// `≤ 1.25×` or `≥ 0.90×`, and whether the ratio met it; none without a goal.
    goal: Option<(String, bool)>,
}

/// The rows of one unit: one panel of the chart, with its own axis.
struct Panel {
    caption: String,
    bars: Vec<Bar>,
}

/// Pixels per row of a panel, and a panel's caption and axis around its rows.
const ROW_PX: u32 = 52;
const PANEL_PX: u32 = 96;
const WIDTH_PX: u32 = 1000;
const HEAD_PX: u32 = 64;
const OURS: RGBColor = RGBColor(31, 119, 180);
const BASELINE: RGBColor = RGBColor(150, 150, 150);

/// A number in a few significant digits.
fn short(x: f64) -> String {
    match x.abs() {
        a if !a.is_finite() => "-".into(),
        a if a >= 100.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        a if a >= 0.1 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

/// An axis tick: a round number, thousands and millions shortened.
fn tick(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    match x.abs() {
        a if a >= 1e6 => format!("{}M", round(x / 1e6)),
        a if a >= 1e4 => format!("{}k", round(x / 1e3)),
        a if a >= 1.0 && x.fract() == 0.0 => format!("{x:.0}"),
        _ => short(x),
    }
}

/// [`short`] without trailing zeros after the point.
fn round(x: f64) -> String {
    let s = short(x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The baseline's program: its name up to the first `(` or `,` (the rest says how it ran).
fn program(name: &str) -> &str {
    let end = name.find(['(', ',']).unwrap_or(name.len());
    name[..end].trim()
}

/// The rows of a comparison document grouped by unit, in the order they first appear.
fn panels(doc: &Value) -> Vec<Panel> {
    let rows = doc["comparisons"].as_array().map_or(&[][..], Vec::as_slice);
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut units: Vec<String> = Vec::new();
    for r in rows {
        if !units.contains(&text(&r["unit"])) {
            units.push(text(&r["unit"]));
        }
    }
    units
        .into_iter()
        .map(|unit| {
            let mine: Vec<&Value> = rows.iter().filter(|r| text(&r["unit"]) == unit).collect();
            let same = |k: &str| mine.iter().all(|r| r[k] == mine[0][k]);
            let one_metric = same("metric");
            let mut caption = if one_metric {
                format!("{} [{unit}]", text(&mine[0]["metric"]))
            } else {
                format!("[{unit}]")
            };
            if same("better") {
                caption.push_str(&format!(", {} is better", text(&mine[0]["better"])));
            }
            let bars = mine
                .iter()
                .map(|r| {
                    let (ours, baseline) = (num(&r["ours"]), num(&r["baseline"]));
                    let ratio = r["ratio"].as_f64().unwrap_or(ours / baseline);
                    let lower = r["better"] != "higher";
                    let goal = r["goal"].as_f64().filter(|g| g.is_finite()).map(|g| {
                        let met = if lower { ratio <= g } else { ratio >= g };
                        (format!("{} {g:.2}×", if lower { "≤" } else { "≥" }), met)
                    });
                    let mut label = text(&r["case"]);
                    if !one_metric {
                        label.push_str(&format!(", {}", text(&r["metric"])));
                    }
                    let against = program(r["baseline_name"].as_str().unwrap_or(""));
                    if !against.is_empty() {
                        label.push_str(&format!("  (vs {against})"));
                    }
                    Bar {
                        label,
                        ours,
                        baseline,
                        ratio,
                        goal,
                    }
                })
                .collect();
            Panel { caption, bars }
        })
        .collect()
}

/// Draws a bench's comparison report (`target/bench/NAME.json`, parsed) as grouped horizontal
/// bars into an SVG at `path`: for each row its case (and the baseline's program), ours above
/// the baseline, and the ratio ours / baseline with both values and the goal, if any (in red
/// when missed). Rows are grouped by unit into panels of their own axis, each logarithmic when
/// its values span more than two decades. A value that is missing or not finite has no bar.
pub fn comparison(doc: &Value, path: &Path) -> Result<()> {
    render(doc, path).map_err(|e| Error::new(format!("chart {}: {e}", path.display())))
}

/// [`comparison`], with plotters' errors as text.
fn render(doc: &Value, path: &Path) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let panels = panels(doc);
    if panels.is_empty() {
        return Err("no comparisons".into());
    }
    let height = HEAD_PX
        + panels
            .iter()
            .map(|p| PANEL_PX + ROW_PX * p.bars.len() as u32)
            .sum::<u32>();
    let root = SVGBackend::new(path, (WIDTH_PX, height)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let head = |size| {
        ("sans-serif", size)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Top))
    };
    let bench = doc["bench"].as_str().unwrap_or("?");
    let title = format!("{bench}: ours beside the baseline, ratio = ours / baseline");
    root.draw_text(&title, &head(20), (12, 8)).map_err(e)?;
    let device = format!("device: {}", doc["device"].as_str().unwrap_or("?"));
    root.draw_text(&device, &head(12), (12, 36)).map_err(e)?;
    for (i, (name, color)) in [("ours", OURS), ("baseline", BASELINE)]
        .into_iter()
        .enumerate()
    {
        let x = WIDTH_PX as i32 - 220 + 100 * i as i32;
        root.draw(&Rectangle::new([(x, 12), (x + 14, 26)], color.filled()))
            .map_err(e)?;
        root.draw_text(name, &head(14), (x + 20, 12)).map_err(e)?;
    }
    let mut rest = root.clone().margin(HEAD_PX, 0, 0, 0);
    for p in &panels {
        let (area, below) = rest.split_vertically(PANEL_PX + ROW_PX * p.bars.len() as u32);
        rest = below;
        let values = || {
            p.bars
                .iter()
                .flat_map(|b| [b.ours, b.baseline])
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let lo = values().fold(f64::INFINITY, f64::min);
        let hi = values().fold(0.0, f64::max);
        if hi <= 0.0 {
            bars_panel(&area, 0.0..1.0, 0.0, p)?;
        } else if hi / lo > 100.0 {
            // Room right of the longest bar for its label: nearly half as many decades again.
            let (a, b) = (lo.log10().floor(), hi.log10());
            let (bottom, top) = (10f64.powf(a), 10f64.powf(b + (b - a) * 0.45));
            bars_panel(&area, (bottom..top).log_scale(), bottom, p)?;
        } else {
            bars_panel(&area, 0.0..hi * 1.6, 0.0, p)?;
        }
    }
    root.present().map_err(e)
}

/// One panel of [`comparison`]: its rows top down on an x axis `x` whose bars start at `start`.
fn bars_panel<X>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    x: X,
    start: f64,
    p: &Panel,
) -> std::result::Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let n = p.bars.len();
    let mut chart = ChartBuilder::on(area)
        .caption(&p.caption, ("sans-serif", 16))
        .margin(12)
        .margin_left(16)
        .x_label_area_size(30)
        .y_label_area_size(4)
        .build_cartesian_2d(x, 0f64..n as f64)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_labels(8)
        .x_label_formatter(&|v| tick(*v))
        .x_label_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(e)?;
    let label = ("sans-serif", 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Top));
    for (i, b) in p.bars.iter().enumerate() {
        // Row i from the top: its band is y .. y + 1.
        let y = (n - 1 - i) as f64;
        chart
            .draw_series([EmptyElement::at((start, y + 0.97))
                + Text::new(b.label.clone(), (4, 0), label.clone())])
            .map_err(e)?;
        for (v, color, y0) in [(b.ours, OURS, y + 0.36), (b.baseline, BASELINE, y + 0.08)] {
            if v.is_finite() && v > start {
                chart
                    .draw_series([Rectangle::new(
                        [(start, y0), (v, y0 + 0.26)],
                        color.filled(),
                    )])
                    .map_err(e)?;
            }
        }
        let end = [b.ours, b.baseline]
            .into_iter()
            .filter(|v| v.is_finite() && *v > start)
            .fold(start, f64::max);
        let mut note = if b.ratio.is_finite() {
            format!(
                "{:.2}×  ({} / {})",
                b.ratio,
                short(b.ours),
                short(b.baseline)
            )
        } else {
            format!("no ratio  ({} / {})", short(b.ours), short(b.baseline))
        };
        let mut color = BLACK;
        if let Some((goal, met)) = &b.goal {
            note.push_str(&format!(
                ", goal {goal}{}",
                if *met { "" } else { " missed" }
            ));
            if !met {
                color = RED;
            }
        }
        let style = ("sans-serif", 13)
            .into_font()
            .color(&color)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart
            .draw_series([EmptyElement::at((end, y + 0.35)) + Text::new(note, (6, 0), style)])
            .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = std::env::temp_dir().join(format!("xtask-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.svg");
        let s = |name: &str, dashed, k: f64| Series {
            name: name.into(),
            points: vec![(2, 1.0 * k), (64, 2.0 * k), (1 << 20, 40.0 * k)],
            color: 0,
            dashed,
        };
        draw(
            &path,
            "t",
            "usec",
            &[s("ours", false, 1.0), s("base", true, 1.1)],
            true,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("ours") && svg.contains("base"));
        assert!(svg.contains("message size"), "x axis names sizes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_comparison_json_becomes_grouped_bars_with_ratios() {
        let dir = std::env::temp_dir().join(format!("xtask-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sample.svg");
        let row = |case: &str, unit: &str, ours: Value, baseline: f64, goal: Value| {
            serde_json::json!({"case": case, "metric": "m", "unit": unit, "ours": ours,
                "baseline": baseline, "baseline_name": "ib_send_bw -s 64 (MsgRate), 3 rounds",
                "ratio": ours.as_f64().map(|o| o / baseline), "better": "lower", "goal": goal})
        };
        let doc = serde_json::json!({"bench": "sample", "device": "rxe0", "comparisons": [
            row("small", "instructions", 294.0.into(), 320.0, 1.0.into()),
            row("large", "instructions", 3304.0.into(), 28.0, 1.25.into()),
            row("rate", "messages/s", 9000.0.into(), 10000.0, Value::Null),
            row("lost", "messages/s", Value::Null, 10000.0, Value::Null),
        ]});
        comparison(&doc, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.len() > 4000, "{}", svg.len());
        assert_eq!(
            svg.matches("<rect").count() - 1,
            2 + 7,
            "background, legend, bars"
        );
        for text in [
            "small  (vs ib_send_bw -s 64)",
            "0.92×",
            "118.00×",
            "goal ≤ 1.25× missed",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert!(svg.contains("messages/s") && svg.contains("no ratio"));
        assert!(comparison(&serde_json::json!({"bench": "x"}), &dir.join("none.svg")).is_err());
        if std::env::var_os("XTASK_KEEP_CHART").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
