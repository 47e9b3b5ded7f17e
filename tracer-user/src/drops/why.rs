//! Why the kernel dropped a packet, in the node's words: for a netfilter drop, the rule (or
//! chain policy) that dropped it and the Kubernetes service or network policy it belongs
//! to; for any other drop reason, one line saying what the reason means for this packet and
//! what to look at.
//!
//! A netfilter drop is explained by replaying the node's filter-type tables (iptables'
//! raw, mangle and filter tables, legacy and nft backends, and native nftables `type
//! filter` chains) for the packet as the drop saw it, hook by hook in the kernel's order of
//! priorities, and naming the first `DROP` or `REJECT` it reaches (see
//! `eval::DropWalk` for what is assumed). Owners are named from their
//! rules: kube-proxy (`… has no endpoints`, its nftables `no-endpoint-services` map,
//! `KUBE-FIREWALL`, `KUBE-PROXY-FIREWALL`), Calico (`cali-tw-*`/`cali-fw-*` endpoints,
//! `cali-pi-*`/`cali-po-*` policies), Azure NPM (`AZURE-NPM-*`); anything else is the
//! admin's rule, shown as written.

mod name;
mod read;
mod reasons;
mod replay;
mod route;
mod rules;

use std::net::IpAddr;

pub use route::{Lookup, Route, Routes, lookup};
pub use rules::{DropRules, DropTable};
use tracer_common::Tuple;

use super::FailureClass;

/// Where the dropped packet was going through the node, when the drop hook knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traversal {
    /// To a socket of the node (PREROUTING, INPUT).
    LocalIn,
    /// Routed through the node (PREROUTING, FORWARD, POSTROUTING).
    Forward,
    /// Sent by the node itself (OUTPUT, POSTROUTING).
    LocalOut,
}

/// What the drop hook saw of one dropped packet.
#[derive(Clone, Debug, Default)]
pub struct DropFacts {
    /// The packet as it was when freed (after any DNAT already done to it).
    pub tuple: Tuple,
    /// The running kernel's drop reason without `SKB_DROP_REASON_` (`NETFILTER_DROP`,
    /// `NO_SOCKET`, …); `NOT_SPECIFIED` or empty when the kernel gave none.
    pub reason: String,
    /// The kernel function that freed it (`nft_do_chain`, `tcp_v4_rcv`, …), when known.
    pub location: Option<String>,
    /// The interface it came in by, when known.
    pub in_iface: Option<String>,
    /// The interface it was leaving by, when known (the node's route towards it).
    pub out_iface: Option<String>,
    /// The neighbour the node was handing it to (the route's gateway, else the destination),
    /// when known.
    pub next_hop: Option<IpAddr>,
    /// Local-in, forwarded or local-out, when known; `None`: the replay tries
    /// [`UNKNOWN_ORDER`] and says which matched.
    pub traversal: Option<Traversal>,
    /// The node's addresses (for `addrtype LOCAL`, `fib daddr type local`).
    pub local_addrs: Vec<IpAddr>,
    /// The packet's conntrack state as iptables names it (`NEW`, `ESTABLISHED`,
    /// `RELATED`, `INVALID`, `UNTRACKED`), when the drop hook read it; `None`: replayed as
    /// `NEW`, and rules testing the state say so.
    pub ct_state: Option<String>,
}

/// The order traversals are tried in when the drop hook does not know the packet's:
/// forwarded first (a pod's packets cross the node), then local-in, then local-out.
pub const UNKNOWN_ORDER: [Traversal; 3] =
    [Traversal::Forward, Traversal::LocalIn, Traversal::LocalOut];

/// The explanation of one drop (the `rule`, `why` and `service` of a `drop` step, and its
/// failure class).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropWhy {
    /// What kind of failure: by the rule that dropped it, else by the reason.
    pub class: FailureClass,
    /// The chain and the rule that dropped it: `KUBE-SERVICES: default/web:http has no
    /// endpoints`, `FORWARD: -A FORWARD -s 192.0.2.0/24 -j DROP`, `FORWARD policy DROP`.
    /// `None` unless a rule is known to have dropped the packet: never a guess.
    pub rule: Option<String>,
    /// One line: what happened and what to look at.
    pub why: String,
    /// The Kubernetes service (`namespace/name`) the rule belongs to, if any.
    pub service: Option<String>,
}

/// Why the kernel dropped the packet `drop` describes, with the node's rules `rules`.
///
/// A netfilter drop (reason `NETFILTER_DROP`, or no reason and a netfilter location) is
/// replayed through `rules`: the rule that dropped it, its service and owner; when no
/// `DROP`/`REJECT` rule matches, `rule` is `None` and `why` says so. Other reasons get
/// their meaning with the packet's values. `None` only when there is nothing to say beyond
/// the reason's name (no reason, and a location that tells nothing).
#[must_use]
pub fn why(rules: &DropRules, drop: &DropFacts) -> Option<DropWhy> {
    if reasons::is_netfilter(drop) {
        return Some(replay::netfilter(rules, drop));
    }
    reasons::explain(drop).map(|why| DropWhy {
        class: FailureClass::of_drop(&drop.reason, drop.location.as_deref().unwrap_or("")),
        rule: None,
        why,
        service: None,
    })
}

#[cfg(test)]
mod root_tests;
#[cfg(test)]
mod tests;
