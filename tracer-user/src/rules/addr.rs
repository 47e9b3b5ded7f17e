//! Addresses in rules: prefixes (`-s`/`-d`, [`Cidr`]), NAT targets' address and port ranges
//! ([`NatTo`]) and the range test both use ([`in_range`]).

use std::net::IpAddr;

/// `--to-destination`/`--to-source`: an address range and an optional port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatTo {
    pub lo: IpAddr,
    pub hi: IpAddr,
    pub ports: Option<(u16, u16)>,
}

impl NatTo {
    /// True when `ip:port` is one of the addresses this target maps to.
    #[must_use]
    pub fn covers(&self, ip: IpAddr, port: u16) -> bool {
        in_range(ip, self.lo, self.hi)
            && self.ports.is_none_or(|(lo, hi)| (lo..=hi).contains(&port))
    }
}

/// An address prefix (`-s`/`-d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `10.0.0.0/8`, `10.0.0.0/255.0.0.0`, `fd00::/8` or a bare address.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let (addr, prefix) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            "" => max,
            p => p.parse::<u8>().ok().or_else(|| mask_len(p))?,
        };
        (prefix <= max).then_some(Self { addr, prefix })
    }

    /// True when `ip` is inside the prefix (always false across address families).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => (u128::from(a.to_bits()) << 96, 4),
            IpAddr::V6(a) => (a.to_bits(), 6),
        };
        // IPv4 sits in the top 32 bits, so the prefix counts from the top for both families.
        let ((net, fa), (ip, fb)) = (bits(self.addr), bits(ip));
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.prefix))
            .unwrap_or(0);
        fa == fb && (net ^ ip) & mask == 0
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Prefix length of a dotted IPv4 mask such as `255.255.0.0`.
fn mask_len(mask: &str) -> Option<u8> {
    let bits = mask.parse::<std::net::Ipv4Addr>().ok()?.to_bits();
    let len = bits.leading_ones();
    (bits.checked_shl(len).unwrap_or(0) == 0)
        .then(|| u8::try_from(len).ok())
        .flatten()
}

/// True when `ip` lies in `lo..=hi` (same family).
#[must_use]
pub fn in_range(ip: IpAddr, lo: IpAddr, hi: IpAddr) -> bool {
    match (ip, lo, hi) {
        (IpAddr::V4(i), IpAddr::V4(l), IpAddr::V4(h)) => (l..=h).contains(&i),
        (IpAddr::V6(i), IpAddr::V6(l), IpAddr::V6(h)) => (l..=h).contains(&i),
        _ => false,
    }
}
