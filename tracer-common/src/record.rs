//! The records the kernel programs write into the ring buffer: one [`RecordHeader`] at the
//! start of every record, then the payload of its kind ([`TcRecordV4`], [`TcRecord`],
//! [`NatRecordV4`], [`NatRecord`], [`DropRecordV4`], [`DropRecord`], [`SiteRecord`], and with `-w` [`TcFrameRecord`]), and the values of the header's fields ([`kind`], [`hook`],
//! [`flag`], [`ct`]). User space decodes them with [`crate::decode`].
//!
//! Every layout is `repr(C)`, 8-aligned, a multiple of 8 bytes and free of implicit padding.
//! The IPv4 layouts carry no fill: most records travel in batches ([`crate::batch`]), packed
//! back to back, where every byte is one more to zero, copy and read.

use core::mem::{align_of, size_of};

use crate::{FAMILY_IPV4, Fingerprint, Tuple};

/// Kinds of record ([`RecordHeader::kind`]).
pub mod kind {
    /// tc ingress of an attached interface.
    pub const TC_INGRESS: u8 = 1;
    /// tc egress of an attached interface.
    pub const TC_EGRESS: u8 = 2;
    /// A NAT step: the packet before and after it.
    pub const NAT: u8 = 3;
    /// The kernel freed the packet as a drop (`skb:kfree_skb`).
    pub const DROP: u8 = 4;
    /// The kernel's name for a drop location ([`crate::SiteRecord`]), written before the
    /// first drop record of that location on a CPU.
    pub const SITE: u8 = 5;
    /// Several records of one CPU in the order its programs wrote them
    /// ([`crate::batch`]): the header's `ifindex` holds how many follow it.
    pub const BATCH: u8 = 6;
}

/// Netfilter hook numbers (`enum nf_inet_hooks`, include/uapi/linux/netfilter.h, v6.1).
pub mod hook {
    pub const PRE_ROUTING: u8 = 0;
    pub const LOCAL_IN: u8 = 1;
    pub const FORWARD: u8 = 2;
    pub const LOCAL_OUT: u8 = 3;
    pub const POST_ROUTING: u8 = 4;
}

/// Bits of [`RecordHeader::flags`].
pub mod flag {
    /// IPv4 fragment (first or later); later fragments carry no ports.
    pub const FRAGMENT: u8 = 1;
    /// The L4 header did not fit in the captured bytes; ports and fingerprint are partial.
    pub const TRUNCATED: u8 = 2;
    /// NAT record whose latency covers the whole nat hook (rule traversal and rewrite).
    pub const NAT_HOOK_TIMED: u8 = 4;
    /// NAT record whose latency was not measured.
    pub const NAT_UNTIMED: u8 = 8;
    /// tc ingress record of a connection's first packet, which tc ingress noted without
    /// knowing it traced and the NAT program emitted when DNAT made it a traced pod's
    /// ([`crate::parse::first`]): the hook saw the packet at or before `ktime_ns` (the start of
    /// the NAT step), not at it.
    pub const TC_CLAIMED: u8 = 16;
    /// The record has its kind's wide layout (full [`crate::Tuple`]s: IPv6, or IPv4 on one
    /// side of a NAT step only) rather than the IPv4 one. A layout bit, not a packet property:
    /// the decoder takes it out of the flags it hands on.
    pub const WIDE: u8 = 32;
    /// The tc record carries the frame's first bytes ([`crate::TcFrameRecord`], only with
    /// `-w`). A layout bit, like [`WIDE`], which it comes with.
    pub const FRAME: u8 = 64;
}

/// Conntrack `ctinfo` values (`enum ip_conntrack_info`, include/uapi/linux/netfilter/
/// `nf_conntrack_common.h`, v6.1); values `>= IS_REPLY` belong to the reply direction.
pub mod ct {
    pub const ESTABLISHED: u8 = 0;
    pub const RELATED: u8 = 1;
    pub const NEW: u8 = 2;
    pub const IS_REPLY: u8 = 3;
    /// No conntrack entry attached to the packet.
    pub const NONE: u8 = 0xff;
}

