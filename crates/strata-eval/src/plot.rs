//! The report's plot: accuracy and tokens read per query against haystack size (SVG, via
//! plotters; the text is SVG text, so no font files are needed).

use super::Report;
use plotters::prelude::*;
use std::path::Path;
use strata_core::error::{Error, Result};

fn perr(e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("cannot draw the plot: {e}"))
}

/// (haystack tokens, accuracy, tokens read) per size.
type Points = Vec<(f64, f64, f64)>;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws two panels into `path`: accuracy per needle task, and mean tokens read per query
/// next to the full context's size, both against haystack tokens (log scale).
pub fn svg(r: &Report, path: &Path) -> Result<()> {
    let tasks = [
        "single_needle",
        "needle_paraphrase",
        "multi_needle",
        "multi_hop",
    ];
    let series: Vec<(&str, Points)> = tasks
        .iter()
        .map(|t| {
            let pts = r
                .tasks
                .iter()
                .filter(|row| row.task == *t)
                .map(|row| (row.full_tokens as f64, row.accuracy, row.tokens_to_root))
                .collect();
            (*t, pts)
        })
        .filter(|(_, p): &(&str, Vec<_>)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return Err(Error::invalid(
            "the report has no needle tasks to plot (run with at least one --sizes value)",
        ));
    }
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0))
        .collect();
    let (xmin, xmax) = (
        xs.iter().copied().fold(f64::MAX, f64::min) / 1.5,
        xs.iter().copied().fold(0.0, f64::max) * 1.5,
    );
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let (left, right) = root.split_horizontally(500);

    let mut acc = ChartBuilder::on(&left)
        .caption("Accuracy vs haystack size", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..1.05)
        .map_err(perr)?;
    acc.configure_mesh()
        .x_desc("haystack tokens")
        .y_desc("accuracy")
        .x_label_formatter(&|x| super::human_tokens(*x as usize))
        .draw()
        .map_err(perr)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        acc.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), c))
            .map_err(perr)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
        acc.draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 3, c.filled())))
            .map_err(perr)?;
    }
    acc.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;

    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.0.max(x.2)))
        .fold(1.0, f64::max)
        * 2.0;
    let mut tok = ChartBuilder::on(&right)
        .caption("Tokens read per query", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), (10.0..ymax).log_scale())
        .map_err(perr)?;
    tok.configure_mesh()
        .x_desc("haystack tokens")
        .y_desc("tokens")
        .x_label_formatter(&|x| super::human_tokens(*x as usize))
        .y_label_formatter(&|y| super::human_tokens(*y as usize))
        .draw()
        .map_err(perr)?;
    let full: Vec<(f64, f64)> = series[0].1.iter().map(|p| (p.0, p.0)).collect();
    tok.draw_series(LineSeries::new(full, BLACK.stroke_width(1)))
        .map_err(perr)?
        .label("full context")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        tok.draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.2.max(10.0))), c))
            .map_err(perr)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
    }
    tok.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)?;
    Ok(())
}

/// Draws the retention task into `path`: one panel per debate, the share of key facts in
/// the `auto` window against the budget, next to the two windows cut from the raw
/// transcript (the last B tokens; the first B/2 plus the last B/2) and the decoys the
/// `auto` window kept.
pub fn retention_svg(r: &Report, path: &Path) -> Result<()> {
    let mut instances: Vec<&str> = Vec::new();
    for row in &r.retention {
        if !instances.contains(&row.instance.as_str()) {
            instances.push(&row.instance);
        }
    }
    if instances.is_empty() {
        return Err(Error::invalid(
            "the report has no retention rows to plot (run with --retention-rounds > 0)",
        ));
    }
    let width = 420 * instances.len() as u32;
    let root = SVGBackend::new(path, (width, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let panels = root.split_evenly((1, instances.len()));
    for (panel, inst) in panels.iter().zip(&instances) {
        let rows: Vec<_> = r.retention.iter().filter(|x| x.instance == *inst).collect();
        let budgets: Vec<f64> = rows.iter().map(|x| x.budget as f64).collect();
        let (xmin, xmax) = (
            budgets.iter().copied().fold(f64::MAX, f64::min) / 1.4,
            budgets.iter().copied().fold(0.0, f64::max) * 1.4,
        );
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("Key facts kept: {inst}"), ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            // Headroom above 100 % for the legend.
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..1.4)
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("window budget (tokens)")
            .y_desc("share of key facts")
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|x| super::human_tokens(*x as usize))
            .draw()
            .map_err(perr)?;
        let decoys: Vec<(f64, f64)> = rows
            .iter()
            .filter(|x| x.decoys > 0)
            .map(|x| (x.budget as f64, x.decoy_rate))
            .collect();
        let series: [(&str, Vec<(f64, f64)>); 4] = [
            (
                "strata auto",
                rows.iter()
                    .map(|x| (x.budget as f64, x.retention))
                    .collect(),
            ),
            (
                "last B tokens",
                rows.iter().map(|x| (x.budget as f64, x.last_b)).collect(),
            ),
            (
                "first B/2 + last B/2",
                rows.iter()
                    .map(|x| (x.budget as f64, x.first_last_b))
                    .collect(),
            ),
            ("decoys kept (auto)", decoys),
        ];
        for (i, (name, pts)) in series.into_iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(perr)?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
                .map_err(perr)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(perr)?;
    }
    root.present().map_err(perr)?;
    Ok(())
}
