//! A `NETLINK_NETFILTER` socket subscribed to conntrack's `NEW` and `UPDATE` event groups
//! (`NFNLGRP_CONNTRACK_NEW`, `NFNLGRP_CONNTRACK_UPDATE`, include/uapi/linux/netfilter/
//! nfnetlink.h) in the current network namespace; non-blocking.
//!
//! The kernel sends an entry's `NEW` event when the entry is confirmed (`nf_conntrack_confirm`,
//! the last netfilter hook the connection's first packet passes), so it holds the final NAT
//! mapping of both directions. When the socket's queue overflows the kernel drops events and
//! says so (`ENOBUFS`): counted, reported by the caller.
//!
//! # Minimum kernel version
//! Any with `nf_conntrack_netlink` (ctnetlink); events need `net.netfilter.nf_conntrack_events`
//! not 0 (its default, 1 or, from 6.0, 2: on once a listener is subscribed).

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd, RawFd},
};

use super::parse::{Parsed, parse_datagram};

/// `1 << (NFNLGRP_CONNTRACK_NEW - 1) | 1 << (NFNLGRP_CONNTRACK_UPDATE - 1)`.
const GROUPS: u32 = 0b11;
/// Receive buffer asked for: a burst of new connections fits without overflow.
const RCVBUF: libc::c_int = 4 << 20;

/// What one read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    Parsed(Parsed),
    /// The kernel dropped events (`ENOBUFS`).
    Overflow,
}

/// The subscribed socket.
#[derive(Debug)]
pub struct CtMonitor {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl CtMonitor {
    /// Opens the socket and joins the groups.
    ///
    /// # Errors
    /// The socket or the subscription failed (no `nf_conntrack_netlink`, no `CAP_NET_ADMIN`).
    pub fn open() -> io::Result<Self> {
        let fd = crate::util::netlink::subscribe(libc::NETLINK_NETFILTER, GROUPS, RCVBUF)?;
        Ok(Self {
            fd,
            buf: vec![0; 64 << 10],
        })
    }

    /// Reads one datagram; `WouldBlock` when nothing is queued.
    ///
    /// # Errors
    /// The socket failed (`WouldBlock`: nothing queued).
    pub fn recv(&mut self) -> io::Result<Read> {
        // SAFETY: recv(2) into a buffer of the given length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                return Ok(Read::Overflow);
            }
            return Err(e);
        }
        Ok(Read::Parsed(parse_datagram(&self.buf[..n.unsigned_abs()])))
    }
}

impl AsRawFd for CtMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
