//! One nftables `match` expression as conditions of the rule model: marks, `fib … type`,
//! `ct state`, and keys (addresses, protocol, ports, interfaces) against a value, a range, or
//! a named or inline set.

use serde_json::Value;

use super::number;
use crate::rules::{Cidr, Cond, Key, SetRef, Test, Val};

/// A `match` expression as conditions (a port match also implies its protocol).
pub(super) fn match_cond(m: &Value) -> Vec<Cond> {
    let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
    let negated = op == "!=";
    let (Some(left), Some(right)) = (m.get("left"), m.get("right")) else {
        return vec![unknown(m)];
    };
    if let Some(conds) = mark_fib_or_state(m, left, right, negated) {
        return conds;
    }
    let keys = keys_of(left);
    if keys.iter().any(|k| matches!(k, Key::Other(_))) {
        return vec![unknown(m)];
    }
    let implied: Vec<Cond> = keys_proto(left)
        .map(|p| Cond {
            negated: false,
            test: Test::Proto(p),
        })
        .into_iter()
        .collect();
    let test = match (keys.as_slice(), right) {
        (_, Value::String(s)) if s.starts_with('@') => Test::InSet {
            keys,
            set: SetRef::Named(s[1..].to_owned()),
        },
        ([key], v) if v.get("set").is_none() => match key_test(key, v) {
            Some(test) => test,
            None => return vec![unknown(m)],
        },
        (_, v) => Test::InSet {
            keys,
            set: SetRef::Inline(elems(v.get("set").or(Some(v)))),
        },
    };
    let mut out = implied;
    out.push(Cond { negated, test });
    out
}

/// The conditions of a mark, `fib … type` or `ct state` match; `None` for any other match.
pub(super) fn mark_fib_or_state(
    m: &Value,
    left: &Value,
    right: &Value,
    negated: bool,
) -> Option<Vec<Cond>> {
    let cond = |test| Cond { negated, test };
    // `meta mark & 0x4000 == 0x4000`, `ct mark & …`.
    if let Some(args) = left.get("&").and_then(Value::as_array)
        && let (Some(what), Some(mask), Some(value)) =
            (args.first(), args.get(1).and_then(number), number(right))
    {
        return Some(match mark_key(what) {
            Some(true) => vec![cond(Test::Mark { value, mask })],
            Some(false) => vec![cond(Test::CtMark { value, mask })],
            None => vec![unknown(m)],
        });
    }
    if let Some(meta) = mark_key(left) {
        let Some(value) = number(right) else {
            return Some(vec![unknown(m)]);
        };
        let mask = u32::MAX;
        return Some(vec![cond(if meta {
            Test::Mark { value, mask }
        } else {
            Test::CtMark { value, mask }
        })]);
    }
    if let Some(fib) = left.get("fib") {
        let dst = fib.to_string().contains("daddr");
        return Some(match right.as_str() {
            Some(kind) if fib.get("result").and_then(Value::as_str) == Some("type") => {
                vec![cond(Test::AddrType {
                    dst,
                    kind: kind.to_ascii_uppercase(),
                })]
            }
            _ => vec![unknown(m)],
        });
    }
    if left
        .get("ct")
        .is_some_and(|c| c.get("key").and_then(Value::as_str) == Some("state"))
    {
        // nat chains only see a connection's first packet: `ct state new` holds.
        let new = right.to_string().contains("new");
        return Some(vec![Cond {
            negated: false,
            test: Test::Proto(if new == negated { 255 } else { 0 }),
        }]);
    }
    None
}

/// The test of one key against one value (not a set); `None` when pktrace does not model it.
pub(super) fn key_test(key: &Key, v: &Value) -> Option<Test> {
    Some(match (key, value(v)) {
        (Key::Saddr, Some(Val::Net(c))) => Test::Src(c),
        (Key::Daddr, Some(Val::Net(c))) => Test::Dst(c),
        (Key::Saddr | Key::Daddr, Some(Val::Range(lo, hi))) => Test::Range {
            dst: *key == Key::Daddr,
            lo,
            hi,
        },
        (Key::L4proto, Some(Val::Num(p, _))) => Test::Proto(u8::try_from(p).unwrap_or(255)),
        (Key::Dport | Key::Sport, Some(Val::Num(lo, hi))) => {
            let r = vec![(port(lo), port(hi))];
            if *key == Key::Dport {
                Test::Dport(r)
            } else {
                Test::Sport(r)
            }
        }
        (Key::Oifname | Key::Iifname, Some(Val::Str(name))) => {
            let pat = name
                .strip_suffix('*')
                .map_or(name.clone(), |p| format!("{p}+"));
            if *key == Key::Oifname {
                Test::OutIface(pat)
            } else {
                Test::InIface(pat)
            }
        }
        _ => return None,
    })
}

