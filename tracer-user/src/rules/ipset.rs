//! ipsets as `ipset save` (or `ipset list -o save`) prints them, and `-m set --match-set`
//! evaluated the way the kernel does (`net/netfilter/xt_set.c`, `ipset/ip_set_core.c`, v6.1):
//! one direction flag per dimension of the set, fewer flags than dimensions never match, a
//! set of the other address family never matches, `nomatch` entries of `hash:net` types
//! exclude their prefix (the most specific entry decides), `list:set` matches when one of its
//! member sets does.
//!
//! What pktrace cannot know (MAC addresses, `physdev` interfaces, an interface it was not
//! told) makes the test unknown: the walk assumes it and says so.

use std::{collections::BTreeMap, net::IpAddr};

use super::addr::{Cidr, in_range};

/// Deepest `list:set` nesting followed (the kernel allows none; a dump might claim more).
const MAX_LIST_DEPTH: usize = 4;

/// Every set of a dump, by name.
#[derive(Clone, Debug, Default)]
pub struct IpSets {
    sets: BTreeMap<String, IpSet>,
    /// Lines that were neither `create` nor `add` of a declared set.
    pub skipped_lines: usize,
}

/// One set: its dimensions and members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSet {
    /// `hash:net`, `list:set`, …
    pub kind: String,
    dims: Vec<Dim>,
    /// `family inet6`; `None` for `list:set` and families pktrace does not know.
    v6: Option<bool>,
    /// `netmask N` of `hash:ip`/`bitmap:ip`: members and packets are compared as prefixes.
    netmask: Option<u8>,
    members: Vec<Member>,
}

/// What one dimension of a set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dim {
    Ip,
    Net,
    Port,
    Iface,
    Mark,
    /// `list:set`: the member is another set.
    Set,
    /// `mac` and anything newer.
    Other,
}

/// One `add` line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    parts: Vec<Elem>,
    /// `nomatch`: the prefix is an exception, not a member.
    nomatch: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Elem {
    Net(Cidr),
    Range(IpAddr, IpAddr),
    /// Protocol number and inclusive port range.
    Port(u8, u16, u16),
    /// Interface name; `physdev:` ones are kept but cannot be checked.
    Iface {
        name: String,
        physdev: bool,
    },
    Mark(u32),
    Set(String),
    Unreadable,
}

/// What the set test looks at, beyond the addresses.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub mark: u32,
    pub in_iface: Option<&'a str>,
    pub out_iface: Option<&'a str>,
}

/// `--match-set NAME src,dst` (true = `dst`), with `--return-nomatch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetMatch {
    pub name: String,
    pub dst: Vec<bool>,
    pub return_nomatch: bool,
}

impl SetMatch {
    /// `src`, `dst,dst`, … as iptables writes the flags.
    #[must_use]
    pub fn flags(&self) -> String {
        let words: Vec<&str> = self
            .dst
            .iter()
            .map(|&d| if d { "dst" } else { "src" })
            .collect();
        words.join(",")
    }

    /// The packet's values the flags select, e.g. `10.13.76.46` or `10.0.0.1,80`.
    #[must_use]
    pub fn values(&self, p: &Probe<'_>) -> String {
        let ip = |d: bool| if d { p.dst } else { p.src };
        let port = |d: bool| if d { p.dport } else { p.sport };
        match self.dst.as_slice() {
            [a] => ip(*a).to_string(),
            [a, b] => format!("{},{}", ip(*a), port(*b)),
            [a, b, c] => format!("{},{},{}", ip(*a), port(*b), ip(*c)),
            _ => String::new(),
        }
    }
}

