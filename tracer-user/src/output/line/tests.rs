use std::sync::Arc;

use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::*;
use crate::{
    journey::{Attribution, Point},
    output::test_support::{Shared, nat, t, tc, whereami},
};

/// 20:41:07.000000 UTC on some day, minus the fixtures' first `ktime_ns` (1 ms).
const WALL_OFFSET: i128 =
    (1_790_000_000 / 86_400 * 86_400 + 20 * 3600 + 41 * 60 + 7) * 1_000_000_000 - 1_000_000;

fn render(f: impl FnOnce(&mut dyn Sink)) -> String {
    render_in(None, f)
}

fn render_in(width: Option<usize>, f: impl FnOnce(&mut dyn Sink)) -> String {
    let buf = Shared::default();
    let mut sink = LineSink::with_wall_offset(
        Box::new(buf.clone()),
        false,
        "default/ubuntu".into(),
        WALL_OFFSET,
    )
    .fit_to(width);
    f(&mut sink);
    buf.text()
}

fn rule(name: &str, service: Option<&str>) -> Arc<Attribution> {
    Arc::new(Attribution {
        rule: name.into(),
        service: service.map(Into::into),
        why: Some("explained at length elsewhere".into()),
    })
}

#[test]
fn a_dnat_journey_is_one_line_with_every_fact() {
    let out = render(|s| s.journey(&whereami()).unwrap());
    assert_eq!(
        out,
        "20:41:07.000000 tcp 10.13.76.46:41234 > 10.0.159.58:80 → = > 10.13.76.26:80 \
         azv47c3ee9d512→azva4124965a9b 9.41µs DNAT KUBE-SEP-6HBOEI5FVFTJNRJ3 \
         (default/whereami)\n"
    );
}

#[test]
fn masquerade_reply_unknown_rule_and_endings() {
    // Out through DNAT and MASQUERADE, the SNAT's rule unknown; it timed out.
    let a = t(PROTO_UDP, "10.13.76.46:5353", "10.0.0.10:53");
    let b = t(PROTO_UDP, "10.13.76.46:5353", "10.224.0.9:53");
    let c = t(PROTO_UDP, "10.224.0.4:61000", "10.224.0.9:53");
    let mut dnat = nat(Point::Dnat, a, b, 1_002_000, None);
    dnat.attribution = Some(rule("KUBE-SEP-AAAA", None));
    let j = Journey {
        steps: vec![
            tc(Point::Ingress, "azvx", a, 1_001_000),
            dnat,
            nat(Point::Snat, b, c, 1_003_000, Some(500)),
        ],
        ending: Ending::TimedOut,
    };
    // A reply: the un-DNAT, the ICMP packet has no ports; the ingress time is a bound.
    let r0 = t(PROTO_ICMP, "203.0.113.7", "10.13.76.46");
    let r1 = t(PROTO_ICMP, "10.0.159.58", "10.13.76.46");
    let mut undo = nat(Point::Dnat, r0, r1, 2_000_500, None);
    undo.nat_mut().reply = true;
    let mut first = tc(Point::Ingress, "eth0", r0, 2_000_000);
    if let StepKind::Tc { time_bound, .. } = &mut first.kind {
        *time_bound = true;
    }
    let reply = Journey {
        steps: vec![first, undo],
        ending: Ending::InterfaceGone,
    };
    let out = render(|s| {
        s.journey(&j).unwrap();
        s.journey(&reply).unwrap();
        s.journey(&Journey {
            steps: vec![],
            ending: Ending::Left,
        })
        .unwrap();
    });
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "20:41:07.000001 udp 10.13.76.46:5353 > 10.0.0.10:53 → 10.224.0.4:61000 > \
             10.224.0.9:53 azvx→azvx 2.00µs DNAT KUBE-SEP-AAAA SNAT ? (timed out)",
            "20:41:07.001000 icmp 203.0.113.7 > 10.13.76.46 → 10.0.159.58 > = eth0→eth0 \
             ≥500ns un-DNAT ? (interface gone)",
        ],
        "a journey without steps writes nothing"
    );
}

#[test]
fn names_from_outside_are_escaped_and_a_journey_without_tc_says_so() {
    let a = t(PROTO_TCP, "10.13.76.46:1", "10.0.0.1:80");
    let b = t(PROTO_TCP, "10.13.76.46:1", "10.13.76.26:80");
    let mut dnat = nat(Point::Dnat, a, b, 1_000_000, None);
    dnat.attribution = Some(rule("KUBE-SEP-\x1b[31mX", Some("ns/\nsvc")));
    let out = render(|s| {
        s.journey(&Journey {
            steps: vec![dnat],
            ending: Ending::Flushed,
        })
        .unwrap();
    });
    assert_eq!(out.lines().count(), 1, "{out:?}");
    assert!(
        !out.contains('\x1b') && out.ends_with("(still open at exit)\n"),
        "{out:?}"
    );
    assert!(out.contains(" ?→? 0ns DNAT "), "{out:?}");
}

