//! Placeholders in the netfilter programs that their loader rewrites from the running kernel's
//! BTF before `BPF_PROG_LOAD` (tracer-user `nat::netfilter`), so that the programs read
//! kernel structures with plain loads the verifier checks against BTF (no helper call):
//!
//! - a load (`BPF_LDX | BPF_MEM`) whose offset is one of the `*` offsets below, from the
//!   netfilter context, `struct sk_buff`, `net_device` or `nf_conn`, gets the member's offset
//!   (or becomes `dst = 0` when this kernel lacks an optional member); its size must be the one
//!   given here;
//! - a helper call to [`RDONLY_CAST`] becomes a call of the kfunc `bpf_rdonly_cast`;
//! - a `mov` of an immediate [`TYPE_HEAD`] or [`TYPE_NF_CONN`] gets that struct's BTF id.
//!
//! Only the `nf_*` programs may hold them: the loader refuses unknown placeholders and
//! placeholders it did not find. The values are far from any real offset, helper id or type
//! id the programs use.

/// First and last offset reserved for placeholder loads.
pub const LOAD_FIRST: i16 = 0x7f00;
pub const LOAD_LAST: i16 = 0x7fff;
/// `struct bpf_nf_ctx`, `skb` (8 bytes).
pub const CTX_SKB: i16 = 0x7f00;
/// `struct bpf_nf_ctx`, `state` (8 bytes), and `struct nf_hook_state`, `hook` (1 byte):
/// the hook a netfilter program runs in.
pub const CTX_STATE: i16 = 0x7f98;
pub const STATE_HOOK: i16 = 0x7fa0;
/// `struct sk_buff`: `len`, `data_len` (4 bytes), `data` (8), `dev` (8), `_nfct` (8, optional: kernels without conntrack).
pub const SKB_LEN: i16 = 0x7f08;
pub const SKB_DATA_LEN: i16 = 0x7f10;
pub const SKB_DATA: i16 = 0x7f18;
pub const SKB_DEV: i16 = 0x7f20;
pub const SKB_NFCT: i16 = 0x7f30;
/// `struct net_device`, `ifindex` (4 bytes).
pub const DEV_IFINDEX: i16 = 0x7f38;
/// `struct nf_conn` (through a [`TYPE_NF_CONN`] cast), optional: all become `dst = 0` on a
/// kernel whose vmlinux BTF lacks the struct (conntrack built as a module). `status`
/// (8 bytes); `tuplehash[IP_CT_DIR_ORIGINAL].tuple.src.l3num` (2);
/// `tuplehash[dir].tuple.src.u3.ip` and `.dst.u3.ip` of the original and reply directions
/// (4 each); `tuplehash[dir].tuple.src.u.all` and `.dst.u.all` of both directions (2 each,
/// network order: the ports of TCP and UDP); the original direction's
/// `tuple.dst.protonum` (1).
pub const CT_STATUS: i16 = 0x7f40;
pub const CT_ORIG_L3NUM: i16 = 0x7f48;
pub const CT_ORIG_SRC: i16 = 0x7f50;
pub const CT_ORIG_DST: i16 = 0x7f58;
pub const CT_REPLY_SRC: i16 = 0x7f60;
pub const CT_REPLY_DST: i16 = 0x7f68;
pub const CT_ORIG_SPORT: i16 = 0x7f70;
pub const CT_ORIG_DPORT: i16 = 0x7f78;
pub const CT_REPLY_SPORT: i16 = 0x7f80;
pub const CT_REPLY_DPORT: i16 = 0x7f88;
pub const CT_PROTO: i16 = 0x7f90;
/// Helper id standing for the kfunc `bpf_rdonly_cast(const void *, u32 btf_id)`.
pub const RDONLY_CAST: i32 = 0x7ff0;
/// First and last immediate reserved for type-id placeholders.
pub const TYPE_FIRST: i32 = 0x7ffe_0000;
pub const TYPE_LAST: i32 = 0x7ffe_ffff;
/// BTF id of `struct ipv6hdr` in vmlinux BTF: the type the programs give a packet's first
/// 40 bytes, whatever its IP version, to read them as five 8-byte loads (bytes 0, 8, 16,
/// 24, 32). Each load stays inside one member, as the verifier's check of a BTF load
/// (`btf_struct_walk`) wants: byte 0 starts a bitfield (a load covering a bitfield's bytes
/// is allowed), and bytes 8..40 are the two `struct in6_addr`, byte arrays. Verified on
/// 6.18 only.
pub const TYPE_HEAD: i32 = 0x7ffe_0001;
/// BTF id of `struct nf_conn` in vmlinux BTF (where the struct is missing: any struct's,
/// the `CT_*` loads then read nothing).
pub const TYPE_NF_CONN: i32 = 0x7ffe_0003;
