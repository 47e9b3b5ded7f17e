//! The tc program's own cost with nothing else running: `BPF_PROG_TEST_RUN` of pktrace's
//! `tc_egress` (`bpftool prog run … repeat N`, the kernel's average per run) on frames of the
//! bench node, pinned to [`TRAFFIC_CPU`] while no stream flows. Caches are warm and no clock
//! of the run-time statistics is added, so the figures are what the program's instructions,
//! helper calls and map accesses cost, free of the cache misses a real stream causes and of
//! most of the machine's noise (the per-hook phase measures those).
//!
//! With `--baseline <pktrace>` the phase starts that binary's programs too, beside the measured
//! ones, and alternates the calls between them, so that a code change is compared side by side
//! in one run.
//!
//! [`TRAFFIC_CPU`]: super::proc::TRAFFIC_CPU

use std::{
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use pktrace_lab::netns::in_ns;
use xtask_common::cmd::output;

use super::{
    Ctx, bpf,
    net::{CLIENT, CLOSED_PORT, IPERF_PORT, NODE_IP, NODE_NS, OTHER, OUTSIDE_IP, masq_sport},
    proc::{TRAFFIC_CPU, pinned},
    tracer::{Condition, Launch, Tracer},
};

/// Program runs per `bpftool prog run` (a few milliseconds). Few enough that pktrace drains
/// the events of an emitted frame's calls as they come: with 200,000, 10–23 % of the runs
/// found the ring buffer full (measured 2026-11-22), which a written event costs more than.
pub const REPEAT: u32 = 20_000;
/// `bpftool prog run` calls per frame and binary in a round, alternating between the binaries:
/// the median is kept.
pub const CALLS: usize = 5;
/// The interface the frames leave by: the node's uplink.
const UPLINK: &str = "eth0";
/// Size of the `struct __sk_buff` given as context, and the offset of its `ifindex`
/// (include/uapi/linux/bpf.h, v6.1: `len`, `pkt_type`, `mark`, `queue_mapping`, `protocol`,
/// `vlan_present`, `vlan_tci`, `vlan_proto`, `priority`, `ingress_ifindex`, then `ifindex`).
const CTX_LEN: usize = 44;
const IFINDEX_AT: usize = 40;

/// The frames run through `tc_egress`, with pktrace tracing the client pod (`--pod-ip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Frame {
    /// UDP, 64 bytes, from the idle pod to the outside host: outside the filter.
    Outside,
    /// UDP, 64 bytes, from the client pod to the outside host: emitted.
    EmittedUdp,
    /// A TCP ACK with timestamps (66 bytes) from the client pod to the outside host: emitted.
    EmittedTcp,
    /// [`Frame::Outside`] once pktrace follows a flow (the client's datagram through
    /// MASQUERADE): the frame goes past the address check to the followed-flow check.
    OutsideFollowing,
    /// UDP, 64 bytes, of that followed flow (the node's address to the outside host, the
    /// client's datagram after MASQUERADE): emitted by the followed-flow check, as every
    /// masqueraded packet of a traced pod is on the uplink.
    EmittedFollowed,
    /// [`Frame::EmittedUdp`] through the measured pktrace started with the expression
    /// [`EXPRESSION`]: ruled out in the kernel.
    RuledOutUdp,
    /// [`Frame::EmittedTcp`] through that pktrace: kept by the expression, emitted.
    KeptTcp,
}

/// The filter expression of [`Frame::WITH_EXPRESSION`].
pub const EXPRESSION: &str = "tcp";

impl Frame {
    /// In the order each round runs them: [`Frame::OutsideFollowing`] and
    /// [`Frame::EmittedFollowed`] last, since a followed flow stays followed until pktrace
    /// stops.
    pub const ALL: [Self; 5] = [
        Self::Outside,
        Self::EmittedUdp,
        Self::EmittedTcp,
        Self::OutsideFollowing,
        Self::EmittedFollowed,
    ];

