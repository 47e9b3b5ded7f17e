//! Issue 2: pod `ubuntu`'s packets through the lab node, checked against the node's conntrack
//! table and against what the servers saw.
//!
//! Each test brings the lab up (and down on drop), starts pktrace in the node namespace, makes
//! bounded traffic from pod `ubuntu`, stops pktrace and reads its JSON lines.

use tests::{
    LabGuard,
    trace::{
        CtEntry, Pktrace, Trace, assert_masqueraded, assert_path, conntrack_hook, ct_entry,
        nat_steps, shape, tcp_request,
    },
};
use tracer_user::output::json::contract::{JourneyLine, Point};
use xtask::lab::{self, PODS, UBUNTU};

const POD: &str = "10.13.76.46";
const POD_VETH: &str = "azv47c3ee9d512";
const NODE_IP: &str = "10.13.76.4";
/// Interfaces a journey may pass between entering and leaving the node.
const BRIDGE: &[&str] = &["azure0"];

fn veth_of(ip: &str) -> &'static str {
    PODS.iter()
        .find(|p| p.ip.to_string() == ip)
        .map_or_else(|| panic!("{ip} is not a lab pod"), |p| p.host_if)
}

fn owned(v: &[(&str, &str, bool)]) -> Vec<(String, String, bool)> {
    v.iter()
        .map(|(p, i, r)| ((*p).to_owned(), (*i).to_owned(), *r))
        .collect()
}

/// Checks what every journey must satisfy: steps in time order starting at 0, the keys of
/// each kind of step (the contract's types read every line already).
fn check_contract(trace: &Trace) {
    for j in trace.journeys() {
        assert_eq!(j.pod, "default/ubuntu", "{j:?}");
        assert!(!j.steps.is_empty(), "{j:?}");
        assert_eq!(j.steps[0].t_ns, 0, "{j:?}");
        assert!(
            j.steps.windows(2).all(|w| w[0].t_ns <= w[1].t_ns),
            "steps out of time order: {j:?}"
        );
        for s in &j.steps {
            if s.point.is_nat() {
                let nat = (&s.orig_src, &s.orig_dst, s.reply, s.latency_ns);
                assert!(
                    nat.0.is_some() && nat.1.is_some() && nat.2.is_some() && nat.3.is_some(),
                    "NAT step without orig_src, orig_dst, reply or latency_ns: {s:?}"
                );
            } else if s.point == Point::Drop {
                // A drop the kernel made (e.g. an echo reply after ping closed its socket).
                assert!(
                    s.reason.is_some() && s.location.is_some(),
                    "drop step without reason or location: {s:?}"
                );
            } else {
                assert!(
                    matches!(s.iface, Some(Some(_))),
                    "tc step without iface: {s:?}"
                );
            }
        }
    }
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
}

/// The journeys of one flow, split into original direction (from the pod) and replies.
fn flow<'a>(trace: &'a Trace, ct: &CtEntry) -> (Vec<&'a JourneyLine>, Vec<&'a JourneyLine>) {
    let orig = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let reply = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    assert!(
        !orig.is_empty(),
        "no journey from the pod for {ct:?}\n{}",
        trace.dump()
    );
    assert!(
        !reply.is_empty(),
        "no reply journey for {ct:?}\n{}",
        trace.dump()
    );
    (orig, reply)
}

/// Each NAT step must be what conntrack recorded for the connection.
fn check_nat_against_conntrack(journey: &JourneyLine, ct: &CtEntry) {
    for s in journey.steps.iter().filter(|s| s.point.is_nat()) {
        let (src, dst) = (s.src.as_str(), s.dst.as_str());
        match (s.point, s.reply.expect("reply")) {
            (Point::Dnat, false) => {
                assert_eq!(
                    s.orig_dst.as_deref(),
                    Some(ct.orig_dst_ep().as_str()),
                    "{s:?} vs {ct:?}"
                );
                assert_eq!(
                    dst,
                    ct.reply_src_ep(),
                    "DNAT target must be conntrack's reply source: {s:?} vs {ct:?}"
                );
            }
            (Point::Snat, false) => {
                assert_eq!(
                    src,
                    ct.reply_dst_ep(),
                    "SNAT source must be conntrack's reply destination: {s:?} vs {ct:?}"
                );
            }
            (Point::Dnat, true) => assert_eq!(
                src,
                ct.orig_dst_ep(),
                "un-DNAT restores the original destination: {s:?} vs {ct:?}"
            ),
            (Point::Snat, true) => assert_eq!(
                dst,
                ct.orig_src_ep(),
                "un-SNAT restores the pod: {s:?} vs {ct:?}"
            ),
            other => panic!("unexpected NAT step {other:?}"),
        }
        let latency = s
            .latency_ns
            .unwrap_or_else(|| panic!("NAT step without latency_ns: {s:?}"));
        if conntrack_hook() {
            assert!(latency.is_none(), "conntrack cannot time a NAT step: {s:?}");
            continue;
        }
        let latency = latency.unwrap_or_else(|| panic!("latency not measured: {s:?}"));
        assert!(
            latency > 0 && latency < 1_000_000_000,
            "implausible NAT latency {latency}: {s:?}"
        );
    }
}

