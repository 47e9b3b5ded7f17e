//! One rule as parsed: its conditions ([`Cond`], [`Test`]) and its target ([`Target`]), with
//! the nftables values, sets and verdict maps they may refer to.

use std::net::IpAddr;

use super::{Cidr, NatTo};
use crate::rules::ipset::SetMatch;

/// One `-A` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Conditions, all of which must hold.
    pub conds: Vec<Cond>,
    pub target: Target,
    /// `-m comment --comment "…"`.
    pub comment: Option<String>,
}

/// A condition, possibly negated with `!`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    pub negated: bool,
    pub test: Test,
}

/// What a condition tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    Src(Cidr),
    Dst(Cidr),
    /// `-p`: protocol number, 0 for `all`.
    Proto(u8),
    InIface(String),
    OutIface(String),
    /// `--dport`/`--dports`: inclusive ranges.
    Dport(Vec<(u16, u16)>),
    Sport(Vec<(u16, u16)>),
    /// `-m mark --mark value/mask`.
    Mark {
        value: u32,
        mask: u32,
    },
    /// `-m addrtype --dst-type`/`--src-type` (`LOCAL`, `UNICAST`, …).
    AddrType {
        dst: bool,
        kind: String,
    },
    /// `-m iprange --src-range`/`--dst-range`.
    Range {
        dst: bool,
        lo: IpAddr,
        hi: IpAddr,
    },
    /// `-m statistic …`: random or nth, unknowable per packet.
    Statistic,
    /// `-m set --match-set NAME src|dst|…`.
    Set(SetMatch),
    /// nftables: the packet's `keys` (concatenated) are in a set, named or inline.
    InSet {
        keys: Vec<Key>,
        set: SetRef,
    },
    /// nftables `ct mark & mask == value`: pktrace sees new connections, whose mark is 0.
    CtMark {
        value: u32,
        mask: u32,
    },
    /// Anything else, as written (module and tokens).
    Unknown(String),
}

/// What a rule does when it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `-j CHAIN` (or an extension pktrace does not know: see [`super::NatRules::chain`]).
    Jump(String),
    /// `-g CHAIN`.
    Goto(String),
    Return,
    /// `-j DNAT --to-destination …`.
    Dnat(Option<NatTo>),
    /// `-j SNAT --to-source …`.
    Snat(Option<NatTo>),
    Masquerade,
    /// `-j MARK`: new mark = (mark & !`clear`) ^ `xor`.
    Mark {
        clear: u32,
        xor: u32,
    },
    /// Ends the table for this packet without NAT pktrace models (`ACCEPT`, `DROP`,
    /// `REDIRECT`, `NETMAP`, …).
    Stop(String),
    /// No `-j`: counts and goes on.
    None,
    /// nftables verdict map: the verdict of the element the packet's keys select.
    Vmap {
        keys: MapKey,
        map: MapRef,
    },
}

/// A packet field nftables rules look up (`ip daddr . meta l4proto . th dport`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Saddr,
    Daddr,
    L4proto,
    Sport,
    Dport,
    Mark,
    Iifname,
    Oifname,
    /// A field pktrace does not model, as nft names it.
    Other(String),
}

/// One value of a set element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Net(Cidr),
    Range(IpAddr, IpAddr),
    /// Numbers (ports, protocols, marks) as an inclusive range.
    Num(u64, u64),
    /// Interface names; a trailing `*` is a wildcard.
    Str(String),
}

/// A set a rule tests: by name (in [`super::NatRules::nft_sets`]) or written in the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetRef {
    Named(String),
    Inline(Vec<Vec<Val>>),
}

/// What a verdict map is keyed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapKey {
    Fields(Vec<Key>),
    /// `numgen random mod N`: random like `statistic`.
    Random,
}

/// A verdict map: by name (in [`super::NatRules::nft_maps`]) or written in the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapRef {
    Named(String),
    Inline(Vec<(Vec<Val>, Target)>),
}

impl Target {
    /// The name as iptables writes it.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Self::Jump(c) | Self::Goto(c) | Self::Stop(c) => c,
            Self::Return => "RETURN",
            Self::Dnat(_) => "DNAT",
            Self::Snat(_) => "SNAT",
            Self::Masquerade => "MASQUERADE",
            Self::Mark { .. } => "MARK",
            Self::Vmap { .. } => "vmap",
            Self::None => "",
        }
    }
}

/// `default/whereami` from kube-proxy comments such as `default/whereami:`,
/// `kube-system/kube-dns:dns cluster IP` or `default/whereami: loadbalancer IP`.
#[must_use]
pub fn service_of(rule: &Rule) -> Option<String> {
    let word = rule.comment.as_deref()?.split_whitespace().next()?;
    let name = word.split(':').next()?;
    let (ns, svc) = name.split_once('/')?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    (valid(ns) && valid(svc)).then(|| name.to_owned())
}
