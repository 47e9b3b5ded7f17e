//! Drops in user space: the kernel's drop of a traced packet (`skb:kfree_skb`, the programs
//! of `tracer-ebpf/src/drops.rs`). `attach` puts the drop program on the tracepoint; `names`
//! names the reason (the kernel's BTF) and the location (`/proc/kallsyms`, or the kernel's
//! own names from site records); `decode` tells the drops from the frees that are no failure.
//! The join puts a drop into its packet's journey and ends it (`journey::correlate::drop`);
//! [`why`] says why the kernel dropped it, in the node's words (the rule that dropped it, or
//! what the reason means), for `explain::DropExplainer`.

pub(crate) mod attach;
mod class;
mod decode;
pub(crate) mod names;
pub mod why;

pub(crate) use attach::DropAttachment;
pub use class::FailureClass;
pub(crate) use decode::Decoded;
pub(crate) use names::{DropNames, Reasons};
