//! Which lost sources are said: over fake tools and kernels.

use std::{cell::RefCell, collections::HashMap};

use super::*;

const NAT_DUMP: &str = "*nat\n-A POSTROUTING -j MASQUERADE\nCOMMIT\n";
const SET_DUMP: &str =
    "*nat\n-A POSTROUTING -m set --match-set cali40masq-ipam-pools src -j MASQUERADE\nCOMMIT\n";

/// What each tool does on the fake node.
#[derive(Clone, Copy)]
enum Tool {
    Prints(&'static str),
    Fails,
    Missing,
}

struct Fake {
    tools: HashMap<&'static str, Tool>,
    calls: RefCell<Vec<String>>,
}

impl Fake {
    fn new(tools: &[(&'static str, Tool)]) -> Self {
        Self {
            tools: tools.iter().copied().collect(),
            calls: RefCell::new(Vec::new()),
        }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, ExplainError> {
        let command = format!("{program} {}", args.join(" "));
        self.calls.borrow_mut().push(command.clone());
        match self.tools.get(program).copied().unwrap_or(Tool::Missing) {
            Tool::Prints(text) => Ok(Output {
                stdout: text.to_owned(),
            }),
            Tool::Fails => Err(ExplainError::Failed {
                command,
                status: "exit status: 1".into(),
                stderr: "Operation not permitted".into(),
            }),
            Tool::Missing => Err(ExplainError::NotInstalled {
                tried: program.to_owned(),
            }),
        }
    }

    /// The lost lines of a read on a kernel holding `tables` (`None`: cannot tell).
    fn lost(&self, legacy_nat: bool, tables: Option<&[&str]>) -> Vec<String> {
        let run = |p: &str, a: &[&str]| self.run(p, a);
        let kernel_tables = tables.map(|t| {
            t.iter()
                .map(|s| {
                    let (f, n) = s.split_once(' ').unwrap();
                    (f.to_owned(), n.to_owned())
                })
                .collect()
        });
        let node = Node {
            run: &run,
            legacy_nat,
            legacy_nat6: false,
            kernel_tables,
        };
        match Raw::read_from(&node) {
            Ok(raw) => raw.lost.into_iter().map(|l| l.line).collect(),
            Err(e) => vec![format!("error: {e}")],
        }
    }
}

const NFT_MISSING: &str = "nft: not installed; nftables rules (kube-proxy nftables mode) will \
                           not be named (the kernel holds table ip kube-proxy)";

#[test]
fn a_missing_nft_is_said_when_the_kernel_holds_nftables_tables() {
    let fake = Fake::new(&[("iptables-nft-save", Tool::Prints(NAT_DUMP))]);
    let kube_proxy: &[&str] = &["ip nat", "ip kube-proxy", "ip6 kube-proxy"];
    assert_eq!(fake.lost(false, Some(kube_proxy)), [NFT_MISSING]);
    // Only iptables-nft's tables: nothing for nft to read, nothing said, nft not even run.
    fake.calls.borrow_mut().clear();
    assert!(fake.lost(false, Some(&["ip nat", "ip filter"])).is_empty());
    assert!(!fake.calls.borrow().iter().any(|c| c.starts_with("nft")));
    // The kernel cannot be asked: a missing nft is not evidence of lost rules.
    assert!(fake.lost(false, None).is_empty());
    // kube-proxy in nftables mode alone, with neither nft nor iptables: nothing can be
    // read, which is the one start-up error.
    let bare = Fake::new(&[]);
    let got = bare.lost(false, Some(&["ip kube-proxy"]));
    assert!(got[0].starts_with("error: none of"), "{got:?}");
}

#[test]
fn failing_tools_are_said_whatever_the_kernel_shows() {
    let fake = Fake::new(&[
        ("iptables-nft-save", Tool::Prints(NAT_DUMP)),
        ("nft", Tool::Fails),
    ]);
    assert_eq!(
        fake.lost(false, None),
        [
            "nft: `nft list tables` failed (exit status: 1): Operation not permitted; nftables \
          rules (kube-proxy nftables mode) will not be named"
        ]
    );
    let fake = Fake::new(&[
        ("iptables-nft-save", Tool::Fails),
        ("nft", Tool::Prints("table ip kube-proxy\n")),
    ]);
    let lost = fake.lost(false, Some(&["ip nat", "ip kube-proxy"]));
    assert_eq!(
        lost,
        [
            "iptables-nft-save: `iptables-nft-save -t nat` failed (exit status: 1): Operation not \
          permitted; iptables nat rules (kube-proxy iptables mode, ip-masq-agent) will not be \
          named"
        ]
    );
}

#[test]
fn missing_iptables_tools_are_said_when_the_kernel_holds_their_tables() {
    // The legacy backend holds nat, its tool is missing; iptables-nft's is fine.
    let fake = Fake::new(&[("iptables-nft-save", Tool::Prints(NAT_DUMP))]);
    assert_eq!(
        fake.lost(true, Some(&["ip nat"])),
        [
            "iptables-legacy-save: not installed; the legacy iptables nat table's rules (the \
          kernel holds one) will not be named"
        ]
    );
    // No iptables-nft-save nor iptables-save, iptables-nft's nat table in the kernel.
    let fake = Fake::new(&[("nft", Tool::Prints("table ip kube-proxy\n"))]);
    let want = "iptables-save: not installed; iptables nat rules (kube-proxy iptables mode, \
                ip-masq-agent) will not be named";
    assert_eq!(fake.lost(false, Some(&["ip nat", "ip kube-proxy"])), [want]);
    // …and without one: not applicable.
    assert!(fake.lost(false, Some(&["ip kube-proxy"])).is_empty());
    // Cannot tell: said.
    assert_eq!(fake.lost(false, None), [want]);
    // iptables 1.6: one iptables-save, no variants: nothing lost.
    let old = Fake::new(&[("iptables-save", Tool::Prints(NAT_DUMP))]);
    assert!(old.lost(false, Some(&["ip nat"])).is_empty());
}

#[test]
fn ipsets_the_rules_test_are_said_when_unread() {
    let fake = Fake::new(&[("iptables-nft-save", Tool::Prints(SET_DUMP))]);
    assert_eq!(
        fake.lost(false, Some(&["ip nat"])),
        ["ipset: not installed; `-m set` matches (Calico, kube-proxy) are assumed to hold"]
    );
    let fake = Fake::new(&[
        ("iptables-nft-save", Tool::Prints(SET_DUMP)),
        ("ipset", Tool::Prints("create x hash:net\n")),
    ]);
    assert!(fake.lost(false, Some(&["ip nat"])).is_empty());
    // No rule tests a set: ipset is not asked.
    let fake = Fake::new(&[("iptables-nft-save", Tool::Prints(NAT_DUMP))]);
    assert!(fake.lost(false, Some(&["ip nat"])).is_empty());
    assert!(!fake.calls.borrow().iter().any(|c| c.starts_with("ipset")));
}

#[test]
fn nothing_readable_is_one_error_not_lost_lines() {
    let fake = Fake::new(&[]);
    let got = fake.lost(false, None);
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("error: none of"), "{got:?}");
    let fake = Fake::new(&[("iptables-nft-save", Tool::Fails)]);
    let got = fake.lost(false, Some(&["ip nat"]));
    assert!(
        got[0].starts_with("error: `iptables-nft-save -t nat` failed"),
        "{got:?}"
    );
}

#[test]
fn each_tool_is_said_once_however_often_the_rules_are_read() {
    let said = Said::new();
    let lost = |tool: &str, line: &str| Lost {
        tool: tool.into(),
        line: line.into(),
    };
    let first = [lost("nft", "nft: a"), lost("ipset", "ipset: b")];
    assert_eq!(first_time(&said, &first), ["nft: a", "ipset: b"]);
    for _ in 0..100 {
        assert!(first_time(&said, &first).is_empty());
    }
    // Another reason later for a tool already said: still quiet; a new tool: said.
    let later = [
        lost("nft", "nft: c"),
        lost("iptables-save", "iptables-save: d"),
    ];
    assert_eq!(first_time(&said, &later), ["iptables-save: d"]);
}

#[test]
fn ip6tables_nat_is_read_beside_iptables_when_the_kernel_holds_it() {
    const NAT6_DUMP: &str = "*nat\n-A POSTROUTING ! -d fd13::/16 -j MASQUERADE\nCOMMIT\n";
    let fake = Fake::new(&[
        ("iptables-nft-save", Tool::Prints(NAT_DUMP)),
        ("ip6tables-nft-save", Tool::Prints(NAT6_DUMP)),
    ]);
    let run = |p: &str, a: &[&str]| fake.run(p, a);
    let tables = |t: &[&str]| {
        Some(
            t.iter()
                .map(|s| {
                    let (f, n) = s.split_once(' ').unwrap();
                    (f.to_owned(), n.to_owned())
                })
                .collect(),
        )
    };
    let read = |held: &[&str]| {
        Raw::read_from(&Node {
            run: &run,
            legacy_nat: false,
            legacy_nat6: false,
            kernel_tables: tables(held),
        })
        .unwrap()
    };
    let dual = read(&["ip nat", "ip6 nat"]);
    let labels: Vec<&str> = dual.dumps.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["iptables-nft", "ip6tables-nft"]);
    assert!(dual.lost.is_empty(), "{:?}", dual.lost);
    // Single-stack: the kernel holds no ip6 nat table, ip6tables is not asked.
    fake.calls.borrow_mut().clear();
    let single = read(&["ip nat"]);
    assert_eq!(single.dumps.len(), 1);
    assert!(
        !fake
            .calls
            .borrow()
            .iter()
            .any(|c| c.starts_with("ip6tables")),
        "{:?}",
        fake.calls.borrow()
    );
    // Held but no tool: said; cannot tell and no tool: not said.
    let v4_only = Fake::new(&[("iptables-nft-save", Tool::Prints(NAT_DUMP))]);
    assert_eq!(
        v4_only.lost(false, Some(&["ip nat", "ip6 nat"])),
        [
            "ip6tables-save: not installed; ip6tables nat rules (kube-proxy's IPv6 services, \
             ip-masq-agent) will not be named"
        ]
    );
    assert!(v4_only.lost(false, None).is_empty());
}
