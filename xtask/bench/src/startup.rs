//! Start-up: time from starting pktrace to its `--ready-file` and to its first journey line,
//! on the bench node as it is (five interfaces) and with 250 extra pod veths (same
//! `--interfaces`: `eth0,azure0,azv*`), while the client pod pings the backend every 10 ms.
//! With the extra veths pktrace runs three ways: its default (tcx on `eth0` and `azure0`,
//! clsact on the many `azv*`), and forced to clsact or to tcx everywhere.

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::{
    Ctx,
    net::{BACKEND, BenchNet, CLIENT, INTERFACES},
    proc::{Bg, TRAFFIC_CPU, pinned},
    tracer::{Attach, Condition, Launch, Output, Tracer},
};

/// Extra veth pairs of the second configuration (the start-up target's "250 veths").
pub const EXTRA_VETHS: usize = 250;
/// Longest wait for the first journey once pktrace is ready.
const FIRST_JOURNEY_TIMEOUT: Duration = Duration::from_secs(10);

/// One start of pktrace.
#[derive(Clone, Debug)]
pub struct StartupSample {
    pub round: usize,
    /// How pktrace was told to choose its tc mechanism.
    pub attach: Attach,
    /// Interfaces pktrace attached to.
    pub interfaces: usize,
    /// How: `tcx`, `clsact` or `tcx+clsact`, as pktrace reported it.
    pub mode: String,
    /// Spawn → ready file.
    pub ready_s: f64,
    /// Spawn → first journey line on stdout.
    pub first_journey_s: f64,
    /// SIGINT → exit (detaching every hook).
    pub stop_s: f64,
}

/// What the phase measured.
#[derive(Clone, Debug, Default)]
pub struct Startup {
    pub samples: Vec<StartupSample>,
    /// Time to create the extra veths (`ip -batch`).
    pub create_veths_s: f64,
}

/// The configurations, in order: the bench node as it is, then with the extra veths with
/// pktrace's default choice, and forced to clsact filters (`PKTRACE_FORCE_CLSACT`) and to tcx
/// links (`PKTRACE_FORCE_TCX`) everywhere. pktrace reports what it used; an older pktrace
/// without a switch uses its own rule and says so.
const CONFIGS: [(usize, Attach); 4] = [
    (0, Attach::Default),
    (EXTRA_VETHS, Attach::Default),
    (EXTRA_VETHS, Attach::ForceClsact),
    (EXTRA_VETHS, Attach::ForceTcx),
];

/// Runs `ctx.runs` starts of each configuration; removes the extra veths afterwards.
pub fn run(ctx: &Ctx, net: &mut BenchNet) -> Result<Startup> {
    let mut out = Startup::default();
    let _ping = ping(ctx)?;
    let mut veths = 0;
    for (extra, attach) in CONFIGS {
        if extra > veths {
            let start = Instant::now();
            net.add_veths(extra)?;
            veths = extra;
            out.create_veths_s = start.elapsed().as_secs_f64();
            eprintln!(
                "bench: start-up: added {extra} veths in {:.1} s",
                out.create_veths_s
            );
        }
        for round in 0..ctx.runs {
            super::check_interrupted()?;
            let launch = Launch {
                out: Output::Pipe,
                interfaces: Some(INTERFACES),
                attach,
                expression: None,
            };
            let sample = one(ctx, round, &launch)?;
            eprintln!(
                "bench: start-up round {}/{} on {} interfaces ({}, {}): ready after {:.3} s, \
                 first journey after {:.3} s, exit {:.3} s after SIGINT",
                round + 1,
                ctx.runs,
                sample.interfaces,
                attach.label(),
                sample.mode,
                sample.ready_s,
                sample.first_journey_s,
                sample.stop_s
            );
            out.samples.push(sample);
        }
    }
    net.remove_veths()?;
    Ok(out)
}

fn one(ctx: &Ctx, round: usize, launch: &Launch<'_>) -> Result<StartupSample> {
    let tracer = Tracer::start(Condition::ClientPod, &ctx.dir, &ctx.pktrace, launch)?;
    let mut tracer = tracer.context("pktrace did not start")?;
    let first = tracer.first_journey(FIRST_JOURNEY_TIMEOUT)?;
    let stderr = tracer.bg_mut().stderr();
    let ready_s = tracer.ready_after.as_secs_f64();
    let stopping = Instant::now();
    tracer.stop()?;
    let (interfaces, mode) = attached(&stderr).unwrap_or((0, String::from("?")));
    Ok(StartupSample {
        round,
        attach: launch.attach,
        interfaces,
        mode,
        ready_s,
        first_journey_s: first.as_secs_f64(),
        stop_s: stopping.elapsed().as_secs_f64(),
    })
}

/// Pings the backend from the client every 10 ms for the whole phase (bounded by count and
/// deadline; stopped when dropped).
fn ping(ctx: &Ctx) -> Result<Bg> {
    let target = BACKEND.ip.to_string();
    let args = ["-q", "-i", "0.01", "-c", "100000", "-w", "900", &target];
    let cmd = pinned(CLIENT.netns, TRAFFIC_CPU, "ping", args);
    Bg::spawn("ping", cmd, Stdio::null(), &ctx.dir.join("ping.err"))
}

/// The interface count and attach mode of pktrace's `tracing … on N interfaces (tcx)` line.
fn attached(stderr: &str) -> Option<(usize, String)> {
    let rest = stderr.split(" on ").nth(1)?;
    let mut words = rest.split_whitespace();
    let count = words.next()?.parse().ok()?;
    let mode = words
        .nth(1)?
        .trim_matches(|c: char| !c.is_ascii_alphanumeric());
    Some((count, mode.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_interface_count() {
        let line = "pktrace: tracing 10.13.77.46 (10.13.77.46) on 253 interfaces (tcx): azv…\n";
        assert_eq!(attached(line), Some((253, "tcx".to_owned())));
        let line =
            "pktrace: tracing 10.13.77.46 (10.13.77.46) on 255 interfaces (tcx+clsact): eth0\n";
        assert_eq!(attached(line), Some((255, "tcx+clsact".to_owned())));
        assert_eq!(attached("nothing"), None);
    }
}
