//! `pktrace merge` on synthetic JSON lines: pod A on node `a` talks through a ClusterIP to pod
//! B on node `b`, whose clock is far ahead of `a`'s.

use std::path::Path;

use super::{
    MergeError, Options,
    input::{self, NodeInput, NodeJourney},
    merge, run,
};
use crate::output::json::contract::{
    Ending, JourneyLine, Line, MergeLine, Point,
    Point::{Dnat, Egress, Ingress},
    StepLine,
};

const POD_A: &str = "10.13.76.46:41234";
const POD_B: &str = "10.13.77.26:80";
const VIP: &str = "10.0.159.58:80";
/// b's clock minus a's.
const THETA: i64 = 5_000_000_000_123;
const US: i64 = 1_000;

/// One journey line: `steps` are (point, iface or NAT origin, src, dst, `t_ns`).
fn journey(start: i64, ip_id: u32, steps: &[(Point, &str, &str, &str, i64)]) -> String {
    let steps = steps
        .iter()
        .map(|&(point, iface, src, dst, t)| {
            let mut s = StepLine::new(point, src.into(), dst.into(), u64::try_from(t).unwrap());
            s.ip_id = Some(ip_id);
            if point.is_nat() {
                s.orig_dst = Some(iface.into());
                s.rule = Some("KUBE-SEP-X".into());
            } else {
                s.iface = Some(Some(iface.into()));
            }
            s
        })
        .collect();
    let line = Line::Journey(JourneyLine {
        proto: "tcp".into(),
        pod: "default/ubuntu".into(),
        svc: None,
        nodes: None,
        steps,
        ending: Some(Ending::Left),
        class: None,
        transit_ns: Some(0),
        start_ktime_ns: Some(u64::try_from(start).unwrap()),
    });
    serde_json::to_string(&line).unwrap()
}

/// Node a sends a request at `t` (a's clock) that arrives at b after `delay`; returns the two
/// journeys (a's, b's).
fn request(t: i64, delay: i64, ip_id: u32) -> (String, String) {
    let a = journey(
        t,
        ip_id,
        &[
            (Ingress, "azv47c3ee9d512", POD_A, VIP, 0),
            (Dnat, VIP, POD_A, POD_B, 3 * US),
            (Egress, "eth0", POD_A, POD_B, 10 * US),
        ],
    );
    let b = journey(
        t + 10 * US + delay + THETA,
        ip_id,
        &[
            (Ingress, "eth0", POD_A, POD_B, 0),
            (Egress, "azvb0b0b0b0b0b", POD_A, POD_B, 4 * US),
        ],
    );
    (a, b)
}

/// Node b answers at `t` (a's clock) and the answer reaches a after `delay`: (a's, b's).
fn reply(t: i64, delay: i64, ip_id: u32) -> (String, String) {
    let b = journey(
        t + THETA,
        ip_id,
        &[
            (Ingress, "azvb0b0b0b0b0b", POD_B, POD_A, 0),
            (Egress, "eth0", POD_B, POD_A, 5 * US),
        ],
    );
    let a = journey(
        t + 5 * US + delay,
        ip_id,
        &[
            (Ingress, "eth0", POD_B, POD_A, 0),
            (Dnat, POD_B, VIP, POD_A, 2 * US),
            (Egress, "azv47c3ee9d512", VIP, POD_A, 6 * US),
        ],
    );
    (a, b)
}

fn parse(node: usize, lines: &[String]) -> Vec<NodeJourney> {
    input::parse(node, Path::new("x"), lines.join("\n").as_bytes()).unwrap()
}

fn inputs(names: &[&str]) -> Vec<NodeInput> {
    names
        .iter()
        .map(|n| NodeInput::parse(&format!("{n}.jsonl")))
        .collect()
}

