//! Issue 7, cross-node journeys: two lab nodes (`pkt-node`, `pkt-node2`) in separate
//! namespaces joined by the simulated VNet (`pkt-vnet`). pktrace runs on each node at once;
//! pod ubuntu on node 1 connects to the ClusterIP of default/whereami-remote, whose only
//! endpoint is a pod on node 2. `pktrace merge` must give one journey per packet: node 1's
//! hops (pod veth in, the DNAT by the KUBE-SEP rule, out of eth0) then node 2's (in on eth0,
//! out of the backend's veth), each NAT step on the node where it happened; replies too.

use std::sync::OnceLock;

use tests::{
    LabGuard,
    merge::merge,
    trace::{Pktrace, Trace},
};
use tracer_user::output::json::contract::{JourneyLine, MergeLine, Point, StepLine};
use xtask::lab::{
    self, UBUNTU,
    node2::{NODE2_NS, REMOTE_BACKEND, REMOTE_CLUSTER_IP, REMOTE_SEP_CHAIN},
};

/// Connections the test makes (each several packets each way).
const CONNECTIONS: usize = 5;
const UPLINK: &str = "eth0";

/// Steps of a merged journey that happened on `node`.
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

fn nat_steps(journey: &JourneyLine) -> Vec<&StepLine> {
    journey.steps.iter().filter(|s| s.point.is_nat()).collect()
}

fn first_iface(journey: &JourneyLine) -> Option<&str> {
    journey.steps[0].iface.as_ref()?.as_deref()
}

#[expect(
    clippy::unnecessary_wraps,
    reason = "test helper: builds the `Option` the journeys' `nodes` field is compared with"
)]
fn nodes(names: &[&str]) -> Option<Vec<String>> {
    Some(names.iter().map(|&n| n.to_owned()).collect())
}

/// What one run of the scenario left: both nodes' traces, the backend's log, and `pktrace
/// merge`'s output. The lab is down again once it is built.
struct Run {
    t1: Trace,
    t2: Trace,
    /// What the client read back, one line per connection.
    seen: Vec<String>,
    /// The backend's server log.
    log: String,
    merged: Vec<JourneyLine>,
    merge: MergeLine,
    /// `pktrace merge`'s stdout.
    text: String,
}

/// The scenario, run once for the tests of this file (they run one at a time; each also runs
/// alone).
fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(trace_both_nodes)
}

fn trace_both_nodes() -> Run {
    let _lab = LabGuard::two_nodes();
    let backend = REMOTE_BACKEND.ip.to_string();
    let node1 = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    // Node 2 has no state file: its backend is traced by address.
    let node2 = Pktrace::start_in(NODE2_NS, &["--pod-ip", &backend, "--follow"]);
    let mut seen = Vec::new();
    for _ in 0..CONNECTIONS {
        let reply = lab::client_tcp(&UBUNTU.netns(), REMOTE_CLUSTER_IP)
            .unwrap_or_else(|e| panic!("tcp to {REMOTE_CLUSTER_IP}: {e:#}"));
        seen.push(reply);
    }
    let t1 = node1.stop();
    let t2 = node2.stop();
    let log = lab::server_log(&REMOTE_BACKEND.netns());
    let (merged, merge, text) = merge(&t1, &t2);
    Run {
        t1,
        t2,
        seen,
        log,
        merged,
        merge,
        text,
    }
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

    /// Node 1's own journeys of requests (sent to the ClusterIP).
    fn requests1(&self) -> Vec<&JourneyLine> {
        let vip = REMOTE_CLUSTER_IP.to_string();
        self.t1
            .journeys()
            .into_iter()
            .filter(|j| j.steps[0].dst == vip)
            .collect()
    }

    /// Node 2's own journeys of replies (in from the backend's veth).
    fn replies2(&self) -> Vec<&JourneyLine> {
        self.t2
            .journeys()
            .into_iter()
            .filter(|j| first_iface(j) == Some(REMOTE_BACKEND.host_if))
            .collect()
    }

    /// Merged journeys of requests: first seen on node 1, to the ClusterIP.
    fn requests(&self) -> Vec<&JourneyLine> {
        let vip = REMOTE_CLUSTER_IP.to_string();
        self.merged
            .iter()
            .filter(|j| j.steps[0].node.as_deref() == Some("node1") && j.steps[0].dst == vip)
            .collect()
    }

    /// Merged journeys of replies: first seen on node 2, in from the backend's veth.
    fn replies(&self) -> Vec<&JourneyLine> {
        self.merged
            .iter()
            .filter(|j| {
                j.steps[0].node.as_deref() == Some("node2")
                    && first_iface(j) == Some(REMOTE_BACKEND.host_if)
            })
            .collect()
    }
}

