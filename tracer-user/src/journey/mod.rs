//! Joining events into journeys: one packet's pass through the node.
pub mod correlate;
pub mod model;

pub use model::*;
