//! Native nftables nat rules from `nft -j list ruleset` (libnftables' JSON, Debian 12's nft
//! 1.0.6 and later), turned into the same model as iptables dumps: `type nat` base chains
//! on prerouting/input/output/postrouting with their priorities, rules of conditions and one
//! verdict, named sets and verdict maps (kube-proxy's nftables mode: `ip daddr . meta
//! l4proto . th dport vmap @service-ips`, `numgen random mod N vmap { … }`). The same
//! reader gives drop replays the tables' `type filter` base chains ([`parse_filter`]), with
//! chain policies, verdict-map element comments and `ct state` matches kept.
//!
//! The `ip nat`/`ip6 nat` tables iptables-nft makes are not native: their rules use xt
//! compat expressions and are read through `iptables-nft-save` instead, so they are skipped
//! here (as is any table holding `xt` expressions).
//!
//! The JSON is walked untyped: what is not understood becomes an unknown condition, not a
//! lost table. A typed schema (the `nftables` crate, 0.6.3) rejects nft 1.0.6's output of
//! kube-proxy's own table as a whole: `"map": "verdict"` and `"masquerade": {"flags":
//! "fully-random"}` (one flag is printed as a string, several as a list).

mod matches;

use std::net::IpAddr;

use serde_json::Value;

use self::matches::{elem, elems, keys_of, match_cond};
use super::{Base, Cond, Hook, MapKey, MapRef, NatRules, NatTo, Rule, Target, Test, Val};

/// Why the JSON could not be read at all (a rule pktrace cannot read only becomes unknown).
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("`nft -j list ruleset` printed no JSON ({0}); is nft older than 0.9?")]
    Json(#[from] serde_json::Error),
    #[error("`nft -j list ruleset` printed JSON without an `nftables` list")]
    Shape,
}

/// The native nat tables in `json`; `skip_iptables_nat`: the `nat` tables of families
/// ip/ip6 belong to iptables-nft (read elsewhere).
///
/// # Errors
/// The text is not nft's JSON.
pub fn parse(json: &str, skip_iptables_nat: bool) -> Result<Vec<NatRules>, NftError> {
    parse_kind(json, skip_iptables_nat, Kind::Nat)
}

/// The native tables in `json` with `type filter` (or `route`) base chains, each with
/// those base chains only: what may drop a packet (kube-proxy's `filter-*` chains, Calico's
/// nftables dataplane, an admin's `inet filter`). `skip_iptables`: the `filter`, `raw`,
/// `mangle` and `security` tables of families ip/ip6 belong to iptables-nft (read through
/// `iptables-nft-save`).
///
/// # Errors
/// The text is not nft's JSON.
pub fn parse_filter(json: &str, skip_iptables: bool) -> Result<Vec<NatRules>, NftError> {
    parse_kind(json, skip_iptables, Kind::Filter)
}

/// Which base chains make a table worth keeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Nat,
    Filter,
}

impl Kind {
    /// The chain types of this kind.
    fn chain_types(self) -> &'static [&'static str] {
        match self {
            Self::Nat => &["nat"],
            Self::Filter => &["filter", "route"],
        }
    }

    /// The ip/ip6 table names iptables-nft makes for this kind.
    fn iptables_names(self) -> &'static [&'static str] {
        match self {
            Self::Nat => &["nat"],
            Self::Filter => &["filter", "raw", "mangle", "security"],
        }
    }
}

fn parse_kind(json: &str, skip_iptables: bool, kind: Kind) -> Result<Vec<NatRules>, NftError> {
    let doc: Value = serde_json::from_str(json)?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or(NftError::Shape)?;
    let mut tables = Tables {
        kind,
        ..Tables::default()
    };
    for item in items {
        tables.add(item);
    }
    Ok(tables.native(skip_iptables))
}

/// `(family, name)` of a table.
type TableId = (String, String);

/// The tables of a document as its items are read, in the order first seen.
#[derive(Default)]
struct Tables {
    found: Vec<(TableId, NatRules)>,
    /// Tables holding `xt` expressions (iptables-nft's, whatever their name).
    xt: Vec<TableId>,
    kind: Kind,
}

impl Tables {
    /// The table `o` (a chain, rule, set or map) belongs to, made when new.
    fn of(&mut self, o: &Value) -> &mut (TableId, NatRules) {
        let id = (text(o, "family"), text(o, "table"));
        let i = if let Some(i) = self.found.iter().position(|(k, _)| *k == id) {
            i
        } else {
            let mut table = NatRules::default();
            table.label = format!("nft table {} {}", id.0, id.1);
            table.family = match id.0.as_str() {
                "ip" => Some(tracer_common::FAMILY_IPV4),
                "ip6" => Some(tracer_common::FAMILY_IPV6),
                _ => None,
            };
            self.found.push((id, table));
            self.found.len() - 1
        };
        &mut self.found[i]
    }

