//! Native nftables rules from real `nft -j list ruleset` output (nft 1.0.6): a kube-proxy
//! nftables-mode table and an ip-masq-agent-like table next to an iptables-nft `ip nat`
//! table (tests-data/nft-kube-proxy.nft says how the JSON was made).

use std::net::IpAddr;

use tracer_common::{PROTO_TCP, PROTO_UDP};

use super::{super::*, *};
use crate::{explain::Attribute as _, test_support::t};

const JSON: &str = include_str!("../../../tests-data/nft-kube-proxy.json");
const AZURE: &str = include_str!("../../../tests-data/iptables-save-azure-cni.txt");

fn ctx(mark: u32, out: &str) -> PacketCtx {
    PacketCtx {
        mark,
        local_addrs: vec!["10.13.76.4".parse::<IpAddr>().unwrap()],
        out_iface: Some(out.into()),
        sources: crate::traced::TracedAddrs::default(),
    }
}

fn native() -> Ruleset {
    Ruleset::from_raw(&ruleset::Raw {
        nft_json: vec![JSON.into()],
        ..ruleset::Raw::default()
    })
}

#[test]
fn native_tables_only_in_priority_order() {
    for skip in [true, false] {
        let tables = parse(JSON, skip).unwrap();
        let labels: Vec<&str> = tables.iter().map(|t| t.label.as_str()).collect();
        // `ip nat` is iptables-nft's (xt compat): read through iptables-nft-save instead.
        assert_eq!(
            labels,
            ["nft table ip kube-proxy", "nft table ip masq-agent"]
        );
    }
    let tables = parse(JSON, true).unwrap();
    assert_eq!(
        tables[0].bases_of(Hook::Prerouting),
        [(-100, "nat-prerouting")]
    );
    assert_eq!(
        tables[1].bases_of(Hook::Postrouting),
        [(110, "postrouting")]
    );
    assert_eq!(tables[0].nft_maps["service-ips"].len(), 3);
    assert_eq!(tables[1].nft_sets["nonmasq"].len(), 2);
    assert!(matches!(parse("{}", true), Err(NftError::Shape)));
    assert!(matches!(parse("nope", true), Err(NftError::Json(_))));
}

#[test]
fn kube_proxy_nftables_mode_dnat() {
    let rules = native();
    let whereami = Some("default/whereami");
    let a = "endpoint-AAAAAAAA-default/whereami/tcp/__10.13.76.26/80";
    let b = "endpoint-BBBBBBBB-default/whereami/tcp/__10.13.76.7/80";
    let cases = [
        // ClusterIP from a pod: the services map, then the numgen branch that was taken.
        (
            PROTO_TCP,
            "10.13.76.46:41234",
            "10.0.159.58:80",
            "10.13.76.26:80",
            a,
            whereami,
            0,
        ),
        (
            PROTO_TCP,
            "10.13.76.46:41235",
            "10.0.159.58:80",
            "10.13.76.7:80",
            b,
            whereami,
            0,
        ),
        // LoadBalancer IP from the internet: external- chain marks for masquerade.
        (
            PROTO_TCP,
            "198.51.100.7:5000",
            "203.0.113.251:80",
            "10.13.76.26:80",
            a,
            whereami,
            0x4000,
        ),
        // NodePort on the node's address (fib daddr type local).
        (
            PROTO_TCP,
            "198.51.100.7:5001",
            "10.13.76.4:30064",
            "10.13.76.7:80",
            b,
            whereami,
            0x4000,
        ),
        (
            PROTO_UDP,
            "10.13.76.46:5353",
            "10.0.0.10:53",
            "10.13.76.17:53",
            "endpoint-CCCCCCCC-kube-system/kube-dns/udp/dns__10.13.76.17/53",
            Some("kube-system/kube-dns"),
            0,
        ),
    ];
    for (proto, src, dst, to, rule, service, mark) in cases {
        let d = rules
            .dnat_decision(&t(proto, src, dst), &t(proto, src, to), &ctx(0, "eth0"))
            .unwrap_or_else(|| panic!("{src} → {dst}"));
        assert_eq!(
            (d.chain.as_str(), d.service.as_deref(), d.mark),
            (rule, service, mark),
            "{src} → {dst}: {}",
            d.why
        );
        assert!(!d.why.contains("assumed"), "{}", d.why);
    }
    // A tuple no map holds is not explained.
    let pre = t(PROTO_TCP, "10.13.76.46:1", "10.0.159.58:81");
    assert_eq!(
        rules.dnat_decision(
            &pre,
            &t(PROTO_TCP, "10.13.76.46:1", "10.13.76.99:81"),
            &ctx(0, "eth0")
        ),
        None
    );
}

