//! What the netfilter programs' placeholders ([`nf_patch`]) become on the running kernel:
//! member offsets of typed loads, the `bpf_rdonly_cast` kfunc id and struct type ids, all read
//! from its BTF; and the record of which placeholders the programs held ([`Used`]).

use std::collections::HashSet;

use tracer_common::nf_patch;

use super::AttachError;
use crate::kernel::btf::{Btf, kernel_offsets};

/// One placeholder load ([`nf_patch`]) and what it becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadPatch {
    /// The placeholder offset.
    pub placeholder: i16,
    /// The member's name, for errors.
    pub what: &'static str,
    /// The load's size in bytes (the member's).
    pub bytes: u8,
    /// The member's offset; `None`: this kernel lacks the (optional) member, the load becomes
    /// `dst = 0`.
    pub offset: Option<i16>,
}

/// The `struct nf_conn` members the enter programs read ([`nf_patch`]'s `CT_*`), as offsets
/// in the struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnOffsets {
    pub status: u32,
    pub orig_l3num: u32,
    pub orig_src: u32,
    pub orig_dst: u32,
    pub reply_src: u32,
    pub reply_dst: u32,
    pub orig_sport: u32,
    pub orig_dport: u32,
    pub reply_sport: u32,
    pub reply_dport: u32,
    pub proto: u32,
}

