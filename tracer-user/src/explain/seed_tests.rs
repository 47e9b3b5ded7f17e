//! The decisions a reader of the seeds expects, on their rule sets (converted into
//! tests-data/, each file says from where and how): which chain and rule, SNAT or not, which
//! service, and the one-line why.

use tracer_common::{PROTO_ICMP, PROTO_TCP};

use super::*;
use crate::{
    journey::Ending,
    rules::{Ruleset, ruleset},
    test_support::t,
    traced::TracedAddrs,
};

const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");
const SEED000: &str = include_str!("../../tests-data/iptables-seed000-calico.txt");
const SEED000_SETS: &str = include_str!("../../tests-data/ipset-seed000-calico.txt");
const SEED000_SETS_POOL: &str = include_str!("../../tests-data/ipset-seed000-calico-othervnet.txt");
const SEED001_KUBENET: &str = include_str!("../../tests-data/iptables-seed001-kubenet.txt");
const SEED002: &str = include_str!("../../tests-data/iptables-seed002-aci-calico.txt");
const SEED002_SETS: &str = include_str!("../../tests-data/ipset-seed002-aci-calico.txt");
const SEED003_LOCAL: &str = include_str!("../../tests-data/iptables-seed003-local.txt");
const SEED004: &str = include_str!("../../tests-data/iptables-seed004-kubenet.txt");

fn ruleset(dump: &str, ipsets: Option<&str>) -> Ruleset {
    Ruleset::from_raw(&ruleset::Raw {
        dumps: vec![("iptables".into(), dump.into())],
        ipsets: ipsets.map(str::to_owned),
        ..ruleset::Raw::default()
    })
}

fn ctx(node: &str, out: &str) -> PacketCtx {
    PacketCtx {
        mark: 0,
        local_addrs: vec![node.parse().unwrap()],
        out_iface: Some(out.into()),
        sources: TracedAddrs::default(),
    }
}

