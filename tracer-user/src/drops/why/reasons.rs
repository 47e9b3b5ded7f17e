//! What a drop reason other than a netfilter rule means for the packet, and what to look
//! at: one line with the packet's addresses, ports and interfaces filled in. Names are the
//! kernel's `enum skb_drop_reason` without the prefix (`include/net/dropreason-core.h`,
//! v6.18); older kernels' names map too (`IP_NOROUTE` before `IP_INNOROUTES` and
//! `IP_OUTNOROUTES`, `QDISC_EGRESS` before `QDISC_DROP`), and families of newer ones by
//! prefix (`TC_*`, `QDISC_*`, `TCP_*`, `NEIGH_*`, `FRAG_*`).

use super::{DropFacts, name::packet};
use crate::{
    drops::FailureClass,
    util::tuple::{dst_ip, proto_spelled, src_ip},
};

/// Whether the drop is a netfilter verdict: the reason says so, or (kernels before 5.17,
/// or a reason the kernel left unspecified) the place it was freed does: a netfilter function
/// (`nf_hook_slow` for any table, `nft_do_chain` for nftables and iptables-nft rules,
/// `ipt_do_table` for legacy), the ones [`FailureClass::of_drop`] classes as a firewall's.
pub fn is_netfilter(drop: &DropFacts) -> bool {
    match drop.reason.as_str() {
        "NETFILTER_DROP" => true,
        "" | "NOT_SPECIFIED" => drop
            .location
            .as_deref()
            .is_some_and(|l| FailureClass::of_drop("", l) == FailureClass::Firewall),
        _ => false,
    }
}

/// The line for a reason other than a netfilter verdict; `None` when the kernel gave no
/// reason and no location that tells one.
pub fn explain(drop: &DropFacts) -> Option<String> {
    let reason = drop.reason.as_str();
    if let Some(line) = exact(drop, reason) {
        return Some(line);
    }
    if let Some(line) = family(drop, reason) {
        return Some(line);
    }
    if reason.is_empty() || reason == "NOT_SPECIFIED" {
        let at = drop.location.as_deref()?;
        if let Some(implied) = implied_by(at) {
            let line = family(drop, implied).or_else(|| exact(drop, implied))?;
            return Some(line.replace(
                &format!("({implied})"),
                &format!("(the kernel gave no reason: {at} freed it)"),
            ));
        }
        return Some(format!(
            "the kernel gave no reason; {} was freed in {at}",
            packet(drop)
        ));
    }
    Some(format!(
        "the kernel dropped {} ({reason}{}); see `include/net/dropreason-core.h` of the \
         running kernel for what it means",
        packet(drop),
        at(drop)
    ))
}

/// The reason a kernel without drop reasons (before 5.17) implies by the function that freed
/// the packet: the neighbour code frees the packets queued for a neighbour that never
/// answered.
fn implied_by(location: &str) -> Option<&'static str> {
    (FailureClass::of_drop("", location) == FailureClass::Neighbor).then_some("NEIGH_FAILED")
}

fn at(drop: &DropFacts) -> String {
    drop.location
        .as_deref()
        .map(|l| format!(" in {l}"))
        .unwrap_or_default()
}

fn iface(name: Option<&str>) -> &str {
    name.unwrap_or("its interface")
}

/// Reasons of addressing and routing, by exact name (then [`host`]).
fn exact(drop: &DropFacts, reason: &str) -> Option<String> {
    let t = &drop.tuple;
    let (src, dst) = (src_ip(t), dst_ip(t));
    let proto = proto_spelled(t.proto);
    Some(match reason {
        "NO_SOCKET" => format!(
            "nothing listens on {dst} {proto}/{}: no socket took the packet (look at \
             `ss -lntup` in the destination's namespace, and whether the server binds this \
             address)",
            t.dport
        ),
        "IP_NOROUTE" | "IP_INNOROUTES" | "IP_OUTNOROUTES" => format!(
            "no route to {dst} (from {src}); look at `ip route get {dst}` in the namespace \
             that dropped it"
        ),
        "IP_INADDRERRORS" => format!(
            "{dst} is not an address this node can deliver or forward to (invalid \
             destination, e.g. a broadcast or a martian)"
        ),
        "IP_RPFILTER" => format!(
            "reverse-path filter on {}: replies to {src} would not leave by the interface it \
             came in by; look at `sysctl net.ipv4.conf.{}.rp_filter` and the routes back to \
             {src}",
            iface(drop.in_iface.as_deref()),
            drop.in_iface.as_deref().unwrap_or("all")
        ),
        "IP_LOCAL_SOURCE" | "IP_INVALID_SOURCE" => format!(
            "the source {src} is not acceptable here (a local or invalid source arriving on \
             {})",
            iface(drop.in_iface.as_deref())
        ),
        "NF_CONNTRACK" => format!(
            "conntrack refused {}: INVALID for its connection (out of window, or the entry \
             is gone); look at `conntrack -S` for `invalid`",
            packet(drop)
        ),
        "OTHERHOST" => format!(
            "{} was addressed to another host's MAC on {}: the frame was not for this node",
            packet(drop),
            iface(drop.in_iface.as_deref())
        ),
        "PKT_TOO_SMALL" | "HDR_TRUNC" => format!(
            "{} is truncated: shorter than its headers say",
            packet(drop)
        ),
        "PKT_TOO_BIG" => format!(
            "{} is larger than the MTU of {} and may not be fragmented; look at the path MTU \
             (`ip link`, ICMP fragmentation-needed blocked?)",
            packet(drop),
            iface(drop.out_iface.as_deref())
        ),
        _ => return host(drop, reason),
    })
}

