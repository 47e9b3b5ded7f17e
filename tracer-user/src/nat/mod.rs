//! NAT observation (DESIGN.md "NAT observation"): which hook this kernel allows ([`choose`]),
//! and the hooks themselves: kprobes or fentry/fexit on the kernel's NAT functions
//! ([`probe`]), BPF netfilter programs ([`netfilter`]), or conntrack's events over netlink
//! ([`conntrack`]).

mod choose;
pub mod conntrack;
pub mod netfilter;
pub mod probe;

pub use choose::{NatAttachment, NatError, attach, kernel_offsets_or_default};
