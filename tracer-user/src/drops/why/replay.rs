//! Replaying the filter-type tables for a netfilter drop: the hooks the packet's traversal
//! passes, in order, and at each hook every table's base chains in priority order (the
//! mark set by one carried into the next), until a rule or a chain policy drops it.

use std::fmt::Write as _;

use super::{DropFacts, DropRules, DropTable, DropWhy, Traversal, UNKNOWN_ORDER, name};
use crate::{
    drops::FailureClass,
    rules::{
        Hook, PacketCtx,
        eval::{DropHit, DropWalk, Seen, Verdict, Walk},
    },
    util::tuple::dst_ip,
};

impl Traversal {
    /// The netfilter hooks a packet of this traversal passes, in order.
    #[must_use]
    pub const fn hooks(self) -> &'static [Hook] {
        match self {
            Self::LocalIn => &[Hook::Prerouting, Hook::Input],
            Self::Forward => &[Hook::Prerouting, Hook::Forward, Hook::Postrouting],
            Self::LocalOut => &[Hook::Output, Hook::Postrouting],
        }
    }

    /// `forwarded`, `local-in`, `local-out`.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::LocalIn => "local-in",
            Self::Forward => "forwarded",
            Self::LocalOut => "local-out",
        }
    }
}

/// The explanation of a netfilter drop: the first rule that drops the packet along its
/// traversal (each of [`UNKNOWN_ORDER`] in turn when unknown, the one that matched said),
/// or no rule and why none was named. The packet is replayed in the conntrack state the
/// drop hook read, else as a new connection's; when no rule drops it, `why` says which rule
/// would have if it was conntrack `INVALID` (kube-proxy's and Calico's `--ctstate INVALID
/// -j DROP`), without naming it as the rule.
pub fn netfilter(rules: &DropRules, drop: &DropFacts) -> DropWhy {
    let ctx = PacketCtx {
        mark: 0,
        local_addrs: drop.local_addrs.clone(),
        out_iface: drop.out_iface.clone(),
        ..PacketCtx::default()
    };
    let order = order(drop);
    let state = drop.ct_state.as_deref();
    for &traversal in &order {
        if let Some((table, hit)) = replay(rules, drop, &ctx, traversal, state) {
            let mut why = name::named(table, &hit, drop);
            if drop.traversal.is_none() {
                let tried: Vec<&str> = order.iter().map(|t| t.label()).collect();
                let _ = write!(
                    why.why,
                    " [hook not known: matched when replayed as {} (tried in order: {})]",
                    traversal.label(),
                    tried.join(", ")
                );
            }
            return why;
        }
    }
    let mut why = unmatched(rules, drop, &order);
    if state.is_none()
        && let Some((table, hit)) = order
            .iter()
            .find_map(|&t| replay(rules, drop, &ctx, t, Some("INVALID")))
    {
        let _ = write!(
            why,
            "; if conntrack found it INVALID (out of window, or its entry gone), {} drops it: \
             look at `conntrack -S`",
            name::rule_text(table, &hit)
        );
    }
    // No rule of those read drops it: conntrack's own drops (a full table, a clash at
    // confirm) and rules pktrace does not model end here.
    DropWhy {
        class: FailureClass::Other,
        rule: None,
        why,
        service: None,
    }
}

/// The traversals to replay: the one known, else [`UNKNOWN_ORDER`] without those the
/// node's addresses rule out (a packet to a node address is not forwarded, one to another
/// address is not local-in).
fn order(drop: &DropFacts) -> Vec<Traversal> {
    if let Some(known) = drop.traversal {
        return vec![known];
    }
    if drop.local_addrs.is_empty() {
        return UNKNOWN_ORDER.to_vec();
    }
    let to_node =
        drop.local_addrs.contains(&dst_ip(&drop.tuple)) || dst_ip(&drop.tuple).is_loopback();
    UNKNOWN_ORDER
        .into_iter()
        .filter(|t| match t {
            Traversal::Forward => !to_node,
            Traversal::LocalIn => to_node,
            Traversal::LocalOut => true,
        })
        .collect()
}

/// Why no rule is named: none of the tables read drops this packet.
fn unmatched(rules: &DropRules, drop: &DropFacts, order: &[Traversal]) -> String {
    let tables: Vec<&str> = rules
        .tables
        .iter()
        .map(|t| t.rules.label.as_str())
        .collect();
    let read = if tables.is_empty() {
        "no filter table was read".to_owned()
    } else {
        format!("no DROP or REJECT rule of {} matches it", tables.join(", "))
    };
    let how: Vec<&str> = order.iter().map(|t| t.label()).collect();
    format!(
        "a netfilter rule dropped {}, but {read} when replayed as {}; look at `iptables-save`, \
         `nft list ruleset` and `ebtables-save` for rules pktrace does not model (NFQUEUE, \
         bridge tables, conntrack helpers){}",
        name::packet(drop),
        how.join(", then "),
        notes(rules)
    )
}

fn notes(rules: &DropRules) -> String {
    if rules.notes.is_empty() {
        String::new()
    } else {
        format!(" [{}]", rules.notes.join("; "))
    }
}

/// The first drop along `traversal`: the table and the rule or policy.
fn replay<'a>(
    rules: &'a DropRules,
    drop: &'a DropFacts,
    ctx: &'a PacketCtx,
    traversal: Traversal,
    ct_state: Option<&'a str>,
) -> Option<(&'a DropTable, DropHit<'a>)> {
    let seen = Seen {
        in_iface: drop.in_iface.as_deref(),
        ct_state,
    };
    let mut mark = 0;
    for &hook in traversal.hooks() {
        let mut entries: Vec<(i32, &DropTable, &str)> = rules
            .tables
            .iter()
            .flat_map(|t| t.entries(hook).into_iter().map(move |(p, c)| (p, t, c)))
            .collect();
        entries.sort_by_key(|&(p, _, _)| p);
        for (_, table, chain) in entries {
            let walk = Walk::new(&table.rules, ctx, drop.tuple, None).with_mark(mark);
            let mut walk = DropWalk::new(walk, seen);
            let verdict = walk.run(chain);
            mark = walk.mark();
            match verdict {
                Verdict::Dropped(hit) => return Some((table, hit)),
                Verdict::Accepted => {}
                Verdict::Passed => {
                    if let Some(policy) = table.rules.policies.get(chain)
                        && (policy == "DROP" || policy == "REJECT")
                    {
                        return Some((table, walk.policy_hit(chain, policy)));
                    }
                }
            }
        }
    }
    None
}
