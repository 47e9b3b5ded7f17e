//! The parsed expression: boolean structure over address, port and protocol tests.
//!
//! Every test is fully qualified (direction, protocol, family), so [`Expr`]'s `Display` prints
//! an expression that parses back to the same value (unless spelling out carried-over
//! qualifiers makes it longer than [`super::MAX_LEN`]), with parentheses around nested runs.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

/// A filter expression (tcpdump syntax subset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// Every operand matches (`and`, `&&`).
    And(Vec<Expr>),
    /// At least one operand matches (`or`, `||`).
    Or(Vec<Expr>),
    /// The operand does not match (`not`, `!`).
    Not(Box<Expr>),
    /// One primitive.
    Test(Test),
}

/// IP version of a packet or address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

/// Which of the packet's two ends a test looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// `src`.
    Src,
    /// `dst`.
    Dst,
    /// `src or dst`, the default: either end.
    Either,
    /// `src and dst`: both ends.
    Both,
}

/// One primitive of the expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ip` or `ip6`.
    Family(Family),
    /// `tcp`, `udp`, `icmp`, `icmp6`, `[ip|ip6] proto N`: the transport protocol, and the
    /// family when the primitive names one (`icmp` is IPv4's, `icmp6` IPv6's).
    Proto { family: Option<Family>, proto: u8 },
    /// `host ADDR`.
    Host { dir: Dir, addr: IpAddr },
    /// `net ADDR/LEN`, `net ADDR mask MASK`.
    Net { dir: Dir, net: Net },
    /// `port N`, `portrange A-B`, optionally `tcp`/`udp` only.
    Port {
        dir: Dir,
        proto: Option<u8>,
        range: PortRange,
    },
}

/// An address block: `addr` with every bit outside `mask` zero (the parser checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub addr: IpAddr,
    pub mask: IpAddr,
}

/// Ports `first..=last`, `first <= last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// True when `port` lies in the range.
    #[must_use]
    pub const fn contains(self, port: u16) -> bool {
        self.first <= port && port <= self.last
    }
}

impl Net {
    /// True when `addr` lies in the block (an address of the other family never does).
    #[must_use]
    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.addr, self.mask, addr) {
            (IpAddr::V4(n), IpAddr::V4(m), IpAddr::V4(a)) => {
                a.to_bits() & m.to_bits() == n.to_bits()
            }
            (IpAddr::V6(n), IpAddr::V6(m), IpAddr::V6(a)) => {
                a.to_bits() & m.to_bits() == n.to_bits()
            }
            _ => false,
        }
    }

    /// The prefix length when the mask is contiguous (`None` for `mask 255.0.255.0`).
    #[must_use]
    pub fn prefix_len(&self) -> Option<u32> {
        let (ones, zeros) = match self.mask {
            IpAddr::V4(m) => (m.to_bits().count_ones(), m.to_bits().trailing_zeros()),
            IpAddr::V6(m) => (m.to_bits().count_ones(), m.to_bits().trailing_zeros()),
        };
        (ones + zeros == family_of(self.mask).bits()).then_some(ones)
    }
}

impl Family {
    /// Address width in bits.
    #[must_use]
    pub const fn bits(self) -> u32 {
        match self {
            Self::V4 => 32,
            Self::V6 => 128,
        }
    }
}

/// The family of an address.
#[must_use]
pub const fn family_of(addr: IpAddr) -> Family {
    match addr {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

/// The mask of a prefix of `len` bits (`len` at most the family's width).
#[must_use]
pub fn prefix_mask(family: Family, len: u32) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from_bits(
            u32::MAX.checked_shl(32 - len).unwrap_or(0),
        )),
        Family::V6 => IpAddr::V6(Ipv6Addr::from_bits(
            u128::MAX.checked_shl(128 - len).unwrap_or(0),
        )),
    }
}

impl Expr {
    /// True for `and`/`or` nodes, which print in parentheses inside another node.
    #[must_use]
    pub const fn is_chain(&self) -> bool {
        matches!(self, Self::And(_) | Self::Or(_))
    }
}

/// Prints an expression with no carry-over; parentheses around every nested `and`/`or` run
/// (only there), so the printed nesting is the parsed nesting at most.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (items, op) = match self {
            Self::And(items) => (items, " and "),
            Self::Or(items) => (items, " or "),
            Self::Not(e) => return write!(f, "not {}", Nested(e)),
            Self::Test(t) => return write!(f, "{t}"),
        };
        for (i, e) in items.iter().enumerate() {
            if i > 0 {
                f.write_str(op)?;
            }
            write!(f, "{}", Nested(e))?;
        }
        Ok(())
    }
}

/// An operand: in parentheses when it is an `and`/`or` run.
struct Nested<'a>(&'a Expr);

impl fmt::Display for Nested<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_chain() {
            write!(f, "({})", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Src => "src ",
            Self::Dst => "dst ",
            Self::Either => "",
            Self::Both => "src and dst ",
        })
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Family(Family::V4) => f.write_str("ip"),
            Self::Family(Family::V6) => f.write_str("ip6"),
            Self::Proto { family, proto } => fmt_proto(f, family, proto),
            Self::Host { dir, addr } => write!(f, "{dir}host {addr}"),
            Self::Net { dir, net } => match net.prefix_len() {
                Some(len) => write!(f, "{dir}net {}/{len}", net.addr),
                None => write!(f, "{dir}net {} mask {}", net.addr, net.mask),
            },
            Self::Port { dir, proto, range } => {
                match proto {
                    Some(p) => fmt_proto(f, None, p)?,
                    None => return fmt_ports(f, dir, range),
                }
                f.write_str(" ")?;
                fmt_ports(f, dir, range)
            }
        }
    }
}

fn fmt_proto(f: &mut fmt::Formatter<'_>, family: Option<Family>, proto: u8) -> fmt::Result {
    use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};
    match (family, proto) {
        (None, PROTO_TCP) => f.write_str("tcp"),
        (None, PROTO_UDP) => f.write_str("udp"),
        (Some(Family::V4), PROTO_ICMP) => f.write_str("icmp"),
        (Some(Family::V6), PROTO_ICMPV6) => f.write_str("icmp6"),
        (None, p) => write!(f, "proto {p}"),
        (Some(Family::V4), p) => write!(f, "ip proto {p}"),
        (Some(Family::V6), p) => write!(f, "ip6 proto {p}"),
    }
}

fn fmt_ports(f: &mut fmt::Formatter<'_>, dir: Dir, range: PortRange) -> fmt::Result {
    if range.first == range.last {
        write!(f, "{dir}port {}", range.first)
    } else {
        write!(f, "{dir}portrange {}-{}", range.first, range.last)
    }
}
