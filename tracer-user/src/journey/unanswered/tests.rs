use std::sync::Arc;

use tracer_common::{PROTO_ICMP, PROTO_TCP, PROTO_UDP, Tuple};

use super::*;
use crate::{journey::Step, test_support::t};

const S: u64 = 1_000_000_000;

fn tc(point: Point, iface: &str, tuple: Tuple, at: u64, kind: PacketKind) -> Step {
    let mut s = Step::tc_at(point, Some(iface), tuple, at);
    s.set_packet_kind(kind);
    s
}

/// The pod's packet `pre`, SNATed (or DNATed) to `post`, out through eth0 at `at`.
fn out(pre: Tuple, post: Tuple, at: u64, kind: PacketKind) -> Journey {
    let mut steps = vec![tc(Point::Ingress, "azv1", pre, at - 10, kind)];
    if pre != post {
        let point = if pre.daddr == post.daddr {
            Point::Snat
        } else {
            Point::Dnat
        };
        steps.push(Step::nat_at(point, pre, post, at - 5));
    }
    steps.push(tc(Point::Egress, "eth0", post, at, kind));
    Journey {
        steps,
        ending: Ending::Left,
    }
}

/// A packet `wire` coming in on eth0 at `at`, un-NATed to `inside`, out to the pod.
fn back(wire: Tuple, inside: Tuple, at: u64, kind: PacketKind) -> Journey {
    let mut steps = vec![tc(Point::Ingress, "eth0", wire, at, kind)];
    if wire != inside {
        let mut s = Step::nat_at(Point::Snat, wire, inside, at + 5);
        s.nat_mut().reply = true;
        steps.push(s);
    }
    steps.push(tc(Point::Egress, "azv1", inside, at + 10, kind));
    Journey {
        steps,
        ending: Ending::Left,
    }
}

fn syn() -> (Tuple, Tuple) {
    (
        t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.80:81"),
        t(PROTO_TCP, "10.13.76.4:41234", "203.0.113.80:81"),
    )
}

fn table() -> Unanswered {
    Unanswered::new(DEFAULT_BYTES, 1_000 * i128::from(S))
}

#[test]
fn an_unanswered_syn_is_reported_once_after_the_wait_with_where_it_left() {
    let (pre, post) = syn();
    let mut u = table();
    u.open(&out(pre, post, 10 * S, PacketKind::Syn));
    u.tick(10 * S + WAIT_NS - 1);
    assert!(u.take_due().is_empty(), "not before the wait");
    // Its retransmit is the same connection.
    u.open(&out(pre, post, 11 * S, PacketKind::Syn));
    u.tick(13 * S);
    let due = u.take_due();
    assert_eq!(due.len(), 1, "{due:?}");
    let n = &due[0];
    assert_eq!((n.entered, n.left), (pre, post));
    assert_eq!(n.iface.as_deref(), Some("eth0"));
    assert_eq!((n.left_ktime_ns, n.waited_ns), (10 * S, 3 * S));
    assert_eq!(n.left_unix_ns, 1_010 * i128::from(S));
    // Retransmits after the report are not reported again.
    u.open(&out(pre, post, 14 * S, PacketKind::Syn));
    u.tick(30 * S);
    assert!(u.take_due().is_empty());
    assert_eq!(u.waiting(), 0);
}

#[test]
fn a_syn_ack_back_to_the_translated_tuple_answers_the_connection() {
    let (pre, post) = syn();
    let mut u = table();
    u.open(&out(pre, post, S, PacketKind::Syn));
    assert!(u.answer(&back(
        post.reversed(),
        pre.reversed(),
        2 * S,
        PacketKind::Tcp
    )));
    u.tick(10 * S);
    assert!(u.take_due().is_empty());
    assert_eq!(u.refusals(), Refusals::default());
    // A new SYN of the same tuple later is a new connection.
    u.open(&out(pre, post, 20 * S, PacketKind::Syn));
    u.tick(24 * S);
    assert_eq!(u.take_due().len(), 1);
}

#[test]
fn a_reply_to_the_untranslated_tuple_answers_nothing() {
    let (pre, post) = syn();
    let mut u = table();
    u.open(&out(pre, post, S, PacketKind::Syn));
    // Back to the pod's own address: not what the SNATed connection gets back.
    assert!(!u.answer(&back(
        pre.reversed(),
        pre.reversed(),
        2 * S,
        PacketKind::Tcp
    )));
    u.tick(5 * S);
    assert_eq!(u.take_due().len(), 1);
}

