//! The followed service (`--svc`): when the node's rules change (the explainer's poller
//! re-reads them), its addresses are read again from them, and the traced addresses move to
//! the new set (an endpoint added, removed or replaced).

use crate::{
    rules::Ruleset,
    services::{Service, describe, services},
    traced::{Changes, TracedAddrs},
    util::safe,
};

/// The service being followed, as last resolved. Its traced addresses are the session's
/// [`TracedAddrs`].
#[derive(Clone, Debug)]
pub struct ServiceWatch {
    pub service: Service,
}

/// A change of the followed service's addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceChange {
    /// The new set of traced addresses.
    pub now: TracedAddrs,
    pub changes: Changes,
    /// `service default/whereami: now cluster IP …; endpoints … (added …, removed …)`.
    pub line: String,
}

impl ServiceWatch {
    #[must_use]
    pub fn new(service: Service) -> Self {
        Self { service }
    }

    /// Reads the service again from `rules`; the new set of traced addresses when it differs
    /// from `traced`. A service the rules no longer hold (deleted, or known from the API
    /// only) keeps its addresses.
    pub fn update(&mut self, rules: &Ruleset, traced: &TracedAddrs) -> Option<ServiceChange> {
        let now = services(rules).remove(&self.service.label)?;
        if now == self.service {
            return None;
        }
        let replaced = traced.replaced_by(now.addrs());
        self.service = now;
        let (now, changes) = replaced?;
        let line = format!(
            "service {}: now {} (added {}, removed {})",
            safe(&self.service.label),
            describe(&self.service),
            TracedAddrs::new(changes.added.iter().copied()),
            TracedAddrs::new(changes.removed.iter().copied()),
        );
        Some(ServiceChange { now, changes, line })
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::rules::ruleset_from_iptables;

    const AZURE: &str = include_str!("../../tests-data/iptables-save-azure-cni.txt");

    fn whereami(dump: &str) -> (ServiceWatch, TracedAddrs) {
        let rules = ruleset_from_iptables(dump);
        let service = services(&rules).remove("default/whereami").unwrap();
        let traced = TracedAddrs::new(service.addrs());
        (ServiceWatch::new(service), traced)
    }

    #[test]
    fn an_endpoint_added_and_one_removed_move_the_traced_addresses() {
        let (mut watch, traced) = whereami(AZURE);
        assert!(
            watch
                .update(&ruleset_from_iptables(AZURE), &traced)
                .is_none(),
            "same rules"
        );
        // A third backend: KUBE-SVC gains a KUBE-SEP that DNATs to 10.13.76.99.
        let at = AZURE.rfind("COMMIT").unwrap();
        let added = format!(
            "{}:KUBE-SEP-NEWBACKEND00000 - [0:0]\n-A KUBE-SVC-7G2JV7LNOR6DDNIY -m comment \
             --comment \"default/whereami:\" -j KUBE-SEP-NEWBACKEND00000\n-A \
             KUBE-SEP-NEWBACKEND00000 -p tcp -m comment --comment \"default/whereami:\" -m tcp \
             -j DNAT --to-destination 10.13.76.99:80\n{}",
            &AZURE[..at],
            &AZURE[at..]
        );
        let new: IpAddr = "10.13.76.99".parse().unwrap();
        let change = watch
            .update(&ruleset_from_iptables(&added), &traced)
            .expect("a change");
        assert_eq!(change.changes.added, [new]);
        assert!(change.changes.removed.is_empty());
        assert!(change.now.contains(&new));
        assert!(
            change
                .line
                .contains("10.13.76.99:80 (KUBE-SEP-NEWBACKEND00000)")
                && change.line.ends_with("(added 10.13.76.99, removed -)"),
            "{}",
            change.line
        );
        // Back to the two: the new one goes.
        let change = watch
            .update(&ruleset_from_iptables(AZURE), &change.now)
            .expect("a change");
        assert_eq!(change.changes.removed, [new]);
        assert_eq!(change.now, traced);
    }

    #[test]
    fn a_service_gone_from_the_rules_keeps_its_addresses() {
        let (mut watch, traced) = whereami(AZURE);
        let none = ruleset_from_iptables("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n");
        assert!(watch.update(&none, &traced).is_none());
        assert_eq!(watch.service.addrs(), traced.as_slice());
    }
}
