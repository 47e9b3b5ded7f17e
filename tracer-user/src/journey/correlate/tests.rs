//! Correlator tests: the lab's paths, concurrency, retransmits, ordering and limits.

use std::{convert::Infallible, net::SocketAddr};

use tracer_common::{
    Fingerprint, NatSeen, Observation, PROTO_TCP, PROTO_UDP, TcHook, TcSeen, Tuple, ct, flag, hook,
    kind,
};

use super::*;
use crate::journey::model::{Point, tuple};

pub(super) const AZV_CLIENT: u32 = 10;
pub(super) const AZV_BACKEND: u32 = 11;
pub(super) const AZURE0: u32 = 2;
const ETH0: u32 = 3;

pub(super) fn ifaces() -> HashMap<u32, HostIf> {
    [
        (AZV_CLIENT, "azv47c3ee9d512", true),
        (AZV_BACKEND, "azva4124965a9b", true),
        (AZURE0, "azure0", false),
        (ETH0, "eth0", true),
    ]
    .into_iter()
    .map(|(i, n, edge)| {
        (
            i,
            HostIf {
                name: n.into(),
                edge,
            },
        )
    })
    .collect()
}

pub(super) fn t(proto: u8, src: &str, dst: &str) -> Tuple {
    tuple(
        proto,
        src.parse::<SocketAddr>().unwrap(),
        dst.parse::<SocketAddr>().unwrap(),
    )
}

pub(super) fn fp(n: u32) -> Fingerprint {
    Fingerprint {
        ip_id: n,
        a: n * 7,
        b: 0,
        c: 2,
    }
}

/// A tc observation at hook `k` ([`kind::TC_INGRESS`] or [`kind::TC_EGRESS`]).
pub(super) fn tc_seen(k: u8, ifindex: u32, tuple: Tuple, fp: Fingerprint, at: u64) -> TcSeen {
    TcSeen {
        hook: if k == kind::TC_INGRESS {
            TcHook::Ingress
        } else {
            TcHook::Egress
        },
        flags: 0,
        ifindex,
        ktime_ns: at,
        fp,
        tuple,
    }
}

pub(super) fn tc(k: u8, ifindex: u32, tuple: Tuple, fp: Fingerprint, at: u64) -> Observation {
    Observation::Tc(tc_seen(k, ifindex, tuple, fp, at))
}

fn nat(h: u8, ct_info: u8, orig: Tuple, after: Tuple, fp: Fingerprint, at: u64) -> Observation {
    Observation::Nat(NatSeen {
        hook: h,
        ct_info,
        flags: 0,
        ktime_ns: at,
        nat_ns: 2000,
        fp,
        before: orig,
        after,
    })
}

/// The events of one pod → ClusterIP → backend packet, at time `base`.
pub(super) fn clusterip_packet(sport: u16, f: Fingerprint, base: u64) -> Vec<Observation> {
    let pre = t(PROTO_TCP, &format!("10.13.76.46:{sport}"), "10.0.159.58:80");
    let post = t(PROTO_TCP, &format!("10.13.76.46:{sport}"), "10.13.76.26:80");
    vec![
        tc(kind::TC_INGRESS, AZV_CLIENT, pre, f, base),
        tc(kind::TC_INGRESS, AZURE0, pre, f, base + 100),
        nat(hook::PRE_ROUTING, ct::NEW, pre, post, f, base + 3000),
        tc(kind::TC_EGRESS, AZURE0, post, f, base + 5000),
        tc(kind::TC_EGRESS, AZV_BACKEND, post, f, base + 5100),
    ]
}

/// The completed journeys, out of the correlator's queue (copies: the correlator takes the
/// step lists back).
pub(super) fn take(c: &mut Correlator) -> Vec<Journey> {
    let mut out = Vec::new();
    c.drain_done(|j| {
        out.push(j.clone());
        Ok::<(), Infallible>(())
    })
    .unwrap();
    out
}

fn run(c: &mut Correlator, events: &[Observation]) -> Vec<Journey> {
    for e in events {
        c.push(e);
    }
    take(c)
}

fn points(j: &Journey) -> Vec<(Point, Option<&str>, bool)> {
    j.steps
        .iter()
        .map(|s| (s.point(), s.iface(), s.reply()))
        .collect()
}