/// Merges per-node lines with the defaults (`eth0`, 1 s).
#[expect(
    clippy::cast_possible_truncation,
    reason = "a letter per node; the tests merge a few nodes"
)]
pub(super) fn merged(per_node: &[Vec<String>]) -> (Vec<JourneyLine>, MergeLine) {
    let names: Vec<String> = (0..per_node.len())
        .map(|i| ((b'a' + i as u8) as char).to_string())
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let journeys: Vec<NodeJourney> = per_node
        .iter()
        .enumerate()
        .flat_map(|(i, lines)| parse(i, lines))
        .collect();
    let mut out = merge(&inputs(&names), &journeys, &["eth0".into()], 1_000_000_000);
    let Some(Line::Merge(last)) = out.pop() else {
        panic!("the merge line comes last")
    };
    let journeys = out
        .into_iter()
        .map(|l| match l {
            Line::Journey(j) => j,
            other => panic!("not a journey: {other:?}"),
        })
        .collect();
    (journeys, last)
}

pub(super) fn nodes_of(j: &JourneyLine) -> Vec<&str> {
    j.steps.iter().map(|s| s.node.as_deref().unwrap()).collect()
}

pub(super) fn check_times(j: &JourneyLine) {
    let t: Vec<u64> = j.steps.iter().map(|s| s.t_ns).collect();
    assert_eq!(t[0], 0, "{j:?}");
    assert!(
        t.windows(2).all(|w| w[0] <= w[1]),
        "steps out of order: {j:?}"
    );
}

fn wire(j: &JourneyLine, step: usize) -> Option<i64> {
    j.steps[step].wire_ns
}

#[test]
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "`k` counts a few rounds up from 0"
)]
fn request_and_reply_cross_nodes_and_align_the_clocks_two_way() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    // Three round trips; wire delays a→b 40..48 µs, b→a 60..64 µs (asymmetric paths).
    for k in 0..3 {
        let t = 1_000_000 + k * 1_000 * US;
        let (ra, rb) = request(t, (40 + 4 * k) * US, 100 + k as u32);
        let (pa, pb) = reply(t + 200 * US, (60 + 2 * k) * US, 900 + k as u32);
        a.extend([ra, pa]);
        b.extend([rb, pb]);
    }
    // Something b saw that never crossed.
    b.push(journey(
        THETA + 900_000_000,
        7,
        &[(Ingress, "azvb0b0b0b0b0b", POD_B, "10.13.77.5:53", 0)],
    ));
    let (journeys, summary) = merged(&[a, b]);

    assert_eq!(journeys.len(), 7, "{journeys:#?}");
    assert_eq!((summary.cross_node, summary.links), (6, 6));
    // θ' = (d_ab − d_ba)/2 with the smallest of each: (θ+40 − (−θ+60))/2 = θ − 10 µs, ±50 µs.
    let b_clock = &summary.nodes[1];
    assert_eq!(b_clock.clock, "two-way", "{summary:?}");
    assert_eq!(b_clock.reference, "a");
    assert_eq!(b_clock.offset_ns, THETA - 10 * US);
    assert_eq!(b_clock.error_ns, Some(50 * US));
    assert_eq!(summary.nodes[0].clock, "reference");

    let first = &journeys[0];
    assert_eq!(nodes_of(first), ["a", "a", "a", "b", "b"], "{first:?}");
    assert_eq!(first.nodes, Some(vec!["a".into(), "b".into()]));
    check_times(first);
    let steps = &first.steps;
    // Aligned: b's ingress is 40 µs (+10 µs of estimate error) after a's egress.
    assert_eq!(steps[3].wire_ns, Some(50 * US));
    assert_eq!(steps[3].t_ns, 60_000);
    assert_eq!(steps[4].t_ns, 64_000);
    assert_eq!(
        steps[1].rule.as_deref(),
        Some("KUBE-SEP-X"),
        "fields of the steps are kept"
    );
    assert_eq!(
        (first.proto.as_str(), first.pod.as_str()),
        ("tcp", "default/ubuntu")
    );

    let back = &journeys[1];
    assert_eq!(nodes_of(back), ["b", "b", "a", "a", "a"], "{back:?}");
    check_times(back);
    assert_eq!(
        wire(back, 2),
        Some(50 * US),
        "60 µs − 10 µs of estimate error"
    );
    for j in &journeys {
        check_times(j);
    }
    let lonely: Vec<&JourneyLine> = journeys
        .iter()
        .filter(|j| j.nodes == Some(vec!["b".into()]))
        .collect();
    assert_eq!(lonely.len(), 1);
}

