//! A tuple as people read it: its addresses ([`src_ip`], [`dst_ip`]) and its protocol's name,
//! from one table ([`proto_known`]) with the two fallbacks an unknown protocol gets: the bare
//! number where the JSON contract and the text output show it ([`proto_name`]), `proto N` in
//! sentences, as a filter expression spells it ([`proto_spelled`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tracer_common::{FAMILY_IPV6, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Tuple};

/// `tcp`, `udp`, `icmp`, `icmp6` (as tcpdump, the filter expression and the JSON contract say);
/// `None` for another protocol.
#[must_use]
pub fn proto_known(proto: u8) -> Option<&'static str> {
    match proto {
        PROTO_TCP => Some("tcp"),
        PROTO_UDP => Some("udp"),
        PROTO_ICMP => Some("icmp"),
        PROTO_ICMPV6 => Some("icmp6"),
        _ => None,
    }
}

/// Protocol name for output: [`proto_known`]'s, else the number (`132`).
#[must_use]
pub fn proto_name(proto: u8) -> String {
    proto_known(proto).map_or_else(|| proto.to_string(), str::to_owned)
}

/// Protocol name in a sentence: [`proto_known`]'s, else `proto 132`.
#[must_use]
pub fn proto_spelled(proto: u8) -> String {
    proto_known(proto).map_or_else(|| format!("proto {proto}"), str::to_owned)
}

/// Source address of a tuple.
#[must_use]
pub fn src_ip(t: &Tuple) -> IpAddr {
    ip(t.family, &t.saddr)
}

/// Destination address of a tuple.
#[must_use]
pub fn dst_ip(t: &Tuple) -> IpAddr {
    ip(t.family, &t.daddr)
}

fn ip(family: u8, a: &[u8; 16]) -> IpAddr {
    match family {
        FAMILY_IPV6 => IpAddr::V6(Ipv6Addr::from(*a)),
        _ => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_names_are_the_json_contracts() {
        let names = [PROTO_TCP, PROTO_UDP, PROTO_ICMP, PROTO_ICMPV6, 132].map(proto_name);
        assert_eq!(names, ["tcp", "udp", "icmp", "icmp6", "132"]);
    }

    #[test]
    fn in_a_sentence_an_unknown_protocol_is_spelled_as_an_expression_does() {
        assert_eq!(proto_spelled(PROTO_ICMPV6), "icmp6");
        assert_eq!(proto_spelled(47), "proto 47");
    }
}
