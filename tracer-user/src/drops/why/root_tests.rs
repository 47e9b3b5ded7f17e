//! The kernel as the oracle: a real iptables ruleset in a throwaway network namespace drops
//! a real packet, and the rule `why` names is the one whose counter moved.

use std::{
    io::Write as _,
    net::{SocketAddr, TcpStream},
    process::{Command, Stdio},
    time::Duration,
};

use tracer_common::PROTO_TCP;

use super::{DropFacts, DropRules, Traversal, why};
use crate::{
    journey::tuple,
    test_support::{in_new_netns, require_root},
};

const KUBE_FILTER: &str = include_str!("testdata/kube-proxy-filter.txt");

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}; `cargo xtask setup` installs it"));
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

/// The `[packets:bytes]` counter of a saved rule line.
fn packets(line: &str) -> u64 {
    let inner = line
        .strip_prefix('[')
        .and_then(|l| l.split_once(':'))
        .unwrap()
        .0;
    inner.parse().unwrap()
}

#[test]
#[ignore = "root tier: iptables rules and a packet in a throwaway network namespace"]
fn the_named_rule_is_the_one_the_kernel_counted() {
    require_root();
    let (dump, refused) = in_new_netns(|| {
        for args in [
            &["link", "add", "v0", "type", "veth", "peer", "name", "v1"][..],
            &["link", "set", "v1", "up"],
            &["link", "set", "v0", "up"],
            &["addr", "add", "10.224.0.4/24", "dev", "v0"],
            &["route", "add", "default", "dev", "v0"],
        ] {
            run("ip", args, None);
        }
        run("iptables-nft-restore", &[], Some(KUBE_FILTER));
        let to: SocketAddr = "10.0.88.14:80".parse().unwrap();
        let refused = TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_err();
        (run("iptables-nft-save", &["-c"], None), refused)
    });
    assert!(refused, "the REJECT rule should refuse the connection");
    let rules = DropRules::parse(&[("iptables-nft", &dump)], &[], None);
    let drop = DropFacts {
        tuple: tuple(
            PROTO_TCP,
            "10.224.0.4:40000".parse().unwrap(),
            "10.0.88.14:80".parse().unwrap(),
        ),
        reason: "NETFILTER_DROP".into(),
        traversal: Some(Traversal::LocalOut),
        local_addrs: vec!["10.224.0.4".parse().unwrap()],
        ..DropFacts::default()
    };
    let got = why(&rules, &drop).unwrap();
    assert_eq!(
        got.rule.as_deref(),
        Some("KUBE-SERVICES: default/orders:http has no endpoints")
    );
    // Of every DROP and REJECT rule, only the named one counted a packet.
    let verdicts: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains(" -j DROP") || l.contains(" -j REJECT"))
        .collect();
    assert!(verdicts.len() > 3, "{dump}");
    for line in verdicts {
        let named = line.contains("-A KUBE-SERVICES") && line.contains("has no endpoints");
        assert_eq!(packets(line) > 0, named, "{line}");
    }
}
