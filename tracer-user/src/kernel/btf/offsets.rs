//! The structure offsets the NAT programs need ([`KernelOffsets`]), read from the kernel's BTF,
//! and their bytes for the programs' `OFFSETS` global.

use tracer_common::KernelOffsets;

use super::{Btf, BtfError};

/// Offset of a member the programs can do without: 0 ("unknown") when this kernel lacks the
/// struct or member, other errors still fail.
fn optional(found: Result<u32, BtfError>) -> Result<u32, BtfError> {
    match found {
        Err(BtfError::StructNotFound { .. } | BtfError::MemberNotFound { .. }) => Ok(0),
        other => other,
    }
}

/// The offsets the NAT programs need, from the kernel's BTF.
///
/// `skb_head` and `skb_network_header` are optional too (only the drop program reads them, and
/// it reads no packet without them). Two more are optional and 0 ("unknown", neither can be at offset 0) when this kernel lacks them:
/// `nf_ctx_skb` (`struct bpf_nf_ctx` exists from Linux 6.4 with `CONFIG_NETFILTER_BPF_LINK`,
/// include/linux/filter.h, v6.4; only the netfilter-link programs need it) and `skb_nfct`
/// (`sk_buff._nfct` exists only with conntrack, include/linux/skbuff.h, v6.1). The others are
/// required: a kernel without them cannot be traced, and the error names the struct and member.
pub fn kernel_offsets(btf: &Btf) -> Result<KernelOffsets, BtfError> {
    Ok(KernelOffsets {
        nf_ctx_skb: optional(btf.struct_member_offset("bpf_nf_ctx", "skb"))?,
        skb_len: btf.struct_member_offset("sk_buff", "len")?,
        skb_data: btf.struct_member_offset("sk_buff", "data")?,
        skb_nfct: optional(btf.struct_member_offset("sk_buff", "_nfct"))?,
        skb_dev: btf.struct_member_offset("sk_buff", "dev")?,
        dev_ifindex: btf.struct_member_offset("net_device", "ifindex")?,
        skb_data_len: btf.struct_member_offset("sk_buff", "data_len")?,
        skb_head: optional(btf.struct_member_offset("sk_buff", "head"))?,
        skb_network_header: optional(btf.struct_member_offset("sk_buff", "network_header"))?,
    })
}

/// [`KernelOffsets`] as the bytes of the `OFFSETS` global, for
/// `EbpfLoader::override_global` and the netfilter loader's globals.
#[must_use]
pub fn kernel_offsets_bytes(o: &KernelOffsets) -> [u8; 36] {
    let fields = [
        o.nf_ctx_skb,
        o.skb_len,
        o.skb_data,
        o.skb_nfct,
        o.skb_dev,
        o.dev_ifindex,
        o.skb_data_len,
        o.skb_head,
        o.skb_network_header,
    ];
    let mut out = [0; 36];
    for (chunk, field) in out.chunks_exact_mut(4).zip(fields) {
        chunk.copy_from_slice(&field.to_ne_bytes());
    }
    out
}
