//! Plots for reports and papers, as SVG drawn by `plotters`: GPU allocation and queue length
//! over time, wait-time CDFs per size class, and the fill experiment's curves — with ticks and
//! units on both axes, a grid, a legend beside the plot (never over the data), a log time axis
//! where waits span orders of magnitude, and every policy of a comparison on the same axes.
//!
//! Each series has a colour and a dash pattern of its own, so that lines stay apart in grey
//! print. Text sizes are estimated without fonts (plotters' SVG backend with no font
//! feature), so the same run draws the same bytes on every machine.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::engine::Run;

/// Width of every plot, pixels.
const WIDTH: u32 = 820;
/// Height of every plot, pixels.
const HEIGHT: u32 = 420;
/// Width of the legend panel on the right of the plot.
const LEGEND: u32 = 190;

/// Line colours (Okabe and Ito's palette, readable by colour-blind readers), darkest first.
const COLORS: [RGBColor; 7] = [
    RGBColor(0, 0, 0),
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

/// Dash patterns (dash, gap, in pixels; `None`: solid), so that series differ in grey print.
const DASHES: [Option<(u32, u32)>; 5] = [
    None,
    Some((10, 5)),
    Some((2, 4)),
    Some((16, 4)),
    Some((6, 3)),
];

/// One line of a chart: a name for the legend and points in data units.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's name for it.
    pub name: String,
    /// (x, y) points, in the order to draw them.
    pub points: Vec<(f64, f64)>,
}

/// How an axis maps its values.
#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    /// Linear from zero to the largest value, with round ticks.
    Linear,
    /// Logarithmic, for durations in seconds: values under `floor` are drawn at `floor`,
    /// ticks at round durations (1 s, 10 s, 1 min, 10 min, 1 h, 6 h, 1 d, 1 wk, 4 wk).
    LogSeconds {
        /// The smallest value shown.
        floor: f64,
    },
}

/// An axis: its title (with the unit) and scale; `max` fixes the top of a linear axis (the
/// fleet's GPUs, 100 %) where the data's own largest value would mislead, and `min` its
/// bottom where only the top of the range matters (a zoom).
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The title, with the unit.
    pub title: String,
    /// The scale.
    pub scale: Scale,
    /// The top of a linear axis, if not the data's largest value.
    pub max: Option<f64>,
    /// The bottom of a linear axis, if not zero. Points below it are the caller's to leave
    /// out: the plot does not clip lines.
    pub min: Option<f64>,
}

impl Axis {
    /// A linear axis from zero.
    pub fn linear(title: &str) -> Axis {
        Axis {
            title: title.to_owned(),
            scale: Scale::Linear,
            max: None,
            min: None,
        }
    }
}

/// A chart: a title, two axes, lines, and reference points drawn as markers.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The caption.
    pub title: String,
    /// The horizontal axis.
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
    /// Reference points (a paper's published figures, say): each drawn as circles in the
    /// colour of the line of the same name, with one legend entry, `marks_label`.
    pub marks: Vec<Series>,
    /// The legend's name for the reference points.
    pub marks_label: String,
}

/// Round durations for a log time axis, seconds, with their labels.
const DURATION_TICKS: [(f64, &str); 9] = [
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3_600.0, "1 h"),
    (21_600.0, "6 h"),
    (86_400.0, "1 d"),
    (604_800.0, "1 wk"),
    (2_419_200.0, "4 wk"),
];

/// Where an axis's values are drawn: linear values as they are, log values as their base-10
/// logarithm (so both axes are plotters' linear coordinates with ticks of our choosing).
fn position(scale: &Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::LogSeconds { floor } => v.max(*floor).log10(),
    }
}

