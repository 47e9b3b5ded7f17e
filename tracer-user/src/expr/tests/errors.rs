//! Expressions refused, with the byte offset and the message.

use super::super::*;

/// (expression, byte offset of the fault, the message after "bad expression at N: ").
const CASES: &[(&str, usize, &str)] = &[
    (
        "",
        0,
        "expected a filter (host, net, port, tcp, udp, icmp, …)",
    ),
    ("port", 4, "expected a port number after \"port\""),
    ("port 53 or http", 11, "expected a port number after \"or\""),
    ("port http", 5, "expected a port number after \"port\""),
    ("dst port 70000", 9, "a port number must be at most 65535"),
    (
        "portrange 5",
        10,
        "expected a port range such as 1024-2048 after \"portrange\"",
    ),
    (
        "host 10.1",
        5,
        "expected an IPv4 or IPv6 address after \"host\"",
    ),
    ("host", 4, "expected an IPv4 or IPv6 address after \"host\""),
    (
        "10.0.0.1",
        0,
        "\"10.0.0.1\" is not a filter: write host 10.0.0.1",
    ),
    ("not 80", 4, "\"80\" is not a filter: write port 80"),
    ("tcp or 80", 7, "\"80\" is not a filter: write port 80"),
    (
        "ubuntu",
        0,
        "\"ubuntu\" is not a filter: write e.g. host 10.0.0.1, port 53 or udp (tcpdump syntax)",
    ),
    ("tcp host 10.0.0.1", 9, "\"tcp\" cannot qualify host"),
    (
        "ip6 host 10.0.0.1",
        9,
        "\"ip6\" cannot qualify an IPv4 address",
    ),
    (
        "ip host 2001:db8::1",
        8,
        "\"ip\" cannot qualify an IPv6 address",
    ),
    (
        "ip6 net 10.0.0.0/8",
        8,
        "\"ip6\" cannot qualify an IPv4 address",
    ),
    ("icmp port 5", 10, "\"icmp\" cannot qualify port"),
    ("ip port 80", 8, "\"ip\" cannot qualify port"),
    ("src proto 6", 10, "\"src\" cannot qualify proto"),
    (
        "ip proto udp",
        9,
        "expected a protocol number after \"proto\"",
    ),
    ("ip proto 300", 9, "a protocol number must be at most 255"),
    (
        "net 10.0.0.1/8",
        4,
        "\"10.0.0.1/8\" has bits set outside its prefix: give the network address",
    ),
    ("net 10.0.0.0/33", 4, "the prefix length must be at most 32"),
    (
        "net 2001:db8::/129",
        4,
        "the prefix length must be at most 128",
    ),
    (
        "net 2001:db8::/16",
        4,
        "\"2001:db8::/16\" has bits set outside its prefix: give the network address",
    ),
    (
        "net 10.0.0.0 mask 255.0",
        18,
        "expected an IPv4 mask such as 255.255.0.0 after \"mask\"",
    ),
    (
        "net 2001:db8:: mask 255.0.0.0",
        4,
        "expected an IPv4 network address before \"mask\" after \"net\"",
    ),
    (
        "net 10.0.0.0 mask",
        17,
        "expected an IPv4 mask such as 255.255.0.0 after \"mask\"",
    ),
    (
        "net 10.0.0.0/8 mask 255.0.0.0",
        4,
        "expected an IPv4 network address before \"mask\" after \"net\"",
    ),
    (
        "()",
        1,
        "expected a filter (host, net, port, tcp, udp, icmp, …) after \"(\"",
    ),
    ("(tcp", 4, "expected \"and\", \"or\" or \")\" after \"tcp\""),
    (
        "tcp)",
        3,
        "expected \"and\", \"or\" or the end (this \")\" has no \"(\") after \"tcp\"",
    ),
    (
        "tcp udp",
        4,
        "expected \"and\", \"or\" or the end after \"tcp\"",
    ),
    (
        "tcp and",
        7,
        "expected a filter (host, net, port, tcp, udp, icmp, …) after \"and\"",
    ),
    ("tcp & udp", 4, "expected \"&&\""),
    ("tcp | udp", 4, "expected \"||\""),
    (
        "tcp[13] = 2",
        3,
        "\"[\" is not supported: pktrace filters on addresses, ports and protocols, not on packet bytes or comparisons (tcp[13] = 2)",
    ),
    (
        "ether host 00:11:22:33:44:55",
        0,
        "\"ether\" is not supported: pktrace filters on host, net, port, portrange, src, dst, tcp, udp, icmp, icmp6, ip, ip6 and proto",
    ),
    (
        "tcp and vlan",
        8,
        "\"vlan\" is not supported: pktrace filters on host, net, port, portrange, src, dst, tcp, udp, icmp, icmp6, ip, ip6 and proto",
    ),
    (
        "port 53 or é",
        11,
        "\"é\" cannot be in an expression: use words such as host, port, udp",
    ),
];

