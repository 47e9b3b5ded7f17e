//! The values primitives take: addresses, networks, ports, port ranges, protocol numbers.

use std::net::{IpAddr, Ipv4Addr};

use super::{
    ast::{Net, PortRange, family_of, prefix_mask},
    error::ErrorKind,
};

/// What a primitive needs after its keyword, for "expected …" messages.
pub const ADDRESS: &str = "an IPv4 or IPv6 address";
pub const NETWORK: &str = "a network (10.0.0.0/8, 2001:db8::/32, 10.0.0.0 mask 255.0.0.0)";
pub const PORT: &str = "a port number";
pub const PORT_RANGE: &str = "a port range such as 1024-2048";
pub const PROTOCOL: &str = "a protocol number";

/// An IPv4 dotted quad or an IPv6 address.
pub fn address(word: &str) -> Option<IpAddr> {
    word.parse().ok()
}

/// A number of at most `max` (`what` names it in the error), read as tcpdump reads numbers:
/// `0x…` hexadecimal, `0…` octal (`port 010` is port 8), otherwise decimal.
pub fn number(word: &str, what: &'static str, max: u32) -> Result<u32, ErrorKind> {
    let (digits, radix) = match word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if word.len() > 1 && word.starts_with('0') => (&word[1..], 8),
        None => (word, 10),
    };
    parse_digits(digits, radix, what, max)
}

/// A decimal number of at most `max` (port ranges: tcpdump reads `010-012` as 10 to 12).
fn decimal(word: &str, what: &'static str, max: u32) -> Result<u32, ErrorKind> {
    parse_digits(word, 10, what, max)
}

fn parse_digits(digits: &str, radix: u32, what: &'static str, max: u32) -> Result<u32, ErrorKind> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(ErrorKind::Expected { what, after: None });
    }
    match u32::from_str_radix(digits, radix) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(ErrorKind::TooBig { what, max }),
    }
}

/// A port number.
pub fn port(word: &str) -> Result<u16, ErrorKind> {
    let n = number(word, PORT, u32::from(u16::MAX))?;
    Ok(u16::try_from(n).unwrap_or(u16::MAX))
}

/// `A-B` (tcpdump accepts `B-A` too and means the same range).
pub fn port_range(word: &str) -> Result<PortRange, ErrorKind> {
    let expected = ErrorKind::Expected {
        what: PORT_RANGE,
        after: None,
    };
    let (a, b) = word.split_once('-').ok_or_else(|| expected.clone())?;
    let port = |p| match decimal(p, PORT, u32::from(u16::MAX)) {
        Ok(n) => Ok(u16::try_from(n).unwrap_or(u16::MAX)),
        Err(e @ ErrorKind::TooBig { .. }) => Err(e),
        Err(_) => Err(expected.clone()),
    };
    let (a, b) = (port(a)?, port(b)?);
    Ok(PortRange {
        first: a.min(b),
        last: a.max(b),
    })
}

/// `ADDR`, `ADDR/LEN`, or tcpdump's short IPv4 networks (`10`, `10.1`, `10.1.2`, `10/8`).
/// A full address alone is a host-sized network.
pub fn network(word: &str) -> Result<Net, ErrorKind> {
    let expected = || ErrorKind::Expected {
        what: NETWORK,
        after: None,
    };
    let (addr_text, len_text) = match word.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (word, None),
    };
    let (addr, implied_len) = match address(addr_text) {
        Some(a) => (a, family_of(a).bits()),
        None => short_ipv4(addr_text).ok_or_else(expected)?,
    };
    let family = family_of(addr);
    let len = match len_text {
        Some(l) => number(l, "the prefix length", family.bits())?,
        None => implied_len,
    };
    with_mask(word, addr, prefix_mask(family, len))
}

/// `net ADDR mask MASK` (IPv4 only, as in tcpdump).
pub fn masked(word: &str, addr_text: &str, mask_text: &str) -> Result<Net, ErrorKind> {
    let expected = |what| ErrorKind::Expected { what, after: None };
    let Some(IpAddr::V4(addr)) = address(addr_text) else {
        return Err(expected("an IPv4 network address before \"mask\""));
    };
    let Some(IpAddr::V4(mask)) = address(mask_text) else {
        return Err(expected("an IPv4 mask such as 255.255.0.0"));
    };
    with_mask(word, IpAddr::V4(addr), IpAddr::V4(mask))
}

fn with_mask(word: &str, addr: IpAddr, mask: IpAddr) -> Result<Net, ErrorKind> {
    let outside = match (addr, mask) {
        (IpAddr::V4(a), IpAddr::V4(m)) => a.to_bits() & !m.to_bits() != 0,
        (IpAddr::V6(a), IpAddr::V6(m)) => a.to_bits() & !m.to_bits() != 0,
        _ => true,
    };
    if outside {
        return Err(ErrorKind::HostBits(word.to_owned()));
    }
    Ok(Net { addr, mask })
}

/// `10`, `10.1`, `10.1.2`: the leading octets of an IPv4 network, and its implied length.
fn short_ipv4(text: &str) -> Option<(IpAddr, u32)> {
    let mut octets = [0u8; 4];
    let mut count = 0;
    for part in text.split('.') {
        let leading_zero = part.len() > 1 && part.starts_with('0');
        if count == 3
            || part.is_empty()
            || leading_zero
            || !part.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        octets[count] = part.parse().ok()?;
        count += 1;
    }
    let len = u32::try_from(count).ok()? * 8;
    Some((IpAddr::V4(Ipv4Addr::from(octets)), len))
}
