//! Kernel structure offsets from the running kernel's BTF.
//!
//! The NAT programs read a few fields of `struct sk_buff`, `struct net_device` and
//! `struct bpf_nf_ctx`; their offsets change with every kernel build, so they are looked up
//! here at load time and handed to the programs in the `OFFSETS` global
//! ([`tracer_common::KernelOffsets`]), never hard-coded for one kernel.
//!
//! This is a small, safe reader of the BTF format (include/uapi/linux/btf.h and
//! Documentation/bpf/btf.rst, v6.12): the header, every type kind (so that each record's trailing
//! data is skipped correctly) and the string section, plus split BTF for kernel modules
//! (`/sys/kernel/btf/<module>`, whose type ids and string offsets continue after vmlinux's).
//! It answers one question: the byte offset of a member of a named struct, looking through
//! anonymous struct and union members the way C does (`sk_buff` keeps `len`, `mark`, `dev` and
//! others inside anonymous unions and `struct_group`s).

mod enums;
mod error;
mod format;
mod lookup;
mod offsets;
mod reader;
#[cfg(test)]
mod tests;

pub use error::BtfError;
pub use offsets::{kernel_offsets, kernel_offsets_bytes};
pub use reader::{Btf, KernelBtf};

/// Where the running kernel exposes its own BTF (needs `CONFIG_DEBUG_INFO_BTF`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
