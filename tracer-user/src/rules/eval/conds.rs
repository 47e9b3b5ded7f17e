//! Whether one condition holds for the walked packet: known from its tuple, mark and context,
//! or assumed with the reason (interfaces, random matches, sets pktrace cannot read).

use std::net::IpAddr;

use tracer_common::{PROTO_TCP, PROTO_UDP};

use super::{Truth, Walk};
use crate::{
    rules::{Cond, Key, MapKey, MapRef, Rule, SetRef, Target, Test, Val, in_range, ipset::Probe},
    util::tuple::{dst_ip, src_ip},
};

/// SCTP carries ports too.
const PROTO_SCTP: u8 = 132;

impl<'a> Walk<'a> {
    pub(super) fn truth(&self, chain: &str, index: usize, rule: &Rule, cond: &Cond) -> Truth {
        let (src, dst) = (src_ip(&self.pkt), dst_ip(&self.pkt));
        let known = match &cond.test {
            Test::Src(net) => net.contains(src),
            Test::Dst(net) => net.contains(dst),
            Test::Proto(p) => *p == 0 || *p == self.pkt.proto,
            Test::InIface(pat) => {
                return self.iface(None, "-i", pat, cond.negated);
            }
            Test::OutIface(pat) => {
                return self.iface(self.ctx.out_iface.as_deref(), "-o", pat, cond.negated);
            }
            Test::Dport(ranges) => has_ports(self.pkt.proto) && in_ports(ranges, self.pkt.dport),
            Test::Sport(ranges) => has_ports(self.pkt.proto) && in_ports(ranges, self.pkt.sport),
            Test::Mark { value, mask } => self.mark & mask == *value,
            Test::AddrType { dst: is_dst, kind } => {
                match self.addr_type(if *is_dst { dst } else { src }, kind) {
                    Some(b) => b,
                    None => return Truth::Assumed(format!("addrtype {kind} not checked")),
                }
            }
            Test::Range {
                dst: is_dst,
                lo,
                hi,
            } => in_range(if *is_dst { dst } else { src }, *lo, *hi),
            Test::Statistic => return self.statistic(chain, index, rule),
            Test::Set(m) => match self.rules.ipsets.test(m, &self.probe()) {
                Ok(b) => b,
                Err(why) => return Truth::Assumed(why),
            },
            Test::InSet { keys, set } => match self.in_set(keys, set) {
                Some(b) => b,
                None => return Truth::Assumed(format!("set lookup on {keys:?} not checked")),
            },
            // A new connection's ct mark is 0, whatever the mask.
            Test::CtMark { value, .. } => *value == 0,
            Test::Unknown(text) => return Truth::Assumed(format!("`{text}` not checked")),
        };
        Truth::Known(known != cond.negated)
    }

