//! `-o text`: a block per journey for people reading over ssh, within 80 columns for IPv4.
//!
//! ```text
//! tcp 10.13.76.46:41234 > 10.0.159.58:80  9.41µs
//!   +0ns     ingress azv47c3ee9d512
//!   +3.12µs  DNAT    dst 10.0.159.58:80 → 10.13.76.26:80 (2.71µs)
//!                    DNAT by KUBE-SEP-6HBOEI5FVFTJNRJ3 (service default/whereami
//!                    via KUBE-SVC-7G2JV7LNOR6DDNIY, 1 of 2 endpoints)
//!   +9.41µs  egress  azva4124965a9b
//! ```
//! `a > b` is source > destination, `x → y` what NAT changed `x` into; a reply translated
//! back is `un-DNAT`/`un-SNAT`, as in `-o line` and the pcapng comments.
//! Names from the kernel or files go through [`crate::util::safe`]; colours only when asked for.

use std::{
    fmt::Write as _,
    io::{self, Write},
};

use super::{Sink, count, human_ns, nat_word, no_answer};
use crate::{
    journey::{
        Ending, Journey, Point, Step, endpoint,
        unanswered::{NoAnswer, WAIT_NS},
    },
    summary::{Stats, Summary},
    util::safe,
};

const WIDTH: usize = 80;
/// Column where a step's detail starts: `  ` + Δt (8) + ` ` + point (7) + ` `.
const DETAIL_COL: usize = 19;

const BOLD: &str = "\x1b[1m";
const NAT: &str = "\x1b[33m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// Writes text blocks.
pub struct TextSink {
    out: Box<dyn Write + Send>,
    color: bool,
    pod: String,
}

