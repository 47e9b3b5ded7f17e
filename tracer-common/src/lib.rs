//! Types shared by pktrace's eBPF programs and its collector.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of `bool` and implicit padding, and its layout
//! is pinned at compile time: the kernel writes these bytes into the ring buffer and the
//! collector reads them back. The packet parser ([`parse`]) is shared too, so the exact code the
//! kernel runs is unit-tested and fuzzed on the host.
#![cfg_attr(not(test), no_std)]

pub mod parse;

use core::mem::size_of;

/// Bytes of a packet copied into the parser's window (from L2 in tc, from L3 at netfilter).
pub const PKT_WINDOW: usize = 256;

/// Address family of a [`Tuple`].
pub const FAMILY_IPV4: u8 = 4;
/// Address family of a [`Tuple`].
pub const FAMILY_IPV6: u8 = 6;

/// IP protocol numbers the parser understands.
pub const PROTO_ICMP: u8 = 1;
/// TCP.
pub const PROTO_TCP: u8 = 6;
/// UDP.
pub const PROTO_UDP: u8 = 17;
/// ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// A packet's addresses, ports and protocol as seen at one point.
///
/// IPv4 addresses sit in the first four bytes of `saddr`/`daddr` (network order), the rest is
/// zero. Ports are in host order. For ICMP echo both ports hold the echo identifier (as
/// conntrack does); for other ICMP messages both are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<Tuple>() == 40);

impl Tuple {
    /// The same flow seen from the other end.
    #[must_use]
    pub const fn reversed(&self) -> Self {
        Self {
            saddr: self.daddr,
            daddr: self.saddr,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
            family: self.family,
            _pad: [0; 2],
        }
    }

    /// True when this is a real packet tuple (the parser found an IP header).
    #[must_use]
    pub const fn is_set(&self) -> bool {
        self.family != 0
    }
}

/// A flow's slot among `1 << bits` (`bits` in 1..=32) of the kernel's followed-flow hash
/// (`FLOW_TUPLES`): from the first four bytes of each address as a native `u32` (an IPv4
/// address as it lies in memory) and the two ports (host order, as in a [`Tuple`]), the fields
/// that tell flows apart; leaving the family and protocol out only adds collisions. The words
/// are combined (the rotation makes the two directions of a flow differ) and mixed by
/// MurmurHash3's 32-bit finaliser without its last xor-shift, which would change only the
/// lowest of the high bits kept: sequential ports spread as well as random ones. Ending on a
/// multiplication and a shift also keeps the slot's bound visible to older verifiers (Debian's
/// 6.1 loses it through an xor: LLVM turns `(h ^ h >> 16) >> 15` into `h >> 15 ^ h >> 31`).
#[inline(always)]
#[must_use]
pub fn flow_slot_of(saddr: u32, daddr: u32, sport: u16, dport: u16, bits: u32) -> u32 {
    let ports = (u32::from(sport) << 16) | u32::from(dport);
    let mut h = (saddr ^ daddr.rotate_left(16)).wrapping_mul(0x9e37_79b1) ^ ports;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h >> (32 - bits)
}

/// Bits of a flow's slot in the kernel's followed-flow hash (`FLOW_TUPLES`, 1 << 17 bytes).
pub const FLOW_TUPLE_BITS: u32 = 17;
/// Bytes of the kernel's followed-address hash (`FLOW_ADDRS`, a power of two).
pub const FLOW_ADDR_SLOTS: usize = 1024;

/// The `FLOW_ADDRS` slot of an IPv4 address (its four bytes as a native `u32`, as they lie in
/// memory): the kernel programs and user space (which follows flows for `--nat-hook
/// conntrack`) must agree on it.
#[inline(always)]
#[must_use]
pub fn flow_addr_slot(addr: u32) -> usize {
    (addr.wrapping_mul(0x9e37_79b1) >> 22) as usize & (FLOW_ADDR_SLOTS - 1)
}

/// The `FLOW_TUPLES` slot of a tuple (the first four bytes of each address, whatever its
/// family), as the kernel programs find it.
#[inline(always)]
#[must_use]
pub fn flow_tuple_slot(t: &Tuple) -> usize {
    let w = |a: &[u8; 16]| u32::from_ne_bytes([a[0], a[1], a[2], a[3]]);
    flow_slot_of(w(&t.saddr), w(&t.daddr), t.sport, t.dport, FLOW_TUPLE_BITS) as usize
}

