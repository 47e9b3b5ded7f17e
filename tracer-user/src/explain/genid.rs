//! The nftables generation id (`NFT_MSG_GETGEN` over nfnetlink): the kernel bumps it on every
//! committed nftables transaction, iptables-nft's included, so comparing it is a change
//! check that costs one netlink round trip instead of a full rule dump
//! (`net/netfilter/nf_tables_api.c`, `nf_tables_getgen`, v6.1).
//!
//! It does not see iptables-legacy or ipset changes: those are compared by content.

use std::{mem::size_of, time::Duration};

/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN`.
const GETGEN: u16 = (10 << 8) | 16;
/// `NFTA_GEN_ID`.
const NFTA_GEN_ID: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// `struct nlmsghdr` and `struct nfgenmsg`.
const NLMSG_HDR: usize = 16;
const NFGENMSG: usize = 4;
/// How long the kernel may take to answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The current generation id of this network namespace's nftables, or `None` when nftables
/// cannot be asked (no nf_tables, no CAP_NET_ADMIN).
#[must_use]
pub fn current() -> Option<u32> {
    // SAFETY: plain socket syscalls on a descriptor this function owns and closes; buffers
    // are local and their lengths passed as they are.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_NETFILTER,
        );
        if fd < 0 {
            return None;
        }
        let answer = ask(fd);
        libc::close(fd);
        answer
    }
}

/// # Safety
/// `fd` is an open netlink socket.
unsafe fn ask(fd: libc::c_int) -> Option<u32> {
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: TIMEOUT.as_micros().try_into().ok()?,
    };
    let tv_len = libc::socklen_t::try_from(size_of::<libc::timeval>()).ok()?;
    // SAFETY: `tv` outlives the call and `tv_len` is its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&tv).cast(),
            tv_len,
        );
    }
    let req = request();
    // SAFETY: `req` is a live local buffer of the length given.
    let sent = unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) };
    if usize::try_from(sent).ok()? != req.len() {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: `buf` is a live local buffer of the length given.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    parse(buf.get(..usize::try_from(n).ok()?)?)
}

/// `nlmsghdr` + `nfgenmsg` asking for the generation.
fn request() -> [u8; NLMSG_HDR + NFGENMSG] {
    let mut req = [0u8; NLMSG_HDR + NFGENMSG];
    let len = u32::try_from(req.len()).unwrap_or(0);
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&GETGEN.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version NFNETLINK_V0, res_id 0.
    req
}

/// The `NFTA_GEN_ID` of a `NFT_MSG_NEWGEN` answer; `None` for an error or a short message.
fn parse(msg: &[u8]) -> Option<u32> {
    let u16_at = |i: usize| Some(u16::from_ne_bytes(msg.get(i..i + 2)?.try_into().ok()?));
    let len = usize::try_from(u32::from_ne_bytes(msg.get(0..4)?.try_into().ok()?)).ok()?;
    if u16_at(4)? == NLMSG_ERROR || len > msg.len() {
        return None;
    }
    let mut at = NLMSG_HDR + NFGENMSG;
    while at + 4 <= len {
        let (alen, kind) = (usize::from(u16_at(at)?), u16_at(at + 2)?);
        if alen < 4 {
            return None;
        }
        if kind & 0x3fff == NFTA_GEN_ID && alen >= 8 {
            return Some(u32::from_be_bytes(
                msg.get(at + 4..at + 8)?.try_into().ok()?,
            ));
        }
        at += (alen + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(attrs: &[(u16, &[u8])], kind: u16) -> Vec<u8> {
        crate::test_support::nfnl_msg(kind, 0, attrs)
    }

    /// The generation moves with a commit (iptables-nft making a chain), in a network
    /// namespace of the test's own.
    #[test]
    #[ignore = "root tier: makes a throwaway network namespace"]
    fn moves_with_every_commit() {
        crate::test_support::require_root();
        crate::test_support::in_new_netns(|| {
            let before = current().expect("generation");
            let started = std::time::Instant::now();
            for _ in 0..100 {
                assert_eq!(current(), Some(before));
            }
            eprintln!("genid: {:?} per check", started.elapsed() / 100);
            let ok = std::process::Command::new("iptables-nft")
                .args(["-t", "nat", "-N", "PKTRACE-GENID-TEST"])
                .status()
                .expect("iptables-nft");
            assert!(ok.success());
            assert!(current().is_some_and(|g| g != before));
        });
    }

    #[test]
    fn reads_the_generation_attribute() {
        let newgen = (10 << 8) | 15;
        let id = 0x0102_0304u32.to_be_bytes();
        let cases: Vec<(Vec<u8>, Option<u32>)> = vec![
            (answer(&[(NFTA_GEN_ID, &id)], newgen), Some(0x0102_0304)),
            // Other attributes first (NFTA_GEN_PROC_PID), nested flag bits ignored.
            (
                answer(&[(2, &[0, 0, 0, 7]), (NFTA_GEN_ID | 0x8000, &id)], newgen),
                Some(0x0102_0304),
            ),
            (answer(&[(NFTA_GEN_ID, &id)], NLMSG_ERROR), None),
            (answer(&[(2, &[1])], newgen), None),
            (answer(&[(NFTA_GEN_ID, &id)], newgen)[..10].to_vec(), None),
            (Vec::new(), None),
        ];
        for (msg, want) in cases {
            assert_eq!(parse(&msg), want, "{msg:?}");
        }
        let req = request();
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), GETGEN);
    }
}
