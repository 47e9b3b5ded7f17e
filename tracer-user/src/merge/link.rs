//! Joining one node's journeys to another's: a journey that leaves node A on an uplink
//! (last step `egress` on e.g. `eth0`) continues as the journey that enters node B on its
//! uplink (first step `ingress`) with the same packet on the wire: protocol, `src`, `dst` and
//! the packet's identity, which NAT leaves alone: the IP id for IPv4, `wire_hash` for IPv6
//! (which has no IP id outside fragments: the digest of its TCP sequence numbers, or of its
//! UDP or ICMPv6 length and leading payload). Candidates found by that key also give the clocks' offsets ([`super::clock`]); once
//! the clocks are aligned, each departure is linked to at most one arrival, closest in time.

use std::collections::HashMap;

use super::{candidate::Candidate, clock::NodeClock, input::NodeJourney};
use crate::{output::json::contract::Point, util::iface_matches};

/// The packet as seen on the wire between nodes. `id` is an IPv4 packet's IP id or an IPv6
/// packet's `wire_hash`: the addresses tell the two apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WireKey {
    proto: String,
    src: String,
    dst: String,
    id: u32,
}

/// The wire key of step `i` of `j` when it is `point` on an uplink.
fn wire_key(j: &NodeJourney, i: usize, point: Point, uplinks: &[String]) -> Option<WireKey> {
    let step = j.steps().get(i)?;
    if step.point != point || !iface_matches(uplinks, step.iface.as_ref()?.as_deref()?) {
        return None;
    }
    Some(WireKey {
        proto: j.line.proto.clone(),
        src: step.src.clone(),
        dst: step.dst.clone(),
        id: step.ip_id.or(step.wire_hash)?,
    })
}

/// Every (departure, arrival) pair on different nodes with the same packet on the wire.
#[must_use]
pub fn candidates(journeys: &[NodeJourney], uplinks: &[String]) -> Vec<Candidate> {
    let mut arrivals: HashMap<WireKey, Vec<usize>> = HashMap::new();
    for (idx, j) in journeys.iter().enumerate() {
        if let Some(key) = wire_key(j, 0, Point::Ingress, uplinks) {
            arrivals.entry(key).or_default().push(idx);
        }
    }
    let mut out = Vec::new();
    for (from, j) in journeys.iter().enumerate() {
        let last = j.steps().len() - 1;
        let Some(key) = wire_key(j, last, Point::Egress, uplinks) else {
            continue;
        };
        let departed = j.time_of(last);
        for &to in arrivals.get(&key).into_iter().flatten() {
            let arrival = &journeys[to];
            if arrival.node == j.node {
                continue;
            }
            out.push(Candidate {
                from,
                to,
                from_node: j.node,
                to_node: arrival.node,
                delta_ns: arrival.time_of(0).saturating_sub(departed),
            });
        }
    }
    out
}

/// Candidates that are the only one for their departure and for their arrival: the samples
/// the clock offsets are estimated from.
#[must_use]
pub fn unambiguous(candidates: &[Candidate]) -> Vec<Candidate> {
    let mut per_from: HashMap<usize, usize> = HashMap::new();
    let mut per_to: HashMap<usize, usize> = HashMap::new();
    for c in candidates {
        *per_from.entry(c.from).or_default() += 1;
        *per_to.entry(c.to).or_default() += 1;
    }
    candidates
        .iter()
        .filter(|c| per_from[&c.from] == 1 && per_to[&c.to] == 1)
        .copied()
        .collect()
}

/// Picks links one-to-one: with the nodes' clocks aligned, each candidate's one-way delay is
/// known; those within `max_delay_ns` of zero are taken closest first (nodes whose clocks
/// were not aligned to each other are never linked). Returns `(from, to, delay_ns)`.
#[must_use]
pub fn assign(
    candidates: &[Candidate],
    clocks: &[NodeClock],
    max_delay_ns: i64,
) -> Vec<(usize, usize, i64)> {
    let mut scored: Vec<(i64, Candidate)> = candidates
        .iter()
        .filter_map(|c| {
            let (a, b) = (&clocks[c.from_node], &clocks[c.to_node]);
            if a.reference != b.reference {
                return None;
            }
            let delay = c
                .delta_ns
                .saturating_sub(b.offset_ns.saturating_sub(a.offset_ns));
            (delay.abs() <= max_delay_ns).then_some((delay, *c))
        })
        .collect();
    scored.sort_by_key(|(delay, c)| (delay.abs(), c.from, c.to));
    let (mut linked_from, mut linked_to) = (HashMap::new(), HashMap::new());
    let mut out = Vec::new();
    for (delay, c) in scored {
        if linked_from.contains_key(&c.from) || linked_to.contains_key(&c.to) {
            continue;
        }
        linked_from.insert(c.from, c.to);
        linked_to.insert(c.to, c.from);
        out.push((c.from, c.to, delay));
    }
    out
}
