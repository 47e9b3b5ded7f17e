//! The records the kernel programs write into the ring buffer: a full [`Event`] or the compact
//! IPv4 forms [`TcEventV4`] and [`NatEventV4`], told apart by length and widened back into an
//! [`Event`] by [`Record::decode`].

use core::mem::size_of;

use crate::{Event, FAMILY_IPV4, Fingerprint, Tuple, ct, kind};

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
    /// Bits of [`crate::flag`].
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
    /// The netfilter hook ([`crate::hook`]).
    pub hook: u8,
    /// Conntrack `ctinfo` ([`ct`]).
    pub ct_info: u8,
    /// Bits of [`crate::flag`].
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

#[cfg(test)]
mod tests;
