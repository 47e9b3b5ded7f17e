//! Drops: the kernel's drop of a traced packet ends its journey with a `drop` step naming the
//! kernel's reason and the function that dropped it (tracer-ebpf `drop.rs`, the join in
//! tracer-user `journey/correlate/drop.rs`). Each class of failure is made in the lab
//! (`xtask::lab::drops`) and checked against the kernel's own count of it: the rule's packet
//! counter (`iptables -L -v -x`) or the namespace's SNMP counter (`nstat`) moves by exactly the
//! number of drop steps pktrace printed for those packets. A working connection run beside
//! has no drop and never ends `dropped`.

use std::{
    net::{SocketAddr, TcpStream, UdpSocket},
    thread,
    time::Duration,
};

use tests::{
    LabGuard,
    leftovers::kernel_at_least,
    rawbpf::in_netns,
    trace::{Pktrace, Trace},
};
use tracer_user::output::json::contract::{Ending, JourneyLine, Point, StepLine};
use xtask::lab::{
    self, NODE_NS, UBUNTU, Variant,
    drops::{
        ADMIN_DROP_HOST, ADMIN_DROP_PORT, ADMIN_REJECT_PORT, CALICO_DENIED_CHAIN,
        CALICO_DENY_COMMENT, CALICO_POLICY, NO_ENDPOINTS_COMMENT, NO_ENDPOINTS_IP,
        NO_ENDPOINTS_PORT, NO_NEIGHBOUR_IP, NO_ROUTE_NET, Scenario, add,
    },
    in_ns,
    topology::{NODE_UPLINK, WHEREAMI_CLUSTER_IP, WHEREAMI_J7BPW, WHEREAMI_QFQ2K},
};

/// Datagrams sent in each UDP case.
const DATAGRAMS: usize = 3;
/// How long pktrace may take to print what it saw after the traffic.
const SETTLE: Duration = Duration::from_millis(500);

/// Runs `f` on a thread inside the client pod's namespace.
fn in_client<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    in_netns(&UBUNTU.netns(), f)
}

/// Sends [`DATAGRAMS`] UDP datagrams to `dst` from the client pod (no reply expected).
fn send_udp(dst: &str) {
    let dst: SocketAddr = dst.parse().expect("address");
    in_client(move || {
        let s = UdpSocket::bind(("0.0.0.0", 0)).expect("udp socket");
        for i in 0..DATAGRAMS {
            s.send_to(format!("pktrace-drop-{i}").as_bytes(), dst)
                .unwrap_or_else(|e| panic!("sending to {dst}: {e}"));
            thread::sleep(Duration::from_millis(20));
        }
    });
}

/// One TCP connection attempt from the client pod; true when it connected.
fn try_tcp(dst: &str) -> bool {
    let dst: SocketAddr = dst.parse().expect("address");
    in_client(move || TcpStream::connect_timeout(&dst, Duration::from_secs(2)).is_ok())
}

/// The working connection: the lab client's request to the whereami ClusterIP, read to the end.
fn working_connection() {
    let reply = lab::client_tcp(&UBUNTU.netns(), WHEREAMI_CLUSTER_IP)
        .unwrap_or_else(|e| panic!("working connection: {e:#}"));
    assert!(reply.starts_with("client="), "{reply}");
}

/// A counter of the node's namespace from `nstat` (absolute, history untouched).
fn nstat(ns: &str, name: &str) -> u64 {
    let out = in_ns(ns, "nstat", ["-asz", name])
        .output()
        .expect("running nstat (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(name)).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("nstat has no {name}: {text}"))
}

/// The packet counter of the first rule of `chain` (filter table, node namespace) whose line
/// holds every one of `needles`.
fn rule_packets(chain: &str, needles: &[&str]) -> u64 {
    let out = in_ns(NODE_NS, "iptables", ["-w", "-L", chain, "-v", "-x", "-n"])
        .output()
        .expect("running iptables");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| needles.iter().all(|n| l.contains(n)))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rule {needles:?} in {chain}:\n{text}"))
}

