//! A drop record as the join takes it: its reason and location named, and the frees that are
//! no failure of the packet's way left out (a raw socket's copy of an echo reply, an older
//! kernel's free of an ICMPv6 message it handled), or marked (a socket's queue purged, shown
//! only while the packet still crosses the node).

use std::rc::Rc;

use tracer_common::DropSeen;

use super::DropNames;

/// A drop's names, for the join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The drop reason's name (`NETFILTER_DROP`).
    pub reason: Rc<str>,
    /// The drop location's name (`nf_hook_slow`).
    pub location: Rc<str>,
    /// A socket queue's purge: no failure when no open journey holds the packet.
    pub purged: bool,
}

impl DropNames {
    /// The drop's names, or `None` for a free that is not a drop or no failure.
    pub fn decode(&mut self, ev: &DropSeen) -> Option<Decoded> {
        if !self.reasons().is_drop(ev.reason) {
            return None;
        }
        let (reason, location) = (self.reasons().name(ev.reason), self.location(ev.location));
        let given = self.reasons().given();
        if raw_socket_copy(&reason, &location, given) || handled_icmpv6(&reason, &location) {
            return None;
        }
        let purged = socket_queue_purge(&reason, &location);
        Some(Decoded {
            reason,
            location,
            purged,
        })
    }
}

/// True for the free of an ICMP echo reply that no ICMP datagram ("ping") socket wanted:
/// `ping_rcv` reports `NO_SOCKET`, but raw sockets (`ping` run as root) were handed their copy
/// before it (`raw_local_deliver`), so the answer reached the pinger: no failure to show.
/// Newer kernels free it in `ping_rcv` itself; older ones (6.1) return the reason to
/// `icmp_rcv`/`icmpv6_rcv`, whose only handler that answers `NO_SOCKET` is `ping_rcv`.
/// Kernels without drop reasons (`given` false: before 5.17) free it in `icmp_rcv` as
/// `NOT_SPECIFIED`, which there cannot be told from the other frees of `icmp_rcv`: none of
/// them is shown on those kernels.
fn raw_socket_copy(reason: &str, location: &str, given: bool) -> bool {
    let no_socket = reason == "NO_SOCKET" || (!given && reason == "NOT_SPECIFIED");
    no_socket && matches!(location, "ping_rcv" | "icmp_rcv" | "icmpv6_rcv")
}

/// True for a free from a queue that was flushed: `QUEUE_PURGE` (in `skb_queue_purge_reason`,
/// 6.7+), or `NOT_SPECIFIED` in `skb_queue_purge` (older kernels, with or without reasons:
/// 6.1 frees it so) or in a socket's destructor that empties its receive queue
/// (`udp_destruct_common` frees each unread datagram itself, as `NOT_SPECIFIED` still on
/// 6.18; `inet_sock_destruct` and `sk_stream_kill_queues`, where older kernels inline the
/// purge). Of a packet no open journey holds, that is a packet the node already delivered,
/// purged from the receiving socket's queue when it was closed unread: the ICMP error a TCP
/// connect in `SYN_SENT` keeps in its error queue (`ip_icmp_error`) and the data an
/// application never read. No failure of the path; a flush while the packet still crosses the
/// node (an open journey holds it) is shown.
fn socket_queue_purge(reason: &str, location: &str) -> bool {
    reason == "QUEUE_PURGE"
        || (reason == "NOT_SPECIFIED"
            && matches!(
                location,
                "skb_queue_purge"
                    | "__skb_queue_purge"
                    | "udp_destruct_common"
                    | "inet_sock_destruct"
                    | "sk_stream_kill_queues"
            ))
}

/// True for an older `icmpv6_rcv`'s free of an ICMPv6 message it handled: kernels that give
/// drop reasons but predate the ICMPv6 receive path's own (Debian's 6.1) free every message
/// they did not count as a success, an echo request they answered included, as
/// `NOT_SPECIFIED` ("until the v6 path can be better sorted assume failure"), while the real
/// drops there carry a reason (`ICMP_CSUM`, `XFRM_POLICY`). Seen in the VM tier on 6.1: each
/// echo request the internet host answered was freed so. Newer kernels consume them.
fn handled_icmpv6(reason: &str, location: &str) -> bool {
    reason == "NOT_SPECIFIED" && location == "icmpv6_rcv"
}

#[cfg(test)]
mod raw_copy_tests {
    use super::{handled_icmpv6, raw_socket_copy, socket_queue_purge};

    #[test]
    fn a_queue_purge_is_told_by_its_reason_or_by_its_function() {
        assert!(socket_queue_purge("QUEUE_PURGE", "skb_queue_purge_reason"));
        assert!(socket_queue_purge("NOT_SPECIFIED", "skb_queue_purge"));
        assert!(socket_queue_purge("NOT_SPECIFIED", "udp_destruct_common"));
        assert!(!socket_queue_purge(
            "SOCKET_RCVBUFF",
            "udp_queue_rcv_one_skb"
        ));
        assert!(!socket_queue_purge("NOT_SPECIFIED", "nf_hook_slow"));
        assert!(!socket_queue_purge("NO_SOCKET", "skb_queue_purge"));
    }

    #[test]
    fn only_a_reasonless_free_in_icmpv6_rcv_is_a_handled_message() {
        assert!(handled_icmpv6("NOT_SPECIFIED", "icmpv6_rcv"));
        assert!(!handled_icmpv6("ICMP_CSUM", "icmpv6_rcv"));
        assert!(!handled_icmpv6("XFRM_POLICY", "icmpv6_rcv"));
        assert!(!handled_icmpv6("NOT_SPECIFIED", "icmp_rcv"));
        assert!(!handled_icmpv6("NOT_SPECIFIED", "ip6_forward"));
    }

    #[test]
    fn only_no_socket_from_ping_rcv_is_a_raw_sockets_copy() {
        assert!(raw_socket_copy("NO_SOCKET", "ping_rcv", true));
        assert!(raw_socket_copy("NO_SOCKET", "icmp_rcv", true));
        assert!(raw_socket_copy("NO_SOCKET", "icmpv6_rcv", true));
        assert!(!raw_socket_copy("NETFILTER_DROP", "icmp_rcv", true));
        assert!(!raw_socket_copy("NO_SOCKET", "__udp4_lib_rcv", true));
        assert!(!raw_socket_copy("NO_SOCKET", "tcp_v4_rcv", true));
        assert!(!raw_socket_copy("NETFILTER_DROP", "ping_rcv", true));
        // A kernel that gives reasons names the other frees of icmp_rcv otherwise.
        assert!(!raw_socket_copy("NOT_SPECIFIED", "icmp_rcv", true));
    }

    #[test]
    fn without_reasons_an_icmp_rcv_free_is_a_raw_sockets_copy() {
        assert!(raw_socket_copy("NOT_SPECIFIED", "icmp_rcv", false));
        assert!(raw_socket_copy("NOT_SPECIFIED", "icmpv6_rcv", false));
        assert!(!raw_socket_copy("NOT_SPECIFIED", "__udp4_lib_rcv", false));
        assert!(!raw_socket_copy("NOT_SPECIFIED", "nf_hook_slow", false));
    }
}
