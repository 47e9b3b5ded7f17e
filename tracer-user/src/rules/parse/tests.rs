use super::*;

fn rule(line: &str) -> Rule {
    let rules = NatRules::parse(line);
    rules
        .chains()
        .flat_map(|c| c.rules.clone())
        .next()
        .expect(line)
}

fn cond(negated: bool, test: Test) -> Cond {
    Cond { negated, test }
}

fn cidr(s: &str) -> Cidr {
    Cidr::parse(s).unwrap()
}

#[test]
fn splits_quoted_words() {
    let cases: &[(&str, &[&str])] = &[
        ("-A X -j Y", &["-A", "X", "-j", "Y"]),
        (r#"--comment "a b" x"#, &["--comment", "a b", "x"]),
        (r#"--comment "say \"hi\"""#, &["--comment", r#"say "hi""#]),
        (r#"--comment """#, &["--comment", ""]),
        (r#""unterminated"#, &["unterminated"]),
        ("  ", &[]),
    ];
    for (line, want) in cases {
        assert_eq!(split(line), *want, "{line}");
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of rule lines and their parses, a few lines each"
)]
fn parses_rules() {
    let cases: Vec<(&str, Vec<Cond>, Target, Option<&str>)> = vec![
        (
            r#"-A KUBE-SERVICES ! -s 10.13.76.0/24 -d 10.0.159.58/32 -p tcp -m comment --comment "default/whereami: cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ"#,
            vec![
                cond(true, Test::Src(cidr("10.13.76.0/24"))),
                cond(false, Test::Dst(cidr("10.0.159.58/32"))),
                cond(false, Test::Proto(6)),
                cond(false, Test::Dport(vec![(80, 80)])),
            ],
            Target::Jump("KUBE-MARK-MASQ".into()),
            Some("default/whereami: cluster IP"),
        ),
        (
            "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
            vec![cond(
                true,
                Test::Mark {
                    value: 0x4000,
                    mask: 0x4000,
                },
            )],
            Target::Return,
            None,
        ),
        (
            "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
            vec![],
            Target::Mark {
                clear: 0x4000,
                xor: 0x4000,
            },
            None,
        ),
        (
            "-A P -m addrtype ! --dst-type LOCAL -o eth0 -m iprange --dst-range 10.0.0.1-10.0.0.9 -g IP-MASQ",
            vec![
                cond(
                    true,
                    Test::AddrType {
                        dst: true,
                        kind: "LOCAL".into(),
                    },
                ),
                cond(false, Test::OutIface("eth0".into())),
                cond(
                    false,
                    Test::Range {
                        dst: true,
                        lo: "10.0.0.1".parse().unwrap(),
                        hi: "10.0.0.9".parse().unwrap(),
                    },
                ),
            ],
            Target::Goto("IP-MASQ".into()),
            None,
        ),
        (
            "-A S -m statistic --mode random --probability 0.5 -j KUBE-SEP-A",
            vec![cond(false, Test::Statistic)],
            Target::Jump("KUBE-SEP-A".into()),
            None,
        ),
        (
            "-A C -m set --match-set cali40masq-ipam-pools src -m set ! --match-set all dst,src --return-nomatch ! --update-counters -j MASQUERADE --random-fully",
            vec![
                cond(
                    false,
                    Test::Set(SetMatch {
                        name: "cali40masq-ipam-pools".into(),
                        dst: vec![false],
                        return_nomatch: false,
                    }),
                ),
                cond(
                    true,
                    Test::Set(SetMatch {
                        name: "all".into(),
                        dst: vec![true, false],
                        return_nomatch: true,
                    }),
                ),
            ],
            Target::Masquerade,
            None,
        ),
        (
            "-A C -p udp -m multiport --dports 53,8000:8080 -m connmark --mark 0x1 -j DNAT --to-destination [fd00::1]:53",
            vec![
                cond(false, Test::Proto(17)),
                cond(false, Test::Dport(vec![(53, 53), (8000, 8080)])),
                cond(false, Test::Unknown("-m connmark --mark 0x1".into())),
            ],
            Target::Dnat(Some(NatTo {
                lo: "fd00::1".parse().unwrap(),
                hi: "fd00::1".parse().unwrap(),
                ports: Some((53, 53)),
            })),
            None,
        ),
        (
            "[5:300] -A C -s 10.0.0.0/255.255.0.0 -d bogus -j SNAT --to-source 192.0.2.1-192.0.2.9:1024-2048",
            vec![
                cond(false, Test::Src(cidr("10.0.0.0/16"))),
                cond(false, Test::Unknown("-d (unreadable value)".into())),
            ],
            Target::Snat(Some(NatTo {
                lo: "192.0.2.1".parse().unwrap(),
                hi: "192.0.2.9".parse().unwrap(),
                ports: Some((1024, 2048)),
            })),
            None,
        ),
        (
            "-A C -p",
            vec![cond(false, Test::Unknown("-p (unreadable value)".into()))],
            Target::None,
            None,
        ),
        ("-A C -j", vec![], Target::None, None),
        ("-A C !", vec![], Target::None, None),
    ];
    for (line, conds, target, comment) in cases {
        let r = rule(line);
        assert_eq!(r.conds, conds, "{line}");
        assert_eq!(r.target, target, "{line}");
        assert_eq!(r.comment.as_deref(), comment, "{line}");
    }
}

#[test]
fn parses_dumps_leniently() {
    let text = "# c\n*filter\n-A INPUT -j ACCEPT\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:EMPTY - [0:0]\n\
                -N KUBE-X\n-P OUTPUT ACCEPT\n-A PREROUTING -j KUBE-X\ngarbage line\n:\nCOMMIT\n";
    let rules = NatRules::parse(text);
    let names: Vec<&str> = rules.chains().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["PREROUTING", "EMPTY", "KUBE-X", "OUTPUT"]);
    assert_eq!((rules.rule_count(), rules.skipped_lines), (1, 3));
    assert!(rules.chain("EMPTY").is_some_and(|c| c.rules.is_empty()));

    let fixture = NatRules::parse(include_str!(
        "../../../tests-data/iptables-save-azure-cni.txt"
    ));
    assert_eq!((fixture.rule_count(), fixture.skipped_lines), (31, 0));
    assert!(
        fixture
            .chains()
            .flat_map(|c| &c.rules)
            .all(|r| r.conds.iter().all(|c| !matches!(c.test, Test::Unknown(_))))
    );
}

#[test]
fn cidrs_and_ranges() {
    let cases = [
        ("10.13.0.0/16", "10.13.76.46", true),
        ("10.13.0.0/16", "10.14.0.1", false),
        ("0.0.0.0/0", "203.0.113.80", true),
        ("168.63.129.16/32", "168.63.129.16", true),
        ("168.63.129.16", "168.63.129.17", false),
        ("10.0.0.0/255.0.0.0", "10.9.9.9", true),
        ("fd00::/8", "fd12::1", true),
        ("fd00::/8", "10.0.0.1", false),
        ("0.0.0.0/0", "::1", false),
        ("::/0", "::1", true),
    ];
    for (c, ip, want) in cases {
        assert_eq!(cidr(c).contains(ip.parse().unwrap()), want, "{c} {ip}");
    }
    for bad in [
        "10.0.0.0/33",
        "10.0.0.0/255.0.255.0",
        "x/8",
        "fd00::/129",
        "",
    ] {
        assert_eq!(Cidr::parse(bad), None, "{bad}");
    }
    let to = nat_to("10.13.76.26:80").unwrap();
    assert!(to.covers("10.13.76.26".parse().unwrap(), 80));
    assert!(!to.covers("10.13.76.26".parse().unwrap(), 81));
    assert!(
        nat_to("10.13.76.26")
            .unwrap()
            .covers("10.13.76.26".parse().unwrap(), 9)
    );
    assert!(
        nat_to("fd00::1")
            .unwrap()
            .covers("fd00::1".parse().unwrap(), 9)
    );
    for bad in ["", "x:80", "10.0.0.1:x", "[fd00::1", "10.0.0.1-x"] {
        assert_eq!(nat_to(bad), None, "{bad}");
    }
}
