//! Matching one packet, as seen at one hook, against an expression.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, PROTO_TCP, PROTO_UDP, Tuple};

use super::ast::{Dir, Expr, Family, Test, family_of};

/// What a filter sees of one packet at one point: both addresses (of one family), the
/// transport protocol, and the ports when the packet carries a TCP or UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketView {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    /// `(source, destination)`; `None` for ICMP and other protocols, and for a fragment that
    /// is not the first (no transport header): such packets never match a port test.
    pub ports: Option<(u16, u16)>,
}

impl PacketView {
    /// The view of a parsed tuple; `None` when the tuple is unset (no IP header). Ports are
    /// kept for TCP and UDP only (a [`Tuple`] stores the ICMP echo id in its ports). For a
    /// fragment after the first (`flag::FRAGMENT` set, no transport header: the parser leaves
    /// the ports zero) call [`Self::without_ports`], so that port tests miss it as in tcpdump.
    #[must_use]
    pub fn from_tuple(t: &Tuple) -> Option<Self> {
        let (src, dst) = match t.family {
            FAMILY_IPV4 => (v4(&t.saddr), v4(&t.daddr)),
            FAMILY_IPV6 => (
                IpAddr::V6(Ipv6Addr::from(t.saddr)),
                IpAddr::V6(Ipv6Addr::from(t.daddr)),
            ),
            _ => return None,
        };
        let ports = matches!(t.proto, PROTO_TCP | PROTO_UDP).then_some((t.sport, t.dport));
        Some(Self {
            src,
            dst,
            proto: t.proto,
            ports,
        })
    }

    /// The same packet without a transport header (a fragment after the first).
    #[must_use]
    pub const fn without_ports(self) -> Self {
        Self {
            ports: None,
            ..self
        }
    }

    /// The packet's IP version.
    #[must_use]
    pub const fn family(&self) -> Family {
        family_of(self.src)
    }
}

fn v4(addr: &[u8; 16]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
}

impl Expr {
    /// True when the packet as seen in `view` matches. A journey is shown when any of its
    /// steps matches: that is the caller's loop over steps.
    #[must_use]
    pub fn matches(&self, view: &PacketView) -> bool {
        match self {
            Self::And(items) => items.iter().all(|e| e.matches(view)),
            Self::Or(items) => items.iter().any(|e| e.matches(view)),
            Self::Not(e) => !e.matches(view),
            Self::Test(t) => t.matches(view),
        }
    }
}

impl Test {
    /// True when the packet as seen in `view` passes this primitive.
    #[must_use]
    pub fn matches(&self, view: &PacketView) -> bool {
        match *self {
            Self::Family(f) => view.family() == f,
            Self::Proto { family, proto } => {
                family.is_none_or(|f| f == view.family()) && view.proto == proto
            }
            Self::Host { dir, addr } => dir.holds(view.src == addr, view.dst == addr),
            Self::Net { dir, net } => dir.holds(net.contains(view.src), net.contains(view.dst)),
            Self::Port { dir, proto, range } => {
                let Some((sport, dport)) = view.ports else {
                    return false;
                };
                matches!(view.proto, PROTO_TCP | PROTO_UDP)
                    && proto.is_none_or(|p| p == view.proto)
                    && dir.holds(range.contains(sport), range.contains(dport))
            }
        }
    }
}

impl Dir {
    /// Combines the source's and the destination's result.
    const fn holds(self, src: bool, dst: bool) -> bool {
        match self {
            Self::Src => src,
            Self::Dst => dst,
            Self::Either => src || dst,
            Self::Both => src && dst,
        }
    }
}