enum Ask {
    Snat,
    NoSnat,
    Dnat(&'static str),
}

struct Case {
    seed: &'static str,
    rules: &'static str,
    sets: Option<&'static str>,
    node: &'static str,
    src: &'static str,
    dst: &'static str,
    ask: Ask,
    /// Rule (chain), service, mark after, and the parts of `why`.
    want: (
        &'static str,
        Option<&'static str>,
        u32,
        &'static [&'static str],
    ),
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of the seeds' cases, a few lines each"
)]
fn seed_decisions() {
    let cases = [
        Case {
            seed: "000: pod to the peered VNet leaves as the node (Calico's outgoing NAT)",
            rules: SEED000,
            sets: Some(SEED000_SETS),
            node: "10.240.0.35",
            src: "10.240.0.46:40000",
            dst: "172.17.0.4:80",
            ask: Ask::Snat,
            want: (
                "cali-nat-outgoing",
                None,
                0,
                &[
                    "MASQUERADE by cali-nat-outgoing rule 1: src 10.240.0.46 in ipset \
                   cali40masq-ipam-pools, dst 172.17.0.4 not in ipset cali40all-ipam-pools",
                ],
            ),
        },
        Case {
            seed: "000: pod to its own VNet keeps its address",
            rules: SEED000,
            sets: Some(SEED000_SETS),
            node: "10.240.0.35",
            src: "10.240.0.46:40001",
            dst: "10.240.0.97:80",
            ask: Ask::NoSnat,
            want: (
                "cali-nat-outgoing",
                None,
                0,
                &[
                    "no SNAT: MASQUERADE by cali-nat-outgoing rule 1 passed over: dst 10.240.0.97 \
                     in ipset cali40all-ipam-pools",
                    "MASQUERADE by KUBE-POSTROUTING rule 1 passed over: no mark 0x4000",
                ],
            ),
        },
        Case {
            seed: "000: after the othervnet IPPool the peered VNet sees the pod",
            rules: SEED000,
            sets: Some(SEED000_SETS_POOL),
            node: "10.240.0.35",
            src: "10.240.0.46:40002",
            dst: "172.17.0.4:80",
            ask: Ask::NoSnat,
            want: (
                "cali-nat-outgoing",
                None,
                0,
                &["passed over: dst 172.17.0.4 in ipset cali40all-ipam-pools"],
            ),
        },
        Case {
            seed: "002: ingress controller to a pod on the virtual node is SNATed by Calico",
            rules: SEED002,
            sets: Some(SEED002_SETS),
            node: "10.13.76.4",
            src: "10.13.76.17:59850",
            dst: "10.13.100.10:8080",
            ask: Ask::Snat,
            want: (
                "cali-nat-outgoing",
                None,
                0,
                &[
                    "MASQUERADE by cali-nat-outgoing rule 1: src 10.13.76.17 in ipset \
                   cali40masq-ipam-pools, dst 10.13.100.10 not in ipset cali40all-ipam-pools",
                ],
            ),
        },
        Case {
            seed: "002: ingress controller to a pod on a VM keeps its address",
            rules: SEED002,
            sets: Some(SEED002_SETS),
            node: "10.13.76.4",
            src: "10.13.76.17:52820",
            dst: "10.13.76.36:8080",
            ask: Ask::NoSnat,
            want: (
                "IP-MASQ-AGENT",
                None,
                0,
                &[
                    "no SNAT: RETURN by IP-MASQ-AGENT rule 1: 10.13.76.36 in nonMasqueradeCIDRs \
                     10.13.0.0/16",
                    "MASQUERADE by cali-nat-outgoing rule 1 passed over: dst 10.13.76.36 in ipset \
                     cali40all-ipam-pools",
                ],
            ),
        },
        Case {
            seed: "002: internet client to the LoadBalancer IP, served from ACI",
            rules: SEED002,
            sets: Some(SEED002_SETS),
            node: "10.13.76.4",
            src: "198.51.100.169:59337",
            dst: "203.0.113.137:8080",
            ask: Ask::Dnat("10.13.100.4:8080"),
            want: (
                "KUBE-SEP-PFDO2KGI5VXHCUTC",
                Some("default/kuard-vnode"),
                0x4000,
                &[
                    "DNAT by KUBE-SEP-PFDO2KGI5VXHCUTC (service default/kuard-vnode via \
                   KUBE-FW-AXSEUH3JK6RISVJZ → KUBE-SVC-AXSEUH3JK6RISVJZ, 1 of 2 endpoints)",
                ],
            ),
        },
        Case {
            seed: "002: ingress controller to the ingress service's ClusterIP",
            rules: SEED002,
            sets: Some(SEED002_SETS),
            node: "10.13.76.4",
            src: "10.13.76.17:59851",
            dst: "10.0.230.28:8080",
            ask: Ask::Dnat("10.13.100.4:8080"),
            want: (
                "KUBE-SEP-FDOYREXGM5TS33NA",
                Some("ingress/kuard-vnode-ingress"),
                0,
                &["1 of 2 endpoints"],
            ),
        },
        Case {
            seed: "001 kubenet: pod to the nginx ClusterIP",
            rules: SEED001_KUBENET,
            sets: None,
            node: "10.240.0.4",
            src: "10.100.0.20:40000",
            dst: "10.200.184.192:80",
            ask: Ask::Dnat("10.100.0.9:80"),
            want: (
                "KUBE-SEP-66QNMC7FITAI6UHV",
                Some("default/nginx"),
                0,
                &["via KUBE-SVC-4N57TFCL4MD7ZTDA, 1 of 3 endpoints"],
            ),
        },
        Case {
            seed: "001 kubenet: the node itself to the ClusterIP is marked for SNAT",
            rules: SEED001_KUBENET,
            sets: None,
            node: "10.240.0.4",
            src: "10.240.0.4:40000",
            dst: "10.200.184.192:80",
            ask: Ask::Dnat("10.100.0.9:80"),
            want: (
                "KUBE-SEP-66QNMC7FITAI6UHV",
                Some("default/nginx"),
                0x4000,
                &[],
            ),
        },
        Case {
            seed: "001 kubenet: pod to the internet",
            rules: SEED001_KUBENET,
            sets: None,
            node: "10.240.0.4",
            src: "10.100.0.9:40000",
            dst: "203.0.113.80:443",
            ask: Ask::Snat,
            want: (
                "POSTROUTING",
                None,
                0,
                &[
                    "MASQUERADE by POSTROUTING rule 3: 203.0.113.80 not in non-masquerade-cidr \
                   10.100.0.0/16",
                ],
            ),
        },
        Case {
            seed: "004 kubenet: pod to the test VM in the VNet leaves as the node",
            rules: SEED004,
            sets: None,
            node: "10.13.77.4",
            src: "192.168.1.2",
            dst: "10.13.1.4",
            ask: Ask::Snat,
            want: (
                "POSTROUTING",
                None,
                0,
                &[
                    "MASQUERADE by POSTROUTING rule 3: 10.13.1.4 not in non-masquerade-cidr \
                   192.168.0.0/16",
                ],
            ),
        },
        Case {
            seed: "004 kubenet: pod to pod keeps its address",
            rules: SEED004,
            sets: None,
            node: "10.13.77.4",
            src: "192.168.0.9",
            dst: "192.168.1.2",
            ask: Ask::NoSnat,
            want: (
                "KUBE-POSTROUTING",
                None,
                0,
                &[
                    "MASQUERADE by POSTROUTING rule 3 passed over: 192.168.1.2 in \
                   non-masquerade-cidr 192.168.0.0/16",
                ],
            ),
        },
        Case {
            seed: "fixture: pod to a VNet host keeps its address (ip-masq-agent)",
            rules: AZURE,
            sets: None,
            node: "10.13.76.4",
            src: "10.13.76.46:40000",
            dst: "10.13.1.4:80",
            ask: Ask::NoSnat,
            want: (
                "IP-MASQ-AGENT",
                None,
                0,
                &[
                    "no SNAT: RETURN by IP-MASQ-AGENT rule 1: 10.13.1.4 in nonMasqueradeCIDRs \
                   10.13.0.0/16",
                ],
            ),
        },
    ];
    for c in cases {
        let rules = ruleset(c.rules, c.sets);
        let proto = if c.src.contains(':') {
            PROTO_TCP
        } else {
            PROTO_ICMP
        };
        let pre = t(proto, c.src, c.dst);
        let ctx = ctx(c.node, "eth0");
        let got = match c.ask {
            Ask::Snat => rules.snat_decision(&pre, &ctx),
            Ask::NoSnat => {
                assert_eq!(rules.snat_decision(&pre, &ctx), None, "{}", c.seed);
                rules.no_snat_decision(&pre, &ctx)
            }
            Ask::Dnat(to) => rules.dnat_decision(&pre, &t(proto, c.src, to), &ctx),
        };
        let d = got.unwrap_or_else(|| panic!("{}: no decision", c.seed));
        let (rule, service, mark, why) = c.want;
        assert_eq!(
            (d.chain.as_str(), d.service.as_deref(), d.mark),
            (rule, service, mark),
            "{}: {}",
            c.seed,
            d.why
        );
        for part in why {
            assert!(d.why.contains(part), "{}: {}", c.seed, d.why);
        }
        assert!(!d.why.contains("assumed"), "{}: {}", c.seed, d.why);
        if matches!(c.ask, Ask::NoSnat) {
            assert!(d.why.starts_with("no SNAT: "), "{}", d.why);
        }
    }
}