#[test]
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "`k` counts a few rounds up from 0"
)]
fn one_way_traffic_aligns_as_an_upper_bound() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for k in 0..4 {
        let (ra, rb) = request(2_000_000 + k * 500 * US, (30 + k) * US, 10 + k as u32);
        a.push(ra);
        b.push(rb);
    }
    let (journeys, summary) = merged(&[a, b]);
    assert_eq!(summary.nodes[1].clock, "one-way");
    assert_eq!(summary.nodes[1].offset_ns, THETA + 30 * US);
    assert!(summary.nodes[1].error_ns.is_none());
    assert_eq!(journeys.len(), 4);
    for j in &journeys {
        assert_eq!(j.nodes, Some(vec!["a".into(), "b".into()]));
        check_times(j);
    }
    assert_eq!(
        wire(&journeys[0], 3),
        Some(0),
        "the fastest packet defines zero"
    );
    assert_eq!(wire(&journeys[3], 3), Some(3 * US));
}

#[test]
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "`k` counts a few rounds up from 0"
)]
fn a_reused_ip_id_is_told_apart_by_time_once_clocks_are_aligned() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for k in 0..3 {
        let (ra, rb) = request(1_000_000 + k * 1_000 * US, 40 * US, 100 + k as u32);
        let (pa, pb) = reply(1_100_000 + k * 1_000 * US, 60 * US, 900 + k as u32);
        a.extend([ra, pa]);
        b.extend([rb, pb]);
    }
    // The same wire packet (same tuple, IP id 4242) twice, 300 ms apart: four candidates,
    // none usable for the clocks, two right links.
    for t in [50_000_000, 350_000_000] {
        let (ra, rb) = request(t, 45 * US, 4242);
        a.push(ra);
        b.push(rb);
    }
    let (journeys, summary) = merged(&[a, b]);
    assert_eq!(summary.candidates, 6 + 4);
    assert_eq!(summary.links, 8);
    let dup: Vec<&JourneyLine> = journeys
        .iter()
        .filter(|j| j.steps[0].ip_id == Some(4242))
        .collect();
    assert_eq!(dup.len(), 2);
    for j in dup {
        assert_eq!(j.nodes, Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            wire(j, 3),
            Some(55 * US),
            "45 µs + 10 µs of estimate error: {j:?}"
        );
    }
}

#[test]
#[expect(clippy::cast_possible_truncation, reason = "`k` counts a few packets")]
fn a_third_node_is_aligned_through_the_second() {
    // Behind a's, but not so far that c's monotonic clock would read below zero.
    let c_theta = -1_500_000;
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (ra, rb) = request(1_000_000, 40 * US, 1);
    let (pa, pb) = reply(1_300_000, 40 * US, 2);
    a.extend([ra, pa]);
    b.extend([rb, pb]);
    // b ↔ c, 20 µs each way: b's egress at b-time, c's ingress at c-time.
    let pod_c = "10.13.78.9:8080";
    for (k, (from_b, t)) in [(true, 2_000_000_i64), (false, 2_500_000)]
        .into_iter()
        .enumerate()
    {
        let ip_id = 50 + k as u32;
        let (src, dst) = if from_b {
            (POD_B, pod_c)
        } else {
            (pod_c, POD_B)
        };
        let (send, recv) = if from_b {
            (THETA, c_theta)
        } else {
            (c_theta, THETA)
        };
        let send_line = journey(t + send, ip_id, &[(Egress, "eth0", src, dst, 0)]);
        let recv_line = journey(t + 20 * US + recv, ip_id, &[(Ingress, "eth0", src, dst, 0)]);
        if from_b {
            b.push(send_line);
            c.push(recv_line);
        } else {
            c.push(send_line);
            b.push(recv_line);
        }
    }
    let (_, summary) = merged(&[a, b, c]);
    let node_c = &summary.nodes[2];
    assert_eq!(
        (node_c.reference.as_str(), node_c.via.as_deref()),
        ("a", Some("b")),
        "{summary:?}"
    );
    assert_eq!(
        node_c.offset_ns, c_theta,
        "exact: both b↔c paths are 20 µs, a↔b 40 µs"
    );
    assert_eq!(node_c.clock, "two-way");
    assert_eq!(node_c.error_ns, Some(40 * US + 20 * US));
}

