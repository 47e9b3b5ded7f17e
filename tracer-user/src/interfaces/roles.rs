//! What each interface is to the node (bridge, bridge port, veth, uplink), read from rtnetlink
//! (`RTM_GETLINK`: `IFLA_LINKINFO`'s kind, `IFLA_MASTER`) in the network namespace pktrace runs
//! in.
//!
//! Never from `/sys/class/net`: sysfs shows the namespace of whoever mounted it, so under
//! `nsenter --net` (which keeps the caller's mounts) it describes another namespace, and a
//! bridge such as `cbr0` or `azure0` would pass for an edge and split every routed packet's
//! journey in two. A netlink socket always belongs to the namespace of the process that opened
//! it.
//!
//! # Minimum kernel version
//! Any (`IFLA_LINKINFO` and `IFLA_MASTER` are older than 3.0).

use std::{collections::HashMap, io};

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{LinkAttribute, LinkInfo, LinkMessage},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// What an attached interface is to the node, as the join needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIf {
    pub name: String,
    /// True for interfaces where packets enter or leave the node (pod veths, the uplink);
    /// false for internal ones such as the CNI bridge.
    pub edge: bool,
}

/// What an interface is to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A bridge (`azure0`, `cbr0`): internal, packets neither enter nor leave the node there.
    Bridge,
    /// A port of a bridge or another master (a pod veth on `cbr0`, `eth0` on `azure0`).
    BridgePort,
    /// A veth not enslaved to anything (Calico's `cali*`, Azure transparent mode's `azv*`).
    Veth,
    /// Anything else: the uplink (`eth0`), tunnels, dummies.
    Uplink,
}

impl Role {
    /// True where packets enter or leave the node: every role but a bridge.
    #[must_use]
    pub const fn is_edge(self) -> bool {
        !matches!(self, Self::Bridge)
    }
}

/// The attributes of one link that decide its role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkFacts {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND` (`bridge`, `veth`, …); `None` for a physical device.
    pub kind: Option<String>,
    /// `IFLA_MASTER`: the index of the bridge (or bond, vrf) this link is a port of.
    pub master: Option<u32>,
}

/// The role of a link from its attributes.
#[must_use]
pub fn role(link: &LinkFacts) -> Role {
    match (link.kind.as_deref(), link.master) {
        (Some("bridge"), _) => Role::Bridge,
        (_, Some(_)) => Role::BridgePort,
        (Some("veth"), None) => Role::Veth,
        _ => Role::Uplink,
    }
}

/// The facts of one `RTM_NEWLINK` message.
#[must_use]
pub fn facts(msg: &LinkMessage) -> LinkFacts {
    let mut out = LinkFacts {
        index: msg.header.index,
        ..LinkFacts::default()
    };
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => n.clone_into(&mut out.name),
            LinkAttribute::Controller(m) if *m != 0 => out.master = Some(*m),
            LinkAttribute::LinkInfo(infos) => {
                out.kind = infos.iter().find_map(|i| match i {
                    LinkInfo::Kind(k) => Some(k.to_string()),
                    _ => None,
                });
            }
            _ => {}
        }
    }
    out
}

/// The role of every link of the current network namespace, by index.
pub fn all() -> io::Result<HashMap<u32, Role>> {
    Ok(dump()?.iter().map(|l| (l.index, role(l))).collect())
}