#[test]
fn clusterip_packet_is_one_journey_with_dnat() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let done = run(&mut c, &clusterip_packet(41234, fp(1), 1_000));
    assert_eq!(done.len(), 1);
    let j = &done[0];
    assert_eq!(j.ending, Ending::Left);
    assert_eq!(
        points(j),
        [
            (Point::Ingress, Some("azv47c3ee9d512"), false),
            (Point::Ingress, Some("azure0"), false),
            (Point::Dnat, None, false),
            (Point::Egress, Some("azure0"), false),
            (Point::Egress, Some("azva4124965a9b"), false),
        ]
    );
    assert_eq!(j.steps[2].latency_ns(), Some(2000));
    assert_eq!(j.transit_ns(), 5100);
    assert_eq!(c.open_count(), 0);
}

#[test]
fn reply_of_masquerade_is_snat_reply_and_reply_of_dnat_is_dnat_reply() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    // Reply from the internet host to the node's address, un-SNATed in PRE_ROUTING.
    let f = fp(9);
    let wire = t(PROTO_TCP, "203.0.113.80:80", "10.13.76.4:41000");
    let pod = t(PROTO_TCP, "203.0.113.80:80", "10.13.76.46:41000");
    let done = run(
        &mut c,
        &[
            tc(kind::TC_INGRESS, ETH0, wire, f, 10),
            tc(kind::TC_INGRESS, AZURE0, wire, f, 20),
            nat(hook::PRE_ROUTING, ct::IS_REPLY, wire, pod, f, 30),
            tc(kind::TC_EGRESS, AZURE0, pod, f, 40),
            tc(kind::TC_EGRESS, AZV_CLIENT, pod, f, 50),
        ],
    );
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].steps[2].point(), Point::Snat);
    assert!(done[0].steps[2].reply());

    // Reply from a backend, un-DNATed (source back to the VIP) in POST_ROUTING.
    let f = fp(10);
    let back = t(PROTO_TCP, "10.13.76.26:80", "10.13.76.46:41234");
    let vip = t(PROTO_TCP, "10.0.159.58:80", "10.13.76.46:41234");
    let done = run(
        &mut c,
        &[
            tc(kind::TC_INGRESS, AZV_BACKEND, back, f, 100),
            tc(kind::TC_INGRESS, AZURE0, back, f, 110),
            nat(hook::POST_ROUTING, ct::IS_REPLY, back, vip, f, 130),
            tc(kind::TC_EGRESS, AZURE0, vip, f, 140),
            tc(kind::TC_EGRESS, AZV_CLIENT, vip, f, 150),
        ],
    );
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].steps[2].point(), done[0].steps[2].reply()),
        (Point::Dnat, true)
    );
}

#[test]
fn masquerade_in_post_routing_is_snat() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let f = fp(3);
    let pod = t(PROTO_UDP, "10.13.76.46:5000", "203.0.113.80:53");
    let node = t(PROTO_UDP, "10.13.76.4:5000", "203.0.113.80:53");
    let done = run(
        &mut c,
        &[
            tc(kind::TC_INGRESS, AZV_CLIENT, pod, f, 1),
            tc(kind::TC_INGRESS, AZURE0, pod, f, 2),
            nat(hook::POST_ROUTING, ct::NEW, pod, node, f, 3),
            tc(kind::TC_EGRESS, AZURE0, node, f, 4),
            tc(kind::TC_EGRESS, ETH0, node, f, 5),
        ],
    );
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].steps[2].point(), done[0].steps[2].reply()),
        (Point::Snat, false)
    );
    assert_eq!(done[0].steps[4].tuple, node);
}

#[test]
fn fifty_interleaved_flows_are_neither_merged_nor_split() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    // Same fingerprint on purpose (worst case): only the tuples tell the flows apart.
    let per_flow: Vec<Vec<Observation>> = (0..50)
        .map(|i| clusterip_packet(40_000 + i, fp(77), 1_000 + u64::from(i)))
        .collect();
    let mut interleaved = Vec::new();
    for step in 0..5 {
        for flow in &per_flow {
            interleaved.push(flow[step]);
        }
    }
    let done = run(&mut c, &interleaved);
    assert_eq!(done.len(), 50);
    for j in &done {
        assert_eq!(j.steps.len(), 5, "{j:?}");
        let sport = j.steps[0].tuple.sport;
        assert!(j.steps.iter().all(|s| s.tuple.sport == sport));
        assert_eq!(j.ending, Ending::Left);
    }
}

