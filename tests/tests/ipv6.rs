//! IPv6 NAT on the dual-stack lab (`cargo xtask lab up --dual-stack`): pod `ubuntu`'s IPv6
//! packets to the IPv6 cluster IPs (DNAT by ip6tables) and to the internet host (ip-masq-agent's
//! MASQUERADE), each NAT step checked against the node's `conntrack -L -f ipv6` entry, the
//! server's log and the ip6tables rule and service it names; and IPv4 beside them, in the same
//! run, as on a single-stack node.

use tests::{
    LabGuard,
    trace::{
        CtEntry, Pktrace, Trace, assert_masqueraded, assert_path, conntrack_hook, ct_entry,
        nat_steps, tcp_request,
    },
};
use tracer_user::output::json::contract::{JourneyLine, Point};
use xtask::lab::{
    self, PODS, UBUNTU,
    dualstack::{
        DNS6_CLUSTER_IP, INET6_HOST, NODE6_IP, WHEREAMI6_CLUSTER_IP, pod_by_ip6, pod_ip6,
        server_log6,
    },
};

const POD_VETH: &str = "azv47c3ee9d512";
/// Interfaces a journey may pass between entering and leaving the node.
const BRIDGE: &[&str] = &["azure0"];

fn traced(traffic: impl FnOnce()) -> Trace {
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    traffic();
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.summary().lost_events, 0, "{}", trace.dump());
    trace
}

fn ubuntu6() -> String {
    pod_ip6(&UBUNTU).to_string()
}

fn client(proto: &str, addr: &str) -> String {
    let reply = if proto == "udp" {
        lab::client_udp(&UBUNTU.netns(), addr)
    } else {
        tcp_request(&UBUNTU.netns(), addr)
    };
    reply.unwrap_or_else(|e| panic!("{proto} {addr}: {e:#}"))
}

/// The journeys of one connection: from the pod, and the replies.
fn flow<'a>(trace: &'a Trace, ct: &CtEntry) -> (Vec<&'a JourneyLine>, Vec<&'a JourneyLine>) {
    let orig = trace.starting(&ct.orig_src_ep(), &ct.orig_dst_ep());
    let mut reply = trace.starting(&ct.reply_src_ep(), &ct.reply_dst_ep());
    reply.extend(trace.starting_at_nat(&ct.reply_src_ep(), &ct.reply_dst_ep()));
    assert!(!orig.is_empty(), "no journey for {ct:?}\n{}", trace.dump());
    assert!(
        !reply.is_empty(),
        "no reply journey for {ct:?}\n{}",
        trace.dump()
    );
    (orig, reply)
}

/// Each NAT step is what conntrack recorded, timed (untimed with `--nat-hook conntrack`), and
/// names `rule` (the rule's chain) and
/// `service`.
fn check_nat(journey: &JourneyLine, ct: &CtEntry, rule: &str, service: Option<&str>) {
    let steps = nat_steps(journey);
    assert!(!steps.is_empty(), "no NAT step: {journey:?}");
    for s in steps {
        let want = match (s.point, s.reply) {
            (Point::Dnat, Some(false)) => (ct.orig_src_ep(), ct.reply_src_ep()),
            (Point::Dnat, Some(true)) => (ct.orig_dst_ep(), ct.orig_src_ep()),
            (Point::Snat, Some(false)) => (ct.reply_dst_ep(), ct.reply_src_ep()),
            (Point::Snat, Some(true)) => (ct.reply_src_ep(), ct.orig_src_ep()),
            other => panic!("unexpected NAT step {other:?}: {s:?}"),
        };
        assert_eq!(
            (s.src.clone(), s.dst.clone()),
            want,
            "NAT step against conntrack {ct:?}: {s:?}"
        );
        let latency = s.latency_ns.flatten();
        if conntrack_hook() {
            assert_eq!(latency, None, "conntrack cannot time a NAT step: {s:?}");
        } else {
            assert!(
                latency.is_some_and(|ns| ns > 0 && ns < 1_000_000_000),
                "NAT step not timed: {s:?}"
            );
        }
        assert_eq!(s.rule.as_deref(), Some(rule), "{s:?}");
        assert_eq!(s.service.as_deref(), service, "{s:?}");
    }
}

/// The kube-proxy endpoint chain of the IPv6 whereami backend `ip`.
fn sep_of(ip: &str) -> &'static str {
    let rules = lab::dualstack::NAT_RULES6;
    let needle = format!("--to-destination [{ip}]:");
    let line = rules
        .lines()
        .find(|l| l.contains(&needle))
        .unwrap_or_else(|| panic!("no DNAT to {ip} in the lab's rules"));
    let chain = line.split_whitespace().nth(1).expect("chain");
    rules
        .lines()
        .find_map(|l| {
            l.strip_prefix(':')?
                .split_whitespace()
                .next()
                .filter(|c| *c == chain)
        })
        .expect("declared chain")
}

