//! Cross-node journeys over IPv6: both lab nodes dual-stack (`LabGuard::two_nodes_dual_stack`).
//! pktrace runs on each node at once; pod ubuntu on node 1 connects over IPv6 to the backend
//! pod on node 2 (`fd13:77::1f`, no NAT on either node). IPv6 has no IP id, so `pktrace merge`
//! must join each packet's two halves by `wire_hash` (the digest of its TCP sequence numbers,
//! flags and window, and flow label): every packet node 1 sent out of eth0 is one journey over
//! both nodes, and so is every reply node 2 sent back, with the same `wire_hash` on every step.

use std::sync::OnceLock;

use tests::{
    LabGuard,
    merge::merge,
    trace::{Pktrace, Trace, tcp_request},
};
use tracer_user::output::json::contract::{JourneyLine, MergeLine, Point, StepLine};
use xtask::lab::{
    UBUNTU,
    dualstack::pod_ip6,
    node2::{NODE2_NS, REMOTE_BACKEND},
    node2_dualstack::{REMOTE_BACKEND6, REMOTE_PORT6, server_log6},
};

/// Connections the test makes (each several packets each way).
const CONNECTIONS: usize = 4;
const UPLINK: &str = "eth0";

struct Run {
    t1: Trace,
    t2: Trace,
    log: String,
    merged: Vec<JourneyLine>,
    merge: MergeLine,
    text: String,
}

impl Run {
    fn dump(&self) -> String {
        format!(
            "{}\nnode 1:\n{}\nnode 2:\n{}",
            self.text,
            self.t1.dump(),
            self.t2.dump()
        )
    }
}

fn backend() -> String {
    format!("[{REMOTE_BACKEND6}]:{REMOTE_PORT6}")
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let _lab = LabGuard::two_nodes_dual_stack();
        let node1 = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
        let ip = REMOTE_BACKEND6.to_string();
        let node2 = Pktrace::start_in(NODE2_NS, &["--pod-ip", &ip, "--follow"]);
        for _ in 0..CONNECTIONS {
            tcp_request(&UBUNTU.netns(), &backend())
                .unwrap_or_else(|e| panic!("tcp to {}: {e:#}", backend()));
        }
        let (t1, t2) = (node1.stop(), node2.stop());
        let (merged, merge, text) = merge(&t1, &t2);
        Run {
            t1,
            t2,
            log: server_log6(),
            merged,
            merge,
            text,
        }
    })
}

fn on<'a>(journey: &'a JourneyLine, node: &str) -> Vec<&'a StepLine> {
    journey
        .steps
        .iter()
        .filter(|s| s.node.as_deref() == Some(node))
        .collect()
}

fn point(step: &StepLine) -> (Point, String) {
    let iface = step.iface.clone().flatten();
    (step.point, iface.unwrap_or_else(|| "-".into()))
}

/// The journeys of `trace` that start from `src_ip` to `dst_ip` (any ports).
fn from_to<'a>(trace: &'a Trace, src_ip: &str, dst_ip: &str) -> Vec<&'a JourneyLine> {
    let (s, d) = (format!("[{src_ip}]:"), format!("[{dst_ip}]:"));
    trace
        .journeys()
        .into_iter()
        .filter(|j| j.steps[0].src.starts_with(&s) && j.steps[0].dst.starts_with(&d))
        .collect()
}

