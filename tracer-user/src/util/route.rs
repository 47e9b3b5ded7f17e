//! The current network namespace's route towards one address, asked over rtnetlink
//! (`RTM_GETROUTE`, as `ip route get` asks it): the interface it leaves by and its gateway.
//! One request and one answer on a socket of its own, microseconds, no tool run.

use std::{net::IpAddr, ops::ControlFlow, time::Duration};

use super::netlink::{NLM_F_REQUEST, NLMSG_HDR, ask};

/// `RTM_GETROUTE`, `RTM_NEWROUTE`, `NLMSG_ERROR`.
const RTM_GETROUTE: u16 = 26;
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
/// `struct rtmsg`.
const RTMSG: usize = 12;
/// `RTA_DST`, `RTA_OIF`, `RTA_GATEWAY`.
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
/// `RTN_UNICAST`: a route that forwards (not local, broadcast, unreachable, throw…).
const RTN_UNICAST: u8 = 1;
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

/// `nlmsghdr` + `rtmsg` (family, destination length) + `RTA_DST`.
fn request(dst: IpAddr) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match dst {
        IpAddr::V4(a) => (2, a.octets().to_vec()),
        IpAddr::V6(a) => (10, a.octets().to_vec()),
    };
    let attr_len = 4 + addr.len();
    let len = NLMSG_HDR + RTMSG + attr_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&u32::try_from(len).unwrap_or(0).to_ne_bytes());
    m.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    let dst_len = u8::try_from(addr.len() * 8).unwrap_or(0);
    m.extend_from_slice(&[family, dst_len, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&u16::try_from(attr_len).unwrap_or(0).to_ne_bytes());
    m.extend_from_slice(&RTA_DST.to_ne_bytes());
    m.extend_from_slice(&addr);
    m
}

/// The hop of an `RTM_NEWROUTE` answer; `None` for an error, a route that does not
/// forward, or a malformed message.
fn parse(msg: &[u8]) -> Option<Hop> {
    let u16_at = |i: usize| Some(u16::from_ne_bytes(msg.get(i..i + 2)?.try_into().ok()?));
    let len = usize::try_from(u32::from_ne_bytes(msg.get(0..4)?.try_into().ok()?)).ok()?;
    let kind = u16_at(4)?;
    if kind == NLMSG_ERROR || kind != RTM_NEWROUTE || len > msg.len() {
        return None;
    }
    let family = *msg.get(NLMSG_HDR)?;
    if *msg.get(NLMSG_HDR + 7)? != RTN_UNICAST {
        return None;
    }
    let (mut ifindex, mut gateway) = (None, None);
    let mut at = NLMSG_HDR + RTMSG;
    while at + 4 <= len {
        let (alen, ty) = (usize::from(u16_at(at)?), u16_at(at + 2)?);
        if alen < 4 || at + alen > len {
            return None;
        }
        let val = &msg[at + 4..at + alen];
        match ty {
            RTA_OIF => ifindex = Some(u32::from_ne_bytes(val.get(..4)?.try_into().ok()?)),
            RTA_GATEWAY => gateway = addr(family, val),
            _ => {}
        }
        at += (alen + 3) & !3;
    }
    Some(Hop {
        ifindex: ifindex?,
        gateway,
    })
}

fn addr(family: u8, val: &[u8]) -> Option<IpAddr> {
    match family {
        2 => Some(IpAddr::from(<[u8; 4]>::try_from(val.get(..4)?).ok()?)),
        10 => Some(IpAddr::from(<[u8; 16]>::try_from(val.get(..16)?).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
