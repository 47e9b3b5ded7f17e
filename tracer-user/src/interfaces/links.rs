//! Link events from the kernel (rtnetlink, `RTMGRP_LINK`): interfaces that appear, change
//! (rename, up/down) or vanish while pktrace runs.
//!
//! [`LinkMonitor::open`] subscribes before the caller lists the interfaces, so a link created
//! in between is reported (possibly twice: handling an event must be idempotent). When the
//! socket's queue overflows the kernel drops events and says so (`ENOBUFS`); the monitor
//! reports [`Batch::Overflow`] and the caller re-lists the interfaces.
//!
//! # Minimum kernel version
//! Any (rtnetlink link notifications are as old as rtnetlink).

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd, RawFd},
};

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::{RouteNetlinkMessage, link::LinkAttribute};

const RTMGRP_LINK: u32 = 1;
/// `IFF_UP`.
#[cfg(test)]
const IFF_UP: u32 = 1;
/// Receive buffer asked for: bursts of pod churn fit without overflow.
const RCVBUF: libc::c_int = 1 << 20;

/// What the kernel said about one link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// The link exists with this name and these flags (new, renamed, up/down, or any change).
    New {
        index: u32,
        name: String,
        flags: u32,
    },
    /// The link is gone.
    Del { index: u32, name: String },
}

impl LinkEvent {
    #[must_use]
    pub const fn index(&self) -> u32 {
        match self {
            Self::New { index, .. } | Self::Del { index, .. } => *index,
        }
    }
}

/// What one read of the socket gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Batch {
    Events(Vec<LinkEvent>),
    /// The kernel dropped notifications (`ENOBUFS`): the interface list must be read again.
    Overflow,
}

/// A `NETLINK_ROUTE` socket subscribed to link notifications; non-blocking.
#[derive(Debug)]
pub struct LinkMonitor {
    fd: OwnedFd,
}

impl LinkMonitor {
    /// Opens the socket and joins `RTMGRP_LINK` in the current network namespace.
    pub fn open() -> io::Result<Self> {
        let fd = crate::util::netlink::subscribe(libc::NETLINK_ROUTE, RTMGRP_LINK, RCVBUF)?;
        Ok(Self { fd })
    }

    /// Reads one datagram; `WouldBlock` when nothing is queued.
    pub fn recv(&self) -> io::Result<Batch> {
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: recv(2) into a buffer of the given length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                return Ok(Batch::Overflow);
            }
            return Err(e);
        }
        buf.truncate(n.unsigned_abs());
        Ok(Batch::Events(parse(&buf)))
    }
}

impl AsRawFd for LinkMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The link events in one netlink datagram; other messages are skipped, and a malformed
/// message ends the datagram (what follows it cannot be framed).
#[must_use]
pub fn parse(buf: &[u8]) -> Vec<LinkEvent> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[at..]) else {
            break;
        };
        let len = msg.header.length as usize;
        if let NetlinkPayload::InnerMessage(inner) = msg.payload
            && let Some(ev) = link_event(inner)
        {
            out.push(ev);
        }
        if len == 0 {
            break;
        }
        at += (len + 3) & !3;
    }
    out
}

/// The event a new-link or del-link message tells; `None` for other messages and for links
/// without an index or a name.
fn link_event(msg: RouteNetlinkMessage) -> Option<LinkEvent> {
    let (new, link) = match msg {
        RouteNetlinkMessage::NewLink(link) => (true, link),
        RouteNetlinkMessage::DelLink(link) => (false, link),
        _ => return None,
    };
    let index = link.header.index;
    let name = link.attributes.into_iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name),
        _ => None,
    })?;
    if index == 0 {
        return None;
    }
    Some(if new {
        LinkEvent::New {
            index,
            name,
            flags: link.header.flags.bits(),
        }
    } else {
        LinkEvent::Del { index, name }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagrams captured from a kernel 6.18 (`x86_64`) in a scratch namespace: `ip link add
    /// azvcap0 type veth peer name capp0`, `set azvcap0 up`, `set azvcap0 name cap1`,
    /// `del cap1`. One `label length hex` line per datagram.
    const CAPTURED: &str = include_str!("links/captured.txt");

    fn captured(label: &str) -> Vec<Vec<u8>> {
        CAPTURED
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == label).then(|| {
                    let (n, hex) = (w.next()?.parse::<usize>().ok()?, w.next()?);
                    let bytes: Vec<u8> = (0..hex.len())
                        .step_by(2)
                        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                        .collect();
                    assert_eq!(bytes.len(), n);
                    Some(bytes)
                })?
            })
            .collect()
    }

    fn all(label: &str) -> Vec<LinkEvent> {
        captured(label).iter().flat_map(|d| parse(d)).collect()
    }

    #[test]
    fn a_new_veth_pair_is_two_new_links_down() {
        let got = all("add");
        assert_eq!(got.len(), 2, "{got:?}");
        let names: Vec<_> = got
            .iter()
            .map(|e| match e {
                LinkEvent::New { name, flags, .. } => {
                    assert_eq!(flags & IFF_UP, 0);
                    name.as_str()
                }
                LinkEvent::Del { .. } => panic!("{e:?}"),
            })
            .collect();
        assert_eq!(names, ["capp0", "azvcap0"]);
        assert_eq!(got[1].index(), 3);
    }

    #[test]
    fn up_rename_and_delete_keep_the_index() {
        let up = all("up");
        assert!(
            matches!(&up[..], [LinkEvent::New { index: 3, name, flags }] if name == "azvcap0" && flags & IFF_UP != 0),
            "{up:?}"
        );
        let renamed = all("rename");
        assert!(
            matches!(&renamed[..], [LinkEvent::New { index: 3, name, .. }] if name == "cap1"),
            "{renamed:?}"
        );
        let del = all("del");
        // The kernel reports the link going down, then its deletion (and the peer's).
        assert!(
            del.contains(&LinkEvent::Del {
                index: 3,
                name: "cap1".into()
            }),
            "{del:?}"
        );
        assert!(
            del.contains(&LinkEvent::Del {
                index: 2,
                name: "capp0".into()
            }),
            "{del:?}"
        );
        assert!(matches!(del[0], LinkEvent::New { index: 3, .. }), "{del:?}");
    }

    #[test]
    fn several_messages_in_one_datagram_are_all_read() {
        let mut joined = Vec::new();
        for d in captured("add") {
            joined.extend_from_slice(&d);
        }
        assert_eq!(parse(&joined).len(), 2);
    }

    #[test]
    fn truncated_and_foreign_input_gives_no_event_and_no_panic() {
        let d = &captured("up")[0];
        for cut in 0..d.len() {
            let _ = parse(&d[..cut]);
        }
        // Shorter than the header says: nothing.
        assert!(parse(&d[..d.len() - 1]).is_empty());
        // Another message type (RTM_NEWADDR = 20): nothing.
        let mut other = d.clone();
        other[4..6].copy_from_slice(&20u16.to_ne_bytes());
        assert!(parse(&other).is_empty());
        // A zero-length attribute (after the 16-byte netlink header and the 16-byte
        // ifinfomsg) is malformed: no event, and no endless walk.
        let mut bad = d.clone();
        bad[32..34].copy_from_slice(&0u16.to_ne_bytes());
        assert!(parse(&bad).is_empty());
        assert!(parse(&[0u8; 3]).is_empty());
    }
}
