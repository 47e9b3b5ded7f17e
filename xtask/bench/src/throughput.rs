//! Throughput retention: every stream under every condition, the conditions interleaved
//! stream by stream (ABCDE ABCDE …, a fresh tracer for each run) so that the machine's noise
//! spreads over all of them and each ratio compares runs seconds apart.
//!
//! Also samples the tracer under load: its CPU use per stream, pktrace's kernel counters
//! (events emitted, lost), and its memory halfway through each stream.

use std::{fmt::Write as _, path::Path};

use anyhow::Result;

use super::{
    Ctx,
    bpf::KernelCounters,
    floor::Floor,
    iperf::{self, Stream, StreamResult},
    proc::Memory,
    tracer::{Condition, Launch, Tracer, tcpdump_dropped},
};

/// pktrace brackets each netfilter hook's nat table with two programs (enter and exit).
const NF_PROGRAMS_PER_HOOK: usize = 2;

/// One stream under one condition in one round.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub round: usize,
    pub condition: Condition,
    pub stream: Stream,
    pub result: StreamResult,
    /// Tracer CPU use during the stream, percent of one CPU.
    pub tracer_cpu_pct: f64,
    /// pktrace's kernel counters during the stream.
    pub counters: KernelCounters,
    /// Tracer memory halfway through the stream.
    pub memory: Memory,
}

/// One tracer process (one condition, one stream, one round).
#[derive(Clone, Copy, Debug)]
pub struct TracerRun {
    pub round: usize,
    pub condition: Condition,
    pub stream: Stream,
    pub ready_s: f64,
    /// Memory at the end (`hwm`: the peak of the whole run).
    pub memory: Memory,
    /// tcpdump: packets its kernel side dropped.
    pub dropped: Option<u64>,
}

/// Everything the phase measured.
#[derive(Clone, Debug, Default)]
pub struct Throughput {
    pub samples: Vec<Sample>,
    pub tracers: Vec<TracerRun>,
}

/// Runs `ctx.runs` rounds of every condition over every stream.
pub fn run(ctx: &Ctx) -> Result<Throughput> {
    let mut out = Throughput::default();
    for round in 0..ctx.runs {
        for stream in Stream::ALL {
            eprintln!(
                "bench: throughput round {}/{}: {stream}",
                round + 1,
                ctx.runs
            );
            for condition in Condition::ALL {
                super::check_interrupted()?;
                one(ctx, round, stream, condition, &mut out)?;
            }
        }
    }
    Ok(out)
}

/// What a run under `condition` puts on the node before its stream: the bench's empty programs
/// (for [`Condition::EmptyPrograms`]; detached when dropped) and the tracer `pktrace` (or
/// tcpdump), if the condition has one.
pub fn start_condition(
    ctx: &Ctx,
    condition: Condition,
    pktrace: &Path,
) -> Result<(Option<Floor>, Option<Tracer>)> {
    let empty = (condition == Condition::EmptyPrograms)
        .then(|| Floor::attach(NF_PROGRAMS_PER_HOOK))
        .transpose()?;
    let tracer = Tracer::start(condition, &ctx.dir, pktrace, &Launch::default())?;
    Ok((empty, tracer))
}

/// One stream under one condition, with a tracer of its own.
fn one(
    ctx: &Ctx,
    round: usize,
    stream: Stream,
    condition: Condition,
    out: &mut Throughput,
) -> Result<()> {
    let (_empty, mut tracer) = start_condition(ctx, condition, &ctx.pktrace)?;
    let sample = measure(ctx, round, condition, stream, tracer.as_mut())?;
    eprintln!("bench:   {}: {}", condition.label(), describe(&sample));
    out.samples.push(sample);
    if let Some(tracer) = tracer {
        let (ready_s, memory) = (tracer.ready_after.as_secs_f64(), tracer.memory()?);
        let stderr = tracer.stop()?;
        let dropped = (condition == Condition::Tcpdump)
            .then(|| tcpdump_dropped(&stderr))
            .flatten();
        out.tracers.push(TracerRun {
            round,
            condition,
            stream,
            ready_s,
            memory,
            dropped,
        });
    }
    Ok(())
}

/// Runs one stream, sampling the tracer (if any) around and halfway through it.
pub fn measure(
    ctx: &Ctx,
    round: usize,
    condition: Condition,
    stream: Stream,
    tracer: Option<&mut Tracer>,
) -> Result<Sample> {
    let before = match tracer.as_deref() {
        Some(t) => Some((t.cpu_seconds()?, t.counters()?)),
        None => None,
    };
    let mut memory = Memory::default();
    let start = std::time::Instant::now();
    let result = iperf::run(stream, None, ctx.seconds, &ctx.dir, || {
        if let Some(t) = tracer.as_deref() {
            memory = t.memory().unwrap_or_default();
        }
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut sample = Sample {
        round,
        condition,
        stream,
        result,
        tracer_cpu_pct: 0.0,
        counters: KernelCounters::default(),
        memory,
    };
    if let (Some(t), Some((cpu0, counters0))) = (tracer, before) {
        t.check_alive()?;
        sample.tracer_cpu_pct = 100.0 * (t.cpu_seconds()? - cpu0) / elapsed;
        sample.counters = t.counters()?.since(&counters0);
    }
    Ok(sample)
}

fn describe(s: &Sample) -> String {
    let mut text = if s.stream.is_udp() {
        format!(
            "{:.0} kpps received ({:.0} sent, {:.1} % lost)",
            s.result.recv_pps / 1e3,
            s.result.sent_pps / 1e3,
            s.result.loss_pct
        )
    } else {
        format!("{:.2} Gbit/s", s.result.recv_bps / 1e9)
    };
    if s.condition.has_tracer() {
        let _ = write!(text, "; tracer {:.0} % CPU", s.tracer_cpu_pct);
    }
    if s.condition.is_pktrace() {
        let _ = write!(
            text,
            ", {} events emitted, {} lost, RSS {} KiB ({} KiB anonymous)",
            s.counters.emitted, s.counters.ringbuf_full, s.memory.rss, s.memory.anon
        );
    }
    text
}
