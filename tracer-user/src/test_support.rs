//! Helpers shared by the unit tests of several modules.
//!
//! # The root tier inside this crate
//! A unit test that needs root or this machine's kernel (loading or attaching programs, a
//! throwaway network namespace, the running kernel's BTF) is
//! `#[ignore = "root tier: …"]`: plain `cargo test` lists it as ignored, never as passed, and
//! `cargo xtask integration-test` runs it as root with `cargo test -p tracer-user --
//! --ignored`. Such a test starts with [`require_root`], so run as another user it fails
//! rather than pass, and it fails, not returns, when the kernel lacks what it tests: only a
//! kernel too old for the feature (see [`kernel_at_least`]) ends it early.

use std::{
    fs, io,
    net::{SocketAddr, UdpSocket},
    os::fd::AsRawFd as _,
    thread,
};

use tracer_common::Tuple;

/// Panics unless the test runs as root (root-tier tests, see the module doc).
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "a root-tier test: run it as root through `cargo xtask integration-test`"
    );
}

/// Whether the running kernel is at least `major.minor` (from `/proc/sys/kernel/osrelease`),
/// and its release string.
pub fn kernel_at_least(major: u32, minor: u32) -> (bool, String) {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim().to_owned();
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (version >= (major, minor), release)
}

/// A connection tuple from `proto` and endpoint texts: `"10.0.0.1:80"`, `"[fd00::1]:80"`, or
/// a bare address for port 0.
///
/// # Panics
/// On an endpoint that does not parse.
pub fn t(proto: u8, src: &str, dst: &str) -> Tuple {
    let ep = |s: &str| {
        s.parse()
            .unwrap_or_else(|_| SocketAddr::new(s.parse().expect("an address"), 0))
    };
    crate::journey::tuple(proto, ep(src), ep(dst))
}

/// A netlink message: the 16-byte header (length, `kind`, zero flags, sequence and port id)
/// then `family`'s `nfgenmsg` (version 0, resource id 0) and the attributes, each padded to 4
/// bytes, all in host byte order (as nfnetlink answers).
pub fn nfnl_msg(kind: u16, family: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![family, 0, 0, 0];
    for (t, v) in attrs {
        let alen = u16::try_from(4 + v.len()).expect("attribute length");
        body.extend(alen.to_ne_bytes());
        body.extend(t.to_ne_bytes());
        body.extend(*v);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
    }
    let mut msg = Vec::new();
    msg.extend(
        u32::try_from(16 + body.len())
            .expect("length")
            .to_ne_bytes(),
    );
    msg.extend(kind.to_ne_bytes());
    msg.extend([0u8; 10]);
    msg.extend(body);
    msg
}

/// The calling thread's network namespace (inode of /proc/thread-self/ns/net).
fn netns() -> String {
    fs::read_link("/proc/thread-self/ns/net")
        .unwrap()
        .display()
        .to_string()
}

/// Runs `f` on a thread in a new, empty network namespace with `lo` up. Only that thread
/// moves (`unshare(CLONE_NEWNET)` replaces the calling task's nsproxy, kernel/nsproxy.c,
/// v6.1); the namespace goes away with the thread once no link holds it. Never touches the
/// host's namespace: it panics before `f` if the move did not happen.
pub fn in_new_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    thread::scope(|s| {
        s.spawn(|| {
            let before = netns();
            // SAFETY: unshare has no memory-safety preconditions.
            assert_eq!(
                unsafe { libc::unshare(libc::CLONE_NEWNET) },
                0,
                "{}",
                io::Error::last_os_error()
            );
            assert_ne!(
                netns(),
                before,
                "unshare(CLONE_NEWNET) did not move this thread"
            );
            set_lo_up();
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn set_lo_up() {
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    // SAFETY: an all-zero ifreq is valid; the ioctls read and write only that struct.
    unsafe {
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[..2].copy_from_slice(&[b'l'.cast_signed(), b'o'.cast_signed()]);
        assert_eq!(
            libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &raw mut ifr),
            0
        );
        ifr.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).unwrap();
        assert_eq!(
            libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &raw mut ifr),
            0
        );
    }
}
