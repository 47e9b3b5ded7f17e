//! What a packet is to its connection ([`PacketKind`]): what opens a connection and what
//! answers one, for [`super::unanswered`].

use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};

/// What a packet is to its connection, read from its fingerprint (`tracer_common::parse`:
/// TCP flags in the low byte of `c`, the ICMP type in bits 8..16 of `a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// TCP SYN without ACK: a connection's first packet.
    Syn,
    /// TCP with RST.
    Reset,
    /// Any other TCP segment.
    Tcp,
    /// A UDP datagram.
    Udp,
    /// ICMP or ICMPv6 echo request.
    EchoRequest,
    /// ICMP or ICMPv6 echo reply.
    EchoReply,
    /// An ICMP error (destination unreachable, time exceeded, parameter problem; for ICMPv6
    /// also packet too big) about another packet.
    IcmpError,
    /// Anything else.
    Other,
}

impl PacketKind {
    /// The kind of a packet of protocol `proto` with fingerprint `fp`.
    #[must_use]
    pub const fn of(proto: u8, fp: &tracer_common::Fingerprint) -> Self {
        const SYN: u32 = 0x02;
        const RST: u32 = 0x04;
        const ACK: u32 = 0x10;
        let icmp_type = (fp.a >> 8) & 0xff;
        match proto {
            PROTO_TCP if fp.c & RST != 0 => Self::Reset,
            PROTO_TCP if fp.c & (SYN | ACK) == SYN => Self::Syn,
            PROTO_TCP => Self::Tcp,
            PROTO_UDP => Self::Udp,
            PROTO_ICMP => match icmp_type {
                8 => Self::EchoRequest,
                0 => Self::EchoReply,
                3 | 11 | 12 => Self::IcmpError,
                _ => Self::Other,
            },
            PROTO_ICMPV6 => match icmp_type {
                128 => Self::EchoRequest,
                129 => Self::EchoReply,
                1..=4 => Self::IcmpError,
                _ => Self::Other,
            },
            _ => Self::Other,
        }
    }

    /// True for a packet that opens a connection: a TCP SYN, a UDP datagram, an echo request.
    #[must_use]
    pub const fn opens(self) -> bool {
        matches!(self, Self::Syn | Self::Udp | Self::EchoRequest)
    }
}