/// A tc step (with `iface`) or a NAT step (with `orig`), at time 0.
fn step(point: Point, orig: Option<Tuple>, tuple: Tuple, iface: Option<&str>) -> Step {
    use crate::output::test_support::{nat, tc};
    match orig {
        Some(orig) => nat(point, orig, tuple, 0, None),
        None => tc(point, iface.unwrap_or_default(), tuple, 0),
    }
}

/// Seed 003: with externalTrafficPolicy=Local the LoadBalancer traffic is DNATed through
/// KUBE-XLB, never marked, and leaves for the pod with the client's address.
#[test]
fn local_policy_journey_says_why_there_is_no_snat() {
    let rules = ruleset(SEED003_LOCAL, None);
    let pre = t(PROTO_TCP, "198.51.100.7:5000", "203.0.113.174:80");
    let post = t(PROTO_TCP, "198.51.100.7:5000", "10.13.76.15:80");
    let mut j = Journey {
        steps: vec![
            step(Point::Ingress, None, pre, Some("eth0")),
            step(Point::Dnat, Some(pre), post, None),
            step(Point::Egress, None, post, Some("azv15")),
        ],
        ending: Ending::Left,
    };
    rules.attribute_journey(&mut j, &ctx("10.13.76.4", "eth0"));
    let dnat = j.steps[1].attribution.clone().expect("DNAT attributed");
    assert_eq!(dnat.rule, "KUBE-SEP-SGJO6RZWDBFIJSTC");
    assert_eq!(dnat.service.as_deref(), Some("default/whereami"));
    let why = dnat.why.clone().unwrap();
    assert!(
        why.contains("via KUBE-FW-7G2JV7LNOR6DDNIY → KUBE-XLB-7G2JV7LNOR6DDNIY")
            && why.contains("externalTrafficPolicy=Local: not marked for SNAT"),
        "{why}"
    );
    let egress = j.steps[2].attribution.clone().expect("no-SNAT explained");
    let why = egress.why.clone().unwrap();
    assert_eq!(egress.rule, "KUBE-POSTROUTING", "{why}");
    assert!(
        why.starts_with(
            "no SNAT: MASQUERADE by KUBE-POSTROUTING rule 1 passed over: no mark 0x4000"
        ) && why
            .contains("MASQUERADE by POSTROUTING rule 3 passed over: 10.13.76.15 in 10.0.0.0/8"),
        "{why}"
    );
    assert_eq!(j.steps[0].attribution, None);

    // The Cluster policy of the same seed (the fixture) marks and masquerades instead.
    let cluster = ruleset(AZURE, None);
    let pre = t(PROTO_TCP, "198.51.100.7:5000", "203.0.113.251:80");
    let d = cluster
        .dnat_decision(
            &pre,
            &t(PROTO_TCP, "198.51.100.7:5000", "10.13.76.26:80"),
            &ctx("10.13.76.4", "eth0"),
        )
        .unwrap();
    assert!(!d.why.contains("Local"), "{}", d.why);
    assert_eq!(d.mark, 0x4000);
}

