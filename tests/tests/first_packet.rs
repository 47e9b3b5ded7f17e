//! The first packet of a connection from outside the node, traced from the backends' side: a
//! client beyond the uplink connects to a LoadBalancer VIP, and pktrace traces the service's
//! backend pods only. The SYN becomes the backends' only when DNAT rewrites it, yet its
//! journey, like every later packet's, starts with `ingress` on the uplink, has its `dnat` step
//! with the rule that did it, and ends at the backend's veth (DESIGN.md, "Joining events into a
//! journey": the uplink for a packet from outside, its first packet included).

use tests::{
    LabGuard,
    trace::{CtEntry, Pktrace, Trace, assert_path, conntrack, nat_steps},
};
use tracer_user::output::json::contract::{JourneyLine, Point};
use xtask::lab::{
    self, PODS, Variant,
    topology::{INET_HOST, WHEREAMI_LB_VIP, WHEREAMI_LOCAL_LB_VIP},
    wiring::nat_rules,
};

/// The endpoints of `default/whereami` and `default/whereami-local` (the same two pods).
const BACKENDS: &str = "10.13.76.26,10.13.76.7";
/// Connections per test: each picks a backend at random, and each has its own first packet.
const CONNECTIONS: usize = 4;
/// Interfaces a journey may pass between entering and leaving the node.
const BRIDGE: &[&str] = &["azure0"];

fn veth_of(ip: &str) -> &'static str {
    PODS.iter()
        .find(|p| p.ip.to_string() == ip)
        .map_or_else(|| panic!("{ip} is not a lab pod"), |p| p.host_if)
}

/// The KUBE-SEP chain whose DNAT sends `service`'s traffic to `endpoint` in the lab's rules.
fn sep_chain(service: &str, endpoint: &str) -> String {
    let comment = format!("\"{service}:\"");
    let target = format!("-j DNAT --to-destination {endpoint}");
    nat_rules(Variant::default())
        .lines()
        .find(|l| l.starts_with("-A KUBE-SEP-") && l.contains(&comment) && l.ends_with(&target))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no KUBE-SEP chain of {service} DNATs to {endpoint}"))
        .to_owned()
}

/// Every journey with a DNAT step of the connection's original direction (whatever step it
/// starts at).
fn dnated<'a>(trace: &'a Trace, ct: &CtEntry) -> Vec<&'a JourneyLine> {
    trace
        .journeys()
        .into_iter()
        .filter(|j| {
            nat_steps(j).iter().any(|s| {
                s.point == Point::Dnat
                    && s.reply == Some(false)
                    && s.orig_src.as_deref() == Some(ct.orig_src_ep().as_str())
                    && s.orig_dst.as_deref() == Some(ct.orig_dst_ep().as_str())
            })
        })
        .collect()
}

/// `CONNECTIONS` TCP connections from the internet host to `vip` under pktrace tracing the
/// backends; checks every packet of the original direction, and the first one in particular.
fn first_packets_start_at_the_uplink(vip: &str, service: &str, nat: &[(&str, bool)]) {
    let _lab = LabGuard::new();
    let client = INET_HOST.ip.to_string();
    let pk = Pktrace::start(&["--pod-ip", BACKENDS, "--follow"]);
    for _ in 0..CONNECTIONS {
        lab::client_tcp(INET_HOST.netns, vip).unwrap_or_else(|e| panic!("tcp {vip}: {e:#}"));
    }
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
    let cts: Vec<CtEntry> = conntrack()
        .into_iter()
        .filter(|e| e.orig_src == client && e.orig_dst_ep() == vip)
        .collect();
    assert_eq!(cts.len(), CONNECTIONS, "{cts:#?}");
    for ct in &cts {
        let backend = ct.reply_src.clone();
        let rule = sep_chain(service, &ct.reply_src_ep());
        let all = dnated(&trace, ct);
        let from_uplink = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
        // SYN, ACK, request, FIN and ACK at least; none of them starts at its DNAT step.
        assert!(
            all.len() >= 3,
            "too few packets of {ct:?}\n{}",
            trace.dump()
        );
        assert_eq!(
            all.len(),
            from_uplink.len(),
            "a journey of {ct:?} does not start at the uplink\n{}",
            trace.dump()
        );
        for j in &from_uplink {
            assert_path(j, "eth0", nat, veth_of(&backend), BRIDGE);
            let times: Vec<u64> = j.steps.iter().map(|s| s.t_ns).collect();
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "steps out of time order: {j:?}"
            );
            let dnat = &nat_steps(j)[0];
            assert_eq!(dnat.rule.as_deref(), Some(rule.as_str()), "{j:?}");
            assert_eq!(dnat.service.as_deref(), Some(service), "{j:?}");
        }
        // The connection's first packet: its uplink ingress was noted at tc and emitted at its
        // DNAT, so its time is a bound; every later packet was followed at tc ingress itself.
        let first = from_uplink
            .iter()
            .min_by_key(|j| j.start_ktime_ns.expect("start_ktime_ns"))
            .expect("a journey");
        for j in &from_uplink {
            let claimed = j.steps[0].t_at_or_before;
            assert_eq!(
                claimed,
                std::ptr::eq(*j, *first),
                "only the first packet's ingress is claimed: {j:?}\n{}",
                trace.dump()
            );
        }
    }
}

/// `default/whereami`'s VIP (externalTrafficPolicy=Cluster): DNAT, then masquerade to the node.
#[test]
fn first_packet_to_lb_vip_starts_at_the_uplink() {
    first_packets_start_at_the_uplink(
        &WHEREAMI_LB_VIP.to_string(),
        "default/whereami",
        &[("dnat", false), ("snat", false)],
    );
}

/// `default/whereami-local`'s VIP (externalTrafficPolicy=Local): DNAT only.
#[test]
fn first_packet_to_local_policy_vip_starts_at_the_uplink() {
    first_packets_start_at_the_uplink(
        &WHEREAMI_LOCAL_LB_VIP.to_string(),
        "default/whereami-local",
        &[("dnat", false)],
    );
}