/// Checks one merged journey crossing from `first` to `second`: its hops on each node, one
/// `wire_hash` on every step and no IP id, no NAT step, the wire delay on the crossing.
fn check_crossing(j: &JourneyLine, first: (&str, &str), second: (&str, &str)) {
    assert_eq!(
        j.nodes,
        Some(vec![first.0.to_owned(), second.0.to_owned()]),
        "{j:?}"
    );
    let (a, b) = (on(j, first.0), on(j, second.0));
    assert_eq!(point(a[0]), (Point::Ingress, first.1.to_owned()), "{j:?}");
    assert_eq!(
        point(a[a.len() - 1]),
        (Point::Egress, UPLINK.to_owned()),
        "{j:?}"
    );
    assert_eq!(point(b[0]), (Point::Ingress, UPLINK.to_owned()), "{j:?}");
    assert_eq!(
        point(b[b.len() - 1]),
        (Point::Egress, second.1.to_owned()),
        "{j:?}"
    );
    assert!(b[0].wire_ns.is_some(), "{j:?}");
    let hash = j.steps[0].wire_hash;
    assert!(hash.is_some(), "{j:?}");
    for s in &j.steps {
        assert_eq!((s.wire_hash, s.ip_id), (hash, None), "{j:?}");
        assert!(!s.point.is_nat(), "no NAT between the nodes: {j:?}");
    }
}

#[test]
fn two_node_ipv6_traces_end_cleanly_and_the_backend_saw_the_pod() {
    let r = run();
    for t in [&r.t1, &r.t2] {
        assert!(t.status.success(), "{}", r.dump());
        assert_eq!(t.summary().lost_events, 0, "{}", r.dump());
    }
    let client = format!("client=[{}]:", pod_ip6(&UBUNTU));
    assert_eq!(r.log.lines().count(), CONNECTIONS, "{}", r.log);
    assert!(r.log.lines().all(|l| l.contains(&client)), "{}", r.log);
}

#[test]
fn two_node_ipv6_requests_and_replies_merge_by_wire_hash() {
    let r = run();
    let (me, them) = (pod_ip6(&UBUNTU).to_string(), REMOTE_BACKEND6.to_string());
    let requests1 = from_to(&r.t1, &me, &them);
    let replies2 = from_to(&r.t2, &them, &me);
    assert!(requests1.len() >= 3 * CONNECTIONS, "{}", r.dump());
    assert!(replies2.len() >= 2 * CONNECTIONS, "{}", r.dump());
    let starts = |node: &str, iface: &str| -> Vec<&JourneyLine> {
        r.merged
            .iter()
            .filter(|j| {
                j.steps[0].node.as_deref() == Some(node)
                    && j.steps[0].iface.clone().flatten().as_deref() == Some(iface)
            })
            .collect()
    };
    let requests = starts("node1", UBUNTU.host_if);
    let replies = starts("node2", REMOTE_BACKEND.host_if);
    assert_eq!(requests.len(), requests1.len(), "{}", r.dump());
    assert_eq!(replies.len(), replies2.len(), "{}", r.dump());
    for j in &requests {
        check_crossing(
            j,
            ("node1", UBUNTU.host_if),
            ("node2", REMOTE_BACKEND.host_if),
        );
    }
    for j in &replies {
        check_crossing(
            j,
            ("node2", REMOTE_BACKEND.host_if),
            ("node1", UBUNTU.host_if),
        );
    }
    let cross = requests.len() + replies.len();
    assert_eq!(r.merge.cross_node, cross as u64, "{:?}", r.merge);
    eprintln!(
        "two_node_ipv6: {} requests and {} replies merged across nodes by wire_hash \
         ({} journeys in, {} out)",
        requests.len(),
        replies.len(),
        r.merge.journeys_in,
        r.merge.journeys_out
    );
}

/// One kernel, one clock: the offset estimated from the IPv6 packets must be within its own
/// error bound of zero.
#[test]
fn two_node_ipv6_clock_offset_is_within_its_error_bound_of_zero() {
    let merge = &run().merge;
    let node2 = merge
        .nodes
        .iter()
        .find(|n| n.node == "node2")
        .unwrap_or_else(|| panic!("{merge:?}"));
    assert_eq!(node2.clock, "two-way", "{merge:?}");
    let error = node2.error_ns.unwrap_or_else(|| panic!("{merge:?}"));
    assert!(node2.offset_ns.abs() <= error, "{merge:?}");
    eprintln!(
        "two_node_ipv6: node 2 clock offset {} ns ± {error} ns (true offset 0: one kernel)",
        node2.offset_ns
    );
}
