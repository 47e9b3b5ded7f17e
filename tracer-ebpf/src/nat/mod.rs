//! Observing NAT: two kinds of program see the same step, and report it one way.
//!
//! - [`netfilter`]: BPF netfilter programs bracketing the nat table (the whole step: rule
//!   traversal and rewrite), with [`conntrack`] deciding from the packet's entry which packets
//!   they need not read, and [`btf`] their typed loads.
//! - [`probe`]: fentry/fexit and kprobe/kretprobe pairs on `nf_nat_manip_pkt` (the rewrite
//!   itself). User space loads one kind or the other (`--nat-hook`).
//!
//! Both read the packet through [`packet`] and end in [`report`]: a step NAT changed for a
//! traced packet follows the new tuples ([`crate::followed`]), emits the first packet's
//! claimed ingress step ([`crate::first`]) and the step's record ([`step`]).

mod btf;
mod conntrack;
mod netfilter;
mod packet;
mod probe;
mod report;
pub mod step;
