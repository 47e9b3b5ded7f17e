//! One packet, one journey: on every lab variant, with pktrace entering the node namespace by
//! `ip netns exec` (which mounts the namespace's own /sys) and by `nsenter --net` (which keeps
//! another namespace's /sys), every packet the node forwarded for the traced subject, as a
//! capture of every interface of the node saw it (`tcpdump -p -i any`), is exactly one
//! journey from its first hop to its last, with its NAT steps (see `tests::property`).
//!
//! Two subjects, each with bounded traffic:
//! - pod `ubuntu`: a ClusterIP service (DNAT to a backend), the internet host (MASQUERADE),
//!   kube-dns (DNAT, UDP);
//! - the backends of the externalTrafficPolicy=Local LoadBalancer service
//!   (`default/whereami-local`), traced by address, with clients outside the node (the internet
//!   host and the peered VNet's host): DNAT without SNAT, from the uplink to a pod's veth.
//!
//! Every count is printed (`--nocapture`), then the test fails if any packet was not whole.

use std::{net::Ipv4Addr, time::Duration};

use tests::{
    LabGuard,
    capture::{Capture, iface_names},
    property::{Tally, forwarded},
    trace::{ENTRIES, Entry, Pktrace, conntrack},
};
use xtask::lab::{
    self, NODE_NS, Variant, api,
    topology::{DNS_CLUSTER_IP, INET_HOST, PEER_HOST, WHEREAMI_CLUSTER_IP, WHEREAMI_LOCAL_LB_VIP},
    wiring::nat_rules,
};

/// No container runtime in the lab: pod resolution goes on to the Kubernetes API (kubenet).
const NO_CRICTL: (&str, &str) = ("PKTRACE_CRICTL", "/nonexistent/crictl");

/// Connections per outside client to the Local service (bounded traffic).
const LB_CONNECTIONS: usize = 2;

/// Traces `args` entered by `entry` while `traffic` (`requests` answered requests) runs and
/// the node is captured; judges every forwarded packet touching `subject`. A capture that is
/// no complete record (tcpdump left frames unread) proves nothing either way: the run is
/// made once more, and a second incomplete capture fails the test.
fn judged(
    entry: Entry,
    args: &[&str],
    env: &[(&str, &str)],
    subject: &[Ipv4Addr],
    requests: usize,
    traffic: impl Fn(),
) -> Tally {
    let mut tries = 0;
    let (trace, frames) = loop {
        tries += 1;
        let capture = Capture::start(NODE_NS);
        let pk = Pktrace::start_entered(entry, args, env);
        traffic();
        // Let the last replies cross the node before both stop.
        std::thread::sleep(Duration::from_millis(200));
        let trace = pk.stop();
        match capture.stop_complete() {
            Ok(frames) => break (trace, frames),
            Err(why) if tries < 2 => eprintln!("one-journey: capture incomplete, once more: {why}"),
            Err(why) => panic!("the capture was incomplete twice: {why}"),
        }
    };
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
    let names = iface_names(NODE_NS);
    let packets = forwarded(&frames, &conntrack(), &names, subject);
    let journeys = trace.journeys();
    eprintln!(
        "one-journey: {} frames captured, {} forwarded packets of {subject:?}, {} journeys",
        frames.len(),
        packets.len(),
        journeys.len()
    );
    // Each answered request is at least a packet there and one back.
    assert!(
        packets.len() >= 2 * requests,
        "the capture missed packets: {} for {requests} requests",
        packets.len()
    );
    Tally::of(&packets, &journeys, &names)
}

fn tcp_from(ns: &str, addr: impl std::fmt::Display) {
    lab::client_tcp(ns, &addr).unwrap_or_else(|e| panic!("tcp {addr} from {ns}: {e:#}"));
}

/// Pod `ubuntu`, by name (through the state file, or on kubenet the fake API server).
fn ubuntu(variant: Variant, entry: Entry) -> Tally {
    let pod = variant.ubuntu();
    let mut args = vec!["--pod", "ubuntu"];
    let mut env = Vec::new();
    if variant.state_file().is_none() {
        args.extend(["--kubeconfig", api::KUBECONFIG]);
        env.push(NO_CRICTL);
    }
    let ns = pod.netns();
    judged(entry, &args, &env, &[pod.ip], 3, || {
        tcp_from(&ns, WHEREAMI_CLUSTER_IP);
        tcp_from(&ns, INET_HOST.addr());
        lab::client_udp(&ns, DNS_CLUSTER_IP).unwrap_or_else(|e| panic!("dns from {ns}: {e:#}"));
    })
}

/// The endpoints the lab's nat rules DNAT `default/whereami-local` to.
fn local_backends(variant: Variant) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = nat_rules(variant)
        .lines()
        .filter(|l| l.contains("\"default/whereami-local:\"") && l.contains("-j DNAT"))
        .filter_map(|l| l.split("--to-destination ").nth(1))
        .filter_map(|ep| ep.split(':').next()?.parse().ok())
        .collect();
    out.sort_unstable();
    out.dedup();
    assert!(
        !out.is_empty(),
        "no endpoint of default/whereami-local in {variant}'s rules"
    );
    out
}

/// The Local service's backends, by address, with clients outside the node.
fn local_lb(variant: Variant, entry: Entry) -> Tally {
    let backends = local_backends(variant);
    let ips: Vec<String> = backends.iter().map(ToString::to_string).collect();
    let list = ips.join(",");
    judged(
        entry,
        &["--pod-ip", &list],
        &[],
        &backends,
        2 * LB_CONNECTIONS,
        || {
            for _ in 0..LB_CONNECTIONS {
                for host in [&INET_HOST, &PEER_HOST] {
                    tcp_from(host.netns, WHEREAMI_LOCAL_LB_VIP);
                }
            }
        },
    )
}

fn one_packet_one_journey(variant: Variant) {
    let _lab = LabGuard::with_variant(variant);
    let mut failed = Vec::new();
    for entry in ENTRIES {
        for (case, run) in [
            ("pod ubuntu", ubuntu as fn(Variant, Entry) -> Tally),
            ("Local LB backends", local_lb),
        ] {
            let tally = run(variant, entry);
            let line = format!("one-journey {variant} {} {case}: {tally}", entry.name());
            eprintln!("{line}");
            if !tally.holds() {
                failed.push(line);
            }
        }
    }
    assert!(
        failed.is_empty(),
        "packets that were not one whole journey:\n{}",
        failed.join("\n")
    );
}

#[test]
fn one_journey_azure_bridge() {
    one_packet_one_journey(Variant::AzureBridge);
}

#[test]
fn one_journey_azure_transparent() {
    one_packet_one_journey(Variant::AzureTransparent);
}

#[test]
fn one_journey_kubenet() {
    one_packet_one_journey(Variant::Kubenet);
}

#[test]
fn one_journey_calico() {
    one_packet_one_journey(Variant::Calico);
}
