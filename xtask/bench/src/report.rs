//! The bench's tables: medians of the runs with min–max, ratios taken round by round against
//! the untraced run of the same round, and the targets judged.

use std::fmt::Write as _;

use super::{
    Results,
    collector::{CollectorSample, Scenario},
    floor,
    hooks::{self, HookSample, Hooks},
    iperf::Stream,
    micro::{Binary, Frame, Micro},
    paired::{self, PairSample},
    proc::Memory,
    stats::{Dist, Table, show},
    throughput::{Sample, Throughput},
    tracer::{Attach, Condition},
};

/// What a throughput row shows.
#[derive(Clone, Copy)]
pub(super) enum Metric {
    Gbps,
    RecvKpps,
    SentKpps,
}

impl Metric {
    fn of(self, s: &Sample) -> f64 {
        match self {
            Self::Gbps => s.result.recv_bps / 1e9,
            Self::RecvKpps => s.result.recv_pps / 1e3,
            Self::SentKpps => s.result.sent_pps / 1e3,
        }
    }

    const fn unit(self) -> &'static str {
        match self {
            Self::Gbps => "Gbit/s",
            Self::RecvKpps => "kpps received",
            Self::SentKpps => "kpps sent",
        }
    }

    fn for_stream(stream: Stream) -> &'static [Self] {
        if stream.is_udp() {
            &[Self::RecvKpps, Self::SentKpps]
        } else {
            &[Self::Gbps]
        }
    }
}

fn samples(t: &Throughput, c: Condition, s: Stream) -> impl Iterator<Item = &Sample> {
    t.samples
        .iter()
        .filter(move |x| x.condition == c && x.stream == s)
}

fn dist(t: &Throughput, c: Condition, s: Stream, f: impl Fn(&Sample) -> f64) -> Option<Dist> {
    Dist::of(samples(t, c, s).map(f))
}

/// `metric(condition) / metric(untraced)`, round by round.
pub(super) fn ratio(t: &Throughput, c: Condition, s: Stream, m: Metric) -> Option<Dist> {
    Dist::of(samples(t, c, s).filter_map(|x| {
        let base = samples(t, Condition::Untraced, s).find(|b| b.round == x.round)?;
        Some(m.of(x) / m.of(base))
    }))
}

/// Throughput retention: the untraced value, then each condition's ratio to it.
fn retention(t: &Throughput) -> Table {
    let traced = &Condition::ALL[1..];
    let mut table = Table::new(
        ["stream", "untraced"]
            .into_iter()
            .map(String::from)
            .chain(traced.iter().map(|c| c.label().to_owned())),
    );
    for stream in Stream::ALL {
        for &m in Metric::for_stream(stream) {
            let mut row = vec![
                format!("{stream}, {}", m.unit()),
                show(dist(t, Condition::Untraced, stream, |x| m.of(x)), 1),
            ];
            row.extend(
                traced.iter().map(|&c| {
                    ratio(t, c, stream, m).map_or_else(|| "–".into(), |d| d.show_ratio())
                }),
            );
            table.row(row);
        }
    }
    table
}

/// TCP retention against the untraced twin ([`paired`]): per stream, the untraced run's
/// goodput over the twin's, then each traced condition's retention.
fn paired_retention(samples: &[PairSample]) -> Table {
    let traced = &Condition::ALL[1..];
    let mut table = Table::new(
        [
            "stream",
            "untraced: Gbit/s, beside the twin's",
            "untraced / twin",
        ]
        .into_iter()
        .map(String::from)
        .chain(traced.iter().map(|c| c.label().to_owned())),
    );
    for stream in paired::STREAMS {
        let untraced = || {
            samples
                .iter()
                .filter(move |s| s.condition == Condition::Untraced && s.stream == stream)
        };
        let mut row = vec![
            stream.to_string(),
            format!(
                "{} beside {}",
                show(Dist::of(untraced().map(|s| s.bps / 1e9)), 1),
                show(Dist::of(untraced().map(|s| s.twin_bps / 1e9)), 1)
            ),
            Dist::of(untraced().map(PairSample::ratio))
                .map_or_else(|| "–".into(), |d| d.show_ratio()),
        ];
        row.extend(traced.iter().map(|&c| {
            Dist::of(paired::retention(samples, c, stream, Binary::Measured))
                .map_or_else(|| "–".into(), |d| d.show_ratio())
        }));
        table.row(row);
    }
    table
}