/// An axis's drawn range and its ticks (drawn positions with labels).
fn ticks(axis: &Axis, values: impl Iterator<Item = f64>) -> (f64, f64, Vec<(f64, String)>) {
    let largest = values.fold(0.0f64, f64::max);
    match &axis.scale {
        Scale::Linear => {
            let low = axis.min.unwrap_or(0.0);
            let top = axis.max.unwrap_or(largest);
            // An empty or all-zero series still gets an axis one unit long.
            let top = if top > low { top } else { low + 1.0 };
            let step = round_step((top - low) / 6.0);
            let mut out = Vec::new();
            let first = (low / step - 1e-9).ceil();
            let mut i = 0u32;
            loop {
                let v = (first + f64::from(i)) * step;
                if v > top + (top - low) * 1e-9 {
                    break;
                }
                out.push((v, number(v)));
                i += 1;
            }
            (low, top, out)
        }
        Scale::LogSeconds { floor } => {
            let low = floor.log10();
            let high = largest.max(floor * 10.0).log10();
            let out = DURATION_TICKS
                .iter()
                .filter(|(s, _)| *s >= *floor && s.log10() <= high + 1e-9)
                .map(|(s, label)| (s.log10(), (*label).to_owned()))
                .collect();
            (low, high, out)
        }
    }
}

/// A round tick step near `raw`: 1, 2, 2.5 or 5 times a power of ten.
fn round_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    let scaled = raw / magnitude;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|n| scaled <= *n)
        .unwrap_or(10.0);
    nice * magnitude
}

/// A tick label: the value without trailing zeros (ticks are round: 0.025, 2.5, 250), to
/// six decimals at most so that float noise in a multiple of the step never shows.
fn number(v: f64) -> String {
    let text = format!("{v:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The label of the tick drawn at `at`, if any.
fn tick_label(ticks: &[(f64, String)], at: f64) -> String {
    ticks
        .iter()
        .find(|(t, _)| (t - at).abs() < 1e-9)
        .map(|(_, l)| l.clone())
        .unwrap_or_default()
}

/// A linear axis over drawn positions with ticks of our choosing (plotters' own numeric
/// axes pick their ticks themselves, and its key-point wrapper cannot label them).
struct Ticked {
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        if span <= 0.0 || !value.is_finite() {
            return limit.0;
        }
        let fraction = (value - self.range.start) / span;
        let pixels = fraction * f64::from(limit.1 - limit.0);
        // Within a few plot sizes of the axis; anything further is off the plot anyway.
        #[expect(clippy::cast_possible_truncation, reason = "pixels, clamped")]
        let pixels = pixels.round().clamp(-1e6, 1e6) as i32;
        limit.0 + pixels
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold points only: the grid is drawn at the ticks, with no lighter lines between.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// The chart as an SVG document.
pub fn render(chart: &Chart) -> String {
    let mut svg = String::new();
    // Drawing into a string fails only on a bug in the drawing (a backend error is an I/O
    // error, and a string has none); the message then takes the plot's place.
    if let Err(e) = draw(chart, &mut svg) {
        svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\"><text x=\"20\" y=\"40\">could not draw {}: {}</text></svg>\n",
            escape(&chart.title),
            escape(&e)
        );
    }
    svg
}

fn draw(chart: &Chart, svg: &mut String) -> Result<(), String> {
    let all = || {
        chart
            .series
            .iter()
            .chain(&chart.marks)
            .flat_map(|s| &s.points)
    };
    let (x_low, x_high, x_ticks) = ticks(&chart.x, all().map(|p| p.0));
    let (y_low, y_high, y_ticks) = ticks(&chart.y, all().map(|p| p.1));
    let backend = SVGBackend::with_string(svg, (WIDTH, HEIGHT));
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND);
    let x_range = Ticked {
        range: x_low..x_high,
        ticks: x_ticks.iter().map(|t| t.0).collect(),
    };
    let y_range = Ticked {
        range: y_low..y_high,
        ticks: y_ticks.iter().map(|t| t.0).collect(),
    };
    let mut plot = ChartBuilder::on(&plot_area)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|e| e.to_string())?;
    let x_label = |v: &f64| tick_label(&x_ticks, *v);
    let y_label = |v: &f64| tick_label(&y_ticks, *v);
    plot.configure_mesh()
        .x_desc(chart.x.title.as_str())
        .y_desc(chart.y.title.as_str())
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .axis_style(BLACK)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, series) in chart.series.iter().enumerate() {
        let points = visible(&plot, chart, &series.points);
        let (color, dash) = style(i);
        let line = color.stroke_width(2);
        match dash {
            None => plot.draw_series(LineSeries::new(points, line)).map(|_| ()),
            Some((dash, gap)) => plot
                .draw_series(DashedLineSeries::new(points, dash, gap, line))
                .map(|_| ()),
        }
        .map_err(|e| e.to_string())?;
    }
    for marks in &chart.marks {
        let i = chart.series.iter().position(|s| s.name == marks.name);
        let color = i.map_or(BLACK, |i| style(i).0);
        let at = marks
            .points
            .iter()
            .map(|(x, y)| (position(&chart.x.scale, *x), position(&chart.y.scale, *y)));
        plot.draw_series(at.map(|p| Circle::new(p, 5, color.stroke_width(2))))
            .map_err(|e| e.to_string())?;
    }
    legend(chart, &legend_area).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// Series `i`'s colour and dash pattern: colours cycle fastest, so neighbours differ in both
