//! The join of drops: a drop ends the open journey of its packet, joins the journey that just
//! left into a pod, or stands alone; consumed packets are no drops.

use tracer_common::{DropSeen, Fingerprint, Observation, PROTO_TCP, PROTO_UDP, kind};

use super::{
    Correlator, Limits,
    tests::{AZURE0, AZV_BACKEND, AZV_CLIENT, clusterip_packet, fp, ifaces, t, take, tc},
};
use crate::{
    drops::{DropNames, Reasons, names::Symbols},
    journey::{Ending, Point},
};

fn correlator() -> Correlator {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let reasons = Reasons::new(&[
        (1, "SKB_CONSUMED".into()),
        (3, "SKB_DROP_REASON_NO_SOCKET".into()),
        (6, "SKB_DROP_REASON_NETFILTER_DROP".into()),
        (9, "SKB_DROP_REASON_QUEUE_PURGE".into()),
    ]);
    let symbols =
        Symbols::parse("ffffffff81a00000 T tcp_v4_rcv\nffffffff81b00000 t nft_do_chain\n").unwrap();
    c.set_drop_names(DropNames::with_symbols(reasons, symbols));
    c
}

fn dropped(tuple: tracer_common::Tuple, f: Fingerprint, reason: u32, at: u64) -> Observation {
    Observation::Drop(DropSeen {
        ifindex: AZURE0,
        ktime_ns: at,
        fp: f,
        tuple,
        reason,
        location: 0xffff_ffff_81b0_0040,
    })
}

#[test]
fn a_drop_ends_the_open_journey_of_its_packet() {
    let mut c = correlator();
    let pkt = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.4:9");
    let other = t(PROTO_TCP, "10.13.76.46:41235", "10.13.76.4:9");
    c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, pkt, fp(1), 100));
    c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, other, fp(2), 110));
    c.push(&tc(kind::TC_INGRESS, AZURE0, pkt, fp(1), 200));
    c.push(&dropped(pkt, fp(1), 6, 300));
    let done = take(&mut c);
    assert_eq!(done.len(), 1, "{done:?}");
    let j = &done[0];
    assert_eq!(j.ending, Ending::Dropped);
    assert_eq!(j.steps.len(), 3);
    let last = j.steps.last().unwrap();
    assert_eq!(last.point(), Point::Drop);
    let d = last.dropped().unwrap();
    assert_eq!(
        (&*d.reason, &*d.location),
        ("NETFILTER_DROP", "nft_do_chain")
    );
    assert!(!d.after_leaving, "dropped on the node");
    // The other connection's journey is still open: a drop of another packet is not its.
    assert_eq!(c.open_count(), 1);
}

#[test]
fn a_drop_right_after_the_packet_left_into_a_pod_joins_that_journey() {
    let mut c = correlator();
    let events = clusterip_packet(41234, fp(3), 1_000);
    for e in &events {
        c.push(e);
    }
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    c.push(&dropped(post, fp(3), 3, 7_000));
    let done = take(&mut c);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].ending, Ending::Dropped);
    assert_eq!(done[0].steps.len(), 6);
    let d = done[0].steps[5].dropped().unwrap();
    assert_eq!((&*d.reason, d.after_leaving), ("NO_SOCKET", true));
}

#[test]
fn an_ipv6_drop_after_leaving_joins_its_own_datagrams_journey_not_the_newest_of_its_flow() {
    // Two datagrams of one IPv6 flow (one flow label: IPv6 has no IP id) leave into the
    // backend pod; its stack drops the first. Only the payload tells the two apart.
    let mut c = correlator();
    let pkt = t(PROTO_UDP, "[fd13:76::2e]:5353", "[fd13:76::1a]:53");
    let datagram = |payload: u32| Fingerprint {
        ip_id: 0x000a_bcde,
        a: 16,
        b: payload,
        c: 0,
    };
    let (first, second) = (datagram(0x0101_0100), datagram(0x0202_0100));
    for (f, at) in [(first, 100), (second, 150)] {
        c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, pkt, f, at));
        c.push(&tc(kind::TC_EGRESS, AZV_BACKEND, pkt, f, at + 10));
    }
    c.push(&dropped(pkt, first, 3, 300));
    let done = take(&mut c);
    assert_eq!(done.len(), 2, "{done:?}");
    let ends: Vec<(Ending, u64)> = done
        .iter()
        .map(|j| (j.ending, j.steps[0].ktime_ns))
        .collect();
    assert_eq!(ends, [(Ending::Dropped, 100), (Ending::Left, 150)]);
    assert_eq!(done[0].steps.len(), 3);
    assert_eq!(
        done[0].steps[2].wire_id,
        Some(first.wire_hash()),
        "{done:?}"
    );
    // A drop of a datagram no journey carried is a journey of its own.
    c.push(&dropped(pkt, datagram(0x0303_0100), 3, 400));
    let alone = take(&mut c);
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0].steps.len(), 1);
}