/// Fields of a packet that NAT does not change, used to recognise the same packet at every
/// hook: IP id (IPv4) plus TCP seq/ack/flags/window, ICMP type/code/sequence and leading
/// payload, or UDP length and leading payload bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint {
    pub ip_id: u32,
    pub a: u32,
    pub b: u32,
    pub c: u32,
}
const _: () = assert!(size_of::<Fingerprint>() == 16);

/// Kinds of [`Event`].
pub mod kind {
    /// tc ingress of an attached interface.
    pub const TC_INGRESS: u8 = 1;
    /// tc egress of an attached interface.
    pub const TC_EGRESS: u8 = 2;
    /// A NAT step: `orig` is the packet before it, `tuple` after.
    pub const NAT: u8 = 3;
}

/// Netfilter hook numbers (`enum nf_inet_hooks`, include/uapi/linux/netfilter.h, v6.1).
pub mod hook {
    pub const PRE_ROUTING: u8 = 0;
    pub const LOCAL_IN: u8 = 1;
    pub const FORWARD: u8 = 2;
    pub const LOCAL_OUT: u8 = 3;
    pub const POST_ROUTING: u8 = 4;
}

/// Bits of [`Event::flags`].
pub mod flag {
    /// IPv4 fragment (first or later); later fragments carry no ports.
    pub const FRAGMENT: u8 = 1;
    /// The L4 header did not fit in the captured bytes; ports and fingerprint are partial.
    pub const TRUNCATED: u8 = 2;
    /// NAT event whose latency covers the whole nat hook (rule traversal and rewrite).
    pub const NAT_HOOK_TIMED: u8 = 4;
    /// NAT event whose latency was not measured.
    pub const NAT_UNTIMED: u8 = 8;
    /// tc ingress event of a connection's first packet, which tc ingress noted without knowing
    /// it traced and the NAT program emitted when DNAT made it a traced pod's
    /// ([`crate::parse::first`]): the hook saw the packet at or before `ktime_ns` (the start of
    /// the NAT step), not at it.
    pub const TC_CLAIMED: u8 = 16;
}

/// Conntrack `ctinfo` values (`enum ip_conntrack_info`, include/uapi/linux/netfilter/
/// nf_conntrack_common.h, v6.1); values `>= CT_IS_REPLY` belong to the reply direction.
pub mod ct {
    pub const ESTABLISHED: u8 = 0;
    pub const RELATED: u8 = 1;
    pub const NEW: u8 = 2;
    pub const IS_REPLY: u8 = 3;
    /// No conntrack entry attached to the packet.
    pub const NONE: u8 = 0xff;
}

/// Placeholders in the netfilter programs that their loader rewrites from the running kernel's
/// BTF before `BPF_PROG_LOAD` (tracer-user `attach::netfilter`), so that the programs read
/// kernel structures with plain loads the verifier checks against BTF (no helper call):
///
/// - a load (`BPF_LDX | BPF_MEM`) whose offset is one of the `*` offsets below, from the
///   netfilter context, `struct sk_buff`, `net_device` or `nf_conn`, gets the member's offset
///   (or becomes `dst = 0` when this kernel lacks an optional member); its size must be the one
///   given here;
/// - a helper call to [`RDONLY_CAST`] becomes a call of the kfunc `bpf_rdonly_cast`;
/// - a `mov` of an immediate [`TYPE_HEAD`] or [`TYPE_NF_CONN`] gets that struct's BTF id.
///
/// Only the `nf_*` programs may hold them: the loader refuses unknown placeholders and
/// placeholders it did not find. The values are far from any real offset, helper id or type
/// id the programs use.
pub mod nf_patch {
    /// First and last offset reserved for placeholder loads.
    pub const LOAD_FIRST: i16 = 0x7f00;
    pub const LOAD_LAST: i16 = 0x7fff;
    /// `struct bpf_nf_ctx`, `skb` (8 bytes).
    pub const CTX_SKB: i16 = 0x7f00;
    /// `struct bpf_nf_ctx`, `state` (8 bytes), and `struct nf_hook_state`, `hook` (1 byte):
    /// the hook a netfilter program runs in.
    pub const CTX_STATE: i16 = 0x7f98;
    pub const STATE_HOOK: i16 = 0x7fa0;
    /// `struct sk_buff`: `len`, `data_len` (4 bytes), `data` (8), `dev` (8), `mark` (4),
    /// `_nfct` (8, optional: kernels without conntrack).
    pub const SKB_LEN: i16 = 0x7f08;
    pub const SKB_DATA_LEN: i16 = 0x7f10;
    pub const SKB_DATA: i16 = 0x7f18;
    pub const SKB_DEV: i16 = 0x7f20;
    pub const SKB_MARK: i16 = 0x7f28;
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
}

