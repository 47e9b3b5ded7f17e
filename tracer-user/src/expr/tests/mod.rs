//! Tables of expressions (what tcpdump accepts, with packets they match and miss; what it
//! refuses, with where), and generated expressions checked against a small universe of packets.

mod errors;
mod matching;
mod universe;

use std::net::IpAddr;

use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};

use super::PacketView;

/// A packet from a short description: `"tcp 10.0.0.1:1234 > 10.0.0.2:80"`,
/// `"icmp 10.0.0.1 > 10.0.0.2"`, `"udp [2001:db8::1]:53 > [2001:db8::2]:5353"`,
/// `"frag udp 10.0.0.1 > 10.0.0.2"` (a later fragment: no ports).
fn pkt(desc: &str) -> PacketView {
    let mut words: Vec<&str> = desc.split_whitespace().collect();
    let fragment = words[0] == "frag";
    if fragment {
        words.remove(0);
    }
    let proto = match words[0] {
        "tcp" => PROTO_TCP,
        "udp" => PROTO_UDP,
        "icmp" => PROTO_ICMP,
        "icmp6" => PROTO_ICMPV6,
        n => n.parse().unwrap(),
    };
    assert_eq!(words[2], ">", "{desc}");
    let (src, sport) = end(words[1]);
    let (dst, dport) = end(words[3]);
    let ports = sport.zip(dport).filter(|_| !fragment);
    PacketView {
        src,
        dst,
        proto,
        ports,
    }
}

/// `10.0.0.1:80`, `[2001:db8::1]:80`, `10.0.0.1`, `2001:db8::1`.
fn end(s: &str) -> (IpAddr, Option<u16>) {
    if let Some(rest) = s.strip_prefix('[') {
        let (addr, port) = rest.split_once("]:").unwrap();
        return (addr.parse().unwrap(), Some(port.parse().unwrap()));
    }
    if let Ok(addr) = s.parse() {
        return (addr, None);
    }
    let (addr, port) = s.rsplit_once(':').unwrap();
    (addr.parse().unwrap(), Some(port.parse().unwrap()))
}