/// Reasons of the host's devices, queues and sockets, by exact name.
fn host(drop: &DropFacts, reason: &str) -> Option<String> {
    let t = &drop.tuple;
    let dst = dst_ip(t);
    let proto = proto_spelled(t.proto);
    Some(match reason {
        "FULL_RING" => format!(
            "the ring of {} was full: the receiver is not keeping up",
            iface(drop.in_iface.as_deref().or(drop.out_iface.as_deref()))
        ),
        "CPU_BACKLOG" => "the CPU's input backlog was full (`net.core.netdev_max_backlog`)".into(),
        "NOMEM" => "the kernel had no memory for the packet".into(),
        "SOCKET_FILTER" => format!(
            "a socket filter (BPF on the socket) on {dst} {proto}/{} rejected it",
            t.dport
        ),
        "SOCKET_RCVBUFF" | "PROTO_MEM" | "SOCKET_BACKLOG" => format!(
            "the receiving socket on {dst} {proto}/{} was full: the application is not \
             reading fast enough",
            t.dport
        ),
        "XDP" => format!(
            "an XDP program on {} dropped it; look at `ip link show` (`prog/xdp`) and \
             `bpftool net`",
            iface(drop.in_iface.as_deref())
        ),
        "BPF_CGROUP_EGRESS" => "a cgroup BPF program dropped it on the way out; look at \
                                `bpftool cgroup tree`"
            .into(),
        "UNHANDLED_PROTO" | "INVALID_PROTO" | "IP_NOPROTO" => {
            format!("nothing on this node handles {proto} for {dst}")
        }
        "IPV6DISABLED" => format!(
            "IPv6 is disabled on {} (`net.ipv6.conf.*.disable_ipv6`)",
            iface(drop.in_iface.as_deref())
        ),
        "DEV_READY" => format!(
            "{} was not up or not ready",
            iface(drop.out_iface.as_deref().or(drop.in_iface.as_deref()))
        ),
        "UNICAST_IN_L2_MULTICAST" => {
            "an IP unicast packet inside a link-layer multicast or broadcast frame".into()
        }
        _ => return None,
    })
}

/// Reasons known by their family (prefix), old and new names alike.
fn family(drop: &DropFacts, reason: &str) -> Option<String> {
    let pkt = packet(drop);
    let dst = dst_ip(&drop.tuple);
    let line = if reason.starts_with("TC_") {
        let hook = if reason.contains("EGRESS") {
            format!("tc egress of {}", iface(drop.out_iface.as_deref()))
        } else if reason.contains("INGRESS") {
            format!("tc ingress of {}", iface(drop.in_iface.as_deref()))
        } else {
            "a tc hook".to_owned()
        };
        format!(
            "another eBPF or tc program on the {hook} dropped {pkt} ({reason}); look at \
             `tc filter show dev <dev> ingress|egress` and `bpftool net` (Cilium, Retina, …)"
        )
    } else if reason.starts_with("QDISC_") {
        format!(
            "the queueing discipline of {} dropped {pkt} ({reason}: queue full or over its \
             limit); look at `tc -s qdisc show`",
            iface(drop.out_iface.as_deref())
        )
    } else if reason == "NEIGH_FAILED" {
        let (proto, tool) = if dst.is_ipv6() {
            ("NDP", "ip -6 neigh show")
        } else {
            ("ARP", "ip neigh show")
        };
        format!(
            "no {proto} answer from {} on {}: the neighbour's probes timed out and {pkt} waiting \
             for it was dropped ({reason}); the address is held by nobody on that link, or its \
             host is down; look at `{tool}` (FAILED)",
            drop.next_hop.unwrap_or(dst),
            iface(drop.out_iface.as_deref())
        )
    } else if reason.starts_with("NEIGH_") {
        format!(
            "no ARP/ND answer from {dst} (or the next hop towards it) on {} ({reason}); look \
             at `ip neigh show`",
            iface(drop.out_iface.as_deref())
        )
    } else if reason.starts_with("TCP_") {
        format!(
            "TCP refused {pkt} ({reason}: the segment does not fit the connection's state, \
             e.g. outside the window or for a closed connection); look at the connection in \
             `ss -tni` and at retransmits"
        )
    } else if reason.starts_with("FRAG_") || reason == "DUP_FRAG" {
        format!("IP reassembly dropped a fragment of {pkt} ({reason})")
    } else if reason.ends_with("_CSUM") {
        format!("{pkt} had a bad checksum ({reason}): look at offload settings (`ethtool -k`)")
    } else if reason.starts_with("XFRM_") {
        format!("IPsec (xfrm) policy dropped {pkt} ({reason}); look at `ip xfrm policy`")
    } else if reason.starts_with("IPV6_") || reason.starts_with("IP_") {
        format!("the IP layer dropped {pkt} ({reason}{})", at(drop))
    } else {
        return None;
    };
    Some(line)
}