/// One observation of one packet, as the kernel writes it into the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// One of [`kind`].
    pub kind: u8,
    /// NAT events: the netfilter hook ([`hook`]); tc events: 0.
    pub hook: u8,
    /// NAT events: conntrack `ctinfo` ([`ct`]); tc events: [`ct::NONE`].
    pub ct_info: u8,
    /// Bits of [`flag`].
    pub flags: u8,
    /// Interface index (in the namespace the program is attached in), 0 when unknown.
    pub ifindex: u32,
    /// `bpf_ktime_get_ns()` when the event was taken (NAT: after the step).
    pub ktime_ns: u64,
    /// Kernel `struct sk_buff` address, 0 when the hook cannot see it.
    pub skb: u64,
    /// Network namespace cookie, 0 when unknown.
    pub netns: u64,
    /// Packet length in bytes (tc: from L2, NAT: from L3).
    pub len: u32,
    /// `skb->mark` when the event was taken.
    pub mark: u32,
    /// NAT events: nanoseconds spent in the NAT step, 0 when not measured.
    pub nat_ns: u64,
    pub fp: Fingerprint,
    /// The packet as seen at this point (NAT: after the step).
    pub tuple: Tuple,
    /// NAT events: the packet before the step; zero otherwise.
    pub orig: Tuple,
}
const _: () = assert!(size_of::<Event>() == 144);

/// The ring-buffer record of a tc event of an IPv4 packet: what [`Event`] holds for it, in 56
/// bytes instead of 144 (with the ring's 8-byte record header, one 64-byte cache line instead
/// of three). Its length tells it from an [`Event`] (see [`Record`]); user space turns it back
/// into the [`Event`] it stands for ([`TcEventV4::to_event`]): `hook` 0, `ct_info`
/// [`ct::NONE`], no `skb`, `netns`, `nat_ns` or `orig`, an IPv4 tuple.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcEventV4 {
    /// [`kind::TC_INGRESS`] or [`kind::TC_EGRESS`].
    pub kind: u8,
    /// Bits of [`flag`].
    pub flags: u8,
    /// IP protocol.
    pub proto: u8,
    pub _pad0: u8,
    pub ifindex: u32,
    pub ktime_ns: u64,
    pub len: u32,
    pub mark: u32,
    pub fp: Fingerprint,
    /// Addresses as they sit in the packet (network order).
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    /// Host order, as in [`Tuple`].
    pub sport: u16,
    pub dport: u16,
    pub _pad1: [u8; 4],
}
const _: () = assert!(size_of::<TcEventV4>() == 56);

impl TcEventV4 {
    /// The [`Event`] this record stands for.
    #[must_use]
    pub fn to_event(&self) -> Event {
        let mut saddr = [0; 16];
        saddr[..4].copy_from_slice(&self.saddr);
        let mut daddr = [0; 16];
        daddr[..4].copy_from_slice(&self.daddr);
        Event {
            kind: self.kind,
            hook: 0,
            ct_info: ct::NONE,
            flags: self.flags,
            ifindex: self.ifindex,
            ktime_ns: self.ktime_ns,
            len: self.len,
            mark: self.mark,
            fp: self.fp,
            tuple: Tuple {
                saddr,
                daddr,
                sport: self.sport,
                dport: self.dport,
                proto: self.proto,
                family: FAMILY_IPV4,
                _pad: [0; 2],
            },
            ..Event::default()
        }
    }
}

/// The ring-buffer record of a NAT event whose packet is IPv4 before and after the step: what
/// [`Event`] holds for it, in 120 bytes instead of 144. With the ring's 8-byte record header
/// that is two whole 64-byte cache lines: the records of both compact layouts are multiples of
/// a line, so that they keep each other line-aligned in the ring (an [`Event`], 152 bytes with
/// its header, leaves the next record 24 bytes into a line). Its length tells it from the
/// other layouts (see [`Record`]); user space turns it back into the [`Event`] it stands for
/// ([`NatEventV4::to_event`]): no `netns`, IPv4 `tuple` and `orig`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatEventV4 {
    /// [`kind::NAT`].
    pub kind: u8,
    /// The netfilter hook ([`hook`]).
    pub hook: u8,
    /// Conntrack `ctinfo` ([`ct`]).
    pub ct_info: u8,
    /// Bits of [`flag`].
    pub flags: u8,
    pub ifindex: u32,
    pub ktime_ns: u64,
    pub skb: u64,
    pub len: u32,
    pub mark: u32,
    pub nat_ns: u64,
    pub fp: Fingerprint,
    /// The packet after the step: addresses as they sit in the packet (network order), ports
    /// in host order, as in [`Tuple`].
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// The protocol of the packet before the step.
    pub orig_proto: u8,
    pub _pad0: [u8; 2],
    /// The packet before the step.
    pub orig_saddr: [u8; 4],
    pub orig_daddr: [u8; 4],
    pub orig_sport: u16,
    pub orig_dport: u16,
    pub _pad1: [u8; 4],
    /// Up to two whole cache lines with the ring's header (see above); always zero.
    pub _fill: [u64; 4],
}
const _: () = assert!(size_of::<NatEventV4>() == 120);

