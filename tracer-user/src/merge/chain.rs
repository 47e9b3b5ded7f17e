//! Chaining linked journeys into journeys across nodes and writing them as JSON lines: the
//! journey line of the contract with a `node` field on every step, `t_ns` on the aligned
//! clock, `nodes` (the nodes in order) and `wire_ns` (the one-way delay between nodes, on the
//! first step of each node after the first).

use std::collections::HashMap;

use super::{clock::NodeClock, input::NodeJourney};
use crate::output::json::contract::JourneyLine;

/// A journey across one or more nodes: indexes of node journeys in order, with the delay of
/// each link (`None` for the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub parts: Vec<(usize, Option<i64>)>,
}

/// Follows the links from every journey that is not an arrival of another; every journey is
/// in exactly one chain.
#[must_use]
pub fn chains(journeys: usize, links: &[(usize, usize, i64)]) -> Vec<Chain> {
    let next: HashMap<usize, (usize, i64)> = links.iter().map(|&(f, t, d)| (f, (t, d))).collect();
    let arrivals: std::collections::HashSet<usize> = links.iter().map(|&(_, t, _)| t).collect();
    let mut seen = vec![false; journeys];
    let mut out = Vec::new();
    // Starts first; then whatever is left (a loop of links, which aligned clocks rule out).
    let starts = (0..journeys)
        .filter(|j| !arrivals.contains(j))
        .chain(0..journeys);
    for start in starts.collect::<Vec<_>>() {
        if seen[start] {
            continue;
        }
        let mut parts = vec![(start, None)];
        seen[start] = true;
        let mut at = start;
        while let Some(&(to, delay)) = next.get(&at) {
            if seen[to] {
                break;
            }
            seen[to] = true;
            parts.push((to, Some(delay)));
            at = to;
        }
        out.push(Chain { parts });
    }
    out
}

/// The aligned time of step `i` of `j`.
fn aligned(j: &NodeJourney, i: usize, clocks: &[NodeClock]) -> i64 {
    j.time_of(i).saturating_sub(clocks[j.node].offset_ns)
}

/// The aligned time a chain starts at (for ordering the output).
#[must_use]
pub fn start_of(chain: &Chain, journeys: &[NodeJourney], clocks: &[NodeClock]) -> i64 {
    let first = &journeys[chain.parts[0].0];
    aligned(first, 0, clocks)
}

/// The journey line of a chain. `t_ns` counts from the chain's first step on the aligned
/// clock and never goes back (an offset error smaller than the wire delay could make an
/// arrival look earlier than its departure).
#[must_use]
pub fn line(
    chain: &Chain,
    journeys: &[NodeJourney],
    clocks: &[NodeClock],
    names: &[String],
) -> JourneyLine {
    let first = &journeys[chain.parts[0].0];
    let start = aligned(first, 0, clocks);
    let mut steps = Vec::new();
    let mut nodes = Vec::new();
    let mut last_t: i64 = 0;
    for &(idx, wire) in &chain.parts {
        let j = &journeys[idx];
        nodes.push(names[j.node].clone());
        for (i, step) in j.steps().iter().enumerate() {
            let mut out = step.clone();
            last_t = last_t.max(aligned(j, i, clocks).saturating_sub(start));
            out.t_ns = last_t.unsigned_abs();
            out.node = Some(names[j.node].clone());
            if i == 0
                && let Some(delay) = wire
            {
                out.wire_ns = Some(delay);
            }
            steps.push(out);
        }
    }
    let last = &journeys[chain.parts[chain.parts.len() - 1].0];
    JourneyLine {
        proto: first.line.proto.clone(),
        pod: first.line.pod.clone(),
        svc: first.line.svc.clone(),
        nodes: Some(nodes),
        steps,
        ending: last.line.ending,
        class: last.line.class.clone(),
        transit_ns: Some(last_t.unsigned_abs()),
        start_ktime_ns: None,
    }
}