impl IpSets {
    /// Parses `ipset save` output; unreadable lines are counted and skipped.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut sets = Self::default();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let ok = match words.as_slice() {
                ["create", name, kind, opts @ ..] => {
                    sets.sets.insert((*name).to_owned(), IpSet::new(kind, opts));
                    true
                }
                ["add", name, value, opts @ ..] => match sets.sets.get_mut(*name) {
                    Some(set) => {
                        set.add(value, opts);
                        true
                    }
                    None => false,
                },
                _ => false,
            };
            if !ok {
                sets.skipped_lines += 1;
            }
        }
        sets
    }

    /// The set called `name`.
    #[must_use]
    #[cfg(test)]
    pub fn get(&self, name: &str) -> Option<&IpSet> {
        self.sets.get(name)
    }

    /// Number of sets.
    #[must_use]
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// Whether the packet matches `m` (before any `!`); `Err` says why it cannot be known.
    ///
    /// # Errors
    /// The set is unknown, or holds what pktrace cannot check for this packet.
    pub fn test(&self, m: &SetMatch, p: &Probe<'_>) -> Result<bool, String> {
        self.test_at(&m.name, m, p, 0)
    }

    fn test_at(
        &self,
        name: &str,
        m: &SetMatch,
        p: &Probe<'_>,
        depth: usize,
    ) -> Result<bool, String> {
        let set = self
            .sets
            .get(name)
            .ok_or_else(|| format!("ipset {name} not read"))?;
        if set.dims.first() == Some(&Dim::Set) {
            if depth >= MAX_LIST_DEPTH {
                return Err(format!("ipset {name} nests list:set too deep"));
            }
            let mut unknown = None;
            for member in &set.members {
                let Some(Elem::Set(inner)) = member.parts.first() else {
                    continue;
                };
                match self.test_at(inner, m, p, depth + 1) {
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    Err(e) => unknown = unknown.or(Some(e)),
                }
            }
            return unknown.map_or(Ok(false), Err);
        }
        set.test(name, m, p)
    }
}

impl IpSet {
    fn new(kind: &str, opts: &[&str]) -> Self {
        let dims = match kind.split_once(':') {
            Some(("list", "set")) => vec![Dim::Set],
            Some((_, dims)) => dims
                .split(',')
                .map(|d| match d {
                    "ip" => Dim::Ip,
                    "net" => Dim::Net,
                    "port" => Dim::Port,
                    "iface" => Dim::Iface,
                    "mark" => Dim::Mark,
                    _ => Dim::Other,
                })
                .collect(),
            None => vec![Dim::Other],
        };
        let opt = |key: &str| {
            opts.iter()
                .position(|o| *o == key)
                .and_then(|i| opts.get(i + 1))
        };
        let v6 = match opt("family").copied() {
            Some("inet") => Some(false),
            Some("inet6") => Some(true),
            // `bitmap:` types are IPv4 only and print no family.
            None if kind.starts_with("bitmap:ip") => Some(false),
            _ => None,
        };
        Self {
            kind: kind.to_owned(),
            dims,
            v6,
            netmask: opt("netmask").and_then(|n| n.parse().ok()),
            members: Vec::new(),
        }
    }

    fn add(&mut self, value: &str, opts: &[&str]) {
        let parts: Vec<Elem> = if self.dims.first() == Some(&Dim::Set) {
            vec![Elem::Set(value.to_owned())]
        } else {
            let values: Vec<&str> = value.splitn(self.dims.len(), ',').collect();
            self.dims
                .iter()
                .zip(values.iter().chain(std::iter::repeat(&"")))
                .map(|(dim, v)| elem(*dim, v, self.netmask))
                .collect()
        };
        self.members.push(Member {
            parts,
            nomatch: opts.contains(&"nomatch"),
        });
    }

    fn test(&self, name: &str, m: &SetMatch, p: &Probe<'_>) -> Result<bool, String> {
        if m.dst.len() < self.dims.len() {
            return Ok(false);
        }
        if self.v6.is_some_and(|v6| v6 != p.src.is_ipv6()) {
            return Ok(false);
        }
        // The most specific matching member decides (a `nomatch` one excludes).
        let mut best: Option<(u32, bool)> = None;
        let mut unknown = None;
        for member in &self.members {
            match member_matches(member, &self.dims, m, p) {
                Ok(Some(spec)) if best.is_none_or(|(s, _)| spec > s) => {
                    best = Some((spec, member.nomatch));
                }
                Ok(_) => {}
                Err(e) => unknown = unknown.or(Some(e)),
            }
        }
        match (best, unknown) {
            (Some((_, nomatch)), _) => Ok(!nomatch || m.return_nomatch),
            (None, Some(why)) => Err(format!("ipset {name}: {why}")),
            (None, None) => Ok(false),
        }
    }
}