/// An IPv4 [`Tuple`] of the addresses and ports of a compact record.
fn tuple_v4(saddr: [u8; 4], daddr: [u8; 4], sport: u16, dport: u16, proto: u8) -> Tuple {
    let mut t = Tuple {
        sport,
        dport,
        proto,
        family: FAMILY_IPV4,
        ..Tuple::default()
    };
    t.saddr[..4].copy_from_slice(&saddr);
    t.daddr[..4].copy_from_slice(&daddr);
    t
}

impl NatEventV4 {
    /// The [`Event`] this record stands for.
    #[must_use]
    pub fn to_event(&self) -> Event {
        Event {
            kind: self.kind,
            hook: self.hook,
            ct_info: self.ct_info,
            flags: self.flags,
            ifindex: self.ifindex,
            ktime_ns: self.ktime_ns,
            skb: self.skb,
            netns: 0,
            len: self.len,
            mark: self.mark,
            nat_ns: self.nat_ns,
            fp: self.fp,
            tuple: tuple_v4(self.saddr, self.daddr, self.sport, self.dport, self.proto),
            orig: tuple_v4(
                self.orig_saddr,
                self.orig_daddr,
                self.orig_sport,
                self.orig_dport,
                self.orig_proto,
            ),
        }
    }
}

/// Why a ring-buffer record is not an event (user space counts these, see [`Record::decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRecord {
    /// Its length is none of [`Event`]'s, [`TcEventV4`]'s and [`NatEventV4`]'s.
    Length(usize),
    /// Its `kind` is not one the record's layout carries.
    Kind(u8),
}

/// The records the programs write into the ring buffer, told apart by their length.
pub enum Record {}

impl Record {
    /// The event a record holds. Records are exactly as long as their layout (the ring's
    /// record header gives the length the program reserved).
    ///
    /// # Errors
    /// [`BadRecord`] for a record of another length, or of a kind its layout cannot carry.
    pub fn decode(bytes: &[u8]) -> Result<Event, BadRecord> {
        match bytes.len() {
            n if n == size_of::<TcEventV4>() => {
                // SAFETY: `TcEventV4` is `repr(C)` plain data, valid for every bit pattern,
                // and the length was checked; `read_unaligned` copes with any alignment.
                let r = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<TcEventV4>()) };
                match r.kind {
                    kind::TC_INGRESS | kind::TC_EGRESS => Ok(r.to_event()),
                    k => Err(BadRecord::Kind(k)),
                }
            }
            n if n == size_of::<NatEventV4>() => {
                // SAFETY: as above, for `NatEventV4`.
                let r = unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<NatEventV4>()) };
                match r.kind {
                    kind::NAT => Ok(r.to_event()),
                    k => Err(BadRecord::Kind(k)),
                }
            }
            n if n == size_of::<Event>() => {
                let ev = Event::from_bytes(bytes).ok_or(BadRecord::Length(n))?;
                match ev.kind {
                    kind::TC_INGRESS | kind::TC_EGRESS | kind::NAT => Ok(ev),
                    k => Err(BadRecord::Kind(k)),
                }
            }
            n => Err(BadRecord::Length(n)),
        }
    }
}

/// Indexes into the per-CPU `COUNTERS` array.
pub mod counter {
    /// Packets the tc programs parsed: every packet but those the IPv4 fast filter found
    /// outside the filter in place, from their addresses (and for TCP and UDP their ports,
    /// against the followed flows' hashes) (`bpf_stats` counts every run).
    pub const SEEN: u32 = 0;
    /// Packets that matched the filter (tracked address or flow).
    pub const MATCHED: u32 = 1;
    /// Events written to the ring buffer.
    pub const EMITTED: u32 = 2;
    /// Events lost because the ring buffer was full.
    pub const RINGBUF_FULL: u32 = 3;
    /// Packets the parser could not read (not IP, truncated before L3, load failure).
    pub const UNPARSED: u32 = 4;
    /// NAT hook invocations seen.
    pub const NAT_SEEN: u32 = 5;
    /// Flows added to the tracked table after a NAT rewrite.
    pub const FLOWS_ADDED: u32 = 6;
    /// Pending NAT brackets not found at the closing hook (table evicted or lost).
    pub const NAT_UNPAIRED: u32 = 7;
    /// Entries the NAT programs added to the followed-flows table (one per flow direction);
    /// user space compares it with what the table still holds to count evictions.
    pub const FLOW_ENTRIES: u32 = 8;
    /// Number of counters.
    pub const COUNT: u32 = 9;
}

