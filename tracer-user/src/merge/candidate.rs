//! A departure from one node that may be an arrival at another: what [`super::link`] finds
//! and [`super::clock`] estimates the clocks' offsets from.

/// A departure from one node possibly being an arrival at another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Index of the departing journey.
    pub from: usize,
    /// Index of the arriving journey.
    pub to: usize,
    pub from_node: usize,
    pub to_node: usize,
    /// Arrival time on the arriving node's clock minus departure time on the departing
    /// node's: the clock offset plus the one-way delay.
    pub delta_ns: i64,
}
