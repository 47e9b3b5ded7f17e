//! A NAT step as a pair of programs saw it, and its ring record.
//!
//! Contract: [`emit_step`] writes one record per reported step: [`NatRecordV4`] when the packet
//! is IPv4 before and after the step, else the wide [`NatRecord`]; both carry the packet after
//! NAT and its tuple before.

use tracer_common::{FAMILY_IPV4, NatRecord, NatRecordV4, RecordHeader, Tuple, flag, kind, parse};

use crate::emit::emit;

/// One packet before and after a NAT step, as a pair of programs saw it.
pub struct Rewrite<'a> {
    /// Kernel `struct sk_buff` address (to claim tc ingress's note, [`crate::first::claim`]).
    pub skb: u64,
    /// The netfilter hook whose manipulation this was ([`tracer_common::hook`]): the collector derives DNAT
    /// or SNAT from it and the conntrack direction.
    pub hook: u8,
    /// [`tracer_common::flag`] bits saying how `nat_ns` was measured.
    pub flags: u8,
    /// `bpf_ktime_get_ns()` after the step.
    pub now: u64,
    pub nat_ns: u64,
    pub before: &'a Tuple,
    pub after: &'a parse::Parsed,
}

/// What a record says about the packet besides its headers, read only when it is emitted.
pub struct Meta {
    /// [`tracer_common::ct`] value.
    pub ct_info: u8,
    pub ifindex: u32,
}

/// Writes the header every NAT record layout shares from a step and its [`Meta`]; `wide` is
/// [`flag::WIDE`] or 0.
#[inline(always)]
fn nat_header(r: &Rewrite<'_>, m: &Meta, wide: u8) -> RecordHeader {
    RecordHeader {
        kind: kind::NAT,
        flags: r.after.flags | r.flags | wide,
        hook: r.hook,
        ct_info: m.ct_info,
        ifindex: m.ifindex,
        ktime_ns: r.now,
    }
}

/// The record of a step: [`NatRecordV4`] when the packet is IPv4 before and after it, else
/// the wide [`NatRecord`].
#[inline(always)]
pub fn emit_step(r: &Rewrite<'_>, m: &Meta) {
    if r.before.family == FAMILY_IPV4 && r.after.tuple.family == FAMILY_IPV4 {
        emit(|ev: &mut NatRecordV4| {
            ev.head = nat_header(r, m, 0);
            ev.nat_ns = r.nat_ns;
            ev.fp = r.after.fp;
            ev.after.set(&r.after.tuple);
            ev.before.set(r.before);
        });
    } else {
        emit(|ev: &mut NatRecord| {
            ev.head = nat_header(r, m, flag::WIDE);
            ev.nat_ns = r.nat_ns;
            ev.fp = r.after.fp;
            ev.after = r.after.tuple;
            ev.before = *r.before;
        });
    }
}
