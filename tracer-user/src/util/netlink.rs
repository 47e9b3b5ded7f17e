//! A non-blocking netlink socket subscribed to multicast groups, for the event readers (link
//! events over rtnetlink, conntrack events over nfnetlink): the socket is opened close-on-exec,
//! asked for a receive buffer (a refusal leaves the kernel's default) and bound to the groups
//! in the current network namespace.

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd},
};

/// Opens a `protocol` netlink socket subscribed to `groups` (a bit mask of groups, as in
/// `sockaddr_nl.nl_groups`), asking for `rcvbuf` bytes of receive buffer.
///
/// # Errors
/// The socket or the bind failed (e.g. the protocol's module is missing, or no permission).
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