    /// Run through the measured pktrace started with [`EXPRESSION`], after the others.
    pub const WITH_EXPRESSION: [Self; 2] = [Self::RuledOutUdp, Self::KeptTcp];

    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Outside => "outside_udp",
            Self::EmittedUdp => "emitted_udp",
            Self::EmittedTcp => "emitted_tcp",
            Self::OutsideFollowing => "outside_udp_following",
            Self::EmittedFollowed => "emitted_udp_followed",
            Self::RuledOutUdp => "ruled_out_udp",
            Self::KeptTcp => "kept_tcp",
        }
    }

    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Outside => "outside the filter (UDP 64 B, another pod)",
            Self::EmittedUdp => "emitted (UDP 64 B, the traced pod)",
            Self::EmittedTcp => "emitted (TCP ACK 66 B, the traced pod)",
            Self::OutsideFollowing => "outside the filter, a flow followed (UDP 64 B, another pod)",
            Self::EmittedFollowed => {
                "emitted, of the followed flow (UDP 64 B, the client's, masqueraded)"
            }
            Self::RuledOutUdp => "ruled out by the expression `tcp` (UDP 64 B, the traced pod)",
            Self::KeptTcp => "kept by the expression `tcp` (TCP ACK 66 B, the traced pod)",
        }
    }

    /// Whether pktrace (tracing the client pod) emits an event for the frame.
    #[must_use]
    pub const fn is_emitted(self) -> bool {
        matches!(
            self,
            Self::EmittedUdp | Self::EmittedTcp | Self::EmittedFollowed | Self::KeptTcp
        )
    }

    pub(super) fn bytes(self) -> Vec<u8> {
        match self {
            Self::Outside | Self::OutsideFollowing => frame(OTHER.ip, STREAM_PORTS, Proto::Udp),
            Self::EmittedUdp | Self::RuledOutUdp => frame(CLIENT.ip, STREAM_PORTS, Proto::Udp),
            Self::EmittedTcp | Self::KeptTcp => frame(CLIENT.ip, STREAM_PORTS, Proto::Tcp),
            Self::EmittedFollowed => frame(NODE_IP, (masq_sport(CLIENT), CLOSED_PORT), Proto::Udp),
        }
    }
}

/// Which pktrace a sample measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// The one the bench measures (built, or `PKTRACE_BIN`).
    Measured,
    /// `--baseline`.
    Baseline,
}

impl Binary {
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Measured => "measured",
            Self::Baseline => "baseline",
        }
    }
}

/// One frame through one binary's `tc_egress` in one round: the median of [`CALLS`] calls.
#[derive(Clone, Debug)]
pub struct MicroSample {
    pub round: usize,
    pub binary: Binary,
    pub frame: Frame,
    pub ns_per_run: f64,
}

/// What the phase measured.
#[derive(Clone, Debug, Default)]
pub struct Micro {
    pub samples: Vec<MicroSample>,
    /// The baseline binary, when there was one.
    pub baseline: Option<PathBuf>,
}

/// Runs `ctx.runs` rounds; in each, every binary is started (measured first in even rounds,
/// baseline first in odd ones), each frame runs [`CALLS`] times through each binary's
/// `tc_egress`, alternately, and the binaries are stopped.
pub fn run(ctx: &Ctx, baseline: Option<&Path>) -> Result<Micro> {
    let ctx_file = ctx.dir.join("micro.ctx");
    write_uplink_ctx(&ctx_file)?;
    let mut frames = Vec::new();
    for frame in Frame::ALL.into_iter().chain(Frame::WITH_EXPRESSION) {
        let path = ctx.dir.join(format!("micro-{}.frame", frame.key()));
        fs::write(&path, frame.bytes())?;
        frames.push((frame, path));
    }
    let mut binaries = vec![(Binary::Measured, ctx.pktrace.as_path())];
    if let Some(b) = baseline {
        binaries.push((Binary::Baseline, b));
    }
    let mut out = Micro {
        samples: Vec::new(),
        baseline: baseline.map(Path::to_path_buf),
    };
    for round in 0..ctx.runs {
        super::check_interrupted()?;
        eprintln!(
            "bench: tc_egress by BPF_PROG_TEST_RUN, round {}/{}",
            round + 1,
            ctx.runs
        );
        let mut order = binaries.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        // Every binary's programs are loaded at once; the calls alternate between them.
        let mut up = Vec::new();
        for &(binary, pktrace) in &order {
            let tracer =
                Tracer::start(Condition::ClientPod, &ctx.dir, pktrace, &Launch::default())?
                    .context("pktrace did not start")?;
            let prog = bpf::prog_id_named(&tracer.prog_ids, "tc_egress")?;
            up.push((binary, prog, tracer));
        }
        for (frame, path) in frames.iter().filter(|(f, _)| Frame::ALL.contains(f)) {
            if *frame == Frame::OutsideFollowing {
                follow_a_flow(&up)?;
            }
            let before: Vec<_> = up
                .iter()
                .map(|(_, _, t)| t.counters())
                .collect::<Result<_>>()?;
            let mut calls = vec![Vec::with_capacity(CALLS); up.len()];
            for _ in 0..CALLS {
                for (i, (_, prog, _)) in up.iter().enumerate() {
                    calls[i].push(prog_run(*prog, path, &ctx_file)?);
                }
            }
            for ((binary, _, t), b) in up.iter().zip(&before) {
                check_traced(*frame, *binary, &t.counters()?.since(b))?;
            }
            for ((binary, _, _), mut calls) in up.iter().zip(calls) {
                calls.sort_by(f64::total_cmp);
                let ns_per_run = calls[CALLS / 2];
                eprintln!(
                    "bench:   {} {}: {ns_per_run:.0} ns/run",
                    binary.key(),
                    frame.key()
                );
                out.samples.push(MicroSample {
                    round,
                    binary: *binary,
                    frame: *frame,
                    ns_per_run,
                });
            }
        }
        for (_, _, tracer) in up {
            tracer.stop()?;
        }
        with_expression(ctx, round, &frames, &ctx_file, &mut out)?;
    }
    Ok(out)
}