/// The drop steps of journeys whose packet was going to `dst` when it was dropped.
fn drops_to<'a>(trace: &'a Trace, dst: &str) -> Vec<(&'a JourneyLine, &'a StepLine)> {
    trace
        .journeys()
        .into_iter()
        .filter_map(|j| {
            let last = j.steps.last()?;
            (last.point == Point::Drop && last.dst == dst).then_some((j, last))
        })
        .collect()
}

/// The reason pktrace must report for a drop the kernel names `reason`: that name on a kernel
/// whose `skb:kfree_skb` tracepoint gives reasons (5.17+), `NOT_SPECIFIED` before (5.10's has
/// none; pktrace says so).
fn expected(reason: &'static str) -> &'static str {
    if kernel_at_least(5, 17) {
        reason
    } else {
        "NOT_SPECIFIED"
    }
}

/// Checks that `drops` are netfilter drops (as [`assert_drops`]) and as many as the rule's
/// own packet counter, `counted` (more than none).
fn assert_netfilter_drops_counted(
    drops: &[(&JourneyLine, &StepLine)],
    counted: u64,
    trace: &Trace,
) {
    assert_drops(
        drops,
        "NETFILTER_DROP",
        &["nft_do_chain", "nf_hook_slow", "ipt_do_table"],
    );
    assert!(counted > 0, "the rule counted nothing:\n{}", trace.dump());
    assert_eq!(
        drops.len() as u64,
        counted,
        "the rule counted {counted}:\n{}",
        trace.dump()
    );
}

/// Checks every drop step's shape: it is the journey's last step, the journey ended
/// `dropped`, and the reason and location are the expected ones (the reason as [`expected`]
/// says for this kernel).
fn assert_drops(drops: &[(&JourneyLine, &StepLine)], reason: &'static str, locations: &[&str]) {
    let reason = expected(reason);
    for (j, d) in drops {
        assert_eq!(j.ending, Some(Ending::Dropped), "{j:?}");
        assert_eq!(d.reason.as_deref(), Some(reason), "{j:?}");
        let at = d.location.as_deref().unwrap_or_default();
        assert!(
            locations.contains(&at),
            "location {at} not in {locations:?}: {j:?}"
        );
    }
}

/// Checks that every dropped journey carries the failure `class`.
fn assert_class(drops: &[(&JourneyLine, &StepLine)], class: &str) {
    for (j, _) in drops {
        assert_eq!(j.class.as_deref(), Some(class), "{j:?}");
    }
}

/// The working connection's journeys (to or from the ClusterIP or a whereami backend on
/// port 80) are there, and none has a drop or ended `dropped`.
fn assert_working_connection_clean(trace: &Trace) {
    let theirs: Vec<&JourneyLine> = trace
        .journeys()
        .into_iter()
        .filter(|j| {
            j.steps.iter().any(|s| {
                s.dst == WHEREAMI_CLUSTER_IP.to_string() || s.src == WHEREAMI_CLUSTER_IP.to_string()
            })
        })
        .collect();
    assert!(
        theirs.len() >= 2,
        "the working connection's journeys are missing:\n{}",
        trace.dump()
    );
    for j in theirs {
        assert_ne!(j.ending, Some(Ending::Dropped), "{j:?}");
        assert!(j.steps.iter().all(|s| s.point != Point::Drop), "{j:?}");
    }
}

/// A closed UDP port on the node: `NO_SOCKET` at `__udp4_lib_rcv`, as many as the node's
/// `UdpNoPorts` counted; a closed TCP port on a pod: `NO_SOCKET` at `tcp_v4_rcv`, joined to
/// the journey that carried the SYN to the pod's veth.
#[test]
fn closed_ports_are_no_socket_drops_counted_by_the_kernel() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let no_ports = nstat(NODE_NS, "UdpNoPorts");
    let node_port = "10.13.76.4:9";
    send_udp(node_port);
    let pod_port = format!("{}:9", WHEREAMI_QFQ2K.ip);
    assert!(!try_tcp(&pod_port), "{pod_port} must be closed");
    working_connection();
    let counted = nstat(NODE_NS, "UdpNoPorts") - no_ports;
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let udp = drops_to(&trace, node_port);
    assert_drops(&udp, "NO_SOCKET", &["__udp4_lib_rcv"]);
    assert_class(&udp, "no_socket");
    assert_eq!(
        udp.len() as u64,
        counted,
        "UdpNoPorts moved by {counted}:\n{}",
        trace.dump()
    );
    assert_eq!(counted, DATAGRAMS as u64);
    let tcp = drops_to(&trace, &pod_port);
    assert!(!tcp.is_empty(), "no drop for {pod_port}:\n{}", trace.dump());
    assert_drops(&tcp, "NO_SOCKET", &["tcp_v4_rcv"]);
    assert_class(&tcp, "no_socket");
    for (j, _) in &tcp {
        assert!(
            j.steps.iter().any(|s| s.point == Point::Ingress
                && s.iface.as_ref().and_then(|i| i.as_deref()) == Some(UBUNTU.host_if)),
            "the drop did not join the SYN's journey: {j:?}"
        );
    }
    assert_eq!(
        trace.summary().drops.get(expected("NO_SOCKET")).copied(),
        Some((udp.len() + tcp.len()) as u64)
    );
    assert_eq!(
        trace.summary().classes.get("no_socket").copied(),
        Some((udp.len() + tcp.len()) as u64)
    );
    assert_working_connection_clean(&trace);
}

