//! The performance targets, judged from the measurements: reported, never asserted. One
//! function per row; each says what it measured (medians, with the figures that explain them)
//! and whether the target is met, or "not measured" when its phase did not run (`--only`).

mod tc;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;

use super::{
    Results,
    collector::{CollectorSample, Scenario},
    iperf::Stream,
    report::{Metric, ratio},
    stats::{Dist, Table},
    tracer::{Attach, Condition},
    unpinned::{self, Placement},
};

/// pktrace's peak resident memory (`VmHWM`) allowed in any phase, KiB.
const PEAK_KIB: u64 = 32 * 1024;
/// Events per CPU-second the collector handles on real journeys.
const COLLECTOR_EVENTS_PER_CPU_S: f64 = 3e6;

/// One row: the target, what was measured, and whether it is met (`None`: not measured).
struct Row {
    target: String,
    measured: String,
    met: Option<bool>,
}

impl Row {
    fn new(target: impl Into<String>, measured: impl Into<String>, met: Option<bool>) -> Self {
        Self {
            target: target.into(),
            measured: measured.into(),
            met,
        }
    }

    /// A target whose phase did not run.
    fn not_measured(target: impl Into<String>) -> Self {
        Self::new(target, "–", None)
    }
}

/// The targets, measured and judged.
pub fn targets(r: &Results) -> Table {
    let mut table = Table::new(["target", "measured (median)", "met"]);
    for row in [
        peak_memory(r),
        tc::traced(r),
        tc::outside(r),
        retention(r, Placement::Pinned),
        retention(r, Placement::Free),
        trace_all(r),
        collector(r),
        lost(r),
        attach(r),
    ] {
        let verdict = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        table.row([row.target, row.measured, verdict.to_owned()]);
    }
    table
}

/// Whether every measured value passes; `None` when none was measured.
fn all(values: &[f64], ok: impl Fn(f64) -> bool) -> Option<bool> {
    (!values.is_empty()).then(|| values.iter().all(|&v| ok(v)))
}

/// The largest `VmHWM` of the measured pktrace over every phase that ran one.
fn peak_memory(r: &Results) -> Row {
    let target = "peak memory: pktrace's VmHWM ≤ 32 MiB in every phase";
    let Some((phase, kib)) = r.peaks.iter().max_by_key(|(_, kib)| *kib) else {
        return Row::not_measured(target);
    };
    let others: Vec<String> = r
        .peaks
        .iter()
        .filter(|(p, _)| p != phase)
        .map(|(p, k)| format!("{p} {:.1}", unpinned::mib(*k)))
        .collect();
    let mut measured = format!(
        "{:.1} MiB in phase {phase} (the largest of any run)",
        unpinned::mib(*kib)
    );
    if !others.is_empty() {
        let _ = write!(measured, "; other phases, MiB: {}", others.join(", "));
    }
    Row::new(target, measured, Some(*kib <= PEAK_KIB))
}

/// The traced pod's TCP retention in the `unpinned` phase, for one placement.
fn retention(r: &Results, placement: Placement) -> Row {
    let (limit, how) = match placement {
        Placement::Pinned => (0.97, "pinned"),
        Placement::Free => (0.90, "unpinned"),
    };
    let target = format!(
        "TCP of the traced pod (--pod-ip), {how}, ≥ {limit:.2}× untraced through DNAT and \
         MASQUERADE"
    );
    let per_stream: Vec<(Stream, Dist)> = unpinned::STREAMS
        .iter()
        .filter_map(|&s| unpinned::retention(&r.unpinned, s, placement).map(|d| (s, d)))
        .collect();
    if per_stream.is_empty() {
        return Row::not_measured(target);
    }
    let measured = per_stream
        .iter()
        .map(|(s, d)| format!("{} {:.3}×", s.short(), d.median))
        .collect::<Vec<_>>()
        .join(", ");
    let runs = per_stream.iter().map(|(_, d)| d.n).min().unwrap_or(0);
    let medians: Vec<f64> = per_stream.iter().map(|(_, d)| d.median).collect();
    Row::new(
        target,
        format!(
            "{measured} (traced / untraced in the same round; median of {})",
            super::doc::runs(runs)
        ),
        all(&medians, |x| x >= limit),
    )
}

