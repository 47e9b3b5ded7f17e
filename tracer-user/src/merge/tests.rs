//! `pktrace merge` on synthetic JSON lines: pod A on node `a` talks through a ClusterIP to pod
//! B on node `b`, whose clock is far ahead of `a`'s.

use std::path::Path;

use serde_json::{Value, json};

use super::{
    MergeArgs, MergeError,
    input::{self, NodeInput, NodeJourney},
    merge, run,
};

const POD_A: &str = "10.13.76.46:41234";
const POD_B: &str = "10.13.77.26:80";
const VIP: &str = "10.0.159.58:80";
/// b's clock minus a's.
const THETA: i64 = 5_000_000_000_123;
const US: i64 = 1_000;

/// One journey line: `steps` are (point, iface or NAT origin, src, dst, t_ns).
fn journey(start: i64, ip_id: u32, steps: &[(&str, &str, &str, &str, i64)]) -> String {
    let steps: Vec<Value> = steps
        .iter()
        .map(|&(point, iface, src, dst, t)| {
            let mut s = json!({"point": point, "src": src, "dst": dst, "t_ns": t, "ip_id": ip_id});
            if point == "ingress" || point == "egress" {
                s["iface"] = iface.into();
            } else {
                s["orig_dst"] = iface.into();
                s["rule"] = "KUBE-SEP-X".into();
            }
            s
        })
        .collect();
    let line = json!({"type":"journey","proto":"tcp","pod":"default/ubuntu","steps":steps,
                      "ending":"left","transit_ns":0,"start_ktime_ns":start});
    line.to_string()
}

/// Node a sends a request at `t` (a's clock) that arrives at b after `delay`; returns the two
/// journeys (a's, b's).
fn request(t: i64, delay: i64, ip_id: u32) -> (String, String) {
    let a = journey(
        t,
        ip_id,
        &[
            ("ingress", "azv47c3ee9d512", POD_A, VIP, 0),
            ("dnat", VIP, POD_A, POD_B, 3 * US),
            ("egress", "eth0", POD_A, POD_B, 10 * US),
        ],
    );
    let b = journey(
        t + 10 * US + delay + THETA,
        ip_id,
        &[
            ("ingress", "eth0", POD_A, POD_B, 0),
            ("egress", "azvb0b0b0b0b0b", POD_A, POD_B, 4 * US),
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
            ("ingress", "azvb0b0b0b0b0b", POD_B, POD_A, 0),
            ("egress", "eth0", POD_B, POD_A, 5 * US),
        ],
    );
    let a = journey(
        t + 5 * US + delay,
        ip_id,
        &[
            ("ingress", "eth0", POD_B, POD_A, 0),
            ("dnat", POD_B, VIP, POD_A, 2 * US),
            ("egress", "azv47c3ee9d512", VIP, POD_A, 6 * US),
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
fn merged(per_node: &[Vec<String>]) -> (Vec<Value>, Value) {
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
    let last = out.pop().unwrap();
    assert_eq!(last["type"], "merge");
    (out, last)
}

fn nodes_of(j: &Value) -> Vec<&str> {
    j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap())
        .collect()
}

fn check_times(j: &Value) {
    let t: Vec<i64> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["t_ns"].as_i64().unwrap())
        .collect();
    assert_eq!(t[0], 0, "{j}");
    assert!(
        t.windows(2).all(|w| w[0] <= w[1]),
        "steps out of order: {j}"
    );
}

#[test]
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
        &[("ingress", "azvb0b0b0b0b0b", POD_B, "10.13.77.5:53", 0)],
    ));
    let (journeys, summary) = merged(&[a, b]);

    assert_eq!(journeys.len(), 7, "{journeys:#?}");
    assert_eq!(
        (summary["cross_node"].as_u64(), summary["links"].as_u64()),
        (Some(6), Some(6))
    );
    // θ' = (d_ab − d_ba)/2 with the smallest of each: (θ+40 − (−θ+60))/2 = θ − 10 µs, ±50 µs.
    let b_clock = &summary["nodes"][1];
    assert_eq!(b_clock["clock"], "two-way", "{summary}");
    assert_eq!(b_clock["reference"], "a");
    assert_eq!(b_clock["offset_ns"], THETA - 10 * US);
    assert_eq!(b_clock["error_ns"], 50 * US);
    assert_eq!(summary["nodes"][0]["clock"], "reference");

    let first = &journeys[0];
    assert_eq!(nodes_of(first), ["a", "a", "a", "b", "b"], "{first}");
    assert_eq!(first["nodes"], json!(["a", "b"]));
    check_times(first);
    let steps = first["steps"].as_array().unwrap();
    // Aligned: b's ingress is 40 µs (+10 µs of estimate error) after a's egress.
    assert_eq!(steps[3]["wire_ns"], 50 * US);
    assert_eq!(steps[3]["t_ns"], 60 * US);
    assert_eq!(steps[4]["t_ns"], 64 * US);
    assert_eq!(
        steps[1]["rule"], "KUBE-SEP-X",
        "fields of the steps are kept"
    );
    assert_eq!(
        (first["proto"].as_str(), first["pod"].as_str()),
        (Some("tcp"), Some("default/ubuntu"))
    );

    let back = &journeys[1];
    assert_eq!(nodes_of(back), ["b", "b", "a", "a", "a"], "{back}");
    check_times(back);
    assert_eq!(
        back["steps"][2]["wire_ns"],
        50 * US,
        "60 µs − 10 µs of estimate error"
    );
    for j in &journeys {
        check_times(j);
    }
    let lonely: Vec<&Value> = journeys
        .iter()
        .filter(|j| j["nodes"] == json!(["b"]))
        .collect();
    assert_eq!(lonely.len(), 1);
}