/// Filter modes (the `FILTER_MODE` global).
pub mod filter {
    /// Only packets of tracked addresses and flows.
    pub const TRACKED: u32 = 0;
    /// Every IP packet on the attached hooks.
    pub const ALL: u32 = 1;
}

/// Key of the `TRACKED_ADDRS` map: an address of a traced pod.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey {
    pub addr: [u8; 16],
    pub family: u8,
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<AddrKey>() == 20);

/// How many IPv4 addresses [`AddrSetV4`] holds.
pub const V4_SET_MAX: usize = 14;

/// The traced pods' IPv4 addresses for the programs' fast filter (the one entry of the
/// `TRACKED_V4` array), a copy of the IPv4 keys of `TRACKED_ADDRS` that user space writes after
/// every change to that map. Compared linearly: no hashing of a 20-byte key per address.
///
/// `exact == 1`: the IPv4 addresses of `TRACKED_ADDRS` are exactly `addrs[..len]`. Anything
/// else (the zero value before user space wrote it, more than [`V4_SET_MAX`] addresses, or an
/// update in progress) sends the programs to `TRACKED_ADDRS`. An update is three writes so that
/// a program reading it concurrently (array values are copied without a lock) never sees a
/// mix: `exact = 0` with the old addresses, then the new addresses with `exact = 0`, then the
/// same with `exact = 1`; each write changes either `exact` or the rest, never both.
///
/// `_lead` puts the fields the programs read (`exact`, `len`, the first 12 addresses) into one
/// cache line of the kernel's array: an array map's values start `sizeof(struct bpf_array)`
/// into a line-aligned allocation, 312 bytes (56 into a line) on 6.18 (its BTF), so a 64-byte
/// value starting there straddles two lines and every packet read both. With the 8 bytes
/// ahead of them the fields sit at 320..384, one line; on a layout that starts the value on a
/// line, only the 13th and 14th addresses move to a second one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddrSetV4 {
    /// Never read; always zero.
    pub _lead: u64,
    pub exact: u32,
    pub len: u32,
    /// Addresses as they sit in the packet (network order), read as a native `u32`.
    pub addrs: [u32; V4_SET_MAX],
}
const _: () = assert!(size_of::<AddrSetV4>() == 72);

impl AddrSetV4 {
    /// The set of `addrs` (octets), or the fall-back (`exact = 0`) when they do not fit.
    #[must_use]
    pub fn of(addrs: &[[u8; 4]]) -> Self {
        let mut set = Self::default();
        if addrs.len() > V4_SET_MAX {
            return set;
        }
        for (slot, a) in set.addrs.iter_mut().zip(addrs) {
            *slot = u32::from_ne_bytes(*a);
        }
        set.len = addrs.len() as u32;
        set.exact = 1;
        set
    }

    /// Whether `addr` (network order, as read from the packet) is among `addrs[..len]`; only
    /// meaningful once `exact == 1` was seen (checked once by the caller: a second read could
    /// see an update begin).
    #[inline(always)]
    #[must_use]
    pub fn contains(&self, addr: u32) -> bool {
        let mut i = 0;
        while i < V4_SET_MAX {
            if i as u32 >= self.len {
                break;
            }
            if self.addrs[i] == addr {
                return true;
            }
            i += 1;
        }
        false
    }
}

/// A packet as it entered a nat hook (per-CPU, one slot per hook), until the hook's exit
/// program pairs it with the packet as it left.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingNat {
    /// Kernel `struct sk_buff` address, to check the exit sees the same packet.
    pub skb: u64,
    /// `bpf_ktime_get_ns()` as the packet entered; 0: not timed, `u64::MAX`: skipped by its
    /// conntrack entry, the exit returns at once (see the netfilter programs).
    pub ktime_ns: u64,
    pub before: Tuple,
}
const _: () = assert!(size_of::<PendingNat>() == 56);