/// A journey that is neither DNATed nor from a traced address (a reply of a connection
/// nobody translated) gets no "no SNAT" line: replies do not go through the nat table.
#[test]
fn no_snat_is_only_explained_for_original_directions() {
    let rules = ruleset(AZURE, None);
    let reply = t(PROTO_TCP, "10.13.1.4:80", "10.13.76.46:40000");
    let steps = vec![
        step(Point::Ingress, None, reply, Some("eth0")),
        step(Point::Egress, None, reply, Some("azv46")),
    ];
    let mut j = Journey {
        steps: steps.clone(),
        ending: Ending::Left,
    };
    let mut c = ctx("10.13.76.4", "eth0");
    c.sources = vec!["10.13.76.46".parse().unwrap()].into();
    rules.attribute_journey(&mut j, &c);
    assert!(j.steps.iter().all(|s| s.attribution.is_none()), "{j:?}");

    let out = t(PROTO_TCP, "10.13.76.46:40000", "10.13.1.4:80");
    let mut j = Journey {
        steps: vec![
            step(Point::Ingress, None, out, Some("azv46")),
            step(Point::Egress, None, out, Some("eth0")),
        ],
        ending: Ending::Left,
    };
    rules.attribute_journey(&mut j, &c);
    let why = j.steps[1].attribution.as_ref().and_then(|a| a.why.clone());
    assert!(
        why.as_deref()
            .is_some_and(|w| w.starts_with("no SNAT: RETURN by IP-MASQ-AGENT rule 1")),
        "{why:?}"
    );
}

