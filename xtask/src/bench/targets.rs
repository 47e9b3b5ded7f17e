//! The targets (issue 5), judged from the measurements; reported, never asserted.

use std::fmt::Write as _;

use super::{
    Results,
    collector::{CollectorSample, Scenario},
    floor,
    iperf::Stream,
    micro::{Binary, Frame},
    paired,
    report::{Metric, ratio},
    stats::{Dist, Table},
    tracer::{Attach, Condition},
};

/// The targets, measured and judged (not asserted anywhere).
#[expect(
    clippy::too_many_lines,
    reason = "one table row per target, each measured and judged in place; not yet split"
)]
pub fn targets(r: &Results) -> Table {
    let t = &r.throughput;
    let mut table = Table::new(["target", "measured (median)", "met"]);
    let mut judge = |target: &str, measured: String, met: Option<bool>| {
        let verdict = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        table.row([target.to_owned(), measured, verdict.to_owned()]);
    };
    let tcp = [Stream::TcpClusterIp, Stream::TcpMasq];
    let ratios = |c: Condition| -> Vec<f64> {
        tcp.iter()
            .filter_map(|&s| ratio(t, c, s, Metric::Gbps))
            .map(|d| d.median)
            .collect()
    };
    // A phase left out (`--only`) shows as a dash, not as nothing.
    let fmt = |v: &[f64]| {
        if v.is_empty() {
            return "–".to_owned();
        }
        v.iter()
            .map(|x| format!("{x:.3}×"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let pod = ratios(Condition::ClientPod);
    // What any program on those hooks costs: shown beside the target, not judged.
    let empty = ratios(Condition::EmptyPrograms);
    let mut pod_measured = if pod.is_empty() {
        "single streams not measured".to_owned()
    } else if empty.is_empty() {
        fmt(&pod)
    } else {
        format!(
            "{} (empty programs on the same hooks: {})",
            fmt(&pod),
            fmt(&empty)
        )
    };
    // The same retention beside the untraced twin (less of the machine's noise): shown, not
    // judged, since the target is the streams' own ratio.
    let twin = |c: Condition| -> Vec<f64> {
        paired::STREAMS
            .iter()
            .filter_map(|&s| Dist::of(paired::retention(&r.paired, c, s, Binary::Measured)))
            .map(|d| d.median)
            .collect()
    };
    let (pod_twin, empty_twin) = (twin(Condition::ClientPod), twin(Condition::EmptyPrograms));
    if !pod_twin.is_empty() {
        let _ = write!(
            pod_measured,
            "; beside an untraced twin stream: {} (empty programs {})",
            fmt(&pod_twin),
            fmt(&empty_twin)
        );
    }
    judge(
        "TCP with the pod traced (--pod-ip) ≥ 0.97× untraced (ClusterIP / MASQUERADE)",
        pod_measured,
        all(&pod, |x| x >= 0.97),
    );
    let (all_r, dump) = (ratios(Condition::TraceAll), ratios(Condition::Tcpdump));
    judge(
        "TCP with --trace-all ≥ 0.90× and above tcpdump's ratio",
        format!("{} (tcpdump {})", fmt(&all_r), fmt(&dump)),
        (all_r.len() == dump.len() && !all_r.is_empty())
            .then(|| all_r.iter().zip(&dump).all(|(a, d)| *a >= 0.90 && a > d)),
    );
    let worst = |c: Condition| -> Option<(String, f64)> {
        let mut by_prog: Vec<(String, f64)> = Vec::new();
        for sample in r.hooks.samples.iter().filter(|s| s.condition == c) {
            if by_prog.iter().any(|(p, _)| *p == sample.program) {
                continue;
            }
            let runs = r
                .hooks
                .samples
                .iter()
                .filter(|s| s.condition == c && s.program == sample.program);
            let med = Dist::of(runs.map(|s| s.ns_per_run)).map_or(0.0, |d| d.median);
            by_prog.push((sample.program.clone(), med));
        }
        by_prog.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))
    };
    // The tc program alone (micro phase), beside the judged figure: its own work, warm.
    let alone = |frames: &[Frame]| {
        Dist::of(
            r.micro
                .samples
                .iter()
                .filter(|s| s.binary == Binary::Measured && frames.contains(&s.frame))
                .map(|s| s.ns_per_run),
        )
        .map_or_else(String::new, |d| {
            format!(
                "; tc_egress alone (warm, BPF_PROG_TEST_RUN): {:.0} ns",
                d.median
            )
        })
    };
    for (c, limit, what, frames) in [
        (
            Condition::OtherPod,
            50.0,
            "outside the filter",
            &[Frame::OutsideFollowing][..],
        ),
        (
            Condition::ClientPod,
            150.0,
            "emitted",
            &[Frame::EmittedUdp, Frame::EmittedTcp][..],
        ),
    ] {
        let w = worst(c);
        // The empty program of the slowest program's hook type, same condition: shown, not
        // subtracted from what is judged.
        let floor_of = |program: &str| {
            let name = if program.starts_with("tc_") {
                floor::TC_NAME
            } else {
                floor::NF_NAME
            };
            let runs = r.hooks.floor.iter();
            Dist::of(
                runs.filter(|s| s.condition == c && s.program == name)
                    .map(|s| s.ns_per_run),
            )
            .map(|d| d.median)
        };
        judge(
            &format!("packets {what} ≤ {limit:.0} ns per hook (slowest program; judged raw)"),
            w.as_ref().map_or_else(
                || "–".into(),
                |(p, ns)| match floor_of(p) {
                    Some(f) => format!(
                        "{ns:.0} ns raw ({p}); {:.0} ns net of the empty program's {f:.0} ns{}",
                        ns - f,
                        alone(frames)
                    ),
                    None => format!("{ns:.0} ns raw ({p}){}", alone(frames)),
                },
            ),
            w.map(|(_, ns)| ns <= limit),
        );
    }
    let flood = Dist::of(
        r.measured_collector()
            .filter(|s| s.scenario == Scenario::Flood)
            .map(|s| s.events_per_cpu_s),
    );
    let of = |scenario: Scenario, f: fn(&CollectorSample) -> f64| {
        Dist::of(
            r.measured_collector()
                .filter(|s| s.scenario == scenario)
                .map(f),
        )
    };
    let synthetic = of(Scenario::Synthetic, |s| s.events_per_cpu_s)
        .zip(of(Scenario::Synthetic, |s| s.cpu_pct))
        .map_or_else(String::new, |(e, cpu)| {
            format!(
                "; with the synthetic producer (one-step journeys): {:.0} k at {:.0} % CPU",
                e.median / 1e3,
                cpu.median
            )
        });
    judge(
        "collector ≥ 1,000,000 events/s on one core",
        flood.map_or_else(
            || "–".into(),
            |d| {
                format!(
                    "{:.0} k events per CPU-second (UDP flood, real journeys){synthetic}",
                    d.median / 1e3
                )
            },
        ),
        flood.map(|d| d.median >= 1e6),
    );
    let paced: Vec<&CollectorSample> = r
        .measured_collector()
        .filter(|s| s.scenario == Scenario::Paced)
        .collect();
    let lost: u64 = paced
        .iter()
        .map(|s| s.kernel_lost + s.totals.lost_events)
        .sum();
    judge(
        "0 events lost at 100,000 traced packets/s",
        format!("{lost} lost over {} runs", paced.len()),
        (!paced.is_empty()).then_some(lost == 0),
    );
    let (steady, hwm) = steady_memory(r);
    judge(
        "RSS ≤ 32 MiB at steady state",
        steady.as_ref().map_or_else(
            || "–".into(),
            |(label, d)| {
                let peak = hwm.map_or_else(|| "–".into(), |k| format!("{:.1} MiB", mib(k)));
                format!(
                    "{:.1} MiB VmRSS under load ({label}, the highest condition; median of {} \
                     runs); VmHWM (the peak, start-up included; largest of any run of any \
                     phase): {peak}",
                    d.median, d.n
                )
            },
        ),
        steady.map(|(_, d)| d.median <= 32.0),
    );
    // pktrace's default choice on the node with the extra veths; the forced modes for context.
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
    let default = ready(Attach::Default);
    let others: Vec<String> = [Attach::ForceTcx, Attach::ForceClsact]
        .into_iter()
        .filter_map(|a| ready(a).map(|(s, _)| format!("{} {s:.3} s", a.label())))
        .collect();
    judge(
        "attach to 250 veths ≤ 1 s (pktrace's default)",
        default.map_or_else(
            || "–".into(),
            |(s, mode)| {
                let context = if others.is_empty() {
                    String::new()
                } else {
                    format!("; {}", others.join(", "))
                };
                format!("{s:.3} s to ready on {many} interfaces ({mode}){context}")
            },
        ),
        default.map(|(s, _)| s <= 1.0),
    );
    table
}

#[expect(clippy::cast_precision_loss, reason = "KiB far below 2^52")]
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Steady-state memory: for each pktrace condition of the throughput phase (the largest
/// `VmRSS` of its streams in a round) and each collector scenario (`VmRSS` halfway through the
/// stream), the median over the runs, MiB; the highest of those, with its label. Also the
/// highest `VmHWM` of any run (the peak, start-up included), KiB.
fn steady_memory(r: &Results) -> (Option<(String, Dist)>, Option<u64>) {
    let mut medians: Vec<(String, Dist)> = Vec::new();
    for c in [
        Condition::ClientPod,
        Condition::OtherPod,
        Condition::TraceAll,
    ] {
        let peaks = (0..r.runs).filter_map(|round| {
            r.throughput
                .samples
                .iter()
                .filter(|s| s.condition == c && s.round == round)
                .map(|s| s.memory.rss)
                .max()
        });
        if let Some(d) = Dist::of(peaks.map(mib)) {
            medians.push((c.label().to_owned(), d));
        }
    }
    for scenario in Scenario::ALL {
        let mids = r
            .measured_collector()
            .filter(|s| s.scenario == scenario)
            .map(|s| mib(s.memory_mid.rss));
        if let Some(d) = Dist::of(mids) {
            medians.push((scenario.label().to_owned(), d));
        }
    }
    let steady = medians
        .into_iter()
        .max_by(|a, b| a.1.median.total_cmp(&b.1.median));
    let hwm = r
        .throughput
        .tracers
        .iter()
        .filter(|x| x.condition.is_pktrace())
        .map(|x| x.memory.hwm)
        .chain(r.measured_collector().map(|s| s.memory_end.hwm))
        .chain(r.peaks.iter().map(|(_, kib)| *kib))
        .max();
    (steady, hwm)
}

fn all(values: &[f64], ok: impl Fn(f64) -> bool) -> Option<bool> {
    (!values.is_empty()).then(|| values.iter().all(|&v| ok(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(condition: Condition, stream: Stream, ratio: f64) -> paired::PairSample {
        paired::PairSample {
            round: 0,
            condition,
            binary: Binary::Measured,
            stream,
            bps: ratio * 1e9,
            twin_bps: 1e9,
        }
    }

    #[test]
    fn paired_alone_says_the_single_streams_were_not_measured() {
        let mut paired = Vec::new();
        for stream in paired::STREAMS {
            paired.push(sample(Condition::Untraced, stream, 0.9));
            paired.push(sample(Condition::ClientPod, stream, 0.9 * 0.97));
            paired.push(sample(Condition::EmptyPrograms, stream, 0.9 * 0.99));
        }
        let r = Results {
            runs: 1,
            seconds: 1,
            throughput: crate::bench::throughput::Throughput::default(),
            paired,
            hooks: crate::bench::hooks::Hooks::default(),
            micro: crate::bench::micro::Micro::default(),
            collector: Vec::new(),
            startup: crate::bench::startup::Startup::default(),
            unpinned: Vec::new(),
            peaks: Vec::new(),
        };
        let table = targets(&r);
        assert_eq!(
            table.rows[0][1],
            "single streams not measured; beside an untraced twin stream: 0.970× / 0.970× \
             (empty programs 0.990× / 0.990×)"
        );
        assert_eq!(table.rows[0][2], "not measured");
        assert_eq!(table.rows[1][1], "– (tcpdump –)");
    }
}