/// `--trace-all` in the throughput phase, beside tcpdump.
fn trace_all(r: &Results) -> Row {
    let target = "TCP with --trace-all ≥ 0.90× and above tcpdump's ratio";
    let ratios = |c: Condition| -> Vec<f64> {
        [Stream::TcpClusterIp, Stream::TcpMasq]
            .iter()
            .filter_map(|&s| ratio(&r.throughput, c, s, Metric::Gbps))
            .map(|d| d.median)
            .collect()
    };
    let (all_r, dump) = (ratios(Condition::TraceAll), ratios(Condition::Tcpdump));
    if all_r.is_empty() {
        return Row::not_measured(target);
    }
    let fmt = |v: &[f64]| {
        if v.is_empty() {
            return "–".to_owned();
        }
        v.iter()
            .map(|x| format!("{x:.3}×"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    Row::new(
        target,
        format!(
            "{} (tcpdump {}; ClusterIP / MASQUERADE)",
            fmt(&all_r),
            fmt(&dump)
        ),
        (all_r.len() == dump.len())
            .then(|| all_r.iter().zip(&dump).all(|(a, d)| *a >= 0.90 && a > d)),
    )
}

/// The collector phase's real journeys (paced and flood), the synthetic producer beside.
fn collector(r: &Results) -> Row {
    let target = "collector ≥ 3,000,000 events per CPU-second on real journeys (JSON written)";
    let of = |scenario: Scenario, f: fn(&CollectorSample) -> f64| {
        Dist::of(r.collector_of(scenario).map(f))
    };
    let real: Vec<(Scenario, Dist)> = [Scenario::Paced, Scenario::Flood]
        .into_iter()
        .filter_map(|s| of(s, |x| x.events_per_cpu_s).map(|d| (s, d)))
        .collect();
    if real.is_empty() {
        return Row::not_measured(target);
    }
    let mut measured = real
        .iter()
        .map(|&(s, d)| {
            // The second half of the stream beside the whole run: what a run pays once
            // (start-up, naming each new drop site) left out. Shown, not judged.
            let steady = of(s, |x| x.steady_events_per_cpu_s)
                .filter(|d| d.median > 0.0)
                .map_or_else(String::new, |h| {
                    format!(" ({:.0} k in the stream's second half)", h.median / 1e3)
                });
            format!("{}: {:.0} k{steady}", s.label(), d.median / 1e3)
        })
        .collect::<Vec<_>>()
        .join("; ");
    measured.push_str(" events per CPU-second, whole run");
    if let Some((e, cpu)) =
        of(Scenario::Synthetic, |s| s.events_per_cpu_s).zip(of(Scenario::Synthetic, |s| s.cpu_pct))
    {
        let _ = write!(
            measured,
            "; synthetic producer (one-step journeys, not judged): {:.0} k at {:.0} % CPU",
            e.median / 1e3,
            cpu.median
        );
    }
    let medians: Vec<f64> = real.iter().map(|(_, d)| d.median).collect();
    Row::new(
        target,
        measured,
        all(&medians, |x| x >= COLLECTOR_EVENTS_PER_CPU_S),
    )
}

/// Losses of the paced collector scenario.
fn lost(r: &Results) -> Row {
    let target = "0 events lost at 100,000 traced packets/s";
    let paced: Vec<&CollectorSample> = r.collector_of(Scenario::Paced).collect();
    if paced.is_empty() {
        return Row::not_measured(target);
    }
    let lost: u64 = paced
        .iter()
        .map(|s| s.kernel_lost + s.totals.lost_events)
        .sum();
    Row::new(
        target,
        format!("{lost} lost over {}", super::doc::runs(paced.len())),
        Some(lost == 0),
    )
}

/// Start-up on the node with the extra veths: pktrace's default choice judged, the forced
/// modes for context.
fn attach(r: &Results) -> Row {
    let target = "attach to 250 veths ≤ 1 s (pktrace's default)";
    let many = r
        .startup
        .samples
        .iter()
        .map(|s| s.interfaces)
        .max()
        .unwrap_or(0);
    let ready = |attach: Attach| {
        let runs = r
            .startup
            .samples
            .iter()
            .filter(move |s| s.interfaces == many && many > 100 && s.attach == attach);
        let mode = runs.clone().next().map_or("?", |s| s.mode.as_str());
        Dist::of(runs.map(|s| s.ready_s)).map(|d| (d.median, mode))
    };
    let Some((secs, mode)) = ready(Attach::Default) else {
        return Row::not_measured(target);
    };
    let others: Vec<String> = [Attach::ForceTcx, Attach::ForceClsact]
        .into_iter()
        .filter_map(|a| ready(a).map(|(s, _)| format!("{} {s:.3} s", a.label())))
        .collect();
    let context = if others.is_empty() {
        String::new()
    } else {
        format!("; {}", others.join(", "))
    };
    Row::new(
        target,
        format!("{secs:.3} s to ready on {many} interfaces ({mode}){context}"),
        Some(secs <= 1.0),
    )
}
