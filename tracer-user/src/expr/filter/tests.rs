use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP};

use super::*;
use crate::{
    journey::{Ending, Journey, Point, Step},
    test_support::t,
};

fn filter(text: &str) -> Filter {
    Filter::parse(&[text.to_owned()]).unwrap().unwrap()
}

/// Whether a run shows the journey.
fn shows(f: &Filter, j: &Journey) -> bool {
    f.matches_any(j.packets())
}

fn journey(steps: Vec<Step>) -> Journey {
    Journey {
        steps,
        ending: Ending::Left,
    }
}

/// Pod to a ClusterIP's port 80, DNATed to a backend's 8080.
fn to_service() -> Journey {
    let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:8080");
    journey(vec![
        Step::tc_at(Point::Ingress, Some("azv1"), pre, 1),
        Step::nat_at(Point::Dnat, pre, post, 2),
        Step::tc_at(Point::Egress, Some("azv2"), post, 3),
    ])
}

#[test]
fn words_are_joined_like_tcpdump() {
    let words: Vec<String> = ["udp", "port", "53"].map(Into::into).to_vec();
    assert_eq!(
        Filter::parse(&words).unwrap().unwrap().text(),
        "udp port 53"
    );
    assert_eq!(Filter::parse(&[]).unwrap(), None);
}

#[test]
fn a_journey_is_shown_when_any_step_matches() {
    let j = to_service();
    for shown in [
        "port 8080",
        "port 80",
        "dst host 10.13.76.26",
        "host 10.0.159.58",
        "tcp and dst port 8080",
        "net 10.13.76.0/24",
    ] {
        assert!(shows(&filter(shown), &j), "{shown}");
    }
    for hidden in [
        "udp",
        "port 53",
        "host 10.0.0.10",
        "icmp or ip6",
        "src port 80",
    ] {
        assert!(!shows(&filter(hidden), &j), "{hidden}");
    }
    // Only the NAT step carries the packet before it, when no tc hook saw it.
    let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:8080");
    let nat_only = journey(vec![Step::nat_at(Point::Dnat, pre, post, 2)]);
    assert!(shows(&filter("dst port 80"), &nat_only));
    assert!(!shows(&filter("dst port 80"), &journey(vec![])));
}

#[test]
fn bad_and_empty_expressions_are_usage_errors_with_the_place() {
    let words: Vec<String> = ["udp", "port", "x53"].map(Into::into).to_vec();
    let err = Filter::parse(&words).unwrap_err();
    let shown = err.to_string();
    let lines: Vec<&str> = shown.lines().collect();
    assert!(lines[0].starts_with("bad expression at 10: "), "{shown}");
    assert_eq!(lines[1], "  udp port x53");
    assert_eq!(lines[2], "           ^");
    let err = Filter::parse(&["icmp and port 53".to_owned()]).unwrap_err();
    assert!(matches!(err, FilterError::MatchesNothing { .. }), "{err}");
}

#[test]
fn the_kernel_gets_the_versions_and_protocols_only() {
    let k = filter("udp port 53").kernel();
    for (family, proto, want) in [
        (FAMILY_IPV4, PROTO_UDP, true),
        (FAMILY_IPV6, PROTO_UDP, true),
        (FAMILY_IPV4, PROTO_TCP, false),
        (FAMILY_IPV4, PROTO_ICMP, false),
    ] {
        assert_eq!(k.admits(family, proto), want, "{family} {proto}");
    }
    let k = filter("ip6 and (tcp or icmp6)").kernel();
    assert!(k.admits(FAMILY_IPV6, PROTO_ICMPV6) && k.admits(FAMILY_IPV6, PROTO_TCP));
    assert!(!k.admits(FAMILY_IPV4, PROTO_TCP) && !k.admits(FAMILY_IPV6, PROTO_UDP));
    // Addresses and ports change under NAT: the kernel is given no bound on them.
    let k = filter("host 10.0.0.1 or port 80").kernel();
    for proto in 0..=u8::MAX {
        assert!(
            k.admits(FAMILY_IPV4, proto) && k.admits(FAMILY_IPV6, proto),
            "{proto}"
        );
    }
    let k = filter("not tcp").kernel();
    assert!(
        k.admits(FAMILY_IPV4, PROTO_TCP),
        "a negation bounds nothing"
    );
}