#[test]
fn ipv6_tcp_and_udp_to_cluster_ips_are_dnated_as_conntrack_says() {
    let _lab = LabGuard::dual_stack();
    let (mut seen_tcp, mut seen_udp) = (String::new(), String::new());
    let vip = WHEREAMI6_CLUSTER_IP.to_string();
    let dns = DNS6_CLUSTER_IP.to_string();
    let trace = traced(|| {
        seen_tcp = client("tcp", &vip);
        seen_udp = client("udp", &dns);
    });
    let me = ubuntu6();
    for (proto, dst, seen) in [("tcp", &vip, &seen_tcp), ("udp", &dns, &seen_udp)] {
        let ct = ct_entry(&me, dst);
        assert_eq!(ct.proto, proto, "{ct:?}");
        let backend: std::net::Ipv6Addr = ct.reply_src.parse().expect("an IPv6 backend");
        let pod = pod_by_ip6(backend).unwrap_or_else(|| panic!("{backend} is no lab pod"));
        assert_eq!(*seen, format!("client={}", ct.orig_src_ep()), "no SNAT");
        let log = server_log6(&pod.netns());
        assert!(log.contains(&ct.orig_src_ep()), "{log}");
        let service = if proto == "tcp" {
            "default/whereami"
        } else {
            "kube-system/kube-dns"
        };
        let rule = sep_of(&ct.reply_src);
        let (orig, reply) = flow(&trace, &ct);
        for j in &orig {
            assert_eq!(j.proto, proto, "{j:?}");
            assert_path(j, POD_VETH, &[("dnat", false)], pod.host_if, BRIDGE);
            check_nat(j, &ct, rule, Some(service));
        }
        for j in &reply {
            assert_path(j, pod.host_if, &[("dnat", true)], POD_VETH, BRIDGE);
            check_nat(j, &ct, rule, Some(service));
        }
    }
}

#[test]
fn ipv6_tcp_and_icmp6_to_the_internet_are_masqueraded_to_the_node() {
    let _lab = LabGuard::dual_stack();
    let mut seen = String::new();
    let host = INET6_HOST.to_string();
    let host_ip = INET6_HOST.ip().to_string();
    let trace = traced(|| {
        seen = client("tcp", &host);
        let ping = lab::in_ns(
            &UBUNTU.netns(),
            "ping",
            ["-6", "-c", "2", "-i", "0.2", "-W", "2", &host_ip],
        )
        // Its lines would interleave with the harness's (the VM tier reads them).
        .stdout(std::process::Stdio::null())
        .status()
        .expect("ping");
        assert!(ping.success(), "ping -6 {host_ip} failed");
    });
    let me = ubuntu6();
    let ct = ct_entry(&me, &host);
    assert_eq!(ct.reply_dst, NODE6_IP.to_string(), "{ct:?}");
    assert_eq!(
        seen,
        format!("client={}", ct.reply_dst_ep()),
        "the host saw the node"
    );
    let log = server_log6(lab::dualstack::INET6_HOST_NS);
    assert!(log.contains(&ct.reply_dst_ep()), "{log}");
    let (orig, reply) = flow(&trace, &ct);
    assert_masqueraded(&orig, (POD_VETH, "eth0"), &[("snat", false)], BRIDGE);
    assert_masqueraded(&reply, ("eth0", POD_VETH), &[("snat", true)], BRIDGE);
    for j in orig.iter().chain(&reply) {
        check_nat(j, &ct, "IP-MASQ-AGENT", None);
    }

    let icmp = ct_entry(&me, &host_ip);
    assert_eq!(icmp.proto, "icmpv6", "{icmp:?}");
    let echo = trace.starting(&me, &host_ip);
    assert_eq!(echo.len(), 2, "two echo requests\n{}", trace.dump());
    let node = NODE6_IP.to_string();
    let mut answers = trace.starting(&host_ip, &node);
    answers.extend(trace.starting_at_nat(&host_ip, &node));
    assert_eq!(answers.len(), 2, "two echo replies\n{}", trace.dump());
    assert_masqueraded(&echo, (POD_VETH, "eth0"), &[("snat", false)], BRIDGE);
    assert_masqueraded(&answers, ("eth0", POD_VETH), &[("snat", true)], BRIDGE);
    for j in echo.iter().chain(&answers) {
        assert_eq!(j.proto, "icmp6", "{j:?}");
        check_nat(j, &icmp, "IP-MASQ-AGENT", None);
    }
}

#[test]
fn ipv4_beside_ipv6_is_translated_and_named_as_on_a_single_stack_node() {
    let _lab = LabGuard::dual_stack();
    let (mut seen4, mut seen6) = (String::new(), String::new());
    let vip4 = lab::topology::WHEREAMI_CLUSTER_IP.to_string();
    let vip6 = WHEREAMI6_CLUSTER_IP.to_string();
    let trace = traced(|| {
        seen4 = client("tcp", &vip4);
        seen6 = client("tcp", &vip6);
    });
    let ct4 = ct_entry(&UBUNTU.ip.to_string(), &vip4);
    let ct6 = ct_entry(&ubuntu6(), &vip6);
    assert_eq!(seen4, format!("client={}", ct4.orig_src_ep()));
    assert_eq!(seen6, format!("client={}", ct6.orig_src_ep()));
    let backend4 = PODS
        .iter()
        .find(|p| p.ip.to_string() == ct4.reply_src)
        .expect("an IPv4 backend");
    let rule4 = lab::nat_rules(lab::Variant::AzureBridge)
        .lines()
        .find(|l| l.contains(&format!("--to-destination {}:80", backend4.ip)))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("the backend's KUBE-SEP");
    let (orig4, reply4) = flow(&trace, &ct4);
    for j in orig4.iter().chain(&reply4) {
        check_nat(j, &ct4, rule4, Some("default/whereami"));
    }
    let (orig6, reply6) = flow(&trace, &ct6);
    for j in orig6.iter().chain(&reply6) {
        check_nat(j, &ct6, sep_of(&ct6.reply_src), Some("default/whereami"));
    }
}