#[test]
fn nodes_without_links_keep_their_own_clock() {
    let (ra, _) = request(1_000_000, 40 * US, 1);
    let (_, pb) = reply(1_300_000, 40 * US, 2);
    let (journeys, summary) = merged(&[vec![ra], vec![pb]]);
    assert_eq!(summary.links, 0);
    assert_eq!(summary.nodes[1].reference, "b");
    assert_eq!(summary.nodes[1].clock, "reference");
    assert_eq!(journeys.len(), 2);
    assert!(
        journeys
            .iter()
            .all(|j| j.nodes.as_ref().map(Vec::len) == Some(1))
    );
}

#[test]
fn input_names_and_errors() {
    assert_eq!(
        NodeInput::parse("aks-1=/tmp/x=y.jsonl"),
        NodeInput {
            node: "aks-1".into(),
            path: "/tmp/x=y.jsonl".into()
        }
    );
    assert_eq!(
        NodeInput::parse("/var/tmp/aks-node-2.jsonl").node,
        "aks-node-2"
    );
    assert_eq!(
        NodeInput::parse("./a=b/c.jsonl").node,
        "c",
        "a '/' before '=' is a path"
    );

    let ok = format!(
        "{}\n\n{{\"type\":\"loss\",\"lost\":1,\"lost_total\":1}}\n{{\"type\":\"summary\",\"journeys\":1}}\n",
        request(1, 1, 1).0
    );
    assert_eq!(
        input::parse(0, Path::new("a"), ok.as_bytes())
            .unwrap()
            .len(),
        1
    );

    let cases = [
        (
            "{\"type\":\"journey\",\"proto\":\"tcp\",\"pod\":\"p\",\"steps\":[]}",
            "a:1: journey without start_ktime_ns",
        ),
        ("not json", "a:1: not JSON"),
        ("{\"type\":\"summary\"}\n[1]", "a:2: not a JSON object"),
        (
            "{\"type\":\"journey\",\"proto\":\"tcp\",\"pod\":\"p\",\"start_ktime_ns\":1}",
            "a:1: not a journey line of pktrace -o json (missing field `steps`",
        ),
    ];
    for (text, want) in cases {
        let err = input::parse(0, Path::new("a"), text.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with(want), "{text}: {err}");
        assert!(!err.is_usage());
    }
}