    /// Adds one item of the `nftables` list (tables, elements and anything else are skipped).
    fn add(&mut self, item: &Value) {
        if let Some(c) = item.get("chain") {
            let kind = self.kind;
            let t = &mut self.of(c).1;
            let name = text(c, "name");
            t.declare(&name);
            if let Some(base) = base_chain(c, &name, kind) {
                t.bases.push(base);
                match c.get("policy").and_then(Value::as_str) {
                    Some(p) if p != "accept" => {
                        t.policies.insert(name, p.to_ascii_uppercase());
                    }
                    _ => {}
                }
            }
        } else if let Some(r) = item.get("rule") {
            self.add_rule(r);
        } else if let Some(s) = item.get("set") {
            let elems = elems(s.get("elem"));
            self.of(s).1.nft_sets.insert(text(s, "name"), elems);
        } else if let Some(m) = item.get("map") {
            let t = &mut self.of(m).1;
            if m.get("map").and_then(Value::as_str) == Some("verdict") {
                let (elems, comments) = map_elems_commented(m.get("elem")).into_iter().unzip();
                t.nft_maps.insert(text(m, "name"), elems);
                t.nft_map_comments.insert(text(m, "name"), comments);
            }
        }
    }

    fn add_rule(&mut self, r: &Value) {
        let exprs = r
            .get("expr")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let kind = self.kind;
        let (id, table) = self.of(r);
        let id = id.clone();
        let comment = r.get("comment").and_then(Value::as_str).map(str::to_owned);
        let chain = text(r, "chain");
        for rule in rules_of(exprs, comment, kind) {
            table.push_rule(&chain, rule);
        }
        if exprs.iter().any(|e| e.get("xt").is_some()) {
            self.xt.push(id);
        }
    }

    /// The native tables of the kind: with a base chain of its type, no `xt` expression,
    /// and (when `skip_iptables`) not named as iptables-nft's tables of the kind in family
    /// ip or ip6.
    fn native(self, skip_iptables: bool) -> Vec<NatRules> {
        let xt = self.xt;
        let names = self.kind.iptables_names();
        self.found
            .into_iter()
            .filter(|(id, t)| {
                let iptables = skip_iptables
                    && names.contains(&id.1.as_str())
                    && (id.0 == "ip" || id.0 == "ip6");
                !t.bases.is_empty() && !iptables && !xt.contains(id)
            })
            .map(|(_, t)| t)
            .collect()
    }
}

fn text(o: &Value, key: &str) -> String {
    o.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A base chain of the kind's type on a hook pktrace replays.
fn base_chain(c: &Value, name: &str, kind: Kind) -> Option<Base> {
    let kind_type = c.get("type").and_then(Value::as_str)?;
    if !kind.chain_types().contains(&kind_type) {
        return None;
    }
    let hook = match c.get("hook").and_then(Value::as_str)? {
        "prerouting" => Hook::Prerouting,
        "input" => Hook::Input,
        "forward" => Hook::Forward,
        "output" => Hook::Output,
        "postrouting" => Hook::Postrouting,
        _ => return None,
    };
    let priority = match c.get("prio") {
        Some(Value::Number(n)) => i32::try_from(n.as_i64()?).ok()?,
        // Older nft prints named priorities as words.
        Some(Value::String(s)) => match s.as_str() {
            "raw" => -300,
            "mangle" => -150,
            "dstnat" => -100,
            "srcnat" => 100,
            _ => 0,
        },
        _ => 0,
    };
    Some(Base {
        hook,
        priority,
        chain: name.to_owned(),
    })
}

/// One nft rule as rules of the model: its conditions, then one rule per statement that acts
/// (a `meta mark set` before a `jump` becomes two rules with the same conditions).
fn rules_of(exprs: &[Value], comment: Option<String>, kind: Kind) -> Vec<Rule> {
    let mut conds = Vec::new();
    let mut out = Vec::new();
    for e in exprs {
        if let Some(m) = e.get("match") {
            match ct_state(m).filter(|_| kind == Kind::Filter) {
                Some(cond) => conds.push(cond),
                None => conds.extend(match_cond(m)),
            }
            continue;
        }
        if let Some(target) = statement(e) {
            out.push(Rule {
                conds: conds.clone(),
                target,
                comment: comment.clone(),
            });
        }
    }
    if out.is_empty() {
        out.push(Rule {
            conds,
            target: Target::None,
            comment,
        });
    }
    out
}

/// A `ct state` match in a filter chain, as the condition iptables' conntrack match
/// parses to (`-m conntrack --ctstate NEW,ESTABLISHED`), which the drop replay checks
/// against the packet's state. (In nat chains only a connection's first packet is seen, and
/// `match_cond` makes `ct state new` hold.)
fn ct_state(m: &Value) -> Option<Cond> {
    let left = m.get("left")?.get("ct")?;
    if left.get("key").and_then(Value::as_str) != Some("state") {
        return None;
    }
    let states: Vec<String> = match m.get("right")? {
        Value::String(s) => vec![s.to_ascii_uppercase()],
        Value::Array(list) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_ascii_uppercase)
            .collect(),
        _ => return None,
    };
    Some(Cond {
        negated: m.get("op").and_then(Value::as_str) == Some("!="),
        test: Test::Unknown(format!("-m conntrack --ctstate {}", states.join(","))),
    })
}