/// kube-proxy's REJECT of a service without endpoints: `NETFILTER_DROP` in the netfilter
/// code, one drop step per packet the rule counted.
#[test]
fn a_service_without_endpoints_is_a_drop_by_kube_proxys_reject() {
    let _lab = LabGuard::new();
    let _scenario = add(Scenario::NoEndpoints).expect("adding the service without endpoints");
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let dst = format!("{NO_ENDPOINTS_IP}:{NO_ENDPOINTS_PORT}");
    assert!(
        !try_tcp(&dst),
        "{dst} has no endpoints: the connection must fail"
    );
    working_connection();
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let counted = rule_packets(
        "KUBE-SERVICES",
        &["REJECT", NO_ENDPOINTS_IP, NO_ENDPOINTS_COMMENT],
    );
    let drops = drops_to(&trace, &dst);
    assert_netfilter_drops_counted(&drops, counted, &trace);
    assert_class(&drops, "no_endpoints");
    // The explain stage names kube-proxy's rule and the service it belongs to.
    for (j, d) in &drops {
        let rule = d.rule.as_deref().unwrap_or_default();
        assert!(rule.contains("has no endpoints"), "rule {rule:?}: {j:?}");
        assert_eq!(d.service.as_deref(), Some("default/web-gone"), "{j:?}");
    }
    // The ICMP error reached the pod: the copy its connect kept in the socket's error queue
    // (freed from that queue when the socket closed) is no drop.
    let purged: Vec<_> = trace
        .journeys()
        .into_iter()
        .filter(|j| {
            j.steps.iter().any(|s| {
                s.reason.as_deref() == Some("QUEUE_PURGE")
                    || s.location
                        .as_deref()
                        .is_some_and(|l| l.starts_with("skb_queue_purge"))
            })
        })
        .collect();
    assert!(
        purged.is_empty(),
        "a queue purge shown as a drop: {purged:?}"
    );
    assert_working_connection_clean(&trace);
}

