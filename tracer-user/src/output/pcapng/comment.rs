//! The comment (`opt_comment`) of each packet `-w` writes: the journey it belongs to, in words.
//!
//! ```text
//! pktrace journey 12, packet 2/3: egress azva4124965a9b | pod default/ubuntu | DNAT 10.0.159.58:80 -> 10.13.76.26:80 by KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami)
//! ```
//!
//! One line, its parts separated by ` | ` (so that `tshark -T fields -e frame.comment` prints a
//! line per packet). The first part places the packet: the journey's number (the nth journey of the run, as the
//! text or JSON output of the same run counts them) and the packet's place among the journey's
//! tc steps, which are its packets in the file. Then the pod, then every NAT change of the
//! journey with its rule and service, the rule that left it untranslated where one was named,
//! the drop's reason, location and rule when the kernel dropped it, and how it ended when that
//! was not leaving the node.

use std::fmt::Write as _;

use tracer_common::TcHook;

use crate::journey::{DropStep, Ending, Journey, NatChange, NatPoint, Step, StepKind, endpoint};

/// The lines every packet of `j` shares: its NAT changes and rules, and its ending.
#[must_use]
pub fn journey_lines(j: &Journey) -> Vec<String> {
    let mut lines: Vec<String> = j.steps.iter().filter_map(step_line).collect();
    let ending = match j.ending {
        // A packet that left needs no word; a drop step's own line says where and why.
        Ending::Left | Ending::Dropped => None,
        Ending::TimedOut => Some("ended: timed out (no later hook saw the packet within 1 s)"),
        Ending::Flushed => Some("ended: still open when pktrace stopped"),
        Ending::InterfaceGone => Some("ended: its interface went away"),
    };
    lines.extend(ending.map(str::to_owned));
    lines
}

/// What a step adds to the comment: a NAT change, or the rule that left the packet untranslated.
fn step_line(step: &Step) -> Option<String> {
    match &step.kind {
        StepKind::Nat(n) => Some(nat_line(step, n)),
        StepKind::Drop(d) => Some(drop_line(step, d)),
        StepKind::Tc { .. } => step
            .attribution
            .as_ref()
            .map(|a| a.why.clone().unwrap_or_else(|| a.rule.clone())),
    }
}

/// `dropped no_endpoints: NETFILTER_DROP at nft_do_chain by KUBE-SERVICES … (default/web-gone):
/// …`: the failure class, the kernel's reason and location, then the rule, service and why
/// where the replay named them.
fn drop_line(step: &Step, d: &DropStep) -> String {
    let mut line = format!("dropped {}: {} at {}", d.class, d.reason, d.location);
    if let Some(a) = &step.attribution {
        let _ = write!(line, " by {}", a.rule);
        if let Some(service) = &a.service {
            let _ = write!(line, " ({service})");
        }
        if let Some(why) = &a.why {
            let _ = write!(line, ": {why}");
        }
    }
    line
}

/// `DNAT 10.0.159.58:80 -> 10.13.76.26:80 by KUBE-SEP-… (default/whereami)`: the side the step
/// changed, before and after.
fn nat_line(step: &Step, n: &NatChange) -> String {
    let mut line = crate::output::nat_word(n.point == NatPoint::Dnat, n.reply).to_owned();
    let (before, after) = (&n.orig, &step.tuple);
    let (s0, s1) = (endpoint(before, true), endpoint(after, true));
    let (d0, d1) = (endpoint(before, false), endpoint(after, false));
    let _ = match (s0 != s1, d0 != d1) {
        (false, true) => write!(line, " {d0} -> {d1}"),
        (true, false) => write!(line, " {s0} -> {s1}"),
        (true, true) => write!(line, " {s0} > {d0} -> {s1} > {d1}"),
        (false, false) => write!(line, " {s1} > {d1} unchanged"),
    };
    if let Some(a) = &step.attribution {
        let _ = write!(line, " by {}", a.rule);
        if let Some(service) = &a.service {
            let _ = write!(line, " ({service})");
        }
    }
    line
}

/// Between the comment's parts.
pub const SEP: &str = " | ";

