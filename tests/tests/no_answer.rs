//! No answer: a connection of the traced pod whose first packet left the node and got nothing
//! back in 3 s is one `no_answer` line (tracer-user `journey/unanswered.rs`), with the tuple
//! as it left (after SNAT) and the node's `eth0` as where it was last seen.
//!
//! The internet host drops TCP and UDP to one port with its own `DROP` rule (added by the test,
//! removed by a guard): the rule's packet counter proves the packets reached it and got no
//! answer, and the node's conntrack entry (`[UNREPLIED]`) proves the tuple pktrace printed
//! before and after SNAT. Beside them, connections that were answered are never reported: a
//! working TCP connection to the host and to a ClusterIP, a DNS query over UDP, a TCP
//! connection refused with a reset (a closed port) and a UDP datagram refused with an ICMP
//! port unreachable (counted in the summary's `refused`).

use std::{
    net::{SocketAddr, TcpStream, UdpSocket},
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tests::{
    LabGuard,
    rawbpf::in_netns,
    trace::{Pktrace, Trace, conntrack},
};
use tracer_user::output::json::contract::{Ending, Line, NoAnswerLine, Point};
use xtask::lab::{
    self, UBUNTU, in_ns,
    topology::{DNS_CLUSTER_IP, INET_HOST, NODE_IP, WHEREAMI_CLUSTER_IP},
};

/// The internet host's port whose packets its own rule drops.
const SILENT_PORT: u16 = 81;
/// A closed port of the internet host (a reset for TCP, port unreachable for UDP).
const CLOSED_PORT: u16 = 82;
/// Datagrams sent to the silent port, from one socket: one connection.
const DATAGRAMS: usize = 3;
/// How long after the last attempt pktrace runs: the 3 s wait, then the quiet node's sweep
/// (250 ms behind the clock, every 250 ms), with room.
const AFTER: Duration = Duration::from_millis(4_500);

/// `DROP` rules for TCP and UDP to [`SILENT_PORT`] in the internet host's INPUT chain, removed
/// on drop (also when the test fails).
struct SilentPort;

impl SilentPort {
    fn rule(op: &str, proto: &str) -> Vec<String> {
        format!("-w {op} INPUT -p {proto} --dport {SILENT_PORT} -j DROP")
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn add() -> Self {
        for proto in ["tcp", "udp"] {
            let status = in_ns(INET_HOST.netns, "iptables", Self::rule("-I", proto))
                .status()
                .expect("running iptables in the internet host");
            assert!(status.success(), "adding the {proto} DROP rule");
        }
        Self
    }

    /// The packets the `proto` rule dropped.
    fn dropped(proto: &str) -> u64 {
        let out = in_ns(
            INET_HOST.netns,
            "iptables",
            ["-w", "-L", "INPUT", "-v", "-x", "-n"],
        )
        .output()
        .expect("running iptables");
        let text = String::from_utf8_lossy(&out.stdout);
        let dpt = format!("dpt:{SILENT_PORT}");
        text.lines()
            .find(|l| l.contains("DROP") && l.contains(proto) && l.contains(&dpt))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {proto} DROP rule in the internet host:\n{text}"))
    }
}

impl Drop for SilentPort {
    fn drop(&mut self) {
        for proto in ["tcp", "udp"] {
            let _ = in_ns(INET_HOST.netns, "iptables", Self::rule("-D", proto)).status();
        }
    }
}

/// Runs `f` on a thread inside the client pod's namespace.
fn in_client<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    in_netns(&UBUNTU.netns(), f)
}

fn inet(port: u16) -> SocketAddr {
    SocketAddr::from((INET_HOST.ip, port))
}

/// One TCP connection attempt from the client pod to the internet host's `port`; whether it
/// connected, and the error otherwise.
fn try_tcp(port: u16) -> std::io::Result<()> {
    in_client(move || TcpStream::connect_timeout(&inet(port), Duration::from_secs(2)).map(drop))
}

/// Sends `n` datagrams from one socket of the client pod to the internet host's `port`;
/// returns the socket's port.
fn send_udp(port: u16, n: usize) -> u16 {
    in_client(move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).expect("udp socket");
        for i in 0..n {
            s.send_to(format!("pktrace-no-answer-{i}").as_bytes(), inet(port))
                .expect("sending");
            thread::sleep(Duration::from_millis(20));
        }
        s.local_addr().expect("local address").port()
    })
}