/// Runs `traffic` from pod ubuntu under pktrace and returns the trace.
fn traced(traffic: impl FnOnce()) -> Trace {
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    traffic();
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    check_contract(&trace);
    trace
}

fn tcp(addr: &str) -> String {
    tcp_request(&UBUNTU.netns(), addr).unwrap_or_else(|e| panic!("tcp {addr}: {e:#}"))
}

#[test]
fn tcp_to_cluster_ip_is_dnated_to_a_backend_without_snat() {
    let _lab = LabGuard::new();
    let mut seen = String::new();
    let trace = traced(|| seen = tcp("10.0.159.58:80"));
    let ct = ct_entry(POD, "10.0.159.58:80");
    let backend = ct.reply_src.clone();
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the backend saw the pod itself"
    );
    assert!(
        lab::server_log(&format!("pkt-pod-{}", pod_name(&backend))).contains(&ct.orig_src_ep())
    );

    let (orig, reply) = flow(&trace, &ct);
    for j in &orig {
        assert_path(j, POD_VETH, &[("dnat", false)], veth_of(&backend), BRIDGE);
        check_nat_against_conntrack(j, &ct);
    }
    for j in &reply {
        assert_path(j, veth_of(&backend), &[("dnat", true)], POD_VETH, BRIDGE);
        check_nat_against_conntrack(j, &ct);
    }
}

/// [`assert_masqueraded`] on the lab's bridge, and every NAT step as conntrack recorded it.
fn check_masqueraded(
    journeys: &[&JourneyLine],
    ends: (&str, &str),
    nat: &[(&str, bool)],
    ct: &CtEntry,
) {
    assert_masqueraded(journeys, ends, nat, BRIDGE);
    for j in journeys {
        check_nat_against_conntrack(j, ct);
    }
}

fn pod_name(ip: &str) -> &'static str {
    PODS.iter()
        .find(|p| p.ip.to_string() == ip)
        .map(|p| p.name)
        .expect("lab pod")
}

#[test]
fn tcp_to_load_balancer_vip_is_dnated_and_masqueraded() {
    let _lab = LabGuard::new();
    let mut seen = String::new();
    let trace = traced(|| seen = tcp("203.0.113.251:80"));
    let ct = ct_entry(POD, "203.0.113.251:80");
    assert_eq!(
        ct.reply_dst, NODE_IP,
        "KUBE-MARK-MASQ: the backend answers the node"
    );
    assert_eq!(
        seen,
        format!("client={}", ct.reply_dst_ep()),
        "the backend saw the node address"
    );
    let backend = ct.reply_src.clone();
    let (orig, mut reply) = flow(&trace, &ct);
    reply.extend(trace.starting_at_nat(&ct.reply_src_ep(), &ct.reply_dst_ep()));
    check_masqueraded(
        &orig,
        (POD_VETH, veth_of(&backend)),
        &[("dnat", false), ("snat", false)],
        &ct,
    );
    check_masqueraded(
        &reply,
        (veth_of(&backend), POD_VETH),
        &[("snat", true), ("dnat", true)],
        &ct,
    );
}