/// `Some(specificity)` when every part matches.
fn member_matches(
    member: &Member,
    dims: &[Dim],
    m: &SetMatch,
    p: &Probe<'_>,
) -> Result<Option<u32>, String> {
    let mut spec = 0u32;
    for (i, part) in member.parts.iter().enumerate() {
        let dst = m.dst[i];
        let ip = if dst { p.dst } else { p.src };
        let ok = match part {
            Elem::Net(net) => {
                // Earlier dimensions weigh more: a /24 in the first beats anything later.
                spec = spec * 256 + u32::from(net.prefix);
                net.contains(ip)
            }
            Elem::Range(lo, hi) => in_range(ip, *lo, *hi),
            Elem::Port(proto, lo, hi) => {
                let port = if dst { p.dport } else { p.sport };
                *proto == p.proto && (*lo..=*hi).contains(&port)
            }
            Elem::Iface { name, physdev } => {
                let iface = if dst { p.out_iface } else { p.in_iface };
                match (physdev, iface) {
                    (false, Some(iface)) => iface_matches(name, iface),
                    (true, _) => return Err(format!("physdev {name} not checked")),
                    (false, None) => return Err(format!("interface unknown for {name}")),
                }
            }
            Elem::Mark(mark) => p.mark == *mark,
            Elem::Set(_) | Elem::Unreadable => {
                let kind = dims.get(i).copied().unwrap_or(Dim::Other);
                return Err(format!("{kind:?} members not checked").to_lowercase());
            }
        };
        if !ok {
            return Ok(None);
        }
    }
    Ok(Some(spec))
}

/// ipset's interface match: exact (it has no wildcards in the saved element).
fn iface_matches(name: &str, iface: &str) -> bool {
    name == iface
}

fn elem(dim: Dim, v: &str, netmask: Option<u8>) -> Elem {
    match dim {
        Dim::Ip | Dim::Net => ip_elem(v, netmask),
        Dim::Port => port_elem(v),
        Dim::Iface => match v.strip_prefix("physdev:") {
            Some(name) => Elem::Iface {
                name: name.to_owned(),
                physdev: true,
            },
            None if !v.is_empty() => Elem::Iface {
                name: v.to_owned(),
                physdev: false,
            },
            None => Elem::Unreadable,
        },
        Dim::Mark => parse_u32(v).map_or(Elem::Unreadable, Elem::Mark),
        Dim::Set => Elem::Set(v.to_owned()),
        Dim::Other => Elem::Unreadable,
    }
}

/// `10.0.0.1`, `10.0.0.0/16`, `10.0.0.1-10.0.0.9`; with `netmask`, the member's prefix.
fn ip_elem(v: &str, netmask: Option<u8>) -> Elem {
    if let Some((lo, hi)) = v.split_once('-')
        && let (Ok(lo), Ok(hi)) = (lo.parse(), hi.parse())
    {
        return Elem::Range(lo, hi);
    }
    match Cidr::parse(v) {
        Some(mut cidr) => {
            if let Some(mask) = netmask
                && !v.contains('/')
            {
                cidr.prefix = mask.min(cidr.prefix);
            }
            Elem::Net(cidr)
        }
        None => Elem::Unreadable,
    }
}

/// `tcp:80`, `udp:53`, `80` (tcp), `tcp:1000-2000`; ICMP type/code elements are unreadable.
fn port_elem(v: &str) -> Elem {
    let (proto, ports) = v.split_once(':').unwrap_or(("tcp", v));
    let proto = match proto {
        "tcp" => 6,
        "udp" => 17,
        "sctp" => 132,
        "udplite" => 136,
        _ => return Elem::Unreadable,
    };
    let range = match ports.split_once('-') {
        Some((a, b)) => a.parse().ok().zip(b.parse().ok()),
        None => ports.parse().ok().map(|p| (p, p)),
    };
    range.map_or(Elem::Unreadable, |(lo, hi)| Elem::Port(proto, lo, hi))
}

fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests;
