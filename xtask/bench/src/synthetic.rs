//! A synthetic ring-buffer producer, to saturate the collector when real traffic from one CPU
//! cannot (shown beside the collector target, not judged): `BPF_PROG_TEST_RUN` of pktrace's
//! own `tc_egress` (`bpftool prog run … repeat N`) on [`TRAFFIC_CPU`], with a 64-byte UDP
//! frame from the client pod to the outside host as an egress on the node's uplink (an
//! edge). With `--trace-all` every run emits one
//! event, and the uplink is an edge, so every event is a whole one-step journey (attribution
//! looked up, a JSON line written). The kernel produces faster than the collector drains:
//! what the collector cannot take is counted by the kernel as lost, as under any flood.
//!
//! [`TRAFFIC_CPU`]: super::proc::TRAFFIC_CPU

use std::{
    collections::BTreeSet,
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::output;

use super::{
    bpf,
    net::NODE_NS,
    proc::{TRAFFIC_CPU, pinned},
};

/// Program runs per `bpftool prog run` (tens of milliseconds each).
const REPEAT: u64 = 100_000;
/// Most `bpftool prog run` calls per stream, whatever the time says.
const MAX_CALLS: u32 = 2_000;
/// The runs made: how many, over how long.
pub struct Produced {
    pub runs: u64,
    pub seconds: f64,
}

/// Feeds pktrace's ring for `seconds` through its `tc_egress` (one of `prog_ids`); calls
/// `midway` once halfway through.
pub fn run(
    prog_ids: &BTreeSet<u32>,
    dir: &Path,
    seconds: u64,
    mut midway: impl FnMut(),
) -> Result<Produced> {
    let prog = bpf::prog_id_named(prog_ids, "tc_egress")?;
    let (frame, ctx) = (dir.join("synthetic.frame"), dir.join("synthetic.ctx"));
    fs::write(&frame, udp_frame())?;
    super::micro::write_uplink_ctx(&ctx)?;
    let (prog, repeat) = (prog.to_string(), REPEAT.to_string());
    let args = [
        "prog",
        "run",
        "id",
        &prog,
        "data_in",
        &frame.display().to_string(),
        "ctx_in",
        &ctx.display().to_string(),
        "repeat",
        &repeat,
    ]
    .map(String::from);
    let (start, duration) = (Instant::now(), Duration::from_secs(seconds));
    let (mut calls, mut halfway) = (0u32, false);
    while start.elapsed() < duration && calls < MAX_CALLS {
        super::check_interrupted()?;
        output(&mut pinned(NODE_NS, TRAFFIC_CPU, "bpftool", &args))
            .context("running tc_egress with bpftool prog run")?;
        calls += 1;
        if !halfway && start.elapsed() >= duration / 2 {
            halfway = true;
            midway();
        }
    }
    if calls == 0 {
        bail!("the synthetic producer made no run");
    }
    Ok(Produced {
        runs: u64::from(calls) * REPEAT,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Ethernet, IPv4 and UDP headers and 22 bytes of payload (64 bytes): the client pod to the
/// outside host, as iperf3's UDP stream would send it after MASQUERADE left it alone.
fn udp_frame() -> Vec<u8> {
    super::micro::Frame::EmittedUdp.bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_64_bytes_of_ipv4_udp() {
        let f = udp_frame();
        assert_eq!(f.len(), 64);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, f.len() - 14);
        assert_eq!(f[23], 17);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]) as usize, f.len() - 34);
    }
}
