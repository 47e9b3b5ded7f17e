//! Attribution on a dual-stack node: the IPv6 nat tables (ip6tables, nftables `ip6`) name
//! IPv6 steps, IPv4's tables never do, and IPv4 steps are named as on a single-stack node.

use std::net::IpAddr;

use tracer_common::{PROTO_TCP, PROTO_UDP};

use super::*;
use crate::{
    rules::{Ruleset, ruleset::Raw},
    test_support::t,
};

const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");
/// The dual-stack lab's ip6tables nat table (`tests/lab/src/nat-rules6.txt`).
const DUAL6: &str = include_str!("../../tests-data/ip6tables-save-dual-stack.txt");

fn dual_stack() -> Ruleset {
    Ruleset::from_raw(&Raw {
        dumps: vec![
            ("iptables-nft".into(), AZURE.into()),
            ("ip6tables-nft".into(), DUAL6.into()),
        ],
        ..Raw::default()
    })
}

fn ctx() -> PacketCtx {
    PacketCtx {
        mark: 0,
        local_addrs: ["10.13.76.4", "fd13:76::4"]
            .map(|a| a.parse::<IpAddr>().unwrap())
            .to_vec(),
        out_iface: None,
        sources: vec![
            "10.13.76.46".parse().unwrap(),
            "fd13:76::2e".parse().unwrap(),
        ]
        .into(),
    }
}

#[test]
fn ipv6_dnat_is_named_by_the_ip6tables_rule_and_service() {
    let rules = dual_stack();
    assert!(rules.notes.is_empty(), "{:?}", rules.notes);
    let pre = t(PROTO_TCP, "[fd13:76::2e]:41234", "[fd00:10::9f3a]:80");
    let post = t(PROTO_TCP, "[fd13:76::2e]:41234", "[fd13:76::1a]:80");
    let d = rules.dnat_decision(&pre, &post, &ctx()).expect("named");
    assert_eq!(d.chain, "KUBE-SEP-5QWUHXJ7ZMEJ4DUS");
    assert_eq!(d.service.as_deref(), Some("default/whereami"));
    let dns_pre = t(PROTO_UDP, "[fd13:76::2e]:5353", "[fd00:10::a]:53");
    let dns_post = t(PROTO_UDP, "[fd13:76::2e]:5353", "[fd13:76::11]:53");
    let d = rules
        .dnat_decision(&dns_pre, &dns_post, &ctx())
        .expect("named");
    assert_eq!(d.chain, "KUBE-SEP-ZK2YDN4TWCBQ7MXE");
    assert_eq!(d.service.as_deref(), Some("kube-system/kube-dns"));
}

#[test]
fn ipv6_masquerade_is_ip_masq_agents_and_cluster_traffic_is_left_alone() {
    let rules = dual_stack();
    let out = t(PROTO_TCP, "[fd13:76::2e]:41234", "[2001:db8:113::80]:80");
    let d = rules.snat_decision(&out, &ctx()).expect("masqueraded");
    assert_eq!(
        (d.chain.as_str(), d.target.as_str()),
        ("IP-MASQ-AGENT", "MASQUERADE")
    );
    // IPv4's table masquerades 172.17.0.0/16 and everything outside 10.13.0.0/16: an IPv6
    // packet inside fd13::/16 must not be taken for either.
    let inside = t(PROTO_TCP, "[fd13:76::2e]:41234", "[fd13:76::1a]:80");
    assert_eq!(rules.snat_decision(&inside, &ctx()), None);
    let why = rules.no_snat_decision(&inside, &ctx()).expect("a why");
    assert_eq!(why.chain, "IP-MASQ-AGENT", "{why:?}");
}

#[test]
fn ipv4_steps_are_named_as_on_a_single_stack_node() {
    let dual = dual_stack();
    let single = Ruleset::from_raw(&Raw {
        dumps: vec![("iptables-nft".into(), AZURE.into())],
        ..Raw::default()
    });
    let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    let out = t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:80");
    assert_eq!(
        dual.dnat_decision(&pre, &post, &ctx()),
        single.dnat_decision(&pre, &post, &ctx())
    );
    assert_eq!(
        dual.snat_decision(&out, &ctx()),
        single.snat_decision(&out, &ctx())
    );
    assert_eq!(
        dual.dnat_decision(&pre, &post, &ctx()).map(|d| d.chain),
        Some("KUBE-SEP-6HBOEI5FVFTJNRJ3".into())
    );
}

#[test]
fn nftables_tables_see_the_families_their_hooks_do() {
    let table = |family: &str| {
        format!(
            r#"{{"nftables": [{{"table": {{"family": "{family}", "name": "masq"}}}},
            {{"chain": {{"family": "{family}", "table": "masq", "name": "post", "type": "nat",
              "hook": "postrouting", "prio": 100, "policy": "accept"}}}},
            {{"rule": {{"family": "{family}", "table": "masq", "chain": "post",
              "expr": [{{"masquerade": null}}]}}}}]}}"#
        )
    };
    let v4 = t(PROTO_TCP, "10.13.76.46:1", "203.0.113.80:80");
    let v6 = t(PROTO_TCP, "[fd13:76::2e]:1", "[2001:db8:113::80]:80");
    for (family, sees_v4, sees_v6) in [
        ("ip", true, false),
        ("ip6", false, true),
        ("inet", true, true),
    ] {
        let rules = Ruleset::from_raw(&Raw {
            nft_json: vec![table(family)],
            ..Raw::default()
        });
        assert_eq!(rules.tables.len(), 1, "{family}: {:?}", rules.notes);
        let got = |p| rules.snat_decision(p, &ctx()).is_some();
        assert_eq!((got(&v4), got(&v6)), (sees_v4, sees_v6), "{family}");
    }
}
