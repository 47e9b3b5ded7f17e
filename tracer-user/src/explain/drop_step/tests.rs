//! The drop explainer against a node whose rules change while it runs: the rules are read
//! at the first drop and again when the nftables generation, or the NAT poller's count of
//! changes, moved; and a drop's way out comes from the node's route.

use std::{
    cell::Cell,
    sync::{Arc, atomic::AtomicU64},
};

use tracer_common::{PROTO_TCP, PROTO_UDP};

use super::*;
use crate::{
    drops::why::Route,
    journey::{Ending, Step, tuple},
    output::test_support::tc,
};

thread_local! {
    static GENERATION: Cell<Option<u32>> = const { Cell::new(Some(7)) };
    static LOADS: Cell<u32> = const { Cell::new(0) };
    static REJECT: Cell<bool> = const { Cell::new(false) };
}

/// The node's filter table: empty, then with an administrator's REJECT once `REJECT` is set.
fn load() -> DropRules {
    LOADS.with(|l| l.set(l.get() + 1));
    let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n");
    if REJECT.with(Cell::get) {
        text.push_str(
            "-A FORWARD -d 10.13.1.4/32 -p tcp -m tcp --dport 5556 -j REJECT --reject-with \
             icmp-port-unreachable\n",
        );
    }
    text.push_str("COMMIT\n");
    DropRules::parse(&[("iptables-nft", &text)], &[], None)
}

fn route(dst: IpAddr) -> Option<Route> {
    matches!(dst, IpAddr::V4(a) if a.octets()[..2] == [10, 13]).then(|| Route {
        dev: "eth0".into(),
        next_hop: dst,
    })
}

fn explainer(changes: Option<Arc<AtomicU64>>) -> DropExplainer {
    let mut e = DropExplainer::new(vec!["10.13.76.4".parse().unwrap()]).watching(changes);
    e.node = Node {
        generation: || GENERATION.with(Cell::get),
        load,
        route,
    };
    e
}

fn dropped(reason: &str, location: &str, proto: u8, dst: &str) -> Journey {
    let t = tuple(
        proto,
        "10.13.76.46:41000".parse().unwrap(),
        dst.parse().unwrap(),
    );
    Journey {
        steps: vec![
            tc(Point::Ingress, "azv47c3ee9d512", t, 0),
            Step::drop_at(reason, location, t, 10),
        ],
        ending: Ending::Dropped,
    }
}

fn rule_of(e: &mut DropExplainer, mut j: Journey) -> (String, String) {
    e.explain(&mut j);
    let a = j.steps[1].attribution.clone().expect("explained");
    (a.rule.clone(), a.why.clone().unwrap_or_default())
}

fn reject_drop() -> Journey {
    dropped(
        "NETFILTER_DROP",
        "nft_do_chain",
        PROTO_TCP,
        "10.13.1.4:5556",
    )
}

#[test]
fn a_rule_added_after_the_first_read_is_named_once_the_generation_moves() {
    let mut e = explainer(None);
    assert_eq!(rule_of(&mut e, reject_drop()).0, "", "no REJECT yet");
    assert_eq!(LOADS.with(Cell::get), 1);
    REJECT.with(|r| r.set(true));
    // Same generation: the rules in hand are used, and asked again only after ASK_EVERY.
    assert_eq!(rule_of(&mut e, reject_drop()).0, "");
    GENERATION.with(|g| g.set(Some(8)));
    std::thread::sleep(ASK_EVERY);
    let (rule, why) = rule_of(&mut e, reject_drop());
    assert!(
        rule.starts_with("FORWARD: -A FORWARD -d 10.13.1.4/32") && rule.contains("REJECT"),
        "{rule}: {why}"
    );
    assert_eq!(LOADS.with(Cell::get), 2);
    // Nothing moved: no read.
    std::thread::sleep(ASK_EVERY);
    rule_of(&mut e, reject_drop());
    assert_eq!(LOADS.with(Cell::get), 2);
}

#[test]
fn a_change_the_poller_counted_is_read_without_a_generation() {
    GENERATION.with(|g| g.set(None));
    let changes = Arc::new(AtomicU64::new(0));
    let mut e = explainer(Some(Arc::clone(&changes)));
    assert_eq!(rule_of(&mut e, reject_drop()).0, "");
    REJECT.with(|r| r.set(true));
    std::thread::sleep(ASK_EVERY);
    assert_eq!(
        rule_of(&mut e, reject_drop()).0,
        "",
        "nothing said it changed"
    );
    changes.fetch_add(1, Ordering::Relaxed);
    assert!(rule_of(&mut e, reject_drop()).0.contains("REJECT"));
    assert_eq!(LOADS.with(Cell::get), 2);
}

#[test]
fn a_neighbour_that_never_answers_is_named_with_the_route() {
    let mut e = explainer(None);
    let j = dropped(
        "NEIGH_FAILED",
        "arp_error_report",
        PROTO_UDP,
        "10.13.1.99:53",
    );
    let (rule, why) = rule_of(&mut e, j);
    assert_eq!(rule, "");
    assert!(
        why.starts_with("no ARP answer from 10.13.1.99 on eth0:"),
        "{why}"
    );
}
