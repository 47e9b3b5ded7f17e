//! Arbitrary text as `iptables-save -t nat` output, parsed the way pktrace reads the node's
//! nat table, then NAT decisions for a packet over those rules: the SNAT of the packet, the
//! DNAT to every `--to-destination` the text names (and to an arbitrary address), and the
//! same for the reply direction, as attribution asks them.
//!
//! What must hold: no panic and no hang (the walk has a depth and a rule budget; libFuzzer's
//! `-timeout` catches a slow input); a decision names a rule that exists, with the target that
//! explains the step, a path that ends in its chain (from POSTROUTING for SNAT), and a service
//! name that is safe to print as is; the reason and rule, once escaped, are safe to print.
#![no_main]

use std::net::IpAddr;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pktrace_fuzz::terminal_safe;
use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, PROTO_ICMP, PROTO_TCP, PROTO_UDP, Tuple};
use tracer_user::{
    explain::NatDecision,
    rules::{NatRules, PacketCtx},
    util::safe,
};

/// Addresses the dictionary and the seed dumps use, so packets meet the rules.
const KNOWN: [&str; 12] = [
    "10.13.76.46",
    "10.13.76.26",
    "10.13.76.7",
    "10.0.159.58",
    "10.13.76.4",
    "203.0.113.80",
    "203.0.113.251",
    "10.0.0.10",
    "168.63.129.16",
    "127.0.0.1",
    "10.0.0.1",
    "fd00::1",
];

#[derive(Arbitrary, Debug)]
enum Addr {
    Known(u8),
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Addr {
    fn ip(&self) -> IpAddr {
        match self {
            Self::Known(i) => KNOWN[usize::from(*i) % KNOWN.len()].parse().unwrap(),
            Self::V4(a) => IpAddr::from(*a),
            Self::V6(a) => IpAddr::from(*a),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Proto {
    Tcp,
    Udp,
    Icmp,
    Other(u8),
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    proto: Proto,
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
    /// Where an arbitrary DNAT sends the packet.
    to: Addr,
    mark: u32,
    local: Vec<Addr>,
    out_iface: Option<String>,
    /// The dump (the rest of the input).
    text: &'a str,
}

fuzz_target!(|input: Input<'_>| {
    let rules = NatRules::parse(input.text);
    let proto = match input.proto {
        Proto::Tcp => PROTO_TCP,
        Proto::Udp => PROTO_UDP,
        Proto::Icmp => PROTO_ICMP,
        Proto::Other(p) => p,
    };
    let pre = make(
        proto,
        input.src.ip(),
        input.sport,
        input.dst.ip(),
        input.dport,
    );
    let ctx = PacketCtx {
        mark: input.mark,
        local_addrs: input.local.iter().take(4).map(Addr::ip).collect(),
        out_iface: input.out_iface.clone(),
        sources: tracer_user::traced::TracedAddrs::default(),
    };
    if let Some(d) = rules.snat_decision(&pre, &ctx) {
        check(&rules, &d, &["MASQUERADE", "SNAT"]);
        assert_eq!(
            d.path.first().map(String::as_str),
            Some("POSTROUTING"),
            "{d:?}"
        );
    }
    let mut targets: Vec<(IpAddr, u16)> = destinations(input.text).take(4).collect();
    targets.push((input.to.ip(), input.dport));
    for (ip, port) in targets {
        let post = make(proto, input.src.ip(), input.sport, ip, port);
        if let Some(d) = rules.dnat_decision(&pre, &post, &ctx) {
            check(&rules, &d, &["DNAT"]);
        }
        // A reply's reverse translation is explained from the original direction, without `-o`.
        let reply_ctx = PacketCtx {
            out_iface: None,
            ..ctx.clone()
        };
        if let Some(d) = rules.dnat_decision(&pre, &post, &reply_ctx) {
            check(&rules, &d, &["DNAT"]);
        }
        if let Some(d) = rules.snat_decision(&post, &reply_ctx) {
            check(&rules, &d, &["MASQUERADE", "SNAT"]);
        }
    }
});

/// A tuple as the parser writes it; a destination of the other family becomes the source's.
fn make(proto: u8, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Tuple {
    let mut t = Tuple {
        proto,
        sport,
        dport,
        ..Tuple::default()
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            t.family = FAMILY_IPV4;
            t.saddr[..4].copy_from_slice(&s.octets());
            t.daddr[..4].copy_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            t.family = FAMILY_IPV6;
            (t.saddr, t.daddr) = (s.octets(), d.octets());
        }
        _ => return make(proto, src, sport, src, dport),
    }
    t
}

fn check(rules: &NatRules, d: &NatDecision, targets: &[&str]) {
    assert!(targets.contains(&d.target.as_str()), "{d:?}");
    let chain = rules
        .chain(&d.chain)
        .unwrap_or_else(|| panic!("no chain {d:?}"));
    assert!(
        d.rule_index >= 1 && d.rule_index <= chain.rules.len(),
        "{d:?}"
    );
    assert_eq!(d.path.last(), Some(&d.chain), "{d:?}");
    if let Some(service) = &d.service {
        assert!(terminal_safe(service) && service.contains('/'), "{d:?}");
    }
    for reply in [false, true] {
        let a = d.attribution(reply);
        assert_eq!(a.rule, d.chain);
        for text in [Some(&a.rule), a.service.as_ref(), a.why.as_ref()]
            .into_iter()
            .flatten()
        {
            assert!(terminal_safe(&safe(text)), "{text:?}");
        }
    }
}

/// Addresses and ports after `--to-destination` in the text (`ip`, `ip:port`,
/// `[v6]:port`, `lo-hi:port`), so the DNAT replay has candidates.
fn destinations(text: &str) -> impl Iterator<Item = (IpAddr, u16)> + '_ {
    let mut words = text.split_whitespace();
    std::iter::from_fn(move || {
        loop {
            if words.next()? != "--to-destination" {
                continue;
            }
            let Some(word) = words.next() else {
                return None;
            };
            if let Some(found) = destination(word) {
                return Some(found);
            }
        }
    })
}

fn destination(word: &str) -> Option<(IpAddr, u16)> {
    let (addr, port) = if let Some(rest) = word.strip_prefix('[') {
        let (ip, tail) = rest.split_once(']')?;
        (ip, tail.strip_prefix(':').unwrap_or(""))
    } else {
        match word.split_once(':') {
            Some((ip, port)) => (ip, port),
            None => (word, ""),
        }
    };
    let ip = addr.split('-').next()?.parse().ok()?;
    let port = port
        .split('-')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    Some((ip, port))
}