/// The `struct nf_conn` placeholder loads ([`nf_patch`]'s `CT_*`): what each reads, its size in
/// bytes, and its offset in [`ConnOffsets`].
type CtLoad = (i16, &'static str, u8, fn(&ConnOffsets) -> u32);
const CT_LOADS: [CtLoad; 11] = [
    (nf_patch::CT_STATUS, "nf_conn.status", 8, |o| o.status),
    (nf_patch::CT_ORIG_L3NUM, "nf_conn original l3num", 2, |o| {
        o.orig_l3num
    }),
    (nf_patch::CT_ORIG_SRC, "nf_conn original source", 4, |o| {
        o.orig_src
    }),
    (
        nf_patch::CT_ORIG_DST,
        "nf_conn original destination",
        4,
        |o| o.orig_dst,
    ),
    (nf_patch::CT_REPLY_SRC, "nf_conn reply source", 4, |o| {
        o.reply_src
    }),
    (
        nf_patch::CT_REPLY_DST,
        "nf_conn reply destination",
        4,
        |o| o.reply_dst,
    ),
    (
        nf_patch::CT_ORIG_SPORT,
        "nf_conn original source port",
        2,
        |o| o.orig_sport,
    ),
    (
        nf_patch::CT_ORIG_DPORT,
        "nf_conn original destination port",
        2,
        |o| o.orig_dport,
    ),
    (
        nf_patch::CT_REPLY_SPORT,
        "nf_conn reply source port",
        2,
        |o| o.reply_sport,
    ),
    (
        nf_patch::CT_REPLY_DPORT,
        "nf_conn reply destination port",
        2,
        |o| o.reply_dport,
    ),
    (nf_patch::CT_PROTO, "nf_conn protocol", 1, |o| o.proto),
];

impl ConnOffsets {
    /// The offsets from `btf`; `Ok(None)` when it has no `struct nf_conn` or lacks one of the
    /// members (conntrack built as a module keeps its types in the module's BTF, which
    /// `bpf_rdonly_cast` cannot name). `tuplehash` is an array of `IP_CT_DIR_MAX` (2)
    /// `struct nf_conntrack_tuple_hash`: the reply direction's is one element further.
    pub fn from_btf(btf: &Btf) -> Result<Option<Self>, AttachError> {
        let found = (|| {
            let hash = btf.struct_member_offset("nf_conn", "tuplehash")?;
            let stride = btf.struct_size("nf_conntrack_tuple_hash")?;
            let in_hash = |path| btf.struct_member_offset("nf_conntrack_tuple_hash", path);
            let (src, dst) = (in_hash("tuple.src.u3")?, in_hash("tuple.dst.u3")?);
            let (sport, dport) = (in_hash("tuple.src.u")?, in_hash("tuple.dst.u")?);
            Ok(Self {
                status: btf.struct_member_offset("nf_conn", "status")?,
                orig_l3num: hash + in_hash("tuple.src.l3num")?,
                orig_src: hash + src,
                orig_dst: hash + dst,
                reply_src: hash + stride + src,
                reply_dst: hash + stride + dst,
                orig_sport: hash + sport,
                orig_dport: hash + dport,
                reply_sport: hash + stride + sport,
                reply_dport: hash + stride + dport,
                proto: hash + in_hash("tuple.dst.protonum")?,
            })
        })();
        match found {
            Ok(o) => Ok(Some(o)),
            Err(
                crate::kernel::btf::BtfError::StructNotFound { .. }
                | crate::kernel::btf::BtfError::MemberNotFound { .. },
            ) => Ok(None),
            Err(e) => Err(AttachError::Btf(e)),
        }
    }

    /// The `CT_*` load patches: the offsets, or `dst = 0` for every load without them.
    pub(super) fn loads(this: Option<Self>) -> [LoadPatch; CT_LOADS.len()] {
        CT_LOADS.map(|(placeholder, what, bytes, member)| LoadPatch {
            placeholder,
            what,
            bytes,
            offset: this.map(|o| i16::try_from(member(&o)).unwrap_or(i16::MAX)),
        })
    }
}

/// What the netfilter programs' placeholders become on one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfPatches {
    /// False when the enter programs cannot read conntrack entries ([`ConnOffsets`]): they
    /// then read every packet.
    pub conntrack: bool,
    pub loads: Vec<LoadPatch>,
    /// BTF id of the kfunc `bpf_rdonly_cast` in vmlinux BTF.
    pub rdonly_cast: u32,
    /// Type-id placeholders and the vmlinux BTF ids they stand for, with names for errors.
    pub types: Vec<(i32, &'static str, u32)>,
}

impl NfPatches {
    /// The patches for the kernel whose BTF `btf` is.
    pub fn from_btf(btf: &Btf) -> Result<Self, AttachError> {
        let mut loads = context_loads(btf)?;
        let conn = ConnOffsets::from_btf(btf)?;
        loads.extend(ConnOffsets::loads(conn));
        let id = |found: Result<Option<u32>, _>, what| {
            found
                .map_err(AttachError::Btf)?
                .ok_or(AttachError::BtfMissing { what })
        };
        let head = id(btf.struct_id("ipv6hdr"), "struct ipv6hdr")?;
        // Without `struct nf_conn` the cast stays (the program holds it) but nothing loads
        // through it: any struct's id will do.
        let nf_conn = match conn {
            Some(_) => id(btf.struct_id("nf_conn"), "struct nf_conn")?,
            None => head,
        };
        Ok(Self {
            conntrack: conn.is_some(),
            loads,
            rdonly_cast: id(
                btf.func_id("bpf_rdonly_cast"),
                "kfunc bpf_rdonly_cast (Linux 6.2+)",
            )?,
            types: vec![
                (nf_patch::TYPE_HEAD, "struct ipv6hdr", head),
                (nf_patch::TYPE_NF_CONN, "struct nf_conn", nf_conn),
            ],
        })
    }
}

/// The load patches of the hook context, packet and device placeholders (all but the
/// `struct nf_conn` ones): `bpf_nf_ctx.skb` is required, the optional `sk_buff` members load 0
/// on a kernel without them.
fn context_loads(btf: &Btf) -> Result<Vec<LoadPatch>, AttachError> {
    let o = kernel_offsets(btf).map_err(AttachError::Btf)?;
    let required = |v: u32, what: &'static str| {
        (v != 0)
            .then_some(v)
            .ok_or(AttachError::BtfMissing { what })
    };
    let ctx_skb = required(o.nf_ctx_skb, "struct bpf_nf_ctx member skb")?;
    let member = |placeholder, what, bytes, offset: u32| LoadPatch {
        placeholder,
        what,
        bytes,
        offset: (offset != 0).then(|| i16::try_from(offset).unwrap_or(i16::MAX)),
    };
    // Both members come first in their structs (6.4 to 6.18): `member`'s 0 for "missing"
    // would turn their loads into `dst = 0`.
    let at = |placeholder, what, bytes, found: Result<u32, crate::kernel::btf::BtfError>| {
        Ok::<_, AttachError>(LoadPatch {
            placeholder,
            what,
            bytes,
            offset: Some(i16::try_from(found.map_err(AttachError::Btf)?).unwrap_or(i16::MAX)),
        })
    };
    Ok(vec![
        member(nf_patch::CTX_SKB, "bpf_nf_ctx.skb", 8, ctx_skb),
        at(
            nf_patch::CTX_STATE,
            "bpf_nf_ctx.state",
            8,
            btf.struct_member_offset("bpf_nf_ctx", "state"),
        )?,
        at(
            nf_patch::STATE_HOOK,
            "nf_hook_state.hook",
            1,
            btf.struct_member_offset("nf_hook_state", "hook"),
        )?,
        member(nf_patch::SKB_LEN, "sk_buff.len", 4, o.skb_len),
        member(
            nf_patch::SKB_DATA_LEN,
            "sk_buff.data_len",
            4,
            o.skb_data_len,
        ),
        member(nf_patch::SKB_DATA, "sk_buff.data", 8, o.skb_data),
        member(nf_patch::SKB_DEV, "sk_buff.dev", 8, o.skb_dev),
        member(nf_patch::SKB_NFCT, "sk_buff._nfct", 8, o.skb_nfct),
        member(
            nf_patch::DEV_IFINDEX,
            "net_device.ifindex",
            4,
            o.dev_ifindex,
        ),
    ])
}