/// The traffic: the two silent connections, the refused ones, and the answered ones. Returns
/// the silent UDP socket's port.
fn traffic() -> u16 {
    let silent = try_tcp(SILENT_PORT);
    assert!(silent.is_err(), "port {SILENT_PORT} must not answer");
    let udp_port = send_udp(SILENT_PORT, DATAGRAMS);
    let refused = try_tcp(CLOSED_PORT).expect_err("the closed port");
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );
    send_udp(CLOSED_PORT, 1);
    let reply = lab::client_tcp(&UBUNTU.netns(), inet(INET_HOST.tcp_port))
        .unwrap_or_else(|e| panic!("the internet host: {e:#}"));
    assert!(reply.starts_with("client="), "{reply}");
    let reply = lab::client_tcp(&UBUNTU.netns(), WHEREAMI_CLUSTER_IP)
        .unwrap_or_else(|e| panic!("the ClusterIP: {e:#}"));
    assert!(reply.starts_with("client="), "{reply}");
    lab::client_udp(&UBUNTU.netns(), DNS_CLUSTER_IP)
        .unwrap_or_else(|e| panic!("the DNS query: {e:#}"));
    udp_port
}

fn no_answers(trace: &Trace) -> Vec<&NoAnswerLine> {
    trace
        .contract
        .iter()
        .filter_map(|l| match l {
            Line::NoAnswer(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// The one `no_answer` line of `proto` to the silent port; checks its fields but the ports.
fn silent<'a>(
    found: &[&'a NoAnswerLine],
    proto: &str,
    window: (u128, u128),
    masquerade: &str,
) -> &'a NoAnswerLine {
    let dst = inet(SILENT_PORT).to_string();
    let mine: Vec<_> = found.iter().filter(|n| n.proto == proto).collect();
    assert_eq!(
        mine.len(),
        1,
        "one {proto} connection without an answer: {found:#?}"
    );
    let n = mine[0];
    assert_eq!(n.dst, dst, "{n:?}");
    assert_eq!(n.orig_dst, None, "no DNAT: {n:?}");
    assert!(
        n.src.starts_with(&format!("{NODE_IP}:")),
        "SNAT to the node: {n:?}"
    );
    let orig = n.orig_src.as_deref().unwrap_or_default();
    assert!(
        orig.starts_with(&format!("{}:", UBUNTU.ip)),
        "the pod's own: {n:?}"
    );
    assert_eq!(n.iface.as_deref(), Some("eth0"), "{n:?}");
    assert_eq!(
        n.rule.as_deref(),
        Some(masquerade),
        "the SNAT's rule: {n:?}"
    );
    assert_eq!(n.service, None, "a masquerade names no service: {n:?}");
    assert!((3_000..10_000).contains(&n.waited_ms), "{n:?}");
    assert_eq!(n.class.as_deref(), Some("no_answer"), "{n:?}");
    let why = n.why.as_deref().unwrap_or_default();
    assert!(
        why.contains(&n.src) && why.contains(&n.dst),
        "the why names the packet as it left: {n:?}"
    );
    let left = wall_ms(&n.left_at);
    assert!(
        (window.0..=window.1).contains(&left),
        "left_at {} outside the test's {window:?}",
        n.left_at
    );
    n
}

/// Milliseconds since the epoch of `2026-11-26T23:50:01.123456Z` (UTC, as pktrace writes it).
fn wall_ms(rfc3339: &str) -> u128 {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", rfc3339, "+%s%3N"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis()
}

/// The unanswered connection's conntrack entry agrees with the tuple pktrace printed: the
/// pod's port before SNAT, the node's after.
fn assert_conntrack_agrees(n: &NoAnswerLine, proto: &str) {
    let entries = conntrack();
    let dport = SILENT_PORT.to_string();
    let e = entries
        .iter()
        .find(|e| {
            e.proto == proto && e.orig_dst == INET_HOST.ip.to_string() && e.orig_dport == dport
        })
        .unwrap_or_else(|| {
            panic!("no conntrack entry for {proto} to port {SILENT_PORT}: {entries:#?}")
        });
    assert_eq!(Some(e.orig_src_ep()), n.orig_src, "{e:?}");
    assert_eq!(e.reply_dst_ep(), n.src, "{e:?}");
}

/// One silent TCP connection attempt and one silent UDP flow: each reported once, with its
/// tuple and `eth0`; the answered and refused connections beside them never; `--failures`
/// shows the same two and only dropped journeys; `-o line` says it in one line.
#[test]
fn a_connection_dropped_beyond_eth0_is_one_no_answer_and_answered_ones_none() {
    let lab = LabGuard::new();
    let _silent = SilentPort::add();
    let all = Pktrace::start(&["--pod", "ubuntu"]);
    let failures = Pktrace::start(&["--pod", "ubuntu", "--failures"]);
    let line = Pktrace::start(&["--pod", "ubuntu", "-o", "line"]);
    let before = now_ms();
    let udp_port = traffic();
    let after = now_ms();
    thread::sleep(AFTER);
    let (trace, failures) = (all.stop(), failures.stop());
    let (_, line_out) = line.stop_raw();

    let found = no_answers(&trace);
    assert_eq!(
        found.len(),
        2,
        "exactly the two silent connections:\n{}",
        trace.dump()
    );
    let masquerade = lab.variant().masquerade_chain();
    let tcp = silent(&found, "tcp", (before, after), masquerade);
    let udp = silent(&found, "udp", (before, after), masquerade);
    assert_eq!(
        udp.orig_src,
        Some(format!("{}:{udp_port}", UBUNTU.ip)),
        "the socket's port"
    );
    // The internet host's own rule dropped them: the SYN (and its retransmit), every datagram.
    let (tcp_dropped, udp_dropped) = (SilentPort::dropped("tcp"), SilentPort::dropped("udp"));
    assert!(tcp_dropped >= 1, "the SYN reached the host");
    assert_eq!(udp_dropped, DATAGRAMS as u64);
    assert_conntrack_agrees(tcp, "tcp");
    assert_conntrack_agrees(udp, "udp");
    // The SYNs left by eth0, as journeys; the host's drop, in a namespace of the same kernel,
    // joins them after their eth0 egress (`dropped`), never a drop on the node.
    let syns = trace.starting(tcp.orig_src.as_deref().unwrap_or_default(), &tcp.dst);
    assert_eq!(
        syns.len() as u64,
        tcp_dropped,
        "one journey per SYN:\n{}",
        trace.dump()
    );
    for j in syns {
        let egress = match j.ending {
            Some(Ending::Left) => j.steps.last(),
            Some(Ending::Dropped) => j.steps.iter().rev().nth(1),
            _ => None,
        };
        let egress = egress.unwrap_or_else(|| panic!("neither left nor dropped beyond: {j:?}"));
        assert_eq!(
            (egress.point, egress.iface.clone()),
            (Point::Egress, Some(Some("eth0".into()))),
            "{j:?}"
        );
    }

    let summary = trace.summary();
    assert_eq!(summary.no_answer, 2, "{summary:?}");
    assert_eq!(summary.classes.get("no_answer"), Some(&2), "{summary:?}");
    assert_eq!(summary.refused.get("reset"), Some(&1), "{summary:?}");
    assert_eq!(summary.refused.get("icmp_error"), Some(&1), "{summary:?}");

    // Each pktrace's tc program reads the clock itself: the times differ by nanoseconds.
    let key = |n: &&NoAnswerLine| {
        let n = *n;
        (
            n.proto.clone(),
            n.src.clone(),
            n.dst.clone(),
            n.orig_src.clone(),
        )
    };
    let failed: Vec<_> = no_answers(&failures).iter().map(key).collect();
    let want: Vec<_> = found.iter().map(key).collect();
    assert_eq!(failed, want, "--failures shows the same connections");
    for j in failures.journeys() {
        assert_eq!(j.ending, Some(Ending::Dropped), "--failures printed {j:?}");
    }

    let text: Vec<&str> = line_out
        .lines()
        .filter(|l| l.starts_with("? no answer"))
        .collect();
    assert_eq!(text.len(), 2, "{line_out}");
    let want = format!(
        "? no answer  tcp {} > {} (after SNAT {}): left eth0 at ",
        tcp.orig_src.as_deref().unwrap_or_default(),
        tcp.dst,
        tcp.src
    );
    assert!(
        text.iter()
            .any(|l| l.starts_with(&want) && l.contains(", no answer in 3 s")),
        "{want}…\n{line_out}"
    );
    println!("-o line said:\n{}", text.join("\n"));
}
