//! The current network namespace's route towards one address, asked over rtnetlink
//! (`RTM_GETROUTE`, as `ip route get` asks it): the interface it leaves by and its gateway.
//! One request and one answer on a socket of its own, microseconds, no tool run; the
//! messages are netlink-packet-route's.

use std::{net::IpAddr, ops::ControlFlow, time::Duration};

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::{
    AddressFamily, RouteNetlinkMessage,
    route::{RouteAddress, RouteAttribute, RouteMessage, RouteType},
};

use super::netlink::ask;

/// How long the kernel may take to answer.
const TIMEOUT: Duration = Duration::from_millis(200);

/// A route that forwards: the interface index it leaves by, and its gateway if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub ifindex: u32,
    pub gateway: Option<IpAddr>,
}

/// The route towards `dst` in this namespace; `None` when there is none that forwards
/// (local, unreachable, throw, …) or rtnetlink cannot be asked.
#[must_use]
pub fn towards(dst: IpAddr) -> Option<Hop> {
    ask(
        libc::NETLINK_ROUTE,
        &request(dst),
        TIMEOUT,
        1024,
        1,
        |msg| parse(msg).map(ControlFlow::Break),
    )
}

/// The name of interface `ifindex` in this namespace.
#[must_use]
pub fn ifname(ifindex: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` holds IF_NAMESIZE bytes, as if_indextoname(3) requires.
    let got = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr().cast()) };
    if got.is_null() {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `RTM_GETROUTE` for `dst`: its family, a full-length destination prefix and `RTA_DST`.
fn request(dst: IpAddr) -> Vec<u8> {
    let mut route = RouteMessage::default();
    (
        route.header.address_family,
        route.header.destination_prefix_length,
    ) = match dst {
        IpAddr::V4(_) => (AddressFamily::Inet, 32),
        IpAddr::V6(_) => (AddressFamily::Inet6, 128),
    };
    route
        .attributes
        .push(RouteAttribute::Destination(RouteAddress::from(dst)));
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetRoute(route)),
    );
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    buf
}

/// The hop of an `RTM_NEWROUTE` answer; `None` for an error, a route that does not
/// forward, or a malformed message.
fn parse(msg: &[u8]) -> Option<Hop> {
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(msg).ok()?;
    let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) = reply.payload else {
        return None;
    };
    if route.header.kind != RouteType::Unicast {
        return None;
    }
    let (mut ifindex, mut gateway) = (None, None);
    for attr in route.attributes {
        match attr {
            RouteAttribute::Oif(i) => ifindex = Some(i),
            RouteAttribute::Gateway(RouteAddress::Inet(a)) => gateway = Some(IpAddr::V4(a)),
            RouteAttribute::Gateway(RouteAddress::Inet6(a)) => gateway = Some(IpAddr::V6(a)),
            _ => {}
        }
    }
    Some(Hop {
        ifindex: ifindex?,
        gateway,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::netlink::NLMSG_HDR;

    /// `RTM_NEWROUTE`, `NLMSG_ERROR`, `RTM_GETROUTE`.
    const RTM_NEWROUTE: u16 = 24;
    const NLMSG_ERROR: u16 = 2;
    const RTM_GETROUTE: u16 = 26;
    /// `RTA_DST`, `RTA_OIF`, `RTA_GATEWAY`.
    const RTA_DST: u16 = 1;
    const RTA_OIF: u16 = 4;
    const RTA_GATEWAY: u16 = 5;
    /// `RTN_UNICAST`: a route that forwards.
    const RTN_UNICAST: u8 = 1;

    /// An answer as the kernel writes it: header, `rtmsg` of `family` and `rtm_type`, attrs.
    fn answer(kind: u16, family: u8, rtm_type: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = vec![family, 32, 0, 0, 254, 0, 0, rtm_type, 0, 0, 0, 0];
        for (ty, val) in attrs {
            let alen = 4 + val.len();
            body.extend_from_slice(&u16::try_from(alen).unwrap().to_ne_bytes());
            body.extend_from_slice(&ty.to_ne_bytes());
            body.extend_from_slice(val);
            body.resize(body.len().next_multiple_of(4), 0);
        }
        let len = NLMSG_HDR + body.len();
        let mut m = u32::try_from(len).unwrap().to_ne_bytes().to_vec();
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn a_request_names_the_destination() {
        let req = request("10.13.76.99".parse().unwrap());
        assert_eq!(req.len(), 16 + 12 + 8);
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), RTM_GETROUTE);
        assert_eq!(&req[16..18], &[2, 32]);
        assert_eq!(&req[32..36], &[10, 13, 76, 99]);
        let v6 = request("2001:db8::9".parse().unwrap());
        assert_eq!((v6.len(), v6[16], v6[17]), (16 + 12 + 20, 10, 128));
    }

    #[test]
    fn answers_give_the_interface_and_gateway() {
        let oif = 7u32.to_ne_bytes();
        let connected = answer(
            RTM_NEWROUTE,
            2,
            RTN_UNICAST,
            &[(RTA_DST, &[10, 13, 76, 99]), (RTA_OIF, &oif)],
        );
        assert_eq!(
            parse(&connected),
            Some(Hop {
                ifindex: 7,
                gateway: None
            })
        );
        let via = answer(
            RTM_NEWROUTE,
            2,
            RTN_UNICAST,
            &[(RTA_GATEWAY, &[10, 13, 76, 1]), (RTA_OIF, &oif)],
        );
        assert_eq!(
            parse(&via).unwrap().gateway,
            Some("10.13.76.1".parse().unwrap())
        );
        let gw6: [u8; 16] = "fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
        let v6 = answer(
            RTM_NEWROUTE,
            10,
            RTN_UNICAST,
            &[(RTA_GATEWAY, &gw6), (RTA_OIF, &oif)],
        );
        assert_eq!(
            parse(&v6).unwrap().gateway,
            Some("fe80::1".parse().unwrap())
        );
        // Local, throw (9) and errors are not a way out; nor a message cut short.
        assert_eq!(parse(&answer(RTM_NEWROUTE, 2, 2, &[(RTA_OIF, &oif)])), None);
        assert_eq!(parse(&answer(RTM_NEWROUTE, 2, 9, &[])), None);
        assert_eq!(parse(&answer(NLMSG_ERROR, 0, 0, &[])), None);
        assert_eq!(parse(&connected[..connected.len() - 4]), None);
    }

    #[test]
    fn loopback_is_named_and_a_local_address_has_no_way_out() {
        assert_eq!(ifname(1).as_deref(), Some("lo"));
        // 127.0.0.1 is local: not a way out.
        assert_eq!(towards("127.0.0.1".parse().unwrap()), None);
    }

    #[test]
    #[ignore = "root tier: a veth pair and routes in a throwaway network namespace"]
    fn the_kernels_answers_name_the_way_out_and_the_gateway() {
        crate::test_support::require_root();
        crate::test_support::in_new_netns(|| {
            for args in [
                "link add d0 type veth peer name d1",
                "link set d1 up",
                "link set d0 up",
                "addr add 10.9.0.2/24 dev d0",
                "route add default via 10.9.0.1",
                "-6 addr add 2001:db8::2/64 dev d0 nodad",
                "-6 route add default via 2001:db8::1",
            ] {
                let ok = std::process::Command::new("ip")
                    .args(args.split_whitespace())
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "ip {args}");
            }
            let via = towards("192.0.2.7".parse().unwrap()).unwrap();
            assert_eq!(ifname(via.ifindex).as_deref(), Some("d0"));
            assert_eq!(via.gateway, Some("10.9.0.1".parse().unwrap()));
            let on_link = towards("10.9.0.7".parse().unwrap()).unwrap();
            assert_eq!((on_link.ifindex, on_link.gateway), (via.ifindex, None));
            let v6 = towards("2001:db8:1::7".parse().unwrap()).unwrap();
            assert_eq!(v6.gateway, Some("2001:db8::1".parse().unwrap()));
            assert_eq!(towards("10.9.0.2".parse().unwrap()), None);
        });
    }
}
