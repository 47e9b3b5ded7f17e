//! The netfilter NAT hook on a connection established before pktrace started, which NAT
//! rewrites into a traced pod's packet (tracer-ebpf `nat/conntrack.rs`, `conntrack` and `worth_timing`).
//! Where the enter programs read conntrack entries (`struct nf_conn` in vmlinux BTF), the
//! entry's reply tuple holds the traced pod, so even the first such packet is timed. Where
//! they cannot (conntrack as a module; pktrace's NAT hook line then says "every packet is
//! read"), the packet alone decides: its first event is reported without a latency
//! (`NAT_UNTIMED`, `latency_ns` null) and the report follows its flow, so the connection's
//! next packets are timed. Either way every request's journey is there.
//!
//! The connection is the client pod's UDP socket connected to the kube-dns ClusterIP, whose
//! only backend is the lab's DNS responder: it answers every datagram, so one conntrack entry
//! carries several request/reply exchanges. (The lab's TCP servers answer once per connection
//! and close their side, so a TCP connection cannot carry several requests.) The first
//! exchange happens before pktrace starts, which makes the entry ESTABLISHED (reply seen);
//! pktrace traces only the backend (`--pod-ip`), so the client → ClusterIP packet's tuple
//! before NAT is untracked and becomes the backend's only by DNAT.

use std::{
    net::UdpSocket,
    thread,
    time::{Duration, Instant},
};

use tests::{
    LabGuard,
    rawbpf::enter_netns,
    trace::{Pktrace, Trace},
};
use tracer_user::output::json::contract::{JourneyLine, Point, StepLine};
use xtask::lab::topology::{COREDNS, DNS_CLUSTER_IP, UBUNTU};

/// Requests sent over the old connection after pktrace is ready.
const OLD_REQUESTS: usize = 4;
/// Requests sent over a new connection after those.
const NEW_REQUESTS: usize = 2;
/// How long a reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long pktrace may take to print the journeys of the requests.
const PRINT_TIMEOUT: Duration = Duration::from_secs(5);

/// A UDP socket in the client pod's namespace, connected to the kube-dns ClusterIP (the socket
/// keeps its namespace; the thread that made it is gone).
fn client_socket() -> UdpSocket {
    let ns = UBUNTU.netns();
    let made = thread::spawn(move || {
        enter_netns(&ns);
        let socket = UdpSocket::bind(("0.0.0.0", 0)).expect("udp socket in the client pod");
        socket
            .connect(DNS_CLUSTER_IP)
            .expect("connect to the DNS ClusterIP");
        socket
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("read timeout");
        socket
    });
    made.join().expect("making the client socket")
}

/// The socket's address as pktrace prints it (the client pod's IP and the socket's port).
fn local(socket: &UdpSocket) -> String {
    format!(
        "{}:{}",
        UBUNTU.ip,
        socket.local_addr().expect("local address").port()
    )
}

/// Sends `payload` and waits for the responder's answer; returns the answer.
fn exchange(socket: &UdpSocket, payload: &str) -> String {
    socket
        .send(payload.as_bytes())
        .unwrap_or_else(|e| panic!("sending {payload:?}: {e}"));
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no reply to {payload:?}: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The request journeys of the socket at `local` (client → ClusterIP, DNATed to the backend),
/// in kernel time order, with their DNAT step.
fn requests<'a>(
    journeys: impl IntoIterator<Item = &'a JourneyLine>,
    local: &str,
) -> Vec<(&'a JourneyLine, &'a StepLine)> {
    let vip = DNS_CLUSTER_IP.to_string();
    let mut found: Vec<(&JourneyLine, &StepLine)> = journeys
        .into_iter()
        .filter_map(|j| {
            let dnat = j.steps.iter().find(|s| {
                s.point == Point::Dnat
                    && s.reply == Some(false)
                    && s.orig_src.as_deref() == Some(local)
                    && s.orig_dst.as_deref() == Some(vip.as_str())
            })?;
            Some((j, dnat))
        })
        .collect();
    found.sort_by_key(|(j, _)| j.start_ktime_ns.unwrap_or(u64::MAX));
    found
}

