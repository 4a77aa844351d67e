//! The two SVG charts for docs/BENCHMARKS.md, drawn with plotters' SVG
//! backend only: text goes out as SVG `<text>` and its size is estimated
//! without a font library, so nothing links fontconfig or freetype.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::BenchError;
use crate::report::{BatchRow, OverheadRow};

fn chart_error(what: &str, error: impl std::fmt::Display) -> BenchError {
    BenchError::Output {
        what: what.to_owned(),
        detail: error.to_string(),
    }
}

/// Both charts: N on a log scale against a linear value.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, RangedCoordf64>>;

/// One labelled series: a line through `points` with a dot at each.
fn draw_line(
    chart: &mut Chart<'_, '_>,
    what: &str,
    points: &[(f64, f64)],
    color: RGBColor,
    dot: u32,
    label: &str,
) -> Result<(), BenchError> {
    chart
        .draw_series(LineSeries::new(points.to_vec(), color.stroke_width(2)))
        .map_err(|e| chart_error(what, e))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, dot, color.filled())))
        .map_err(|e| chart_error(what, e))?;
    Ok(())
}

/// The legend box, top left.
fn draw_legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, what: &str) -> Result<(), BenchError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| chart_error(what, e))
}

/// Measured and ideal speed-up against N (log scale).
pub fn speedup_svg(rows: &[BatchRow]) -> Result<String, BenchError> {
    let what = "the speed-up chart";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| chart_error(what, e))?;
        let max_n = rows.iter().map(|r| r.n).max().unwrap_or(2).max(2) as f64;
        let top = rows
            .iter()
            .map(|r| r.ideal.max(r.speedup))
            .fold(1.0_f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "homeagent bench: speed-up of a parallel batch",
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((1.0_f64..max_n * 1.2).log_scale(), 0.0_f64..top)
            .map_err(|e| chart_error(what, e))?;
        chart
            .configure_mesh()
            .x_desc("N (tools per batch)")
            .y_desc("serial time / parallel time")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| chart_error(what, e))?;
        let measured: Vec<(f64, f64)> = rows.iter().map(|r| (r.n as f64, r.speedup)).collect();
        let ideal: Vec<(f64, f64)> = rows.iter().map(|r| (r.n as f64, r.ideal)).collect();
        draw_line(
            &mut chart,
            what,
            &ideal,
            RED,
            3,
            "ideal (M + Σt) / (M + max t)",
        )?;
        draw_line(&mut chart, what, &measured, BLUE, 4, "measured (median)")?;
        draw_legend(&mut chart, what)?;
        root.present().map_err(|e| chart_error(what, e))?;
    }
    Ok(svg)
}

/// HomeAgent's overhead per input (two model turns) against N. The peers
/// would be further series; they are not measured yet.
pub fn overhead_svg(rows: &[OverheadRow]) -> Result<String, BenchError> {
    let what = "the overhead chart";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| chart_error(what, e))?;
        let max_n = rows.iter().map(|r| r.n).max().unwrap_or(1).max(2) as f64;
        let top = rows.iter().map(|r| r.per_input_us).fold(1.0_f64, f64::max) * 1.2 / 1000.0;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "homeagent bench: kernel overhead per input (zero-delay mock)",
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((0.8_f64..max_n * 1.25).log_scale(), 0.0_f64..top)
            .map_err(|e| chart_error(what, e))?;
        chart
            .configure_mesh()
            .x_desc("N (instant tools per batch)")
            .y_desc("reply time − mock time (ms)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|e| chart_error(what, e))?;
        let points: Vec<(f64, f64)> = rows
            .iter()
            .map(|r| (r.n as f64, r.per_input_us / 1000.0))
            .collect();
        draw_line(
            &mut chart,
            what,
            &points,
            BLUE,
            4,
            "HomeAgent (peers: not measured yet)",
        )?;
        draw_legend(&mut chart, what)?;
        root.present().map_err(|e| chart_error(what, e))?;
    }
    Ok(svg)
}