/// once there are more series than patterns.
fn style(i: usize) -> (RGBColor, Option<(u32, u32)>) {
    (COLORS[i % COLORS.len()], DASHES[i % DASHES.len()])
}

type Plot<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Ticked, Ticked>>;

/// `points` at their drawn positions, less those that land on the pixel of the point before:
/// a trace's timeline has far more events than the plot has pixels.
fn visible(plot: &Plot<'_, '_>, chart: &Chart, points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut last = None;
    for (x, y) in points {
        let at = (position(&chart.x.scale, *x), position(&chart.y.scale, *y));
        let pixel = plot.backend_coord(&at);
        if last == Some(pixel) {
            continue;
        }
        last = Some(pixel);
        out.push(at);
    }
    out
}

/// The legend, in its own panel beside the plot: a sample of each line and its name, then
/// the reference points' marker.
fn legend(
    chart: &Chart,
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let text = ("sans-serif", 16).into_font().color(&BLACK);
    let mut y = 64i32;
    for (i, series) in chart.series.iter().enumerate() {
        let (color, dash) = style(i);
        let line = color.stroke_width(2);
        let sample = vec![(8, y), (44, y)];
        match dash {
            None => area.draw(&PathElement::new(sample, line))?,
            Some((dash, gap)) => area.draw(&DashedPathElement::new(sample, dash, gap, line))?,
        }
        area.draw(&Text::new(series.name.clone(), (52, y - 7), text.clone()))?;
        y += 22;
    }
    if !chart.marks.is_empty() {
        area.draw(&Circle::new((26, y), 5, BLACK.stroke_width(2)))?;
        area.draw(&Text::new(chart.marks_label.clone(), (52, y - 7), text))?;
    }
    Ok(())
}

/// `text` safe inside SVG or HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[expect(clippy::cast_precision_loss, reason = "plot coordinates")]
fn f(v: i64) -> f64 {
    v as f64
}

#[expect(clippy::cast_precision_loss, reason = "plot coordinates")]
fn g(v: u64) -> f64 {
    v as f64
}

/// `fill.svg`: GPUs allocated against GPU load arrived, both percent of the fleet's, a line
/// per policy; the `published` points (per policy: arrived, allocated, as
/// [`crate::fill::PAPER`]) of the policies drawn, up to the largest load arrived, marked.
pub fn fill(series: &[Series], published: &[(&str, [(f64, f64); 4])]) -> String {
    fill_chart(series, published, None)
}

/// `fill-zoom.svg`: [`fill`] from 80 % arrived and 75 % allocated up, where the policies part
/// (below, every policy but random places everything).
pub fn fill_zoom(series: &[Series], published: &[(&str, [(f64, f64); 4])]) -> String {
    fill_chart(series, published, Some((80.0, 75.0)))
}

