//! The report path both NAT program kinds share (netfilter brackets and `nat_*` probes).
//!
//! Contract: a step is reported when NAT changed the packet and the packet is traced before or
//! after it ([`reported`]). A reported step follows, in both directions, each of its tuples
//! that holds no tracked address (so the packet stays traced under its new addresses and its
//! replies do too), then emits the ingress step a tc ingress note left for it
//! ([`crate::first::claim`]) and the NAT step's own event ([`report`]). Each question is
//! asked once; with `--trace-all` nothing is followed.

use tracer_common::Tuple;

use crate::{
    filter::has_tracked_addr,
    first,
    followed::{flow_followed, follow_flow},
    maps::{expr_admits, trace_all},
    nat::step::{Meta, Rewrite, emit_step},
};

/// Which tuples of a reported NAT step are to be followed ([`reported`]).
pub struct Follow {
    before: bool,
    after: bool,
}

impl Follow {
    /// Follows the chosen tuples, in both directions.
    #[inline(always)]
    fn apply(&self, before: &Tuple, after: &Tuple) {
        if self.after {
            follow_flow(after);
        }
        if self.before {
            follow_flow(before);
        }
    }
}

/// Whether a NAT step is reported, and which of its tuples it follows: `None` when NAT left
/// the packet unchanged (most packets: decided on the tuples alone), the filter expression
/// rules out its IP version or protocol (neither changes under NAT: none of its packets would
/// be shown, so its flow is not followed either) or the packet is traced neither before nor
/// after it. A tuple without a tracked address is followed.
#[inline(always)]
pub fn reported(before: &Tuple, after: &Tuple) -> Option<Follow> {
    if *after == *before || !expr_admits(before.family, before.proto) {
        return None;
    }
    if trace_all() {
        return Some(Follow {
            before: false,
            after: false,
        });
    }
    let (tb, ta) = (has_tracked_addr(before), has_tracked_addr(after));
    if tb || ta || flow_followed(before) || flow_followed(after) {
        return Some(Follow {
            before: !tb,
            after: !ta,
        });
    }
    None
}

/// Reports a step [`reported`] said yes to: follows its flows, then reads `meta` (only now,
/// for a reported step), emits the claimed ingress step if any, and the step's event.
#[inline(always)]
pub fn report(r: &Rewrite<'_>, follow: &Follow, meta: impl FnOnce() -> Meta) {
    follow.apply(r.before, &r.after.tuple);
    let m = meta();
    let start = r.now.saturating_sub(r.nat_ns);
    first::claim(r.skb, r.hook, r.before, r.after, start);
    emit_step(r, &m);
}
