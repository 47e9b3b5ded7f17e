//! The traffic: iperf3 servers on the backend pod and the outside host, and bounded iperf3
//! client runs from the client pod (TCP stream, or 64-byte UDP datagrams), all on
//! [`TRAFFIC_CPU`].

use std::{
    fmt, fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::{
    droprule::DropRule,
    net::{
        BACKEND, CLIENT, CLUSTER_IP, IPERF_PORT, OUT_NS, OUTSIDE_IP, TWIN_CLIENT_NS,
        TWIN_SERVER_IP, TWIN_SERVER_NS,
    },
    proc::{Bg, POLL, TRAFFIC_CPU, pinned, tail},
};

/// How long a client may take beyond its `-t`.
const CLIENT_SLACK: Duration = Duration::from_secs(15);
/// Attempts when the server is still busy with the previous test.
const BUSY_RETRIES: u32 = 5;
/// UDP datagram size of the packet-rate streams.
pub const UDP_LEN: u32 = 64;

/// The streams measured, each through one NAT path of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// TCP, pod → ClusterIP (DNAT) → backend pod.
    TcpClusterIp,
    /// TCP, pod → outside host (MASQUERADE).
    TcpMasq,
    /// 64-byte UDP at full speed, pod → ClusterIP → backend pod.
    UdpClusterIp,
    /// 64-byte UDP at full speed, pod → outside host.
    UdpMasq,
    /// As [`Self::UdpClusterIp`], every datagram then dropped by the backend pod's own
    /// firewall ([`super::droprule`]): the drop program's cost. Not in [`Self::ALL`]: the
    /// per-hook phase alone runs it.
    UdpDropped,
}

impl Stream {
    pub const ALL: [Self; 4] = [
        Self::TcpClusterIp,
        Self::TcpMasq,
        Self::UdpClusterIp,
        Self::UdpMasq,
    ];

    #[must_use]
    pub const fn is_udp(self) -> bool {
        matches!(self, Self::UdpClusterIp | Self::UdpMasq | Self::UdpDropped)
    }

    #[must_use]
    pub const fn target(self) -> Ipv4Addr {
        match self {
            Self::TcpClusterIp | Self::UdpClusterIp | Self::UdpDropped => CLUSTER_IP,
            Self::TcpMasq | Self::UdpMasq => OUTSIDE_IP,
        }
    }

    /// A short label for table headings.
    #[must_use]
    pub const fn short(self) -> &'static str {
        match self {
            Self::TcpClusterIp => "TCP DNAT",
            Self::TcpMasq => "TCP MASQ",
            Self::UdpClusterIp => "UDP DNAT",
            Self::UdpMasq => "UDP MASQ",
            Self::UdpDropped => "UDP DROP",
        }
    }

    /// A short key for raw data.
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::TcpClusterIp => "tcp_clusterip",
            Self::TcpMasq => "tcp_masq",
            Self::UdpClusterIp => "udp_clusterip",
            Self::UdpMasq => "udp_masq",
            Self::UdpDropped => "udp_dropped",
        }
    }
}

impl fmt::Display for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TcpClusterIp => "TCP pod → ClusterIP (DNAT)",
            Self::TcpMasq => "TCP pod → outside (MASQUERADE)",
            Self::UdpClusterIp => "UDP 64 B pod → ClusterIP (DNAT)",
            Self::UdpMasq => "UDP 64 B pod → outside (MASQUERADE)",
            Self::UdpDropped => "UDP 64 B pod → ClusterIP (DNAT), dropped by the backend",
        })
    }
}

/// What one client run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamResult {
    /// Goodput at the receiver, bits per second.
    pub recv_bps: f64,
    /// Datagrams per second sent and received (UDP; 0 for TCP).
    pub sent_pps: f64,
    pub recv_pps: f64,
    /// Datagrams lost, percent (UDP).
    pub loss_pct: f64,
    /// Datagrams sent in total (UDP).
    pub sent_packets: u64,
}

/// The iperf3 servers; stopped when dropped.
pub struct Servers {
    servers: Vec<Bg>,
}