#[test]
fn a_retransmit_starts_a_new_journey() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let mut events = clusterip_packet(41234, fp(5), 0);
    // The first copy's last event is lost; the retransmit is identical.
    events.pop();
    events.extend(clusterip_packet(41234, fp(5), 1_000_000));
    let mut done = run(&mut c, &events);
    assert_eq!(done.len(), 1, "only the retransmit left the node");
    assert_eq!(done[0].steps[0].ktime_ns, 1_000_000);
    c.expire(5_000_000_000);
    done.extend(take(&mut c));
    assert_eq!(done.len(), 2);
    assert_eq!(done[1].ending, Ending::TimedOut);
    assert_eq!(done[1].steps.len(), 4);
    assert_eq!(c.open_count(), 0);
}

#[test]
fn out_of_order_events_are_sorted_by_time() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let mut events = clusterip_packet(1, fp(6), 100);
    events.swap(0, 1); // azure0 ingress arrives before the veth's: two journeys at worst
    let mut done = run(&mut c, &events);
    c.flush();
    done.extend(take(&mut c));
    let total: usize = done.iter().map(|j| j.steps.len()).sum();
    assert_eq!(total, 5, "no event dropped");
    for j in &done {
        assert!(j.steps.windows(2).all(|w| w[0].ktime_ns <= w[1].ktime_ns));
    }
}

#[test]
fn the_table_is_bounded() {
    let limits = Limits {
        idle_timeout_ns: u64::MAX,
        max_open: 8,
        ..Limits::default()
    };
    let mut c = Correlator::new(ifaces(), limits);
    for i in 0..100u16 {
        let ev = &clusterip_packet(i, fp(u32::from(i)), u64::from(i))[0];
        c.push(ev);
    }
    let done = take(&mut c);
    assert_eq!(c.open_count(), 8);
    assert_eq!(c.evicted(), 92);
    assert_eq!(done.len(), 92);
    assert!(done.iter().all(|j| j.ending == Ending::TimedOut));
}

#[test]
fn the_table_is_bounded_in_bytes_and_every_step_is_kept() {
    let budget = 16 * budget::journey_bytes(STEPS);
    let limits = Limits {
        idle_timeout_ns: u64::MAX,
        max_open: usize::MAX,
        max_bytes: budget,
    };
    let mut c = Correlator::new(ifaces(), limits);
    let mut pushed = 0;
    let mut done = Vec::new();
    for i in 0..1000u16 {
        // The packet's first three events: its journey stays open, waiting for its egress.
        for ev in &clusterip_packet(i, fp(u32::from(i)), u64::from(i) * 10_000)[..3] {
            c.push(ev);
            pushed += 1;
            assert!(c.open_bytes() <= budget, "{} > {budget}", c.open_bytes());
        }
        done.extend(take(&mut c));
    }
    assert_eq!(c.open_count(), 16);
    assert_eq!(c.evicted(), 1000 - 16);
    assert!(
        done.iter()
            .all(|j| j.ending == Ending::TimedOut && j.steps.len() == 3)
    );
    c.flush();
    done.extend(take(&mut c));
    let steps: usize = done.iter().map(|j| j.steps.len()).sum();
    assert_eq!(
        (done.len(), steps),
        (1000, pushed),
        "closed early, never lost"
    );
    assert_eq!(c.open_bytes(), 0);
}

#[test]
fn bytes_come_back_whichever_way_a_journey_closes() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    for i in 0..10u16 {
        for ev in &clusterip_packet(i, fp(u32::from(i)), 1000) {
            c.push(ev);
        }
    }
    assert_eq!((c.open_count(), c.open_bytes()), (0, 0), "left");
    let long = clusterip_packet(20, fp(20), 1000);
    for ev in &long[..2] {
        c.push(ev);
    }
    assert!(c.open_bytes() > 0);
    c.expire(u64::MAX);
    assert_eq!((c.open_count(), c.open_bytes()), (0, 0), "timed out");
    for ev in &long[..4] {
        c.push(ev);
    }
    // Steps past a list's room are counted too.
    for k in 0..10 {
        c.push(&tc(
            kind::TC_EGRESS,
            AZURE0,
            t(PROTO_TCP, "10.13.76.46:20", "10.13.76.26:80"),
            fp(20),
            7000 + k,
        ));
    }
    assert!(c.open_bytes() > budget::journey_bytes(STEPS));
    c.interface_gone(AZURE0);
    assert_eq!((c.open_count(), c.open_bytes()), (0, 0), "interface gone");
    assert_eq!(take(&mut c).len(), 12);
}

