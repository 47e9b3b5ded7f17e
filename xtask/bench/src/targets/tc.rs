//! The tc targets: what pktrace's tc programs cost per run in the hooks phase, net of the
//! bench's empty tc program measured in the same stream. For each stream of each round, the
//! tc programs' runs-weighted ns per run (`tc_ingress` and `tc_egress` together: their run
//! time over their runs) less the empty program's; the median over the rounds per stream;
//! judged on the worst stream.

use std::fmt::Write as _;

use super::Row;
use crate::{
    Results, floor,
    hooks::{HookSample, Hooks},
    iperf::Stream,
    micro::{Binary, Frame},
    stats::Dist,
    tracer::Condition,
};

/// ns per run, net of the empty tc program, for packets pktrace emits (`--pod-ip` of the
/// streaming pod).
const TRACED_NS: f64 = 150.0;
/// The same for packets outside the filter (`--pod-ip` of another pod).
const OUTSIDE_NS: f64 = 50.0;

/// Traced packets: [`Condition::ClientPod`].
pub(super) fn traced(r: &Results) -> Row {
    row(
        r,
        Condition::ClientPod,
        TRACED_NS,
        "traced packets (--pod-ip of the streaming pod)",
        &[Frame::EmittedUdp, Frame::EmittedTcp],
    )
}

/// Packets outside the filter: [`Condition::OtherPod`].
pub(super) fn outside(r: &Results) -> Row {
    row(
        r,
        Condition::OtherPod,
        OUTSIDE_NS,
        "packets outside the filter (--pod-ip of another pod)",
        &[Frame::OutsideFollowing],
    )
}

/// One stream of one round under one condition.
struct Net {
    stream: Stream,
    /// The tc programs together, runs-weighted, ns per run.
    raw: f64,
    /// The empty tc program's ns per run in the same stream.
    floor: f64,
    /// Each tc program's ns per run less `floor`.
    programs: Vec<(String, f64)>,
}

impl Net {
    fn net(&self) -> f64 {
        self.raw - self.floor
    }
}

/// pktrace's tc programs (`tc_ingress`, `tc_egress`).
fn is_tc(program: &str) -> bool {
    program.starts_with("tc_")
}

/// Every stream of every round of `condition` that has both pktrace's tc programs and the
/// empty tc program.
fn nets(h: &Hooks, condition: Condition) -> Vec<Net> {
    let floors = h
        .floor
        .iter()
        .filter(|f| f.condition == condition && f.program == floor::TC_NAME);
    floors
        .filter_map(|f| {
            let tc: Vec<&HookSample> = h
                .samples
                .iter()
                .filter(|s| {
                    s.condition == condition
                        && s.round == f.round
                        && s.stream == f.stream
                        && is_tc(&s.program)
                })
                .collect();
            Some(Net {
                stream: f.stream,
                raw: weighted(&tc)?,
                floor: f.ns_per_run,
                programs: tc
                    .iter()
                    .map(|s| (s.program.clone(), s.ns_per_run - f.ns_per_run))
                    .collect(),
            })
        })
        .collect()
}

/// Run time over runs of the programs together: each sample's ns per run weighted by its
/// runs (all samples of one stream share its length, so runs per second weigh the same).
fn weighted(samples: &[&HookSample]) -> Option<f64> {
    let runs: f64 = samples.iter().map(|s| s.runs_per_s).sum();
    let ns: f64 = samples.iter().map(|s| s.ns_per_run * s.runs_per_s).sum();
    (runs > 0.0).then(|| ns / runs)
}

/// Per stream (in the phase's order), the medians over the rounds of the net figure, the raw
/// one and the floor.
fn per_stream(nets: &[Net]) -> Vec<(Stream, Dist, f64, f64)> {
    crate::hooks::STREAMS
        .iter()
        .filter_map(|&stream| {
            let of =
                |f: fn(&Net) -> f64| Dist::of(nets.iter().filter(|n| n.stream == stream).map(f));
            Some((
                stream,
                of(Net::net)?,
                of(|n| n.raw)?.median,
                of(|n| n.floor)?.median,
            ))
        })
        .collect()
}

