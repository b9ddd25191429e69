//! Spells of time, in seconds into the run, and how much of a window they cover.

/// How many seconds of `from..to` the `spells` (each `(from, to)`) cover, spells that overlap
/// counted once.
pub(super) fn covered(spells: impl IntoIterator<Item = (f64, f64)>, from: f64, to: f64) -> f64 {
    let mut clipped: Vec<(f64, f64)> = spells
        .into_iter()
        .map(|(start, end)| (start.max(from), end.min(to)))
        .filter(|(start, end)| end > start)
        .collect();
    clipped.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut open: Option<(f64, f64)> = None;
    for (start, end) in clipped {
        open = match open {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + open.map_or(0.0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::covered;

    #[test]
    fn spells_cover_a_window_once_where_they_overlap() {
        let spells = [(10.0, 14.0), (12.0, 15.0), (30.0, 31.5)];
        assert!((covered(spells, f64::NEG_INFINITY, f64::INFINITY) - 6.5).abs() < 1e-9);
        assert!((covered(spells, 13.0, 31.0) - 3.0).abs() < 1e-9);
        assert!(covered(spells, 15.0, 30.0).abs() < 1e-9);
        assert!(covered([], 0.0, 100.0).abs() < 1e-9);
    }
}