#[test]
fn the_eviction_order_forgets_journeys_that_left() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    for i in 0..20_000u16 {
        for ev in &clusterip_packet(i, fp(u32::from(i)), u64::from(i) * 10_000) {
            c.push(ev);
        }
        assert!(c.order.len() <= SPARE + 1, "{}", c.order.len());
        take(&mut c);
    }
}

#[test]
fn unknown_interfaces_are_named_and_treated_as_edges() {
    let mut c = Correlator::new(HashMap::new(), Limits::default());
    let pkt = t(PROTO_TCP, "10.13.76.46:1000", "10.13.1.4:80");
    let done = run(
        &mut c,
        &[
            tc(kind::TC_INGRESS, 42, pkt, fp(1), 1),
            tc(kind::TC_EGRESS, 43, pkt, fp(1), 2),
        ],
    );
    assert_eq!(done.len(), 1);
    assert_eq!(
        points(&done[0]),
        [
            (Point::Ingress, Some("if42"), false),
            (Point::Egress, Some("if43"), false)
        ]
    );
}

#[test]
fn a_vanished_interface_closes_only_the_journeys_last_seen_on_it() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let pkt = clusterip_packet(41300, fp(30), 1_000);
    // In flight: entered on the client's veth and crossed the bridge, not yet left.
    let mut done = run(&mut c, &pkt[..2]);
    // Another packet, only seen on the backend's veth so far (a reply entering there).
    let reply = t(PROTO_TCP, "10.13.76.26:80", "10.13.76.46:41301");
    done.extend(run(
        &mut c,
        &[tc(kind::TC_INGRESS, AZV_BACKEND, reply, fp(31), 2_000)],
    ));
    assert!(done.is_empty());
    assert_eq!(c.open_count(), 2);

    // The client's veth goes: its journey moved on to azure0, so it stays open.
    c.interface_gone(AZV_CLIENT);
    done.extend(take(&mut c));
    assert!(done.is_empty());
    // The backend's veth goes: the reply's journey is closed with the reason.
    c.interface_gone(AZV_BACKEND);
    done.extend(take(&mut c));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].ending, Ending::InterfaceGone);
    assert_eq!(
        points(&done[0]),
        [(Point::Ingress, Some("azva4124965a9b"), false)]
    );
    assert_eq!(c.open_count(), 1);

    // The first journey continues normally; a later event on the gone index gets a made-up
    // name instead of a stale one.
    let mut rest = run(&mut c, &pkt[2..4]);
    c.interface_gone(AZURE0);
    rest.extend(take(&mut c));
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].ending, Ending::InterfaceGone);
    assert_eq!(rest[0].steps.len(), 4);
    assert_eq!(c.open_count(), 0);
    let late = run(
        &mut c,
        &[tc(kind::TC_EGRESS, AZV_BACKEND, reply, fp(32), 9_000)],
    );
    assert_eq!(late[0].steps[0].iface(), Some("if11"));
}

#[test]
fn a_nat_step_after_the_hop_keeps_the_hop_as_last_interface() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let pkt = clusterip_packet(41302, fp(33), 1_000);
    let mut done = run(&mut c, &pkt[..3]);
    c.interface_gone(AZURE0);
    done.extend(take(&mut c));
    assert_eq!(
        done.len(),
        1,
        "the NAT step has no interface; azure0 was the last hop"
    );
    assert_eq!(done[0].steps.len(), 3);
}

#[test]
fn a_renamed_interface_names_later_steps_by_its_new_name() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    c.set_iface(
        AZV_CLIENT,
        HostIf {
            name: "azvrenamed0".into(),
            edge: true,
        },
    );
    let done = run(&mut c, &clusterip_packet(41303, fp(34), 1_000));
    assert_eq!(done[0].steps[0].iface(), Some("azvrenamed0"));
}

/// Step lists handed back after output are reused empty: later journeys carry only their own
/// steps, and a warm table allocates no new list (issue 5: no allocation per event).
#[test]
fn recycled_step_lists_start_empty_and_are_reused() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    for e in &clusterip_packet(41234, fp(1), 1_000) {
        c.push(e);
    }
    let (mut lists, mut want) = (Vec::new(), 0);
    c.drain_done(|j| {
        lists.push(j.steps.as_ptr());
        want = points(j).len();
        Ok::<(), Infallible>(())
    })
    .unwrap();
    for n in 0..20u16 {
        let pkt = clusterip_packet(
            50_000 + n,
            fp(100 + u32::from(n)),
            10_000 * u64::from(n + 2),
        );
        for e in &pkt {
            c.push(e);
        }
        let mut seen = 0;
        c.drain_done(|j| {
            seen += 1;
            assert_eq!(j.steps.len(), want, "{:?}", points(j));
            assert_eq!(j.steps[0].tuple.sport, 50_000 + n);
            assert!(
                lists.contains(&j.steps.as_ptr()),
                "the recycled list is reused"
            );
            Ok::<(), Infallible>(())
        })
        .unwrap();
        assert_eq!(seen, 1);
    }
    assert_eq!(c.open_count(), 0);
}