/// Per pktrace condition and stream, the measured binary's ratio to the twin over the
/// baseline's in the same round.
fn paired_vs_baseline(samples: &[PairSample]) -> Table {
    let conditions: Vec<Condition> = Condition::ALL
        .into_iter()
        .filter(|c| c.is_pktrace())
        .collect();
    let mut table = Table::new(
        std::iter::once("stream".to_owned()).chain(conditions.iter().map(|c| c.label().to_owned())),
    );
    for stream in paired::STREAMS {
        let mut row = vec![stream.to_string()];
        row.extend(conditions.iter().map(|&c| {
            Dist::of(paired::versus_baseline(samples, c, stream))
                .map_or_else(|| "–".into(), |d| d.show_ratio())
        }));
        table.row(row);
    }
    table
}

/// Absolute values and UDP loss under every condition.
fn absolute(t: &Throughput) -> Table {
    let mut table =
        Table::new(std::iter::once("stream").chain(Condition::ALL.iter().map(|c| c.label())));
    for stream in Stream::ALL {
        for &m in Metric::for_stream(stream) {
            let mut row = vec![format!("{stream}, {}", m.unit())];
            row.extend(
                Condition::ALL
                    .iter()
                    .map(|&c| show(dist(t, c, stream, |x| m.of(x)), 1)),
            );
            table.row(row);
        }
        if stream.is_udp() {
            let mut row = vec![format!("{stream}, % lost")];
            row.extend(
                Condition::ALL
                    .iter()
                    .map(|&c| show(dist(t, c, stream, |x| x.result.loss_pct), 1)),
            );
            table.row(row);
        }
    }
    table
}

/// The tracers while the streams flow: CPU, pktrace's events and kernel losses.
#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn tracer_load(t: &Throughput, seconds: u64) -> Table {
    let traced: Vec<Condition> = Condition::ALL
        .into_iter()
        .filter(|c| c.has_tracer())
        .collect();
    let mut table = Table::new(std::iter::once("stream").chain(traced.iter().map(|c| c.label())));
    for stream in Stream::ALL {
        let mut row = vec![stream.to_string()];
        for &c in &traced {
            let cpu = dist(t, c, stream, |x| x.tracer_cpu_pct);
            let mut cell = format!("CPU {} %", show(cpu, 0));
            if c.is_pktrace() {
                let events = dist(t, c, stream, |x| {
                    x.counters.emitted as f64 / seconds as f64 / 1e3
                });
                let lost: u64 = samples(t, c, stream).map(|x| x.counters.ringbuf_full).sum();
                let _ = write!(cell, "; {} k events/s; {lost} lost", show(events, 0));
            }
            if c == Condition::Tcpdump {
                let dropped = Dist::of(
                    t.tracers
                        .iter()
                        .filter(|r| r.condition == c && r.stream == stream)
                        .filter_map(|r| r.dropped)
                        .map(|d| d as f64 / 1e3),
                );
                let _ = write!(cell, "; {} k dropped", show(dropped, 1));
            }
            row.push(cell);
        }
        table.row(row);
    }
    table
}

/// ns per program run, per condition and stream.
fn per_hook(h: &Hooks) -> Table {
    let columns = hook_columns();
    let mut table = Table::new(
        std::iter::once("program, ns/run".to_owned())
            .chain(columns.iter().map(|&(c, s)| hook_column(c, s))),
    );
    let row = |samples: &[HookSample], program: &str, label: String| {
        let mut row = vec![label];
        for &(c, s) in &columns {
            let runs = samples
                .iter()
                .filter(|x| x.program == program && x.condition == c && x.stream == s);
            let ns = Dist::of(runs.clone().map(|x| x.ns_per_run));
            let rate = Dist::of(runs.map(|x| x.runs_per_s / 1e3));
            row.push(match (ns, rate) {
                (Some(ns), Some(rate)) => format!("{} ({:.0} k/s)", ns.show(0), rate.median),
                _ => "–".into(),
            });
        }
        row
    };
    let mut programs: Vec<&str> = h.samples.iter().map(|s| s.program.as_str()).collect();
    programs.sort_unstable();
    programs.dedup();
    for program in programs {
        table.row(row(&h.samples, program, program.to_owned()));
    }
    for (program, label) in [
        (floor::TC_NAME, "floor: empty tc program (bench's own)"),
        (
            floor::NF_NAME,
            "floor: empty netfilter program (bench's own)",
        ),
        (
            floor::DROP_NAME,
            "floor: empty raw tracepoint on kfree_skb (bench's own)",
        ),
    ] {
        if h.floor.iter().any(|s| s.program == program) {
            table.row(row(&h.floor, program, label.to_owned()));
        }
    }
    let mut per_packet = vec!["all programs, ns per UDP datagram".to_owned()];
    let mut cpu = vec!["all programs, % of a CPU".to_owned()];
    for &(c, s) in &columns {
        let paths = || {
            h.paths
                .iter()
                .filter(move |p| p.condition == c && p.stream == s)
        };
        per_packet.push(show(Dist::of(paths().filter_map(|p| p.ns_per_packet)), 0));
        cpu.push(show(Dist::of(paths().map(|p| p.cpu_pct)), 1));
    }
    table.row(per_packet);
    table.row(cpu);
    table
}

