//! Attribution against the real-shaped nat table of an AKS node (Azure CNI, kube-proxy
//! iptables mode, ip-masq-agent) and the rules quoted in the seeds.

use std::net::IpAddr;

use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, Tuple};

use super::*;
use crate::{
    journey::Ending,
    rules::{ExplainError, NatRules, Target, service_of, source},
    test_support::t,
};

const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");
const SEED001: &str = include_str!("../../tests-data/iptables-seed001-azure-cni.txt");
/// kube-proxy ≥ 1.20 writes KUBE-POSTROUTING like this: return unless marked, clear the
/// mark, masquerade.
const NEW_KUBE_POSTROUTING: &str = "*nat
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
COMMIT
";
/// Calico's outgoing NAT (seed 000): ipset matches pktrace cannot check.
const CALICO: &str = "*nat
-A POSTROUTING -j LOG --log-prefix \"nat: \"
-A POSTROUTING -m comment --comment \"cali:O3lYWMrLQYEMJtB5\" -j cali-POSTROUTING
-A cali-POSTROUTING -m comment --comment \"cali:Z-c7XtVd2Bq7s_hA\" -j cali-nat-outgoing
-A cali-nat-outgoing -m comment --comment \"cali:flqWnvo8yq4ULQLa\" -m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst -j MASQUERADE --random-fully
COMMIT
";
/// Chains that jump into each other: the walk must stop.
const LOOP: &str = "-A POSTROUTING -j A\n-A A -j B\n-A B -j A\n-A B -j MASQUERADE\n";

const NODE: &str = "10.13.76.4";

fn ctx(mark: u32, out_iface: Option<&str>) -> PacketCtx {
    PacketCtx {
        mark,
        local_addrs: vec![
            NODE.parse::<IpAddr>().unwrap(),
            "10.220.2.4".parse().unwrap(),
        ],
        out_iface: out_iface.map(str::to_owned),
        sources: vec!["10.13.76.46".parse().unwrap()].into(),
    }
}

fn nat_step(point: Point, orig: Tuple, tuple: Tuple, reply: bool) -> Step {
    let mut s = Step::nat_at(point, orig, tuple, 0);
    s.nat_mut().reply = reply;
    s
}

fn tc_step(point: Point, tuple: Tuple) -> Step {
    Step::tc_at(point, Some("eth0"), tuple, 0)
}

struct DnatCase {
    table: &'static str,
    proto: u8,
    src: &'static str,
    dst: &'static str,
    to: &'static str,
    /// Expected chain, service, parts of `why`, mark after.
    want: Option<(
        &'static str,
        Option<&'static str>,
        &'static [&'static str],
        u32,
    )>,
}