#[test]
fn run_reads_files_and_rejects_duplicate_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ra, rb) = request(1_000_000, 40 * US, 1);
    let (pa, pb) = reply(1_300_000, 60 * US, 2);
    let (fa, fb) = (dir.join("node-a.jsonl"), dir.join("node-b.jsonl"));
    std::fs::write(&fa, format!("{ra}\n{pa}\n")).unwrap();
    std::fs::write(&fb, format!("{rb}\n{pb}\n")).unwrap();
    let args = |inputs: Vec<String>| Options {
        inputs,
        uplinks: vec!["eth*".into()],
        max_delay: std::time::Duration::from_secs(1),
    };
    let mut out = Vec::new();
    run(
        &args(vec![fa.display().to_string(), fb.display().to_string()]),
        &mut out,
    )
    .unwrap();
    let lines: Vec<Line> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| Line::parse(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let (Line::Journey(first), Line::Merge(last)) = (&lines[0], &lines[2]) else {
        panic!("{lines:?}")
    };
    assert_eq!(first.nodes, Some(vec!["node-a".into(), "node-b".into()]));
    assert_eq!(last.nodes[1].file, fb.display().to_string());

    let err = run(
        &args(vec![
            format!("x={}", fa.display()),
            format!("x={}", fb.display()),
        ]),
        &mut Vec::new(),
    )
    .unwrap_err();
    assert!(
        matches!(err, MergeError::DuplicateNode(ref n) if n == "x"),
        "{err}"
    );
    assert!(err.is_usage());
    let err = run(
        &args(vec![dir.join("missing.jsonl").display().to_string()]),
        &mut Vec::new(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("missing.jsonl"), "{err}");
}

/// What pktrace's own JSON sink writes, loss and summary lines included, is what merge reads.
#[test]
fn merge_reads_lines_written_by_the_json_sink() {
    use tracer_common::PROTO_TCP;

    use crate::{
        config::Format,
        journey::{Journey, Step},
        output::test_support::{Shared, nat, t, tc},
        summary::Summary,
    };

    let pre = t(PROTO_TCP, POD_A, VIP);
    let post = t(PROTO_TCP, POD_A, POD_B);
    let with_id = |mut steps: Vec<Step>| {
        for s in &mut steps {
            s.wire_id = Some(77);
        }
        Journey {
            steps,
            ending: Ending::Left,
        }
    };
    let on_a = with_id(vec![
        tc(Ingress, "azv47c3ee9d512", pre, 1_000_000),
        nat(Dnat, pre, post, 1_003_000, Some(2_000)),
        tc(Egress, "eth0", post, 1_010_000),
    ]);
    let b_start = 1_050_000 + THETA.unsigned_abs();
    let on_b = with_id(vec![
        tc(Ingress, "eth0", post, b_start),
        tc(Egress, "azvb0b0b0b0b0b", post, b_start + 4_000),
    ]);
    let written = |j: &Journey| {
        let out = Shared::default();
        let mut sink = crate::output::sink(
            Format::Json,
            false,
            "default/ubuntu".into(),
            Box::new(out.clone()),
        );
        sink.loss(1, 1).unwrap();
        sink.journey(j).unwrap();
        sink.summary(&Summary::new()).unwrap();
        drop(sink);
        out.text()
    };
    let read = |node, j: &Journey| input::parse(node, Path::new("x"), written(j).as_bytes());
    let (a, b) = (read(0, &on_a).unwrap(), read(1, &on_b).unwrap());
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_eq!(a[0].start_ns, 1_000_000);
    assert_eq!(a[0].time_of(2), 1_010_000);
    let journeys = [a, b].concat();
    let mut out = merge(
        &inputs(&["a", "b"]),
        &journeys,
        &["eth0".into()],
        1_000_000_000,
    );
    let Some(Line::Merge(summary)) = out.pop() else {
        panic!("the merge line comes last")
    };
    assert_eq!((summary.links, summary.cross_node), (1, 1));
    let [Line::Journey(j)] = out.as_slice() else {
        panic!("one journey across both nodes: {out:?}")
    };
    assert_eq!(nodes_of(j), ["a", "a", "a", "b", "b"]);
    assert_eq!(j.steps[1].point, Dnat);
    assert_eq!(j.steps[1].latency_ns, Some(Some(2_000)));
    assert_eq!(j.steps[1].orig_dst.as_deref(), Some(VIP));
    assert_eq!(j.steps[3].iface, Some(Some("eth0".into())));
    assert_eq!(j.ending, Some(Ending::Left));
    check_times(j);
}