/// Kernel structure offsets the NAT programs need, read from the running kernel's BTF at load
/// time (the `OFFSETS` global). A zero offset for a field that cannot be at zero means unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `struct bpf_nf_ctx`, `skb` member.
    pub nf_ctx_skb: u32,
    /// `struct sk_buff`: `len`, `data`, `_nfct`, `mark`, `dev`.
    pub skb_len: u32,
    pub skb_data: u32,
    pub skb_nfct: u32,
    pub skb_mark: u32,
    pub skb_dev: u32,
    /// `struct net_device`, `ifindex`.
    pub dev_ifindex: u32,
    /// `struct sk_buff`, `data_len` (bytes in paged fragments: `len - data_len` is linear).
    pub skb_data_len: u32,
}
const _: () = assert!(size_of::<KernelOffsets>() == 32);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are `repr(C)`, `Copy`, made only of integers and byte arrays, and
    // have no implicit padding (sizes are asserted above).
    unsafe impl aya::Pod for super::Event {}
    unsafe impl aya::Pod for super::TcEventV4 {}
    unsafe impl aya::Pod for super::NatEventV4 {}
    unsafe impl aya::Pod for super::Tuple {}
    unsafe impl aya::Pod for super::AddrKey {}
    unsafe impl aya::Pod for super::AddrSetV4 {}
    unsafe impl aya::Pod for super::PendingNat {}
    unsafe impl aya::Pod for super::KernelOffsets {}
}

impl Event {
    /// Reads an event from ring-buffer bytes; `None` when the record is too short.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: `Event` is `repr(C)` plain data, valid for every bit pattern, and the length
        // was checked; `read_unaligned` copes with any alignment of the record.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// True for events of the reply direction of a conntrack entry.
    #[must_use]
    pub const fn is_reply(&self) -> bool {
        self.ct_info != ct::NONE && self.ct_info >= ct::IS_REPLY
    }
}

#[cfg(test)]
mod flow_slot_tests {
    use std::collections::HashSet;

    use super::*;

    const BITS: u32 = 17;

    /// A tuple's slot as the kernel programs find it: the first four bytes of each address.
    fn slot(t: &Tuple, bits: u32) -> u32 {
        let w = |a: &[u8; 16]| u32::from_ne_bytes([a[0], a[1], a[2], a[3]]);
        flow_slot_of(w(&t.saddr), w(&t.daddr), t.sport, t.dport, bits)
    }

    fn v4(s: [u8; 4], sport: u16, d: [u8; 4], dport: u16) -> Tuple {
        let mut t = Tuple {
            sport,
            dport,
            proto: PROTO_TCP,
            family: FAMILY_IPV4,
            ..Tuple::default()
        };
        t.saddr[..4].copy_from_slice(&s);
        t.daddr[..4].copy_from_slice(&d);
        t
    }

    /// Distinct slots among `n` tuples against what `n` uniformly random slots would fill.
    fn fill(tuples: &[Tuple]) -> f64 {
        let used: HashSet<u32> = tuples.iter().map(|t| slot(t, BITS)).collect();
        let slots = f64::from(1u32 << BITS);
        let n = tuples.len() as f64;
        let expected = slots * (1.0 - (-n / slots).exp());
        used.len() as f64 / expected
    }

    #[test]
    fn slots_are_in_range() {
        let t = v4([10, 0, 0, 1], 1, [203, 0, 113, 80], 2);
        for bits in [1, 8, 17, 32] {
            assert!(u64::from(slot(&t, bits)) < 1u64 << bits, "{bits}");
        }
    }

    #[test]
    fn masqueraded_flows_between_two_addresses_spread_by_port() {
        // The node's address to one outside host, sequential source ports: the case the
        // address hash (FLOW_ADDRS) cannot tell apart.
        let tuples: Vec<Tuple> = (0..8192u16)
            .map(|i| v4([10, 13, 77, 4], 32768 + i, [203, 0, 113, 80], 443))
            .collect();
        let f = fill(&tuples);
        assert!(f > 0.97, "{f}");
        // Their replies too, and both directions together.
        let replies: Vec<Tuple> = tuples.iter().map(Tuple::reversed).collect();
        assert!(fill(&replies) > 0.97, "{}", fill(&replies));
        let both: Vec<Tuple> = tuples.iter().chain(&replies).copied().collect();
        assert!(fill(&both) > 0.97, "{}", fill(&both));
    }

    #[test]
    fn many_clients_of_one_service_spread() {
        // Pods of a /16 to one ClusterIP port, and the backend's replies.
        let tuples: Vec<Tuple> = (0..16384u32)
            .map(|i| {
                let [_, _, c, d] = i.to_be_bytes();
                v4([10, 244, c, d], 40000, [10, 0, 160, 10], 53)
            })
            .collect();
        assert!(fill(&tuples) > 0.97, "{}", fill(&tuples));
    }