fn collector(samples: &[CollectorSample]) -> Table {
    let side_by_side = samples.iter().any(|s| s.binary == Binary::Baseline);
    let mut header = vec![
        "load (pktrace on 1 CPU)",
        "kpps sent",
        "k events/s emitted",
        "pktrace CPU %",
        "k events per CPU-second",
        "k events per CPU-second, second half of the stream",
        "lost in kernel",
        "`loss` lines",
        "summary lost_events",
        "JSON MB/s",
    ];
    if side_by_side {
        header.push("events per CPU-second vs baseline (within rounds)");
    }
    let mut table = Table::new(header);
    for scenario in Scenario::ALL {
        for binary in [Binary::Measured, Binary::Baseline] {
            let runs: Vec<&CollectorSample> = samples
                .iter()
                .filter(|s| s.scenario == scenario && s.binary == binary)
                .collect();
            if runs.is_empty() {
                continue;
            }
            let mut row = collector_row(scenario, binary, &runs);
            if side_by_side {
                row.push(match binary {
                    Binary::Measured => collector_vs_baseline(samples, scenario)
                        .map_or_else(|| "–".into(), |d| d.show_ratio()),
                    Binary::Baseline => String::new(),
                });
            }
            table.row(row);
        }
    }
    table
}

fn collector_row(scenario: Scenario, binary: Binary, runs: &[&CollectorSample]) -> Vec<String> {
    let d = |f: &dyn Fn(&CollectorSample) -> f64| Dist::of(runs.iter().map(|s| f(s)));
    let per_run = |f: &dyn Fn(&CollectorSample) -> u64| {
        runs.iter()
            .map(|s| f(s).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let label = match binary {
        Binary::Measured => scenario.label().to_owned(),
        Binary::Baseline => format!("{} (baseline)", scenario.label()),
    };
    vec![
        label,
        show(d(&|s| s.sent_pps / 1e3), 0),
        show(d(&|s| s.emitted_per_s / 1e3), 0),
        show(d(&|s| s.cpu_pct), 0),
        show(d(&|s| s.events_per_cpu_s / 1e3), 0),
        show(d(&|s| s.steady_events_per_cpu_s / 1e3), 0),
        per_run(&|s| s.kernel_lost),
        per_run(&|s| s.totals.loss_lines),
        per_run(&|s| s.totals.lost_events),
        show(d(&|s| s.output_bytes_per_s / 1e6), 1),
    ]
}

/// The measured binary's events per CPU-second over the baseline's, in each round.
fn collector_vs_baseline(samples: &[CollectorSample], scenario: Scenario) -> Option<Dist> {
    let of = |binary: Binary, round: usize| {
        samples
            .iter()
            .find(|s| s.scenario == scenario && s.binary == binary && s.round == round)
            .map(|s| s.events_per_cpu_s)
    };
    let rounds = samples.iter().map(|s| s.round).max()?;
    Dist::of(
        (0..=rounds)
            .filter_map(|round| Some(of(Binary::Measured, round)? / of(Binary::Baseline, round)?)),
    )
}

#[expect(
    clippy::cast_precision_loss,
    reason = "KiB and interface counts far below 2^52"
)]
fn footprint(r: &Results) -> Table {
    let mut table = Table::new(["measure", "median (min–max)"]);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let rss_cell = |mems: &[Memory]| {
        let rss = Dist::of(mems.iter().map(|m| mib(m.rss)));
        let anon = Dist::of(mems.iter().map(|m| mib(m.anon)));
        format!(
            "{} [{}]",
            show(rss, 1),
            anon.map_or_else(|| "–".into(), |d| format!("{:.1}", d.median))
        )
    };
    for c in [
        Condition::ClientPod,
        Condition::OtherPod,
        Condition::TraceAll,
    ] {
        let peaks: Vec<Memory> = (0..r.runs)
            .filter_map(|round| {
                let runs = r
                    .throughput
                    .samples
                    .iter()
                    .filter(|s| s.condition == c && s.round == round);
                runs.map(|s| s.memory).max_by_key(|m| m.rss)
            })
            .collect();
        table.row([
            format!(
                "VmRSS [anonymous] under load, MiB: {} (largest of the 4 streams)",
                c.label()
            ),
            rss_cell(&peaks),
        ]);
        let hwm = Dist::of(
            r.throughput
                .tracers
                .iter()
                .filter(|t| t.condition == c)
                .map(|t| mib(t.memory.hwm)),
        );
        table.row([format!("VmHWM, MiB: {}", c.label()), show(hwm, 1)]);
    }
    for scenario in Scenario::ALL {
        let runs: Vec<&CollectorSample> = r.collector_of(scenario).collect();
        let mids: Vec<Memory> = runs.iter().map(|s| s.memory_mid).collect();
        table.row([
            format!("VmRSS [anonymous] under load, MiB: {}", scenario.label()),
            rss_cell(&mids),
        ]);
        let hwm = Dist::of(runs.iter().map(|s| mib(s.memory_end.hwm)));
        table.row([format!("VmHWM, MiB: {}", scenario.label()), show(hwm, 1)]);
    }
    let mut configs: Vec<(usize, Attach, &str)> = r
        .startup
        .samples
        .iter()
        .map(|s| (s.interfaces, s.attach, s.mode.as_str()))
        .collect();
    configs.dedup();
    let startups = |n: usize, attach: Attach| {
        r.startup
            .samples
            .iter()
            .filter(move |s| s.interfaces == n && s.attach == attach)
    };
    for &(n, attach, mode) in &configs {
        let at = format!("{n} interfaces, {} ({mode})", attach.label());
        let ready = Dist::of(startups(n, attach).map(|s| s.ready_s));
        table.row([format!("start → ready file, s: {at}"), show(ready, 3)]);
        let first = Dist::of(startups(n, attach).map(|s| s.first_journey_s));
        table.row([
            format!("start → first journey line, s: {at}"),
            show(first, 3),
        ]);
        let stop = Dist::of(startups(n, attach).map(|s| s.stop_s));
        table.row([format!("SIGINT → exit, s: {at}"), show(stop, 3)]);
    }
    // What each extra interface costs, against the node as it is (few interfaces, all tcx).
    if let Some(&(few, few_attach, _)) = configs.first()
        && let Some(base) = Dist::of(startups(few, few_attach).map(|s| s.ready_s))
    {
        for &(many, attach, mode) in configs.iter().filter(|c| c.0 > few) {
            if let Some(d) = Dist::of(startups(many, attach).map(|s| s.ready_s)) {
                let per = (d.median - base.median) / (many - few) as f64 * 1e3;
                table.row([
                    format!(
                        "start-up per extra interface, ms ({}, {mode}; difference of medians)",
                        attach.label()
                    ),
                    format!("{per:.2}"),
                ]);
            }
        }
    }
    table.row([
        "creating the extra veths (ip -batch), s".to_owned(),
        format!("{:.1}", r.startup.create_veths_s),
    ]);
    table
}

