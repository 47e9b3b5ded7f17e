//! The join of a drop: the kernel freed a traced packet as dropped. It joins the open journey
//! holding that packet (same fingerprint, the journey's current tuple) and ends it
//! ([`Ending::Dropped`]). A packet dropped just after it left through an edge interface (into
//! a pod, whose own stack dropped it: a closed port) joins the journey that left, while that
//! journey still waits in the queue of completed ones; otherwise the drop is a journey of its
//! own. A site record (the kernel's name for a drop location, ahead of that location's first
//! drop) is learnt by the drop names, which then name those drops without a kallsyms pass.

use tracer_common::{DropSeen, SiteSeen};

use super::{Correlator, JoinKey, finish, wire_id};
use crate::journey::model::{DropStep, Ending, Step, StepKind};

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

/// How many of the newest completed journeys a drop looks through.
const RECENT: usize = 64;

impl Correlator {
    /// The kernel's name for a drop location, which names the drops from it that follow.
    pub(super) fn learn_site(&mut self, site: &SiteSeen) {
        if let (Some(names), Some(name)) = (self.drop_names.as_mut(), site.name()) {
            names.learn(site.location, name);
        }
    }

    pub(super) fn push_drop(&mut self, ev: &DropSeen) {
        let Some(names) = self.drop_names.as_mut() else {
            return;
        };
        if !names.reasons().is_drop(ev.reason) {
            return;
        }
        let (reason, location) = (names.reasons().name(ev.reason), names.location(ev.location));
        let given = names.reasons().given();
        if raw_socket_copy(&reason, &location, given) || handled_icmpv6(&reason, &location) {
            return;
        }
        let purged = socket_queue_purge(&reason, &location);
        let step = Step {
            kind: StepKind::Drop(DropStep {
                reason,
                location,
                after_leaving: false,
            }),
            tuple: ev.tuple,
            ktime_ns: ev.ktime_ns,
            wire_id: Some(wire_id(&ev.tuple, ev.fp)),
            attribution: None,
        };
        let key = JoinKey {
            fp: ev.fp,
            proto: ev.tuple.proto,
        };
        if let Some(idx) = self.find(key, &ev.tuple) {
            let id = self.append(key, idx, step, ev.tuple, None);
            let open = self.remove(key, id);
            self.done.push(finish(open, Ending::Dropped));
            return;
        }
        if purged {
            return;
        }
        let recent = self.done.iter_mut().rev().take(RECENT).find(|j| {
            j.ending == Ending::Left
                && j.steps
                    .last()
                    .is_some_and(|s| s.tuple == step.tuple && s.wire_id == step.wire_id)
        });
        if let Some(j) = recent {
            let mut step = step;
            if let StepKind::Drop(d) = &mut step.kind {
                d.after_leaving = true;
            }
            j.steps.push(step);
            j.ending = Ending::Dropped;
            return;
        }
        let steps = self.steps_with(step);
        self.done.push(super::Journey {
            steps,
            ending: Ending::Dropped,
        });
    }
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
