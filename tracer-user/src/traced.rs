//! The traced addresses: one set, shared by everything that filters on it.
//!
//! Contract: a session holds one [`TracedAddrs`] (a pod's addresses, `--pod-ip`'s, or none
//! when every packet is traced). The kernel's filter is written from it, and conntrack's
//! filter and the explainer hold clones of it (the same allocation, not copies of the
//! addresses). When a followed pod is recreated, [`TracedAddrs::replaced_by`] makes the new
//! set and says what changed, and the session hands that new set to each of them from one
//! place.

use std::{fmt, net::IpAddr, sync::Arc};

/// A set of traced addresses, in the order they were found, without repeats. Cloning shares it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracedAddrs(Arc<[IpAddr]>);

/// What a change of the traced addresses added and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<IpAddr>,
    pub removed: Vec<IpAddr>,
}

impl TracedAddrs {
    /// The set of `addrs`, repeats dropped (the first kept).
    #[must_use]
    pub fn new(addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        let mut unique: Vec<IpAddr> = Vec::new();
        for a in addrs {
            if !unique.contains(&a) {
                unique.push(a);
            }
        }
        Self(unique.into())
    }

    #[must_use]
    pub fn as_slice(&self) -> &[IpAddr] {
        &self.0
    }

    #[must_use]
    pub fn contains(&self, addr: &IpAddr) -> bool {
        self.0.contains(addr)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The set `now` as resolved again, and what it changes, when it differs from `self` as a
    /// set; `None` when it is the same or empty (a pod that cannot be resolved for a moment,
    /// deleted and not yet recreated, keeps its old addresses).
    #[must_use]
    pub fn replaced_by(&self, now: Vec<IpAddr>) -> Option<(Self, Changes)> {
        let next = Self::new(now);
        let changes = Changes {
            added: next
                .0
                .iter()
                .filter(|a| !self.contains(a))
                .copied()
                .collect(),
            removed: self
                .0
                .iter()
                .filter(|a| !next.contains(a))
                .copied()
                .collect(),
        };
        if next.is_empty() || (changes.added.is_empty() && changes.removed.is_empty()) {
            return None;
        }
        Some((next, changes))
    }
}

impl From<Vec<IpAddr>> for TracedAddrs {
    fn from(addrs: Vec<IpAddr>) -> Self {
        Self::new(addrs)
    }
}

/// `10.13.76.46, fd00::2e`, or `-` for none.
impl fmt::Display for TracedAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn repeats_are_dropped_and_clones_share_the_set() {
        let t = TracedAddrs::new([ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.1")]);
        assert_eq!(t.as_slice(), [ip("10.0.0.1"), ip("10.0.0.2")]);
        let c = t.clone();
        assert!(std::ptr::eq(t.as_slice(), c.as_slice()));
        assert_eq!(t.to_string(), "10.0.0.1, 10.0.0.2");
        assert_eq!(TracedAddrs::default().to_string(), "-");
    }

    #[test]
    fn a_replacement_says_what_it_added_and_removed() {
        let old = TracedAddrs::new([ip("10.13.76.50"), ip("fd00::50")]);
        let (next, changes) = old
            .replaced_by(vec![ip("fd00::50"), ip("10.13.76.60")])
            .unwrap();
        assert_eq!(next.as_slice(), [ip("fd00::50"), ip("10.13.76.60")]);
        assert_eq!(changes.added, [ip("10.13.76.60")]);
        assert_eq!(changes.removed, [ip("10.13.76.50")]);
    }

    #[test]
    fn the_same_set_or_none_is_no_replacement() {
        let old = TracedAddrs::new([ip("10.0.0.1"), ip("10.0.0.2")]);
        assert_eq!(old.replaced_by(vec![ip("10.0.0.2"), ip("10.0.0.1")]), None);
        // Not resolvable for a moment: the old set stays.
        assert_eq!(old.replaced_by(vec![]), None);
    }
}
