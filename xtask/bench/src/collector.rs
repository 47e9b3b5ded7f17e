//! Collector capacity: how many events pktrace reads, joins and prints per second on one CPU,
//! and whether the kernel counts losses. pktrace runs on [`TRACER_CPU`] with its JSON lines in a
//! file (to read the summary and the `loss` lines back); the 64-byte UDP stream runs on the
//! other CPU, paced at 100,000 datagrams/s with the streaming pod traced, then as fast as it
//! goes with `--trace-all`. Last, [`Scenario::Synthetic`]: pktrace's own `tc_egress` run by
//! the kernel as fast as it goes ([`super::synthetic`]), which real traffic from one CPU no
//! longer matches: the collector's ceiling, on one-step journeys. With `--baseline` each
//! scenario of a round runs under both binaries in turn (the first alternating round by round),
//! so that a change is judged by ratios taken within rounds, not across a busy machine's moods.
//!
//! [`TRACER_CPU`]: super::proc::TRACER_CPU

use std::{fs, path::Path, thread, time::Duration};

use anyhow::Result;

use super::{
    Ctx,
    iperf::{self, Rate, Stream},
    micro::Binary,
    proc::Memory,
    synthetic,
    tracer::{Condition, JsonTotals, Launch, Output, Tracer, json_totals, output_path},
};

/// Traced packets per second of the paced scenario (the loss target's rate).
pub const PACED_PPS: u64 = 100_000;
/// Time left to pktrace to drain the ring after the stream (its timer runs every 20 ms).
const SETTLE: Duration = Duration::from_millis(300);

/// A load on the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scenario {
    /// `--pod-ip <client>`, UDP at [`PACED_PPS`].
    Paced,
    /// `--trace-all`, UDP as fast as it goes.
    Flood,
    /// `--trace-all`, fed by the synthetic producer (one-step journeys).
    Synthetic,
}

impl Scenario {
    pub const ALL: [Self; 3] = [Self::Paced, Self::Flood, Self::Synthetic];

    const fn condition(self) -> Condition {
        match self {
            Self::Paced => Condition::ClientPod,
            Self::Flood | Self::Synthetic => Condition::TraceAll,
        }
    }

    const fn rate(self) -> Rate {
        match self {
            Self::Paced => Some(PACED_PPS),
            Self::Flood | Self::Synthetic => None,
        }
    }

    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Paced => "paced_100k_pod",
            Self::Flood => "flood_trace_all",
            Self::Synthetic => "synthetic_trace_all",
        }
    }

    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Paced => "--pod-ip, UDP 64 B at 100 kpps",
            Self::Flood => "--trace-all, UDP 64 B flood",
            Self::Synthetic => "--trace-all, synthetic (BPF_PROG_TEST_RUN of tc_egress)",
        }
    }
}

/// One scenario in one round.
#[derive(Clone, Copy, Debug)]
pub struct CollectorSample {
    pub round: usize,
    pub scenario: Scenario,
    /// Which pktrace ran.
    pub binary: Binary,
    pub sent_pps: f64,
    /// Events the kernel emitted per second of stream.
    pub emitted_per_s: f64,
    /// Events the kernel could not emit (ring buffer full) during the stream.
    pub kernel_lost: u64,
    /// pktrace's CPU use during the stream, percent of its one CPU.
    pub cpu_pct: f64,
    /// Events pktrace decoded per CPU-second it used (from ready to the end): its capacity.
    pub events_per_cpu_s: f64,
    /// Events the kernel emitted per CPU-second pktrace used in the stream's second half
    /// (halfway to its end): the capacity without what a run pays once (start-up, naming each
    /// new drop site from kallsyms, the sockets' closing). Read where pktrace keeps up (no
    /// loss, its CPU below 100 %); 0 when not measured.
    pub steady_events_per_cpu_s: f64,
    /// The JSON summary and `loss` lines.
    pub totals: JsonTotals,
    /// JSON lines written per second of stream, bytes.
    pub output_bytes_per_s: f64,
    /// pktrace's memory halfway through the stream, and at the end.
    pub memory_mid: Memory,
    pub memory_end: Memory,
}

