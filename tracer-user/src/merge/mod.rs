//! `pktrace merge`: journeys that cross nodes, from the `-o json` output of pktrace on each.
//!
//! [`input`] reads each node's journey lines; [`link`] finds which journey leaving one node
//! on its uplink is which journey entering another (the packet on the wire and its IP id);
//! [`clock`] aligns the nodes' clocks from those pairs, NTP-style; [`chain`] strings linked
//! journeys together and writes them, one JSON line each, with a `node` on every step, then
//! a `{"type":"merge",…}` line with the clock offsets and counts.
//!
//! Limits: IPv4 only (the join needs the IP id), and nodes must see the same packet on the
//! wire (Azure CNI, kubenet routes; not an overlay that encapsulates it).

pub mod chain;
pub mod clock;
pub mod input;
pub mod link;

use std::{
    io::{self, Write},
    path::PathBuf,
    time::Duration,
};

use serde_json::{Value, json};

use self::{
    clock::{NodeClock, PairOffset},
    input::{NodeInput, NodeJourney},
};

/// `pktrace merge` arguments.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = MERGE_HELP)]
pub struct MergeArgs {
    /// JSON lines of `pktrace -o json` from each node: `NODE=FILE`, or `FILE` for a node named
    /// after the file (`aks-node-1.jsonl` is node `aks-node-1`).
    #[arg(value_name = "[NODE=]FILE", required = true, num_args = 1..)]
    pub inputs: Vec<String>,

    /// Interfaces that connect the nodes (comma-separated names and globs).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "eth0"
    )]
    pub uplink: Vec<String>,

    /// Longest one-way delay between nodes to accept once the clocks are aligned.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    #[arg(value_parser = crate::cli::parse_duration)]
    pub max_delay: Duration,
}

const MERGE_HELP: &str = "\
Record on each node with pktrace ... -o json > NODE.jsonl (trace the same addresses on every
node, e.g. --pod-ip with both pods' IPs), then merge. A journey leaving a node on an uplink
(last step egress on eth0) is joined to the journey entering another node on its uplink with
the same packet (protocol, src, dst, IP id). Clocks are aligned from the packets crossing both
ways (NTP-style); wall clocks are not used.

Output: one JSON line per journey, steps with a `node` field, `t_ns` on the aligned clock,
`wire_ns` on the first step of each later node; a {\"type\":\"merge\",...} line last.";

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
pub fn run(args: &MergeArgs, out: &mut dyn Write) -> Result<(), MergeError> {
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
    let merged = merge(&inputs, &journeys, &args.uplink, max_delay);
    for line in &merged {
        let mut buf = serde_json::to_vec(line).map_err(|e| MergeError::Output(e.into()))?;
        buf.push(b'\n');
        out.write_all(&buf).map_err(MergeError::Output)?;
    }
    out.flush().map_err(MergeError::Output)
}

/// The merged lines: journeys in order of their aligned start, then the merge line.
#[must_use]
pub fn merge(
    inputs: &[NodeInput],
    journeys: &[NodeJourney],
    uplinks: &[String],
    max_delay_ns: i64,
) -> Vec<Value> {
    let candidates = link::candidates(journeys, uplinks);
    let pairs = clock::pair_offsets(&link::unambiguous(&candidates), max_delay_ns);
    let clocks = clock::align(inputs.len(), &pairs);
    let links = link::assign(&candidates, &clocks, max_delay_ns);
    let mut chains = chain::chains(journeys.len(), &links);
    chains.sort_by_key(|c| chain::start_of(c, journeys, &clocks));
    let names: Vec<String> = inputs.iter().map(|i| i.node.clone()).collect();
    let mut lines: Vec<Value> = chains
        .iter()
        .map(|c| chain::line(c, journeys, &clocks, &names))
        .collect();
    let stats = Stats {
        journeys_in: journeys.len(),
        journeys_out: chains.len(),
        cross_node: chains.iter().filter(|c| c.parts.len() > 1).count(),
        links: links.len(),
        candidates: candidates.len(),
    };
    lines.push(merge_line(inputs, journeys, &clocks, &pairs, &stats));
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
) -> Value {
    let name = |i: usize| inputs[i].node.clone();
    let nodes: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let c = &clocks[i];
            let mut node = json!({
                "node": input.node,
                "file": PathBuf::from(&input.path).display().to_string(),
                "journeys": journeys.iter().filter(|j| j.node == i).count(),
                "reference": name(c.reference),
                "offset_ns": c.offset_ns,
                "clock": c.method.as_str(),
            });
            if let Some(e) = c.error_ns {
                node["error_ns"] = e.into();
            }
            if let Some(via) = c.via {
                node["via"] = name(via).into();
            }
            node
        })
        .collect();
    let pairs: Vec<Value> = pairs
        .iter()
        .map(|p| {
            json!({"a": name(p.a), "b": name(p.b), "offset_ns": p.offset_ns,
                   "error_ns": p.error_ns, "samples_ab": p.samples.0, "samples_ba": p.samples.1})
        })
        .collect();
    json!({
        "type": "merge",
        "journeys_in": stats.journeys_in,
        "journeys_out": stats.journeys_out,
        "cross_node": stats.cross_node,
        "links": stats.links,
        "candidates": stats.candidates,
        "nodes": nodes,
        "pairs": pairs,
    })
}

#[cfg(test)]
mod tests;
