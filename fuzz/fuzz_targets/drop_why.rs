//! Arbitrary text as an `iptables-save` dump (any tables), parsed the way a drop replay reads
//! the node's raw, mangle and filter tables, then `why` for an arbitrary dropped packet:
//! any reason (the known ones and arbitrary words), location, interfaces, conntrack state
//! and traversal.
//!
//! What must hold: no panic and no hang (the drop walk has a depth and a rule budget); a
//! rule is named only for a netfilter drop; a named rule's chain exists in the dump; a
//! service is `namespace/name`; the why is one line that is safe to print once escaped.
#![no_main]

use std::net::IpAddr;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pktrace_fuzz::terminal_safe;
use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, Tuple};
use tracer_user::{
    drops::why::{DropFacts, DropRules, Traversal, why},
    util::safe,
};

const REASONS: [&str; 10] = [
    "NETFILTER_DROP",
    "NOT_SPECIFIED",
    "NO_SOCKET",
    "IP_INNOROUTES",
    "NEIGH_FAILED",
    "TC_EGRESS",
    "QDISC_DROP",
    "TCP_INVALID_SEQUENCE",
    "IP_RPFILTER",
    "",
];
const LOCATIONS: [&str; 3] = ["nft_do_chain", "nf_hook_slow", "tcp_v4_rcv"];
const STATES: [&str; 4] = ["NEW", "ESTABLISHED", "RELATED", "INVALID"];

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    v6: bool,
    sport: u16,
    dport: u16,
    reason: u8,
    other_reason: Option<String>,
    location: Option<u8>,
    in_iface: Option<String>,
    out_iface: Option<String>,
    state: Option<u8>,
    traversal: Option<u8>,
    local: bool,
    /// Whether the neighbour is known (the destination).
    next_hop: bool,
    /// The dump (the rest of the input).
    text: &'a str,
}

fuzz_target!(|input: Input<'_>| {
    let rules = DropRules::parse(&[("iptables-nft", input.text)], &[], None);
    let mut tuple = Tuple {
        proto: input.proto,
        sport: input.sport,
        dport: input.dport,
        ..Tuple::default()
    };
    if input.v6 {
        (tuple.family, tuple.saddr, tuple.daddr) = (FAMILY_IPV6, input.src, input.dst);
    } else {
        tuple.family = FAMILY_IPV4;
        tuple.saddr[..4].copy_from_slice(&input.src[..4]);
        tuple.daddr[..4].copy_from_slice(&input.dst[..4]);
    }
    let reason = input
        .other_reason
        .clone()
        .unwrap_or_else(|| REASONS[usize::from(input.reason) % REASONS.len()].to_owned());
    let dst: IpAddr = if input.v6 {
        input.dst.into()
    } else {
        <[u8; 4]>::try_from(&input.dst[..4]).unwrap().into()
    };
    let drop = DropFacts {
        tuple,
        reason,
        location: input
            .location
            .map(|l| LOCATIONS[usize::from(l) % LOCATIONS.len()].to_owned()),
        in_iface: input.in_iface.clone(),
        out_iface: input.out_iface.clone(),
        next_hop: input.next_hop.then_some(dst),
        traversal: input.traversal.map(|t| match t % 3 {
            0 => Traversal::LocalIn,
            1 => Traversal::Forward,
            _ => Traversal::LocalOut,
        }),
        local_addrs: if input.local { vec![dst] } else { Vec::new() },
        ct_state: input
            .state
            .map(|s| STATES[usize::from(s) % STATES.len()].to_owned()),
    };
    let Some(got) = why(&rules, &drop) else {
        return;
    };
    assert!(!got.why.is_empty());
    assert!(terminal_safe(&safe(&got.why)), "{got:?}");
    if let Some(rule) = &got.rule {
        assert!(terminal_safe(&safe(rule)), "{got:?}");
        let chain = rule
            .strip_prefix("raw ")
            .or_else(|| rule.strip_prefix("mangle "))
            .unwrap_or(rule);
        let named = rules.tables.iter().any(|t| {
            t.rules.chains().any(|c| {
                chain.starts_with(&format!("{}: ", c.name))
                    || chain.starts_with(&format!("{} policy ", c.name))
            })
        });
        assert!(named, "{got:?}");
    }
    if let Some(service) = &got.service {
        assert!(service.contains('/') && terminal_safe(service), "{got:?}");
    }
});
