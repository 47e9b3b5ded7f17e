//! Drops: the kernel's drop of a traced packet (`skb:kfree_skb`) joins its journey and ends
//! it. [`attach`] puts the drop program on the tracepoint; [`names`] names the reason (the
//! kernel's BTF) and the location (`/proc/kallsyms`) for the join.

pub mod attach;
pub mod names;

pub use attach::DropAttachment;
pub use names::{DropNames, Reasons};