    #[test]
    fn a_flow_and_its_reverse_take_different_slots() {
        let differ = (0..1000u16)
            .map(|i| v4([10, 13, 77, 46], 40000 + i, [10, 0, 160, 10], 5201))
            .filter(|t| slot(t, BITS) != slot(&t.reversed(), BITS))
            .count();
        assert!(differ > 990, "{differ}");
    }
}

#[cfg(test)]
mod addr_set_tests {
    use super::*;

    #[test]
    fn exact_set_holds_its_addresses_only() {
        let a = [[10, 0, 0, 1], [192, 0, 2, 7]];
        let set = AddrSetV4::of(&a);
        assert_eq!((set.exact, set.len), (1, 2));
        assert!(set.contains(u32::from_ne_bytes([10, 0, 0, 1])));
        assert!(set.contains(u32::from_ne_bytes([192, 0, 2, 7])));
        assert!(!set.contains(u32::from_ne_bytes([10, 0, 0, 2])));
        // Unused slots are zero but not members.
        assert!(!set.contains(0));
    }

    #[test]
    fn empty_set_is_exact_and_holds_nothing() {
        let set = AddrSetV4::of(&[]);
        assert_eq!((set.exact, set.len), (1, 0));
        assert!(!set.contains(0));
    }

    #[test]
    fn too_many_addresses_fall_back_to_the_map() {
        let many: Vec<[u8; 4]> = (0..=V4_SET_MAX as u8).map(|i| [10, 0, 0, i]).collect();
        assert_eq!(AddrSetV4::of(&many).exact, 0);
        let fit = &many[..V4_SET_MAX];
        let set = AddrSetV4::of(fit);
        assert_eq!(set.exact, 1);
        assert!(fit.iter().all(|a| set.contains(u32::from_ne_bytes(*a))));
        // The zero value (before user space writes it) says "ask the map".
        assert_eq!(AddrSetV4::default().exact, 0);
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: plain `repr(C)` data without implicit padding, read as bytes.
        unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    fn compact() -> TcEventV4 {
        TcEventV4 {
            kind: kind::TC_EGRESS,
            flags: flag::TRUNCATED,
            proto: PROTO_UDP,
            ifindex: 0x0102_0304,
            ktime_ns: 0x1122_3344_5566_7788,
            len: 1514,
            mark: 0x4000,
            fp: Fingerprint {
                ip_id: 7,
                a: 8,
                b: 9,
                c: 10,
            },
            saddr: [10, 0, 0, 1],
            daddr: [192, 0, 2, 7],
            sport: 41234,
            dport: 53,
            ..TcEventV4::default()
        }
    }

    #[test]
    fn compact_record_decodes_into_the_event_it_stands_for() {
        let r = compact();
        let mut want = Event {
            kind: kind::TC_EGRESS,
            ct_info: ct::NONE,
            flags: flag::TRUNCATED,
            ifindex: 0x0102_0304,
            ktime_ns: 0x1122_3344_5566_7788,
            len: 1514,
            mark: 0x4000,
            fp: r.fp,
            ..Event::default()
        };
        want.tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        want.tuple.daddr[..4].copy_from_slice(&[192, 0, 2, 7]);
        want.tuple.sport = 41234;
        want.tuple.dport = 53;
        want.tuple.proto = PROTO_UDP;
        want.tuple.family = FAMILY_IPV4;
        assert_eq!(Record::decode(&bytes_of(&r)), Ok(want));
        // Any alignment of the record in the ring.
        let mut shifted = vec![0u8; 3];
        shifted.extend(bytes_of(&r));
        assert_eq!(Record::decode(&shifted[3..]), Ok(want));
        let ingress = TcEventV4 {
            kind: kind::TC_INGRESS,
            ..r
        };
        assert_eq!(
            Record::decode(&bytes_of(&ingress)).map(|e| e.kind),
            Ok(kind::TC_INGRESS)
        );
    }

    fn nat_compact() -> NatEventV4 {
        NatEventV4 {
            kind: kind::NAT,
            hook: hook::PRE_ROUTING,
            ct_info: ct::IS_REPLY,
            flags: flag::NAT_HOOK_TIMED | flag::TRUNCATED,
            ifindex: 0x0a0b_0c0d,
            ktime_ns: 0x0102_0304_0506_0708,
            skb: 0xffff_8880_1234_5678,
            len: 65_226,
            mark: 0x4000,
            nat_ns: 0x1_0000_2710,
            fp: Fingerprint {
                ip_id: 11,
                a: 12,
                b: 13,
                c: 14,
            },
            saddr: [10, 0, 0, 1],
            daddr: [10, 244, 1, 9],
            sport: 41234,
            dport: 8080,
            proto: PROTO_TCP,
            orig_proto: PROTO_UDP,
            orig_saddr: [10, 0, 0, 1],
            orig_daddr: [10, 0, 160, 10],
            orig_sport: 41235,
            orig_dport: 80,
            ..NatEventV4::default()
        }
    }

    #[test]
    fn compact_nat_record_decodes_into_the_event_it_stands_for() {
        let r = nat_compact();
        let mut want = Event {
            kind: kind::NAT,
            hook: hook::PRE_ROUTING,
            ct_info: ct::IS_REPLY,
            flags: flag::NAT_HOOK_TIMED | flag::TRUNCATED,
            ifindex: 0x0a0b_0c0d,
            ktime_ns: 0x0102_0304_0506_0708,
            skb: 0xffff_8880_1234_5678,
            len: 65_226,
            mark: 0x4000,
            nat_ns: 0x1_0000_2710,
            fp: r.fp,
            ..Event::default()
        };
        want.tuple.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        want.tuple.daddr[..4].copy_from_slice(&[10, 244, 1, 9]);
        (want.tuple.sport, want.tuple.dport) = (41234, 8080);
        want.tuple.proto = PROTO_TCP;
        want.tuple.family = FAMILY_IPV4;
        want.orig.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        want.orig.daddr[..4].copy_from_slice(&[10, 0, 160, 10]);
        (want.orig.sport, want.orig.dport) = (41235, 80);
        want.orig.proto = PROTO_UDP;
        want.orig.family = FAMILY_IPV4;
        assert_eq!(Record::decode(&bytes_of(&r)), Ok(want));
        // Any alignment of the record in the ring.
        for shift in 1..8 {
            let mut shifted = vec![0u8; shift];
            shifted.extend(bytes_of(&r));
            assert_eq!(Record::decode(&shifted[shift..]), Ok(want));
        }
        // With the ring's 8-byte header: two whole cache lines, as a compact tc record is one.
        assert_eq!((8 + size_of::<NatEventV4>()) % 64, 0);
        assert_eq!((8 + size_of::<TcEventV4>()) % 64, 0);
    }

    #[test]
    fn compact_nat_records_of_other_kinds_are_bad() {
        for k in [0, kind::TC_INGRESS, kind::TC_EGRESS, 4, 0xff] {
            let r = NatEventV4 {
                kind: k,
                ..nat_compact()
            };
            assert_eq!(Record::decode(&bytes_of(&r)), Err(BadRecord::Kind(k)));
        }
    }

    #[test]
    fn full_record_round_trips() {
        for k in [kind::TC_INGRESS, kind::TC_EGRESS, kind::NAT] {
            let mut ev = Event {
                kind: k,
                hook: hook::POST_ROUTING,
                ct_info: ct::NEW,
                skb: 0xffff_8880_0000_1000,
                nat_ns: 2710,
                ..Event::default()
            };
            ev.tuple.saddr = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            ev.tuple.family = FAMILY_IPV6;
            ev.orig.family = FAMILY_IPV4;
            assert_eq!(Record::decode(&bytes_of(&ev)), Ok(ev));
        }
    }

    #[test]
    fn records_of_other_lengths_are_bad_not_events() {
        let full = bytes_of(&Event {
            kind: kind::NAT,
            ..Event::default()
        });
        let mut long = full.clone();
        long.extend([0; 8]);
        for n in
            (0..full.len()).filter(|&n| n != size_of::<TcEventV4>() && n != size_of::<NatEventV4>())
        {
            assert_eq!(Record::decode(&full[..n]), Err(BadRecord::Length(n)));
        }
        assert_eq!(
            Record::decode(&long),
            Err(BadRecord::Length(full.len() + 8))
        );
    }

    #[test]
    fn unknown_kinds_are_bad_not_events() {
        // A compact record carries tc events only; a NAT kind there is as wrong as kind 0.
        for k in [0, kind::NAT, 4, 0xff] {
            let r = TcEventV4 {
                kind: k,
                ..compact()
            };
            assert_eq!(Record::decode(&bytes_of(&r)), Err(BadRecord::Kind(k)));
        }
        for k in [0, 4, 0xff] {
            let ev = Event {
                kind: k,
                ..Event::default()
            };
            assert_eq!(Record::decode(&bytes_of(&ev)), Err(BadRecord::Kind(k)));
        }
    }
}