#[test]
#[expect(clippy::too_many_lines, reason = "a table of cases, a few lines each")]
fn dnat_decisions() {
    let cases = [
        DnatCase {
            table: AZURE,
            proto: PROTO_TCP,
            src: "10.13.76.46:41234",
            dst: "10.0.159.58:80",
            to: "10.13.76.26:80",
            want: Some((
                "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                Some("default/whereami"),
                &[
                    "DNAT by KUBE-SEP-6HBOEI5FVFTJNRJ3 (service default/whereami via KUBE-SVC-7G2JV7LNOR6DDNIY, 1 of 2 endpoints)",
                ],
                0,
            )),
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_TCP,
            src: "10.13.76.46:41235",
            dst: "10.0.159.58:80",
            to: "10.13.76.7:80",
            want: Some((
                "KUBE-SEP-IJTMGMPNVALZGJZD",
                Some("default/whereami"),
                &["2 of 2 endpoints"],
                0,
            )),
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_UDP,
            src: "10.13.76.46:5353",
            dst: "10.0.0.10:53",
            to: "10.13.76.17:53",
            want: Some((
                "KUBE-SEP-DNSA5WQ4ZDRJQTVF",
                Some("kube-system/kube-dns"),
                &["service kube-system/kube-dns via KUBE-SVC-TCOU7JCQXEZGVUNU, its only endpoint"],
                0,
            )),
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_TCP,
            src: "198.51.100.7:5000",
            dst: "203.0.113.251:80",
            to: "10.13.76.26:80",
            want: Some((
                "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                Some("default/whereami"),
                &["via KUBE-FW-7G2JV7LNOR6DDNIY → KUBE-SVC-7G2JV7LNOR6DDNIY"],
                0x4000,
            )),
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_TCP,
            src: "198.51.100.7:5001",
            dst: "10.13.76.4:30064",
            to: "10.13.76.7:80",
            want: Some((
                "KUBE-SEP-IJTMGMPNVALZGJZD",
                Some("default/whereami"),
                &["via KUBE-NODEPORTS → KUBE-SVC-"],
                0x4000,
            )),
        },
        DnatCase {
            // Hairpin: a backend reaching its own service is marked for masquerade.
            table: AZURE,
            proto: PROTO_TCP,
            src: "10.13.76.26:5555",
            dst: "10.0.159.58:80",
            to: "10.13.76.26:80",
            want: Some((
                "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                Some("default/whereami"),
                &["1 of 2 endpoints"],
                0x4000,
            )),
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_TCP,
            src: "10.13.76.46:1",
            dst: "10.0.9.9:80",
            to: "10.99.0.1:80",
            want: None,
        },
        DnatCase {
            table: AZURE,
            proto: PROTO_UDP,
            src: "10.13.76.46:1",
            dst: "10.0.159.58:80",
            to: "10.13.76.26:80",
            want: None,
        },
        DnatCase {
            // The seed's SEP rules carry no comment: the service comes from KUBE-SERVICES.
            table: SEED001,
            proto: PROTO_TCP,
            src: "10.220.2.50:40000",
            dst: "10.200.211.157:80",
            to: "10.220.2.28:80",
            want: Some((
                "KUBE-SEP-3OT3PH67SPCSYRVE",
                Some("default/nginx"),
                &["(service default/nginx via KUBE-SVC-4N57TFCL4MD7ZTDA, 1 of 3 endpoints)"],
                0,
            )),
        },
        DnatCase {
            table: SEED001,
            proto: PROTO_TCP,
            src: "10.220.2.50:1",
            dst: "10.200.211.157:80",
            to: "10.220.2.99:80",
            want: None,
        },
    ];
    for c in cases {
        let rules = NatRules::parse(c.table);
        let (pre, post) = (t(c.proto, c.src, c.dst), t(c.proto, c.src, c.to));
        let got = rules.dnat_decision(&pre, &post, &ctx(0, None));
        let label = format!("{} → {} ⇒ {}", c.src, c.dst, c.to);
        match (got, c.want) {
            (None, None) => {}
            (Some(d), Some((chain, service, why, mark))) => {
                assert_eq!(
                    (d.chain.as_str(), d.service.as_deref(), d.target.as_str()),
                    (chain, service, "DNAT"),
                    "{label}"
                );
                assert_eq!(d.mark, mark, "{label}");
                for part in why {
                    assert!(d.why.contains(part), "{label}: {}", d.why);
                }
                assert!(!d.why.contains("assumed"), "{label}: {}", d.why);
            }
            (got, want) => panic!("{label}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn dnat_of_an_address_the_replay_cannot_reach_is_found_backwards() {
    // Packet from OUTPUT-less table with an unknown pre-destination: the replay finds no
    // candidate, so the first candidate is taken with its path guessed backwards.
    let rules = NatRules::parse(AZURE);
    let pre = t(PROTO_TCP, "10.13.76.46:1", "10.0.1.1:80");
    let post = t(PROTO_TCP, "10.13.76.46:1", "10.13.76.26:80");
    let d = rules.dnat_decision(&pre, &post, &ctx(0, None)).unwrap();
    assert_eq!(d.chain, "KUBE-SEP-6HBOEI5FVFTJNRJ3");
    assert_eq!(d.service.as_deref(), Some("default/whereami"));
    assert!(
        d.why
            .contains("[assumed: path found backwards, not replayed]"),
        "{}",
        d.why
    );
}

struct SnatCase {
    table: &'static str,
    src: &'static str,
    dst: &'static str,
    mark: u32,
    out: Option<&'static str>,
    /// Expected chain, 1-based rule, `why` parts, mark after.
    want: Option<(&'static str, usize, &'static [&'static str], u32)>,
}

#[test]
#[expect(clippy::too_many_lines, reason = "a table of cases, a few lines each")]
fn snat_decisions() {
    let cases = [
        SnatCase {
            table: AZURE,
            src: "10.13.76.46:41234",
            dst: "203.0.113.80:443",
            mark: 0,
            out: Some("eth0"),
            want: Some((
                "IP-MASQ-AGENT",
                3,
                &[
                    "MASQUERADE by IP-MASQ-AGENT rule 3: 203.0.113.80 not in nonMasqueradeCIDRs 10.13.0.0/16, 168.63.129.16/32",
                ],
                0,
            )),
        },
        SnatCase {
            table: AZURE,
            src: "10.13.76.46:41234",
            dst: "10.13.1.4:80",
            mark: 0,
            out: None,
            want: None,
        },
        SnatCase {
            table: AZURE,
            src: "10.13.76.46:41234",
            dst: "168.63.129.16:53",
            mark: 0,
            out: None,
            want: None,
        },
        SnatCase {
            table: AZURE,
            src: "10.13.76.46:41234",
            dst: "10.13.76.4:10250",
            mark: 0,
            out: None,
            want: None,
        },
        SnatCase {
            table: AZURE,
            src: "198.51.100.7:5000",
            dst: "10.13.76.26:80",
            mark: 0x4000,
            out: Some("azv47c3ee9d512"),
            want: Some((
                "KUBE-POSTROUTING",
                1,
                &["MASQUERADE by KUBE-POSTROUTING rule 1: mark 0x4000 (KUBE-MARK-MASQ)"],
                0x4000,
            )),
        },
        SnatCase {
            table: AZURE,
            src: "172.17.0.2:1",
            dst: "203.0.113.80:443",
            mark: 0,
            out: Some("eth0"),
            want: Some((
                "POSTROUTING",
                2,
                &["rule 2: 172.17.0.2 in 172.17.0.0/16, out not docker0"],
                0,
            )),
        },
        SnatCase {
            table: AZURE,
            src: "172.17.0.2:1",
            dst: "203.0.113.80:443",
            mark: 0,
            out: None,
            want: Some((
                "POSTROUTING",
                2,
                &["[assumed: interface unknown for `! -o docker0`]"],
                0,
            )),
        },
        SnatCase {
            table: AZURE,
            src: "172.17.0.2:1",
            dst: "203.0.113.80:443",
            mark: 0,
            out: Some("docker0"),
            want: Some(("IP-MASQ-AGENT", 3, &["rule 3"], 0)), // docker0: the docker rule does not apply
        },
        SnatCase {
            table: SEED001,
            src: "10.220.2.50:40000",
            dst: "198.51.100.10:443",
            mark: 0,
            out: Some("eth0"),
            want: Some((
                "IP-MASQ-AGENT",
                4,
                &[
                    "MASQUERADE by IP-MASQ-AGENT rule 4: 198.51.100.10 not in nonMasqueradeCIDRs 10.220.0.0/16, 10.220.2.0/24, 10.200.0.0/16",
                ],
                0,
            )),
        },
        SnatCase {
            table: SEED001,
            src: "10.220.2.50:40000",
            dst: "10.200.0.10:53",
            mark: 0,
            out: None,
            want: None,
        },
        SnatCase {
            table: NEW_KUBE_POSTROUTING,
            src: "10.0.0.1:1",
            dst: "10.0.0.2:2",
            mark: 0x4000,
            out: None,
            want: Some((
                "KUBE-POSTROUTING",
                3,
                &["MASQUERADE by KUBE-POSTROUTING rule 3: mark 0x4000 (KUBE-MARK-MASQ)"],
                0,
            )),
        },
        SnatCase {
            table: NEW_KUBE_POSTROUTING,
            src: "10.0.0.1:1",
            dst: "10.0.0.2:2",
            mark: 0,
            out: None,
            want: None,
        },
        SnatCase {
            table: CALICO,
            src: "10.13.76.46:1",
            dst: "203.0.113.80:443",
            mark: 0,
            out: None,
            want: Some((
                "cali-nat-outgoing",
                1,
                &["MASQUERADE by cali-nat-outgoing rule 1 [assumed: \
                     ipset cali40masq-ipam-pools not read; \
                     ipset cali40all-ipam-pools not read]"],
                0,
            )),
        },
        SnatCase {
            table: LOOP,
            src: "10.0.0.1:1",
            dst: "10.0.0.2:2",
            mark: 0,
            out: None,
            want: Some(("B", 2, &["rule 2"], 0)),
        },
        SnatCase {
            table: "",
            src: "10.0.0.1:1",
            dst: "10.0.0.2:2",
            mark: 0,
            out: None,
            want: None,
        },
    ];
    for c in cases {
        let rules = NatRules::parse(c.table);
        let pre = t(PROTO_TCP, c.src, c.dst);
        let got = rules.snat_decision(&pre, &ctx(c.mark, c.out));
        let label = format!("{} → {} mark {:#x} out {:?}", c.src, c.dst, c.mark, c.out);
        match (got, c.want) {
            (None, None) => {}
            (Some(d), Some((chain, rule, why, mark))) => {
                assert_eq!(
                    (d.chain.as_str(), d.rule_index, d.mark),
                    (chain, rule, mark),
                    "{label}: {}",
                    d.why
                );
                for part in why {
                    assert!(d.why.contains(part), "{label}: {}", d.why);
                }
                assert_eq!(d.service, None);
            }
            (got, want) => panic!("{label}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn icmp_and_ipv6_do_not_confuse_the_walk() {
    let rules = NatRules::parse(AZURE);
    let icmp = t(PROTO_ICMP, "10.13.76.46", "203.0.113.80");
    assert_eq!(
        rules.snat_decision(&icmp, &ctx(0, None)).map(|d| d.chain),
        Some("IP-MASQ-AGENT".into())
    );
    let v6 = t(PROTO_TCP, "[fd00::2e]:1", "[2001:db8::1]:443");
    assert_eq!(
        rules
            .snat_decision(&v6, &ctx(0, None))
            .map(|d| d.rule_index),
        Some(3),
        "no IPv4 CIDR matches v6"
    );
    let post = t(PROTO_TCP, "[fd00::2e]:1", "[fd00::1a]:80");
    assert_eq!(rules.dnat_decision(&v6, &post, &ctx(0, None)), None);
}

#[test]
fn steps_and_replies() {
    /// Rule, service and the start of `why`.
    type Want = Option<(&'static str, Option<&'static str>, &'static str)>;
    let rules = NatRules::parse(AZURE);
    let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    let out = t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:443");
    let masq = t(PROTO_TCP, "10.13.76.4:61000", "203.0.113.80:443");
    let cases: Vec<(Step, Want)> = vec![
        (
            nat_step(Point::Dnat, pre, post, false),
            Some((
                "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                Some("default/whereami"),
                "DNAT by",
            )),
        ),
        (
            nat_step(Point::Dnat, post.reversed(), pre.reversed(), true),
            Some((
                "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                Some("default/whereami"),
                "reverse of DNAT by KUBE-SEP-6HBOEI5FVFTJNRJ3",
            )),
        ),
        (
            nat_step(Point::Snat, out, masq, false),
            Some(("IP-MASQ-AGENT", None, "MASQUERADE by IP-MASQ-AGENT rule 3")),
        ),
        (
            nat_step(Point::Snat, masq.reversed(), out.reversed(), true),
            Some((
                "IP-MASQ-AGENT",
                None,
                "reverse of MASQUERADE by IP-MASQ-AGENT rule 3",
            )),
        ),
        (tc_step(Point::Ingress, pre), None),
    ];
    for (step, want) in cases {
        let got = rules.attribute(&step, &ctx(0, Some("eth0")));
        match (&got, want) {
            (None, None) => {}
            (Some(a), Some((rule, service, why))) => {
                assert_eq!((a.rule.as_str(), a.service.as_deref()), (rule, service));
                assert!(
                    a.why.as_deref().is_some_and(|w| w.starts_with(why)),
                    "{a:?}"
                );
            }
            _ => panic!("{step:?}: got {got:?}"),
        }
    }
}

#[test]
fn journeys_carry_the_mark_from_dnat_to_snat() {
    let rules = NatRules::parse(AZURE);
    // Internet client → LoadBalancer VIP: KUBE-FW marks, KUBE-POSTROUTING masquerades.
    let pre = t(PROTO_TCP, "198.51.100.7:5000", "203.0.113.251:80");
    let dnat = t(PROTO_TCP, "198.51.100.7:5000", "10.13.76.26:80");
    let snat = t(PROTO_TCP, "10.13.76.4:62000", "10.13.76.26:80");
    let forward = vec![
        tc_step(Point::Ingress, pre),
        nat_step(Point::Dnat, pre, dnat, false),
        nat_step(Point::Snat, dnat, snat, false),
        tc_step(Point::Egress, snat),
    ];
    // Its reply: de-SNAT at PREROUTING, de-DNAT at POSTROUTING.
    let reply = vec![
        tc_step(Point::Ingress, snat.reversed()),
        nat_step(Point::Snat, snat.reversed(), dnat.reversed(), true),
        nat_step(Point::Dnat, dnat.reversed(), pre.reversed(), true),
        tc_step(Point::Egress, pre.reversed()),
    ];
    let sep = Some("KUBE-SEP-6HBOEI5FVFTJNRJ3");
    let masq = Some("KUBE-POSTROUTING");
    for (steps, want) in [
        (forward, [None, sep, masq, None]),
        (reply, [None, masq, sep, None]),
    ] {
        let mut j = Journey {
            steps,
            ending: Ending::Left,
        };
        rules.attribute_journey(&mut j, &ctx(0, None));
        let got: Vec<Option<&str>> = j
            .steps
            .iter()
            .map(|s| s.attribution.as_ref().map(|a| a.rule.as_str()))
            .collect();
        assert_eq!(got, want);
    }
    // Without the DNAT step, the same SNAT is still named, the mark assumed.
    let mut alone = Journey {
        steps: vec![nat_step(Point::Snat, dnat, snat, false)],
        ending: Ending::Left,
    };
    rules.attribute_journey(&mut alone, &ctx(0, None));
    let a = alone.steps[0].attribution.as_ref().expect("named");
    assert_eq!(a.rule, "KUBE-POSTROUTING");
    assert!(
        a.why
            .as_deref()
            .is_some_and(|w| w.contains("[assumed: mark 0x4000")),
        "{a:?}"
    );
}

#[test]
fn service_names_from_comments() {
    let cases = [
        (Some("default/whereami:"), Some("default/whereami")),
        (
            Some("kube-system/kube-dns:dns cluster IP"),
            Some("kube-system/kube-dns"),
        ),
        (
            Some("default/whereami: loadbalancer IP"),
            Some("default/whereami"),
        ),
        (
            Some("default/kubernetes:https cluster IP"),
            Some("default/kubernetes"),
        ),
        (Some("kubernetes service portals"), None),
        (Some("ip-masq-agent: local traffic"), None),
        (Some("a/b/c:x"), None),
        (Some("/x:"), None),
        (Some(""), None),
        (None, None),
    ];
    for (comment, want) in cases {
        let rule = Rule {
            conds: vec![],
            target: Target::None,
            comment: comment.map(str::to_owned),
        };
        assert_eq!(service_of(&rule).as_deref(), want, "{comment:?}");
    }
}

#[test]
fn loading_reports_what_to_do() {
    let missing = source::run("/nonexistent/iptables-save", &["-t", "nat"])
        .err()
        .unwrap();
    assert!(
        matches!(missing, ExplainError::NotInstalled { .. }),
        "{missing}"
    );
    assert!(missing.to_string().contains("install it"), "{missing}");
    let failed = source::run("false", &["-t", "nat"]).err().unwrap();
    assert!(matches!(failed, ExplainError::Failed { .. }), "{failed}");
    assert!(failed.to_string().contains("run as root"), "{failed}");
    assert!(
        failed.to_string().contains("`false -t nat` failed"),
        "{failed}"
    );
    let empty = source::run("true", &["-t", "nat"]).ok().unwrap();
    assert_eq!(NatRules::parse(&empty.stdout).rule_count(), 0);
}

#[test]
fn arbitrary_dumps_never_panic() {
    const WORDS: &[&str] = &[
        "-A",
        "POSTROUTING",
        "PREROUTING",
        "X",
        "Y",
        "-j",
        "-g",
        "X",
        "Y",
        "RETURN",
        "MASQUERADE",
        "DNAT",
        "SNAT",
        "MARK",
        "ACCEPT",
        "--to-destination",
        "10.0.0.2:80",
        "[fd00::1]:x",
        "10.0.0.1-10.0.0.0",
        "--set-xmark",
        "0x4000/0x4000",
        "0xzz",
        "!",
        "-s",
        "-d",
        "10.0.0.0/8",
        "10.0.0.0/99",
        "-p",
        "tcp",
        "999",
        "-m",
        "mark",
        "--mark",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "statistic",
        "--mode",
        "random",
        "--dport",
        "80:70",
        "1,2,x",
        "-o",
        "eth+",
        "-i",
        "iprange",
        "--src-range",
        "\"",
        "\\",
        "--comment",
        "\"a/b: c\"",
        "-c",
        "[1:2]",
        ":X",
        "*nat",
        "*filter",
        "COMMIT",
        "\n",
        "\n",
        "\n",
        "-N",
        "-P",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % WORDS.len() as u64).unwrap_or(0)
    };
    let pre = t(PROTO_TCP, "10.0.0.1:1000", "10.0.0.9:80");
    let post = t(PROTO_TCP, "10.0.0.1:1000", "10.0.0.2:80");
    for _ in 0..300 {
        let text: Vec<&str> = (0..120).map(|_| WORDS[next()]).collect();
        let rules = NatRules::parse(&text.join(" "));
        for mark in [0, 0x4000] {
            let _ = rules.snat_decision(&pre, &ctx(mark, None));
            let _ = rules.dnat_decision(&pre, &post, &ctx(mark, Some("eth0")));
        }
    }
}