/// `Some(true)` for `meta mark`, `Some(false)` for `ct mark`.
pub(super) fn mark_key(v: &Value) -> Option<bool> {
    let key = |kind: &str| v.get(kind)?.get("key")?.as_str();
    match (key("meta"), key("ct")) {
        (Some("mark"), _) => Some(true),
        (_, Some("mark")) => Some(false),
        _ => None,
    }
}

pub(super) fn port(n: u64) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// `tcp dport` implies `meta l4proto tcp`.
pub(super) fn keys_proto(left: &Value) -> Option<u8> {
    let proto = left.get("payload")?.get("protocol")?.as_str()?;
    match proto {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        _ => None,
    }
}

pub(super) fn unknown(m: &Value) -> Cond {
    Cond {
        negated: false,
        test: Test::Unknown(m.to_string()),
    }
}

/// The packet fields of a key expression (one, or a `concat`).
pub(super) fn keys_of(v: &Value) -> Vec<Key> {
    if let Some(parts) = v.get("concat").and_then(Value::as_array) {
        return parts.iter().flat_map(keys_of).collect();
    }
    let key = if let Some(p) = v.get("payload") {
        let field = p.get("field").and_then(Value::as_str).unwrap_or("");
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("");
        match (proto, field) {
            ("ip" | "ip6", "saddr") => Key::Saddr,
            ("ip" | "ip6", "daddr") => Key::Daddr,
            ("ip", "protocol") | ("ip6", "nexthdr") => Key::L4proto,
            ("th" | "tcp" | "udp" | "sctp", "dport") => Key::Dport,
            ("th" | "tcp" | "udp" | "sctp", "sport") => Key::Sport,
            _ => Key::Other(format!("{proto} {field}")),
        }
    } else if let Some(m) = v.get("meta") {
        match m.get("key").and_then(Value::as_str).unwrap_or("") {
            "l4proto" => Key::L4proto,
            "mark" => Key::Mark,
            "iifname" => Key::Iifname,
            "oifname" => Key::Oifname,
            other => Key::Other(format!("meta {other}")),
        }
    } else {
        Key::Other(v.to_string())
    };
    vec![key]
}

/// One value: an address, prefix, range, number, protocol or service name, interface.
pub(super) fn value(v: &Value) -> Option<Val> {
    match v {
        Value::Number(n) => n.as_u64().map(|n| Val::Num(n, n)),
        Value::String(s) => Some(if let Some(p) = proto_number(s) {
            Val::Num(p, p)
        } else if let Some(c) = Cidr::parse(s) {
            Val::Net(c)
        } else {
            Val::Str(s.clone())
        }),
        Value::Object(o) => {
            if let Some(p) = o.get("prefix") {
                let addr = p.get("addr")?.as_str()?;
                let len = p.get("len")?.as_u64()?;
                Cidr::parse(&format!("{addr}/{len}")).map(Val::Net)
            } else if let Some(r) = o.get("range").and_then(Value::as_array) {
                match (value(r.first()?)?, value(r.get(1)?)?) {
                    (Val::Net(a), Val::Net(b)) => Some(Val::Range(a.addr, b.addr)),
                    (Val::Num(a, _), Val::Num(b, _)) => Some(Val::Num(a, b)),
                    _ => None,
                }
            } else if let Some(e) = o.get("elem") {
                value(e.get("val")?)
            } else {
                None
            }
        }
        _ => None,
    }
}

pub(super) fn proto_number(s: &str) -> Option<u64> {
    Some(match s {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "sctp" => 132,
        "icmpv6" => 58,
        _ => return None,
    })
}

/// Set elements: each a value or a `concat` of values.
pub(super) fn elems(v: Option<&Value>) -> Vec<Vec<Val>> {
    let Some(list) = v.and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter().filter_map(elem).collect()
}

pub(super) fn elem(v: &Value) -> Option<Vec<Val>> {
    let v = v.get("elem").and_then(|e| e.get("val")).unwrap_or(v);
    match v.get("concat").and_then(Value::as_array) {
        Some(parts) => parts.iter().map(value).collect(),
        None => value(v).map(|x| vec![x]),
    }
}