impl TextSink {
    /// A sink writing to `out`, with ANSI colours when `color`; `pod` names the target in the
    /// summary.
    #[must_use]
    #[expect(
        clippy::needless_pass_by_value,
        reason = "public constructor taking the pod name owned; kept (a signature change)"
    )]
    pub fn new(out: Box<dyn Write + Send>, color: bool, pod: String) -> Self {
        Self {
            out,
            color,
            pod: safe(&pod),
        }
    }

    /// `text` wrapped in `style` when colouring.
    fn paint(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("{style}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    /// The output, for a sink that writes its own journey lines and this one's other lines
    /// (`-o line`).
    pub(super) fn out(&mut self) -> &mut (dyn Write + Send) {
        &mut *self.out
    }

    fn emit(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    fn step_lines(&self, step: &Step, start_ns: u64, out: &mut String) {
        // A step the hook saw at or before its time (a first packet's claimed ingress).
        let bound = if step.time_bound() { "≤" } else { "" };
        let dt = format!(
            "{bound}+{}",
            human_ns(step.ktime_ns.saturating_sub(start_ns))
        );
        let point = match step.point() {
            p if p.is_nat() => nat_word(p == Point::Dnat, step.reply()),
            p => p.as_str(),
        };
        let line = if let Some(d) = step.dropped() {
            format!(
                "  {dt:<8} ✗ drop {}: {} at {}",
                d.class,
                safe(&d.reason),
                safe(&d.location)
            )
        } else if step.point().is_nat() {
            format!("  {dt:<8} {point:<7} {}", nat_detail(step))
        } else {
            let iface = step.iface().map_or_else(|| "?".to_owned(), safe);
            format!("  {dt:<8} {point:<7} {iface}")
        };
        let style = match step.point() {
            Point::Drop => RED,
            p if p.is_nat() => NAT,
            _ => "",
        };
        out.push_str(&self.paint(style, &line));
        out.push('\n');
        for extra in attribution_lines(step) {
            out.push_str(&self.paint(DIM, &extra));
            out.push('\n');
        }
    }
}

/// `dst 10.0.159.58:80 → 10.13.76.26:80 (2.71µs)`: only the side NAT changed.
fn nat_detail(step: &Step) -> String {
    let after = &step.tuple;
    let before = step.orig().unwrap_or(after);
    let (s0, s1) = (endpoint(before, true), endpoint(after, true));
    let (d0, d1) = (endpoint(before, false), endpoint(after, false));
    let change = match (s0 != s1, d0 != d1) {
        (false, true) => format!("dst {d0} → {d1}"),
        (true, false) => format!("src {s0} → {s1}"),
        (true, true) => format!("{s0} > {d0} → {s1} > {d1}"),
        (false, false) => format!("{s1} > {d1} unchanged"),
    };
    match step.latency_ns() {
        Some(ns) => format!("{change} ({})", human_ns(ns)),
        None => change,
    }
}

/// The rule, service and reason of a NAT step, wrapped under the detail column.
fn attribution_lines(step: &Step) -> Vec<String> {
    let Some(a) = &step.attribution else {
        return Vec::new();
    };
    let mut text = safe(&a.rule);
    if let Some(service) = &a.service {
        let _ = write!(text, ", service {}", safe(service));
    }
    match a.why.as_deref().map(safe) {
        Some(why) if why.contains(&safe(&a.rule)) => text = why,
        Some(why) => {
            let _ = write!(text, ": {why}");
        }
        None => {}
    }
    wrap(&text, DETAIL_COL, WIDTH)
}

/// Splits `text` at spaces into lines of at most `width` columns, each indented by `indent`;
/// a word longer than a line gets a line of its own.
fn wrap(text: &str, indent: usize, width: usize) -> Vec<String> {
    let pad = " ".repeat(indent);
    let room = width.saturating_sub(indent).max(20);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > room {
            lines.push(format!("{pad}{line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(format!("{pad}{line}"));
    }
    lines
}

/// `tcp 10.13.76.46:41234 > 10.0.159.58:80  9.41µs`, plus how it ended unless it left.
fn header(j: &Journey, first: &Step) -> String {
    let orig = if first.point().is_nat() {
        first.orig().unwrap_or(&first.tuple)
    } else {
        &first.tuple
    };
    let ending = match j.ending {
        Ending::Left => "",
        Ending::TimedOut => "  (timed out)",
        Ending::Flushed => "  (still open at exit)",
        Ending::InterfaceGone => "  (interface gone)",
        Ending::Dropped => "  (dropped)",
    };
    format!(
        "{} {} > {}  {}{ending}",
        j.proto(),
        endpoint(orig, true),
        endpoint(orig, false),
        human_ns(j.transit_ns())
    )
}

/// The summary's warnings: what was lost, skipped or closed early.
fn summary_warnings(s: &Summary) -> Vec<String> {
    let mut warns = Vec::new();
    if s.lost_events() > 0 {
        warns.push(format!(
            "!! {} {} lost (ring buffer full): some journeys are incomplete",
            count(s.lost_events(), "event"),
            were(s.lost_events())
        ));
    }
    if s.bad_records() > 0 {
        warns.push(format!(
            "!! {} ring-buffer records were not events this pktrace knows (eBPF object and \
             binary from different builds?): they were skipped",
            s.bad_records()
        ));
    }
    if s.evicted_journeys() > 0 {
        warns.push(format!(
            "!! {} {} closed early (join table full): they may be incomplete",
            count(s.evicted_journeys(), "journey"),
            were(s.evicted_journeys())
        ));
    }
    if s.evicted_connections() > 0 {
        warns.push(format!(
            "!! {} connections were no longer awaited (no-answer table full): they are not \
             reported if unanswered",
            s.evicted_connections()
        ));
    }
    if s.evicted_flows() > 0 {
        warns.push(format!(
            "!! {} followed flows (one per direction) were evicted from the kernel's flow table \
             (full): their packets after NAT may be missing",
            s.evicted_flows()
        ));
    }
    warns
}

/// `was` for one, `were` for more.
const fn were(n: u64) -> &'static str {
    if n == 1 { "was" } else { "were" }
}

/// The summary's failures: by class, drops by reason, connections without an answer, and
/// refusals.
fn failure_lines(s: &Summary, block: &mut String) {
    let classes = s.classes();
    if !classes.is_empty() {
        let classes: Vec<String> = classes.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(block, "  failures: {}", classes.join(", "));
    }
    if !s.drops().is_empty() {
        let drops: Vec<String> = s.drops().iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(block, "  drops: {}", safe(&drops.join(", ")));
    }
    let _ = write!(block, "  no answer: {}", s.no_answer());
    if s.no_answer_waiting() > 0 {
        let _ = write!(
            block,
            " ({} more still waiting at exit, for less than {} s: not reported)",
            s.no_answer_waiting(),
            WAIT_NS / 1_000_000_000
        );
    }
    block.push('\n');
    let r = s.refusals();
    if r.reset + r.icmp_error > 0 {
        let _ = writeln!(
            block,
            "  refused: reset {}, icmp error {}",
            r.reset, r.icmp_error
        );
    }
}

fn stats_line(name: &str, s: Stats) -> String {
    // Steps seen but not timed (conntrack's events): no times to show.
    let time = |ns| {
        if s.measured == 0 && s.count > 0 {
            "-".to_owned()
        } else {
            human_ns(ns)
        }
    };
    format!(
        "  {name:<8}{:>9}{:>10}{:>10}{:>10}\n",
        s.count,
        time(s.p50_ns),
        time(s.p99_ns),
        time(s.max_ns)
    )
}

impl Sink for TextSink {
    fn journey(&mut self, j: &Journey) -> io::Result<()> {
        let Some(first) = j.steps.first() else {
            return Ok(());
        };
        let mut block = self.paint(BOLD, &header(j, first));
        block.push('\n');
        for step in &j.steps {
            self.step_lines(step, first.ktime_ns, &mut block);
        }
        block.push('\n');
        self.out.write_all(block.as_bytes())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()> {
        let line = format!(
            "!! lost {} ({lost_total} total): the ring buffer was full; journeys may be \
             incomplete",
            count(lost_new, "event")
        );
        let line = self.paint(RED, &line);
        self.emit(&format!("{line}\n"))
    }

    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()> {
        let line = format!(
            "!! closed {} early ({total} total): the join table was full; they may be \
             incomplete",
            count(new, "journey")
        );
        let line = self.paint(RED, &line);
        self.emit(&format!("{line}\n"))
    }

    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()> {
        let line = format!(
            "!! at least {new} followed flows evicted (at least {total} total, one per direction): \
             the kernel's flow table was full; their packets after NAT may be missing"
        );
        let line = self.paint(RED, &line);
        self.emit(&format!("{line}\n"))
    }

    fn no_answer(&mut self, n: &NoAnswer) -> io::Result<()> {
        let line = self.paint(RED, &no_answer::text_line(n));
        self.emit(&format!("{line}\n"))
    }

    fn evicted_connections(&mut self, new: u64, total: u64) -> io::Result<()> {
        let line = format!(
            "!! stopped waiting for the answer of {new} connections ({total} total): the \
             no-answer table was full; they are not reported if unanswered"
        );
        let line = self.paint(RED, &line);
        self.emit(&format!("{line}\n"))
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        let title = format!(
            "summary for {}: {}, {}, {}",
            self.pod,
            count(s.journeys(), "journey"),
            count(s.events(), "event"),
            count(s.lost_events(), "lost event")
        );
        let mut block = self.paint(BOLD, &title);
        block.push('\n');
        let _ = writeln!(
            block,
            "  {:<8}{:>9}{:>10}{:>10}{:>10}",
            "", "count", "p50", "p99", "max"
        );
        block.push_str(&stats_line("dnat", s.dnat()));
        block.push_str(&stats_line("snat", s.snat()));
        block.push_str(&stats_line("transit", s.transit()));
        failure_lines(s, &mut block);
        for warn in summary_warnings(s) {
            block.push_str(&self.paint(RED, &warn));
            block.push('\n');
        }
        self.emit(&block)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tracer_common::{PROTO_ICMP, PROTO_UDP};

    use super::*;
    use crate::{
        config::Format,
        journey::{Attribution, Point},
        output::test_support::{Shared, nat, t, tc, whereami},
    };

    fn render(color: bool, f: impl FnOnce(&mut dyn Sink)) -> String {
        let buf = Shared::default();
        let mut sink = super::super::sink(
            Format::Text,
            color,
            "default/ubuntu".into(),
            Box::new(buf.clone()),
        );
        f(sink.as_mut());
        buf.text()
    }

    #[test]
    fn journey_block() {
        let want = "\
tcp 10.13.76.46:41234 > 10.0.159.58:80  9.41µs
  +0ns     ingress azv47c3ee9d512
  +3.12µs  DNAT    dst 10.0.159.58:80 → 10.13.76.26:80 (2.71µs)
                   DNAT by KUBE-SEP-6HBOEI5FVFTJNRJ3 (service default/whereami
                   via KUBE-SVC-7G2JV7LNOR6DDNIY, 1 of 2 endpoints)
  +9.41µs  egress  azva4124965a9b

";
        let got = render(false, |s| s.journey(&whereami()).unwrap());
        assert_eq!(got, want);
        assert!(got.lines().all(|l| l.chars().count() <= WIDTH), "{got}");
    }

    #[test]
    fn step_variants() {
        let icmp = t(PROTO_ICMP, "10.13.76.46:7", "203.0.113.80:7");
        let masq = t(PROTO_ICMP, "10.13.76.4:7", "203.0.113.80:7");
        let v6 = t(PROTO_UDP, "[fd00::2e]:5353", "[fd00::a]:53");
        let mut reply = nat(Point::Snat, masq.reversed(), icmp.reversed(), 50, Some(900));
        reply.nat_mut().reply = true;
        reply.attribution = Some(Arc::new(Attribution {
            rule: "IP-MASQ-AGENT".into(),
            service: None,
            why: None,
        }));
        let mut unknown_iface = tc(Point::Egress, "", v6, 70);
        *unknown_iface.iface_mut() = None;
        let both = nat(Point::Dnat, icmp, masq.reversed(), 80, None);
        let mut no_rule_in_why = nat(Point::Snat, icmp, masq, 90, None);
        no_rule_in_why.attribution = Some(Arc::new(Attribution {
            rule: "POSTROUTING".into(),
            service: Some("ns/svc".into()),
            why: Some("assumed".into()),
        }));
        let cases: Vec<(Step, &str)> = vec![
            (
                nat(Point::Snat, icmp, masq, 40, None),
                "  +30ns    SNAT    src 10.13.76.46 → 10.13.76.4\n",
            ),
            (
                reply,
                "  +40ns    un-SNAT dst 10.13.76.4 → 10.13.76.46 (900ns)\n                   IP-MASQ-AGENT\n",
            ),
            (
                tc(Point::Ingress, "azv\u{1b}[2J", v6, 60),
                "  +50ns    ingress azv\\u{1b}[2J\n",
            ),
            (unknown_iface, "  +60ns    egress  ?\n"),
            (
                both,
                "  +70ns    DNAT    10.13.76.46 > 203.0.113.80 → 203.0.113.80 > 10.13.76.4\n",
            ),
            (
                nat(Point::Dnat, icmp, icmp, 80, None),
                "  +70ns    DNAT    10.13.76.46 > 203.0.113.80 unchanged\n",
            ),
            (
                no_rule_in_why,
                "  +80ns    SNAT    src 10.13.76.46 → 10.13.76.4\n                   POSTROUTING, service ns/svc: assumed\n",
            ),
        ];
        let first = tc(Point::Ingress, "azv47c3ee9d512", icmp, 10);
        for (step, want) in cases {
            let j = Journey {
                steps: vec![first.clone(), step],
                ending: Ending::TimedOut,
            };
            let got = render(false, |s| s.journey(&j).unwrap());
            let (head, rest) = got
                .split_once("  +0ns     ingress azv47c3ee9d512\n")
                .unwrap();
            assert!(head.starts_with("icmp 10.13.76.46 > 203.0.113.80"), "{got}");
            assert!(head.ends_with("(timed out)\n"), "{got}");
            assert_eq!(rest, format!("{want}\n"));
        }
    }

    #[test]
    fn a_journey_closed_for_its_interface_is_marked() {
        let icmp = t(PROTO_ICMP, "10.13.76.46:0", "203.0.113.80:0");
        let j = Journey {
            steps: vec![tc(Point::Ingress, "azv47c3ee9d512", icmp, 10)],
            ending: Ending::InterfaceGone,
        };
        let got = render(false, |s| s.journey(&j).unwrap());
        assert!(
            got.lines()
                .next()
                .is_some_and(|l| l.ends_with("(interface gone)")),
            "{got}"
        );
    }

    #[test]
    fn a_dropped_journey_ends_with_its_drop_line() {
        let udp = t(PROTO_UDP, "10.13.76.46:41234", "10.13.76.4:9");
        let j = Journey {
            steps: vec![
                tc(Point::Ingress, "azv47c3ee9d512", udp, 10),
                Step::drop_at("NO_SOCKET", "__udp4_lib_rcv", udp, 67_610),
            ],
            ending: Ending::Dropped,
        };
        let got = render(false, |s| s.journey(&j).unwrap());
        let lines: Vec<&str> = got.lines().collect();
        assert!(lines[0].ends_with("(dropped)"), "{got}");
        assert_eq!(
            lines[2], "  +67.6µs  ✗ drop no_socket: NO_SOCKET at __udp4_lib_rcv",
            "{got}"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let plain = render(false, |s| {
            s.journey(&whereami()).unwrap();
            s.loss(3, 10).unwrap();
        });
        assert!(!plain.contains('\u{1b}'));
        assert!(plain.ends_with(
            "!! lost 3 events (10 total): the ring buffer was full; journeys may be incomplete\n"
        ));
        let coloured = render(true, |s| {
            s.journey(&whereami()).unwrap();
            s.loss(3, 10).unwrap();
        });
        assert!(coloured.contains(&format!("{NAT}  +3.12µs  DNAT")));
        assert!(coloured.contains(&format!("{RED}!! lost 3 events")));
    }

    #[test]
    fn summary_block() {
        let mut s = Summary::new();
        s.record(&whereami());
        s.add_events(3);
        let got = render(false, |sink| sink.summary(&s).unwrap());
        let want = "\
summary for default/ubuntu: 1 journey, 3 events, 0 lost events
              count       p50       p99       max
  dnat            1    2.71µs    2.71µs    2.71µs
  snat            0       0ns       0ns       0ns
  transit         1    9.41µs    9.41µs    9.41µs
  no answer: 0
";
        assert_eq!(got, want);
        s.set_lost(4);
        let got = render(false, |sink| sink.summary(&s).unwrap());
        assert!(
            got.ends_with(
                "!! 4 events were lost (ring buffer full): some journeys are incomplete\n"
            )
        );
        s.set_evicted(2);
        let got = render(false, |sink| {
            sink.evicted(2, 2).unwrap();
            sink.summary(&s).unwrap();
        });
        assert!(got.starts_with(
            "!! closed 2 journeys early (2 total): the join table was full; they may be incomplete\n"
        ));
        assert!(got.ends_with(
            "!! 2 journeys were closed early (join table full): they may be incomplete\n"
        ));
        s.set_evicted_flows(7);
        let got = render(false, |sink| {
            sink.evicted_flows(3, 7).unwrap();
            sink.summary(&s).unwrap();
        });
        assert!(got.starts_with(
            "!! at least 3 followed flows evicted (at least 7 total, one per direction): the \
             kernel's flow table was full; their packets after NAT may be missing\n"
        ));
        assert!(got.ends_with(
            "!! 7 followed flows (one per direction) were evicted from the kernel's flow table \
             (full): their packets after NAT may be missing\n"
        ));
    }

    #[test]
    fn pod_label_is_printed_safely() {
        let buf = Shared::default();
        let mut sink = TextSink::new(
            Box::new(buf.clone()),
            false,
            "default/\u{1b}]0;pwned\u{7}".into(),
        );
        sink.summary(&Summary::new()).unwrap();
        assert!(
            buf.text()
                .starts_with("summary for default/\\u{1b}]0;pwned\\u{7}:"),
            "{}",
            buf.text()
        );
    }

    #[test]
    fn wrapping() {
        let cases: &[(&str, usize, usize, &[&str])] = &[
            ("a b c", 2, 80, &["  a b c"]),
            ("", 2, 80, &[]),
            ("aaaa bbbb cccc", 0, 20, &["aaaa bbbb cccc"]),
            (
                "aaaaaaaaaa bbbbbbbbbb cccccccccc",
                0,
                20,
                &["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"],
            ),
            (
                "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                1,
                20,
                &[" xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"],
            ),
        ];
        for (text, indent, width, want) in cases {
            assert_eq!(wrap(text, *indent, *width), *want, "{text:?}");
        }
    }
}
