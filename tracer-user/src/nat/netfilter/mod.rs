//! BPF netfilter programs and links: NAT observation method 3 of DESIGN.md.
//!
//! aya 0.14 has no loader for `BPF_PROG_TYPE_NETFILTER`, so the `nf_*` programs of the kernel
//! object (which sit in the `classifier` section, the one aya-obj accepts) are loaded here:
//! the object is parsed again with aya-obj, its globals patched like aya's, its map references
//! pointed at the maps aya created (so both loaders share one ring buffer, one flow table),
//! its calls linked, and each program loaded with the raw `bpf(BPF_PROG_LOAD)` syscall
//! ([`crate::kernel::sys`]). aya also lists these programs as `SchedClassifier`s; never load them
//! through aya. Before loading, their placeholders ([`tracer_common::nf_patch`]: member offsets
//! of typed loads, the kfunc `bpf_rdonly_cast` and its struct type ids) are patched from the
//! running kernel's BTF ([`rewrite::patch_instructions`], strict: anything unknown or missing
//! is an error).
//!
//! A [`NetfilterLink`] hooks a program into netfilter in the network namespace of the
//! **calling thread** at attach time (`current->nsproxy->net_ns`, `bpf_nf_link_attach`,
//! `net/netfilter/nf_bpf_link.c`, v6.4). The link is a file descriptor: closing it (drop, exit,
//! even SIGKILL) unregisters the hook, and while it is open it holds a reference on that
//! namespace.
//!
//! # Minimum kernel version
//! 6.4, built with `CONFIG_NETFILTER_BPF_LINK` (`BPF_PROG_TYPE_NETFILTER`,
//! `BPF_LINK_TYPE_NETFILTER`: `net/netfilter/nf_bpf_link.c`, v6.4). The programs may only read
//! their context (`struct bpf_nf_ctx`: `state` at 0, `skb` at 8, 8-byte loads), use the base
//! helpers, and must return `NF_DROP` (0) or `NF_ACCEPT` (1).

mod error;
mod link;
mod patches;
mod rewrite;
#[cfg(test)]
mod tests;

use aya_obj::generated::{bpf_attach_type, bpf_prog_type};
pub use error::AttachError;
#[cfg(test)]
pub use link::probe_netfilter_links;
pub use link::{NetfilterLink, NetfilterProgram};
#[cfg(test)]
pub(crate) use rewrite::insn;

use self::{
    error::refused,
    patches::{NfPatches, Used},
    rewrite::patch_instructions,
};
use crate::kernel::{
    btf::KernelBtf,
    loader::{LoadAs, LoadFailure, PreparedObject},
};

/// `NFPROTO_IPV4` (include/uapi/linux/netfilter.h, v6.4).
pub const NFPROTO_IPV4: u32 = 2;
/// `NFPROTO_IPV6` (include/uapi/linux/netfilter.h, v6.4).
pub const NFPROTO_IPV6: u32 = 10;
/// `NF_INET_LOCAL_OUT` (include/uapi/linux/netfilter.h, v6.4).
#[cfg(test)]
const NF_INET_LOCAL_OUT: u32 = 3;
/// Programs of the object whose names start with this are netfilter programs.
pub const PROGRAM_PREFIX: &str = "nf_";

/// Loads every `nf_*` program of the kernel object `bytes` as a BPF netfilter program, using
/// the maps `ebpf` created from the same bytes (see [`PreparedObject::new`] for `globals`).
///
/// # Minimum kernel version
/// 6.4 with `CONFIG_NETFILTER_BPF_LINK` (`net/netfilter/nf_bpf_link.c`, v6.4).
///
/// The flag is [`NfPatches::conntrack`]: false when the enter programs cannot read conntrack
/// entries on this kernel and read every packet instead.
pub fn load_netfilter_programs(
    bytes: &[u8],
    globals: &[(&str, &[u8])],
    ebpf: &aya::Ebpf,
    kernel_btf: &KernelBtf,
) -> Result<(Vec<NetfilterProgram>, bool), AttachError> {
    let patches = NfPatches::from_btf(kernel_btf.get().map_err(AttachError::Btf)?)?;
    let mut prepared = PreparedObject::new(bytes, globals, ebpf)?;
    let names: Vec<String> = prepared
        .program_names(PROGRAM_PREFIX)
        .into_iter()
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        return Err(AttachError::NoPrograms);
    }
    let mut used = Used::default();
    for name in &names {
        let Some(insns) = prepared.instructions_mut(name) else {
            continue;
        };
        patch_instructions(insns, &patches, &mut used).map_err(|(index, what)| {
            AttachError::Patch {
                program: name.clone(),
                index,
                what,
            }
        })?;
    }
    used.check()?;
    let how = LoadAs {
        prog_type: bpf_prog_type::BPF_PROG_TYPE_NETFILTER,
        expected_attach_type: bpf_attach_type::BPF_NETFILTER,
        attach_btf_id: 0,
        attach_btf_obj_fd: None,
    };
    let load = |name: &String| match prepared.load(name, how) {
        Ok(Some(fd)) => Ok(NetfilterProgram {
            fd,
            name: name.to_owned(),
        }),
        Ok(None) => Err(AttachError::MissingFunction {
            program: name.to_owned(),
        }),
        Err(LoadFailure { errno, log }) => Err(refused(name.to_owned(), errno, log)),
    };
    crate::attach::side_by_side(&names, load)
        .into_iter()
        .collect::<Result<_, _>>()
        .map(|programs| (programs, patches.conntrack))
}