#[test]
fn a_drop_without_a_journey_is_one_and_consumed_packets_are_no_drops() {
    let mut c = correlator();
    let pkt = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.4:9");
    c.push(&dropped(pkt, fp(4), 1, 100));
    assert!(take(&mut c).is_empty());
    c.push(&dropped(pkt, fp(4), 3, 200));
    let done = take(&mut c);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].ending, Ending::Dropped);
    assert_eq!(done[0].steps.len(), 1);
}

#[test]
fn without_names_drops_are_ignored() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let pkt = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.4:9");
    c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, pkt, fp(5), 100));
    c.push(&dropped(pkt, fp(5), 3, 200));
    assert!(take(&mut c).is_empty());
    assert_eq!(c.open_count(), 1);
}

#[test]
fn a_queue_purge_of_a_delivered_packet_is_no_drop_but_one_on_the_node_is() {
    let mut c = correlator();
    let events = clusterip_packet(41234, fp(6), 1_000);
    for e in &events {
        c.push(e);
    }
    // Delivered into the pod, purged when its socket closed unread: the journey stays whole.
    let post = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.26:80");
    c.push(&dropped(post, fp(6), 9, 7_000));
    let done = take(&mut c);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].ending, Ending::Left);
    // Alone, long after: nothing.
    c.push(&dropped(post, fp(6), 9, 9_000_000));
    assert!(take(&mut c).is_empty());
    // Flushed while the packet crosses the node: a drop.
    let pkt = t(PROTO_TCP, "10.13.76.46:41236", "10.13.76.4:9");
    c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, pkt, fp(7), 10_000_000));
    c.push(&dropped(pkt, fp(7), 9, 10_000_100));
    let done = take(&mut c);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].ending, Ending::Dropped);
}

/// The site record the drop program writes for `location` before its first drop there.
fn site(location: u64, name: &str) -> Observation {
    let mut r = tracer_common::SiteRecord {
        head: tracer_common::RecordHeader {
            kind: kind::SITE,
            ..tracer_common::RecordHeader::default()
        },
        location,
        len: i32::try_from(name.len() + 1).unwrap(),
        _pad: 0,
        name: [0; tracer_common::SITE_NAME_MAX],
    };
    r.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: plain `repr(C)` data without implicit padding, read as bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref(&r).cast::<u8>(),
            size_of::<tracer_common::SiteRecord>(),
        )
    };
    tracer_common::decode(bytes).unwrap()
}

#[test]
fn a_drop_is_named_by_the_site_record_before_it() {
    let mut c = correlator();
    let pkt = t(PROTO_TCP, "10.13.76.46:41234", "10.13.76.4:9");
    c.push(&tc(kind::TC_INGRESS, AZV_CLIENT, pkt, fp(1), 100));
    // The symbols name 0xffff_ffff_81b0_0040 `nft_do_chain`; the kernel says otherwise.
    c.push(&site(0xffff_ffff_81b0_0040, "nf_hook_slow"));
    c.push(&dropped(pkt, fp(1), 6, 300));
    let done = take(&mut c);
    assert_eq!(done.len(), 1, "{done:?}");
    let d = done[0].steps.last().unwrap().dropped().unwrap();
    assert_eq!(&*d.location, "nf_hook_slow");
    assert_eq!(c.open_count(), 0, "a site opens no journey");
}