/// Per program and column, the measured binary's ns per run over the baseline's in the same
/// round and stream, median (min–max); and the same for all programs' CPU.
fn per_hook_vs_baseline(h: &Hooks) -> Table {
    let columns = hook_columns();
    let mut table = Table::new(
        std::iter::once("program: measured / baseline".to_owned())
            .chain(columns.iter().map(|&(c, s)| hook_column(c, s))),
    );
    let mut programs: Vec<&str> = h.samples.iter().map(|s| s.program.as_str()).collect();
    programs.sort_unstable();
    programs.dedup();
    for program in programs {
        let mut row = vec![program.to_owned()];
        for &(c, s) in &columns {
            let pick = |samples: &[HookSample], round: usize| {
                samples
                    .iter()
                    .find(|x| {
                        x.program == program
                            && x.condition == c
                            && x.stream == s
                            && x.round == round
                    })
                    .map(|x| x.ns_per_run)
            };
            let ratios = h.samples.iter().filter_map(|m| {
                (m.program == program && m.condition == c && m.stream == s)
                    .then(|| pick(&h.baseline, m.round))
                    .flatten()
                    .filter(|b| *b > 0.0)
                    .map(|b| m.ns_per_run / b)
            });
            row.push(Dist::of(ratios).map_or_else(|| "–".into(), |d| d.show_ratio()));
        }
        table.row(row);
    }
    let mut cpu = vec!["all programs, % of a CPU".to_owned()];
    for &(c, s) in &columns {
        let ratios = h.paths.iter().filter_map(|m| {
            (m.condition == c && m.stream == s)
                .then(|| {
                    h.baseline_paths
                        .iter()
                        .find(|b| b.condition == c && b.stream == s && b.round == m.round)
                })
                .flatten()
                .filter(|b| b.cpu_pct > 0.0)
                .map(|b| m.cpu_pct / b.cpu_pct)
        });
        cpu.push(Dist::of(ratios).map_or_else(|| "–".into(), |d| d.show_ratio()));
    }
    table.row(cpu);
    table
}

