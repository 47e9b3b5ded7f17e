//! The NAT mappings conntrack reported, as the packets each direction of a connection is
//! made of while it crosses the node: the original direction enters as the entry's original
//! tuple, is DNATed (PREROUTING/OUTPUT), then SNATed (POSTROUTING/INPUT), and leaves as the
//! reply tuple reversed; a reply enters as the reply tuple, is un-SNATed, then un-DNATed, and
//! leaves as the original tuple reversed (`HOOK2MANIP`, `net/netfilter/nf_nat_core.c`, v6.1).
//! The join ([`crate::journey::correlate`]) asks where a packet seen at tc stands in such a
//! chain, to put the NAT steps between it and the packet an open journey holds.

use std::collections::{HashMap, VecDeque};

use foldhash::fast::RandomState;
use tracer_common::{PROTO_ICMP, PROTO_ICMPV6, Tuple};

use super::parse::CtEntry;

/// Most connections kept (the oldest are forgotten first): a busy node's NATed connections
/// of the last minutes.
pub const MAX_ENTRIES: usize = 65_536;

/// Which address a NAT step rewrites (`NF_NAT_MANIP_DST`, `NF_NAT_MANIP_SRC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Translation {
    /// Destination NAT (with `reply`: the reverse translation of a reply to a DNATed flow).
    Dnat,
    /// Source NAT (with `reply`: the reverse translation of a reply to a SNATed flow).
    Snat,
}

/// One NAT step of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub translation: Translation,
    /// The reverse translation of a reply.
    pub reply: bool,
}

/// The packets one direction of a NATed connection is, in the order NAT makes them:
/// `tuples[i + 1]` is `tuples[i]` after `hops[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    pub tuples: [Tuple; 3],
    pub hops: [Hop; 2],
    /// How many of `tuples` there are (2: one NAT step, 3: DNAT and SNAT).
    pub len: usize,
}

impl Chain {
    /// The chain of one direction of `e` (`reply`: the reply direction); `None` when that
    /// entry translates nothing.
    #[must_use]
    pub fn of(e: &CtEntry, reply: bool) -> Option<Self> {
        let (dnat, snat) = (e.dnat(), e.snat());
        if !dnat && !snat {
            return None;
        }
        let icmp = matches!(e.orig.proto, PROTO_ICMP | PROTO_ICMPV6);
        let mut tuples = [Tuple::default(); 3];
        let mut hops = [Hop {
            translation: Translation::Dnat,
            reply,
        }; 2];
        let mut len = 1;
        let mut push =
            |t: Tuple, translation: Translation, tuples: &mut [Tuple; 3], len: &mut usize| {
                hops[*len - 1] = Hop { translation, reply };
                tuples[*len] = t;
                *len += 1;
            };
        if reply {
            tuples[0] = e.reply;
            let mut t = e.reply;
            if snat {
                // Un-SNAT: the reply goes back to the original source.
                t.daddr = e.orig.saddr;
                t.dport = if icmp { t.dport } else { e.orig.sport };
                push(t, Translation::Snat, &mut tuples, &mut len);
            }
            if dnat {
                // Un-DNAT: the reply comes from where the first packet was sent.
                t.saddr = e.orig.daddr;
                t.sport = if icmp { t.sport } else { e.orig.dport };
                push(t, Translation::Dnat, &mut tuples, &mut len);
            }
            tuples[len - 1] = e.orig.reversed();
        } else {
            tuples[0] = e.orig;
            let mut t = e.orig;
            if dnat {
                t.daddr = e.reply.saddr;
                t.dport = if icmp { t.dport } else { e.reply.sport };
                push(t, Translation::Dnat, &mut tuples, &mut len);
            }
            if snat {
                t.saddr = e.reply.daddr;
                t.sport = if icmp { t.sport } else { e.reply.dport };
                push(t, Translation::Snat, &mut tuples, &mut len);
            }
            tuples[len - 1] = e.reply.reversed();
        }
        Some(Self { tuples, hops, len })
    }

    /// The tuples of the chain.
    #[must_use]
    pub fn tuples(&self) -> &[Tuple] {
        &self.tuples[..self.len]
    }
}

/// Where a tuple stands: the connection (its original tuple), the direction, the index.
#[derive(Clone, Copy, Debug)]
struct Place {
    key: Tuple,
    reply: bool,
    pos: usize,
}

/// The NATed connections conntrack reported, looked up by any packet they are made of.
#[derive(Debug)]
pub struct NatTable {
    entries: HashMap<Tuple, CtEntry, RandomState>,
    places: HashMap<Tuple, Place, RandomState>,
    /// Original tuples in the order they came, for forgetting the oldest.
    order: VecDeque<Tuple>,
    max: usize,
}

impl Default for NatTable {
    fn default() -> Self {
        Self::with_capacity(MAX_ENTRIES)
    }
}

