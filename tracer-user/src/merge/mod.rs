//! `pktrace merge`: journeys that cross nodes, from the `-o json` output of pktrace on each.
//!
//! [`input`] reads each node's journey lines; [`link`] finds which journey leaving one node
//! on its uplink is which journey entering another (the packet on the wire and its IP id, or
//! for IPv6 the digest of what the wire keeps of it: `wire_hash`);
//! [`clock`] aligns the nodes' clocks from those pairs, NTP-style; [`chain`] strings linked
//! journeys together and writes them, one JSON line each, with a `node` on every step, then
//! a `{"type":"merge",…}` line with the clock offsets and counts.
//!
//! Limits: nodes must see the same packet on the wire (Azure CNI, kubenet routes; not an
//! overlay that encapsulates it). An IPv6 packet's `wire_hash` is the same for a TCP
//! retransmit as for the segment it repeats (IPv4's IP id tells them apart): the clocks then
//! pick the closer in time.

pub mod candidate;
pub mod chain;
pub mod clock;
pub mod input;
pub mod link;

use std::{
    io::{self, Write},
    path::PathBuf,
    time::Duration,
};

use self::{
    clock::{NodeClock, PairOffset},
    input::{NodeInput, NodeJourney},
};
use crate::output::json::contract::{Line, MergeLine, MergeNode, MergePair};

/// What `pktrace merge` is asked to do (the command line's `MergeArgs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `NODE=FILE` or `FILE` (see [`NodeInput::parse`]).
    pub inputs: Vec<String>,
    /// Interfaces that connect the nodes (names and globs).
    pub uplinks: Vec<String>,
    /// Longest one-way delay between nodes to accept once the clocks are aligned.
    pub max_delay: Duration,
}

/// Failures of `pktrace merge` (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("reading {path}: check the file exists and is readable")]
    Read {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("node '{0}' is given twice: name the inputs NODE=FILE")]
    DuplicateNode(String),
    #[error("writing the output")]
    Output(#[source] io::Error),
}

impl MergeError {
    /// True for mistakes in the command line (exit 2).
    #[must_use]
    pub const fn is_usage(&self) -> bool {
        matches!(self, Self::DuplicateNode(_))
    }
}

/// Reads the inputs, merges and writes to `out`.
///
/// # Errors
/// An input cannot be read or parsed, two inputs name the same node, or writing failed.
pub fn run(args: &Options, out: &mut dyn Write) -> Result<(), MergeError> {
    let inputs: Vec<NodeInput> = args.inputs.iter().map(|a| NodeInput::parse(a)).collect();
    for (i, input) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|o| o.node == input.node) {
            return Err(MergeError::DuplicateNode(input.node.clone()));
        }
    }
    let mut journeys = Vec::new();
    for (node, input) in inputs.iter().enumerate() {
        journeys.extend(input::read(node, input)?);
    }
    let max_delay = i64::try_from(args.max_delay.as_nanos()).unwrap_or(i64::MAX);
    let merged = merge(&inputs, &journeys, &args.uplinks, max_delay);
    for line in &merged {
        let mut buf = serde_json::to_vec(line).map_err(|e| MergeError::Output(e.into()))?;
        buf.push(b'\n');
        out.write_all(&buf).map_err(MergeError::Output)?;
    }
    out.flush().map_err(MergeError::Output)
}

/// The merged lines: journeys in order of their aligned start, then the merge line.
#[must_use]
#[expect(
    clippy::similar_names,
    reason = "`links` and `lines`: the link assignment and the output lines built from it"
)]
pub fn merge(
    inputs: &[NodeInput],
    journeys: &[NodeJourney],
    uplinks: &[String],
    max_delay_ns: i64,
) -> Vec<Line> {
    let candidates = link::candidates(journeys, uplinks);
    let pairs = clock::pair_offsets(&link::unambiguous(&candidates), max_delay_ns);
    let clocks = clock::align(inputs.len(), &pairs);
    let links = link::assign(&candidates, &clocks, max_delay_ns);
    let mut chains = chain::chains(journeys.len(), &links);
    chains.sort_by_key(|c| chain::start_of(c, journeys, &clocks));
    let names: Vec<String> = inputs.iter().map(|i| i.node.clone()).collect();
    let mut lines: Vec<Line> = chains
        .iter()
        .map(|c| Line::Journey(chain::line(c, journeys, &clocks, &names)))
        .collect();
    let stats = Stats {
        journeys_in: journeys.len(),
        journeys_out: chains.len(),
        cross_node: chains.iter().filter(|c| c.parts.len() > 1).count(),
        links: links.len(),
        candidates: candidates.len(),
    };
    lines.push(Line::Merge(merge_line(
        inputs, journeys, &clocks, &pairs, &stats,
    )));
    lines
}

struct Stats {
    journeys_in: usize,
    journeys_out: usize,
    cross_node: usize,
    links: usize,
    candidates: usize,
}

fn merge_line(
    inputs: &[NodeInput],
    journeys: &[NodeJourney],
    clocks: &[NodeClock],
    pairs: &[PairOffset],
    stats: &Stats,
) -> MergeLine {
    let name = |i: usize| inputs[i].node.clone();
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let nodes = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let c = &clocks[i];
            MergeNode {
                node: input.node.clone(),
                file: PathBuf::from(&input.path).display().to_string(),
                journeys: count(journeys.iter().filter(|j| j.node == i).count()),
                reference: name(c.reference),
                offset_ns: c.offset_ns,
                clock: c.method.as_str().to_owned(),
                error_ns: c.error_ns,
                via: c.via.map(name),
            }
        })
        .collect();
    let pairs = pairs
        .iter()
        .map(|p| MergePair {
            a: name(p.a),
            b: name(p.b),
            offset_ns: p.offset_ns,
            error_ns: p.error_ns,
            samples_ab: count(p.samples.0),
            samples_ba: count(p.samples.1),
        })
        .collect();
    MergeLine {
        journeys_in: count(stats.journeys_in),
        journeys_out: count(stats.journeys_out),
        cross_node: count(stats.cross_node),
        links: count(stats.links),
        candidates: count(stats.candidates),
        nodes,
        pairs,
    }
}

#[cfg(test)]
mod ipv6_tests;
#[cfg(test)]
mod tests;