/// The tc program with the highest net median over the rounds on any stream: its name, the
/// figure and the stream.
fn slowest_program(nets: &[Net]) -> Option<(String, f64, Stream)> {
    let mut keys: Vec<(&str, Stream)> = nets
        .iter()
        .flat_map(|n| n.programs.iter().map(|(p, _)| (p.as_str(), n.stream)))
        .collect();
    keys.sort_unstable_by_key(|(p, s)| (*p, s.key()));
    keys.dedup();
    keys.into_iter()
        .filter_map(|(program, stream)| {
            let runs = nets.iter().filter(|n| n.stream == stream).flat_map(|n| {
                n.programs
                    .iter()
                    .filter(|(p, _)| p == program)
                    .map(|(_, ns)| *ns)
            });
            Dist::of(runs).map(|d| (program.to_owned(), d.median, stream))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// `tc_egress` alone on `frames` (micro phase), beside the judged figure: its own work, warm.
fn alone(r: &Results, frames: &[Frame]) -> Option<f64> {
    let runs = r
        .micro
        .samples
        .iter()
        .filter(|s| s.binary == Binary::Measured && frames.contains(&s.frame));
    Dist::of(runs.map(|s| s.ns_per_run)).map(|d| d.median)
}

fn row(r: &Results, condition: Condition, limit: f64, what: &str, frames: &[Frame]) -> Row {
    let target = format!("tc programs ≤ {limit:.0} ns per run net of the empty tc program: {what}");
    let nets = nets(&r.hooks, condition);
    let streams = per_stream(&nets);
    let Some((worst, d, raw, floor)) = streams
        .iter()
        .max_by(|a, b| a.1.median.total_cmp(&b.1.median))
    else {
        return without_floor(r, condition, target);
    };
    let mut measured = format!(
        "worst stream {}: {:.0} ns net (tc programs {raw:.0} ns per run, runs-weighted, less \
         the empty tc program's {floor:.0} ns; median of {}); per stream, ns net: {}",
        worst.short(),
        d.median,
        crate::doc::runs(d.n),
        streams
            .iter()
            .map(|(s, d, ..)| format!("{} {:.0}", s.short(), d.median))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some((program, ns, stream)) = slowest_program(&nets) {
        let _ = write!(
            measured,
            "; slowest single program: {program} {ns:.0} ns net ({})",
            stream.short()
        );
    }
    if let Some(ns) = alone(r, frames) {
        let _ = write!(
            measured,
            "; tc_egress alone (warm, BPF_PROG_TEST_RUN): {ns:.0} ns"
        );
    }
    Row::new(target, measured, Some(d.median <= limit))
}

/// Not judged: the hooks phase did not run, or ran without the empty program (it needs tcx
/// links, Linux 6.6 or later); the raw figure is shown when there is one.
fn without_floor(r: &Results, condition: Condition, target: String) -> Row {
    let tc: Vec<&HookSample> = r
        .hooks
        .samples
        .iter()
        .filter(|s| s.condition == condition && is_tc(&s.program))
        .collect();
    let raw = Dist::of(crate::hooks::STREAMS.iter().filter_map(|&stream| {
        let runs: Vec<&HookSample> = tc.iter().copied().filter(|s| s.stream == stream).collect();
        weighted(&runs)
    }));
    match raw {
        Some(d) => Row::new(
            target,
            format!(
                "{:.0} ns per run raw (tc programs, runs-weighted over the rounds, median over the \
                 streams); \
                 no empty tc program to subtract (the bench attaches it with tcx, Linux ≥ 6.6)",
                d.median
            ),
            None,
        ),
        None => Row::not_measured(target),
    }
}