#[test]
fn two_node_traces_end_cleanly_without_loss() {
    let r = run();
    assert!(r.t1.status.success(), "node 1:\n{}", r.t1.dump());
    assert!(r.t2.status.success(), "node 2:\n{}", r.t2.dump());
    assert_eq!(r.t1.summary().lost_events, 0, "{}", r.t1.dump());
    assert_eq!(r.t2.summary().lost_events, 0, "{}", r.t2.dump());
}

/// The backend on node 2 saw the client pod's own address: no SNAT anywhere.
#[test]
fn two_node_backend_sees_the_client_pod_address() {
    let r = run();
    let client = UBUNTU.ip.to_string();
    assert_eq!(r.log.lines().count(), CONNECTIONS, "{}", r.log);
    for (reply, line) in r.seen.iter().zip(r.log.lines()) {
        assert!(reply.starts_with(&format!("client={client}:")), "{reply}");
        assert!(line.contains(&reply["client=".len()..]), "{line} / {reply}");
    }
}

/// What each node saw on its own: node 1 sends requests out of eth0, node 2 takes them in.
#[test]
fn two_node_each_node_traces_its_half() {
    let r = run();
    assert!(
        r.requests1().len() >= 3 * CONNECTIONS,
        "SYN, ACK, FIN at least per connection\n{}",
        r.t1.dump()
    );
    assert!(r.replies2().len() >= 2 * CONNECTIONS, "{}", r.t2.dump());
}

/// Requests: every one node 1 traced is one journey over both nodes.
#[test]
fn two_node_requests_merge_into_one_journey_over_both_nodes() {
    let r = run();
    let (requests, requests1) = (r.requests(), r.requests1());
    assert_eq!(requests.len(), requests1.len(), "{}", r.dump());
    for j in &requests {
        assert_eq!(j.nodes, nodes(&["node1", "node2"]), "{j:?}");
        let (n1, n2) = (on(j, "node1"), on(j, "node2"));
        assert_eq!(
            point(n1[0]),
            (Point::Ingress, UBUNTU.host_if.into()),
            "{j:?}"
        );
        assert_eq!(
            point(n1.last().unwrap()),
            (Point::Egress, UPLINK.into()),
            "{j:?}"
        );
        assert_eq!(point(n2[0]), (Point::Ingress, UPLINK.into()), "{j:?}");
        assert_eq!(
            point(n2.last().unwrap()),
            (Point::Egress, REMOTE_BACKEND.host_if.into()),
            "{j:?}"
        );
    }
}

/// A merged request's one NAT step: the DNAT on node 1, by the service's endpoint rule; none on
/// node 2.
#[test]
fn two_node_requests_are_dnatted_on_node_one_only() {
    let r = run();
    let (vip, backend) = (REMOTE_CLUSTER_IP.to_string(), REMOTE_BACKEND.ip.to_string());
    let requests = r.requests();
    assert!(!requests.is_empty(), "{}", r.dump());
    for j in &requests {
        let nat = nat_steps(j);
        assert_eq!(nat.len(), 1, "{j:?}");
        assert_eq!(nat[0].point, Point::Dnat, "{j:?}");
        assert_eq!(nat[0].node.as_deref(), Some("node1"), "{j:?}");
        assert_eq!(nat[0].orig_dst.as_deref(), Some(vip.as_str()), "{j:?}");
        assert!(nat[0].dst.starts_with(&format!("{backend}:")), "{j:?}");
        if let Some(rule) = &nat[0].rule {
            assert_eq!(rule, REMOTE_SEP_CHAIN, "{j:?}");
        }
    }
}

