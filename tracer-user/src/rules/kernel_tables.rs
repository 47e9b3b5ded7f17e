//! The nftables tables the kernel holds (`NFT_MSG_GETTABLE` dump over nfnetlink), asked
//! without the `nft` tool: whether a node whose `nft` or `iptables-save` is missing evidently
//! uses what they would have read (`net/netfilter/nf_tables_api.c`, `nf_tables_dump_tables`).

use std::{ops::ControlFlow, time::Duration};

use crate::util::netlink::{
    NFGENMSG, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_HDR, nfnl_ask, nfnl_request,
};

/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE`.
const GETTABLE: u16 = 10 << 8 | 1;
/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE`: one answer per table.
const NEWTABLE: u16 = 10 << 8;
/// `NFTA_TABLE_NAME`.
const NFTA_TABLE_NAME: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// How long the kernel may take to answer one part.
const TIMEOUT: Duration = Duration::from_millis(500);
/// Most answer parts read (a node has a handful of tables; each part holds many).
const PARTS_MAX: usize = 64;

/// `(family, name)` of every nftables table of this network namespace, families named as
/// `nft list tables` names them; `None` when the kernel cannot be asked (no `nf_tables`, no
/// `CAP_NET_ADMIN`).
#[must_use]
pub fn list() -> Option<Vec<(String, String)>> {
    // Family NFPROTO_UNSPEC: the tables of every family.
    let req = nfnl_request(GETTABLE, NLM_F_REQUEST | NLM_F_DUMP);
    let mut tables = Vec::new();
    nfnl_ask(&req, TIMEOUT, 32 << 10, PARTS_MAX, |part| {
        Some(match parse(part, &mut tables)? {
            Part::Done => ControlFlow::Break(()),
            Part::More => ControlFlow::Continue(()),
        })
    })?;
    Some(tables)
}

enum Part {
    More,
    Done,
}

/// Adds the tables of one received part; `None` for an error answer or a malformed one.
fn parse(mut buf: &[u8], tables: &mut Vec<(String, String)>) -> Option<Part> {
    while buf.len() >= NLMSG_HDR {
        let len = usize::try_from(u32::from_ne_bytes(buf.get(0..4)?.try_into().ok()?)).ok()?;
        let kind = u16::from_ne_bytes(buf.get(4..6)?.try_into().ok()?);
        if len < NLMSG_HDR || len > buf.len() {
            return None;
        }
        match kind {
            NLMSG_DONE => return Some(Part::Done),
            NLMSG_ERROR => return None,
            NEWTABLE => {
                let msg = &buf[..len];
                let family = family_name(*msg.get(NLMSG_HDR)?);
                if let Some(name) = table_name(msg) {
                    tables.push((family.to_owned(), name));
                }
            }
            _ => {}
        }
        buf = buf.get((len + 3) & !3..).unwrap_or(&[]);
    }
    Some(Part::More)
}

fn table_name(msg: &[u8]) -> Option<String> {
    let u16_at = |i: usize| Some(u16::from_ne_bytes(msg.get(i..i + 2)?.try_into().ok()?));
    let mut at = NLMSG_HDR + NFGENMSG;
    while at + 4 <= msg.len() {
        let (alen, kind) = (usize::from(u16_at(at)?), u16_at(at + 2)?);
        if alen < 4 {
            return None;
        }
        if kind & 0x3fff == NFTA_TABLE_NAME {
            let value = msg.get(at + 4..at + alen)?;
            let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
            return Some(String::from_utf8_lossy(&value[..end]).into_owned());
        }
        at += (alen + 3) & !3;
    }
    None
}

/// `NFPROTO_*` as `nft` names it.
const fn family_name(family: u8) -> &'static str {
    match family {
        1 => "inet",
        2 => "ip",
        3 => "arp",
        5 => "netdev",
        7 => "bridge",
        10 => "ip6",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, family: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        crate::test_support::nfnl_msg(kind, family, attrs)
    }

    /// In a network namespace of the test's own, no tables, then iptables-nft's nat table once
    /// a chain is made in it.
    #[test]
    #[ignore = "root tier: makes a throwaway network namespace"]
    fn lists_the_kernels_tables() {
        crate::test_support::require_root();
        crate::test_support::in_new_netns(|| {
            assert_eq!(list(), Some(Vec::new()));
            let ok = std::process::Command::new("iptables-nft")
                .args(["-t", "nat", "-N", "PKTRACE-TEST"])
                .output()
                .expect("iptables-nft");
            assert!(ok.status.success());
            let tables = list().expect("tables");
            assert!(tables.contains(&("ip".into(), "nat".into())), "{tables:?}");
        });
    }

    #[test]
    fn reads_every_table_of_a_dump() {
        let mut part = msg(NEWTABLE, 2, &[(NFTA_TABLE_NAME, b"nat\0")]);
        part.extend(msg(
            NEWTABLE,
            2,
            &[(3, &[0, 0, 0, 1]), (NFTA_TABLE_NAME, b"kube-proxy\0")],
        ));
        part.extend(msg(NEWTABLE, 1, &[(NFTA_TABLE_NAME, b"calico\0")]));
        let mut tables = Vec::new();
        assert!(matches!(parse(&part, &mut tables), Some(Part::More)));
        assert!(matches!(
            parse(&msg(NLMSG_DONE, 0, &[]), &mut tables),
            Some(Part::Done)
        ));
        let names: Vec<String> = tables.iter().map(|(f, n)| format!("{f} {n}")).collect();
        assert_eq!(names, ["ip nat", "ip kube-proxy", "inet calico"]);
        assert!(parse(&msg(NLMSG_ERROR, 0, &[]), &mut tables).is_none());
        // A length past the buffer is malformed, not read beyond.
        let mut bad = msg(NEWTABLE, 2, &[(NFTA_TABLE_NAME, b"x\0")]);
        bad[0] = 200;
        assert!(parse(&bad, &mut Vec::new()).is_none());
    }
}
