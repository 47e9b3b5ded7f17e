//! Walking the nat table for one packet, the way netfilter does: rules in order, jumps and
//! returns, `MARK` applied on the way, stopping at the first NAT target. Conditions pktrace
//! cannot check are assumed to match and noted, so the answer says what it assumed.

mod conds;
mod facts;
#[cfg(test)]
mod tests;
mod verdict;
mod walk;

pub(crate) use facts::{Fact, assumed, cidr_label, render_facts};
pub(crate) use verdict::{DropHit, DropWalk, Seen, Verdict};
pub use walk::PacketCtx;
use walk::Truth;
pub(crate) use walk::{Hit, Miss, Steer, Walk};

/// Deepest chain nesting followed (iptables itself stops loops; a dump might not).
const MAX_DEPTH: usize = 32;
/// Most rules evaluated per walk, so a hostile dump cannot make one take long.
const MAX_RULES: usize = 200_000;
