//! A connection that got no answer (`journey::unanswered::NoAnswer`) as the text line (`-o text`, `-o line`) and
//! as the JSON line's type ([`NoAnswerLine`]).
//!
//! ```text
//! ? no answer  tcp 10.13.76.46:41234 > 203.0.113.80:81 (after SNAT 10.13.76.4:41234): left eth0 at 12:00:01.123, no answer in 3 s
//! ```

use std::fmt::Write as _;

use super::{
    json::contract::NoAnswerLine,
    wall::{rfc3339, time_of_day_ms},
};
use crate::{
    drops::FailureClass,
    journey::{endpoint, unanswered::NoAnswer},
    util::{safe, tuple::proto_name},
};

/// The text line, without the newline: the connection as the pod sent it, what NAT made of
/// it, where and when it left (UTC), how long it waited, and its NAT rule when named.
#[must_use]
pub fn text_line(n: &NoAnswer) -> String {
    let (entered, left) = (&n.entered, &n.left);
    let mut line = format!(
        "? no answer  {} {} > {}",
        proto_name(entered.proto),
        endpoint(entered, true),
        endpoint(entered, false)
    );
    let mut nat = Vec::new();
    if endpoint(entered, false) != endpoint(left, false) {
        nat.push(format!("DNAT {}", endpoint(left, false)));
    }
    if endpoint(entered, true) != endpoint(left, true) {
        nat.push(format!("SNAT {}", endpoint(left, true)));
    }
    if !nat.is_empty() {
        let _ = write!(line, " (after {})", nat.join(", "));
    }
    let _ = write!(
        line,
        ": left {} at {}, no answer in {} s",
        n.iface.as_deref().map_or_else(|| "?".to_owned(), safe),
        time_of_day_ms(n.left_unix_ns),
        n.waited_ns / 1_000_000_000
    );
    if let Some(a) = &n.attribution {
        let _ = write!(line, "; rule {}", safe(&a.rule));
        if let Some(service) = &a.service {
            let _ = write!(line, " ({})", safe(service));
        }
    }
    line
}

/// The JSON line of `n` for the traced `pod` (and `svc` with `--svc`).
#[must_use]
pub fn json_line(n: &NoAnswer, pod: &str, svc: Option<&str>) -> NoAnswerLine {
    let (entered, left) = (&n.entered, &n.left);
    let changed = |source: bool| {
        let before = endpoint(entered, source);
        (before != endpoint(left, source)).then_some(before)
    };
    let a = n.attribution.as_deref();
    NoAnswerLine {
        proto: proto_name(entered.proto),
        pod: pod.to_owned(),
        svc: svc.map(str::to_owned),
        src: endpoint(left, true),
        dst: endpoint(left, false),
        orig_src: changed(true),
        orig_dst: changed(false),
        iface: n.iface.as_deref().map(str::to_owned),
        left_at: rfc3339(n.left_unix_ns),
        left_ktime_ns: n.left_ktime_ns,
        waited_ms: n.waited_ns / 1_000_000,
        rule: a.map(|a| a.rule.clone()),
        service: a.and_then(|a| a.service.clone()),
        class: Some(FailureClass::NoAnswer.as_str().to_owned()),
        why: Some(why(n)),
    }
}

/// One sentence: where the connection's first packet went, as what, and what to look at.
fn why(n: &NoAnswer) -> String {
    let left = &n.left;
    let dst = endpoint(left, false);
    let mut why = format!(
        "{} {} > {dst} left the node by {} and nothing came back in {} s",
        proto_name(left.proto),
        endpoint(left, true),
        n.iface.as_deref().unwrap_or("an unknown interface"),
        n.waited_ns / 1_000_000_000
    );
    if endpoint(&n.entered, true) != endpoint(left, true) {
        let _ = write!(
            why,
            " (its source translated to {} on the way out)",
            endpoint(left, true)
        );
    }
    let _ = write!(
        why,
        "; look at the route and firewalls towards {dst} beyond this node, and whether \
         {dst} serves this port"
    );
    why
}

#[cfg(test)]
mod tests;
