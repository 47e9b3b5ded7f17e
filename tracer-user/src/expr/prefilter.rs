//! A conservative summary of an expression for a kernel-side prefilter: the IP versions, the
//! transport protocols and the ports a packet must have for the expression to possibly match.
//!
//! # Where it is sound
//!
//! [`Prefilter::admits`] is false only for a packet view that [`Expr::matches`] rejects (the
//! tests check this over every packet of a small universe and many generated expressions). But
//! a journey is shown when ANY of its steps matches, and NAT changes addresses and ports between
//! steps, so a packet may be dropped early only on what every step shares:
//! - [`Prefilter::families`] and [`Prefilter::protos`] are NAT-invariant (NAT rewrites
//!   addresses and ports, never the IP version or the protocol): they may be applied to every
//!   event at every hook.
//! - [`Prefilter::ports`] is not: `port 8080` must keep a packet sent to a service's port 80
//!   that DNAT sends to 8080, and at the pod's veth it still carries 80. It may only rule a
//!   packet out where both its pre- and post-NAT tuples are known (a conntrack entry's original
//!   and reply tuples, checked with [`Prefilter::admits_any`]), never from one tuple at one hook.
//! - Address tests are not summarised at all (the same NAT argument, and sets of networks do
//!   not fit a small kernel map).

use std::collections::BTreeSet;

use tracer_common::{PROTO_TCP, PROTO_UDP};

use super::{
    ast::{Expr, Family, PortRange, Test, family_of},
    eval::PacketView,
};

/// What a packet must have for an expression to possibly match; `None` = anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefilter {
    /// IP versions allowed.
    pub families: Option<BTreeSet<Family>>,
    /// Transport protocol numbers allowed.
    pub protos: Option<BTreeSet<u8>>,
    /// When set, the packet must carry ports (TCP or UDP) and its source or its destination
    /// port must lie in one of these ranges (sorted, disjoint, not adjacent).
    pub ports: Option<Vec<PortRange>>,
}

impl Prefilter {
    /// The summary of `expr`.
    #[must_use]
    pub fn of(expr: &Expr) -> Self {
        match expr {
            Expr::And(items) => items
                .iter()
                .map(Self::of)
                .reduce(Self::and)
                .unwrap_or_default(),
            Expr::Or(items) => items
                .iter()
                .map(Self::of)
                .reduce(Self::or)
                .unwrap_or_default(),
            // A negation rules out only what its operand admits, which a superset cannot say.
            Expr::Not(_) => Self::default(),
            Expr::Test(t) => Self::of_test(t),
        }
    }

    fn of_test(test: &Test) -> Self {
        let one = |f: Family| Some(BTreeSet::from([f]));
        match *test {
            Test::Family(f) => Self {
                families: one(f),
                ..Self::default()
            },
            Test::Proto { family, proto } => Self {
                families: family.and_then(one),
                protos: Some(BTreeSet::from([proto])),
                ports: None,
            },
            Test::Host { addr, .. } => Self {
                families: one(family_of(addr)),
                ..Self::default()
            },
            Test::Net { net, .. } => Self {
                families: one(family_of(net.addr)),
                ..Self::default()
            },
            Test::Port { proto, range, .. } => Self {
                families: None,
                protos: Some(proto.map_or_else(
                    || BTreeSet::from([PROTO_TCP, PROTO_UDP]),
                    |p| BTreeSet::from([p]),
                )),
                ports: Some(vec![range]),
            },
        }
    }

    /// What both summaries require.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self {
            families: meet(self.families, other.families),
            protos: meet(self.protos, other.protos),
            ports: match (self.ports, other.ports) {
                (None, p) | (p, None) => p,
                // Not the intersection: `src port 80 and dst port 8080` needs one port from
                // each. Either set is a sound bound; keep the narrower.
                (Some(a), Some(b)) => Some(if count(&a) <= count(&b) { a } else { b }),
            },
        }
    }

    /// What either summary allows.
    #[must_use]
    pub fn or(self, other: Self) -> Self {
        Self {
            families: join(self.families, other.families),
            protos: join(self.protos, other.protos),
            ports: match (self.ports, other.ports) {
                (Some(mut a), Some(b)) => {
                    a.extend(b);
                    Some(normalise(a))
                }
                _ => None,
            },
        }
    }

    /// False only when no packet can match (`icmp and port 53`): tcpdump refuses such an
    /// expression ("expression rejects all packets"); the caller may too.
    #[must_use]
    pub fn admits_some(&self) -> bool {
        let empty = |s: &Option<BTreeSet<_>>| s.as_ref().is_some_and(BTreeSet::is_empty);
        !(self.families.as_ref().is_some_and(BTreeSet::is_empty)
            || empty(&self.protos)
            || self.ports.as_ref().is_some_and(Vec::is_empty))
    }

    /// False when the expression cannot match `view` (see the module docs for where a packet
    /// may be dropped on that).
    #[must_use]
    pub fn admits(&self, view: &PacketView) -> bool {
        self.families
            .as_ref()
            .is_none_or(|f| f.contains(&view.family()))
            && self.protos.as_ref().is_none_or(|p| p.contains(&view.proto))
            && self.ports.as_ref().is_none_or(|ranges| {
                view.ports
                    .is_some_and(|(s, d)| ranges.iter().any(|r| r.contains(s) || r.contains(d)))
            })
    }

    /// False when the expression can match none of `views` (the same packet before and after
    /// NAT, say): the test that may drop a packet whose every step is known.
    #[must_use]
    pub fn admits_any(&self, views: &[PacketView]) -> bool {
        views.iter().any(|v| self.admits(v))
    }
}

fn meet<T: Ord>(a: Option<BTreeSet<T>>, b: Option<BTreeSet<T>>) -> Option<BTreeSet<T>> {
    match (a, b) {
        (None, s) | (s, None) => s,
        (Some(a), Some(b)) => Some(a.into_iter().filter(|x| b.contains(x)).collect()),
    }
}

fn join<T: Ord>(a: Option<BTreeSet<T>>, b: Option<BTreeSet<T>>) -> Option<BTreeSet<T>> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.extend(b);
            Some(a)
        }
        _ => None,
    }
}

/// How many ports the ranges hold.
fn count(ranges: &[PortRange]) -> u32 {
    ranges
        .iter()
        .map(|r| u32::from(r.last) - u32::from(r.first) + 1)
        .sum()
}

/// Sorts ranges and merges overlapping and adjacent ones.
fn normalise(mut ranges: Vec<PortRange>) -> Vec<PortRange> {
    ranges.sort_unstable();
    let mut out: Vec<PortRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(prev) if u32::from(r.first) <= u32::from(prev.last) + 1 => {
                prev.last = prev.last.max(r.last);
            }
            _ => out.push(r),
        }
    }
    out
}