impl Servers {
    /// Starts one server on the backend pod and one on the outside host; waits until both
    /// listen.
    pub fn start(dir: &Path) -> Result<Self> {
        let mut servers = Vec::new();
        // Bound to its address: a UDP reply must come from the address the client sent to
        // (the outside host has a second address, the VNet gateway's, on the way back).
        for (ns, addr) in [
            (BACKEND.netns, BACKEND.ip),
            (OUT_NS, OUTSIDE_IP),
            (TWIN_SERVER_NS, TWIN_SERVER_IP),
        ] {
            let log = dir.join(format!("iperf3-server-{ns}.log"));
            let (port, addr) = (IPERF_PORT.to_string(), addr.to_string());
            let args = ["-s", "-p", &port, "-B", &addr, "--forceflush"];
            let cmd = pinned(ns, TRAFFIC_CPU, "iperf3", args);
            let out = fs::File::create(&log)?;
            let mut server = Bg::spawn(
                &format!("iperf3 server in {ns}"),
                cmd,
                Stdio::from(out),
                &log,
            )?;
            server.wait_until(Duration::from_secs(10), || {
                fs::read_to_string(&log).is_ok_and(|s| s.contains("Server listening"))
            })?;
            servers.push(server);
        }
        Ok(Self { servers })
    }

    /// Moves the servers to the CPUs [`super::proc::pinned`] gives traffic now (they were
    /// started pinned to [`TRAFFIC_CPU`]; see [`super::proc::set_free`]).
    pub fn place(&self) -> Result<()> {
        for server in &self.servers {
            super::proc::place(server.pid(), TRAFFIC_CPU)?;
        }
        Ok(())
    }
}

/// UDP sending rate: `None` for as fast as possible (`-b 0`), else datagrams per second.
pub type Rate = Option<u64>;

/// Runs one stream of `seconds` from the client pod; calls `midway` once halfway through
/// (to sample the tracer under load).
pub fn run(
    stream: Stream,
    rate: Rate,
    seconds: u64,
    dir: &Path,
    mut midway: impl FnMut(),
) -> Result<StreamResult> {
    for attempt in 1..=BUSY_RETRIES {
        match run_once(stream, rate, seconds, dir, &mut midway)? {
            Outcome::Done(result) => return Ok(result),
            Outcome::Busy if attempt < BUSY_RETRIES => thread::sleep(Duration::from_millis(300)),
            Outcome::Busy => {}
        }
    }
    bail!("the iperf3 server stayed busy after {BUSY_RETRIES} attempts")
}

/// Runs a TCP stream of `seconds` from the client pod and, beside it on the same CPU, one of
/// the twin's ([`TWIN_CLIENT_NS`], outside the node); returns both goodputs at the receivers,
/// bits per second: the measured stream's, then the twin's.
pub fn run_with_twin(stream: Stream, seconds: u64, dir: &Path) -> Result<(f64, f64)> {
    anyhow::ensure!(!stream.is_udp(), "the twin runs beside TCP streams only");
    let args = client_args(TWIN_SERVER_IP, seconds);
    let twin = Client::spawn(TWIN_CLIENT_NS, &args, dir, "twin", seconds)?;
    let measured = run(stream, None, seconds, dir, || {})?;
    let json = twin
        .finish("the twin's iperf3", || {})?
        .map_err(|error| anyhow::anyhow!("the twin's iperf3 failed: {error}"))?;
    let twin_result = parse(&json, false).context("reading the twin's iperf3 JSON")?;
    Ok((measured.recv_bps, twin_result.recv_bps))
}

/// An iperf3 client's arguments for a run of `seconds` to `target`'s server, JSON out.
fn client_args(target: Ipv4Addr, seconds: u64) -> Vec<String> {
    [
        "-c",
        &target.to_string(),
        "-p",
        &IPERF_PORT.to_string(),
        "-t",
        &seconds.to_string(),
        "-J",
        "--connect-timeout",
        "3000",
    ]
    .map(String::from)
    .to_vec()
}

/// A running iperf3 client, pinned to [`TRAFFIC_CPU`], its JSON going to a file of `dir`.
struct Client {
    bg: Bg,
    json_path: PathBuf,
    start: Instant,
    seconds: u64,
}

impl Client {
    /// Starts `iperf3 args…` in `ns`; `key` names its files (`iperf3-<key>.json`, `.err`).
    fn spawn(ns: &str, args: &[String], dir: &Path, key: &str, seconds: u64) -> Result<Self> {
        let json_path = dir.join(format!("iperf3-{key}.json"));
        let bg = Bg::spawn(
            &format!("iperf3 {key}"),
            pinned(ns, TRAFFIC_CPU, "iperf3", args),
            Stdio::from(fs::File::create(&json_path)?),
            &dir.join(format!("iperf3-{key}.err")),
        )?;
        Ok(Self {
            bg,
            json_path,
            start: Instant::now(),
            seconds,
        })
    }

