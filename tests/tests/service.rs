//! `pktrace --svc` on the lab: the service `default/whereami` (two backends behind ClusterIP
//! 10.0.159.58 and LoadBalancer VIP 203.0.113.251) is resolved from the node's kube-proxy
//! rules and traced from several clients (the lab's `ubuntu`, a pod added for the test, the
//! internet host through the VIP); each DNAT step names one of the service's KUBE-SEP rules;
//! a backend taken out of the rules while following leaves the traced addresses within the
//! rules' re-read interval, and comes back when its rule does. An unknown service is a usage
//! error listing the namespace's services.

use std::{
    net::Ipv4Addr,
    thread,
    time::{Duration, Instant},
};

use tests::{
    LabGuard, pktrace_bin,
    trace::{Pktrace, nat_steps},
};
use tracer_user::output::json::contract::{JourneyLine, Point};
use xtask::lab::{
    self, NODE_NS, UBUNTU, in_ns, pods,
    topology::{INET_HOST, WHEREAMI_CLUSTER_IP, WHEREAMI_J7BPW, WHEREAMI_LB_VIP, WHEREAMI_QFQ2K},
};

/// The rules of the service's two endpoints, as the lab's kube-proxy rules name them.
const SEPS: [&str; 2] = ["KUBE-SEP-6HBOEI5FVFTJNRJ3", "KUBE-SEP-IJTMGMPNVALZGJZD"];
/// The load-balancing rule of the first endpoint (`-m statistic` to its KUBE-SEP).
const FIRST_BACKEND_RULE: [&str; 12] = [
    "KUBE-SVC-7G2JV7LNOR6DDNIY",
    "-m",
    "comment",
    "--comment",
    "default/whereami:",
    "-m",
    "statistic",
    "--mode",
    "random",
    "--probability",
    "0.50000000000",
    "-j",
];
/// The rules are re-read every 2 s where no cheaper check tells (iptables-legacy), and the
/// loop looks at them every 250 ms; a little slack for a busy machine.
const PICKED_UP: Duration = Duration::from_secs(6);

/// Deletes the added client pod, also when the test fails.
struct AddedPod(String);

impl Drop for AddedPod {
    fn drop(&mut self) {
        let _ = pods::del(&self.0);
    }
}

/// Puts the first backend's rule back, also when the test fails.
struct RuleBack(bool);

impl Drop for RuleBack {
    fn drop(&mut self) {
        if self.0 {
            let _ = backend_rule("-I", Some("1"));
        }
    }
}

fn backend_rule(op: &str, at: Option<&str>) -> std::process::Output {
    let mut args: Vec<&str> = vec!["-w", "-t", "nat", op, FIRST_BACKEND_RULE[0]];
    args.extend(at);
    args.extend_from_slice(&FIRST_BACKEND_RULE[1..]);
    args.push(SEPS[0]);
    let out = in_ns(NODE_NS, "iptables", &args)
        .output()
        .expect("running iptables");
    assert!(out.status.success(), "iptables {args:?}: {out:?}");
    out
}

