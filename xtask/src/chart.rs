//! Line charts for the benchmark report (plotters, SVG): a value against message size, one
//! line per series, sizes on a log2 axis.
use std::path::Path;

use plotters::prelude::*;

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
}
