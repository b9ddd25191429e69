//! Plots as plain SVG: GPU allocation and queue length over time, and the wait-time CDF per
//! size class. Hand-written markup keeps the output deterministic and dependency-free.

use std::fmt::Write as _;

use crate::engine::Run;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 360.0;
const MARGIN: f64 = 56.0;
const COLORS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// A line chart of `series` (name, points as (x, y)), with axis labels and the largest values.
fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (0.0f64, 0.0f64);
    for (x, y) in points {
        x_max = x_max.max(*x);
        y_max = y_max.max(*y);
    }
    let (x_max, y_max) = (x_max.max(1.0), y_max.max(1.0));
    let sx = |x: f64| MARGIN + x / x_max * (WIDTH - 2.0 * MARGIN);
    let sy = |y: f64| HEIGHT - MARGIN - y / y_max * (HEIGHT - 2.0 * MARGIN);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n\
         <line x1=\"{MARGIN}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{MARGIN}\" y1=\"{MARGIN}\" x2=\"{MARGIN}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{x_label} (0 to {x_max:.1})</text>\n\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{y_label} (0 to {y_max:.1})</text>\n",
        WIDTH / 2.0,
        WIDTH / 2.0,
        HEIGHT - 16.0,
        HEIGHT / 2.0,
        HEIGHT / 2.0,
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN,
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Points are drawn to a tenth of a pixel; a run of points that land on the same
        // tenth (hundreds of events in one pixel of a long trace) is drawn once.
        let mut path = String::new();
        let mut last: Option<(i64, i64)> = None;
        for (x, y) in points {
            let (px, py) = (sx(*x), sy(*y));
            #[expect(clippy::cast_possible_truncation, reason = "pixel tenths")]
            let at = ((px * 10.0).round() as i64, (py * 10.0).round() as i64);
            if last == Some(at) {
                continue;
            }
            last = Some(at);
            if !path.is_empty() {
                path.push(' ');
            }
            let _ = write!(path, "{px:.1},{py:.1}");
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{path}\"/>"
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
            WIDTH - MARGIN - 100.0,
            MARGIN + 16.0 * f64::from(u32::try_from(i).unwrap_or(0))
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[expect(clippy::cast_precision_loss, reason = "plot coordinates")]
fn f(v: i64) -> f64 {
    v as f64
}

#[expect(clippy::cast_precision_loss, reason = "plot coordinates")]
fn g(v: u64) -> f64 {
    v as f64
}

/// `fill.svg`: GPUs allocated against GPUs asked for, percent of the fleet's, one line per
/// policy (the fill experiment).
pub fn fill(series: &[(String, Vec<(f64, f64)>)]) -> String {
    chart(
        "GPU allocation as load arrives",
        "arrived GPU load, % of the fleet",
        "allocated GPUs, % of the fleet",
        series,
    )
}

/// Step series of allocated GPUs and waiting jobs over hours since the first event.
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

/// `allocation.svg`: GPUs held by running jobs over time.
pub fn allocation(run: &Run) -> String {
    chart(
        &format!("GPU allocation ({} GPUs)", run.total_gpus),
        "hours",
        "GPUs allocated",
        &[(
            run.policy.clone(),
            steps(run, |s| g(s.allocated_milli) / 1000.0),
        )],
    )
}

/// `queue.svg`: waiting jobs over time.
pub fn queue_length(run: &Run) -> String {
    chart(
        "Waiting jobs",
        "hours",
        "jobs waiting",
        &[(run.policy.clone(), steps(run, |s| g(s.pending)))],
    )
}

/// `wait-cdf.svg`: for each size class, the fraction of finished jobs that waited at most x
/// hours.
pub fn wait_cdf(run: &Run) -> String {
    let series: Vec<(String, Vec<(f64, f64)>)> = crate::report::SIZE_CLASSES
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
            let points = waits
                .iter()
                .enumerate()
                .map(|(i, w)| (f(*w) / 3600.0, g(u64::try_from(i + 1).unwrap_or(0)) / n))
                .collect();
            Some((format!("{name} GPUs"), points))
        })
        .collect();
    chart(
        "Wait time CDF by job size",
        "hours waited",
        "fraction of jobs",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::chart;

    /// The `points` attribute of the chart's only polyline, as its points.
    fn drawn(svg: &str) -> Vec<&str> {
        let from = svg.find("points=\"").map_or(0, |i| i + 8);
        let to = svg[from..].find('"').map_or(from, |i| from + i);
        svg[from..to].split(' ').collect()
    }

    #[test]
    fn points_on_the_same_tenth_of_a_pixel_are_drawn_once() {
        // 1,000 points at x = 0 (one pixel), then a step to (1, 1): three distinct points.
        let mut points: Vec<(f64, f64)> =
            (0..1000).map(|i| (0.0, f64::from(i % 2) * 1e-9)).collect();
        points.push((1.0, 0.0));
        points.push((1.0, 1.0));
        let svg = chart("t", "x", "y", &[("s".to_owned(), points)]);
        assert_eq!(drawn(&svg), ["56.0,304.0", "664.0,304.0", "664.0,56.0"]);
    }

    #[test]
    fn a_point_that_comes_back_after_another_is_drawn_again() {
        let points = vec![(0.0, 0.0), (1.0, 1.0), (0.0, 0.0)];
        let svg = chart("t", "x", "y", &[("s".to_owned(), points)]);
        assert_eq!(drawn(&svg).len(), 3);
    }
}
