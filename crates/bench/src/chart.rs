//! The two SVG charts for docs/BENCHMARKS.md, drawn with plotters' SVG
//! backend only: text goes out as SVG `<text>` and its size is estimated
//! without a font library, so nothing links fontconfig or freetype.

use plotters::prelude::*;

use crate::error::BenchError;
use crate::peers::PeerReport;
use crate::report::{BatchRow, OverheadRow};

fn chart_error(what: &str, error: impl std::fmt::Display) -> BenchError {
    BenchError::Output {
        what: what.to_owned(),
        detail: error.to_string(),
    }
}

/// Both charts have N on a log scale; the value axis is linear
/// (speed-up) or logarithmic (overhead, `LogCoord`).
type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, Y>>;

/// One labelled series: a line through `points` with a dot at each.
fn draw_line<Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'_, '_, Y>,
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
fn draw_legend<'a, 'b: 'a, Y: Ranged<ValueType = f64>>(
    chart: &mut Chart<'a, 'b, Y>,
    what: &str,
) -> Result<(), BenchError> {
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

/// Overhead per tool call against N, for HomeAgent and each peer that
/// ran: the input's overhead (reply time − mock time, two model turns)
/// divided by N, on a log scale because the frameworks differ by orders of
/// magnitude. At N = 1 it is the whole cost of a one-call input; at large N
/// it tends to the marginal cost of one more call.
pub fn overhead_svg(rows: &[OverheadRow], peers: &[PeerReport]) -> Result<String, BenchError> {
    let what = "the overhead chart";
    let series: Vec<(String, Vec<(f64, f64)>)> = std::iter::once((
        "HomeAgent".to_owned(),
        rows.iter()
            .map(|r| (r.n as f64, r.per_input_us / r.n.max(1) as f64))
            .collect::<Vec<_>>(),
    ))
    .chain(peers.iter().filter(|p| !p.overhead.is_empty()).map(|p| {
        (
            format!("{} {}", p.framework, p.version.as_deref().unwrap_or("")),
            p.overhead
                .iter()
                .map(|r| (r.n as f64, r.per_input_us / r.n.max(1) as f64))
                .collect(),
        )
    }))
    .map(|(name, points)| {
        // A log axis cannot show zero or less (a noisy run can give that).
        let kept = points.into_iter().filter(|(_, y)| *y > 0.0).collect();
        (name, kept)
    })
    .collect();
    let all_y = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y));
    let top = all_y.clone().fold(10.0_f64, f64::max) * 2.0;
    let bottom = all_y.fold(top, f64::min).min(top / 10.0) / 2.0;
    let max_n = rows.iter().map(|r| r.n).max().unwrap_or(1).max(2) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| chart_error(what, e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "homeagent bench: overhead per tool call (zero-delay mock)",
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (0.8_f64..max_n * 1.25).log_scale(),
                (bottom..top).log_scale(),
            )
            .map_err(|e| chart_error(what, e))?;
        chart
            .configure_mesh()
            .x_desc("N (instant tools per batch)")
            .y_desc("(reply − mock time) / N, µs (log)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| chart_error(what, e))?;
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN];
        for (i, (name, points)) in series.iter().enumerate() {
            draw_line(&mut chart, what, points, colors[i % colors.len()], 4, name)?;
        }
        draw_legend(&mut chart, what)?;
        root.present().map_err(|e| chart_error(what, e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{Framework, PeerOverheadRow};
    use crate::report::Status;

    fn row(n: usize, per_input_us: f64) -> OverheadRow {
        OverheadRow {
            n,
            rounds: 1,
            per_input_us,
            per_turn_us: per_input_us / 2.0,
            per_call_us: None,
            median_reply_us: 0.0,
            median_mock_us: 0.0,
            switches_per_input: None,
            cpu_us_per_input: None,
            status: Status::Ok,
            problems: Vec::new(),
        }
    }

    #[test]
    fn the_overhead_chart_has_a_series_per_framework_that_ran() {
        let mut ran = PeerReport::new(Framework::LangGraph);
        ran.version = Some("1.2.22".into());
        ran.overhead = vec![PeerOverheadRow {
            n: 8,
            rounds: 1,
            per_input_us: 80_000.0,
            per_turn_us: 40_000.0,
            per_call_us: None,
            per_input_vs_homeagent: None,
            per_call_vs_homeagent: None,
            status: Status::Ok,
            problems: Vec::new(),
        }];
        let skipped = PeerReport::skipped(Framework::OpenAiAgents, "no python");
        let svg = overhead_svg(&[row(1, 3_000.0), row(8, 4_000.0)], &[ran, skipped]).unwrap();
        // plotters writes each label as a line of its own inside <text>.
        let has_label = |label: &str| svg.lines().any(|l| l.trim() == label);
        assert!(has_label("HomeAgent"), "{svg}");
        assert!(has_label("langgraph 1.2.22"), "{svg}");
        assert!(!svg.contains("openai-agents"), "{svg}");
    }
}