/// Which placeholders the patched programs held, to refuse an object without some of them
/// (a loader and object that disagree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Used {
    pub(super) loads: HashSet<i16>,
    pub(super) rdonly_cast: bool,
    pub(super) types: HashSet<i32>,
}

impl Used {
    /// Errors with the first placeholder of [`nf_patch`] that no program held.
    pub(super) fn check(&self) -> Result<(), AttachError> {
        let loads = [
            (nf_patch::CTX_SKB, "bpf_nf_ctx.skb"),
            (nf_patch::CTX_STATE, "bpf_nf_ctx.state"),
            (nf_patch::STATE_HOOK, "nf_hook_state.hook"),
            (nf_patch::SKB_LEN, "sk_buff.len"),
            (nf_patch::SKB_DATA_LEN, "sk_buff.data_len"),
            (nf_patch::SKB_DATA, "sk_buff.data"),
            (nf_patch::SKB_DEV, "sk_buff.dev"),
            (nf_patch::SKB_NFCT, "sk_buff._nfct"),
            (nf_patch::DEV_IFINDEX, "net_device.ifindex"),
        ];
        let ct = CT_LOADS.iter().map(|&(ph, what, _, _)| (ph, what));
        for (ph, what) in loads.into_iter().chain(ct) {
            if !self.loads.contains(&ph) {
                return Err(AttachError::PatchUnused { what });
            }
        }
        if !self.rdonly_cast {
            return Err(AttachError::PatchUnused {
                what: "bpf_rdonly_cast",
            });
        }
        for (ty, what) in [
            (nf_patch::TYPE_HEAD, "struct ipv6hdr"),
            (nf_patch::TYPE_NF_CONN, "struct nf_conn"),
        ] {
            if !self.types.contains(&ty) {
                return Err(AttachError::PatchUnused { what });
            }
        }
        Ok(())
    }
}
