//! The nftables generation id (`NFT_MSG_GETGEN` over nfnetlink): the kernel bumps it on every
//! committed nftables transaction, iptables-nft's included, so comparing it is a change
//! check that costs one netlink round trip instead of a full rule dump
//! (`net/netfilter/nf_tables_api.c`, `nf_tables_getgen`, v6.1).
//!
//! It does not see iptables-legacy or ipset changes: those are compared by content.

use std::{ops::ControlFlow, time::Duration};

use crate::util::netlink::{NFGENMSG, NLM_F_REQUEST, NLMSG_HDR, nfnl_ask, nfnl_request};

/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN`.
const GETGEN: u16 = (10 << 8) | 16;
/// `NFTA_GEN_ID`.
const NFTA_GEN_ID: u16 = 1;
const NLMSG_ERROR: u16 = 2;
/// How long the kernel may take to answer.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The current generation id of this network namespace's nftables, or `None` when nftables
/// cannot be asked (no `nf_tables`, no `CAP_NET_ADMIN`).
#[must_use]
pub fn current() -> Option<u32> {
    let req = nfnl_request(GETGEN, NLM_F_REQUEST);
    nfnl_ask(&req, TIMEOUT, 512, 1, |msg| {
        parse(msg).map(ControlFlow::Break)
    })
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
    }
}
