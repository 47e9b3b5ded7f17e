//! The soak as Markdown (one column per pktrace) and as JSON samples.

use std::fmt::Write as _;

use super::{Soak, SoakOptions, WARMUP_S, fit};

/// One cell of a row of the report.
type Cell<'a> = Box<dyn Fn(&fit::Summary, &super::Run) -> String + 'a>;

/// What ran, then the figures of each pktrace side by side.
#[must_use]
#[expect(clippy::cast_precision_loss, reason = "KiB far below 2^52")]
pub fn report(opts: &SoakOptions, soak: &Soak) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let kinds: Vec<&str> = opts.kinds.iter().map(|k| k.key()).collect();
    let traffic = if opts.traffic_ms == 0 {
        "none".to_owned()
    } else {
        format!(
            "{} every {} ms ({} rounds, {} requests failed)",
            kinds.join(", "),
            opts.traffic_ms,
            soak.rounds,
            soak.failed
        )
    };
    let churn = if opts.pod_every_s == 0 {
        "none".to_owned()
    } else {
        format!(
            "a pod every {} s ({} added, at most {} at once)",
            opts.pod_every_s, soak.pods_added, opts.pods_at_once
        )
    };
    let mut out = format!(
        "#### Soak\n\n`pktrace --pod ubuntu --follow -o json` in the lab for {} min: traffic \
         {traffic}; pod churn {churn}; a sample every {} s. Slopes by least squares over the \
         samples after the first {WARMUP_S:.0} s.\n\n",
        opts.minutes, opts.sample_s,
    );
    let _ = write!(out, "| measure |");
    for run in &soak.runs {
        let _ = write!(out, " {} |", run.binary.key());
    }
    let _ = writeln!(out, "\n| --- |{}", " --- |".repeat(soak.runs.len()));
    let summaries: Vec<Option<fit::Summary>> = soak
        .runs
        .iter()
        .map(|r| fit::summarize(&r.samples, WARMUP_S))
        .collect();
    let rows: [(&str, Cell); 8] = [
        (
            "VmRSS slope, KiB/min",
            Box::new(|s, _| format!("{:.1}", s.rss_kib_per_min)),
        ),
        (
            "RssAnon slope, KiB/min",
            Box::new(|s, _| format!("{:.1}", s.anon_kib_per_min)),
        ),
        (
            "VmRSS after the warm-up → at the end, MiB",
            Box::new(|s, _| {
                format!(
                    "{:.2} → {:.2} ({:.1} min, {} samples)",
                    mib(s.rss_first),
                    mib(s.rss_last),
                    s.minutes,
                    s.fitted
                )
            }),
        ),
        (
            "VmHWM, MiB",
            Box::new(|s, _| format!("{:.1}", mib(s.hwm_peak))),
        ),
        (
            "fds (least–most)",
            Box::new(|s, _| format!("{}–{}", s.fds.0, s.fds.1)),
        ),
        (
            "threads (least–most)",
            Box::new(|s, _| format!("{}–{}", s.threads.0, s.threads.1)),
        ),
        (
            "mappings (least–most)",
            Box::new(|s, _| format!("{}–{}", s.maps.0, s.maps.1)),
        ),
        (
            "journeys, events, lost events, stderr lines",
            Box::new(|_, r| {
                format!(
                    "{}, {}, {}, {}",
                    r.totals.journeys, r.totals.events, r.totals.lost_events, r.stderr_lines
                )
            }),
        ),
    ];
    for (name, cell) in rows {
        let _ = write!(out, "| {name} |");
        for (run, s) in soak.runs.iter().zip(&summaries) {
            let text = s.as_ref().map_or_else(|| "–".to_owned(), |s| cell(s, run));
            let _ = write!(out, " {text} |");
        }
        out.push('\n');
    }
    out
}

/// The samples as JSON, for `target/bench/`.
#[must_use]
pub fn raw(opts: &SoakOptions, soak: &Soak) -> serde_json::Value {
    let kinds: Vec<&str> = opts.kinds.iter().map(|k| k.key()).collect();
    serde_json::json!({
        "minutes": opts.minutes, "traffic_ms": opts.traffic_ms, "kinds": kinds,
        "pod_every_s": opts.pod_every_s, "pods_at_once": opts.pods_at_once,
        "rounds": soak.rounds, "failed": soak.failed, "pods_added": soak.pods_added,
        "runs": soak.runs.iter().map(|r| serde_json::json!({
            "binary": r.binary.key(),
            "journeys": r.totals.journeys, "events": r.totals.events,
            "lost_events": r.totals.lost_events, "stderr_lines": r.stderr_lines,
            "samples": r.samples.iter().map(|s| serde_json::json!({
                "t_s": s.t_s, "rss": s.rss, "hwm": s.hwm, "anon": s.anon, "file": s.file,
                "fds": s.fds, "threads": s.threads, "maps": s.maps,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{micro::Binary, soak::Run, tracer::JsonTotals};

    fn run(binary: Binary, kib_per_min: u64) -> Run {
        let samples = (0..=20u32)
            .map(|i| fit::Sample {
                t_s: f64::from(i) * 30.0,
                rss: 18_000 + kib_per_min * u64::from(i) / 2,
                fds: 59,
                threads: 2,
                maps: 44,
                ..fit::Sample::default()
            })
            .collect();
        Run {
            binary,
            samples,
            stderr_lines: 7,
            totals: JsonTotals::default(),
        }
    }

    #[test]
    fn one_column_per_pktrace_and_what_ran() {
        let opts = SoakOptions {
            traffic_ms: 0,
            ..SoakOptions::default()
        };
        let soak = Soak {
            runs: vec![run(Binary::Measured, 4), run(Binary::Baseline, 94)],
            pods_added: 180,
            ..Soak::default()
        };
        let text = report(&opts, &soak);
        assert!(
            text.contains("traffic none; pod churn a pod every 20 s (180 added"),
            "{text}"
        );
        assert!(text.contains("| measure | measured | baseline |"), "{text}");
        assert!(
            text.contains("| VmRSS slope, KiB/min | 4.0 | 94.0 |"),
            "{text}"
        );
        assert!(
            text.contains("| fds (least–most) | 59–59 | 59–59 |"),
            "{text}"
        );
    }
}