/// The per-hook tables' columns: each condition under each stream.
fn hook_columns() -> Vec<(Condition, Stream)> {
    hooks::CONDITIONS
        .iter()
        .flat_map(|&c| hooks::STREAMS.iter().map(move |&s| (c, s)))
        .collect()
}

/// A per-hook column's heading.
fn hook_column(c: Condition, s: Stream) -> String {
    let what = match c {
        Condition::OtherPod => "outside filter",
        Condition::ClientPod => "emitted (--pod-ip)",
        _ => "--trace-all",
    };
    format!("{what}, {}", s.short())
}

/// The tc program alone, per frame: the measured binary, and the baseline beside it.
fn micro(m: &Micro) -> Table {
    let with_base = m.baseline.is_some();
    let mut heading = vec!["frame".to_owned(), "tc_egress, ns/run".to_owned()];
    if let Some(b) = &m.baseline {
        heading.push(format!("baseline ({}), ns/run", b.display()));
        heading.push("ratio to the baseline".to_owned());
    }
    let mut table = Table::new(heading);
    let of = |binary: Binary, frame: Frame| {
        m.samples
            .iter()
            .filter(move |s| s.binary == binary && s.frame == frame)
    };
    for frame in Frame::ALL.into_iter().chain(Frame::WITH_EXPRESSION) {
        if of(Binary::Measured, frame).next().is_none() {
            continue;
        }
        let mut row = vec![
            frame.label().to_owned(),
            show(
                Dist::of(of(Binary::Measured, frame).map(|s| s.ns_per_run)),
                0,
            ),
        ];
        if with_base {
            row.push(show(
                Dist::of(of(Binary::Baseline, frame).map(|s| s.ns_per_run)),
                0,
            ));
            let ratios = of(Binary::Measured, frame).filter_map(|s| {
                of(Binary::Baseline, frame)
                    .find(|b| b.round == s.round && b.ns_per_run > 0.0)
                    .map(|b| s.ns_per_run / b.ns_per_run)
            });
            row.push(Dist::of(ratios).map_or_else(|| "–".into(), |d| d.show_ratio()));
        }
        table.row(row);
    }
    table
}

/// What the per-hook table shows, under its heading.
const PER_HOOK_NOTE: &str = "BPF run-time statistics (on for this phase only): run_time_ns / run_cnt per program \
    over each stream (TCP and 64-byte UDP, to the ClusterIP: DNAT, and to the outside \
    host: MASQ; and `UDP DROP`, the ClusterIP's UDP stream dropped by the backend pod's \
    own firewall, whose every datagram runs the drop program on `skb:kfree_skb` once), \
    median (min–max) of the runs, and runs per second. Each measured run \
    includes about one clock read of the statistics themselves. tc programs run on every \
    attached interface, so their rate adds up over interfaces; likewise `nf_enter` and \
    `nf_exit` are each one program on the four netfilter hooks around the nat table, so \
    their figure is the mean over those hooks' runs (a baseline built with one program \
    per hook, `nf_pre_enter` and so on, has its four added up the same way). The floor \
    rows are the bench's own programs that return at once (`r0 = verdict; exit`), on the \
    same hook types (tcx ingress and egress of the same interfaces; the four IPv4 netfilter \
    hooks; a raw tracepoint on `kfree_skb`) \
    during the same streams: what the statistics' clock reads and the call cost with no \
    work at all, included in every program's figure above.\n\n";