#[test]
fn a_dnat_connection_is_answered_by_its_backend_and_keeps_its_service() {
    let pre = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    let mut j = out(pre, post, S, PacketKind::Syn);
    j.steps[1].attribution = Some(Arc::new(Attribution {
        rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
        service: Some("default/whereami".into()),
        why: None,
    }));
    let mut u = table();
    u.open(&j);
    u.tick(5 * S);
    let due = u.take_due();
    let a = due[0].attribution.as_deref().expect("the DNAT's rule");
    assert_eq!(a.service.as_deref(), Some("default/whereami"));
    assert_eq!(due[0].entered.daddr, pre.daddr);

    let mut u = table();
    u.open(&j);
    assert!(u.answer(&back(
        post.reversed(),
        pre.reversed(),
        2 * S,
        PacketKind::Tcp
    )));
    u.tick(5 * S);
    assert!(u.take_due().is_empty());
}

#[test]
fn a_reset_or_an_icmp_error_is_an_answer_and_counted_as_a_refusal() {
    let (pre, post) = syn();
    let mut u = table();
    u.open(&out(pre, post, S, PacketKind::Syn));
    u.answer(&back(
        post.reversed(),
        pre.reversed(),
        2 * S,
        PacketKind::Reset,
    ));
    let udp_pre = t(PROTO_UDP, "10.13.76.46:5000", "203.0.113.80:53");
    let udp_post = t(PROTO_UDP, "10.13.76.4:5000", "203.0.113.80:53");
    u.open(&out(udp_pre, udp_post, S, PacketKind::Udp));
    // Port unreachable from the destination, to the node's address, un-NATed to the pod.
    let err_wire = t(PROTO_ICMP, "203.0.113.80", "10.13.76.4");
    let err_in = t(PROTO_ICMP, "203.0.113.80", "10.13.76.46");
    assert!(u.answer(&back(err_wire, err_in, 2 * S, PacketKind::IcmpError)));
    u.tick(10 * S);
    assert!(u.take_due().is_empty());
    assert_eq!(
        u.refusals(),
        Refusals {
            reset: 1,
            icmp_error: 1
        }
    );
    // An error from another host answers nothing.
    u.open(&out(pre, post, 20 * S, PacketKind::Syn));
    let other = t(PROTO_ICMP, "198.51.100.1", "10.13.76.4");
    assert!(!u.answer(&back(other, other, 21 * S, PacketKind::IcmpError)));
}

#[test]
fn each_request_of_an_answered_udp_flow_waits_again_and_its_answers_open_nothing() {
    let q = t(PROTO_UDP, "10.13.76.46:5000", "10.13.76.30:53");
    let mut u = table();
    u.open(&out(q, q, S, PacketKind::Udp));
    let answer = back(q.reversed(), q.reversed(), S + 1_000, PacketKind::Udp);
    assert!(u.answer(&answer));
    u.open(&answer);
    u.tick(5 * S);
    assert!(
        u.take_due().is_empty(),
        "the answer is no connection of its own"
    );
    // The next query of the same socket waits again, and gets none.
    u.open(&out(q, q, 6 * S, PacketKind::Udp));
    u.tick(9 * S + 1);
    let due = u.take_due();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].left_ktime_ns, 6 * S);
    // A one-way stream is reported once while remembered.
    for i in 10..20 {
        u.open(&out(q, q, i * S, PacketKind::Udp));
    }
    u.tick(30 * S);
    assert!(u.take_due().is_empty());
    // Forgotten after REMEMBER_NS, reported again.
    u.tick(10 * S + REMEMBER_NS);
    u.open(&out(q, q, 200 * S, PacketKind::Udp));
    u.tick(204 * S);
    assert_eq!(u.take_due().len(), 1);
}

#[test]
fn only_first_packets_that_left_the_node_wait() {
    let (pre, post) = syn();
    let mut u = table();
    u.open(&out(pre, post, S, PacketKind::Tcp));
    u.open(&out(pre, post, S, PacketKind::Reset));
    let mut dropped = out(pre, post, S, PacketKind::Syn);
    dropped.ending = Ending::Dropped;
    u.open(&dropped);
    let mut timed_out = out(pre, post, S, PacketKind::Syn);
    timed_out.ending = Ending::TimedOut;
    u.open(&timed_out);
    let echo = t(PROTO_ICMP, "10.13.76.46", "203.0.113.80");
    u.open(&out(echo, echo, S, PacketKind::EchoReply));
    u.tick(100 * S);
    assert!(u.take_due().is_empty());
    u.open(&out(echo, echo, 101 * S, PacketKind::EchoRequest));
    u.tick(105 * S);
    assert_eq!(u.take_due().len(), 1);
}

#[test]
fn a_full_table_forgets_the_oldest_and_counts_the_waiting_ones() {
    let cap = 10 * ENTRY_BYTES + 20 * SLOT_BYTES;
    let mut u = Unanswered::new(cap, 0);
    for port in 1..=50u16 {
        let q = t(PROTO_UDP, &format!("10.13.76.46:{port}"), "203.0.113.80:53");
        u.open(&out(q, q, S + u64::from(port), PacketKind::Udp));
        assert!(u.bytes() <= cap, "{} > {cap}", u.bytes());
    }
    let kept = cap / (ENTRY_BYTES + SLOT_BYTES);
    assert_eq!(u.evicted(), 50 - kept as u64);
    u.tick(10 * S);
    let due = u.take_due();
    assert_eq!(due.len(), kept);
    // The newest were kept.
    assert!(
        due.iter().all(|n| usize::from(n.left.sport) > 50 - kept),
        "{due:?}"
    );
}