/// The frames of [`Frame::WITH_EXPRESSION`] through the measured pktrace started with
/// [`EXPRESSION`].
fn with_expression(
    ctx: &Ctx,
    round: usize,
    frames: &[(Frame, PathBuf)],
    ctx_file: &Path,
    out: &mut Micro,
) -> Result<()> {
    let launch = Launch {
        expression: Some(EXPRESSION),
        ..Launch::default()
    };
    let tracer = Tracer::start(Condition::ClientPod, &ctx.dir, &ctx.pktrace, &launch)?
        .context("pktrace did not start")?;
    let prog = bpf::prog_id_named(&tracer.prog_ids, "tc_egress")?;
    for (frame, path) in frames
        .iter()
        .filter(|(f, _)| Frame::WITH_EXPRESSION.contains(f))
    {
        let before = tracer.counters()?;
        let mut calls = (0..CALLS)
            .map(|_| prog_run(prog, path, ctx_file))
            .collect::<Result<Vec<f64>>>()?;
        check_traced(*frame, Binary::Measured, &tracer.counters()?.since(&before))?;
        calls.sort_by(f64::total_cmp);
        let ns_per_run = calls[CALLS / 2];
        eprintln!("bench:   measured {}: {ns_per_run:.0} ns/run", frame.key());
        out.samples.push(MicroSample {
            round,
            binary: Binary::Measured,
            frame: *frame,
            ns_per_run,
        });
    }
    tracer.stop().map(drop)
}

/// Checks that a binary traced every run of an emitted frame (a frame the filter let pass
/// would measure the outside path: the followed flow's, if MASQUERADE had not kept its
/// port), and none of the others; warns when the ring buffer was full for some runs (a lost
/// event costs less than a written one).
fn check_traced(frame: Frame, binary: Binary, c: &bpf::KernelCounters) -> Result<()> {
    let runs = u64::from(REPEAT) * CALLS as u64;
    // A packet of the flow the bench made (its ICMP error, say) may be counted too.
    anyhow::ensure!(
        (c.matched >= runs) == frame.is_emitted(),
        "the {} pktrace traced {} packets over {runs} runs of the frame {}, which it should {}",
        binary.key(),
        c.matched,
        frame.key(),
        if frame.is_emitted() {
            "trace every time"
        } else {
            "not trace"
        }
    );
    if c.ringbuf_full > 0 {
        eprintln!(
            "bench:   warning: the {} pktrace's ring buffer was full for {} of {runs} runs of {}",
            binary.key(),
            c.ringbuf_full,
            frame.key()
        );
    }
    Ok(())
}

/// Makes every loaded pktrace follow a flow: the client pod (which they trace) sends one
/// datagram through MASQUERADE, which each binary's NAT programs must count.
fn follow_a_flow(up: &[(Binary, u32, Tracer)]) -> Result<()> {
    let Some((_, _, first)) = up.first() else {
        return Ok(());
    };
    first.follow_a_flow(CLIENT)?;
    for (binary, _, tracer) in up {
        anyhow::ensure!(
            tracer.counters()?.flows_added > 0,
            "the {} pktrace followed no flow after the client's datagram",
            binary.key()
        );
    }
    Ok(())
}

/// Writes the `struct __sk_buff` a test run is given as context: a frame leaving by the node's
/// uplink (its `ifindex`; everything else zero).
pub(super) fn write_uplink_ctx(path: &Path) -> Result<()> {
    let ifindex: u32 = output(&mut in_ns(
        NODE_NS,
        "cat",
        [format!("/sys/class/net/{UPLINK}/ifindex")],
    ))?
    .trim()
    .parse()
    .context("reading the uplink's ifindex")?;
    let mut skb = [0u8; CTX_LEN];
    skb[IFINDEX_AT..IFINDEX_AT + 4].copy_from_slice(&ifindex.to_ne_bytes());
    fs::write(path, skb)?;
    Ok(())
}

