//! The filter expression and `-o line` on the lab. Five pktraces trace pod `ubuntu` at once
//! over the same bounded traffic (TCP to the whereami ClusterIP, LoadBalancer VIP and NodePort,
//! UDP to the DNS ClusterIP): one without an expression (the oracle), one with `udp port 53`,
//! one with `dst host <the DNS pod>` (an address the pod's packets carry only after DNAT), one
//! with `port <the NodePort>` (a port the replies carry only after the reverse DNAT), and one
//! with `-o line`.

use std::collections::BTreeMap;

use tests::{LabGuard, trace::Pktrace};
use tracer_user::output::json::contract::JourneyLine;
use xtask::lab::{self, UBUNTU};

const CLUSTER_IP: &str = "10.0.159.58:80";
const LB_VIP: &str = "203.0.113.251:80";
const DNS_SVC: &str = "10.0.0.10:53";
/// The kube-dns-like pod behind `DNS_SVC`, its only endpoint.
const DNS_POD: &str = "10.13.76.17";
/// whereami's NodePort on the node's address: DNAT to a backend's port 80, and MASQUERADE.
const NODE_PORT: &str = "10.13.76.4:30064";
const TCP_CONNECTIONS: usize = 8;
const DNS_QUERIES: usize = 3;

/// Bounded traffic from pod ubuntu; every request is answered.
fn traffic() {
    let ns = UBUNTU.netns();
    for i in 0..TCP_CONNECTIONS {
        let to = if i % 4 == 3 { LB_VIP } else { CLUSTER_IP };
        lab::client_tcp(&ns, to).unwrap_or_else(|e| panic!("tcp {to}: {e:#}"));
    }
    lab::client_tcp(&ns, NODE_PORT).unwrap_or_else(|e| panic!("tcp {NODE_PORT}: {e:#}"));
    for _ in 0..DNS_QUERIES {
        lab::client_udp(&ns, DNS_SVC).unwrap_or_else(|e| panic!("udp {DNS_SVC}: {e:#}"));
    }
}

/// Every address a journey's steps show, before and after each NAT step.
fn endpoints(j: &JourneyLine) -> impl Iterator<Item = &str> {
    j.steps.iter().flat_map(|s| {
        [
            Some(&s.src),
            Some(&s.dst),
            s.orig_src.as_ref(),
            s.orig_dst.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
    })
}

/// UDP with port 53 at some step.
fn is_dns(j: &JourneyLine) -> bool {
    j.proto == "udp" && endpoints(j).any(|e| e.ends_with(":53"))
}

/// A destination of `host` at some step.
fn to_dns_pod(j: &JourneyLine) -> bool {
    j.steps.iter().any(|s| {
        [Some(&s.dst), s.orig_dst.as_ref()]
            .into_iter()
            .flatten()
            .any(|d| d.split(':').next() == Some(DNS_POD))
    })
}

/// A journey as every run prints it: each step's point, packet and IP id (the same packet
/// has the same key in every run).
fn key(j: &JourneyLine) -> String {
    let steps: Vec<String> = j
        .steps
        .iter()
        .map(|s| format!("{:?} {} > {} id {:?}", s.point, s.src, s.dst, s.ip_id))
        .collect();
    format!("{} {}", j.proto, steps.join(", "))
}

/// The keys of `journeys`, counted.
fn keys<'a>(journeys: impl IntoIterator<Item = &'a JourneyLine>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for j in journeys {
        *out.entry(key(j)).or_insert(0) += 1;
    }
    out
}

/// `HH:MM:SS.uuuuuu proto ` at the start of a line.
fn is_journey_line(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 16
        && b[..15].iter().enumerate().all(|(i, c)| match i {
            2 | 5 => *c == b':',
            8 => *c == b'.',
            _ => c.is_ascii_digit(),
        })
        && b[15] == b' '
}