/// On the wire: the client pod's own address to the pod, as node 2 received it, the same IP id
/// as node 1 sent, and the wire delay on node 2's first step.
#[test]
fn two_node_requests_cross_the_wire_as_node_one_sent_them() {
    let r = run();
    let client = UBUNTU.ip.to_string();
    let requests = r.requests();
    assert!(!requests.is_empty(), "{}", r.dump());
    for j in &requests {
        let (n1, n2) = (on(j, "node1"), on(j, "node2"));
        assert!(n2[0].src.starts_with(&format!("{client}:")), "{j:?}");
        assert!(n2[0].wire_ns.is_some(), "{j:?}");
        assert_eq!(n1.last().unwrap().ip_id, n2[0].ip_id, "{j:?}");
    }
}

/// Replies: node 2's pod veth → node 2's eth0 → node 1's eth0 → the un-DNAT on node 1 →
/// ubuntu's veth.
#[test]
fn two_node_replies_merge_into_one_journey_back() {
    let r = run();
    let vip = REMOTE_CLUSTER_IP.to_string();
    let (replies, replies2) = (r.replies(), r.replies2());
    assert_eq!(replies.len(), replies2.len(), "{}", r.dump());
    for j in &replies {
        assert_eq!(j.nodes, nodes(&["node2", "node1"]), "{j:?}");
        let (n2, n1) = (on(j, "node2"), on(j, "node1"));
        assert_eq!(
            point(n2.last().unwrap()),
            (Point::Egress, UPLINK.into()),
            "{j:?}"
        );
        assert_eq!(point(n1[0]), (Point::Ingress, UPLINK.into()), "{j:?}");
        assert_eq!(
            point(n1.last().unwrap()),
            (Point::Egress, UBUNTU.host_if.into()),
            "{j:?}"
        );
        let nat = nat_steps(j);
        assert_eq!(nat.len(), 1, "{j:?}");
        assert_eq!(
            (nat[0].point, nat[0].reply, nat[0].node.as_deref()),
            (Point::Dnat, Some(true), Some("node1")),
            "{j:?}"
        );
        assert!(
            n1.last().unwrap().src == vip,
            "the reply leaves as the ClusterIP: {j:?}"
        );
    }
}

/// No SNAT anywhere, and the merge line counts what came in and what crossed nodes.
#[test]
fn two_node_merge_counts_cross_node_journeys_and_no_snat() {
    let r = run();
    let merge = &r.merge;
    assert!(
        r.merged
            .iter()
            .all(|j| nat_steps(j).iter().all(|s| s.point != Point::Snat)),
        "{}",
        r.dump()
    );
    let (requests, replies) = (r.requests(), r.replies());
    let cross = requests.len() + replies.len();
    assert_eq!(merge.cross_node, cross as u64, "{merge:?}");
    assert_eq!(
        merge.journeys_in,
        (r.t1.journeys().len() + r.t2.journeys().len()) as u64,
        "{merge:?}"
    );
    eprintln!(
        "two_node: {} of {} node-1 requests and {} of {} node-2 replies merged across nodes \
         ({} journeys in, {} out)",
        requests.len(),
        r.requests1().len(),
        replies.len(),
        r.replies2().len(),
        merge.journeys_in,
        merge.journeys_out,
    );
}

/// One kernel, one clock: the offset estimated from the packets must be within its own error
/// bound of zero (two-way: requests one way, replies the other).
#[test]
fn two_node_clock_offset_is_within_its_error_bound_of_zero() {
    let merge = &run().merge;
    let node2_clock = merge
        .nodes
        .iter()
        .find(|n| n.node == "node2")
        .unwrap_or_else(|| panic!("{merge:?}"));
    assert_eq!(node2_clock.clock, "two-way", "{merge:?}");
    let offset = node2_clock.offset_ns;
    let error = node2_clock.error_ns.unwrap_or_else(|| panic!("{merge:?}"));
    assert!(
        offset.abs() <= error,
        "offset {offset} ns beyond its bound {error} ns: {merge:?}"
    );
    eprintln!("two_node: node 2 clock offset {offset} ns ± {error} ns (true offset 0: one kernel)");
}
