//! A NAT step as a pair of programs saw it, and its ring record.
//!
//! Contract: [`emit_step`] writes one record per reported step: the compact [`NatEventV4`]
//! when the packet is IPv4 before and after the step, else the full [`Event`]; both carry the
//! packet after NAT and its tuple before.

use tracer_common::{Event, FAMILY_IPV4, NatEventV4, Tuple, kind, parse};

use crate::emit::emit;

/// One packet before and after a NAT step, as a pair of programs saw it.
pub struct Rewrite<'a> {
    /// Kernel `struct sk_buff` address.
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

/// What an event says about the packet besides its headers, read only when it is emitted.
pub struct Meta {
    /// [`tracer_common::ct`] value.
    pub ct_info: u8,
    pub ifindex: u32,
    pub len: u32,
    pub mark: u32,
}

/// Writes the members every NAT record layout shares ([`NatEventV4`], [`Event`]) from a step
/// and its [`Meta`].
macro_rules! nat_header {
    ($ev:ident, $r:ident, $m:ident) => {
        $ev.kind = kind::NAT;
        $ev.hook = $r.hook;
        $ev.ct_info = $m.ct_info;
        $ev.flags = $r.after.flags | $r.flags;
        $ev.ifindex = $m.ifindex;
        $ev.ktime_ns = $r.now;
        $ev.skb = $r.skb;
        $ev.len = $m.len;
        $ev.mark = $m.mark;
        $ev.nat_ns = $r.nat_ns;
        $ev.fp = $r.after.fp;
    };
}

/// The event of a step: the compact record when the packet is IPv4 before and after it, else
/// the full [`Event`].
#[inline(always)]
pub fn emit_step(r: &Rewrite<'_>, m: &Meta) {
    if r.before.family == FAMILY_IPV4 && r.after.tuple.family == FAMILY_IPV4 {
        emit_v4(r, m);
    } else {
        emit_event(r, m);
    }
}

/// The event of a step whose packet is IPv4 before and after it, as the compact record.
#[inline(always)]
fn emit_v4(r: &Rewrite<'_>, m: &Meta) {
    let (b, a) = (r.before, &r.after.tuple);
    emit(|ev: &mut NatEventV4| {
        nat_header!(ev, r, m);
        ev.saddr = [a.saddr[0], a.saddr[1], a.saddr[2], a.saddr[3]];
        ev.daddr = [a.daddr[0], a.daddr[1], a.daddr[2], a.daddr[3]];
        ev.sport = a.sport;
        ev.dport = a.dport;
        ev.proto = a.proto;
        ev.orig_proto = b.proto;
        ev.orig_saddr = [b.saddr[0], b.saddr[1], b.saddr[2], b.saddr[3]];
        ev.orig_daddr = [b.daddr[0], b.daddr[1], b.daddr[2], b.daddr[3]];
        ev.orig_sport = b.sport;
        ev.orig_dport = b.dport;
    });
}

/// The event of a step as the full [`Event`].
#[inline(always)]
fn emit_event(r: &Rewrite<'_>, m: &Meta) {
    emit(|ev: &mut Event| {
        nat_header!(ev, r, m);
        ev.tuple = r.after.tuple;
        ev.orig = *r.before;
    });
}