/// The whole comment of the tc step `step`, packet `nth` of `of` of journey `id`.
#[must_use]
pub fn comment(
    id: u64,
    (nth, of): (usize, usize),
    step: &Step,
    pod: &str,
    shared: &[String],
) -> String {
    let hook = match &step.kind {
        StepKind::Tc {
            hook: TcHook::Ingress,
            ..
        } => "ingress",
        _ => "egress",
    };
    let iface = step.iface().unwrap_or("?");
    let mut text = format!("pktrace journey {id}, packet {nth}/{of}: {hook} {iface} | pod {pod}");
    for line in shared {
        text.push_str(SEP);
        text.push_str(line);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tracer_common::PROTO_TCP;

    use super::*;
    use crate::{
        journey::{Attribution, Point},
        output::test_support::{nat, t, tc},
    };

    fn attributed(mut s: Step, rule: &str, service: Option<&str>) -> Step {
        s.attribution = Some(Arc::new(Attribution {
            rule: rule.into(),
            service: service.map(Into::into),
            why: None,
        }));
        s
    }

    /// The pod's packet to a ClusterIP, DNATed then masqueraded out of the node.
    fn journey() -> Journey {
        let a = t(PROTO_TCP, "10.13.76.46:41234", "10.0.159.58:80");
        let b = t(PROTO_TCP, "10.13.76.46:41234", "203.0.113.9:80");
        let c = t(PROTO_TCP, "10.0.0.4:41234", "203.0.113.9:80");
        Journey {
            steps: vec![
                tc(Point::Ingress, "azv47c3ee9d512", a, 0),
                attributed(
                    nat(Point::Dnat, a, b, 10, Some(2_000)),
                    "KUBE-SEP-6HBOEI5FVFTJNRJ3",
                    Some("default/whereami"),
                ),
                attributed(nat(Point::Snat, b, c, 20, None), "KUBE-POSTROUTING", None),
                tc(Point::Egress, "eth0", c, 30),
            ],
            ending: Ending::Left,
        }
    }

    #[test]
    fn every_nat_change_with_its_rule_and_service() {
        let lines = journey_lines(&journey());
        assert_eq!(
            lines,
            [
                "DNAT 10.0.159.58:80 -> 203.0.113.9:80 by KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami)",
                "SNAT 10.13.76.46:41234 -> 10.0.0.4:41234 by KUBE-POSTROUTING",
            ]
        );
        let j = journey();
        let text = comment(12, (2, 2), &j.steps[3], "default/ubuntu", &lines);
        assert_eq!(
            text,
            "pktrace journey 12, packet 2/2: egress eth0 | pod default/ubuntu | \
             DNAT 10.0.159.58:80 -> 203.0.113.9:80 by KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami) | \
             SNAT 10.13.76.46:41234 -> 10.0.0.4:41234 by KUBE-POSTROUTING"
        );
        let first = comment(12, (1, 2), &j.steps[0], "default/ubuntu", &[]);
        assert_eq!(
            first,
            "pktrace journey 12, packet 1/2: ingress azv47c3ee9d512 | pod default/ubuntu"
        );
    }

    #[test]
    fn replies_untranslated_exits_and_endings_are_said() {
        let out = t(PROTO_TCP, "203.0.113.9:80", "10.0.0.4:41234");
        let back = t(PROTO_TCP, "203.0.113.9:80", "10.13.76.46:41234");
        let mut reply = nat(Point::Snat, out, back, 5, None);
        reply.nat_mut().reply = true;
        let mut egress = tc(Point::Egress, "azv47c3ee9d512", back, 9);
        egress.attribution = Some(Arc::new(Attribution {
            rule: "IP-MASQ-AGENT".into(),
            service: None,
            why: Some("no SNAT: 10.13.76.46 is in a nonMasqueradeCIDR".into()),
        }));
        let j = Journey {
            steps: vec![tc(Point::Ingress, "eth0", out, 0), reply, egress],
            ending: Ending::TimedOut,
        };
        assert_eq!(
            journey_lines(&j),
            [
                "un-SNAT 10.0.0.4:41234 -> 10.13.76.46:41234",
                "no SNAT: 10.13.76.46 is in a nonMasqueradeCIDR",
                "ended: timed out (no later hook saw the packet within 1 s)",
            ]
        );
    }
}