#[test]
fn udp_to_dns_cluster_ip_is_dnated_to_the_dns_pod() {
    let _lab = LabGuard::new();
    let mut seen = String::new();
    let trace = traced(|| {
        seen = lab::client_udp(&UBUNTU.netns(), "10.0.0.10:53")
            .unwrap_or_else(|e| panic!("udp: {e:#}"));
    });
    let ct = ct_entry(POD, "10.0.0.10:53");
    assert_eq!(ct.reply_src, "10.13.76.17");
    assert_eq!(seen, format!("client={}", ct.orig_src_ep()));
    let (orig, reply) = flow(&trace, &ct);
    assert_eq!(orig.len(), 1, "one datagram");
    assert_eq!(reply.len(), 1, "one answer");
    assert_path(
        orig[0],
        POD_VETH,
        &[("dnat", false)],
        "azv3cd1b2db354",
        BRIDGE,
    );
    assert_path(
        reply[0],
        "azv3cd1b2db354",
        &[("dnat", true)],
        POD_VETH,
        BRIDGE,
    );
    check_nat_against_conntrack(orig[0], &ct);
    check_nat_against_conntrack(reply[0], &ct);
    let dnat = orig[0];
    let rule = dnat
        .steps
        .iter()
        .find(|s| s.point.is_nat())
        .expect("a NAT step");
    if rule.rule.is_some() {
        assert_eq!(rule.rule.as_deref(), Some("KUBE-SEP-DNSA5WQ4ZDRJQTVF"));
        assert_eq!(rule.service.as_deref(), Some("kube-system/kube-dns"));
    }
}

#[test]
fn tcp_and_icmp_to_the_internet_are_masqueraded_to_the_node() {
    let _lab = LabGuard::new();
    let mut seen = String::new();
    let trace = traced(|| {
        seen = tcp("203.0.113.80:80");
        let ok = lab::in_ns(
            &UBUNTU.netns(),
            "ping",
            ["-c", "2", "-i", "0.2", "-W", "2", "203.0.113.80"],
        )
        .status()
        .expect("ping");
        assert!(ok.success(), "ping 203.0.113.80 failed");
    });
    let ct = ct_entry(POD, "203.0.113.80:80");
    assert_eq!(ct.reply_dst, NODE_IP);
    assert_eq!(
        seen,
        format!("client={}", ct.reply_dst_ep()),
        "the internet host saw the node"
    );
    let (orig, mut reply) = flow(&trace, &ct);
    reply.extend(trace.starting_at_nat(&ct.reply_src_ep(), &ct.reply_dst_ep()));
    check_masqueraded(&orig, (POD_VETH, "eth0"), &[("snat", false)], &ct);
    check_masqueraded(&reply, ("eth0", POD_VETH), &[("snat", true)], &ct);

    let icmp = ct_entry(POD, "203.0.113.80");
    assert_eq!(icmp.proto, "icmp");
    let echo = trace.starting(POD, "203.0.113.80");
    assert_eq!(echo.len(), 2, "two echo requests\n{}", trace.dump());
    let mut answers = trace.starting("203.0.113.80", NODE_IP);
    answers.extend(trace.starting_at_nat("203.0.113.80", NODE_IP));
    assert_eq!(answers.len(), 2, "two echo replies\n{}", trace.dump());
    check_masqueraded(&echo, (POD_VETH, "eth0"), &[("snat", false)], &icmp);
    assert!(echo.iter().all(|j| j.proto == "icmp"));
    check_masqueraded(&answers, ("eth0", POD_VETH), &[("snat", true)], &icmp);
}

#[test]
fn tcp_inside_the_vnet_is_not_translated() {
    let _lab = LabGuard::new();
    let mut seen = String::new();
    let trace = traced(|| seen = tcp("10.13.1.4:80"));
    let ct = ct_entry(POD, "10.13.1.4:80");
    assert_eq!(
        ct.reply_dst, POD,
        "ip-masq-agent: no MASQUERADE inside 10.13.0.0/16"
    );
    assert_eq!(
        seen,
        format!("client={}", ct.orig_src_ep()),
        "the VNet host saw the pod"
    );
    let (orig, reply) = flow(&trace, &ct);
    for j in orig.iter().chain(&reply) {
        assert!(nat_steps(j).is_empty(), "no NAT expected: {j:?}");
    }
    // Routed by the node both ways: every hop is seen.
    for j in &orig {
        assert_eq!(
            shape(j),
            owned(&[
                ("ingress", POD_VETH, false),
                ("ingress", "azure0", false),
                ("egress", "azure0", false),
                ("egress", "eth0", false),
            ]),
            "{j:?}"
        );
    }
    for j in &reply {
        assert_eq!(
            shape(j),
            owned(&[
                ("ingress", "eth0", false),
                ("ingress", "azure0", false),
                ("egress", "azure0", false),
                ("egress", POD_VETH, false),
            ]),
            "{j:?}"
        );
    }
}