/// Every table, with headings, as Markdown.
#[must_use]
pub fn tables(r: &Results) -> String {
    let n = r.runs;
    let mut out = String::new();
    let mut section = |title: &str, note: &str, table: Table| {
        let _ = write!(out, "#### {title}\n\n{note}{}\n", table.markdown());
    };
    section("Targets", "", super::targets::targets(r));
    section(
        "Throughput retention",
        &format!(
            "Untraced: median (min–max) of {} of {} s. Traced: ratio to the untraced run of the \
             same round and stream (run just before it), median (min–max).\n\n",
            super::doc::runs(n),
            r.seconds
        ),
        retention(&r.throughput),
    );
    if !r.paired.is_empty() {
        section(
            "TCP retention beside an untraced twin",
            &format!(
                "Each TCP stream again, with a second TCP stream beside it on the same CPU between \
                 two namespaces outside the node, which no tracer sees (the twin): the machine's \
                 noise moves both alike. Retention: the stream's goodput over the twin's, over \
                 the same ratio untraced in the same round; median (min–max) of {} of {} s. The \
                 untraced columns: goodputs (Gbit/s, median (min–max)) and their ratio.\n\n",
                super::doc::runs(n),
                r.seconds
            ),
            paired_retention(&r.paired),
        );
        if r.paired.iter().any(|s| s.binary == Binary::Baseline) {
            section(
                "TCP retention beside an untraced twin, side by side with the baseline",
                "The `--baseline` binary ran each pktrace condition too, in the same round (the \
                 measured one first in even rounds). Each cell is the measured binary's goodput \
                 over the twin's, over the baseline's, median (min–max) over the rounds.\n\n",
                paired_vs_baseline(&r.paired),
            );
        }
    }
    section("Throughput, absolute", "", absolute(&r.throughput));
    section(
        "Tracers under load",
        "CPU of the tracer's user space (on its own CPU); pktrace: events the kernel emitted per \
         second and events lost to a full ring buffer (sum over runs); tcpdump: packets its \
         socket dropped (thousands per run).\n\n",
        tracer_load(&r.throughput, r.seconds),
    );
    section("Per-hook cost", PER_HOOK_NOTE, per_hook(&r.hooks));
    if !r.hooks.baseline.is_empty() {
        section(
            "Per-hook cost, side by side with the baseline",
            "The same phase with the `--baseline` binary: each condition's streams ran under both \
             binaries in turn, in the same round (the measured one first in even rounds). Each \
             cell is the measured binary's ns per run over the baseline's in the same round and \
             stream, median (min–max) over the rounds.\n\n",
            per_hook_vs_baseline(&r.hooks),
        );
    }
    if !r.micro.samples.is_empty() {
        section(
            "tc program alone (BPF_PROG_TEST_RUN)",
            &format!(
                "pktrace's `tc_egress` run by `bpftool prog run … repeat {}` on the bench \
                 node's uplink, pktrace tracing the client pod, no stream flowing: the kernel's \
                 average per run, median (min–max) of the rounds (each the median of {} calls). \
                 Warm caches and no statistics clock: the program's own instructions, helpers \
                 and map accesses. A baseline binary, when given, was loaded beside the measured \
                 one and the calls alternated between them; the ratio is taken within each \
                 round.\n\n",
                super::micro::REPEAT,
                super::micro::CALLS
            ),
            micro(&r.micro),
        );
    }
    section(
        "Collector capacity",
        "Per-run values are listed in run order. With a baseline binary, each scenario ran \
         under both binaries in turn in every round (the measured one first in even rounds).\n\n",
        collector(&r.collector),
    );
    section("Footprint and start-up", "", footprint(r));
    out.push_str(&super::unpinned::sections(r));
    out
}