/// The role of one link of the current network namespace; `None` when it is gone.
pub fn of(index: u32) -> io::Result<Option<Role>> {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    match request(msg, NLM_F_REQUEST) {
        Ok(links) => Ok(links.iter().find(|l| l.index == index).map(role)),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every link of the current network namespace.
pub fn dump() -> io::Result<Vec<LinkFacts>> {
    request(LinkMessage::default(), NLM_F_REQUEST | NLM_F_DUMP)
}

/// Sends one `RTM_GETLINK` and collects the links of its answer (one message, or a dump up to
/// `NLMSG_DONE`).
fn request(msg: LinkMessage, flags: u16) -> io::Result<Vec<LinkFacts>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut packet = NetlinkMessage::new(
        NetlinkHeader::default(),
        NetlinkPayload::from(RouteNetlinkMessage::GetLink(msg)),
    );
    packet.header.flags = flags;
    packet.header.sequence_number = 1;
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;
    let dump = flags & NLM_F_DUMP != 0;
    let mut out = Vec::new();
    let mut rx = vec![0u8; 64 << 10];
    loop {
        let n = socket.recv(&mut &mut rx[..], 0)?;
        let mut at = 0;
        while at < n {
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rx[at..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let len = reply.header.length as usize;
            match reply.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => {
                    out.push(facts(&l));
                }
                NetlinkPayload::Error(e) if e.code.is_some() => return Err(e.to_io()),
                NetlinkPayload::Done(_) => return Ok(out),
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += (len + 3) & !3;
        }
        if !dump {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::InfoKind;

    use super::*;

    fn link(kind: Option<&str>, master: Option<u32>) -> LinkFacts {
        LinkFacts {
            index: 7,
            name: "x".into(),
            kind: kind.map(str::to_owned),
            master,
        }
    }

    #[test]
    fn a_bridge_is_internal_whatever_its_master() {
        assert_eq!(role(&link(Some("bridge"), None)), Role::Bridge);
        assert_eq!(role(&link(Some("bridge"), Some(3))), Role::Bridge);
        assert!(!Role::Bridge.is_edge());
    }

    #[test]
    fn ports_veths_and_uplinks_are_edges() {
        // A kubenet pod veth on cbr0, and Azure CNI bridge mode's eth0 on azure0.
        assert_eq!(role(&link(Some("veth"), Some(4))), Role::BridgePort);
        assert_eq!(role(&link(None, Some(4))), Role::BridgePort);
        // Calico's cali* and Azure transparent mode's azv*: veths routed, not bridged.
        assert_eq!(role(&link(Some("veth"), None)), Role::Veth);
        // A physical NIC has no kind; tunnels and dummies are uplinks too.
        assert_eq!(role(&link(None, None)), Role::Uplink);
        assert_eq!(role(&link(Some("ipip"), None)), Role::Uplink);
        for r in [Role::BridgePort, Role::Veth, Role::Uplink] {
            assert!(r.is_edge(), "{r:?}");
        }
    }

    #[test]
    fn facts_come_from_the_link_message() {
        let mut msg = LinkMessage::default();
        msg.header.index = 5;
        msg.attributes = vec![
            LinkAttribute::IfName("veth1".into()),
            LinkAttribute::Controller(4),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
        ];
        let f = facts(&msg);
        assert_eq!(
            f,
            LinkFacts {
                index: 5,
                name: "veth1".into(),
                kind: Some("veth".into()),
                master: Some(4),
            }
        );
        msg.attributes = vec![
            LinkAttribute::IfName("cbr0".into()),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]),
        ];
        assert_eq!(role(&facts(&msg)), Role::Bridge);
        // IFLA_MASTER 0 is "no master".
        msg.attributes = vec![LinkAttribute::Controller(0)];
        assert_eq!(facts(&msg).master, None);
    }

    /// Round trip through the wire format, as the kernel sends it.
    #[test]
    fn facts_survive_the_wire_format() {
        let mut msg = LinkMessage::default();
        msg.header.index = 9;
        msg.attributes = vec![
            LinkAttribute::IfName("azure0".into()),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]),
        ];
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::NewLink(msg)),
        );
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        let back = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf).expect("parse");
        let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) = back.payload else {
            panic!("{back:?}");
        };
        let f = facts(&l);
        assert_eq!((f.index, f.name.as_str()), (9, "azure0"));
        assert_eq!(role(&f), Role::Bridge);
    }
}