/// An administrator's DROP rule, traced with `--failures`: only the dropped journeys are
/// printed, one per packet the rule counted, and the working connection beside prints none.
#[test]
fn an_admin_drop_rule_with_failures_shows_only_the_drops() {
    let _lab = LabGuard::new();
    let _scenario = add(Scenario::AdminDrop).expect("adding the DROP rule");
    let pk = Pktrace::start(&["--pod", "ubuntu", "--failures"]);
    let dst = format!("{ADMIN_DROP_HOST}:{ADMIN_DROP_PORT}");
    send_udp(&dst);
    working_connection();
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let counted = rule_packets("FORWARD", &["DROP", "udp", ADMIN_DROP_HOST]);
    let drops = drops_to(&trace, &dst);
    assert_eq!(counted, DATAGRAMS as u64);
    assert_netfilter_drops_counted(&drops, counted, &trace);
    assert_class(&drops, "firewall");
    for (j, d) in &drops {
        let rule = d.rule.as_deref().unwrap_or_default();
        assert!(
            rule.starts_with("FORWARD") && rule.contains("DROP"),
            "rule {rule:?}: {j:?}"
        );
        assert_eq!(d.service, None, "an admin's rule has no service: {j:?}");
    }
    for j in trace.journeys() {
        assert_eq!(j.ending, Some(Ending::Dropped), "--failures printed {j:?}");
    }
}

/// No route: the node forwards a pod's packet to a network its table throws out
/// (`ENETUNREACH`): `IP_INNOROUTES` in `ip_error` (this kernel's name; older kernels said
/// `IP_NOROUTE`), as many as `IpExtInNoRoutes` counted. On the transparent variant, where the
/// node routes its pods' packets.
#[test]
fn no_route_is_an_ip_innoroutes_drop_counted_by_the_kernel() {
    let _lab = LabGuard::with_variant(Variant::AzureTransparent);
    let _scenario = add(Scenario::NoRoute).expect("adding the throw route");
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let before = nstat(NODE_NS, "IpExtInNoRoutes");
    let dst = "198.51.100.7:53";
    assert!(
        NO_ROUTE_NET.starts_with("198.51.100."),
        "{dst} must be in {NO_ROUTE_NET}"
    );
    send_udp(dst);
    working_connection();
    let counted = nstat(NODE_NS, "IpExtInNoRoutes") - before;
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let drops = drops_to(&trace, dst);
    assert_drops(&drops, "IP_INNOROUTES", &["ip_error"]);
    assert_class(&drops, "no_route");
    assert_eq!(counted, DATAGRAMS as u64);
    assert_eq!(
        drops.len() as u64,
        counted,
        "IpExtInNoRoutes moved by {counted}:\n{}",
        trace.dump()
    );
    assert_working_connection_clean(&trace);
}

/// A Calico policy (calico variant): felix's chains for `NetworkPolicy`
/// default/whereami-ingress drop ubuntu's SYNs to whereami `qfq2k` at the pod's endpoint
/// chain; each drop step names that rule and the policy, one per packet the rule counted,
/// and ubuntu's connection to the other whereami pod (no policy) is never dropped.
#[test]
fn a_calico_policy_drop_names_the_rule_and_the_network_policy() {
    let _lab = LabGuard::with_variant(Variant::Calico);
    let _scenario = add(Scenario::CalicoPolicy).expect("adding Calico's policy chains");
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let denied = format!("{}:80", WHEREAMI_QFQ2K.ip);
    assert!(!try_tcp(&denied), "{denied} is denied by {CALICO_POLICY}");
    let allowed = format!("{}:80", WHEREAMI_J7BPW.ip);
    let reply = lab::client_tcp(&UBUNTU.netns(), &allowed)
        .unwrap_or_else(|e| panic!("the allowed connection to {allowed}: {e:#}"));
    assert!(reply.starts_with("client="), "{reply}");
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let counted = rule_packets(CALICO_DENIED_CHAIN, &["DROP", CALICO_DENY_COMMENT]);
    let drops = drops_to(&trace, &denied);
    assert_netfilter_drops_counted(&drops, counted, &trace);
    assert_class(&drops, "policy");
    for (j, d) in &drops {
        let rule = d.rule.as_deref().unwrap_or_default();
        assert_eq!(
            rule,
            format!("{CALICO_DENIED_CHAIN}: {CALICO_DENY_COMMENT}"),
            "{j:?}"
        );
        let why = d.why.as_deref().unwrap_or_default();
        assert!(
            why.contains(&format!("NetworkPolicy {CALICO_POLICY}")),
            "why {why:?}: {j:?}"
        );
        assert_eq!(d.service, None, "{j:?}");
    }
    let theirs: Vec<&JourneyLine> = trace
        .journeys()
        .into_iter()
        .filter(|j| j.steps.iter().any(|s| s.dst == allowed || s.src == allowed))
        .collect();
    assert!(
        theirs.len() >= 2,
        "the allowed connection:\n{}",
        trace.dump()
    );
    for j in theirs {
        assert_ne!(j.ending, Some(Ending::Dropped), "{j:?}");
    }
}

