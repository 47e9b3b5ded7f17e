//! Joining events into journeys: one packet's pass through the node; and the connections whose
//! first packet left the node and got no answer ([`unanswered`]).
pub mod correlate;
pub mod model;
pub mod packet;
pub mod unanswered;

pub use model::*;
