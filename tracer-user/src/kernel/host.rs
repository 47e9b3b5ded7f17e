//! What the kernel says of this host: the addresses of its interfaces and its monotonic clock.

use std::net::IpAddr;

/// The node's own addresses (for `-m addrtype --dst-type LOCAL`).
#[must_use]
pub fn local_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed by freeifaddrs below; entries are only
    // read while the list is alive.
    unsafe {
        if libc::getifaddrs(&raw mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let sa = (*p).ifa_addr;
            if !sa.is_null() {
                match i32::from((*sa).sa_family) {
                    libc::AF_INET => {
                        #[expect(
                            clippy::cast_ptr_alignment,
                            reason = "getifaddrs hands an `AF_INET` address as a `sockaddr_in`, aligned for it"
                        )]
                        let sin = &*sa.cast::<libc::sockaddr_in>();
                        out.push(IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ));
                    }
                    libc::AF_INET6 => {
                        #[expect(
                            clippy::cast_ptr_alignment,
                            reason = "getifaddrs hands an `AF_INET6` address as a `sockaddr_in6`, aligned for it"
                        )]
                        let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                        out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of `bpf_ktime_get_ns`.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}