/// `ip neigh show` in the node's namespace for `addr`.
fn neighbour(addr: &str) -> String {
    let out = in_ns(NODE_NS, "ip", ["neigh", "show", "to", addr])
        .output()
        .expect("running ip neigh");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A neighbour that never answers (transparent variant, where the node routes its pods'
/// packets): datagrams to an address of the node's connected subnet that nobody holds wait
/// for ARP, and when the probes time out (the entry turns `FAILED`) each is dropped with
/// `NEIGH_FAILED` and answered with an ICMP host unreachable: as many drops as datagrams
/// and as `IcmpOutDestUnreachs` moved; the why names the neighbour and the interface.
#[test]
fn a_neighbour_that_never_answers_is_a_neigh_failed_drop() {
    let _lab = LabGuard::with_variant(Variant::AzureTransparent);
    let _scenario = add(Scenario::NoNeighbour).expect("flushing the neighbour");
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let before = nstat(NODE_NS, "IcmpOutDestUnreachs");
    let dst = format!("{NO_NEIGHBOUR_IP}:53");
    send_udp(&dst);
    // The kernel probes 3 times a second apart (`mcast_solicit`, `retrans_time_ms`).
    let sent = std::time::Instant::now();
    let deadline = sent + Duration::from_secs(15);
    while !neighbour(NO_NEIGHBOUR_IP).contains("FAILED") {
        assert!(
            std::time::Instant::now() < deadline,
            "{NO_NEIGHBOUR_IP} never turned FAILED: {}",
            neighbour(NO_NEIGHBOUR_IP)
        );
        thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{NO_NEIGHBOUR_IP} FAILED {:.1} s after the datagrams",
        sent.elapsed().as_secs_f64()
    );
    let unreachable = nstat(NODE_NS, "IcmpOutDestUnreachs") - before;
    working_connection();
    thread::sleep(SETTLE);
    let trace = pk.stop();
    let drops = drops_to(&trace, &dst);
    assert_drops(
        &drops,
        "NEIGH_FAILED",
        &["arp_error_report", "neigh_invalidate", "__neigh_event_send"],
    );
    assert_class(&drops, "neighbor");
    assert_eq!(
        drops.len(),
        DATAGRAMS,
        "{}: {}",
        neighbour(NO_NEIGHBOUR_IP),
        trace.dump()
    );
    assert_eq!(unreachable, DATAGRAMS as u64, "IcmpOutDestUnreachs");
    let want = format!("no ARP answer from {NO_NEIGHBOUR_IP} on {NODE_UPLINK}:");
    for (j, d) in &drops {
        let why = d.why.as_deref().unwrap_or_default();
        assert!(why.starts_with(&want), "why {why:?}: {j:?}");
    }
    assert_working_connection_clean(&trace);
}

/// Rules changed while tracing: a first drop has pktrace read the node's rules, then an
/// administrator adds a REJECT; the connection it refuses is named with that rule, one drop
/// step per packet the rule counted.
#[test]
fn a_reject_added_while_tracing_is_named() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu"]);
    let closed = "10.13.76.4:9";
    send_udp(closed);
    thread::sleep(SETTLE);
    let _scenario = add(Scenario::AdminReject).expect("adding the REJECT rule");
    let dst = format!("{ADMIN_DROP_HOST}:{ADMIN_REJECT_PORT}");
    assert!(!try_tcp(&dst), "{dst} is rejected");
    working_connection();
    thread::sleep(SETTLE);
    let trace = pk.stop();
    assert_eq!(
        drops_to(&trace, closed).len(),
        DATAGRAMS,
        "the first drops (the rules' first read):\n{}",
        trace.dump()
    );
    let port = format!("dpt:{ADMIN_REJECT_PORT}");
    let counted = rule_packets("FORWARD", &["REJECT", ADMIN_DROP_HOST, &port]);
    let drops = drops_to(&trace, &dst);
    assert_netfilter_drops_counted(&drops, counted, &trace);
    assert_class(&drops, "firewall");
    for (j, d) in &drops {
        let rule = d.rule.as_deref().unwrap_or_default();
        assert!(
            rule.starts_with("FORWARD: ")
                && rule.contains("REJECT")
                && rule.contains(&ADMIN_REJECT_PORT.to_string()),
            "rule {rule:?}: {j:?}"
        );
    }
    assert_working_connection_clean(&trace);
}

/// The kernel names its own drop sites (`bpf_snprintf`'s `%ps`, 5.13+): with pktrace's
/// `/proc/kallsyms` fallback pointed at an empty file (`PKTRACE_KALLSYMS_PATH`), the drops of
/// a closed UDP port on the node, a closed TCP port on a pod and an admin's DROP rule (in the
/// `nf_tables` module on iptables-nft) are still named, each by a text symbol of this kernel's
/// `/proc/kallsyms` (read here: the function, without the kernel's ` [module]`), and nothing
/// looked the fallback up (it would have said so on stderr and named them `unknown`). Before
/// 5.13 the kernel cannot name them: there the fallback reads the real `/proc/kallsyms`, and
/// the same names are checked the same way.
#[test]
fn drop_sites_are_named_by_the_kernel_as_kallsyms_names_them() {
    let _lab = LabGuard::new();
    let _scenario = add(Scenario::AdminDrop).expect("adding the DROP rule");
    let env: &[(&str, &str)] = if kernel_at_least(5, 13) {
        &[("PKTRACE_KALLSYMS_PATH", "/dev/null")]
    } else {
        &[]
    };
    let pk = Pktrace::start_with_env(&["--pod", "ubuntu", "--failures"], env);
    let node_port = "10.13.76.4:9";
    send_udp(node_port);
    let pod_port = format!("{}:9", WHEREAMI_QFQ2K.ip);
    assert!(!try_tcp(&pod_port), "{pod_port} must be closed");
    let admin = format!("{ADMIN_DROP_HOST}:{ADMIN_DROP_PORT}");
    send_udp(&admin);
    thread::sleep(SETTLE);
    let trace = pk.stop();
    assert!(!trace.stderr.contains("kallsyms"), "{}", trace.dump());
    let listing = std::fs::read_to_string("/proc/kallsyms").expect("reading /proc/kallsyms");
    let text: std::collections::HashSet<&str> = listing
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, ty, name) = (f.next()?, f.next()?, f.next()?);
            matches!(ty, "t" | "T").then_some(name)
        })
        .collect();
    for dst in [node_port, &pod_port, &admin] {
        let drops = drops_to(&trace, dst);
        assert!(!drops.is_empty(), "no drop to {dst}:\n{}", trace.dump());
        for (j, d) in drops {
            let at = d.location.as_deref().unwrap_or_default();
            assert!(text.contains(at), "{at:?} is no kernel function: {j:?}");
        }
    }
    assert_drops(
        &drops_to(&trace, node_port),
        "NO_SOCKET",
        &["__udp4_lib_rcv"],
    );
    assert_drops(&drops_to(&trace, &pod_port), "NO_SOCKET", &["tcp_v4_rcv"]);
}
