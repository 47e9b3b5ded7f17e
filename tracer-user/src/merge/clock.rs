//! Aligning the nodes' clocks from the journeys themselves, NTP-style, never from wall clocks
//! (pktrace's times are each kernel's monotonic clock, which starts at boot).
//!
//! A packet from A to B gives `d_ab = arrival_B − departure_A = θ + δ_ab`, where θ is B's clock
//! minus A's and `δ_ab` ≥ 0 the one-way delay; a packet from B to A gives `d_ba = −θ + δ_ba`.
//! With the smallest sample of each direction (the least queued packets, as NTP's minimum
//! filter), `θ = (d_ab − d_ba) / 2` if the two paths are equally fast, and the error is at most
//! `(d_ab + d_ba) / 2`, half the smallest round trip. With traffic one way only, `θ = d_ab`
//! (delay taken as zero): the order of events stays right, the offset is an upper bound.

use std::collections::BTreeMap;

use super::candidate::Candidate;

/// How a node's clock was aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The reference: the first node of its group.
    Reference,
    /// From packets crossing both ways.
    TwoWay,
    /// From packets crossing one way only: an upper bound of the offset.
    OneWay,
}

impl Method {
    /// The name in the merge line.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reference => "reference",
            Self::TwoWay => "two-way",
            Self::OneWay => "one-way",
        }
    }
}

/// The offset between two nodes' clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairOffset {
    pub a: usize,
    pub b: usize,
    /// b's clock minus a's.
    pub offset_ns: i64,
    /// Half the smallest round trip (two-way only).
    pub error_ns: Option<i64>,
    /// Samples a → b and b → a.
    pub samples: (usize, usize),
}

impl PairOffset {
    const fn method(&self) -> Method {
        if self.error_ns.is_some() {
            Method::TwoWay
        } else {
            Method::OneWay
        }
    }
}

/// A node's clock relative to its group's reference node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeClock {
    /// The node whose clock this one is aligned to (itself when unaligned or the reference).
    pub reference: usize,
    /// This node's clock minus the reference's.
    pub offset_ns: i64,
    pub method: Method,
    /// Accumulated error bound (two-way steps only).
    pub error_ns: Option<i64>,
    /// The node it was aligned through.
    pub via: Option<usize>,
}

/// The smallest delta of a direction, outliers (beyond `window_ns` of the median: packets
/// mistaken for others by an IP id that wrapped) left out.
fn min_filtered(mut deltas: Vec<i64>, window_ns: i64) -> Option<i64> {
    deltas.sort_unstable();
    let median = *deltas.get(deltas.len() / 2)?;
    deltas
        .into_iter()
        .find(|d| d.abs_diff(median) <= window_ns.unsigned_abs())
}

/// Estimates the offset of every pair of nodes with unambiguous links between them.
#[must_use]
pub fn pair_offsets(samples: &[Candidate], window_ns: i64) -> Vec<PairOffset> {
    let mut by_dir: BTreeMap<(usize, usize), Vec<i64>> = BTreeMap::new();
    for c in samples {
        by_dir
            .entry((c.from_node, c.to_node))
            .or_default()
            .push(c.delta_ns);
    }
    let pairs: Vec<(usize, usize)> = by_dir
        .keys()
        .map(|&(x, y)| (x.min(y), x.max(y)))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    pairs
        .into_iter()
        .filter_map(|(a, b)| {
            let ab = by_dir.get(&(a, b)).cloned().unwrap_or_default();
            let ba = by_dir.get(&(b, a)).cloned().unwrap_or_default();
            let samples = (ab.len(), ba.len());
            let (offset_ns, error_ns) =
                match (min_filtered(ab, window_ns), min_filtered(ba, window_ns)) {
                    (Some(d_ab), Some(d_ba)) => {
                        let (d_ab, d_ba) = (i128::from(d_ab), i128::from(d_ba));
                        (half(d_ab - d_ba), Some(half(d_ab + d_ba)))
                    }
                    (Some(d_ab), None) => (d_ab, None),
                    (None, Some(d_ba)) => (d_ba.saturating_neg(), None),
                    (None, None) => return None,
                };
            Some(PairOffset {
                a,
                b,
                offset_ns,
                error_ns,
                samples,
            })
        })
        .collect()
}

fn half(x: i128) -> i64 {
    i64::try_from(x / 2).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

/// Aligns every node to a reference, the first node (in input order) of its group of nodes
/// connected by pair offsets; two-way offsets are preferred to one-way ones, then pairs with
/// more samples.
///
/// # Panics
/// If a pair names a node index of `nodes` or more (an edge is only offered from a node
/// already aligned, so the alignment itself does not).
#[must_use]
pub fn align(nodes: usize, pairs: &[PairOffset]) -> Vec<NodeClock> {
    let mut clocks: Vec<Option<NodeClock>> = vec![None; nodes];
    for root in 0..nodes {
        if clocks[root].is_some() {
            continue;
        }
        clocks[root] = Some(NodeClock {
            reference: root,
            offset_ns: 0,
            method: Method::Reference,
            error_ns: None,
            via: None,
        });
        while let Some((from, to, offset, pair)) = best_edge(&clocks, pairs) {
            let base = clocks[from].expect("aligned");
            let error_ns = match (base.method, pair.error_ns) {
                (Method::OneWay, _) | (_, None) => None,
                (_, Some(e)) => Some(base.error_ns.unwrap_or(0).saturating_add(e)),
            };
            let method = if base.method == Method::OneWay {
                Method::OneWay
            } else {
                pair.method()
            };
            clocks[to] = Some(NodeClock {
                reference: base.reference,
                offset_ns: base.offset_ns.saturating_add(offset),
                method,
                error_ns,
                via: Some(from),
            });
        }
    }
    clocks
        .into_iter()
        .map(|c| c.expect("every node aligned or a reference"))
        .collect()
}

/// The best pair between an aligned node and one that is not: `(aligned, new, new's clock
/// minus aligned's, pair)`.
fn best_edge<'a>(
    clocks: &[Option<NodeClock>],
    pairs: &'a [PairOffset],
) -> Option<(usize, usize, i64, &'a PairOffset)> {
    pairs
        .iter()
        .filter_map(|p| match (clocks[p.a].is_some(), clocks[p.b].is_some()) {
            (true, false) => Some((p.a, p.b, p.offset_ns, p)),
            (false, true) => Some((p.b, p.a, p.offset_ns.saturating_neg(), p)),
            _ => None,
        })
        .max_by_key(|(_, to, _, p)| {
            (
                p.error_ns.is_some(),
                p.samples.0 + p.samples.1,
                std::cmp::Reverse(*to),
            )
        })
}