/// Waits until pktrace's stderr holds `want` `times` times, at most [`PICKED_UP`].
fn wait_for(pk: &Pktrace, want: &str, times: usize) -> Duration {
    let start = Instant::now();
    while start.elapsed() < PICKED_UP {
        if pk.stderr_so_far().matches(want).count() >= times {
            return start.elapsed();
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{want:?} not {times} times within {PICKED_UP:?}:\n{}",
        pk.stderr_so_far()
    );
}

#[test]
fn svc_traces_the_service_from_several_clients_and_follows_its_endpoints() {
    let _lab = LabGuard::new();
    let client = pods::add("svc-client").expect("adding a client pod");
    let _client = AddedPod(client.name.clone());
    let pk = Pktrace::start(&["--svc", "whereami", "--follow"]);
    check_resolved(&pk.stderr_so_far());
    let clients = [UBUNTU.netns(), client.netns()];
    for ns in &clients {
        for _ in 0..4 {
            lab::client_tcp(ns, WHEREAMI_CLUSTER_IP).unwrap_or_else(|e| panic!("{ns}: {e:#}"));
        }
        lab::client_tcp(ns, WHEREAMI_LB_VIP).unwrap_or_else(|e| panic!("{ns} to VIP: {e:#}"));
    }
    for _ in 0..2 {
        lab::client_tcp(INET_HOST.netns, WHEREAMI_LB_VIP).expect("internet host to the VIP");
    }
    let direct = backend_out_and_back(&pk, &client.netns());
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let journeys = trace.journeys();
    let from = [
        UBUNTU.ip.to_string(),
        client.ip.to_string(),
        INET_HOST.ip.to_string(),
    ];
    check_dnat_steps(&journeys, &from, &trace.dump());
    // The removed backend, reached straight while out of the rules, is not traced; once back
    // it is.
    let straight = |from: &str| {
        journeys
            .iter()
            .filter(|j| j.steps[0].src.starts_with(&format!("{from}:")) && j.steps[0].dst == direct)
            .count()
    };
    assert_eq!(
        straight(&UBUNTU.ip.to_string()),
        0,
        "traced while out of the rules:\n{}",
        trace.dump()
    );
    assert!(
        straight(&client.ip.to_string()) > 0,
        "not traced once back:\n{}",
        trace.dump()
    );
}

/// The start-up line names the service, its VIP and both endpoints with their rules.
fn check_resolved(stderr: &str) {
    assert!(
        stderr.contains("service default/whereami found through the node's nat rules")
            && stderr.contains("loadbalancer IP 203.0.113.251:80/tcp")
            && SEPS
                .iter()
                .all(|sep| stderr.contains(&format!(":80 ({sep})")))
            && [WHEREAMI_QFQ2K.ip, WHEREAMI_J7BPW.ip]
                .iter()
                .all(|ip| stderr.contains(&format!("{ip}:80 (KUBE-SEP-"))),
        "{stderr}"
    );
}

/// Takes the first backend's rule out (ubuntu then reaches that backend straight), puts it
/// back (`client_ns` then does); both changes must be said within [`PICKED_UP`]. Returns
/// the backend's `ip:port`.
fn backend_out_and_back(pk: &Pktrace, client_ns: &str) -> String {
    const NOW: &str = "service default/whereami: now";
    let mut back = RuleBack(false);
    backend_rule("-D", None);
    back.0 = true;
    let gone = wait_for(pk, NOW, 1);
    let removed = pk
        .stderr_so_far()
        .lines()
        .find(|l| l.contains(NOW))
        .and_then(|l| l.split("removed ").nth(1))
        .map(|r| r.trim_end_matches(')').to_owned())
        .expect("a removed address");
    let removed: Ipv4Addr = removed.parse().unwrap_or_else(|_| panic!("{removed}"));
    let direct = format!("{removed}:80");
    lab::client_tcp(&UBUNTU.netns(), &direct).expect("ubuntu straight to the removed backend");
    backend_rule("-I", Some("1"));
    back.0 = false;
    let back_in = wait_for(pk, NOW, 2);
    eprintln!("endpoint change said after {gone:?} (removed) and {back_in:?} (added back)");
    lab::client_tcp(client_ns, &direct).expect("client straight to the backend again");
    direct
}

/// Every journey is the service's; each DNAT step names one of its KUBE-SEP rules; there are
/// DNAT journeys from each of `from` and at least three through the LoadBalancer VIP.
fn check_dnat_steps(journeys: &[&JourneyLine], from: &[String], dump: &str) {
    let mut from_clients = std::collections::BTreeSet::new();
    let mut vip_dnat = 0;
    for j in journeys {
        assert_eq!(j.pod, "default/whereami", "{j:?}");
        assert_eq!(j.svc.as_deref(), Some("default/whereami"), "{j:?}");
        let dnat = nat_steps(j)
            .into_iter()
            .filter(|s| s.point == Point::Dnat && s.reply != Some(true));
        for s in dnat {
            assert!(
                SEPS.contains(&s.rule.as_deref().unwrap_or("")),
                "a DNAT step without the service's KUBE-SEP rule: {j:?}"
            );
            assert_eq!(s.service.as_deref(), Some("default/whereami"), "{j:?}");
            from_clients.insert(j.steps[0].src.split(':').next().unwrap_or("").to_owned());
            if s.orig_dst.as_deref() == Some(WHEREAMI_LB_VIP.to_string().as_str()) {
                vip_dnat += 1;
            }
        }
    }
    for ip in from {
        assert!(
            from_clients.contains(ip),
            "no DNAT journey from {ip}: {from_clients:?}\n{dump}"
        );
    }
    assert!(
        vip_dnat >= 3,
        "LoadBalancer VIP journeys: {vip_dnat}\n{dump}"
    );
}

#[test]
fn svc_unknown_is_a_usage_error_listing_the_services() {
    let _lab = LabGuard::new();
    let out = in_ns(
        NODE_NS,
        pktrace_bin(),
        ["--svc", "wheremai", "--kubeconfig", "/nonexistent"],
    )
    .output()
    .expect("running pktrace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("service default/wheremai not found")
            && stderr.contains("services in namespace default: whereami, whereami-local"),
        "{stderr}"
    );
}
