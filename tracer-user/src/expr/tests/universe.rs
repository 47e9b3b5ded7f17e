//! Generated expressions over a small universe of packets: the prefilter never rules out a
//! packet the expression matches, and every expression prints as text that parses back to it.

use std::net::IpAddr;

use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};

use super::super::*;

/// Primitives, several with values of the universe and some that carry over.
const ATOMS: &[&str] = &[
    "tcp",
    "udp",
    "icmp",
    "icmp6",
    "ip",
    "ip6",
    "port 53",
    "src port 80",
    "dst port 8080",
    "portrange 50-90",
    "tcp port 53",
    "udp dst port 53",
    "port 53 or 22",
    "tcp src port 22 or 80",
    "src and dst port 22",
    "host 10.0.0.1",
    "src host 2001:db8::1",
    "dst 192.0.2.1",
    "host 10.0.0.1 or 10.0.0.2",
    "net 10.0.0.0/8",
    "net 2001:db8::/32",
    "src net 2001:db8:1::/48",
    "dst net 192.0.2.0 mask 255.255.255.0",
    "net 10 or 192.0.2.0/24",
    "ip proto 17",
    "ip6 proto 6",
    "proto 132",
    "src and dst net 10.0.0.0/24",
    "portrange 22-53 or 8000-8080",
];

/// A xorshift generator: the same expressions on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap()
    }
}

fn expression(rng: &mut Rng, depth: u32) -> String {
    let choice = if depth == 0 { 0 } else { rng.below(6) };
    match choice {
        0 | 1 => ATOMS[rng.below(ATOMS.len())].to_owned(),
        2 => format!("not {}", expression(rng, depth - 1)),
        3 => format!("({})", expression(rng, depth - 1)),
        _ => {
            let op = ["and", "or", "&&", "||"][rng.below(4)];
            format!(
                "{} {op} {}",
                expression(rng, depth - 1),
                expression(rng, depth - 1)
            )
        }
    }
}

/// Every packet of the universe: a few addresses of each family, five protocols, ports that
/// the atoms name and miss, and later fragments (no ports).
fn universe() -> Vec<PacketView> {
    let v4: Vec<IpAddr> = ["10.0.0.1", "10.0.0.2", "192.0.2.1"]
        .map(|a| a.parse().unwrap())
        .into();
    let v6: Vec<IpAddr> = ["2001:db8::1", "2001:db8:1::1"]
        .map(|a| a.parse().unwrap())
        .into();
    let ports = [
        Some((53, 80)),
        Some((80, 8080)),
        Some((8080, 53)),
        Some((1, 22)),
        Some((22, 22)),
        Some((70, 9)),
        None,
    ];
    let mut out = Vec::new();
    for addrs in [&v4, &v6] {
        for &src in addrs {
            for &dst in addrs {
                for proto in [PROTO_TCP, PROTO_UDP, PROTO_ICMP, PROTO_ICMPV6, 132] {
                    let with_ports = matches!(proto, PROTO_TCP | PROTO_UDP);
                    for &p in ports.iter().filter(|p| with_ports || p.is_none()) {
                        out.push(PacketView {
                            src,
                            dst,
                            proto,
                            ports: p,
                        });
                    }
                }
            }
        }
    }
    out
}

#[test]
fn prefilter_never_rules_out_a_match() {
    let packets = universe();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut narrowed, mut ruled_out) = (0, 0);
    for _ in 0..3000 {
        let text = expression(&mut rng, 4);
        let expr = parse(&text).unwrap_or_else(|e| panic!("{}", e.render(&text)));
        let printed = expr.to_string();
        assert_eq!(
            parse(&printed).as_ref(),
            Ok(&expr),
            "{text} printed as {printed}"
        );
        let pre = Prefilter::of(&expr);
        narrowed += usize::from(pre != Prefilter::default());
        let mut any_match = false;
        for p in &packets {
            let hit = expr.matches(p);
            any_match |= hit;
            ruled_out += usize::from(!pre.admits(p));
            assert!(
                pre.admits(p) || !hit,
                "{text}: {pre:?} rules out {p:?}, which matches"
            );
        }
        assert!(
            pre.admits_some() || !any_match,
            "{text}: admits_some is false but {expr} matches"
        );
    }
    // The check above means something only if the prefilter narrows often.
    assert!(
        narrowed > 1000 && ruled_out > 100_000,
        "narrowed {narrowed}, ruled out {ruled_out}"
    );
}

#[test]
fn prefilter_examples() {
    let of = |t: &str| Prefilter::of(&parse(t).unwrap());
    let ports = |p: &Prefilter| {
        p.ports
            .clone()
            .map(|r| r.iter().map(|r| (r.first, r.last)).collect::<Vec<_>>())
    };
    assert_eq!(of("not port 22"), Prefilter::default());
    assert_eq!(
        ports(&of("port 53 or 80 or portrange 81-90")),
        Some(vec![(53, 53), (80, 90)])
    );
    assert_eq!(of("port 53 or icmp").ports, None);
    assert_eq!(of("tcp port 80").protos, Some([PROTO_TCP].into()));
    assert_eq!(of("port 80").protos, Some([PROTO_TCP, PROTO_UDP].into()));
    assert_eq!(
        ports(&of("src port 80 and dst portrange 1-1000")),
        Some(vec![(80, 80)])
    );
    assert_eq!(
        of("icmp6 or host 10.0.0.1").families,
        Some([Family::V4, Family::V6].into())
    );
    assert!(!of("icmp and port 53").admits_some());
    assert!(of("icmp or port 53").admits_some());
    let svc = PacketView {
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.159.58".parse().unwrap(),
        proto: PROTO_TCP,
        ports: Some((40000, 80)),
    };
    let backend = PacketView {
        dst: "10.13.76.26".parse().unwrap(),
        ports: Some((40000, 8080)),
        ..svc
    };
    let pre = of("port 8080");
    assert!(
        !pre.admits(&svc) && pre.admits_any(&[svc, backend]),
        "DNAT 80 -> 8080"
    );
}
