//! `cargo xtask demo`: build pktrace, bring the lab up, trace `default/ubuntu` from the node
//! namespace while bounded traffic flows through every NAT path, then stop pktrace with
//! SIGINT so it prints its summary.

use std::{
    env, fs,
    net::{Ipv4Addr, SocketAddrV4},
    path::Path,
    process::{Child, ExitStatus},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use pktrace_lab::{
    self as lab, NODE_NS, STATE_FILE, client_tcp, client_udp, in_ns,
    topology::{
        DNS_CLUSTER_IP, INET_HOST, UBUNTU, VNET_HOST, WHEREAMI_CLUSTER_IP, WHEREAMI_LB_VIP,
    },
};
use xtask_common::cmd::{capture, find_program, require_root};

use crate::setup;

const READY_TIMEOUT: Duration = Duration::from_mins(1);
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
const MIN_ROUNDS: u32 = 3;
const MAX_ROUNDS: u32 = 100;
const PAUSE: Duration = Duration::from_millis(300);

/// Options of `cargo xtask demo`.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Leave the lab up afterwards.
    pub keep_lab: bool,
    /// Keep sending rounds of traffic for at least this long (at least 3 rounds, at most 100).
    pub seconds: Option<u64>,
    /// Skip `cargo xtask setup`.
    pub no_setup: bool,
}

/// Runs the demo; fails if pktrace did.
///
/// # Errors
/// If setup or finding pktrace fails, not running as root, the lab cannot be brought up or
/// down, or pktrace fails.
pub fn demo(options: &DemoOptions) -> Result<()> {
    if !options.no_setup {
        setup()?;
    }
    let (pktrace, _) = xtask_common::pktrace_binary("demo")?;
    require_root("the demo (lab namespaces, eBPF)")?;
    let was_up = lab::status()?.up;
    lab::up()?;
    let ready = env::temp_dir().join(format!("pktrace-demo-{}.ready", std::process::id()));
    let _ = fs::remove_file(&ready);
    let result = xtask_common::cmd::with_sigint_flag(|| trace(&pktrace, &ready, options));
    let _ = fs::remove_file(&ready);
    if options.keep_lab || was_up {
        eprintln!("demo: leaving the lab up (`cargo xtask lab down` removes it)");
    } else {
        lab::down()?;
    }
    let status = result?;
    if !status.success() {
        bail!("pktrace failed ({status})");
    }
    eprintln!("demo: done");
    Ok(())
}

/// Starts pktrace, waits until it is ready, makes traffic, stops it; returns its status.
fn trace(pktrace: &Path, ready: &Path, options: &DemoOptions) -> Result<ExitStatus> {
    let ready_arg = ready.display().to_string();
    let args = [
        "--pod",
        UBUNTU.name,
        "--state-file",
        STATE_FILE,
        "--follow",
        "--ready-file",
        &ready_arg,
    ];
    let mut cmd = in_ns(NODE_NS, pktrace, args);
    eprintln!("demo: starting {}", xtask_common::cmd::describe(&cmd));
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", pktrace.display()))?;
    if let Err(err) = wait_ready(&mut child, ready) {
        let _ = stop(&mut child);
        return Err(err);
    }
    eprintln!(
        "demo: pktrace is ready; making traffic from {}",
        UBUNTU.netns()
    );
    traffic(options.seconds.map(Duration::from_secs));
    thread::sleep(Duration::from_secs(1));
    stop(&mut child)
}

fn wait_ready(child: &mut Child, ready: &Path) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !ready.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("pktrace exited before it was ready ({status})");
        }
        if xtask_common::cmd::interrupted() {
            bail!("interrupted");
        }
        if Instant::now() > deadline {
            bail!(
                "pktrace was not ready after {} s (no {})",
                READY_TIMEOUT.as_secs(),
                ready.display()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Sends SIGINT (pktrace prints its summary), waits, then SIGKILL after `EXIT_TIMEOUT`.
fn stop(child: &mut Child) -> Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    // SAFETY: plain syscall on our own child (ip netns exec has exec'd pktrace in place).
    unsafe { libc::kill(pid, libc::SIGINT) };
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "demo: pktrace did not exit {} s after SIGINT; killing it",
        EXIT_TIMEOUT.as_secs()
    );
    child.kill()?;
    Ok(child.wait()?)
}

/// Rounds of one request per NAT path, until `min_duration` has passed (at least 3 rounds).
fn traffic(min_duration: Option<Duration>) {
    let start = Instant::now();
    for round in 1..=MAX_ROUNDS {
        let enough = round > MIN_ROUNDS && min_duration.is_none_or(|d| start.elapsed() >= d);
        if enough || xtask_common::cmd::interrupted() {
            break;
        }
        one_round(round);
        thread::sleep(PAUSE);
    }
}

/// One request of a demo round.
enum Request {
    Tcp(SocketAddrV4),
    Udp(SocketAddrV4),
    Ping(Ipv4Addr),
}

/// The requests of a round: one per NAT path, with what the node does to it.
const ROUND: [(Request, &str); 6] = [
    (
        Request::Tcp(WHEREAMI_CLUSTER_IP),
        "ClusterIP default/whereami: DNAT",
    ),
    (
        Request::Tcp(WHEREAMI_LB_VIP),
        "LoadBalancer VIP: DNAT + MASQUERADE",
    ),
    (Request::Udp(DNS_CLUSTER_IP), "kube-dns ClusterIP: DNAT"),
    (Request::Tcp(VNET_HOST.addr()), "VNet host: no SNAT"),
    (
        Request::Tcp(INET_HOST.addr()),
        "internet host: ip-masq-agent MASQUERADE",
    ),
    (Request::Ping(INET_HOST.ip), "internet host: MASQUERADE"),
];

fn one_round(round: u32) {
    let ns = UBUNTU.netns();
    for (request, what) in &ROUND {
        if xtask_common::cmd::interrupted() {
            return;
        }
        let heading = match request {
            Request::Tcp(addr) => format!("tcp {addr}"),
            Request::Udp(addr) => format!("udp {addr}"),
            Request::Ping(ip) => format!("ping {ip}"),
        };
        eprintln!("demo: round {round}: {heading} ({what})");
        let result = match request {
            Request::Tcp(addr) => client_tcp(&ns, addr),
            Request::Udp(addr) => client_udp(&ns, addr),
            Request::Ping(ip) => ping(&ns, &ip.to_string()),
        };
        match result {
            Ok(reply) => eprintln!("demo:   -> {reply}"),
            Err(err) => eprintln!("demo:   -> failed: {err:#}"),
        }
    }
}

fn ping(ns: &str, ip: &str) -> Result<String> {
    let ping_args = ["-c", "1", "-W", "1", ip];
    let mut cmd = match find_program("ping") {
        Some(ping) => in_ns(ns, ping, ping_args),
        None => in_ns(ns, "busybox", ["ping"].into_iter().chain(ping_args)),
    };
    let out = capture(&mut cmd)?;
    if !out.status.success() {
        bail!("no reply ({})", out.status);
    }
    Ok("reply received".to_owned())
}