/// The start of every record: what it is, where and when it was taken.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// One of [`kind`]; with [`flag::WIDE`] it tells the record's layout and length.
    pub kind: u8,
    /// Bits of [`flag`].
    pub flags: u8,
    /// NAT records: the netfilter hook ([`hook`]); 0 otherwise.
    pub hook: u8,
    /// NAT records: conntrack `ctinfo` ([`ct`]); 0 otherwise.
    pub ct_info: u8,
    /// Interface index (in the namespace the program is attached in), 0 when unknown.
    pub ifindex: u32,
    /// `bpf_ktime_get_ns()` when the record was taken (NAT: after the step).
    pub ktime_ns: u64,
}
const _: () = assert!(size_of::<RecordHeader>() == 16);

/// An IPv4 packet's addresses (network order, as they sit in the packet), ports (host order)
/// and protocol: a [`Tuple`] of family [`FAMILY_IPV4`] in 16 bytes instead of 40.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TupleV4 {
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a ring record; the layout is the kernel programs'"
    )]
    pub _pad: [u8; 3],
}
const _: () = assert!(size_of::<TupleV4>() == 16);

impl TupleV4 {
    /// Writes the IPv4 part of `t` into `self`, every field but the padding: for records,
    /// which are zeroed first. Writing the padding too made the BPF target call its byte-loop
    /// `memset` for three bytes on every emitted packet.
    #[expect(
        clippy::inline_always,
        reason = "eBPF: the verifier needs the call inlined"
    )]
    #[inline(always)]
    pub fn set(&mut self, t: &Tuple) {
        self.saddr = [t.saddr[0], t.saddr[1], t.saddr[2], t.saddr[3]];
        self.daddr = [t.daddr[0], t.daddr[1], t.daddr[2], t.daddr[3]];
        self.sport = t.sport;
        self.dport = t.dport;
        self.proto = t.proto;
    }

    /// The [`Tuple`] this stands for.
    #[must_use]
    pub fn tuple(&self) -> Tuple {
        let mut t = Tuple {
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            family: FAMILY_IPV4,
            ..Tuple::default()
        };
        t.saddr[..4].copy_from_slice(&self.saddr);
        t.daddr[..4].copy_from_slice(&self.daddr);
        t
    }
}

/// A tc record of an IPv4 packet ([`kind::TC_INGRESS`] or [`kind::TC_EGRESS`], no
/// [`flag::WIDE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcRecordV4 {
    pub head: RecordHeader,
    pub fp: Fingerprint,
    pub tuple: TupleV4,
}
const _: () = assert!(size_of::<TcRecordV4>() == 48);

/// A tc record of any other packet (IPv6): [`flag::WIDE`] set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcRecord {
    pub head: RecordHeader,
    pub fp: Fingerprint,
    pub tuple: Tuple,
}
const _: () = assert!(size_of::<TcRecord>() == 72);

/// A NAT record whose packet is IPv4 before and after the step ([`kind::NAT`], no
/// [`flag::WIDE`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatRecordV4 {
    pub head: RecordHeader,
    /// Nanoseconds spent in the NAT step (see [`flag::NAT_UNTIMED`]).
    pub nat_ns: u64,
    /// The packet after the step (NAT does not change it).
    pub fp: Fingerprint,
    /// The packet after the step.
    pub after: TupleV4,
    /// The packet before the step.
    pub before: TupleV4,
}
const _: () = assert!(size_of::<NatRecordV4>() == 72);

/// A NAT record of any other packet: [`flag::WIDE`] set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatRecord {
    pub head: RecordHeader,
    pub nat_ns: u64,
    pub fp: Fingerprint,
    pub after: Tuple,
    pub before: Tuple,
}
const _: () = assert!(size_of::<NatRecord>() == 120);

/// Most bytes of a frame a [`TcFrameRecord`] holds (`--snaplen`'s upper bound).
pub const FRAME_MAX: usize = 256;

/// A tc record with the frame's first bytes as the hook saw them, written instead of the
/// others only when the capture is on (`-w`): [`flag::FRAME`] and [`flag::WIDE`] set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcFrameRecord {
    pub head: RecordHeader,
    pub fp: Fingerprint,
    pub tuple: Tuple,
    /// The frame's length at the hook (`skb->len`).
    pub orig_len: u32,
    /// How many of `bytes` hold the frame (0 when the copy failed).
    pub cap_len: u32,
    pub bytes: [u8; FRAME_MAX],
}
const _: () = assert!(size_of::<TcFrameRecord>() == 336);

const _: () = assert!(
    align_of::<TcFrameRecord>() == 8
        && align_of::<TcRecordV4>() == 8
        && align_of::<TcRecord>() == 8
        && align_of::<NatRecordV4>() == 8
        && align_of::<NatRecord>() == 8
);

