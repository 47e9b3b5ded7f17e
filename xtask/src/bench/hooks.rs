//! Per-hook cost: BPF run-time statistics (`run_time_ns / run_cnt` of each pktrace program)
//! while a stream flows, for packets outside the filter (tracing another pod), emitted ones
//! (tracing the streaming pod) and `--trace-all`. Statistics are on only for this phase: they
//! add two clock reads to every program run, which the throughput phase must not pay.

use std::collections::BTreeMap;

use anyhow::Result;

use super::{
    Ctx,
    bpf::{ProgRun, RunStats, prog_runs},
    iperf::Stream,
    throughput::measure,
    tracer::{Condition, Launch, Tracer},
};

/// The conditions and streams of this phase.
pub const CONDITIONS: [Condition; 3] = [
    Condition::OtherPod,
    Condition::ClientPod,
    Condition::TraceAll,
];
pub const STREAMS: [Stream; 2] = [Stream::TcpClusterIp, Stream::UdpClusterIp];

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
}

/// Runs `ctx.runs` rounds of [`CONDITIONS`] × [`STREAMS`] with run-time statistics on.
pub fn run(ctx: &Ctx) -> Result<Hooks> {
    let _stats = RunStats::enable()?;
    let mut out = Hooks::default();
    for round in 0..ctx.runs {
        for condition in CONDITIONS {
            eprintln!(
                "bench: per-hook cost round {}/{}: {}",
                round + 1,
                ctx.runs,
                condition.label()
            );
            let tracer = Tracer::start(condition, &ctx.dir, &ctx.pktrace, &Launch::default())?;
            let Some(mut tracer) = tracer else { continue };
            for stream in STREAMS {
                super::check_interrupted()?;
                let before = prog_runs(&tracer.prog_ids)?;
                let start = std::time::Instant::now();
                let sample = measure(ctx, round, condition, stream, Some(&mut tracer))?;
                let secs = start.elapsed().as_secs_f64();
                let after = prog_runs(&tracer.prog_ids)?;
                record(
                    &mut out,
                    (round, condition, stream),
                    &before,
                    &after,
                    secs,
                    sample.result.sent_packets,
                );
            }
            tracer.stop()?;
        }
    }
    Ok(out)
}

#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn record(
    out: &mut Hooks,
    (round, condition, stream): (usize, Condition, Stream),
    before: &BTreeMap<String, ProgRun>,
    after: &BTreeMap<String, ProgRun>,
    secs: f64,
    packets: u64,
) {
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
        out.samples.push(sample);
    }
    let ns_per_packet = (stream.is_udp() && packets > 0).then(|| total_ns as f64 / packets as f64);
    let cpu_pct = 100.0 * total_ns as f64 / 1e9 / secs;
    out.paths.push(PathCost {
        round,
        condition,
        stream,
        ns_per_packet,
        cpu_pct,
    });
}
