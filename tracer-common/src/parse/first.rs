//! Which frames may be the first packet of a connection, and what the tc programs note of one.
//!
//! A packet from outside the node becomes a traced pod's only when DNAT rewrites it (a
//! LoadBalancer VIP, a NodePort, any DNAT to the pod): before that its addresses are neither a
//! pod's nor a followed flow's, so tc ingress lets it pass. For the first packet of a
//! connection, the one whose DNAT makes the flow followed, tc ingress notes a [`FirstKey`]
//! when the frame may be such a packet ([`first_key_fast`]) and the NAT program that reports
//! the DNAT claims it as the packet's ingress step. Later packets of the connection are
//! followed at tc ingress itself.

use super::{FAST_ETH_BYTES, fast_l4_end, ipv4_of_frame};
use crate::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, Tuple};

/// What the tc programs note of a frame that may be a connection's first packet: its IPv4
/// tuple and IP id, enough to tell it from any other packet the NAT program sees with the same
/// `skb` address (a freed and reused `skb`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirstKey {
    /// Addresses as they sit in the packet (network order), as [`Tuple`] holds them.
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    /// Host order, as in [`Tuple`] (ICMP echo: the identifier in both).
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a map key shared with the kernel programs; zeroed so keys compare byte for byte"
    )]
    pub _pad: u8,
    /// The IPv4 identification field (the fingerprint's `ip_id`).
    pub ip_id: u16,
}

const _: () = assert!(size_of::<FirstKey>() == 16);

impl FirstKey {
    /// True when `t` (an IPv4 tuple) and `ip_id` are this packet's.
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    #[must_use]
    pub fn is(&self, t: &Tuple, ip_id: u32) -> bool {
        t.family == crate::FAMILY_IPV4
            && u32::from(self.ip_id) == ip_id
            && self.proto == t.proto
            && self.sport == t.sport
            && self.dport == t.dport
            && self.saddr == [t.saddr[0], t.saddr[1], t.saddr[2], t.saddr[3]]
            && self.daddr == [t.daddr[0], t.daddr[1], t.daddr[2], t.daddr[3]]
    }
}

/// TCP flag bits.
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;
/// ICMP echo request.
const ICMP_ECHO: u8 = 8;

/// The [`FirstKey`] of a frame that [`super::parse_ethernet_fast`] takes and that may open a
/// connection: a TCP SYN without ACK, a UDP datagram, or an ICMP echo request. `None` for
/// anything else (a packet of an established TCP connection, an ICMP reply or error, IPv6, VLAN
/// tags, IP options, fragments, frames shorter than [`FAST_ETH_BYTES`]). Its tuple is the one
/// the fast parse gives (host test `first_keys_agree_with_the_fast_parse`). `head` is the
/// frame's first [`FAST_ETH_BYTES`], `len` its length.
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
#[must_use]
pub fn first_key_fast(head: &[u8; FAST_ETH_BYTES], len: u32) -> Option<FirstKey> {
    let (ip, cap) = ipv4_of_frame(head, len)?;
    let end = fast_l4_end(ip, cap)?;
    let proto = ip[9];
    let b16 = |i: usize| u16::from_be_bytes([ip[i], ip[i + 1]]);
    let (sport, dport) = match proto {
        PROTO_TCP if end >= 40 && ip[33] & (TCP_SYN | TCP_ACK) == TCP_SYN => (b16(20), b16(22)),
        PROTO_UDP if end >= 28 => (b16(20), b16(22)),
        PROTO_ICMP if end >= 28 && ip[20] == ICMP_ECHO => (b16(24), b16(24)),
        _ => return None,
    };
    Some(FirstKey {
        saddr: [ip[12], ip[13], ip[14], ip[15]],
        daddr: [ip[16], ip[17], ip[18], ip[19]],
        sport,
        dport,
        proto,
        _pad: 0,
        ip_id: b16(4),
    })
}
