//! Both directions of every NAT'd connection name their rules, over the lab's nat tables
//! (Azure CNI, kubenet, Calico) and the AKS fixture: the reply's un-DNAT and un-SNAT carry
//! the original direction's rule (and service), also when the reply's journey holds only one
//! of them, and an original-direction SNAT seen without the DNAT that marked it is named too.

use std::net::IpAddr;

use tracer_common::{PROTO_TCP, Tuple};

use super::*;
use crate::{
    journey::Ending,
    output::test_support::{nat, t, tc},
    rules::{NatRules, Ruleset, ruleset::Raw},
};

const LAB_AZURE: &str = include_str!("../../../tests/lab/src/nat-rules.txt");
const LAB_KUBENET: &str = include_str!("../../../tests/lab/src/nat-rules-kubenet.txt");
const LAB_CALICO: &str = include_str!("../../../tests/lab/src/nat-rules-calico.txt");
const LAB_CALICO_SETS: &str = include_str!("../../../tests/lab/src/ipsets-calico.txt");
const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");

/// One node's rules and addresses.
#[expect(
    clippy::struct_field_names,
    reason = "the field names the test table is read by"
)]
struct Node {
    name: &'static str,
    dump: &'static str,
    ipsets: Option<&'static str>,
    node_ip: &'static str,
    client_pod: &'static str,
    server_pod: &'static str,
    /// The rule that masquerades pod → internet.
    egress_masq: &'static str,
}

const NODES: [Node; 4] = [
    Node {
        name: "lab azure",
        dump: LAB_AZURE,
        ipsets: None,
        node_ip: "10.13.76.4",
        client_pod: "10.13.76.46",
        server_pod: "10.13.76.26",
        egress_masq: "IP-MASQ-AGENT",
    },
    Node {
        name: "lab kubenet",
        dump: LAB_KUBENET,
        ipsets: None,
        node_ip: "10.13.76.4",
        client_pod: "10.244.0.46",
        server_pod: "10.244.0.26",
        egress_masq: "POSTROUTING",
    },
    Node {
        name: "lab calico",
        dump: LAB_CALICO,
        ipsets: Some(LAB_CALICO_SETS),
        node_ip: "10.13.76.4",
        client_pod: "10.13.76.46",
        server_pod: "10.13.76.26",
        egress_masq: "cali-nat-outgoing",
    },
    Node {
        name: "AKS fixture",
        dump: AZURE,
        ipsets: None,
        node_ip: "10.13.76.4",
        client_pod: "10.13.76.46",
        server_pod: "10.13.76.26",
        egress_masq: "IP-MASQ-AGENT",
    },
];

impl Node {
    fn rules(&self) -> Ruleset {
        Ruleset::from_raw(&Raw {
            dumps: vec![("iptables".into(), self.dump.into())],
            ipsets: self.ipsets.map(str::to_owned),
            ..Raw::default()
        })
    }

    fn ctx(&self, sources: &str) -> PacketCtx {
        PacketCtx {
            mark: 0,
            local_addrs: vec![self.node_ip.parse::<IpAddr>().unwrap()],
            out_iface: None,
            sources: vec![sources.parse().unwrap()].into(),
        }
    }
}

fn ep(ip: &str, port: u16) -> String {
    format!("{ip}:{port}")
}

/// A connection's tuples: as sent, after DNAT, after SNAT (the last two optional).
struct Conn {
    sent: Tuple,
    dnat: Option<Tuple>,
    snat: Option<Tuple>,
}

impl Conn {
    /// Original direction: DNAT then SNAT.
    fn forward(&self) -> Vec<Step> {
        let mut steps = vec![tc(Point::Ingress, "eth0", self.sent, 0)];
        let mut at = self.sent;
        if let Some(d) = self.dnat {
            steps.push(nat(Point::Dnat, at, d, 1, None));
            at = d;
        }
        if let Some(s) = self.snat {
            steps.push(nat(Point::Snat, at, s, 2, None));
            at = s;
        }
        steps.push(tc(Point::Egress, "eth0", at, 3));
        steps
    }

    /// Reply direction: un-SNAT (at PREROUTING) then un-DNAT (at POSTROUTING).
    fn reply(&self) -> Vec<Step> {
        let last = self.snat.or(self.dnat).unwrap_or(self.sent).reversed();
        let mut steps = vec![tc(Point::Ingress, "eth0", last, 0)];
        let mut at = last;
        if self.snat.is_some() {
            let to = self.dnat.unwrap_or(self.sent).reversed();
            steps.push(replied(nat(Point::Snat, at, to, 1, None)));
            at = to;
        }
        if self.dnat.is_some() {
            let to = self.sent.reversed();
            steps.push(replied(nat(Point::Dnat, at, to, 2, None)));
            at = to;
        }
        steps.push(tc(Point::Egress, "eth0", at, 3));
        steps
    }
}

fn replied(mut step: Step) -> Step {
    step.nat_mut().reply = true;
    step
}

/// `(point, reply, rule, service)` of each NAT step after attribution.
fn attributed(
    rules: &Ruleset,
    ctx: &PacketCtx,
    steps: Vec<Step>,
) -> Vec<(Point, bool, Option<String>, Option<String>)> {
    let mut j = Journey {
        steps,
        ending: Ending::Left,
    };
    rules.attribute_journey(&mut j, ctx);
    j.steps
        .iter()
        .filter(|s| s.point().is_nat())
        .map(|s| {
            let a = s.attribution.as_deref();
            (
                s.point(),
                s.reply(),
                a.map(|a| a.rule.clone()),
                a.and_then(|a| a.service.clone()),
            )
        })
        .collect()
}

