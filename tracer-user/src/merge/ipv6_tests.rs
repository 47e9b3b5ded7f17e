//! `pktrace merge` of IPv6 journeys: no IP id, so departures and arrivals are joined by
//! `wire_hash`, the digest of what the wire keeps of the packet (here TCP sequence numbers).

use tracer_common::Fingerprint;

use super::tests::{check_times, merged, nodes_of};
use crate::output::json::contract::{
    Ending, JourneyLine, Line,
    Point::{self, Dnat, Egress, Ingress},
    StepLine,
};

const POD_A: &str = "[fd13:76::2e]:41234";
const POD_B: &str = "[fd13:77::1a]:80";
const VIP: &str = "[fd00:10::a]:80";
/// b's clock minus a's.
const THETA: i64 = 7_000_000_000_321;
const US: i64 = 1_000;

/// The `wire_hash` pktrace writes for a TCP segment of flow label `label`.
fn segment(label: u32, seq: u32, ack: u32) -> u32 {
    Fingerprint {
        ip_id: label,
        a: seq,
        b: ack,
        c: 0x18 | (502 << 16),
    }
    .wire_hash()
}

/// One IPv6 journey line: `steps` are (point, iface or NAT origin, src, dst, `t_ns`); every
/// step carries `hash` (none: a line of a pktrace that did not write it).
fn journey(start: i64, hash: Option<u32>, steps: &[(Point, &str, &str, &str, i64)]) -> String {
    let steps = steps
        .iter()
        .map(|&(point, iface, src, dst, t)| {
            let mut s = StepLine::new(point, src.into(), dst.into(), u64::try_from(t).unwrap());
            s.wire_hash = hash;
            if point.is_nat() {
                s.orig_dst = Some(iface.into());
            } else {
                s.iface = Some(Some(iface.into()));
            }
            s
        })
        .collect();
    serde_json::to_string(&Line::Journey(JourneyLine {
        proto: "tcp".into(),
        pod: "default/ubuntu".into(),
        svc: None,
        nodes: None,
        steps,
        ending: Some(Ending::Left),
        class: None,
        transit_ns: Some(0),
        start_ktime_ns: Some(u64::try_from(start).unwrap()),
    }))
    .unwrap()
}

/// A segment a sends at `t` (a's clock) through the ClusterIP, reaching b after `delay`.
fn request(t: i64, delay: i64, hash: u32) -> (String, String) {
    let a = journey(
        t,
        Some(hash),
        &[
            (Ingress, "azv47c3ee9d512", POD_A, VIP, 0),
            (Dnat, VIP, POD_A, POD_B, 3 * US),
            (Egress, "eth0", POD_A, POD_B, 10 * US),
        ],
    );
    let b = journey(
        t + 10 * US + delay + THETA,
        Some(hash),
        &[
            (Ingress, "eth0", POD_A, POD_B, 0),
            (Egress, "azvb0b0b0b0b0b", POD_A, POD_B, 4 * US),
        ],
    );
    (a, b)
}

/// A segment b answers with at `t` (a's clock), reaching a after `delay`.
fn reply(t: i64, delay: i64, hash: u32) -> (String, String) {
    let b = journey(
        t + THETA,
        Some(hash),
        &[
            (Ingress, "azvb0b0b0b0b0b", POD_B, POD_A, 0),
            (Egress, "eth0", POD_B, POD_A, 5 * US),
        ],
    );
    let a = journey(
        t + 5 * US + delay,
        Some(hash),
        &[
            (Ingress, "eth0", POD_B, POD_A, 0),
            (Dnat, POD_B, VIP, POD_A, 2 * US),
            (Egress, "azv47c3ee9d512", VIP, POD_A, 6 * US),
        ],
    );
    (a, b)
}

fn hashes(j: &JourneyLine) -> Vec<Option<u32>> {
    j.steps.iter().map(|s| s.wire_hash).collect()
}

#[test]
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "`k` counts a few rounds up from 0"
)]
fn ipv6_segments_cross_nodes_by_their_wire_hash_even_reordered() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for k in 0..3 {
        let t = 1_000_000 + k * 1_000 * US;
        let seq = 1_000 + 100 * k as u32;
        let (ra, rb) = request(t, 40 * US, segment(0xabcde, seq, 5_000));
        let (pa, pb) = reply(t + 200 * US, 60 * US, segment(0x12345, 5_000, seq + 100));
        a.extend([ra, pa]);
        b.extend([rb, pb]);
    }
    // Two segments of one flow 2 µs apart that b receives in the other order: the same
    // addresses and ports, told apart only by their sequence numbers.
    let t = 9_000_000;
    let (first, second) = (
        segment(0xabcde, 9_000, 5_000),
        segment(0xabcde, 10_448, 5_000),
    );
    let (ra1, rb1) = request(t, 45 * US, first);
    let (ra2, rb2) = request(t + 2 * US, 40 * US, second);
    a.extend([ra1, ra2]);
    b.extend([rb2, rb1]);
    // A line of a pktrace that wrote no wire_hash stays on its node.
    let (old_a, old_b) = request(t + 500 * US, 40 * US, 0);
    a.push(old_a.replace(",\"wire_hash\":0", ""));
    b.push(old_b.replace(",\"wire_hash\":0", ""));

    let (journeys, summary) = merged(&[a, b]);
    assert_eq!((summary.cross_node, summary.links), (8, 8), "{summary:?}");
    assert_eq!(journeys.len(), 10, "{journeys:#?}");
    let b_clock = &summary.nodes[1];
    assert_eq!(b_clock.clock, "two-way", "{summary:?}");
    // (θ+40 − (−θ+60))/2 = θ − 10 µs.
    assert_eq!(b_clock.offset_ns, THETA - 10 * US);

    let crossing: Vec<&JourneyLine> = journeys.iter().filter(|j| j.steps.len() == 5).collect();
    assert_eq!(crossing.len(), 8);
    for j in &crossing {
        check_times(j);
        let h = hashes(j);
        assert!(h.iter().all(|x| x.is_some() && *x == h[0]), "{j:?}");
        let nodes = nodes_of(j);
        assert!(
            nodes == ["a", "a", "a", "b", "b"] || nodes == ["b", "b", "a", "a", "a"],
            "{j:?}"
        );
    }
    // The reordered pair: each departure continues as its own arrival, 45 and 40 µs later.
    for (hash, wire) in [(first, 45 * US), (second, 40 * US)] {
        let j = crossing
            .iter()
            .find(|j| j.steps[0].wire_hash == Some(hash))
            .expect("the segment crossed");
        assert_eq!(j.steps[3].wire_ns, Some(wire + 10 * US), "{j:?}");
    }
    let alone: Vec<&JourneyLine> = journeys.iter().filter(|j| j.steps.len() < 5).collect();
    assert_eq!(alone.len(), 2, "{alone:?}");
    assert!(alone.iter().all(|j| hashes(j).iter().all(Option::is_none)));
}
