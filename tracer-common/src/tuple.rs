//! A packet's addresses, ports and protocol at one point ([`Tuple`]) and the fields NAT leaves
//! alone that recognise the same packet at every hook ([`Fingerprint`]).

use core::mem::size_of;

/// Address family of a [`Tuple`].
pub const FAMILY_IPV4: u8 = 4;
/// Address family of a [`Tuple`].
pub const FAMILY_IPV6: u8 = 6;

/// IP protocol numbers the parser understands.
pub const PROTO_ICMP: u8 = 1;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// A packet's addresses, ports and protocol as seen at one point.
///
/// IPv4 addresses sit in the first four bytes of `saddr`/`daddr` (network order), the rest is
/// zero. Ports are in host order. For ICMP echo both ports hold the echo identifier (as
/// conntrack does); for other ICMP messages both are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a `repr(C)` tuple shared with the kernel programs; the layout is theirs"
    )]
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<Tuple>() == 40);

impl Tuple {
    /// The same flow seen from the other end.
    #[must_use]
    pub const fn reversed(&self) -> Self {
        Self {
            saddr: self.daddr,
            daddr: self.saddr,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
            family: self.family,
            _pad: [0; 2],
        }
    }

    /// True when this is a real packet tuple (the parser found an IP header).
    #[must_use]
    pub const fn is_set(&self) -> bool {
        self.family != 0
    }
}

/// Fields of a packet that NAT does not change, used to recognise the same packet at every
/// hook: IP id (IPv4) plus TCP seq/ack/flags/window, ICMP type/code/sequence and leading
/// payload, or UDP length and leading payload bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint {
    pub ip_id: u32,
    pub a: u32,
    pub b: u32,
    pub c: u32,
}
const _: () = assert!(size_of::<Fingerprint>() == 16);
