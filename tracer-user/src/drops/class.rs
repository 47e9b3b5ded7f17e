//! The class of a failure: one word from a closed list that says what kind of node state or
//! rule ended a packet, the same in every output (the text drop line, `-o line`, the JSON
//! journey's `class`, the pcapng comment) and counted in the summary's `classes`.
//!
//! [`FailureClass::of_drop`] classes a drop by the kernel's reason and the function that
//! freed the packet alone; the drop replay ([`super::why`]) refines a netfilter drop by the
//! rule that dropped it (kube-proxy's REJECT of a service without endpoints, a network
//! policy's chain, a rule on conntrack's `INVALID` state, any other rule).

use std::fmt;

/// What kind of failure ended a journey, or a connection that got no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureClass {
    /// kube-proxy rejected or dropped it: the service has no (local) endpoints.
    NoEndpoints,
    /// A network policy dropped it (Calico, Azure NPM, a LoadBalancer's source ranges).
    Policy,
    /// Any other DROP or REJECT rule.
    Firewall,
    /// Nothing listens on the node for it.
    NoSocket,
    /// The node has no usable route.
    NoRoute,
    /// The next hop never answered ARP or neighbour discovery.
    Neighbor,
    /// Bigger than the next link's or route's MTU, with DF set.
    Mtu,
    /// NAT by a conntrack entry to an address that is no longer an endpoint.
    StaleConntrack,
    /// conntrack called it INVALID and that dropped it.
    ConntrackInvalid,
    /// The conntrack table was full.
    ConntrackFull,
    /// conntrack could not insert it (a clash at confirm).
    ConntrackClash,
    /// It left the node and nothing came back.
    NoAnswer,
    /// Anything else: the kernel's reason says the rest.
    Other,
}

impl FailureClass {
    /// Every class, in the order of the contract's list.
    pub const ALL: [Self; 13] = [
        Self::NoEndpoints,
        Self::Policy,
        Self::Firewall,
        Self::NoSocket,
        Self::NoRoute,
        Self::Neighbor,
        Self::Mtu,
        Self::StaleConntrack,
        Self::ConntrackInvalid,
        Self::ConntrackFull,
        Self::ConntrackClash,
        Self::NoAnswer,
        Self::Other,
    ];

    /// The class's word in every output (`no_endpoints`, `no_socket`, …).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoEndpoints => "no_endpoints",
            Self::Policy => "policy",
            Self::Firewall => "firewall",
            Self::NoSocket => "no_socket",
            Self::NoRoute => "no_route",
            Self::Neighbor => "neighbor",
            Self::Mtu => "mtu",
            Self::StaleConntrack => "stale_conntrack",
            Self::ConntrackInvalid => "conntrack_invalid",
            Self::ConntrackFull => "conntrack_full",
            Self::ConntrackClash => "conntrack_clash",
            Self::NoAnswer => "no_answer",
            Self::Other => "other",
        }
    }

    /// The class of the word `as_str` gives; `None` for a word not in the list.
    #[must_use]
    pub fn from_word(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == word)
    }

    /// The class a drop has by the kernel's reason (`enum skb_drop_reason` without its prefix;
    /// empty or `NOT_SPECIFIED` where the kernel gave none) and the function that freed it:
    /// a netfilter drop is a [`Self::Firewall`] until its rule says more.
    #[must_use]
    pub fn of_drop(reason: &str, location: &str) -> Self {
        match reason {
            "" | "NOT_SPECIFIED" => Self::of_location(location),
            "NETFILTER_DROP" => Self::Firewall,
            "NF_CONNTRACK" => Self::ConntrackInvalid,
            "NO_SOCKET" => Self::NoSocket,
            "IP_NOROUTE" | "IP_INNOROUTES" | "IP_OUTNOROUTES" => Self::NoRoute,
            "PKT_TOO_BIG" => Self::Mtu,
            r if r.starts_with("NEIGH_") => Self::Neighbor,
            _ => Self::Other,
        }
    }

    /// The class a drop without a reason has by the function that freed it (kernels before
    /// 5.17, and frees the kernel leaves unspecified).
    fn of_location(location: &str) -> Self {
        match location {
            "nf_hook_slow" | "nf_hook_slow_list" | "nft_do_chain" | "ipt_do_table"
            | "ip6t_do_table" => Self::Firewall,
            "neigh_invalidate" | "arp_error_report" | "__neigh_event_send" => Self::Neighbor,
            "ip_fragment" | "ip6_fragment" | "ip_do_fragment" => Self::Mtu,
            "ip_error" => Self::NoRoute,
            "__udp4_lib_rcv" | "__udp6_lib_rcv" | "tcp_v4_rcv" | "tcp_v6_rcv" => Self::NoSocket,
            _ => Self::Other,
        }
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::FailureClass::{self, *};

    #[test]
    fn every_word_reads_back_as_its_class_and_unknown_words_as_none() {
        for class in FailureClass::ALL {
            assert_eq!(FailureClass::from_word(class.as_str()), Some(class));
        }
        assert_eq!(FailureClass::from_word("dropped"), None);
        let words: Vec<&str> = FailureClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            words,
            [
                "no_endpoints",
                "policy",
                "firewall",
                "no_socket",
                "no_route",
                "neighbor",
                "mtu",
                "stale_conntrack",
                "conntrack_invalid",
                "conntrack_full",
                "conntrack_clash",
                "no_answer",
                "other"
            ]
        );
    }

    #[test]
    fn drops_are_classed_by_reason_and_without_one_by_the_freeing_function() {
        for (reason, location, class) in [
            ("NO_SOCKET", "__udp4_lib_rcv", NoSocket),
            ("NO_SOCKET", "tcp_v4_rcv", NoSocket),
            ("NETFILTER_DROP", "nft_do_chain", Firewall),
            ("IP_INNOROUTES", "ip_error", NoRoute),
            ("IP_OUTNOROUTES", "ip_route_output_key_hash", NoRoute),
            ("IP_NOROUTE", "ip_error", NoRoute),
            ("NEIGH_FAILED", "neigh_invalidate", Neighbor),
            ("NEIGH_QUEUEFULL", "__neigh_event_send", Neighbor),
            ("PKT_TOO_BIG", "ip_forward", Mtu),
            ("NF_CONNTRACK", "nf_hook_slow", ConntrackInvalid),
            ("QDISC_DROP", "__dev_queue_xmit", Other),
            ("TCP_INVALID_SEQUENCE", "tcp_validate_incoming", Other),
            // Kernels before 5.17: no reason, the place says it.
            ("NOT_SPECIFIED", "nft_do_chain", Firewall),
            ("NOT_SPECIFIED", "ipt_do_table", Firewall),
            ("NOT_SPECIFIED", "neigh_invalidate", Neighbor),
            ("NOT_SPECIFIED", "ip_fragment", Mtu),
            ("NOT_SPECIFIED", "ip_error", NoRoute),
            ("", "__udp4_lib_rcv", NoSocket),
            ("NOT_SPECIFIED", "unknown", Other),
            ("NOT_SPECIFIED", "skb_release_data", Other),
        ] {
            assert_eq!(
                FailureClass::of_drop(reason, location),
                class,
                "{reason} at {location}"
            );
        }
    }
}
