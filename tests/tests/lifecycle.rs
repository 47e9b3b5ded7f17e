//! Issue 2: many concurrent connections, SIGKILL leaves nothing behind, another program on
//! the same hook keeps seeing every packet, limits and errors behave.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{
    LabGuard, pktrace_bin,
    trace::{Pktrace, conntrack, nat_steps, shape, steps},
};
use xtask::lab::{self, NODE_NS, UBUNTU, in_ns};

const CONNECTIONS: usize = 50;

#[test]
fn fifty_concurrent_connections_are_neither_merged_nor_split() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let children: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            in_ns(&UBUNTU.netns(), xtask::xtask_exe().expect("xtask"), ["lab", "client", "--tcp", "10.0.159.58:80"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("client")
        })
        .collect();
    let mut seen = BTreeSet::new();
    for c in children {
        let out = c.wait_with_output().expect("client");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        seen.insert(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    assert_eq!(seen.len(), CONNECTIONS, "every connection got its own answer");
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());

    // Every connection to the ClusterIP, as conntrack knows them.
    let flows: Vec<_> = conntrack()
        .into_iter()
        .filter(|e| e.orig_src == "10.13.76.46" && e.orig_dst_ep() == "10.0.159.58:80")
        .collect();
    assert_eq!(flows.len(), CONNECTIONS, "conntrack entries");

    let mut syns_per_flow: BTreeMap<String, usize> = BTreeMap::new();
    for j in trace.journeys() {
        let first = &steps(j)[0];
        let src = first["src"].as_str().unwrap_or_default().to_owned();
        let Some(ct) = flows.iter().find(|e| e.orig_src_ep() == src && first["dst"] == "10.0.159.58:80") else {
            continue;
        };
        // Not merged: every step of the journey is this flow's packet (before or after DNAT).
        for s in steps(j) {
            assert_eq!(s["src"], ct.orig_src_ep().as_str(), "step of another flow in {j}");
        }
        // Not split: the whole path, once.
        let points: Vec<String> = shape(j).into_iter().map(|(p, i, _)| format!("{p}@{i}")).collect();
        assert_eq!(points.len(), 5, "{j}");
        assert_eq!(nat_steps(j).len(), 1, "{j}");
        *syns_per_flow.entry(src).or_default() += 1;
    }
    assert_eq!(syns_per_flow.len(), CONNECTIONS, "a complete journey for every connection\n{}", trace.dump());
    assert_eq!(trace.summary()["lost_events"], 0);
    let incomplete: Vec<_> = trace.journeys().into_iter().filter(|j| j["ending"] != "left").collect();
    assert!(incomplete.is_empty(), "journeys that did not leave the node: {incomplete:?}");
}

/// Our programs and links as bpftool lists them.
fn ours_loaded() -> Vec<String> {
    let mut found = Vec::new();
    for what in ["prog", "link"] {
        let out = Command::new("bpftool").args([what, "show"]).output().expect("bpftool");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let ours = ["tc_ingress", "tc_egress", "nf_pre_", "nf_post_", "nf_out_", "nf_in_"]
                .iter()
                .any(|name| line.contains(&format!("name {name}")));
            if ours {
                found.push(format!("{what}: {line}"));
            }
        }
    }
    found
}