/// Waits until pktrace has printed at least `count` request journeys for `local`.
fn wait_for_requests(tracer: &Pktrace, local: &str, count: usize) {
    let start = Instant::now();
    while requests(&tracer.journeys_so_far(), local).len() < count
        && start.elapsed() < PRINT_TIMEOUT
    {
        thread::sleep(Duration::from_millis(50));
    }
}

fn latency(dnat: &StepLine) -> Option<u64> {
    dnat.latency_ns.flatten()
}

fn check_timed(trace: &Trace, journeys: &[(&JourneyLine, &StepLine)], what: &str) {
    for (j, dnat) in journeys {
        let ns = latency(dnat)
            .unwrap_or_else(|| panic!("{what}: DNAT step untimed: {j:?}\n{}", trace.dump()));
        assert!(
            ns > 0 && ns < 1_000_000_000,
            "{what}: implausible latency: {j:?}"
        );
    }
}

#[test]
fn untimed_nat_event_for_a_connection_established_before_pktrace() {
    let _lab = LabGuard::new();
    let backend = COREDNS.ip.to_string();
    let old = client_socket();
    let old_local = local(&old);
    // The first exchange, before pktrace: the conntrack entry has seen its reply.
    let first = exchange(&old, "before-pktrace");
    assert!(
        first.starts_with("client="),
        "reply {first:?} for {old_local}"
    );

    // The netfilter hook is the one with the untimed path (the other hooks always time).
    let tracer = Pktrace::start(&["--pod-ip", &backend, "--nat-hook", "netfilter"]);
    for i in 0..OLD_REQUESTS {
        exchange(&old, &format!("old-{i}"));
    }
    wait_for_requests(&tracer, &old_local, OLD_REQUESTS);
    let new = client_socket();
    let new_local = local(&new);
    for i in 0..NEW_REQUESTS {
        exchange(&new, &format!("new-{i}"));
    }
    wait_for_requests(&tracer, &new_local, NEW_REQUESTS);
    let trace = tracer.stop();
    assert!(trace.status.success(), "{}", trace.dump());

    // Every request has its journey: the untimed event was reported, not dropped.
    let olds = requests(trace.journeys(), &old_local);
    let news = requests(trace.journeys(), &new_local);
    let show =
        |js: &[(&JourneyLine, &StepLine)]| js.iter().map(|(_, d)| latency(d)).collect::<Vec<_>>();
    eprintln!(
        "untimed: old connection {old_local}: DNAT latencies {:?}; new connection {new_local}: {:?}",
        show(&olds),
        show(&news)
    );
    assert_eq!(
        olds.len(),
        OLD_REQUESTS,
        "one journey per request on the old connection:\n{}",
        trace.dump()
    );
    assert_eq!(
        news.len(),
        NEW_REQUESTS,
        "one journey per request on the new connection:\n{}",
        trace.dump()
    );
    for (j, dnat) in olds.iter().chain(&news) {
        assert_eq!(
            dnat.dst,
            format!("{backend}:53"),
            "DNAT to the backend: {j:?}"
        );
    }
    // With conntrack entries readable, every step is timed. Without, the first packet of the
    // old connection seen by pktrace is untimed; the flow is then followed, so the rest of it
    // is timed, and so is the new connection.
    let (first_j, first_dnat) = &olds[0];
    if trace.stderr.contains("every packet is read") {
        assert!(
            latency(first_dnat).is_none(),
            "the old connection's first DNAT step is timed: {first_j:?}"
        );
        check_timed(&trace, &olds[1..], "old connection after the first packet");
    } else {
        check_timed(&trace, &olds, "old connection, conntrack entry read");
    }
    check_timed(&trace, &news, "new connection");
}