#[test]
fn masquerade_marks_and_a_second_native_table() {
    let rules = native();
    let pod_out = t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:443");
    // Marked by kube-proxy: its masquerading chain, which also clears the mark.
    let d = rules.snat_decision(&pod_out, &ctx(0x4000, "eth0")).unwrap();
    assert_eq!(
        (d.chain.as_str(), d.rule_index, d.mark),
        ("masquerading", 3, 0),
        "{}",
        d.why
    );
    assert!(
        d.why.starts_with("MASQUERADE by masquerading rule 3"),
        "{}",
        d.why
    );
    // Unmarked: kube-proxy returns, the masq-agent table (srcnat+10) masquerades.
    let d = rules.snat_decision(&pod_out, &ctx(0, "eth0")).unwrap();
    assert_eq!(
        (d.chain.as_str(), d.rule_index),
        ("postrouting", 3),
        "{}",
        d.why
    );
    assert!(!d.why.contains("assumed"), "{}", d.why);
    // Not out of eth*: nobody masquerades.
    assert_eq!(rules.snat_decision(&pod_out, &ctx(0, "azv1")), None);
    // Inside the VNet: the nonmasq set returns.
    let vnet = t(PROTO_TCP, "10.13.76.46:41234", "10.13.1.4:80");
    assert_eq!(rules.snat_decision(&vnet, &ctx(0, "eth0")), None);
    let d = rules.no_snat_decision(&vnet, &ctx(0, "eth0")).unwrap();
    assert_eq!(d.chain, "postrouting");
    assert!(
        d.why
            .starts_with("no SNAT: RETURN by postrouting rule 2: daddr 10.13.1.4 in set @nonmasq"),
        "{}",
        d.why
    );
}

/// iptables-nft and native tables together: both are evaluated, by priority.
#[test]
fn iptables_and_native_tables_together() {
    let rules = Ruleset::from_raw(&ruleset::Raw {
        dumps: vec![("iptables-nft".into(), AZURE.into())],
        nft_json: vec![JSON.into()],
        ..ruleset::Raw::default()
    });
    let labels: Vec<&str> = rules.tables.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "iptables-nft",
            "nft table ip kube-proxy",
            "nft table ip masq-agent"
        ]
    );
    let out = t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:443");
    let d = rules.snat_decision(&out, &ctx(0, "eth0")).unwrap();
    assert_eq!(d.chain, "IP-MASQ-AGENT", "{}", d.why);
    assert!(rules.notes.is_empty(), "{:?}", rules.notes);

    let two = Ruleset::from_raw(&ruleset::Raw {
        dumps: vec![
            ("iptables-legacy".into(), AZURE.into()),
            ("iptables-nft".into(), AZURE.into()),
        ],
        ..ruleset::Raw::default()
    });
    assert!(
        two.notes.iter().any(|n| n.contains("the kernel runs both")),
        "{:?}",
        two.notes
    );
}

#[test]
fn kube_proxy_nft_chain_names_give_the_service() {
    let cases = [
        ("service-ULMVA6XW-ns1/svc1/tcp/p80", Some("ns1/svc1")),
        (
            "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80",
            Some("ns1/svc1"),
        ),
        ("external-ULMVA6XW-ns1/svc1/tcp/p80", Some("ns1/svc1")),
        ("services", None),
        ("service-X", None),
        ("KUBE-SEP-ABC", None),
    ];
    for (chain, want) in cases {
        assert_eq!(service_of_chain(chain).as_deref(), want, "{chain}");
    }
}

#[test]
fn mark_statements() {
    use serde_json::json;
    let meta = json!({"meta": {"key": "mark"}});
    let cases = [
        (json!(16384), (u32::MAX, 0x4000)),
        (json!({"|": [meta, 16384]}), (0x4000, 0x4000)),
        (json!({"^": [meta, 16384]}), (0, 0x4000)),
        (json!({"&": [meta, 0xffff_bfff_u32]}), (0x4000, 0)),
    ];
    for (value, want) in cases {
        assert_eq!(mark_expr(&value), Some(want), "{value}");
    }
}
