//! Netlink sockets of the current network namespace, both opened close-on-exec:
//! - [`subscribe`]: a non-blocking socket subscribed to multicast groups, for the event readers
//!   (link events over rtnetlink, conntrack events over nfnetlink), asked for a receive buffer
//!   (a refusal leaves the kernel's default) and bound to the groups;
//! - [`nfnl_ask`]: one nfnetlink request without attributes and its answers, read with a
//!   timeout, for the one-shot questions to `nf_tables` (generation id, table list); [`ask`]
//!   the same on another netlink protocol (a route lookup over rtnetlink, [`super::route`]).

use std::{
    io,
    ops::ControlFlow,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    time::Duration,
};

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 1;
/// `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
pub const NLM_F_DUMP: u16 = 0x300;
/// `struct nlmsghdr`; an nfnetlink message's attributes start after it and [`NFGENMSG`].
pub const NLMSG_HDR: usize = 16;
/// `struct nfgenmsg`.
pub const NFGENMSG: usize = 4;

/// Opens a `protocol` netlink socket subscribed to `groups` (a bit mask of groups, as in
/// `sockaddr_nl.nl_groups`), asking for `rcvbuf` bytes of receive buffer.
///
/// # Errors
/// The socket or the bind failed (e.g. the protocol's module is missing, or no permission).
#[expect(
    clippy::cast_possible_truncation,
    reason = "the sizes of `c_int` and `sockaddr_nl` and `AF_NETLINK` (16) fit the C types they are passed as"
)]
pub fn subscribe(protocol: libc::c_int, groups: u32, rcvbuf: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned from here on.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            protocol,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: setsockopt with a c_int of the right size; a failure only leaves the default.
    unsafe {
        libc::setsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const rcvbuf).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    // SAFETY: sockaddr_nl is plain data; zero is a valid start.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = groups;
    // SAFETY: bind(2) with a sockaddr_nl of its own size.
    let rc = unsafe {
        libc::bind(
            raw,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// An nfnetlink request of `msg_type` (`NFNL_SUBSYS_* << 8 | message`) with `flags`:
/// `nlmsghdr` (sequence 1) and `nfgenmsg` (family `NFPROTO_UNSPEC`, version `NFNETLINK_V0`,
/// `res_id` 0), no attributes.
#[must_use]
pub fn nfnl_request(msg_type: u16, flags: u16) -> [u8; NLMSG_HDR + NFGENMSG] {
    let mut req = [0u8; NLMSG_HDR + NFGENMSG];
    let len = u32::try_from(req.len()).unwrap_or(0);
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&msg_type.to_ne_bytes());
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req
}

/// Sends `req` on a new blocking `NETLINK_NETFILTER` socket and hands each datagram received
/// (at most `parts`, each waited for at most `timeout`, up to `buf_len` bytes) to `answer`,
/// until it breaks with the result. `None` when the socket cannot be opened (no `nf_tables`,
/// no permission), the send fails, a receive fails or times out, `answer` gives `None`
/// (an error answer or a malformed one), or `parts` datagrams did not settle it.
pub fn nfnl_ask<T>(
    req: &[u8],
    timeout: Duration,
    buf_len: usize,
    parts: usize,
    answer: impl FnMut(&[u8]) -> Option<ControlFlow<T>>,
) -> Option<T> {
    ask(
        libc::NETLINK_NETFILTER,
        req,
        timeout,
        buf_len,
        parts,
        answer,
    )
}

/// [`nfnl_ask`] on a socket of netlink `protocol` (`NETLINK_ROUTE` for a route lookup).
pub fn ask<T>(
    protocol: libc::c_int,
    req: &[u8],
    timeout: Duration,
    buf_len: usize,
    parts: usize,
    mut answer: impl FnMut(&[u8]) -> Option<ControlFlow<T>>,
) -> Option<T> {
    // SAFETY: plain socket(2); the fd is owned from here on.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        )
    };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a new fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: timeout.as_micros().try_into().ok()?,
    };
    let tv_len = libc::socklen_t::try_from(size_of::<libc::timeval>()).ok()?;
    // SAFETY: `tv` outlives the call and `tv_len` is its size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&tv).cast(),
            tv_len,
        );
    }
    // SAFETY: `req` is a live buffer of the length given.
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if usize::try_from(sent).ok()? != req.len() {
        return None;
    }
    let mut buf = vec![0u8; buf_len];
    for _ in 0..parts {
        // SAFETY: `buf` is a live buffer of the length given.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        match answer(buf.get(..usize::try_from(n).ok()?)?)? {
            ControlFlow::Break(v) => return Some(v),
            ControlFlow::Continue(()) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_the_two_headers_with_type_flags_and_sequence() {
        let req = nfnl_request((10 << 8) | 16, NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(u32::from_ne_bytes(req[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), (10 << 8) | 16);
        assert_eq!(u16::from_ne_bytes([req[6], req[7]]), 0x301);
        assert_eq!(u32::from_ne_bytes(req[8..12].try_into().unwrap()), 1);
        assert_eq!(req[12..], [0; 8]);
    }
}
