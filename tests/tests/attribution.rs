//! Issue 4 (attribution): journeys name the rule that did each NAT step, say why a packet left
//! without SNAT, and follow the node's rules when they change while pktrace runs.

use std::{
    thread::sleep,
    time::{Duration, Instant},
};

use tests::{
    LabGuard,
    trace::{Pktrace, nat_steps, point_name},
};
use tracer_user::output::json::contract::{JourneyLine, Point, StepLine};
use xtask::lab::{
    self, NODE_NS, UBUNTU, in_ns,
    topology::{INET_HOST, WHEREAMI_CLUSTER_IP, WHEREAMI_J7BPW, WHEREAMI_LB_VIP, WHEREAMI_QFQ2K},
};

const POD: &str = "10.13.76.46";
/// The internet host: MASQUERADEd by IP-MASQ-AGENT's last rule.
const INTERNET: &str = "203.0.113.80:80";
/// The rule the test inserts: same effect (MASQUERADE), another rule, so only the
/// attribution changes.
const INSERTED: [&str; 11] = [
    "-I",
    "IP-MASQ-AGENT",
    "1",
    "-d",
    "203.0.113.80/32",
    "-m",
    "comment",
    "--comment",
    "pktrace test: inserted while tracing",
    "-j",
    "MASQUERADE",
];
/// Connections made after the change, one per interval.
const PROBES: u32 = 16;
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Deletes the inserted rule on drop (the lab going down would too; this keeps the lab
/// as it was for a test that follows without taking it down).
struct InsertedRule;

impl InsertedRule {
    fn insert() -> Self {
        let ok = in_ns(NODE_NS, "iptables", ["-t", "nat"].iter().chain(&INSERTED))
            .status()
            .expect("iptables");
        assert!(ok.success(), "inserting the test rule failed");
        Self
    }
}

impl Drop for InsertedRule {
    fn drop(&mut self) {
        let mut args: Vec<&str> = vec!["-t", "nat", "-D", "IP-MASQ-AGENT"];
        args.extend(&INSERTED[3..]);
        let _ = in_ns(NODE_NS, "iptables", &args).status();
    }
}

fn tcp(addr: &str) -> String {
    lab::client_tcp(&UBUNTU.netns(), addr).unwrap_or_else(|e| panic!("tcp {addr}: {e:#}"))
}

/// The SNAT step of the original-direction journey whose translated source the server saw.
fn snat_seen_as<'a>(journeys: &[&'a JourneyLine], seen: &str) -> Option<&'a StepLine> {
    let client = seen.strip_prefix("client=")?;
    journeys.iter().find_map(|j| {
        nat_steps(j)
            .into_iter()
            .find(|s| s.point == Point::Snat && s.reply == Some(false) && s.src == client)
    })
}

#[test]
fn journeys_name_their_rules_and_follow_rule_changes() {
    let _lab = LabGuard::new();
    let pk = Pktrace::start(&["--pod", "ubuntu", "--follow"]);
    let before = tcp(INTERNET);
    let vnet = tcp("10.13.1.4:80");
    let rule = InsertedRule::insert();
    let changed = Instant::now();
    let mut probes = Vec::new();
    for _ in 0..PROBES {
        let at = changed.elapsed();
        probes.push((at, tcp(INTERNET)));
        sleep(PROBE_EVERY);
    }
    let trace = pk.stop();
    drop(rule);
    assert!(trace.status.success(), "{}", trace.dump());
    let journeys = trace.journeys();

    // Before the change: ip-masq-agent's last rule, and why.
    let snat =
        snat_seen_as(&journeys, &before).unwrap_or_else(|| panic!("{before}\n{}", trace.dump()));
    assert_eq!(snat.rule.as_deref(), Some("IP-MASQ-AGENT"), "{snat:?}");
    let why = snat.why.as_deref().unwrap_or("");
    assert!(
        why.starts_with("MASQUERADE by IP-MASQ-AGENT rule 3: 203.0.113.80 not in nonMasqueradeCIDRs 10.13.0.0/16"),
        "{why}"
    );

    // Inside the VNet: no SNAT step, and the egress on eth0 says why.
    let pod_src = format!("{POD}:");
    let out: Vec<&JourneyLine> = journeys
        .iter()
        .copied()
        .filter(|j| j.steps[0].dst == "10.13.1.4:80" && j.steps[0].src.starts_with(&pod_src))
        .collect();
    assert!(!out.is_empty(), "{vnet}\n{}", trace.dump());
    for j in &out {
        assert!(nat_steps(j).is_empty(), "{j:?}");
        let last = j
            .steps
            .iter()
            .rfind(|s| s.point == Point::Egress)
            .expect("egress");
        assert_eq!(last.rule.as_deref(), Some("IP-MASQ-AGENT"), "{j:?}");
        let why = last.why.as_deref().unwrap_or("");
        assert!(
            why.starts_with("no SNAT: RETURN by IP-MASQ-AGENT rule 1: 10.13.1.4 in nonMasqueradeCIDRs 10.13.0.0/16"),
            "{why}"
        );
    }

    // After the change: the inserted rule, from some probe on, and never the old one after it.
    let mut first_new = None;
    for (at, seen) in &probes {
        let snat =
            snat_seen_as(&journeys, seen).unwrap_or_else(|| panic!("{seen}\n{}", trace.dump()));
        let why = snat.why.clone().unwrap_or_default();
        let new = why.starts_with("MASQUERADE by IP-MASQ-AGENT rule 1");
        match (new, first_new) {
            (true, None) => first_new = Some(*at),
            (false, Some(_)) => panic!("old rule after the new one at {at:?}: {why}"),
            _ => {}
        }
    }
    let first_new =
        first_new.unwrap_or_else(|| panic!("the changed rules were never used\n{}", trace.stderr));
    eprintln!(
        "attribution: new rules used {} ms after the change",
        first_new.as_millis()
    );
    assert!(first_new <= Duration::from_secs(4), "{first_new:?}");
    let line = trace
        .stderr
        .lines()
        .find(|l| l.contains("nat rules changed"))
        .expect("change reported");
    eprintln!("attribution: {line}");
}