/// Every NAT step of both directions, whole and one NAT step per journey, names the same
/// rule (and service) as the original direction.
fn check_both_directions(node: &Node, what: &str, conn: &Conn, want: &[(&str, Option<&str>)]) {
    let rules = node.rules();
    let ctx = node.ctx(node.client_pod);
    let label = format!("{}: {what}", node.name);
    let fwd = attributed(&rules, &ctx, conn.forward());
    let got: Vec<(&str, Option<&str>)> = fwd
        .iter()
        .map(|(_, _, r, s)| (r.as_deref().unwrap_or("-"), s.as_deref()))
        .collect();
    assert_eq!(got, want, "{label}: original direction");
    let reply = attributed(&rules, &ctx, conn.reply());
    let mut rev: Vec<(&str, Option<&str>)> = reply
        .iter()
        .map(|(_, _, r, s)| (r.as_deref().unwrap_or("-"), s.as_deref()))
        .collect();
    rev.reverse();
    assert_eq!(rev, want, "{label}: reply");
    // The reply's NAT steps one per journey (a journey cut between them).
    for step in conn.reply().into_iter().filter(|s| s.point().is_nat()) {
        let point = step.point();
        let alone = attributed(&rules, &ctx, vec![step]);
        let (_, _, rule, service) = &alone[0];
        let expected = want[usize::from(point == Point::Snat && want.len() > 1)];
        assert_eq!(
            (rule.as_deref().unwrap_or("-"), service.as_deref()),
            expected,
            "{label}: reply {point:?} alone"
        );
    }
}

#[test]
fn lb_vip_from_outside_cluster_policy() {
    for node in &NODES {
        let client = "203.0.113.80";
        let sent = t(PROTO_TCP, &ep(client, 43026), "203.0.113.251:80");
        let dnat = t(PROTO_TCP, &ep(client, 43026), &ep(node.server_pod, 80));
        let snat = t(
            PROTO_TCP,
            &ep(node.node_ip, 43026),
            &ep(node.server_pod, 80),
        );
        let conn = Conn {
            sent,
            dnat: Some(dnat),
            snat: Some(snat),
        };
        let rules = node.rules();
        let ctx = node.ctx(node.server_pod);
        let sep = rules
            .dnat_decision(&sent, &dnat, &ctx)
            .unwrap_or_else(|| panic!("{}: no DNAT rule", node.name))
            .chain;
        let want = [
            (sep.as_str(), Some("default/whereami")),
            ("KUBE-POSTROUTING", None),
        ];
        check_both_directions(node, "LB VIP from outside", &conn, &want);
    }
}

#[test]
fn cluster_ip_from_a_pod() {
    for node in &NODES {
        let sent = t(PROTO_TCP, &ep(node.client_pod, 41234), "10.0.159.58:80");
        let dnat = t(
            PROTO_TCP,
            &ep(node.client_pod, 41234),
            &ep(node.server_pod, 80),
        );
        let conn = Conn {
            sent,
            dnat: Some(dnat),
            snat: None,
        };
        let sep = node
            .rules()
            .dnat_decision(&sent, &dnat, &node.ctx(node.client_pod))
            .unwrap_or_else(|| panic!("{}: no DNAT rule", node.name))
            .chain;
        let want = [(sep.as_str(), Some("default/whereami"))];
        check_both_directions(node, "ClusterIP from a pod", &conn, &want);
    }
}

#[test]
fn pod_to_internet_masquerade() {
    for node in &NODES {
        let sent = t(PROTO_TCP, &ep(node.client_pod, 40000), "203.0.113.80:80");
        let snat = t(PROTO_TCP, &ep(node.node_ip, 40000), "203.0.113.80:80");
        let conn = Conn {
            sent,
            dnat: None,
            snat: Some(snat),
        };
        let want = [(node.egress_masq, None)];
        check_both_directions(node, "pod to the internet", &conn, &want);
    }
}

#[test]
fn a_masquerade_seen_without_its_mark_says_the_mark_was_assumed() {
    let rules = NODES[0].rules();
    let dnat = t(PROTO_TCP, "203.0.113.80:5000", "10.13.76.26:80");
    let snat = t(PROTO_TCP, "10.13.76.4:5000", "10.13.76.26:80");
    let ctx = NODES[0].ctx("10.13.76.26");
    let step = replied(nat(Point::Snat, snat.reversed(), dnat.reversed(), 0, None));
    let d = rules.decide(&step, &ctx).expect("named");
    assert_eq!(d.chain, "KUBE-POSTROUTING");
    assert!(d.why.contains("[assumed: mark 0x4000"), "{}", d.why);
    // With the DNAT step in the journey the mark is known: nothing assumed.
    let mut j = Journey {
        steps: vec![
            replied(nat(Point::Snat, snat.reversed(), dnat.reversed(), 0, None)),
            replied(nat(
                Point::Dnat,
                dnat.reversed(),
                t(PROTO_TCP, "203.0.113.251:80", "203.0.113.80:5000"),
                1,
                None,
            )),
        ],
        ending: Ending::Left,
    };
    rules.attribute_journey(&mut j, &ctx);
    let why = j.steps[0].attribution.as_ref().and_then(|a| a.why.clone());
    assert!(
        why.as_deref().is_some_and(|w| !w.contains("assumed: mark")),
        "{why:?}"
    );
    // A node without any mark-setting rule has nothing to assume.
    let plain =
        NatRules::parse("*nat\n-A POSTROUTING -m mark --mark 0x1/0x1 -j MASQUERADE\nCOMMIT\n");
    assert_eq!(plain.marks_set(), Vec::<u32>::new());
    assert_eq!(plain.decide(&step, &ctx), None);
}