#[test]
fn packet_kinds_from_the_fingerprint() {
    use tracer_common::{Fingerprint, PROTO_ICMPV6};
    let fp = |a: u32, c: u32| Fingerprint {
        ip_id: 0,
        a,
        b: 0,
        c,
    };
    let cases = [
        (PROTO_TCP, fp(0, 0x02), PacketKind::Syn),
        (PROTO_TCP, fp(0, 0x12), PacketKind::Tcp),
        (PROTO_TCP, fp(0, 0x14), PacketKind::Reset),
        (PROTO_TCP, fp(0, 0x04 | (512 << 16)), PacketKind::Reset),
        (PROTO_UDP, fp(0, 0), PacketKind::Udp),
        (PROTO_ICMP, fp(8 << 8, 0), PacketKind::EchoRequest),
        (PROTO_ICMP, fp(0, 0), PacketKind::EchoReply),
        (PROTO_ICMP, fp((3 << 8) | 3, 0), PacketKind::IcmpError),
        (PROTO_ICMP, fp(11 << 8, 0), PacketKind::IcmpError),
        (PROTO_ICMPV6, fp(128 << 8, 0), PacketKind::EchoRequest),
        (PROTO_ICMPV6, fp(129 << 8, 0), PacketKind::EchoReply),
        (PROTO_ICMPV6, fp(1 << 8, 0), PacketKind::IcmpError),
        (PROTO_ICMPV6, fp(135 << 8, 0), PacketKind::Other),
        (47, fp(0, 0x02), PacketKind::Other),
    ];
    for (proto, fp, want) in cases {
        assert_eq!(PacketKind::of(proto, &fp), want, "{proto} {fp:?}");
    }
}

#[test]
fn a_first_packet_dropped_beyond_the_node_waits_from_the_egress_it_left_by() {
    let (pre, post) = syn();
    let dropped = |after_leaving| {
        let mut j = out(pre, post, S, PacketKind::Syn);
        let mut drop = Step::drop_at("NETFILTER_DROP", "nft_do_chain", post, S + 50);
        if let crate::journey::StepKind::Drop(d) = &mut drop.kind {
            d.after_leaving = after_leaving;
        }
        j.steps.push(drop);
        j.ending = Ending::Dropped;
        j
    };
    let mut u = table();
    // Dropped on the node, before it left: no connection went out.
    u.open(&dropped(false));
    u.tick(10 * S);
    assert!(u.take_due().is_empty());
    u.open(&dropped(true));
    u.tick(20 * S);
    let due = u.take_due();
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].left, due[0].iface.as_deref(), due[0].left_ktime_ns),
        (post, Some("eth0"), S)
    );
}

#[test]
fn an_icmp_error_answers_only_the_connection_that_sent_to_its_host_last() {
    let (pre, post) = syn();
    let udp_pre = t(PROTO_UDP, "10.13.76.46:5000", "203.0.113.80:82");
    let udp_post = t(PROTO_UDP, "10.13.76.4:5000", "203.0.113.80:82");
    let mut u = table();
    u.open(&out(pre, post, S, PacketKind::Syn));
    u.open(&out(udp_pre, udp_post, 2 * S, PacketKind::Udp));
    let err_wire = t(PROTO_ICMP, "203.0.113.80", "10.13.76.4");
    let err_in = t(PROTO_ICMP, "203.0.113.80", "10.13.76.46");
    assert!(u.answer(&back(err_wire, err_in, 2 * S + 100, PacketKind::IcmpError)));
    // The SYN's retransmit is the latest packet to that host now.
    u.open(&out(pre, post, 3 * S, PacketKind::Syn));
    u.tick(4 * S + 1);
    let due = u.take_due();
    assert_eq!(due.len(), 1, "the SYN still waited: {due:?}");
    assert_eq!(due[0].left, post);
    assert_eq!(u.refusals().icmp_error, 1);
    // The datagram waits again; an error made by the reported SYN's retransmit is not its.
    u.open(&out(udp_pre, udp_post, 5 * S, PacketKind::Udp));
    u.open(&out(pre, post, 6 * S, PacketKind::Syn));
    assert!(u.answer(&back(err_wire, err_in, 6 * S + 100, PacketKind::IcmpError)));
    u.tick(9 * S);
    assert_eq!(u.take_due().len(), 1, "the datagram got no answer");
    assert_eq!(u.refusals().icmp_error, 1);
}