/// One `bpftool prog run` of `REPEAT` runs on [`TRAFFIC_CPU`]: the kernel's average per run.
fn prog_run(prog: u32, frame: &Path, ctx: &Path) -> Result<f64> {
    let args = [
        "prog".to_owned(),
        "run".into(),
        "id".into(),
        prog.to_string(),
        "data_in".into(),
        frame.display().to_string(),
        "ctx_in".into(),
        ctx.display().to_string(),
        "repeat".into(),
        REPEAT.to_string(),
    ];
    let text = output(&mut pinned(NODE_NS, TRAFFIC_CPU, "bpftool", &args))
        .context("running tc_egress with bpftool prog run")?;
    average_ns(&text).with_context(|| format!("no average duration in bpftool's output: {text:?}"))
}

/// The average run time `bpftool prog run` prints (`Return value: 0, duration (average): 84ns`).
fn average_ns(text: &str) -> Option<f64> {
    let rest = text.split("duration (average):").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with("ns") {
        return None;
    }
    digits.parse().ok()
}

#[derive(Clone, Copy)]
enum Proto {
    Udp,
    Tcp,
}

/// Source and destination ports of the frames of a stream-like flow.
const STREAM_PORTS: (u16, u16) = (40_000, IPERF_PORT);

/// An Ethernet frame from `src` to the outside host, as it leaves the node's uplink, with
/// these ports: UDP with 22 bytes of payload (64 bytes), or a TCP ACK with the timestamp
/// option (66 bytes).
fn frame(src: Ipv4Addr, (sport, dport): (u16, u16), proto: Proto) -> Vec<u8> {
    let mut f = Vec::with_capacity(66);
    f.extend_from_slice(&[0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc]); // router
    f.extend_from_slice(&[0x02, 0x42, 0x0a, 0x0d, 0x4d, 0x04]); // node
    f.extend_from_slice(&[0x08, 0x00]);
    let (l4_len, number) = match proto {
        Proto::Udp => (30u16, 17u8),
        Proto::Tcp => (32, 6),
    };
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(20 + l4_len).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, number, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&OUTSIDE_IP.octets());
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    match proto {
        Proto::Udp => {
            f.extend_from_slice(&l4_len.to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        }
        Proto::Tcp => {
            f.extend_from_slice(&0x0102_0304u32.to_be_bytes()); // seq
            f.extend_from_slice(&0x0506_0708u32.to_be_bytes()); // ack
            f.extend_from_slice(&[0x80, 0x10]); // 32-byte header, ACK
            f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]); // window, checksum, urgent
            f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // NOP NOP TS
        }
    }
    f.resize(14 + 20 + usize::from(l4_len), 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_plain_ipv4_of_their_length() {
        for (f, proto, len) in [
            (Frame::Outside, 17, 64),
            (Frame::EmittedUdp, 17, 64),
            (Frame::EmittedTcp, 6, 66),
        ] {
            let b = f.bytes();
            assert_eq!(b.len(), len, "{f:?}");
            assert_eq!(&b[12..14], &[0x08, 0x00]);
            assert_eq!(b[14], 0x45);
            assert_eq!(usize::from(u16::from_be_bytes([b[16], b[17]])), len - 14);
            assert_eq!(b[23], proto);
        }
        assert_eq!(&Frame::Outside.bytes()[26..30], &OTHER.ip.octets());
        assert_eq!(&Frame::EmittedTcp.bytes()[26..30], &CLIENT.ip.octets());
        assert_eq!(Frame::EmittedTcp.bytes()[46] >> 4, 8, "TCP data offset");
        let followed = Frame::EmittedFollowed.bytes();
        assert_eq!(followed.len(), 64);
        assert_eq!(&followed[26..30], &NODE_IP.octets());
        assert_eq!(&followed[30..34], &OUTSIDE_IP.octets());
        assert_eq!(&followed[34..38], &[0x9c, 0x6e, 0, 9], "ports 40046 → 9");
    }

    #[test]
    fn reads_bpftool_average() {
        assert_eq!(
            average_ns("Return value: 0, duration (average): 84ns\n"),
            Some(84.0)
        );
        assert_eq!(average_ns("Return value: 0, duration (average): ns"), None);
        assert_eq!(average_ns("Error: no such program"), None);
    }
}
