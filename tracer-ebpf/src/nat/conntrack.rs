//! What a packet's conntrack entry tells the netfilter enter program before it reads the
//! packet: skip it, time it, or let the packet decide ([`conntrack`]), and whether a packet
//! the entry could not decide is worth a clock read ([`worth_timing`]).
//!
//! Contract: no false negatives: a packet skipped here is one NAT cannot make reported (see
//! [`crate::nat::report::reported`]); some packets are read and timed for nothing. The entry
//! is read through `bpf_rdonly_cast` at offsets the loader patches ([`crate::nat::btf`]);
//! where vmlinux BTF has no `struct nf_conn` every such load is 0 and the packet decides.

use tracer_common::{FAMILY_IPV4, PROTO_TCP, PROTO_UDP, Tuple, ct, hook, nf_patch};

use crate::{
    filter::{v4_set, v4_tracked},
    followed::{addr_maybe_followed, flows_present, v4_maybe_followed, word4},
    maps::trace_all,
    nat::btf::{load, rdonly_cast},
};

/// `NFCT_INFOMASK`: the low bits of `skb->_nfct` hold `ctinfo`.
pub const NFCT_INFOMASK: u64 = 7;

/// What the packet's conntrack entry says about it, before the packet is read.
pub enum Conntrack {
    /// NAT cannot make this packet a reported one: skip it.
    Skip,
    /// Read the packet and time the step.
    Time,
    /// The entry cannot answer: the packet decides ([`worth_timing`]).
    Packet,
}

/// `IPS_SRC_NAT` and `IPS_DST_NAT` (`enum ip_conntrack_status`,
/// include/uapi/linux/netfilter/nf_conntrack_common.h, v6.4): the entry's binding changes the
/// source (destination) of its original direction.
const IPS_SRC_NAT: u64 = 1 << 4;
const IPS_DST_NAT: u64 = 1 << 5;
/// `IPS_SRC_NAT_DONE` and `IPS_DST_NAT_DONE` (same enum): the entry's NAT binding for that
/// manipulation is set up.
const IPS_SRC_NAT_DONE: u64 = 1 << 7;
const IPS_DST_NAT_DONE: u64 = 1 << 8;
/// The hooks whose NAT manipulation is the destination's, one bit per [`hook`] number.
const DST_HOOKS: u64 = (1 << hook::PRE_ROUTING) | (1 << hook::LOCAL_OUT);
const _: () = assert!(
    IPS_DST_NAT == IPS_SRC_NAT << 1
        && IPS_DST_NAT_DONE == IPS_SRC_NAT_DONE << 1
        && CT_ESTABLISHED == 0
        && CT_ESTABLISHED_REPLY == 3
        && ct::NEW == 2
        && CT_RELATED == 1
        && CT_RELATED_REPLY == 4
);
/// `AF_INET`, as `nf_conntrack_man.l3num` holds it.
const AF_INET: u16 = 2;
/// `IP_CT_RELATED` and `IP_CT_RELATED_REPLY`.
const CT_RELATED: u64 = ct::RELATED as u64;
const CT_RELATED_REPLY: u64 = (ct::RELATED + ct::IS_REPLY) as u64;
/// `IP_CT_ESTABLISHED` and `IP_CT_ESTABLISHED_REPLY` (`enum ip_conntrack_info`).
const CT_ESTABLISHED: u64 = ct::ESTABLISHED as u64;
const CT_ESTABLISHED_REPLY: u64 = ct::IS_REPLY as u64;

/// Decides from the packet's conntrack entry (`skb->_nfct`), without reading the packet:
///
/// - No entry (`_nfct` 0, or `IP_CT_UNTRACKED`, whose pointer part is 0): `nf_nat_inet_fn`
///   returns at once, NAT cannot change the packet, so there is nothing to pair: skip.
/// - An entry whose binding for this hook's manipulation is set up (`IPS_DST_NAT_DONE` in
///   PRE_ROUTING and LOCAL_OUT, `IPS_SRC_NAT_DONE` in POST_ROUTING and LOCAL_IN), for a packet
///   that is not RELATED (an ICMP error, whose outer addresses need not be the entry's): no
///   rule runs (`nf_nat_inet_fn`, net/netfilter/nf_nat_core.c, v6.4), `nf_nat_packet` only
///   applies the binding. It changes the packet only when the entry's status has the bit for
///   this manipulation and direction (`IPS_DST_NAT` for a destination manipulation of the
///   original direction, `IPS_SRC_NAT` of the reply direction, and the other way round for a
///   source manipulation). Without it the packet leaves NAT as it came, which is never
///   reported: skip.
/// - Such an IPv4 entry whose binding changes the packet: [`by_addresses`].
/// - Anything else (the first packet of a connection, RELATED, IPv6, a kernel whose vmlinux
///   BTF has no `struct nf_conn`, where the loader makes every `CT_*` load 0): the packet
///   decides.
#[inline(always)]
pub fn conntrack(nfct: u64, hook_num: u8) -> Conntrack {
    let ct = nfct & !NFCT_INFOMASK;
    if ct == 0 {
        return Conntrack::Skip;
    }
    let ctinfo = nfct & NFCT_INFOMASK;
    if ctinfo == CT_RELATED || ctinfo == CT_RELATED_REPLY {
        return Conntrack::Packet;
    }
    // Without branches (the hook is read at run time, and every branch on it would be one
    // more path for the verifier): `dst` is 1 in a destination-manipulating hook, `reply` 1
    // for a packet of the reply direction (`ctinfo` ESTABLISHED_REPLY or NEW_REPLY, 3 or 5;
    // ESTABLISHED and NEW are 0 and 2, RELATED ones returned above), and each `IPS_DST_*` bit
    // is the `IPS_SRC_*` bit shifted by one.
    let dst = (DST_HOOKS >> (hook_num & 7)) & 1;
    let reply = ((ctinfo + 5) >> 3) & 1;
    let done = IPS_SRC_NAT_DONE << dst;
    // The reply direction is rewritten by the other half of the binding.
    let changes = IPS_SRC_NAT << (dst ^ reply);
    let c = rdonly_cast(ct, nf_patch::TYPE_NF_CONN);
    let status: u64 = load(c, nf_patch::CT_STATUS);
    if status & done == 0 {
        return Conntrack::Packet;
    }
    if status & changes == 0 {
        return Conntrack::Skip;
    }
    if load::<u16>(c, nf_patch::CT_ORIG_L3NUM) != AF_INET {
        return Conntrack::Packet;
    }
    by_addresses(c)
}