/// kube-proxy at scale: 2000 services, 16k rules (1.6 MB of iptables-save). Parsing is what a
/// re-read costs besides the tool itself; a decision must stay far below a packet budget.
#[test]
fn a_large_kube_proxy_table_parses_and_decides_quickly() {
    use std::{fmt::Write as _, time::Instant};
    let mut dump = String::from(
        "*nat\n-A PREROUTING -j KUBE-SERVICES\n-A POSTROUTING -j KUBE-POSTROUTING\n\
         -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
         -A KUBE-POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE\n",
    );
    for i in 0..2000u32 {
        let ip = format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256);
        let _ = write!(
            dump,
            "-A KUBE-SERVICES ! -s 10.13.76.0/24 -d {ip}/32 -p tcp -m comment --comment \"ns/svc{i}: cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ\n\
             -A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"ns/svc{i}: cluster IP\" -m tcp --dport 80 -j KUBE-SVC-{i:012}\n\
             -A KUBE-SVC-{i:012} -m statistic --mode random --probability 0.5 -j KUBE-SEP-A{i:011}\n\
             -A KUBE-SVC-{i:012} -j KUBE-SEP-B{i:011}\n\
             -A KUBE-SEP-A{i:011} -s 10.13.76.26/32 -j KUBE-MARK-MASQ\n\
             -A KUBE-SEP-A{i:011} -p tcp -m tcp -j DNAT --to-destination 10.13.76.26:{port}\n\
             -A KUBE-SEP-B{i:011} -s 10.13.76.7/32 -j KUBE-MARK-MASQ\n\
             -A KUBE-SEP-B{i:011} -p tcp -m tcp -j DNAT --to-destination 10.13.76.7:{port}\n",
            port = 1000 + i
        );
    }
    dump.push_str("COMMIT\n");
    let started = Instant::now();
    let rules = ruleset(&dump, None);
    let parsed = started.elapsed();
    assert_eq!(rules.tables[0].rule_count(), 16004);
    let pre = t(PROTO_TCP, "10.13.76.46:40000", "10.100.7.207:80");
    let post = t(PROTO_TCP, "10.13.76.46:40000", "10.13.76.7:2999");
    let started = Instant::now();
    let d = rules
        .dnat_decision(&pre, &post, &ctx("10.13.76.4", "eth0"))
        .unwrap();
    let first = started.elapsed();
    let pre2 = t(PROTO_TCP, "10.13.76.46:40001", "10.100.0.10:80");
    let post2 = t(PROTO_TCP, "10.13.76.46:40001", "10.13.76.26:1010");
    let started = Instant::now();
    let d2 = rules
        .dnat_decision(&pre2, &post2, &ctx("10.13.76.4", "eth0"))
        .unwrap();
    let decided = started.elapsed();
    assert_eq!(d2.chain, "KUBE-SEP-A00000000010");
    assert_eq!(d.chain, "KUBE-SEP-B00000001999");
    assert_eq!(d.service.as_deref(), Some("ns/svc1999"));
    eprintln!(
        "16k rules: parsed in {parsed:?}, first DNAT decision (index built) in {first:?}, \
         the next in {decided:?}"
    );
    assert!(
        parsed.as_secs() < 10 && decided.as_secs() < 5,
        "{parsed:?} {decided:?}"
    );
}

/// kube-proxy ≥ 1.24 writes the Local policy as KUBE-EXT → KUBE-SVL (not from a seed: the
/// shape kube-proxy's iptables proxier writes, with the lab's addresses). Pods' own traffic to
/// the LoadBalancer IP goes through KUBE-SVC and is not "Local".
#[test]
fn modern_local_policy_chains() {
    const MODERN: &str = "*nat
-A PREROUTING -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -j MASQUERADE --random-fully
-A KUBE-SERVICES -d 203.0.113.174/32 -p tcp -m comment --comment \"default/whereami loadbalancer IP\" -m tcp --dport 80 -j KUBE-EXT-7G2JV7LNOR6DDNIY
-A KUBE-EXT-7G2JV7LNOR6DDNIY -s 10.13.0.0/16 -m comment --comment \"pod traffic for default/whereami external destinations\" -j KUBE-SVC-7G2JV7LNOR6DDNIY
-A KUBE-EXT-7G2JV7LNOR6DDNIY -m comment --comment \"masquerade LOCAL traffic for default/whereami external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-7G2JV7LNOR6DDNIY -m comment --comment \"route LOCAL traffic for default/whereami external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-7G2JV7LNOR6DDNIY
-A KUBE-EXT-7G2JV7LNOR6DDNIY -j KUBE-SVL-7G2JV7LNOR6DDNIY
-A KUBE-SVC-7G2JV7LNOR6DDNIY -m comment --comment \"default/whereami -> 10.13.76.26:80\" -j KUBE-SEP-6HBOEI5FVFTJNRJ3
-A KUBE-SVL-7G2JV7LNOR6DDNIY -m comment --comment \"default/whereami -> 10.13.76.26:80\" -j KUBE-SEP-6HBOEI5FVFTJNRJ3
-A KUBE-SEP-6HBOEI5FVFTJNRJ3 -s 10.13.76.26/32 -m comment --comment default/whereami -j KUBE-MARK-MASQ
-A KUBE-SEP-6HBOEI5FVFTJNRJ3 -p tcp -m comment --comment default/whereami -m tcp -j DNAT --to-destination 10.13.76.26:80
COMMIT
";
    let rules = ruleset(MODERN, None);
    let c = ctx("10.13.76.4", "azv26");
    let post = |src: &str| t(PROTO_TCP, src, "10.13.76.26:80");
    let from_internet = t(PROTO_TCP, "198.51.100.7:5000", "203.0.113.174:80");
    let d = rules
        .dnat_decision(&from_internet, &post("198.51.100.7:5000"), &c)
        .unwrap();
    assert_eq!(
        (d.chain.as_str(), d.service.as_deref(), d.mark),
        ("KUBE-SEP-6HBOEI5FVFTJNRJ3", Some("default/whereami"), 0)
    );
    assert!(
        d.why
            .contains("KUBE-EXT-7G2JV7LNOR6DDNIY → KUBE-SVL-7G2JV7LNOR6DDNIY"),
        "{}",
        d.why
    );
    assert!(d.why.contains("externalTrafficPolicy=Local"), "{}", d.why);
    let no = rules
        .no_snat_decision(&post("198.51.100.7:5000"), &c)
        .unwrap();
    assert_eq!(no.chain, "KUBE-POSTROUTING");
    assert!(
        no.why
            .starts_with("no SNAT: RETURN by KUBE-POSTROUTING rule 1: no mark 0x4000"),
        "{}",
        no.why
    );

    let from_pod = t(PROTO_TCP, "10.13.76.46:5000", "203.0.113.174:80");
    let d = rules
        .dnat_decision(&from_pod, &post("10.13.76.46:5000"), &c)
        .unwrap();
    assert!(
        d.why
            .contains("KUBE-EXT-7G2JV7LNOR6DDNIY → KUBE-SVC-7G2JV7LNOR6DDNIY"),
        "{}",
        d.why
    );
    assert!(!d.why.contains("Local"), "{}", d.why);
}