#[test]
fn refused_expressions_say_where_and_why() {
    for (text, pos, message) in CASES {
        let err = parse(text).expect_err(text);
        assert_eq!(
            (err.pos, err.kind.to_string().trim_end()),
            (*pos, message.trim_end()),
            "{text}"
        );
        assert_eq!(
            err.to_string(),
            format!("bad expression at {}: {}", pos + 1, err.kind)
        );
    }
}

#[test]
fn render_points_at_the_fault() {
    let err = parse("port 53 or http").unwrap_err();
    assert_eq!(
        err.render("port 53 or http"),
        "pktrace: bad expression at 12: expected a port number after \"or\"\n  port 53 or http\n             ^"
    );
    let text = "host \u{1b}[2J";
    let err = parse(text).unwrap_err();
    assert_eq!(
        err.render(text),
        "pktrace: bad expression at 6: \"\\u{1b}\" cannot be in an expression: use words such as host, port, udp\n  host \\u{1b}[2J\n       ^"
    );
    let text = "port é";
    let shown = parse(text).unwrap_err().render(text);
    assert_eq!(shown.lines().last(), Some("       ^"), "{shown}");
}

#[test]
fn hostile_input_is_bounded() {
    let long = "tcp or ".repeat(MAX_LEN / 7) + "udp";
    assert!(matches!(
        parse(&long).unwrap_err().kind,
        ErrorKind::TooLong { .. }
    ));
    let flat = "tcp or ".repeat(MAX_LEN / 7 - 1) + "udp";
    assert!(parse(&flat).is_ok(), "a long run of one operator is flat");
    for deep in [
        "(".repeat(MAX_DEPTH + 1) + "tcp" + &")".repeat(MAX_DEPTH + 1),
        "not ".repeat(MAX_DEPTH + 1) + "tcp",
        "! ".repeat(2000) + "tcp",
        "(".repeat(3000),
        "tcp and udp or ".repeat(MAX_DEPTH) + "icmp",
    ] {
        let err = parse(&deep).unwrap_err();
        assert_eq!(err.kind, ErrorKind::TooDeep, "{}", &deep[..40]);
    }
    let ok = "(".repeat(MAX_DEPTH) + "tcp" + &")".repeat(MAX_DEPTH);
    assert!(parse(&ok).is_ok());
}

#[test]
fn the_deepest_expression_accepted_prints_as_one_accepted() {
    // Found by the expr_parse fuzz target: printing added parentheses around the top `and`.
    for text in [
        "!".repeat(MAX_DEPTH) + "tcp and port 65535",
        "(".repeat(MAX_DEPTH - 1) + "tcp or udp" + &")".repeat(MAX_DEPTH - 1) + " and tcp",
        "tcp or (udp and icmp) and ip or ".repeat(MAX_DEPTH / 4) + "ip6",
    ] {
        let expr = parse(&text).unwrap_or_else(|e| panic!("{}", e.render(&text)));
        let printed = expr.to_string();
        assert_eq!(parse(&printed), Ok(expr), "{printed}");
    }
}