/// The fill chart, from `from` (arrived, allocated) when zoomed: points left of it are left
/// out, and allocations under its bottom drawn on it.
fn fill_chart(
    series: &[Series],
    published: &[(&str, [(f64, f64); 4])],
    from: Option<(f64, f64)>,
) -> String {
    let series: Vec<Series> = match from {
        None => series.to_vec(),
        Some((x0, y0)) => series
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: s
                    .points
                    .iter()
                    .filter(|p| p.0 >= x0)
                    .map(|p| (p.0, p.1.max(y0)))
                    .collect(),
            })
            .collect(),
    };
    let reach = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.0)
        .fold(0.0f64, f64::max);
    let marks = published
        .iter()
        .filter(|(policy, _)| series.iter().any(|s| s.name == *policy))
        .map(|(policy, points)| Series {
            name: (*policy).to_owned(),
            points: points.iter().copied().filter(|p| p.0 <= reach).collect(),
        })
        .collect();
    let zoomed = if from.is_some() { ", zoomed" } else { "" };
    render(&Chart {
        title: format!("GPU allocation as load arrives{zoomed}"),
        x: Axis {
            min: from.map(|f| f.0),
            ..Axis::linear("arrived GPU load (% of the fleet's GPUs)")
        },
        y: Axis {
            max: Some(100.0),
            min: from.map(|f| f.1),
            ..Axis::linear("allocated GPUs (% of the fleet's GPUs)")
        },
        series,
        marks,
        marks_label: "paper (ATC'23)".to_owned(),
    })
}

/// A step series of `value` over hours since the run's first event.
fn steps(run: &Run, value: impl Fn(&crate::engine::Sample) -> f64) -> Vec<(f64, f64)> {
    let start = run.timeline.first().map_or(0, |s| s.time);
    let mut out = Vec::with_capacity(run.timeline.len() * 2);
    let mut last: Option<f64> = None;
    for s in &run.timeline {
        let x = f(s.time - start) / 3600.0;
        if let Some(prev) = last {
            out.push((x, prev));
        }
        let y = value(s);
        out.push((x, y));
        last = Some(y);
    }
    out
}

/// `allocation.svg`: GPUs held by running jobs over time, a line per run (policy), up to
/// the fleet's GPUs.
pub fn allocation(runs: &[&Run]) -> String {
    let fleet = runs.iter().map(|r| r.total_gpus).max().unwrap_or(0);
    render(&Chart {
        title: format!("GPU allocation ({fleet} GPUs)"),
        x: Axis::linear("time since the first event (hours)"),
        y: Axis {
            max: Some(g(fleet)),
            ..Axis::linear("GPUs allocated")
        },
        series: runs
            .iter()
            .map(|run| Series {
                name: run.policy.clone(),
                points: steps(run, |s| g(s.allocated_milli) / 1000.0),
            })
            .collect(),
        marks: Vec::new(),
        marks_label: String::new(),
    })
}

/// `queue.svg`: waiting jobs over time, a line per run (policy).
pub fn queue_length(runs: &[&Run]) -> String {
    render(&Chart {
        title: "Waiting jobs".to_owned(),
        x: Axis::linear("time since the first event (hours)"),
        y: Axis::linear("jobs waiting"),
        series: runs
            .iter()
            .map(|run| Series {
                name: run.policy.clone(),
                points: steps(run, |s| g(s.pending)),
            })
            .collect(),
        marks: Vec::new(),
        marks_label: String::new(),
    })
}

/// A size class's name for people: "1 GPU", "2–8 GPUs", "33+ GPUs".
pub fn class_name(class: &str) -> String {
    if class == "1" {
        "1 GPU".to_owned()
    } else {
        format!("{} GPUs", class.replace('-', "–"))
    }
}

