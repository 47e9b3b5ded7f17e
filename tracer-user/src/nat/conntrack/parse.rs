//! ctnetlink event messages (`IPCTNL_MSG_CT_NEW` from the `NFNLGRP_CONNTRACK_NEW` and
//! `_UPDATE` groups, `include/uapi/linux/netfilter/nfnetlink_conntrack.h`, v6.1) → the two tuples
//! of a conntrack entry, as [`Tuple`]s. The attributes are parsed by
//! `netlink-packet-netfilter`; the netlink header walk is ours (a datagram holds several
//! messages).

use std::net::IpAddr;

use netlink_packet_core::ParseableParametrized as _;
use netlink_packet_netfilter::{
    NetfilterMessage, NetfilterMessageInner,
    conntrack::{ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Tuple as CtTuple},
};
use tracer_common::{FAMILY_IPV4, FAMILY_IPV6, PROTO_ICMP, PROTO_ICMPV6, Tuple};

const NLMSG_HDR_LEN: usize = 16;
/// `NFNL_SUBSYS_CTNETLINK`.
const SUBSYS_CTNETLINK: u16 = 1;
/// `CTA_PROTO_ICMP_ID` and `CTA_PROTO_ICMPV6_ID`: the echo identifier, network order.
const CTA_PROTO_ICMP_ID: u16 = 4;
const CTA_PROTO_ICMPV6_ID: u16 = 7;

/// One conntrack entry as an event reported it: the packet of each direction as it enters
/// the node (before any NAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtEntry {
    /// The original direction's tuple (the connection's first packet before NAT).
    pub orig: Tuple,
    /// The reply direction's tuple (a reply before its reverse NAT).
    pub reply: Tuple,
}

impl CtEntry {
    /// True when the original direction's destination is rewritten (DNAT): the reply comes
    /// from somewhere else than the first packet was sent to.
    #[must_use]
    pub fn dnat(&self) -> bool {
        self.reply.saddr != self.orig.daddr
            || (!is_icmp(self.orig.proto) && self.reply.sport != self.orig.dport)
    }

    /// True when the original direction's source is rewritten (SNAT, MASQUERADE): the reply
    /// goes to somewhere else than the first packet came from.
    #[must_use]
    pub fn snat(&self) -> bool {
        self.reply.daddr != self.orig.saddr || self.reply.dport != self.orig.sport
    }
}

const fn is_icmp(proto: u8) -> bool {
    proto == PROTO_ICMP || proto == PROTO_ICMPV6
}

/// The entries a datagram reports, and how many of its messages could not be read (counted,
/// never silently dropped: the caller reports them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub entries: Vec<CtEntry>,
    pub unreadable: u64,
}

/// Parses one netlink datagram of ctnetlink events. Messages of other subsystems or types,
/// and entries of protocols without ports other than ICMP, are skipped without a count;
/// malformed ones are counted in [`Parsed::unreadable`].
#[must_use]
pub fn parse_datagram(mut buf: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    while buf.len() >= NLMSG_HDR_LEN {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < NLMSG_HDR_LEN || len > buf.len() {
            out.unreadable += 1;
            break;
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if kind >> 8 == SUBSYS_CTNETLINK {
            match parse_message(&buf[NLMSG_HDR_LEN..len], kind) {
                Ok(Some(e)) => out.entries.push(e),
                Ok(None) => {}
                Err(()) => out.unreadable += 1,
            }
        }
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    out
}

/// One ctnetlink message: `Ok(None)` for a message that is not a new or updated entry.
fn parse_message(payload: &[u8], kind: u16) -> Result<Option<CtEntry>, ()> {
    let msg = NetfilterMessage::parse_with_param(payload, kind).map_err(|_| ())?;
    let NetfilterMessageInner::Conntrack(ConntrackMessage::New(attrs)) = msg.inner else {
        return Ok(None);
    };
    let (mut orig, mut reply) = (None, None);
    for attr in &attrs {
        match attr {
            ConntrackAttribute::CtaTupleOrig(t) => orig = Some(tuple(t).ok_or(())?),
            ConntrackAttribute::CtaTupleReply(t) => reply = Some(tuple(t).ok_or(())?),
            _ => {}
        }
    }
    match (orig, reply) {
        (Some(orig), Some(reply)) if orig.proto != 0 => Ok(Some(CtEntry { orig, reply })),
        _ => Err(()),
    }
}

/// A `CTA_TUPLE_*` as a [`Tuple`]: ports in host order, the ICMP echo identifier in both ports
/// (as the packet parser keys ICMP).
fn tuple(parts: &[CtTuple]) -> Option<Tuple> {
    let mut t = Tuple::default();
    let mut icmp_id = None;
    for part in parts {
        match part {
            CtTuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => set_addr(&mut t, true, *a),
                        IPTuple::DestinationAddress(a) => set_addr(&mut t, false, *a),
                        _ => {}
                    }
                }
            }
            CtTuple::Proto(protos) => {
                for p in protos {
                    match p {
                        ProtoTuple::Protocol(p) => t.proto = u8::from(*p),
                        ProtoTuple::SourcePort(port) => t.sport = *port,
                        ProtoTuple::DestinationPort(port) => t.dport = *port,
                        ProtoTuple::Other(nla) => {
                            let kind = netlink_packet_core::Nla::kind(nla);
                            if kind == CTA_PROTO_ICMP_ID || kind == CTA_PROTO_ICMPV6_ID {
                                let mut v = [0u8; 2];
                                netlink_packet_core::Nla::emit_value(nla, &mut v);
                                icmp_id = Some(u16::from_be_bytes(v));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if is_icmp(t.proto) {
        let id = icmp_id.unwrap_or(0);
        (t.sport, t.dport) = (id, id);
    }
    (t.family != 0).then_some(t)
}

fn set_addr(t: &mut Tuple, source: bool, a: IpAddr) {
    let out = if source { &mut t.saddr } else { &mut t.daddr };
    match a {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            t.family = FAMILY_IPV4;
        }
        IpAddr::V6(v6) => {
            *out = v6.octets();
            t.family = FAMILY_IPV6;
        }
    }
}

#[cfg(test)]
mod tests;