/// A connection's first packet from outside to a LoadBalancer VIP: its uplink ingress comes
/// claimed by the NAT program (`TC_CLAIMED`, timed at the NAT step's start, emitted just before
/// the NAT event), the next packet's at tc ingress itself. Each is one journey from the uplink
/// to the backend, with one ingress step.
#[test]
fn a_claimed_first_packet_ingress_starts_its_journey_at_the_uplink() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    let vip = t(PROTO_TCP, "203.0.113.80:41000", "203.0.113.252:80");
    let pod = t(PROTO_TCP, "203.0.113.80:41000", "10.13.76.26:80");
    let packet = |f: Fingerprint, base: u64, claimed: bool| {
        let mut ingress = tc_seen(kind::TC_INGRESS, ETH0, vip, f, base);
        if claimed {
            ingress.flags = flag::TC_CLAIMED;
        }
        vec![
            Observation::Tc(ingress),
            nat(hook::PRE_ROUTING, ct::NEW, vip, pod, f, base + 2000),
            tc(kind::TC_EGRESS, AZURE0, pod, f, base + 3000),
            tc(kind::TC_EGRESS, AZV_BACKEND, pod, f, base + 3100),
        ]
    };
    let mut events = packet(fp(1), 1000, true);
    events.extend(packet(fp(2), 9000, false));
    let done = run(&mut c, &events);
    assert_eq!(done.len(), 2, "{done:#?}");
    for (j, claimed) in done.iter().zip([true, false]) {
        assert_eq!(
            points(j),
            vec![
                (Point::Ingress, Some("eth0"), false),
                (Point::Dnat, None, false),
                (Point::Egress, Some("azure0"), false),
                (Point::Egress, Some("azva4124965a9b"), false),
            ]
        );
        let bound: Vec<bool> = j.steps.iter().map(Step::time_bound).collect();
        assert_eq!(bound, [claimed, false, false, false]);
        assert_eq!(j.ending, Ending::Left);
    }
    assert_eq!(c.open_count(), 0);
}

/// The queue of completed journeys hands them out oldest first, stops calling at the first
/// error (returned) and is empty afterwards either way.
#[test]
fn completed_journeys_drain_in_order_and_an_error_stops_the_handing_out() {
    let mut c = Correlator::new(ifaces(), Limits::default());
    for n in 0..3u16 {
        for e in &clusterip_packet(42_000 + n, fp(200 + u32::from(n)), 10_000 * u64::from(n)) {
            c.push(e);
        }
    }
    assert!(c.has_done());
    let mut calls = Vec::new();
    let result = c.drain_done(|j| {
        calls.push(j.steps[0].tuple.sport);
        if calls.len() == 2 {
            Err("sink closed")
        } else {
            Ok(())
        }
    });
    assert_eq!(result, Err("sink closed"));
    assert_eq!(
        calls,
        [42_000, 42_001],
        "oldest first, none after the error"
    );
    assert!(!c.has_done());
    assert!(take(&mut c).is_empty());
}

#[test]
fn journeys_of_two_cpus_batches_come_out_by_their_start_whatever_batch_came_first() {
    // CPU 1's batch (two later packets) reaches the ring before CPU 0's (one earlier packet):
    // each journey is whole, and they are handed out by their first step's time.
    let mut c = Correlator::new(ifaces(), Limits::default());
    let mut events = clusterip_packet(41001, fp(2), 50_000);
    events.extend(clusterip_packet(41002, fp(3), 60_000));
    events.extend(clusterip_packet(41000, fp(1), 1_000));
    let done = run(&mut c, &events);
    let starts: Vec<u64> = done.iter().map(|j| j.steps[0].ktime_ns).collect();
    assert_eq!(starts, [1_000, 50_000, 60_000]);
    assert!(done.iter().all(|j| j.steps.len() == 5), "{done:?}");
}
