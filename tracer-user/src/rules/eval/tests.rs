use std::net::IpAddr;

use super::{Fact, conds::iface_match, render_facts};

#[test]
fn interface_patterns() {
    let cases = [
        ("eth0", "eth0", true),
        ("eth+", "eth1", true),
        ("eth+", "azure0", false),
        ("+", "x", true),
        ("docker0", "docker01", false),
    ];
    for (pat, name, want) in cases {
        assert_eq!(iface_match(pat, name), want, "{pat} {name}");
    }
}

#[test]
fn facts_render_grouped() {
    let ip: IpAddr = "203.0.113.80".parse().unwrap();
    let cases: Vec<(Vec<Fact>, &str)> = vec![
        (vec![], ""),
        (
            vec![
                Fact::NotIn {
                    who: ip,
                    net: "10.13.0.0/16".into(),
                    label: Some("nonMasqueradeCIDRs"),
                },
                Fact::NotIn {
                    who: ip,
                    net: "168.63.129.16/32".into(),
                    label: Some("nonMasqueradeCIDRs"),
                },
            ],
            "203.0.113.80 not in nonMasqueradeCIDRs 10.13.0.0/16, 168.63.129.16/32",
        ),
        (
            vec![
                Fact::Text("mark 0x4000".into()),
                Fact::Text("mark 0x4000".into()),
                Fact::NotIn {
                    who: ip,
                    net: "a".into(),
                    label: None,
                },
            ],
            "203.0.113.80 not in a; mark 0x4000",
        ),
    ];
    for (facts, want) in cases {
        assert_eq!(render_facts(&facts), want);
    }
}