/// A size class's name and the CDF of its jobs' waits.
type ClassCdf = (&'static str, Vec<(f64, f64)>);

/// The size classes (name, smallest and largest GPUs) that some finished job of `run` falls
/// in, each with the CDF of those jobs' waits: (seconds waited, fraction at most that).
fn wait_cdfs(run: &Run) -> Vec<ClassCdf> {
    crate::report::SIZE_CLASSES
        .iter()
        .filter_map(|(name, lo, hi)| {
            let mut waits: Vec<i64> = run
                .records
                .iter()
                .filter(|r| r.end.is_some() && (*lo..=*hi).contains(&r.gpus))
                .filter_map(|r| Some(r.start? - r.submit))
                .collect();
            if waits.is_empty() {
                return None;
            }
            waits.sort_unstable();
            let n = g(u64::try_from(waits.len()).unwrap_or(1));
            // A step CDF: at each wait, the fraction below it, then the fraction at it.
            let mut points = Vec::with_capacity(waits.len() * 2);
            for (i, w) in waits.iter().enumerate() {
                let before = g(u64::try_from(i).unwrap_or(0)) / n;
                points.push((f(*w), before));
                points.push((f(*w), g(u64::try_from(i + 1).unwrap_or(0)) / n));
            }
            Some((*name, points))
        })
        .collect()
}

/// The wait axis: seconds on a log scale, waits under a second drawn at one second.
fn wait_axis() -> Axis {
    Axis {
        title: "time waited before starting (log scale; under 1 s drawn at 1 s)".to_owned(),
        scale: Scale::LogSeconds { floor: 1.0 },
        max: None,
        min: None,
    }
}

/// `wait-cdf.svg`: for each size class, the fraction of finished jobs that waited at most x.
pub fn wait_cdf(run: &Run) -> String {
    render(&Chart {
        title: format!("Wait time CDF by job size ({})", run.policy),
        x: wait_axis(),
        y: Axis {
            max: Some(1.0),
            ..Axis::linear("fraction of finished jobs")
        },
        series: wait_cdfs(run)
            .into_iter()
            .map(|(class, points)| Series {
                name: class_name(class),
                points,
            })
            .collect(),
        marks: Vec::new(),
        marks_label: String::new(),
    })
}

/// For a comparison: per size class that some run has, its file stem (`wait-cdf-2-8`) and the
/// CDF of the class's waits with a line per run (policy).
pub fn wait_cdf_by_class(runs: &[&Run]) -> Vec<(String, String)> {
    let per_run: Vec<Vec<ClassCdf>> = runs.iter().map(|r| wait_cdfs(r)).collect();
    crate::report::SIZE_CLASSES
        .iter()
        .filter(|(class, _, _)| per_run.iter().flatten().any(|(c, _)| c == class))
        .map(|(class, _, _)| {
            let series = runs
                .iter()
                .zip(&per_run)
                .filter_map(|(run, cdfs)| {
                    let (_, points) = cdfs.iter().find(|(c, _)| c == class)?;
                    Some(Series {
                        name: run.policy.clone(),
                        points: points.clone(),
                    })
                })
                .collect();
            let svg = render(&Chart {
                title: format!("Wait time CDF, jobs of {}", class_name(class)),
                x: wait_axis(),
                y: Axis {
                    max: Some(1.0),
                    ..Axis::linear("fraction of finished jobs")
                },
                series,
                marks: Vec::new(),
                marks_label: String::new(),
            });
            (format!("wait-cdf-{}", class.replace('+', "-plus")), svg)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<Series>) -> Chart {
        Chart {
            title: "t".to_owned(),
            x: Axis::linear("x (units)"),
            y: Axis::linear("y (units)"),
            series,
            marks: Vec::new(),
            marks_label: String::new(),
        }
    }

    /// The number of points in the chart's data lines: drawn 2 pixels wide (axes and tick
    /// marks are polylines too, 1 pixel wide) and left of the legend (whose samples are lines
    /// 2 pixels wide too).
    fn drawn(svg: &str) -> usize {
        svg.split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke-width=\"2\""))
            .map(|p| {
                let from = p.find("points=\"").map_or(0, |i| i + 8);
                let to = p[from..].find('"').map_or(from, |i| from + i);
                p[from..to].split_whitespace().collect::<Vec<_>>()
            })
            .filter(|points| {
                let x = points.first().and_then(|p| p.split(',').next());
                x.and_then(|x| x.parse::<u32>().ok())
                    .is_some_and(|x| x < WIDTH - LEGEND)
            })
            .map(|points| points.len())
            .sum()
    }

    /// The text of every `<text>` element.
    fn labels(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let from = t.find('>')? + 1;
                let to = t.find("</text>")?;
                Some(t[from..to].trim())
            })
            .collect()
    }

    #[test]
    fn points_on_the_same_pixel_are_drawn_once() {
        // 1,000 points at x = 0 (one pixel), then a step to (1, 1): three distinct points.
        let mut points: Vec<(f64, f64)> =
            (0..1000).map(|i| (0.0, f64::from(i % 2) * 1e-9)).collect();
        points.push((1.0, 0.0));
        points.push((1.0, 1.0));
        let svg = render(&chart(vec![Series {
            name: "s".to_owned(),
            points,
        }]));
        assert_eq!(drawn(&svg), 3, "{svg}");
    }

    #[test]
    fn a_point_that_comes_back_after_another_is_drawn_again() {
        let points = vec![(0.0, 0.0), (1.0, 1.0), (0.0, 0.0)];
        let svg = render(&chart(vec![Series {
            name: "s".to_owned(),
            points,
        }]));
        assert_eq!(drawn(&svg), 3);
    }

    #[test]
    fn axes_carry_round_ticks_and_the_legend_stays_beside_the_plot() {
        let svg = render(&chart(vec![
            Series {
                name: "first".to_owned(),
                points: vec![(0.0, 0.0), (21.6, 60.0)],
            },
            Series {
                name: "second".to_owned(),
                points: vec![(0.0, 10.0), (21.6, 20.0)],
            },
        ]));
        let texts = labels(&svg);
        for tick in ["0", "5", "10", "20", "60", "x (units)", "y (units)"] {
            assert!(texts.contains(&tick), "{tick}: {texts:?}");
        }
        // Legend text starts right of the plot panel.
        let legend_x = svg
            .split("<text")
            .find(|t| t.contains("\nfirst\n"))
            .and_then(|t| t.split("x=\"").nth(1))
            .and_then(|t| t.split('"').next())
            .and_then(|x| x.parse::<u32>().ok());
        assert!(
            legend_x.is_some_and(|x| x >= WIDTH - LEGEND),
            "{legend_x:?}"
        );
        // The second line is dashed: drawn as many short segments, not one polyline.
        let wide = svg
            .matches("<polyline")
            .zip(svg.split("<polyline").skip(1))
            .filter(|(_, p)| p.contains("stroke-width=\"2\""))
            .count();
        assert!(wide > 2, "{wide} wide polylines");
    }

    #[test]
    fn a_log_time_axis_labels_round_durations() {
        let mut c = chart(vec![Series {
            name: "s".to_owned(),
            points: vec![(0.0, 0.0), (5.0, 0.5), (90_000.0, 1.0)],
        }]);
        c.x = wait_axis();
        let svg = render(&c);
        let texts = labels(&svg);
        for tick in ["1 s", "1 min", "1 h", "1 d"] {
            assert!(texts.contains(&tick), "{tick}: {texts:?}");
        }
        assert!(!texts.contains(&"1 wk"), "no tick past the data");
    }

    #[test]
    fn a_zoomed_fill_starts_its_axes_where_asked_and_keeps_the_papers_points() {
        let series = vec![Series {
            name: "fgd".to_owned(),
            points: (0..=130)
                .map(|x| (f64::from(x), f64::from(x.min(95))))
                .collect(),
        }];
        let svg = fill_zoom(&series, &crate::fill::PAPER);
        let texts = labels(&svg);
        for tick in ["80", "90", "130", "75", "100"] {
            assert!(texts.contains(&tick), "{tick}: {texts:?}");
        }
        assert!(!texts.contains(&"0"), "{texts:?}");
        assert_eq!(
            svg.matches("<circle").count(),
            4 + 1,
            "fgd's four points and the legend's"
        );
        assert!(
            drawn(&svg) <= 51,
            "only points from 80 % on: {}",
            drawn(&svg)
        );
    }

    #[test]
    fn round_steps() {
        assert!((round_step(3.6) - 5.0).abs() < 1e-9);
        assert!((round_step(0.17) - 0.2).abs() < 1e-9);
        assert!((round_step(2.2) - 2.5).abs() < 1e-9);
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(20.0), "20");
        assert_eq!(number(3.0 * round_step(0.022)), "0.075");
        assert_eq!(number(0.0), "0");
    }
}
