//! What a soak's samples say: the slope of each memory figure over the run (least squares, in
//! KiB per minute, after a warm-up), the peak, and the range of the counts that must stay flat
//! (descriptors, threads, mappings).

/// One reading of pktrace's `/proc/<pid>` during a soak.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since pktrace was ready.
    pub t_s: f64,
    /// `VmRSS`, `VmHWM`, `RssAnon`, `RssFile`, KiB.
    pub rss: u64,
    pub hwm: u64,
    pub anon: u64,
    pub file: u64,
    /// Open file descriptors, threads, and lines of `/proc/<pid>/maps`.
    pub fds: u64,
    pub threads: u64,
    pub maps: u64,
}

/// The figures of a soak.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Least-squares slopes after the warm-up, KiB per minute.
    pub rss_kib_per_min: f64,
    pub anon_kib_per_min: f64,
    /// `VmRSS` at the first sample after the warm-up and at the last, KiB.
    pub rss_first: u64,
    pub rss_last: u64,
    /// The largest `VmHWM` seen, KiB.
    pub hwm_peak: u64,
    /// (least, most) over every sample.
    pub fds: (u64, u64),
    pub threads: (u64, u64),
    pub maps: (u64, u64),
    /// Samples the slopes were fitted on, and the minutes they span.
    pub fitted: usize,
    pub minutes: f64,
}

/// The least-squares slope of `y` over `x`; `None` for fewer than two distinct `x`.
#[must_use]
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    #[expect(clippy::cast_precision_loss, reason = "sample counts far below 2^52")]
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = points.iter().fold((0.0, 0.0), |(sxy, sxx), (x, y)| {
        (sxy + (x - mx) * (y - my), sxx + (x - mx) * (x - mx))
    });
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

/// Sums up `samples`, fitting the slopes on those taken at `warmup_s` or later (all of them
/// when fewer than two are).
#[must_use]
#[expect(clippy::cast_precision_loss, reason = "KiB far below 2^52")]
pub fn summarize(samples: &[Sample], warmup_s: f64) -> Option<Summary> {
    let late: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= warmup_s).collect();
    let fitted: Vec<&Sample> = if late.len() >= 2 {
        late
    } else {
        samples.iter().collect()
    };
    let per_min = |f: fn(&Sample) -> u64| {
        let points: Vec<(f64, f64)> = fitted.iter().map(|s| (s.t_s / 60.0, f(s) as f64)).collect();
        slope(&points)
    };
    let range = |f: fn(&Sample) -> u64| {
        let values = samples.iter().map(f);
        (values.clone().min().unwrap_or(0), values.max().unwrap_or(0))
    };
    let (first, last) = (fitted.first()?, fitted.last()?);
    Some(Summary {
        rss_kib_per_min: per_min(|s| s.rss)?,
        anon_kib_per_min: per_min(|s| s.anon)?,
        rss_first: first.rss,
        rss_last: last.rss,
        hwm_peak: samples.iter().map(|s| s.hwm).max().unwrap_or(0),
        fds: range(|s| s.fds),
        threads: range(|s| s.threads),
        maps: range(|s| s.maps),
        fitted: fitted.len(),
        minutes: (last.t_s - first.t_s) / 60.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64, rss: u64) -> Sample {
        Sample {
            t_s,
            rss,
            hwm: rss + 100,
            anon: rss / 2,
            fds: 20,
            threads: 2,
            maps: 90,
            ..Sample::default()
        }
    }

    #[test]
    fn a_straight_line_gives_its_slope_and_noise_around_a_flat_line_gives_little() {
        let line: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 3.0 * f64::from(i) + 7.0))
            .collect();
        assert!((slope(&line).unwrap() - 3.0).abs() < 1e-9);
        let flat: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), if i % 2 == 0 { 101.0 } else { 99.0 }))
            .collect();
        assert!(slope(&flat).unwrap().abs() < 0.1);
        assert_eq!(slope(&[(1.0, 2.0)]), None);
        assert_eq!(slope(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn the_warm_up_is_left_out_of_the_slope_but_not_of_the_peak_or_the_ranges() {
        // A start-up jump in the first minute, then 150 KiB per minute.
        let mut samples = vec![at(0.0, 10_000), at(30.0, 16_000)];
        samples.extend((2..=12u32).map(|m| at(f64::from(m) * 30.0, 16_000 + 75 * u64::from(m))));
        samples[1].fds = 25;
        let s = summarize(&samples, 60.0).unwrap();
        assert!((s.rss_kib_per_min - 150.0).abs() < 1e-6, "{s:?}");
        assert!((s.anon_kib_per_min - 75.0).abs() < 1e-6, "{s:?}");
        assert_eq!((s.rss_first, s.rss_last), (16_150, 16_900));
        assert_eq!(s.hwm_peak, 17_000);
        assert_eq!(s.fds, (20, 25));
        assert_eq!(s.fitted, 11);
        assert!((s.minutes - 5.0).abs() < 1e-9);
        assert!(summarize(&[], 60.0).is_none());
    }
}
