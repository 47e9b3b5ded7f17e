//! Expressions tcpdump accepts (each checked with `tcpdump -d` while writing the table), the
//! packets they match and the packets they miss.

use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, PROTO_ICMP, PROTO_UDP, Tuple};

use super::{super::*, pkt};

/// (expression, packets it matches, packets it does not match).
const CASES: &[(&str, &[&str], &[&str])] = &[
    (
        "host 10.0.0.1",
        &["tcp 10.0.0.1:1 > 10.0.0.2:2", "icmp 10.0.0.2 > 10.0.0.1"],
        &[
            "tcp 10.0.0.3:1 > 10.0.0.2:2",
            "udp [2001:db8::1]:1 > [2001:db8::2]:2",
        ],
    ),
    (
        "src host 10.0.0.1",
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
        &["udp 10.0.0.2:1 > 10.0.0.1:2"],
    ),
    (
        "dst 10.0.0.1",
        &["udp 10.0.0.2:1 > 10.0.0.1:2"],
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "src and dst host 10.0.0.1",
        &["udp 10.0.0.1:1 > 10.0.0.1:2"],
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "src or dst host 10.0.0.1",
        &["udp 10.0.0.2:1 > 10.0.0.1:2", "udp 10.0.0.1:1 > 10.0.0.2:2"],
        &["udp 10.0.0.3:1 > 10.0.0.2:2"],
    ),
    (
        "dst or src host 10.0.0.1",
        &["udp 10.0.0.2:1 > 10.0.0.1:2"],
        &["udp 10.0.0.3:1 > 10.0.0.2:2"],
    ),
    (
        "host 2001:db8::1",
        &["tcp [2001:db8::1]:1 > [2001:db8::2]:2"],
        &[
            "tcp [2001:db8::3]:1 > [2001:db8::2]:2",
            "tcp 10.0.0.1:1 > 10.0.0.2:2",
        ],
    ),
    (
        "ip6 host 2001:db8::1",
        &["icmp6 2001:db8::2 > 2001:db8::1"],
        &[],
    ),
    ("ip host 10.0.0.1", &["icmp 10.0.0.2 > 10.0.0.1"], &[]),
    (
        "net 10.0.0.0/8",
        &["tcp 10.200.0.1:1 > 192.0.2.1:2"],
        &[
            "tcp 11.0.0.1:1 > 192.0.2.1:2",
            "tcp [2001:db8::1]:1 > [2001:db8::2]:2",
        ],
    ),
    (
        "net 10.0.0.0 mask 255.0.0.0",
        &["tcp 10.200.0.1:1 > 192.0.2.1:2"],
        &["tcp 11.0.0.1:1 > 192.0.2.1:2"],
    ),
    (
        "net 10.0.0.0 mask 255.0.255.0",
        &["tcp 10.9.0.1:1 > 192.0.2.1:2"],
        &["tcp 10.0.9.1:1 > 192.0.2.1:2"],
    ),
    (
        "net 10.1",
        &["udp 10.1.2.3:1 > 192.0.2.1:2"],
        &["udp 10.2.2.3:1 > 192.0.2.1:2"],
    ),
    (
        "src net 2001:db8::/32",
        &["udp [2001:db8:5::1]:1 > [2001:db9::1]:2"],
        &["udp [2001:db9::1]:1 > [2001:db8::1]:2"],
    ),
    (
        "net 192.0.2.7/32",
        &["icmp 192.0.2.7 > 10.0.0.1"],
        &["icmp 192.0.2.8 > 10.0.0.1"],
    ),
    (
        "port 53",
        &[
            "udp 10.0.0.1:53 > 10.0.0.2:1",
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
        ],
        &[
            "udp 10.0.0.1:54 > 10.0.0.2:1",
            "icmp 10.0.0.1 > 10.0.0.2",
            "frag udp 10.0.0.1:53 > 10.0.0.2:53",
        ],
    ),
    (
        "port 0",
        &["udp 10.0.0.1:0 > 10.0.0.2:1"],
        &["icmp 10.0.0.1 > 10.0.0.2"],
    ),
    (
        "tcp port 80",
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
        &["udp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "udp dst port 53",
        &["udp 10.0.0.1:1 > 10.0.0.2:53"],
        &[
            "udp 10.0.0.1:53 > 10.0.0.2:1",
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
        ],
    ),
    (
        "src and dst port 80",
        &["tcp 10.0.0.1:80 > 10.0.0.2:80"],
        &["tcp 10.0.0.1:80 > 10.0.0.2:81"],
    ),
    (
        "portrange 8000-8080",
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:8000",
            "tcp 10.0.0.1:8080 > 10.0.0.2:1",
        ],
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:8081",
            "tcp 10.0.0.1:1 > 10.0.0.2:7999",
        ],
    ),
    (
        "portrange 8080-8000",
        &["tcp 10.0.0.1:1 > 10.0.0.2:8040"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:8081"],
    ),
    // Numbers as C reads them, as tcpdump does; port ranges in decimal.
    (
        "port 010 or 0x10",
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:8",
            "tcp 10.0.0.1:1 > 10.0.0.2:16",
        ],
        &["tcp 10.0.0.1:1 > 10.0.0.2:10"],
    ),
    (
        "portrange 010-012",
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:10",
            "tcp 10.0.0.1:1 > 10.0.0.2:12",
        ],
        &["tcp 10.0.0.1:1 > 10.0.0.2:8"],
    ),
    (
        "ip proto 0x11 and net 10.0.0.0/010",
        &["udp 10.1.0.1:1 > 192.0.2.1:2"],
        &["tcp 10.1.0.1:1 > 192.0.2.1:2"],
    ),
    (
        "tcp",
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:2",
            "tcp [2001:db8::1]:1 > [2001:db8::2]:2",
        ],
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "icmp",
        &["icmp 10.0.0.1 > 10.0.0.2"],
        &[
            "icmp6 2001:db8::1 > 2001:db8::2",
            "1 2001:db8::1 > 2001:db8::2",
        ],
    ),
    (
        "icmp6",
        &["icmp6 2001:db8::1 > 2001:db8::2"],
        &["icmp 10.0.0.1 > 10.0.0.2"],
    ),
    (
        "ip",
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
        &["udp [2001:db8::1]:1 > [2001:db8::2]:2"],
    ),
    (
        "ip6 and udp",
        &["udp [2001:db8::1]:1 > [2001:db8::2]:2"],
        &[
            "udp 10.0.0.1:1 > 10.0.0.2:2",
            "tcp [2001:db8::1]:1 > [2001:db8::2]:2",
        ],
    ),
    (
        "ip proto 17",
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
        &[
            "udp [2001:db8::1]:1 > [2001:db8::2]:2",
            "tcp 10.0.0.1:1 > 10.0.0.2:2",
        ],
    ),
    (
        "ip6 proto 6",
        &["tcp [2001:db8::1]:1 > [2001:db8::2]:2"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "proto 132",
        &["132 10.0.0.1 > 10.0.0.2", "132 2001:db8::1 > 2001:db8::2"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    // Equal precedence, left to right: `(tcp or udp) and port 53`, not `tcp or (udp and …)`.
    (
        "tcp or udp and port 53",
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
            "udp 10.0.0.1:1 > 10.0.0.2:53",
        ],
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "port 53 and tcp or udp",
        &[
            "udp 10.0.0.1:1 > 10.0.0.2:80",
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
        ],
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "tcp || udp && port 53",
        &["tcp 10.0.0.1:1 > 10.0.0.2:53"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "tcp or (udp and port 53)",
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
        &["udp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    // `not` binds tighter than `and`/`or`.
    (
        "not tcp and port 53",
        &["udp 10.0.0.1:1 > 10.0.0.2:53"],
        &[
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
            "udp 10.0.0.1:1 > 10.0.0.2:54",
        ],
    ),
    (
        "! tcp or port 53",
        &[
            "udp 10.0.0.1:1 > 10.0.0.2:80",
            "tcp 10.0.0.1:1 > 10.0.0.2:53",
        ],
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "not (tcp or udp)",
        &["icmp 10.0.0.1 > 10.0.0.2"],
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "not not tcp",
        &["tcp 10.0.0.1:1 > 10.0.0.2:2"],
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
    ),
    (
        "not port 22",
        &["tcp 10.0.0.1:1 > 10.0.0.2:80", "icmp 10.0.0.1 > 10.0.0.2"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:22"],
    ),
    // Qualifier carry-over to a bare value.
    (
        "host 10.0.0.1 or 10.0.0.2",
        &["udp 10.0.0.2:1 > 10.0.0.9:2"],
        &["udp 10.0.0.3:1 > 10.0.0.9:2"],
    ),
    (
        "port 53 or 80",
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:81"],
    ),
    (
        "tcp port 53 or 80",
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
        &["udp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "src host 10.0.0.1 or 10.0.0.2",
        &["udp 10.0.0.2:1 > 10.0.0.9:2"],
        &["udp 10.0.0.9:1 > 10.0.0.2:2"],
    ),
    (
        "port 22 or not 80",
        &["tcp 10.0.0.1:1 > 10.0.0.2:443"],
        &["tcp 10.0.0.1:1 > 10.0.0.2:80"],
    ),
    (
        "port 1 or (2)",
        &["tcp 10.0.0.1:2 > 10.0.0.2:9"],
        &["tcp 10.0.0.1:3 > 10.0.0.2:9"],
    ),
    (
        "host 10.0.0.1 and (10.0.0.2 or 10.0.0.3)",
        &["udp 10.0.0.1:1 > 10.0.0.3:2"],
        &["udp 10.0.0.1:1 > 10.0.0.4:2"],
    ),
    (
        "ip proto 6 or 17",
        &["udp 10.0.0.1:1 > 10.0.0.2:2"],
        &["icmp 10.0.0.1 > 10.0.0.2"],
    ),
    (
        "net 10.1 or 10.2",
        &["udp 10.2.0.1:1 > 192.0.2.1:2"],
        &["udp 10.3.0.1:1 > 192.0.2.1:2"],
    ),
    (
        "portrange 10-20 or 30-40",
        &["udp 10.0.0.1:35 > 10.0.0.2:1"],
        &["udp 10.0.0.1:25 > 10.0.0.2:1"],
    ),
    (
        "tcp dst port 80 or udp",
        &["udp 10.0.0.1:1 > 10.0.0.2:5"],
        &["tcp 10.0.0.1:80 > 10.0.0.2:5"],
    ),
];

#[test]
fn accepted_expressions_match_what_tcpdump_would() {
    for (text, hits, misses) in CASES {
        let expr = parse(text).unwrap_or_else(|e| panic!("{}", e.render(text)));
        for desc in *hits {
            assert!(
                expr.matches(&pkt(desc)),
                "{text} should match {desc} (parsed as {expr})"
            );
        }
        for desc in *misses {
            assert!(
                !expr.matches(&pkt(desc)),
                "{text} should not match {desc} (parsed as {expr})"
            );
        }
        let again =
            parse(&expr.to_string()).unwrap_or_else(|e| panic!("{}", e.render(&expr.to_string())));
        assert_eq!(again, expr, "{text} printed as {expr}");
    }
}

#[test]
fn precedence_is_left_to_right() {
    let expr = parse("tcp or udp and port 53").unwrap();
    assert_eq!(expr.to_string(), "(tcp or udp) and port 53");
    let expr = parse("port 1 and port 2 or port 3").unwrap();
    assert_eq!(expr.to_string(), "(port 1 and port 2) or port 3");
    assert_eq!(
        parse("not tcp and udp").unwrap().to_string(),
        "not tcp and udp"
    );
}

#[test]
fn views_from_tuples_keep_ports_of_tcp_and_udp_only() {
    let mut t = Tuple {
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 53,
        dport: 53,
        proto: PROTO_ICMP,
        family: FAMILY_IPV4,
        _pad: [0; 2],
    };
    let port = parse("port 53").unwrap();
    let icmp = PacketView::from_tuple(&t).unwrap();
    assert_eq!(icmp, pkt("icmp 10.0.0.1 > 10.0.0.2"));
    assert!(!port.matches(&icmp), "an ICMP echo id is not a port");
    t.proto = PROTO_UDP;
    let udp = PacketView::from_tuple(&t).unwrap();
    assert!(port.matches(&udp));
    assert!(!port.matches(&udp.without_ports()));
    t.family = FAMILY_IPV6;
    t.saddr = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    assert_eq!(
        PacketView::from_tuple(&t).unwrap().src.to_string(),
        "2001:db8::1"
    );
    t.family = 0;
    assert_eq!(PacketView::from_tuple(&t), None);
}