/// Runs every scenario `ctx.runs` times, interleaved; with a `baseline`, each scenario under
/// both binaries in turn (the measured one first in even rounds).
pub fn run(ctx: &Ctx, baseline: Option<&Path>) -> Result<Vec<CollectorSample>> {
    let mut binaries = vec![(Binary::Measured, ctx.pktrace.as_path())];
    if let Some(b) = baseline {
        binaries.push((Binary::Baseline, b));
    }
    let mut out = Vec::new();
    for round in 0..ctx.runs {
        let mut order = binaries.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for scenario in Scenario::ALL {
            for &(binary, pktrace) in &order {
                super::check_interrupted()?;
                eprintln!(
                    "bench: collector round {}/{}: {} ({})",
                    round + 1,
                    ctx.runs,
                    scenario.label(),
                    binary.key()
                );
                let sample = one(ctx, round, scenario, (binary, pktrace))?;
                report_sample(&sample);
                out.push(sample);
            }
        }
    }
    Ok(out)
}

fn report_sample(sample: &CollectorSample) {
    eprintln!(
        "bench:   {:.0} kpps sent, {:.0} k events/s emitted, {} lost in the kernel, pktrace \
                 {:.0} % CPU, {:.0} k events per CPU-second ({:.0} k in the second half), {} loss \
                 lines",
        sample.sent_pps / 1e3,
        sample.emitted_per_s / 1e3,
        sample.kernel_lost,
        sample.cpu_pct,
        sample.events_per_cpu_s / 1e3,
        sample.steady_events_per_cpu_s / 1e3,
        sample.totals.loss_lines
    );
}

#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn one(
    ctx: &Ctx,
    round: usize,
    scenario: Scenario,
    (binary, pktrace): (Binary, &Path),
) -> Result<CollectorSample> {
    let path = output_path(&ctx.dir, scenario.key());
    let condition = scenario.condition();
    let launch = Launch {
        out: Output::File(&path),
        ..Launch::default()
    };
    let tracer = Tracer::start(condition, &ctx.dir, pktrace, &launch)?;
    let Some(mut tracer) = tracer else {
        unreachable!("collector scenarios run pktrace")
    };
    let (cpu_ready, counters0) = (tracer.cpu_seconds()?, tracer.counters()?);
    let start = std::time::Instant::now();
    let mut memory_mid = Memory::default();
    // CPU seconds and events emitted halfway through the stream.
    let mut halfway: Option<(f64, u64)> = None;
    let mut midway = || {
        memory_mid = tracer.memory().unwrap_or_default();
        if let (Ok(cpu), Ok(c)) = (tracer.cpu_seconds(), tracer.counters()) {
            halfway = Some((cpu, c.emitted));
        }
    };
    let sent_pps = if scenario == Scenario::Synthetic {
        let produced = synthetic::run(&tracer.prog_ids, &ctx.dir, ctx.seconds, &mut midway)?;
        produced.runs as f64 / produced.seconds
    } else {
        let result = iperf::run(
            Stream::UdpClusterIp,
            scenario.rate(),
            ctx.seconds,
            &ctx.dir,
            &mut midway,
        )?;
        result.sent_pps
    };
    let secs = start.elapsed().as_secs_f64();
    let cpu_end = tracer.cpu_seconds()?;
    let cpu_stream = cpu_end - cpu_ready;
    let counters_end = tracer.counters()?;
    let steady_events_per_cpu_s = halfway
        .filter(|&(cpu, _)| cpu_end - cpu > 0.001)
        .map_or(0.0, |(cpu, emitted)| {
            counters_end.emitted.saturating_sub(emitted) as f64 / (cpu_end - cpu)
        });
    let counters = counters_end.since(&counters0);
    thread::sleep(SETTLE);
    tracer.check_alive()?;
    let cpu_total = tracer.cpu_seconds()? - cpu_ready;
    let memory_end = tracer.memory()?;
    tracer.stop()?;
    let totals = json_totals(&path)?;
    let bytes = fs::metadata(&path).map_or(0, |m| m.len());
    let _ = fs::remove_file(&path);
    Ok(CollectorSample {
        round,
        scenario,
        binary,
        sent_pps,
        emitted_per_s: counters.emitted as f64 / secs,
        kernel_lost: counters.ringbuf_full,
        cpu_pct: 100.0 * cpu_stream / secs,
        events_per_cpu_s: totals.events as f64 / cpu_total.max(0.01),
        steady_events_per_cpu_s,
        totals,
        output_bytes_per_s: bytes as f64 / secs,
        memory_mid,
        memory_end,
    })
}