/// The no-SNAT why is printed under the egress step in text, and as `rule`/`why` on it in JSON.
#[test]
fn no_snat_renders_on_the_egress_step() {
    use crate::output::{Sink as _, json::JsonSink, test_support::Shared, text::TextSink};
    let rules = ruleset(AZURE, None);
    let out = t(PROTO_TCP, "10.13.76.46:40000", "10.13.1.4:80");
    let mut j = Journey {
        steps: vec![
            step(Point::Ingress, None, out, Some("azv46")),
            step(Point::Egress, None, out, Some("eth0")),
        ],
        ending: Ending::Left,
    };
    let mut c = ctx("10.13.76.4", "eth0");
    c.sources = vec!["10.13.76.46".parse().unwrap()].into();
    rules.attribute_journey(&mut j, &c);
    let text = Shared::default();
    TextSink::new(Box::new(text.clone()), false, "default/ubuntu".into())
        .journey(&j)
        .unwrap();
    let text = text.text().replace('\n', " ");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains("egress eth0 no SNAT: RETURN by IP-MASQ-AGENT rule 1: 10.13.1.4 in nonMasqueradeCIDRs 10.13.0.0/16"),
        "{text}"
    );
    let json = Shared::default();
    JsonSink::new(Box::new(json.clone()), "default/ubuntu".into())
        .journey(&j)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json.text()).unwrap();
    assert_eq!(v["steps"][1]["rule"], "IP-MASQ-AGENT");
    assert!(
        v["steps"][1]["why"]
            .as_str()
            .unwrap()
            .starts_with("no SNAT: RETURN"),
        "{v}"
    );
    assert!(v["steps"][0].get("rule").is_none(), "{v}");
}

/// A pod recreated with a new IP: journeys from the new address are explained (no-SNAT why
/// on egress) once the explainer is told, and nothing cached for the old address is reused.
#[test]
fn recreated_pod_is_explained_from_its_new_address() {
    use std::{net::IpAddr, sync::Arc};
    let rules = Arc::new(ruleset(AZURE, None));
    let old: IpAddr = "10.13.76.46".parse().unwrap();
    let new: IpAddr = "10.13.76.60".parse().unwrap();
    let mut ex = Explainer::with_rules(
        Some(rules),
        vec!["10.13.76.4".parse().unwrap()],
        vec![old].into(),
    );
    let journey = || {
        let out = t(PROTO_TCP, "10.13.76.60:40000", "10.13.1.4:80");
        Journey {
            steps: vec![
                step(Point::Ingress, None, out, Some("azv60")),
                step(Point::Egress, None, out, Some("eth0")),
            ],
            ending: Ending::Left,
        }
    };
    let mut before = journey();
    ex.explain(&mut before);
    assert!(
        before.steps[1].attribution.is_none(),
        "{:?}",
        before.steps[1]
    );
    ex.set_sources(vec![new].into());
    let mut after = journey();
    ex.explain(&mut after);
    let a = after.steps[1]
        .attribution
        .as_ref()
        .expect("egress step explained");
    assert_eq!(a.rule, "IP-MASQ-AGENT", "{a:?}");
}