impl NatTable {
    #[must_use]
    pub fn with_capacity(max: usize) -> Self {
        Self {
            entries: HashMap::default(),
            places: HashMap::default(),
            order: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// Notes an entry; true when it is a NATed connection not known yet. Entries that translate
    /// nothing are ignored; an entry reported again with other tuples replaces the old one.
    pub fn insert(&mut self, e: CtEntry) -> bool {
        if Chain::of(&e, false).is_none() {
            return false;
        }
        match self.entries.get(&e.orig) {
            Some(old) if *old == e => return false,
            Some(old) => {
                let old = *old;
                self.forget(&old);
            }
            None => self.order.push_back(e.orig),
        }
        while self.entries.len() >= self.max {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.forget(&old);
            }
        }
        for reply in [false, true] {
            if let Some(chain) = Chain::of(&e, reply) {
                for (pos, t) in chain.tuples().iter().enumerate() {
                    let place = Place {
                        key: e.orig,
                        reply,
                        pos,
                    };
                    self.places.insert(*t, place);
                }
            }
        }
        self.entries.insert(e.orig, e);
        true
    }

    fn forget(&mut self, e: &CtEntry) {
        for reply in [false, true] {
            if let Some(chain) = Chain::of(e, reply) {
                for t in chain.tuples() {
                    if self.places.get(t).is_some_and(|p| p.key == e.orig) {
                        self.places.remove(t);
                    }
                }
            }
        }
        self.entries.remove(&e.orig);
    }

    /// The chain `t` belongs to and its index there.
    #[must_use]
    pub fn place(&self, t: &Tuple) -> Option<(Chain, usize)> {
        let place = self.places.get(t)?;
        let e = self.entries.get(&place.key)?;
        Some((Chain::of(e, place.reply)?, place.pos))
    }

    /// Connections known.
    #[cfg(test)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journey::model::{endpoint, tuple};

    pub fn entry(o: (&str, &str), r: (&str, &str)) -> CtEntry {
        let t = |(s, d): (&str, &str)| {
            tuple(
                tracer_common::PROTO_TCP,
                s.parse().unwrap(),
                d.parse().unwrap(),
            )
        };
        CtEntry {
            orig: t(o),
            reply: t(r),
        }
    }

    fn show(c: &Chain) -> Vec<String> {
        c.tuples()
            .iter()
            .map(|t| format!("{}>{}", endpoint(t, true), endpoint(t, false)))
            .collect()
    }

    /// A LoadBalancer VIP with KUBE-MARK-MASQ: DNAT to a backend and SNAT to the node.
    fn lb() -> CtEntry {
        entry(
            ("10.13.76.46:41234", "203.0.113.251:80"),
            ("10.13.76.26:80", "10.13.76.4:5000"),
        )
    }

    #[test]
    fn both_directions_of_a_dnat_and_snat_connection() {
        let o = Chain::of(&lb(), false).unwrap();
        assert_eq!(
            show(&o),
            [
                "10.13.76.46:41234>203.0.113.251:80",
                "10.13.76.46:41234>10.13.76.26:80",
                "10.13.76.4:5000>10.13.76.26:80"
            ]
        );
        assert_eq!(
            o.hops.map(|h| (h.translation, h.reply)),
            [(Translation::Dnat, false), (Translation::Snat, false)]
        );
        let r = Chain::of(&lb(), true).unwrap();
        assert_eq!(
            show(&r),
            [
                "10.13.76.26:80>10.13.76.4:5000",
                "10.13.76.26:80>10.13.76.46:41234",
                "203.0.113.251:80>10.13.76.46:41234"
            ]
        );
        assert_eq!(
            r.hops.map(|h| (h.translation, h.reply)),
            [(Translation::Snat, true), (Translation::Dnat, true)]
        );
    }

    #[test]
    fn one_step_connections_and_untranslated_ones() {
        let masq = entry(
            ("10.13.76.46:41234", "203.0.113.80:80"),
            ("203.0.113.80:80", "10.13.76.4:41234"),
        );
        let o = Chain::of(&masq, false).unwrap();
        assert_eq!((o.len, o.hops[0].translation), (2, Translation::Snat));
        let plain = entry(
            ("10.13.76.46:41234", "10.13.1.4:80"),
            ("10.13.1.4:80", "10.13.76.46:41234"),
        );
        assert!(Chain::of(&plain, false).is_none());
        let mut table = NatTable::default();
        assert!(!table.insert(plain));
        assert!(table.insert(masq));
        assert!(
            !table.insert(masq),
            "an update of the same mapping is nothing new"
        );
        let (chain, pos) = table.place(&masq.reply).unwrap();
        assert_eq!((pos, chain.hops[0].reply), (0, true));
        let (_, pos) = table.place(&masq.reply.reversed()).unwrap();
        assert_eq!(pos, 1);
    }

    #[test]
    fn the_oldest_connections_are_forgotten_first_and_wholly() {
        let mut table = NatTable::with_capacity(2);
        let a = lb();
        let mut b = lb();
        b.orig.sport = 41235;
        b.reply.dport = 5001;
        let mut c = b;
        c.orig.sport = 41236;
        c.reply.dport = 5002;
        for e in [a, b, c] {
            table.insert(e);
        }
        assert_eq!(table.len(), 2);
        assert!(table.place(&a.orig).is_none() && table.place(&a.reply).is_none());
        assert!(table.place(&c.reply.reversed()).is_some());
        // Replaced with another mapping: the old tuples lead nowhere.
        let mut c2 = c;
        c2.reply.dport = 6000;
        table.insert(c2);
        assert!(table.place(&c.reply).is_none());
        assert_eq!(table.place(&c2.reply).map(|(_, p)| p), Some(0));
    }
}