/// For an IPv4 entry `c` (a [`rdonly_cast`] `struct nf_conn`) whose binding rewrites the
/// packet into the addresses of the entry's other direction (`nf_nat_manip_pkt` with the
/// inverted reply or original tuple): the packet before and after NAT carries only the four
/// addresses of the entry's two tuples. With a tracked address among them, or `--trace-all`,
/// it is read and timed (this also times an established connection that NAT rewrites into a
/// traced pod's packet: DNAT to the pod). Otherwise it can be reported only by a followed
/// flow. A followed flow need not hold a tracked address (a flow followed through an earlier
/// SNAT carries the node's address, and a later NAT step in another namespace has an entry of
/// that flow only), but one that matches the packet before or after NAT holds only the
/// entry's addresses; looking the entry's tuples up in the flow table would cost more than
/// reading the packet, so the check is on the hashes noted before each flow is inserted
/// ([`crate::followed`]): when no flow is followed, or none of the four addresses is noted,
/// skip; else [`by_ports`]. An address set the IPv4 array cannot answer: the packet decides.
#[inline(always)]
fn by_addresses(c: u64) -> Conntrack {
    if trace_all() {
        return Conntrack::Time;
    }
    let Some(set) = v4_set() else {
        return Conntrack::Packet;
    };
    let (a, b): (u32, u32) = (
        load(c, nf_patch::CT_ORIG_SRC),
        load(c, nf_patch::CT_ORIG_DST),
    );
    let (x, y): (u32, u32) = (
        load(c, nf_patch::CT_REPLY_SRC),
        load(c, nf_patch::CT_REPLY_DST),
    );
    if v4_tracked(set, a, b) || v4_tracked(set, x, y) {
        return Conntrack::Time;
    }
    if !flows_present()
        || !(addr_maybe_followed(a)
            || addr_maybe_followed(b)
            || addr_maybe_followed(x)
            || addr_maybe_followed(y))
    {
        return Conntrack::Skip;
    }
    by_ports(c, (a, b), (x, y))
}

/// An address of the entry `c` is in a followed flow (the node's address, for instance, in
/// every followed masqueraded flow): for TCP and UDP the ports tell. When neither of the
/// entry's two tuples, `orig` and `reply` addresses with their ports, has its `FLOW_TUPLES`
/// byte set, skip (the packet before NAT is one of them, after NAT the reverse of the other,
/// and a flow's two directions are noted together). Other protocols' entries hold no ports a
/// `Tuple` has (ICMP's type and code): timed.
#[inline(always)]
fn by_ports(c: u64, orig: (u32, u32), reply: (u32, u32)) -> Conntrack {
    let proto: u8 = load(c, nf_patch::CT_PROTO);
    if proto == PROTO_TCP || proto == PROTO_UDP {
        // The ports as a `Tuple` holds them (host order).
        let port = |ph| u16::from_be(load::<u16>(c, ph));
        let followed = v4_maybe_followed(
            orig.0,
            orig.1,
            port(nf_patch::CT_ORIG_SPORT),
            port(nf_patch::CT_ORIG_DPORT),
        ) || v4_maybe_followed(
            reply.0,
            reply.1,
            port(nf_patch::CT_REPLY_SPORT),
            port(nf_patch::CT_REPLY_DPORT),
        );
        return if followed {
            Conntrack::Time
        } else {
            Conntrack::Skip
        };
    }
    Conntrack::Time
}

/// Whether the enter program reads the clock for a packet its conntrack entry could not decide
/// ([`Conntrack::Packet`]; 0 in the pending slot: not timed). The clock is skipped only for a
/// packet of an established connection (`ctinfo` ESTABLISHED or ESTABLISHED_REPLY: NAT
/// applies the connection's binding, no rules run) whose addresses the IPv4 array says are not
/// tracked, while no flow is followed (`FLOWS_PRESENT` unset: a flow-table lookup would cost
/// more than the clock). Such a packet is reported only when NAT rewrites it into a traced
/// pod's packet (DNAT to the pod, the reverse translation of a reply to it): a connection
/// established before pktrace started, on a kernel where the entry could not answer (no
/// `struct nf_conn` in vmlinux BTF). Its event carries `NAT_UNTIMED` (`latency_ns` null) and
/// the report follows its flow, so from then on every packet is timed. New and related
/// packets, `--trace-all`, IPv6 and address sets the IPv4 array cannot answer are always
/// timed.
#[inline(always)]
pub fn worth_timing(nfct: u64, before: &Tuple) -> bool {
    let ctinfo = nfct & NFCT_INFOMASK;
    if (ctinfo != CT_ESTABLISHED && ctinfo != CT_ESTABLISHED_REPLY)
        || trace_all()
        || flows_present()
        || before.family != FAMILY_IPV4
    {
        return true;
    }
    let Some(set) = v4_set() else {
        return true;
    };
    v4_tracked(set, word4(&before.saddr), word4(&before.daddr))
}