#[test]
fn an_expression_shows_the_journeys_it_matches_and_line_prints_one_line_each() {
    let _lab = LabGuard::new();
    let all = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let dns = Pktrace::start(&["--pod", "ubuntu", "--follow", "udp", "port", "53"]);
    let after_dnat = Pktrace::start(&["--pod", "ubuntu", "--follow", "dst", "host", DNS_POD]);
    let node_port = Pktrace::start(&["--pod", "ubuntu", "--follow", "port", "30064"]);
    let line = Pktrace::start(&["--pod", "ubuntu", "--follow", "-o", "line"]);
    traffic();
    let (all, dns, after_dnat) = (all.stop(), dns.stop(), after_dnat.stop());
    let node_port = node_port.stop();
    let (status, line) = line.stop_raw();
    for t in [&all, &dns, &after_dnat, &node_port] {
        assert!(t.status.success(), "{}", t.dump());
        assert_eq!(t.summary().lost_events, 0, "{}", t.dump());
    }

    // `udp port 53`: every shown journey is DNS at some step, and they are exactly the DNS
    // journeys of the run without an expression (requests and replies).
    let shown = dns.journeys();
    assert!(shown.iter().all(|j| is_dns(j)), "{}", dns.dump());
    let want = keys(all.journeys().into_iter().filter(|j| is_dns(j)));
    assert_eq!(
        want.values().sum::<usize>(),
        2 * DNS_QUERIES,
        "{}",
        all.dump()
    );
    assert_eq!(keys(shown.iter().copied()), want, "{}", dns.dump());
    assert_eq!(dns.summary().journeys, 2 * DNS_QUERIES as u64);

    // The TCP packets were ruled out in the kernel: no event of theirs reached pktrace.
    let dns_steps: usize = shown.iter().map(|j| j.steps.len()).sum();
    let (events_all, events_dns) = (all.summary().events, dns.summary().events);
    println!(
        "events read: {events_all} without an expression, {events_dns} with `udp port 53` \
         ({dns_steps} steps in its journeys)"
    );
    assert_eq!(events_dns, dns_steps as u64, "{}", dns.dump());

    // `dst host DNS_POD`: only after DNAT do the pod's queries carry that address; each
    // shown journey started towards the ClusterIP, and none of the replies is shown.
    let shown = after_dnat.journeys();
    assert_eq!(shown.len(), DNS_QUERIES, "{}", after_dnat.dump());
    for j in &shown {
        assert_eq!(j.steps[0].dst, DNS_SVC, "matched before DNAT? {j:?}");
        assert!(to_dns_pod(j), "{j:?}");
    }
    let want = keys(all.journeys().into_iter().filter(|j| to_dns_pod(j)));
    assert_eq!(keys(shown.iter().copied()), want, "{}", after_dnat.dump());

    // `port 30064`: the NodePort connection both ways; the replies leave the backend from
    // port 80 and carry 30064 only after the reverse DNAT.
    let with_port = |j: &&JourneyLine| endpoints(j).any(|e| e.ends_with(":30064"));
    let shown = node_port.journeys();
    let want = keys(all.journeys().into_iter().filter(with_port));
    assert_eq!(keys(shown.iter().copied()), want, "{}", node_port.dump());
    let replies = shown
        .iter()
        .filter(|j| j.steps[0].src.ends_with(":80"))
        .count();
    assert!(
        replies >= 1 && replies < shown.len(),
        "requests and replies expected:\n{}",
        node_port.dump()
    );

    // `-o line`: one line per journey, then the text summary, as many journeys as the JSON
    // run's on the same traffic.
    assert!(status.success(), "{line}");
    let (journeys, rest): (Vec<&str>, Vec<&str>) = line.lines().partition(|l| is_journey_line(l));
    let summary = rest.first().copied().unwrap_or_default();
    let counted: u64 = summary
        .strip_prefix("summary for default/ubuntu: ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary first after the journeys:\n{line}"));
    assert!(
        line.starts_with(journeys.first().copied().unwrap_or_default()),
        "{line}"
    );
    assert_eq!(journeys.len() as u64, counted, "{line}");
    assert_eq!(counted, all.summary().journeys, "{line}\n{}", all.dump());
    let dnat_lines = journeys
        .iter()
        .filter(|l| l.contains(&format!("> {CLUSTER_IP} → = > ")) && l.contains(" DNAT KUBE-SEP-"))
        .count();
    assert!(
        dnat_lines >= 1,
        "no ClusterIP journey with its DNAT rule:\n{line}"
    );
    println!("-o line:\n{line}");
}