/// A drop record of an IPv4 packet ([`kind::DROP`], no [`flag::WIDE`]): the packet the kernel
/// freed as dropped (`skb:kfree_skb`), why and where. The header's `ifindex` is the packet's
/// device at the drop (0 when it had none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropRecordV4 {
    pub head: RecordHeader,
    pub fp: Fingerprint,
    pub tuple: TupleV4,
    /// The tracepoint's `location`: the kernel address the free was called from.
    pub location: u64,
    /// The kernel's `enum skb_drop_reason` value (its names come from the kernel's BTF);
    /// [`DROP_REASON_UNKNOWN`] on kernels whose tracepoint has no reason (before 5.17).
    pub reason: u32,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a ring record; the layout is the kernel programs'"
    )]
    pub _pad: u32,
}
const _: () = assert!(size_of::<DropRecordV4>() == 64);

/// A drop record of any other packet (IPv6): [`flag::WIDE`] set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropRecord {
    pub head: RecordHeader,
    pub fp: Fingerprint,
    pub tuple: Tuple,
    pub location: u64,
    pub reason: u32,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a ring record; the layout is the kernel programs'"
    )]
    pub _pad: u32,
}
const _: () = assert!(size_of::<DropRecord>() == 88);
const _: () = assert!(align_of::<DropRecordV4>() == 8 && align_of::<DropRecord>() == 8);

/// [`DropRecordV4::reason`] when the kernel's tracepoint gives none (before Linux 5.17): user
/// space says `NOT_SPECIFIED`.
pub const DROP_REASON_UNKNOWN: u32 = u32::MAX;

/// Bytes of [`SiteRecord::name`]: the record is 120 bytes, two cache lines with the ring's
/// header. The kernel's `%ps` of an address is the function's name (up to `KSYM_NAME_LEN` - 1,
/// 511 bytes from 6.1, 127 before) and, in a module, ` [module]` (up to 55 more); the drop
/// sites' names are far shorter (`nft_do_chain [nf_tables]`, 24), and a longer one is said as
/// cut ([`SiteRecord::len`]) and named by user space's own lookup instead.
pub const SITE_NAME_MAX: usize = 88;

/// Slots of the drop program's per-CPU cache of named locations ([`site_slot`]).
pub const SITE_SLOTS: u32 = 64;

/// The slot of the per-CPU cache of named locations that `location` takes (a multiplicative
/// hash's top six bits: the call sites of one function differ in their low bits).
#[must_use]
#[expect(
    clippy::inline_always,
    reason = "eBPF: the verifier needs the call inlined"
)]
#[inline(always)]
pub const fn site_slot(location: u64) -> u32 {
    (location.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as u32
}
const _: () = assert!(SITE_SLOTS == 1 << (64 - 58));

/// The kernel's name for a drop location ([`kind::SITE`]): what `bpf_snprintf(name,
/// SITE_NAME_MAX, "%ps", location)` wrote, on kernels with that helper (5.13+). The drop
/// program writes it before the drop record of a location it has not named yet on this CPU,
/// so user space reads it first.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRecord {
    pub head: RecordHeader,
    /// The tracepoint's `location`, as in [`DropRecordV4::location`].
    pub location: u64,
    /// What `bpf_snprintf` returned: the name's length with its terminating NUL; more than
    /// [`SITE_NAME_MAX`] when the name was cut (`name` then holds its first
    /// `SITE_NAME_MAX - 1` bytes), negative when the helper failed.
    pub len: i32,
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a ring record; the layout is the kernel programs'"
    )]
    pub _pad: u32,
    /// `func` or `func [module]`, NUL-terminated; `0x…` when the kernel has no symbol there.
    pub name: [u8; SITE_NAME_MAX],
}
const _: () = assert!(size_of::<SiteRecord>() == 120 && align_of::<SiteRecord>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_sites_of_one_function_spread_over_the_site_slots() {
        // Call sites a few bytes apart in one function, as the kernel's drop locations are.
        let base = 0xffff_ffff_81a0_0000_u64;
        let slots: std::collections::HashSet<u32> =
            (0..32).map(|i| site_slot(base + i * 13)).collect();
        assert!(slots.iter().all(|&s| s < SITE_SLOTS));
        assert!(slots.len() >= 20, "{} slots for 32 sites", slots.len());
    }
}