    /// The packet's value of an nftables key; `None` when pktrace cannot know it.
    pub(super) fn key(&self, key: &Key) -> Option<KeyVal<'_>> {
        Some(match key {
            Key::Saddr => KeyVal::Ip(src_ip(&self.pkt)),
            Key::Daddr => KeyVal::Ip(dst_ip(&self.pkt)),
            Key::L4proto => KeyVal::Num(u64::from(self.pkt.proto)),
            Key::Sport if has_ports(self.pkt.proto) => KeyVal::Num(u64::from(self.pkt.sport)),
            Key::Dport if has_ports(self.pkt.proto) => KeyVal::Num(u64::from(self.pkt.dport)),
            // Without ports the field is missing: nothing matches it.
            Key::Sport | Key::Dport => KeyVal::Missing,
            Key::Mark => KeyVal::Num(u64::from(self.mark)),
            Key::Oifname => KeyVal::Str(self.ctx.out_iface.as_deref()?),
            Key::Iifname | Key::Other(_) => return None,
        })
    }

    /// Whether the concatenation of `keys` is an element of `set`.
    pub(super) fn in_set(&self, keys: &[Key], set: &SetRef) -> Option<bool> {
        let elems = self.rules.set_elems(set)?;
        let vals: Vec<KeyVal<'_>> = keys.iter().map(|k| self.key(k)).collect::<Option<_>>()?;
        Some(elems.iter().any(|e| elem_matches(e, &vals)))
    }

    /// The verdict a verdict map gives the packet (`None`: no element, the rule goes on).
    /// Random maps (`numgen`) follow the steering like `statistic`.
    pub(super) fn vmap(&mut self, keys: &MapKey, map: &'a MapRef) -> Option<&'a Target> {
        let Some(elems) = self.rules.map_elems(map) else {
            self.notes
                .push(format!("verdict map {map:?} not found; assumed no verdict"));
            return None;
        };
        match keys {
            MapKey::Random => {
                let steered = self.steer.and_then(|steer| {
                    elems.iter().find(|(_, t)| {
                        matches!(t, Target::Jump(n) | Target::Goto(n) if steer.reaching.contains(n.as_str()))
                    })
                });
                if steered.is_none() {
                    self.notes
                        .push("random `numgen` verdict assumed to be the first".into());
                }
                steered.or_else(|| elems.first()).map(|(_, t)| t)
            }
            MapKey::Fields(keys) => {
                let Some(vals) = keys.iter().map(|k| self.key(k)).collect::<Option<Vec<_>>>()
                else {
                    self.notes.push(format!(
                        "verdict map on {keys:?} not checked; assumed no verdict"
                    ));
                    return None;
                };
                elems
                    .iter()
                    .find(|(e, _)| elem_matches(e, &vals))
                    .map(|(_, t)| t)
            }
        }
    }

    /// The packet as the ipset test sees it.
    pub(super) fn probe(&self) -> Probe<'_> {
        Probe {
            src: src_ip(&self.pkt),
            dst: dst_ip(&self.pkt),
            sport: self.pkt.sport,
            dport: self.pkt.dport,
            proto: self.pkt.proto,
            mark: self.mark,
            in_iface: None,
            out_iface: self.ctx.out_iface.as_deref(),
        }
    }

    #[expect(
        clippy::unused_self,
        reason = "one method per condition kind, beside those that read the evaluator's state"
    )]
    fn iface(&self, name: Option<&str>, flag: &str, pat: &str, negated: bool) -> Truth {
        match name {
            Some(name) => Truth::Known(iface_match(pat, name) != negated),
            None => Truth::Assumed(format!(
                "interface unknown for `{}{flag} {pat}`",
                if negated { "! " } else { "" }
            )),
        }
    }

    /// `statistic` is random: in a DNAT replay it holds exactly on the branch that led to the
    /// observed rewrite; elsewhere it is assumed.
    fn statistic(&self, chain: &str, index: usize, rule: &Rule) -> Truth {
        let Some(steer) = self.steer else {
            return Truth::Assumed("random `statistic` match assumed to hold".into());
        };
        Truth::Known(match &rule.target {
            Target::Jump(next) | Target::Goto(next) => steer.reaching.contains(next.as_str()),
            _ => steer
                .candidates
                .iter()
                .any(|&(c, i)| c == chain && i == index),
        })
    }

    pub(super) fn addr_type(&self, ip: IpAddr, kind: &str) -> Option<bool> {
        let local = ip.is_loopback() || self.ctx.local_addrs.contains(&ip);
        let broadcast = ip == IpAddr::from([255, 255, 255, 255]);
        match kind {
            "LOCAL" => Some(local),
            "MULTICAST" => Some(ip.is_multicast()),
            "BROADCAST" if broadcast => Some(true),
            "UNICAST" => Some(!ip.is_multicast() && !broadcast),
            _ => None,
        }
    }
}

/// A packet value an nftables key yields.
#[derive(Clone, Copy, Debug)]
pub(super) enum KeyVal<'a> {
    Ip(IpAddr),
    Num(u64),
    Str(&'a str),
    /// The packet has no such field (ports of ICMP).
    Missing,
}

impl std::fmt::Display for KeyVal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ip(ip) => write!(f, "{ip}"),
            Self::Num(n) => write!(f, "{n}"),
            Self::Str(s) => write!(f, "{s}"),
            Self::Missing => write!(f, "-"),
        }
    }
}

/// Whether one set element (a concatenation) holds the packet's values.
fn elem_matches(elem: &[Val], vals: &[KeyVal<'_>]) -> bool {
    elem.len() == vals.len()
        && elem.iter().zip(vals).all(|(e, v)| match (e, v) {
            (Val::Net(net), KeyVal::Ip(ip)) => net.contains(*ip),
            (Val::Range(lo, hi), KeyVal::Ip(ip)) => in_range(*ip, *lo, *hi),
            (Val::Num(lo, hi), KeyVal::Num(n)) => (*lo..=*hi).contains(n),
            (Val::Str(pat), KeyVal::Str(name)) => match pat.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => pat == name,
            },
            _ => false,
        })
}

/// iptables interface match: exact, or a prefix when the pattern ends with `+`.
pub(super) fn iface_match(pat: &str, name: &str) -> bool {
    match pat.strip_suffix('+') {
        Some(prefix) => name.starts_with(prefix),
        None => pat == name,
    }
}

const fn has_ports(proto: u8) -> bool {
    matches!(proto, PROTO_TCP | PROTO_UDP | PROTO_SCTP)
}

fn in_ports(ranges: &[(u16, u16)], port: u16) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&port))
}
