use std::collections::HashSet;

use super::*;
use crate::{FAMILY_IPV4, PROTO_TCP};

const BITS: u32 = 17;

/// A tuple's slot as the kernel programs find it: the first four bytes of each address.
fn slot(t: &Tuple, bits: u32) -> u32 {
    let w = |a: &[u8; 16]| u32::from_ne_bytes([a[0], a[1], a[2], a[3]]);
    flow_slot_of(w(&t.saddr), w(&t.daddr), t.sport, t.dport, bits)
}

fn v4(s: [u8; 4], sport: u16, d: [u8; 4], dport: u16) -> Tuple {
    let mut t = Tuple {
        sport,
        dport,
        proto: PROTO_TCP,
        family: FAMILY_IPV4,
        ..Tuple::default()
    };
    t.saddr[..4].copy_from_slice(&s);
    t.daddr[..4].copy_from_slice(&d);
    t
}

/// Distinct slots among `n` tuples against what `n` uniformly random slots would fill.
#[expect(
    clippy::cast_precision_loss,
    reason = "counts of test tuples and slots, far below 2^52"
)]
fn fill(tuples: &[Tuple]) -> f64 {
    let used: HashSet<u32> = tuples.iter().map(|t| slot(t, BITS)).collect();
    let slots = f64::from(1u32 << BITS);
    let n = tuples.len() as f64;
    let expected = slots * (1.0 - (-n / slots).exp());
    used.len() as f64 / expected
}

#[test]
fn slots_are_in_range() {
    let t = v4([10, 0, 0, 1], 1, [203, 0, 113, 80], 2);
    for bits in [1, 8, 17, 32] {
        assert!(u64::from(slot(&t, bits)) < 1u64 << bits, "{bits}");
    }
}

#[test]
fn masqueraded_flows_between_two_addresses_spread_by_port() {
    // The node's address to one outside host, sequential source ports: the case the
    // address hash (FLOW_ADDRS) cannot tell apart.
    let tuples: Vec<Tuple> = (0..8192u16)
        .map(|i| v4([10, 13, 77, 4], 32768 + i, [203, 0, 113, 80], 443))
        .collect();
    let f = fill(&tuples);
    assert!(f > 0.97, "{f}");
    // Their replies too, and both directions together.
    let replies: Vec<Tuple> = tuples.iter().map(Tuple::reversed).collect();
    assert!(fill(&replies) > 0.97, "{}", fill(&replies));
    let both: Vec<Tuple> = tuples.iter().chain(&replies).copied().collect();
    assert!(fill(&both) > 0.97, "{}", fill(&both));
}

#[test]
fn many_clients_of_one_service_spread() {
    // Pods of a /16 to one ClusterIP port, and the backend's replies.
    let tuples: Vec<Tuple> = (0..16384u32)
        .map(|i| {
            let [_, _, c, d] = i.to_be_bytes();
            v4([10, 244, c, d], 40000, [10, 0, 160, 10], 53)
        })
        .collect();
    assert!(fill(&tuples) > 0.97, "{}", fill(&tuples));
}

#[test]
fn a_flow_and_its_reverse_take_different_slots() {
    let differ = (0..1000u16)
        .map(|i| v4([10, 13, 77, 46], 40000 + i, [10, 0, 160, 10], 5201))
        .filter(|t| slot(t, BITS) != slot(&t.reversed(), BITS))
        .count();
    assert!(differ > 990, "{differ}");
}