/// A statement that decides or changes something; counters and logs are `None`.
fn statement(e: &Value) -> Option<Target> {
    let (name, body) = e.as_object()?.iter().next()?;
    Some(match name.as_str() {
        "jump" => Target::Jump(text(body, "target")),
        "goto" => Target::Goto(text(body, "target")),
        "return" => Target::Return,
        "accept" | "drop" | "reject" | "queue" | "redirect" | "tproxy" => {
            Target::Stop(name.to_ascii_uppercase())
        }
        "dnat" => Target::Dnat(nat_to(body)),
        "snat" => Target::Snat(nat_to(body)),
        "masquerade" => Target::Masquerade,
        "mangle" => mangle(body)?,
        "vmap" => {
            let keys = match body.get("key")? {
                k if k.get("numgen").is_some() => MapKey::Random,
                k => MapKey::Fields(keys_of(k)),
            };
            let map = match body.get("data")? {
                Value::String(s) => MapRef::Named(s.trim_start_matches('@').to_owned()),
                Value::Object(o) => MapRef::Inline(map_elems(o.get("set"))),
                _ => return None,
            };
            Target::Vmap { keys, map }
        }
        _ => return None,
    })
}

/// `meta mark set …` as (mark & !clear) ^ xor.
fn mangle(body: &Value) -> Option<Target> {
    let key = body.get("key")?.get("meta")?.get("key")?.as_str()?;
    if key != "mark" {
        return None;
    }
    let (clear, xor) = mark_expr(body.get("value")?)?;
    Some(Target::Mark { clear, xor })
}

/// The mark expression as (clear, xor) applied to the old mark.
fn mark_expr(v: &Value) -> Option<(u32, u32)> {
    if let Some(n) = number(v) {
        return Some((u32::MAX, n));
    }
    if v.get("meta").is_some() {
        return Some((0, 0));
    }
    let (op, args) = v.as_object()?.iter().next()?;
    let args = args.as_array()?;
    let (inner, x) = (mark_expr(args.first()?)?, number(args.get(1)?)?);
    let (c, y) = inner;
    Some(match op.as_str() {
        "|" => (c | x, (y & !x) | x),
        "&" => (c | !x, y & x),
        "^" => (c, y ^ x),
        _ => return None,
    })
}

fn number(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s
            .strip_prefix("0x")
            .and_then(|h| u32::from_str_radix(h, 16).ok()),
        _ => None,
    }
}

/// `dnat to 10.0.0.1:80` → `{"addr": "10.0.0.1", "port": 80}`.
fn nat_to(body: &Value) -> Option<NatTo> {
    let (lo, hi) = match body.get("addr")? {
        Value::String(s) => {
            let ip: IpAddr = s.parse().ok()?;
            (ip, ip)
        }
        v => {
            let r = v.get("range")?.as_array()?;
            (
                r.first()?.as_str()?.parse().ok()?,
                r.get(1)?.as_str()?.parse().ok()?,
            )
        }
    };
    let ports = match body.get("port") {
        None => None,
        Some(Value::Number(n)) => {
            let p = u16::try_from(n.as_u64()?).ok()?;
            Some((p, p))
        }
        Some(v) => {
            let r = v.get("range")?.as_array()?;
            let p = |i: usize| r.get(i)?.as_u64().and_then(|n| u16::try_from(n).ok());
            Some((p(0)?, p(1)?))
        }
    };
    Some(NatTo { lo, hi, ports })
}

/// Verdict map elements: `[key, verdict]` pairs.
fn map_elems(v: Option<&Value>) -> Vec<(Vec<Val>, Target)> {
    map_elems_commented(v).into_iter().map(|(e, _)| e).collect()
}

/// One verdict map element: its key and verdict.
type MapElem = (Vec<Val>, Target);

/// Verdict map elements with each key's comment (`{"elem": {"val": …, "comment": …}}`).
fn map_elems_commented(v: Option<&Value>) -> Vec<(MapElem, Option<String>)> {
    let Some(list) = v.and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|pair| {
            let pair = pair.as_array()?;
            let key = pair.first()?;
            let comment = key
                .get("elem")
                .and_then(|e| e.get("comment"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some(((elem(key)?, statement(pair.get(1)?)?), comment))
        })
        .collect()
}

/// Service `namespace/name` from kube-proxy's nftables chain names
/// (`service-ULMVA6XW-ns1/svc1/tcp/p80`, `endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80`,
/// `external-…`).
#[must_use]
pub fn service_of_chain(chain: &str) -> Option<String> {
    let rest = ["service-", "endpoint-", "external-"]
        .iter()
        .find_map(|p| chain.strip_prefix(p))?;
    let (_, named) = rest.split_once('-')?;
    let mut parts = named.split('/');
    let (ns, name) = (parts.next()?, parts.next()?);
    (!ns.is_empty() && !name.is_empty()).then(|| format!("{ns}/{name}"))
}

#[cfg(test)]
mod tests;