#[test]
fn the_summary_is_the_text_summary() {
    let mut summary = Summary::new();
    summary.record(&whereami());
    summary.add_events(3);
    let line = render(|s| s.summary(&summary).unwrap());
    let buf = Shared::default();
    let mut text = TextSink::new(Box::new(buf.clone()), false, "default/ubuntu".into());
    text.summary(&summary).unwrap();
    assert_eq!(line, buf.text());
    assert!(line.starts_with("summary for default/ubuntu: 1 journey, 3 events"));
}

#[test]
fn clock_is_utc_time_of_day_in_microseconds() {
    assert_eq!(time_of_day_us(0), "00:00:00.000000");
    assert_eq!(time_of_day_us(86_399_999_999_999), "23:59:59.999999");
    assert_eq!(
        time_of_day_us(86_400_000_000_000 + 3_723_000_456_000),
        "01:02:03.000456"
    );
    assert_eq!(time_of_day_us(-5), "00:00:00.000000");
}

#[test]
fn on_a_terminal_a_line_gives_up_interfaces_then_rules_then_its_end_to_fit() {
    let whole = render(|s| s.journey(&whereami()).unwrap());
    // Wide enough: the whole line.
    assert_eq!(
        render_in(Some(200), |s| s.journey(&whereami()).unwrap()),
        whole
    );
    // 135 columns: without the interfaces.
    assert_eq!(
        render_in(Some(135), |s| s.journey(&whereami()).unwrap()),
        "20:41:07.000000 tcp 10.13.76.46:41234 > 10.0.159.58:80 → = > 10.13.76.26:80 9.41µs \
         DNAT KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami)\n"
    );
    // 110 columns: milliseconds, the translation inside the packet, the service for its rule.
    assert_eq!(
        render_in(Some(110), |s| s.journey(&whereami()).unwrap()),
        "20:41:07.000 tcp 10.13.76.46:41234 > 10.0.159.58:80→10.13.76.26:80 9.41µs \
         DNAT default/whereami\n"
    );
    // 80 columns: the NAT's kind, no names; the facts stay.
    assert_eq!(
        render_in(Some(80), |s| s.journey(&whereami()).unwrap()),
        "20:41:07.000 tcp 10.13.76.46:41234 > 10.0.159.58:80→10.13.76.26:80 9.41µs DNAT\n"
    );
    // Narrower still: cut, marked.
    assert_eq!(
        render_in(Some(40), |s| s.journey(&whereami()).unwrap()),
        "20:41:07.000 tcp 10.13.76.46:41234 > 10…\n"
    );
}

#[test]
fn a_rule_without_a_service_stays_and_a_drop_gives_up_its_function() {
    let a = t(PROTO_UDP, "10.13.76.46:5353", "10.0.0.10:53");
    let mut drop = tc(Point::Ingress, "azvx", a, 1_002_000);
    drop.kind = StepKind::Drop(crate::journey::DropStep {
        reason: "NETFILTER_DROP".into(),
        location: "nft_do_chain".into(),
        after_leaving: false,
        class: crate::drops::FailureClass::Firewall,
    });
    drop.attribution = Some(rule("KUBE-SERVICES", Some("default/web-gone")));
    let mut masq = nat(Point::Snat, a, a, 1_001_500, None);
    masq.attribution = Some(rule("IP-MASQ-AGENT", None));
    let j = Journey {
        steps: vec![tc(Point::Ingress, "azvx", a, 1_001_000), masq, drop],
        ending: Ending::Dropped,
    };
    let brief = render_in(Some(140), |s| s.journey(&j).unwrap());
    assert_eq!(
        brief,
        "20:41:07.000 udp 10.13.76.46:5353 > 10.0.0.10:53 1.00µs SNAT IP-MASQ-AGENT \
         ✗ drop firewall: NETFILTER_DROP by default/web-gone (dropped)\n"
    );
    let bare = render_in(Some(105), |s| s.journey(&j).unwrap());
    assert_eq!(
        bare,
        "20:41:07.000 udp 10.13.76.46:5353 > 10.0.0.10:53 1.00µs SNAT ✗ drop \
         firewall: NETFILTER_DROP (dropped)\n"
    );
}

#[test]
fn cutting_counts_characters_not_bytes() {
    let mut line = "ab→µ✗cd".to_owned();
    cut_to(&mut line, 5);
    assert_eq!(line, "ab→µ…");
    let mut short = "ab→".to_owned();
    cut_to(&mut short, 3);
    assert_eq!(short, "ab→");
}
