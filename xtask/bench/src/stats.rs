//! Medians with their range, and Markdown tables.

use std::fmt::Write as _;

/// Median, minimum and maximum of some runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dist {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Dist {
    /// `None` when there are no values (NaNs are ignored).
    #[must_use]
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            f64::midpoint(v[n / 2 - 1], v[n / 2])
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// `12.3 (11.9–12.8)` with `decimals` digits, or just the value for a single run.
    #[must_use]
    pub fn show(&self, decimals: usize) -> String {
        if self.n == 1 {
            return format!("{:.decimals$}", self.median);
        }
        format!(
            "{:.decimals$} ({:.decimals$}–{:.decimals$})",
            self.median, self.min, self.max
        )
    }

    /// A ratio: `0.97× (0.95–0.99)`.
    #[must_use]
    pub fn show_ratio(&self) -> String {
        if self.n == 1 {
            return format!("{:.3}×", self.median);
        }
        format!("{:.3}× ({:.3}–{:.3})", self.median, self.min, self.max)
    }
}

/// [`Dist::show`] or a dash.
#[must_use]
pub fn show(dist: Option<Dist>, decimals: usize) -> String {
    dist.map_or_else(|| "–".into(), |d| d.show(decimals))
}

/// A Markdown table.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    #[must_use]
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// GitHub-flavoured Markdown, columns padded for reading as plain text too.
    #[must_use]
    pub fn markdown(&self) -> String {
        let cols = self.header.len();
        let width = |i: usize| {
            std::iter::once(&self.header)
                .chain(&self.rows)
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
                .max(3)
        };
        let widths: Vec<usize> = (0..cols).map(width).collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..cols)
                .map(|i| {
                    let cell = cells.get(i).map_or("", String::as_str);
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    format!("{cell}{}", " ".repeat(pad))
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = line(&self.header);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let _ = writeln!(out, "| {} |", rule.join(" | "));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ranges() {
        let d = Dist::of([3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((d.median, d.min, d.max, d.n), (2.0, 1.0, 3.0, 3));
        assert!((Dist::of([1.0, 2.0]).unwrap().median - 1.5).abs() < 1e-12);
        assert!(Dist::of([]).is_none());
        assert_eq!(d.show(1), "2.0 (1.0–3.0)");
        assert_eq!(Dist::of([0.5]).unwrap().show_ratio(), "0.500×");
    }

    #[test]
    fn tables_line_up() {
        let mut t = Table::new(["a", "bb"]);
        t.row(["1", "2222"]);
        assert_eq!(
            t.markdown(),
            "| a   | bb   |\n| --- | ---- |\n| 1   | 2222 |\n"
        );
    }
}