fn tc_state() -> String {
    let mut all = String::new();
    for args in [vec!["qdisc", "show"], vec!["filter", "show", "dev", "azure0", "ingress"]] {
        let out = in_ns(NODE_NS, "tc", &args).output().expect("tc");
        all.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    for iface in ["eth0", "azure0", UBUNTU.host_if] {
        for dir in ["ingress", "egress"] {
            let out = in_ns(NODE_NS, "tc", ["filter", "show", "dev", iface, dir]).output().expect("tc");
            all.push_str(&String::from_utf8_lossy(&out.stdout));
        }
    }
    all
}

#[test]
fn sigkill_leaves_no_program_link_filter_or_qdisc() {
    let _lab = LabGuard::new();
    assert!(ours_loaded().is_empty(), "programs of ours loaded before the test: {:?}", ours_loaded());
    let tc_before = tc_state();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let loaded = ours_loaded();
    assert!(loaded.iter().any(|l| l.contains("tc_ingress")), "pktrace attached nothing? {loaded:?}");
    lab::client_tcp(&UBUNTU.netns(), "10.0.159.58:80").expect("traffic while attached");
    let trace = pk.stop_with(libc::SIGKILL);
    assert!(!trace.status.success());
    // The kernel frees programs after the last reference is gone (RCU): give it a moment.
    let start = Instant::now();
    while !ours_loaded().is_empty() && start.elapsed() < Duration::from_secs(5) {
        sleep(Duration::from_millis(100));
    }
    assert!(ours_loaded().is_empty(), "left behind after SIGKILL: {:?}", ours_loaded());
    assert_eq!(tc_state(), tc_before, "tc qdiscs/filters changed");
}

/// Packets a classic-BPF tc filter counted (`tc -s filter show`).
fn filter_packets(iface: &str) -> u64 {
    let out = in_ns(NODE_NS, "tc", ["-s", "filter", "show", "dev", iface, "ingress"]).output().expect("tc");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Sent "))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .sum()
}

fn ping(n: u32) {
    let ok = in_ns(&UBUNTU.netns(), "ping", ["-c", &n.to_string(), "-i", "0.05", "-W", "1", "10.13.1.4"])
        .stdout(Stdio::null())
        .status()
        .expect("ping");
    assert!(ok.success());
}

#[test]
fn another_program_on_the_same_hook_still_sees_every_packet() {
    let _lab = LabGuard::new();
    let veth = UBUNTU.host_if;
    // A counting classifier (classic BPF that matches every IP packet) on the pod's veth.
    for args in [
        vec!["qdisc", "add", "dev", veth, "clsact"],
        vec!["filter", "add", "dev", veth, "ingress", "protocol", "ip", "prio", "1", "bpf", "bytecode", "1,6 0 0 4294967295,", "action", "ok"],
    ] {
        let ok = in_ns(NODE_NS, "tc", &args).status().expect("tc");
        assert!(ok.success(), "tc {args:?}");
    }
    let base = filter_packets(veth);
    ping(10);
    let without = filter_packets(veth) - base;
    assert_eq!(without, 10, "the counter works");

    // Two pktraces on the same hooks: the newer one attaches first and must pass packets on.
    let a = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let b = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let before = filter_packets(veth);
    ping(10);
    let with = filter_packets(veth) - before;
    let (ta, tb) = (a.stop(), b.stop());
    assert_eq!(with, without, "the classifier after pktrace saw every packet");
    for t in [&ta, &tb] {
        let requests = t.starting("10.13.76.46", "10.13.1.4");
        assert_eq!(requests.len(), 10, "each pktrace saw every echo request\n{}", t.dump());
    }
}

#[test]
fn count_limit_stops_after_n_journeys_with_the_summary_last() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "-c", "3"]);
    ping(5);
    let trace = pk.wait(Duration::from_secs(10));
    assert!(trace.status.success(), "{}", trace.dump());
    assert_eq!(trace.journeys().len(), 3);
    assert_eq!(trace.summary()["journeys"], 3);
}

#[test]
fn unknown_pod_exits_2_and_lists_the_pods_there() {
    let _lab = LabGuard::new();
    let out = in_ns(NODE_NS, pktrace_bin(), ["--pod", "ubutnu", "--state-file", lab::STATE_FILE, "-d", "1s"])
        .output()
        .expect("pktrace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ubuntu"), "should suggest ubuntu: {err}");
    assert!(err.contains("whereami-564765b89-qfq2k"), "should list the namespace's pods: {err}");
}

#[test]
fn without_privileges_pktrace_says_so_and_exits_1() {
    let _lab = LabGuard::new();
    let out = in_ns(NODE_NS, "setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(pktrace_bin())
        .args(["--pod-ip", "10.13.76.46", "-d", "1s"])
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("root") && err.contains("CAP_BPF"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, not a stack trace: {err}");
}
