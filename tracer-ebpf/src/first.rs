//! The first packet of a connection from outside the node: noted at tc ingress, claimed at DNAT.
//!
//! tc ingress lets a packet pass that has no tracked address and is no followed flow. When
//! DNAT then makes it a traced pod's (a LoadBalancer VIP, a NodePort, any DNAT to the pod),
//! the flow is followed from that NAT step on, but the packet's own ingress step is past. So
//! tc ingress notes, per CPU, the last such packet that may open a connection
//! ([`first_key_fast`]: a TCP SYN without ACK, UDP, an ICMP echo request) with what its step
//! needs, and the NAT program that reports its DNAT claims the note and emits the ingress step
//! ([`claim`]). A packet crosses tc ingress and the PRE_ROUTING nat hook in one softirq on one
//! CPU (through a bridge too: `br_pass_frame_up` hands the same `skb` on at once), so the last
//! note is the packet's unless another tc ingress ran in between, and the claim checks the
//! `skb` address, the tuple and the IP id. No clock is read when noting: the claimed step
//! carries the NAT step's start as its time, flagged [`flag::TC_CLAIMED`] (at or before).
//!
//! Not noted: frames [`first_key_fast`] does not take (IPv6, VLAN tags, IP options, fragments,
//! frames shorter than `FAST_ETH_BYTES`); their first packet's journey still starts at DNAT.

use aya_ebpf::{macros::map, maps::PerCpuArray, programs::TcContext};
use tracer_common::{
    FAMILY_IPV4, TcRecordV4, Tuple, flag, hook, kind,
    parse::{
        FAST_ETH_BYTES, Parsed,
        first::{FirstKey, first_key_fast},
    },
};

use crate::emit::emit;

/// A frame tc ingress let pass that may be a connection's first packet.
#[repr(C)]
pub struct FirstSeen {
    /// `struct sk_buff` address; 0: none (claimed).
    skb: u64,
    key: FirstKey,
    ifindex: u32,
    _pad: u32,
}

#[map]
static FIRST_SEEN: PerCpuArray<FirstSeen> = PerCpuArray::with_max_entries(1, 0);

/// Notes the frame tc ingress is letting pass when it may be a connection's first packet. The
/// first hook that saw it keeps its note: a packet that crosses tc ingress twice (the uplink,
/// then the bridge it is a port of) is not noted again.
#[inline(always)]
pub fn note(ctx: &TcContext) {
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + FAST_ETH_BYTES > end {
        return;
    }
    // SAFETY: the FAST_ETH_BYTES bytes at `data` are within the packet's linear data (checked
    // above; the verifier checks it again); a byte array has no alignment requirement.
    let head = unsafe { &*(data as *const [u8; FAST_ETH_BYTES]) };
    let len = ctx.len();
    let Some(key) = first_key_fast(head, len) else {
        return;
    };
    let Some(slot) = FIRST_SEEN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot; a program nesting on this CPU can only overwrite it, which the
    // claim's checks of the whole key catch.
    let slot = unsafe { &mut *slot };
    let skb = ctx.skb.skb as u64;
    if slot.skb == skb && slot.key == key {
        return;
    }
    // SAFETY: reading a field of the program's own context.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    slot.skb = skb;
    slot.key = key;
    slot.ifindex = ifindex;
}

/// Emits the ingress step of the packet `skb` a reported NAT step in hook `hook_num` made a
/// traced pod's, when the step is PRE_ROUTING's (DNAT) and tc ingress noted the packet on this
/// CPU ([`note`]), before the NAT step's own event. `before` is the packet's tuple before NAT,
/// `after` its parse after NAT and `start` the NAT step's start: the claimed step's time,
/// flagged [`flag::TC_CLAIMED`]; its fingerprint and flags are the NAT step's (NAT does not
/// change them).
#[inline(always)]
pub fn claim(skb: u64, hook_num: u8, before: &Tuple, after: &Parsed, start: u64) {
    if hook_num != hook::PRE_ROUTING || before.family != FAMILY_IPV4 {
        return;
    }
    let Some(slot) = FIRST_SEEN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot.
    let slot = unsafe { &mut *slot };
    if slot.skb != skb {
        return;
    }
    slot.skb = 0;
    if !slot.key.is(before, after.fp.ip_id) {
        return;
    }
    let k = &slot.key;
    emit(|r: &mut TcRecordV4| {
        r.head.kind = kind::TC_INGRESS;
        r.head.flags = (after.flags & (flag::FRAGMENT | flag::TRUNCATED)) | flag::TC_CLAIMED;
        r.head.ifindex = slot.ifindex;
        r.head.ktime_ns = start;
        r.fp = after.fp;
        // Field by field: the record is zeroed, and writing the padding too costs a `memset`
        // call (see `TupleV4::set`).
        r.tuple.saddr = k.saddr;
        r.tuple.daddr = k.daddr;
        r.tuple.sport = k.sport;
        r.tuple.dport = k.dport;
        r.tuple.proto = k.proto;
    });
}
