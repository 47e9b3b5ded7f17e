//! Per-hook cost: BPF run-time statistics (`run_time_ns / run_cnt` of each pktrace program)
//! while a stream flows, for packets outside the filter (tracing another pod), emitted ones
//! (tracing the streaming pod) and `--trace-all`. Statistics are on only for this phase: they
//! add two clock reads to every program run, which the throughput phase must not pay.
//!
//! The bench's own empty programs ([`super::floor`]) sit on the same hook types during the whole
//! phase and are measured in the same streams: their figure is what the statistics' clock
//! reads and the call cost on their own, the floor under every pktrace program's figure.
//!
//! With `--baseline <pktrace>`, each round runs every condition's streams under that binary
//! too, right after (or, every other round, right before) the measured one: the same cost under
//! the same streams, side by side in one run, cache misses included.

use std::{collections::BTreeMap, path::Path};

use anyhow::Result;

use super::{
    Ctx,
    bpf::{ProgRun, RunStats, prog_runs},
    floor::Floor,
    iperf::Stream,
    micro::Binary,
    throughput::measure,
    tracer::{Condition, Launch, Tracer},
};

/// The conditions and streams of this phase.
pub const CONDITIONS: [Condition; 3] = [
    Condition::OtherPod,
    Condition::ClientPod,
    Condition::TraceAll,
];
/// Every stream: the DNAT path (a ClusterIP) and the MASQUERADE path, whose followed flows
/// (the node's address and the outside host) the DNAT path never has; and UDP datagrams the
/// backend drops, for the drop program.
pub const STREAMS: [Stream; 5] = [
    Stream::TcpClusterIp,
    Stream::TcpMasq,
    Stream::UdpClusterIp,
    Stream::UdpMasq,
    Stream::UdpDropped,
];

/// One program during one stream.
#[derive(Clone, Debug)]
pub struct HookSample {
    pub round: usize,
    pub condition: Condition,
    pub stream: Stream,
    pub program: String,
    pub ns_per_run: f64,
    pub runs_per_s: f64,
}

/// All of pktrace's programs during one stream.
#[derive(Clone, Copy, Debug)]
pub struct PathCost {
    pub round: usize,
    pub condition: Condition,
    pub stream: Stream,
    /// BPF nanoseconds per datagram sent (UDP; all programs, all hooks).
    pub ns_per_packet: Option<f64>,
    /// BPF CPU use, percent of one CPU.
    pub cpu_pct: f64,
}

/// What the phase measured.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    pub samples: Vec<HookSample>,
    pub paths: Vec<PathCost>,
    /// The empty programs ([`super::floor`]) in the same streams, by program name
    /// ([`super::floor::TC_NAME`], [`super::floor::NF_NAME`]); empty when they could not be
    /// attached.
    pub floor: Vec<HookSample>,
    /// `samples` and `paths` of the `--baseline` binary (empty without one).
    pub baseline: Vec<HookSample>,
    pub baseline_paths: Vec<PathCost>,
}

/// Runs `ctx.runs` rounds of [`CONDITIONS`] × [`STREAMS`] with run-time statistics on; with a
/// baseline, each condition runs under both binaries in turn (measured first in even rounds).
pub fn run(ctx: &Ctx, baseline: Option<&Path>) -> Result<Hooks> {
    let _stats = RunStats::enable()?;
    let (_floor, floor_ids) = Floor::attach_or_none();
    let mut binaries = vec![(Binary::Measured, ctx.pktrace.as_path())];
    if let Some(b) = baseline {
        binaries.push((Binary::Baseline, b));
    }
    let mut out = Hooks::default();
    for round in 0..ctx.runs {
        for condition in CONDITIONS {
            let mut order = binaries.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for (binary, pktrace) in order {
                eprintln!(
                    "bench: per-hook cost round {}/{}: {}{}",
                    round + 1,
                    ctx.runs,
                    condition.label(),
                    if baseline.is_some() {
                        format!(" ({})", binary.key())
                    } else {
                        String::new()
                    }
                );
                let tracer = Tracer::start(condition, &ctx.dir, pktrace, &Launch::default())?;
                let Some(mut tracer) = tracer else { continue };
                for stream in STREAMS {
                    super::check_interrupted()?;
                    let before = prog_runs(&tracer.prog_ids)?;
                    let floor_before = prog_runs(&floor_ids)?;
                    let start = std::time::Instant::now();
                    let sample = measure(ctx, round, condition, stream, Some(&mut tracer))?;
                    let secs = start.elapsed().as_secs_f64();
                    let after = prog_runs(&tracer.prog_ids)?;
                    let floor_after = prog_runs(&floor_ids)?;
                    let key = (round, condition, stream);
                    let (programs, total_ns) = samples(key, &before, &after, secs);
                    let packets = sample.result.sent_packets;
                    let path = path_cost(key, total_ns, secs, packets);
                    if binary == Binary::Baseline {
                        out.baseline.extend(programs);
                        out.baseline_paths.push(path);
                        continue;
                    }
                    out.samples.extend(programs);
                    out.floor
                        .extend(samples(key, &floor_before, &floor_after, secs).0);
                    out.paths.push(path);
                }
                tracer.stop()?;
            }
        }
    }
    Ok(out)
}

/// One sample per program that ran between `before` and `after`, and their total run time.
#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn samples(
    (round, condition, stream): (usize, Condition, Stream),
    before: &BTreeMap<String, ProgRun>,
    after: &BTreeMap<String, ProgRun>,
    secs: f64,
) -> (Vec<HookSample>, u64) {
    let mut out = Vec::new();
    let mut total_ns = 0u64;
    for (program, end) in after {
        let start = before.get(program).copied().unwrap_or_default();
        let (ns, runs) = (
            end.run_time_ns.saturating_sub(start.run_time_ns),
            end.run_cnt.saturating_sub(start.run_cnt),
        );
        total_ns += ns;
        if runs == 0 {
            continue;
        }
        let sample = HookSample {
            round,
            condition,
            stream,
            program: program.clone(),
            ns_per_run: ns as f64 / runs as f64,
            runs_per_s: runs as f64 / secs,
        };
        eprintln!(
            "bench:   {stream}: {program}: {:.0} ns/run, {:.0} k runs/s",
            sample.ns_per_run,
            sample.runs_per_s / 1e3
        );
        out.push(sample);
    }
    (out, total_ns)
}

/// pktrace's programs together during one stream.
#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn path_cost(
    (round, condition, stream): (usize, Condition, Stream),
    total_ns: u64,
    secs: f64,
    packets: u64,
) -> PathCost {
    let ns_per_packet = (stream.is_udp() && packets > 0).then(|| total_ns as f64 / packets as f64);
    let cpu_pct = 100.0 * total_ns as f64 / 1e9 / secs;
    PathCost {
        round,
        condition,
        stream,
        ns_per_packet,
        cpu_pct,
    }
}
