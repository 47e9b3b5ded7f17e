use std::sync::Arc;

use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::*;
use crate::{
    config::Format,
    journey::{Attribution, unanswered::Refusals},
    output::{
        json::contract::Line,
        sink,
        test_support::{Shared, t},
    },
    summary::Summary,
};

/// 2026-11-26T12:00:01.123456Z, in nanoseconds since the epoch.
const LEFT_UNIX_NS: i128 = 1_795_694_401_123_456_789;

fn snat() -> NoAnswer {
    NoAnswer {
        entered: t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:81"),
        left: t(PROTO_TCP, "10.13.76.4:41234", "203.0.113.80:81"),
        iface: Some("eth0".into()),
        left_ktime_ns: 5_000_000_000,
        left_unix_ns: LEFT_UNIX_NS,
        waited_ns: 3_012_000_000,
        attribution: None,
    }
}

fn dnat() -> NoAnswer {
    NoAnswer {
        entered: t(PROTO_UDP, "10.13.76.46:5353", "10.0.159.58:80"),
        left: t(PROTO_UDP, "10.13.76.46:5353", "10.13.76.26:8080"),
        iface: Some("azva4124965a9b".into()),
        attribution: Some(Arc::new(Attribution {
            rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
            service: Some("default/whereami".into()),
            why: None,
        })),
        ..snat()
    }
}

#[test]
fn text_lines_say_the_connection_its_nat_where_it_left_and_how_long_it_waited() {
    assert_eq!(
        text_line(&snat()),
        "? no answer  tcp 10.13.76.46:41234 > 203.0.113.80:81 (after SNAT 10.13.76.4:41234): \
         left eth0 at 12:00:01.123, no answer in 3 s"
    );
    assert_eq!(
        text_line(&dnat()),
        "? no answer  udp 10.13.76.46:5353 > 10.0.159.58:80 (after DNAT 10.13.76.26:8080): \
         left azva4124965a9b at 12:00:01.123, no answer in 3 s; rule KUBE-SEP-6HBOEI5FVFTJNRJ3 \
         (default/whereami)"
    );
    let echo = t(PROTO_ICMP, "10.13.76.46", "203.0.113.80");
    let n = NoAnswer {
        entered: echo,
        left: echo,
        iface: None,
        waited_ns: 7_999_000_000,
        ..snat()
    };
    assert_eq!(
        text_line(&n),
        "? no answer  icmp 10.13.76.46 > 203.0.113.80: left ? at 12:00:01.123, no answer in 7 s"
    );
    let hostile = NoAnswer {
        iface: Some("eth\u{1b}[2J0".into()),
        ..snat()
    };
    assert!(!text_line(&hostile).contains('\u{1b}'));
}

#[test]
fn json_lines_round_trip_through_the_contract() {
    let buf = Shared::default();
    let mut s = sink(
        Format::Json,
        false,
        "default/ubuntu".into(),
        Box::new(buf.clone()),
    );
    s.no_answer(&snat()).unwrap();
    s.no_answer(&dnat()).unwrap();
    let text = buf.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let want = NoAnswerLine {
        proto: "tcp".into(),
        pod: "default/ubuntu".into(),
        svc: None,
        src: "10.13.76.4:41234".into(),
        dst: "203.0.113.80:81".into(),
        orig_src: Some("10.13.76.46:41234".into()),
        orig_dst: None,
        iface: Some("eth0".into()),
        left_at: "2026-11-26T12:00:01.123456Z".into(),
        left_ktime_ns: 5_000_000_000,
        waited_ms: 3012,
        rule: None,
        service: None,
        class: Some("no_answer".into()),
        why: Some(
            "tcp 10.13.76.4:41234 > 203.0.113.80:81 left the node by eth0 and nothing came back \
             in 3 s (its source translated to 10.13.76.4:41234 on the way out); look at the \
             route and firewalls towards 203.0.113.80:81 beyond this node, and whether \
             203.0.113.80:81 serves this port"
                .into(),
        ),
    };
    assert_eq!(Line::parse(lines[0]).unwrap(), Line::NoAnswer(want));
    assert!(lines[0].starts_with(r#"{"type":"no_answer","proto":"tcp","pod":"default/ubuntu","#));
    let Line::NoAnswer(d) = Line::parse(lines[1]).unwrap() else {
        panic!("{}", lines[1]);
    };
    assert_eq!(
        (
            d.src.as_str(),
            d.dst.as_str(),
            d.orig_src.as_deref(),
            d.orig_dst.as_deref()
        ),
        (
            "10.13.76.46:5353",
            "10.13.76.26:8080",
            None,
            Some("10.0.159.58:80")
        )
    );
    assert_eq!(
        (d.rule.as_deref(), d.service.as_deref()),
        (Some("KUBE-SEP-6HBOEI5FVFTJNRJ3"), Some("default/whereami"))
    );
    assert_eq!(serde_json::to_string(&Line::NoAnswer(d)).unwrap(), lines[1]);
}

#[test]
fn text_and_line_output_write_the_same_line_and_count_it_in_the_summary() {
    let mut summary = Summary::new();
    summary.add_no_answer();
    summary.set_no_answer_waiting(2);
    summary.set_refusals(Refusals {
        reset: 1,
        icmp_error: 4,
    });
    for format in [Format::Text, Format::Line] {
        let buf = Shared::default();
        let mut s = sink(
            format,
            false,
            "default/ubuntu".into(),
            Box::new(buf.clone()),
        );
        s.no_answer(&snat()).unwrap();
        s.evicted_connections(3, 5).unwrap();
        s.summary(&summary).unwrap();
        let text = buf.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], text_line(&snat()), "{format:?}");
        assert!(
            lines[1].starts_with("!! stopped waiting for the answer of 3 connections (5 total)")
        );
        assert!(
            text.contains(
                "  no answer: 1 (2 more still waiting at exit, for less than 3 s: not reported)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  refused: reset 1, icmp error 4\n"),
            "{text}"
        );
    }
    let buf = Shared::default();
    let mut s = sink(Format::Text, false, "p".into(), Box::new(buf.clone()));
    s.summary(&Summary::new()).unwrap();
    let text = buf.text();
    assert!(
        text.contains("  no answer: 0\n") && !text.contains("refused"),
        "{text}"
    );
}