/// Every NAT step of both directions names its rule and says why, replies included: an
/// internet client to `default/whereami`'s LoadBalancer VIP (externalTrafficPolicy=Cluster:
/// DNAT, then MASQUERADE by KUBE-POSTROUTING for the mark KUBE-MARK-MASQ set), the ubuntu
/// pod to its ClusterIP (DNAT) and to the internet (MASQUERADE by ip-masq-agent).
#[test]
fn every_nat_step_of_both_directions_names_its_rule() {
    let _lab = LabGuard::new();
    let pods = [UBUNTU, WHEREAMI_QFQ2K, WHEREAMI_J7BPW]
        .map(|p| p.ip.to_string())
        .join(",");
    let pk = Pktrace::start(&["--pod-ip", &pods, "--follow"]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(
            lab::client_tcp(INET_HOST.netns, WHEREAMI_LB_VIP)
                .unwrap_or_else(|e| panic!("LB VIP from {}: {e:#}", INET_HOST.netns)),
        );
    }
    seen.push(tcp(&WHEREAMI_CLUSTER_IP.to_string()));
    seen.push(tcp(INTERNET));
    let trace = pk.stop();
    assert!(trace.status.success(), "{}", trace.dump());
    let journeys = trace.journeys();
    let mut nat_seen = std::collections::BTreeSet::new();
    for j in &journeys {
        for s in nat_steps(j) {
            let reply = s.reply.map_or_else(|| "null".to_owned(), |r| r.to_string());
            let key = format!("{} reply={reply}", point_name(s.point));
            assert!(
                s.rule.is_some() && s.why.is_some(),
                "{key} without a rule: {j:?}"
            );
            let why = s.why.as_deref().unwrap_or("");
            if s.reply == Some(true) {
                assert!(why.starts_with("reverse of "), "{why}");
            }
            let lb_vip = WHEREAMI_LB_VIP.to_string();
            let vip = s.orig_dst.as_deref() == Some(lb_vip.as_str()) || s.src == lb_vip;
            if s.point == Point::Dnat && vip {
                assert_eq!(s.service.as_deref(), Some("default/whereami"), "{j:?}");
            }
            if s.point == Point::Snat && s.rule.as_deref() == Some("KUBE-POSTROUTING") {
                nat_seen.insert(format!("{key} KUBE-POSTROUTING"));
            }
            nat_seen.insert(key);
        }
    }
    // Both directions of each kind were traced (else the test proves nothing).
    for want in [
        "dnat reply=false",
        "dnat reply=true",
        "snat reply=false",
        "snat reply=true",
        "snat reply=false KUBE-POSTROUTING",
        "snat reply=true KUBE-POSTROUTING",
    ] {
        assert!(
            nat_seen.contains(want),
            "no {want} step: {seen:?}\n{}",
            trace.dump()
        );
    }
}