#[test]
fn one_way_traffic_aligns_as_an_upper_bound() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for k in 0..4 {
        let (ra, rb) = request(2_000_000 + k * 500 * US, (30 + k) * US, 10 + k as u32);
        a.push(ra);
        b.push(rb);
    }
    let (journeys, summary) = merged(&[a, b]);
    assert_eq!(summary["nodes"][1]["clock"], "one-way");
    assert_eq!(summary["nodes"][1]["offset_ns"], THETA + 30 * US);
    assert!(summary["nodes"][1].get("error_ns").is_none());
    assert_eq!(journeys.len(), 4);
    for j in &journeys {
        assert_eq!(j["nodes"], json!(["a", "b"]));
        check_times(j);
    }
    assert_eq!(
        journeys[0]["steps"][3]["wire_ns"], 0,
        "the fastest packet defines zero"
    );
    assert_eq!(journeys[3]["steps"][3]["wire_ns"], 3 * US);
}

#[test]
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
    assert_eq!(summary["candidates"], 6 + 4);
    assert_eq!(summary["links"], 8);
    let dup: Vec<&Value> = journeys
        .iter()
        .filter(|j| j["steps"][0]["ip_id"] == 4242)
        .collect();
    assert_eq!(dup.len(), 2);
    for j in dup {
        assert_eq!(j["nodes"], json!(["a", "b"]));
        assert_eq!(
            j["steps"][3]["wire_ns"],
            55 * US,
            "45 µs + 10 µs of estimate error: {j}"
        );
    }
}

#[test]
fn a_third_node_is_aligned_through_the_second() {
    let c_theta = -3_000_000_000;
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
        let out = journey(0, ip_id, &[("egress", "eth0", src, dst, 0)]);
        let inn = journey(0, ip_id, &[("ingress", "eth0", src, dst, 0)]);
        let (send, recv) = if from_b {
            (THETA, c_theta)
        } else {
            (c_theta, THETA)
        };
        let with_start = |line: String, start: i64| {
            line.replace(
                "\"start_ktime_ns\":0",
                &format!("\"start_ktime_ns\":{start}"),
            )
        };
        let (send_line, recv_line) = (
            with_start(out, t + send),
            with_start(inn, t + 20 * US + recv),
        );
        if from_b {
            b.push(send_line);
            c.push(recv_line);
        } else {
            c.push(send_line);
            b.push(recv_line);
        }
    }
    let (_, summary) = merged(&[a, b, c]);
    let node_c = &summary["nodes"][2];
    assert_eq!(
        (node_c["reference"].as_str(), node_c["via"].as_str()),
        (Some("a"), Some("b")),
        "{summary}"
    );
    assert_eq!(
        node_c["offset_ns"], c_theta,
        "exact: both b↔c paths are 20 µs, a↔b 40 µs"
    );
    assert_eq!(node_c["clock"], "two-way");
    assert_eq!(node_c["error_ns"], 40 * US + 20 * US);
}

#[test]
fn nodes_without_links_keep_their_own_clock() {
    let (ra, _) = request(1_000_000, 40 * US, 1);
    let (_, pb) = reply(1_300_000, 40 * US, 2);
    let (journeys, summary) = merged(&[vec![ra], vec![pb]]);
    assert_eq!(summary["links"], 0);
    assert_eq!(summary["nodes"][1]["reference"], "b");
    assert_eq!(summary["nodes"][1]["clock"], "reference");
    assert_eq!(journeys.len(), 2);
    assert!(
        journeys
            .iter()
            .all(|j| j["nodes"].as_array().unwrap().len() == 1)
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
            "{\"type\":\"journey\",\"steps\":[]}",
            "a:1: journey without start_ktime_ns",
        ),
        ("not json", "a:1: not JSON"),
        ("{\"type\":\"summary\"}\n[1]", "a:2: not a JSON object"),
        (
            "{\"type\":\"journey\",\"start_ktime_ns\":1}",
            "a:1: journey without a steps array",
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
    let args = |inputs: Vec<String>| MergeArgs {
        inputs,
        uplink: vec!["eth*".into()],
        max_delay: std::time::Duration::from_secs(1),
    };
    let mut out = Vec::new();
    run(
        &args(vec![fa.display().to_string(), fb.display().to_string()]),
        &mut out,
    )
    .unwrap();
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["nodes"], json!(["node-a", "node-b"]));
    assert_eq!(lines[2]["nodes"][1]["file"], fb.display().to_string());

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