    /// Waits for the client to end (calling `midway` once halfway through its run), then reads
    /// its JSON: `Ok(Err(message))` for an error iperf3 reported in it. Fails when it runs
    /// [`CLIENT_SLACK`] past its end or exits unsuccessfully without such an error; `what`
    /// names it in those errors.
    fn finish(mut self, what: &str, mut midway: impl FnMut()) -> Result<Result<Value, String>> {
        let half = Duration::from_millis(self.seconds * 500);
        let deadline = Duration::from_secs(self.seconds) + CLIENT_SLACK;
        let mut sampled = false;
        let status = loop {
            if let Some(status) = self.bg.child_mut().try_wait()? {
                break status;
            }
            if !sampled && self.start.elapsed() >= half {
                midway();
                sampled = true;
            }
            super::check_interrupted()?;
            if self.start.elapsed() > deadline {
                bail!(
                    "{what}: client still running {} s after its end",
                    CLIENT_SLACK.as_secs()
                );
            }
            thread::sleep(POLL);
        };
        let text = fs::read_to_string(&self.json_path).unwrap_or_default();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if let Some(error) = json.get("error").and_then(Value::as_str) {
            return Ok(Err(error.to_owned()));
        }
        if !status.success() {
            bail!("{what} failed ({status}): {}", tail(&self.bg.stderr()));
        }
        Ok(Ok(json))
    }
}

enum Outcome {
    Done(StreamResult),
    Busy,
}

fn run_once(
    stream: Stream,
    rate: Rate,
    seconds: u64,
    dir: &Path,
    midway: &mut impl FnMut(),
) -> Result<Outcome> {
    let mut args = client_args(stream.target(), seconds);
    if stream.is_udp() {
        let bits = rate.map_or(0, |pps| pps * u64::from(UDP_LEN) * 8);
        args.extend([
            "-u".into(),
            "-l".into(),
            UDP_LEN.to_string(),
            "-b".into(),
            bits.to_string(),
        ]);
    }
    let _rule = (stream == Stream::UdpDropped)
        .then(DropRule::add)
        .transpose()?;
    let client = Client::spawn(CLIENT.netns, &args, dir, "client", seconds)?;
    let json = match client.finish(&format!("iperf3 {stream}"), midway)? {
        Ok(json) => json,
        Err(error) if error.contains("busy") => return Ok(Outcome::Busy),
        Err(error) => bail!("iperf3 {stream} failed: {error}"),
    };
    parse(&json, stream.is_udp())
        .map(Outcome::Done)
        .with_context(|| format!("reading iperf3's JSON for {stream}"))
}

/// Reads iperf3's `-J` summary (`end.sum_sent`, `end.sum_received`).
fn parse(json: &Value, udp: bool) -> Result<StreamResult> {
    let end = json.get("end").context("no `end` object")?;
    let num = |obj: &str, key: &str| -> Result<f64> {
        end.get(obj)
            .and_then(|o| o.get(key))
            .and_then(Value::as_f64)
            .with_context(|| format!("no end.{obj}.{key}"))
    };
    let mut result = StreamResult {
        recv_bps: num("sum_received", "bits_per_second")?,
        ..StreamResult::default()
    };
    if udp {
        let (sent, sent_secs) = (num("sum_sent", "packets")?, num("sum_sent", "seconds")?);
        let (expected, lost) = (
            num("sum_received", "packets")?,
            num("sum_received", "lost_packets")?,
        );
        let recv_secs = num("sum_received", "seconds")?;
        result.sent_pps = sent / sent_secs.max(1e-3);
        result.recv_pps = (expected - lost).max(0.0) / recv_secs.max(1e-3);
        result.loss_pct = num("sum_received", "lost_percent")?;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a packet count"
        )]
        let packets = sent as u64;
        result.sent_packets = packets;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_udp_and_tcp_summaries() {
        let udp = json!({"end": {
            "sum_sent": {"seconds": 2.0, "packets": 600_000, "bits_per_second": 1.0},
            "sum_received": {"seconds": 2.0, "packets": 590_000, "lost_packets": 90_000,
                             "lost_percent": 15.25, "bits_per_second": 2.0e8}}});
        let r = parse(&udp, true).unwrap();
        assert!((r.sent_pps - 300_000.0).abs() < 1e-6);
        assert!((r.recv_pps - 250_000.0).abs() < 1e-6);
        assert!((r.loss_pct - 15.25).abs() < 1e-9);
        assert_eq!(r.sent_packets, 600_000);
        let tcp = json!({"end": {"sum_received": {"bits_per_second": 3.0e10}}});
        let r = parse(&tcp, false).unwrap();
        assert!((r.recv_bps - 3.0e10).abs() < 1.0);
        assert!(parse(&json!({}), false).is_err());
    }
}
