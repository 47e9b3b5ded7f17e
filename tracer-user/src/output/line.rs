//! `-o line`: one line per journey, like tcpdump's, then the text summary.
//!
//! ```text
//! 20:41:07.123456 tcp 10.13.76.46:41234 > 10.0.159.58:80 → = > 10.13.76.26:80 azv47c3ee9d512→azva4124965a9b 9.41µs DNAT KUBE-SEP-6HBOEI5FVFTJNRJ3 (default/whereami)
//! ```
//!
//! Fields, in order: the wall-clock time of the journey's first step (UTC,
//! `HH:MM:SS.micro`); the protocol; the packet as it entered; `→` and the packet as it left
//! when NAT changed it, an endpoint NAT left alone written `=`; the interfaces it entered and
//! left by (`?` when no tc hook saw that end); the time from the first step to the last
//! (`≥` when the first step's time is a bound: a first packet's claimed uplink ingress); each
//! NAT step with its rule (`?` when unknown) and service, a reply's reverse translation as
//! `un-DNAT`/`un-SNAT`; and how it ended unless it left the node.
//!
//! Written to a file or a pipe, every line is whole (a DNAT journey in the lab takes about 150
//! columns). Written to a terminal, a line wider than the terminal gives up, in this order,
//! until it fits: the interfaces; then the microseconds of its time, the translation written
//! inside the packet (`10.0.159.58:80→10.13.76.26:80`), a known service instead of its rule
//! and a drop's kernel function; then the rules and services (the NAT's kind stays); then its
//! end, cut with `…`. The lab's DNAT journey in 80 columns:
//!
//! ```text
//! 20:41:07.123 tcp 10.13.76.46:41234 > 10.0.159.58:80→10.13.76.26:80 9.41µs DNAT
//! ```

use std::{
    fmt::Write as _,
    io::{self, Write},
    time::{SystemTime, UNIX_EPOCH},
};

use super::{
    Sink, human_ns,
    text::TextSink,
    wall::{time_of_day_ms, time_of_day_us},
};
use crate::{
    journey::{
        Attribution, Ending, Journey, NatPoint, Step, StepKind, endpoint, unanswered::NoAnswer,
    },
    kernel,
    summary::Summary,
    util::{safe, terminal},
};

/// Writes one line per journey; losses, evictions and the summary as [`TextSink`] does.
pub struct LineSink {
    text: TextSink,
    /// Wall-clock nanoseconds since the Unix epoch minus the kernel's monotonic clock: added
    /// to a step's `ktime_ns` it gives the step's wall-clock time.
    wall_offset_ns: i128,
    /// The terminal's width in columns, when the lines go to a terminal.
    width: Option<usize>,
    line: String,
}

/// Cuts `line` to `width` characters, its last one `…`, if it is wider.
fn cut_to(line: &mut String, width: usize) {
    if line.chars().count() > width {
        let keep = line
            .char_indices()
            .nth(width.saturating_sub(1))
            .map_or(line.len(), |(i, _)| i);
        line.truncate(keep);
        line.push('…');
    }
}

impl LineSink {
    /// A sink writing to `out`; `color` and `pod` as for [`TextSink`] (the summary's). Lines
    /// fit the terminal's width when stdout is a terminal (see the module's documentation).
    #[must_use]
    pub fn new(out: Box<dyn Write + Send>, color: bool, pod: String) -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let wall = i128::try_from(wall).unwrap_or(0);
        Self::with_wall_offset(
            out,
            color,
            pod,
            wall - i128::from(kernel::host::monotonic_ns()),
        )
        .fit_to(terminal::stdout_columns())
    }

    /// Lines fit `width` columns (none: every line whole).
    #[must_use]
    pub fn fit_to(mut self, width: Option<usize>) -> Self {
        self.width = width;
        self
    }

    /// [`Self::new`] with a given offset from the monotonic clock to the wall clock.
    #[must_use]
    pub fn with_wall_offset(
        out: Box<dyn Write + Send>,
        color: bool,
        pod: String,
        wall_offset_ns: i128,
    ) -> Self {
        Self {
            text: TextSink::new(out, color, pod),
            wall_offset_ns,
            width: None,
            line: String::new(),
        }
    }
}

/// `src > dst` of a packet.
fn packet(t: &tracer_common::Tuple) -> String {
    format!("{} > {}", endpoint(t, true), endpoint(t, false))
}

/// `10.13.76.46:41234 > 10.0.159.58:80→10.13.76.26:80`: the packet as it entered, each
/// endpoint NAT changed followed by `→` and what it became.
fn translated(entered: &tracer_common::Tuple, left: &tracer_common::Tuple) -> String {
    let side = |source: bool| {
        let (a, b) = (endpoint(entered, source), endpoint(left, source));
        if a == b { a } else { format!("{a}→{b}") }
    };
    format!("{} > {}", side(true), side(false))
}

/// `= > 10.13.76.26:80`: the packet as it left, an endpoint equal to the entering one's as `=`.
fn changed(entered: &tracer_common::Tuple, left: &tracer_common::Tuple) -> String {
    let side = |source: bool| {
        let (a, b) = (endpoint(entered, source), endpoint(left, source));
        if a == b { "=".to_owned() } else { b }
    };
    format!("{} > {}", side(true), side(false))
}

/// The packet as it entered: the first step's packet before it (a NAT step's before NAT).
fn entered(first: &Step) -> &tracer_common::Tuple {
    first.orig().unwrap_or(&first.tuple)
}

/// How much of a journey a line shows: each level gives up more to fit a narrow terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Detail {
    /// Every field.
    Full,
    /// Without the interfaces.
    NoInterfaces,
    /// Also milliseconds, the translation inside the packet, a known service instead of its
    /// rule, a drop without its kernel function.
    Brief,
    /// Also no rules or services: the NAT's kind and the drop's reason only.
    Bare,
}

/// What one step adds to the line: a NAT step its rule; a tc step nothing (its interface is
/// in the in/out field). Matched on every kind, so that a new kind must say what it shows.
fn step_note(step: &Step, detail: Detail, out: &mut String) {
    match &step.kind {
        StepKind::Tc { .. } => {}
        StepKind::Nat(n) => {
            let what = super::nat_word(n.point == NatPoint::Dnat, n.reply);
            let _ = write!(out, " {what}");
            if detail == Detail::Bare {
                return;
            }
            out.push(' ');
            match step.attribution.as_deref() {
                Some(Attribution {
                    service: Some(service),
                    ..
                }) if detail == Detail::Brief => out.push_str(&safe(service)),
                Some(a) => {
                    out.push_str(&safe(&a.rule));
                    if let Some(service) = &a.service {
                        let _ = write!(out, " ({})", safe(service));
                    }
                }
                None => out.push('?'),
            }
        }
        StepKind::Drop(d) => {
            let _ = write!(out, " ✗ drop {}: {}", d.class, safe(&d.reason));
            if detail < Detail::Brief {
                let _ = write!(out, " at {}", safe(&d.location));
            }
            let named = step.attribution.as_deref().filter(|a| !a.rule.is_empty());
            match (named, detail) {
                (_, Detail::Bare) | (None, _) => {}
                (Some(a), Detail::Brief) if a.service.is_some() => {
                    let service = a.service.as_deref().unwrap_or_default();
                    let _ = write!(out, " by {}", safe(service));
                }
                (Some(a), _) => {
                    let _ = write!(out, " by {}", safe(&a.rule));
                    if let Some(service) = &a.service {
                        let _ = write!(out, " ({})", safe(service));
                    }
                }
            }
        }
    }
}

/// The journey's line at `detail`, without the newline.
fn journey_line(
    j: &Journey,
    (first, last): (&Step, &Step),
    detail: Detail,
    wall_offset_ns: i128,
    out: &mut String,
) {
    let start = entered(first);
    let wall_ns = wall_offset_ns + i128::from(first.ktime_ns);
    if detail < Detail::Brief {
        let _ = write!(
            out,
            "{} {} {}",
            time_of_day_us(wall_ns),
            j.proto(),
            packet(start)
        );
        if last.tuple != *start {
            let _ = write!(out, " → {}", changed(start, &last.tuple));
        }
    } else {
        let (time, packet) = (time_of_day_ms(wall_ns), translated(start, &last.tuple));
        let _ = write!(out, "{time} {} {packet}", j.proto());
    }
    let iface = |s: Option<&Step>| s.and_then(Step::iface).map_or_else(|| "?".to_owned(), safe);
    let tc_in = j.steps.iter().find(|s| s.iface().is_some());
    let tc_out = j.steps.iter().rev().find(|s| s.iface().is_some());
    let bound = if first.time_bound() { "≥" } else { "" };
    if detail == Detail::Full {
        let _ = write!(out, " {}→{}", iface(tc_in), iface(tc_out));
    }
    let _ = write!(out, " {bound}{}", human_ns(j.transit_ns()));
    for step in &j.steps {
        step_note(step, detail, out);
    }
    out.push_str(match j.ending {
        Ending::Left => "",
        Ending::TimedOut => " (timed out)",
        Ending::Flushed => " (still open at exit)",
        Ending::InterfaceGone => " (interface gone)",
        Ending::Dropped => " (dropped)",
    });
}

impl Sink for LineSink {
    fn journey(&mut self, j: &Journey) -> io::Result<()> {
        let (Some(first), Some(last)) = (j.steps.first(), j.steps.last()) else {
            return Ok(());
        };
        for detail in [
            Detail::Full,
            Detail::NoInterfaces,
            Detail::Brief,
            Detail::Bare,
        ] {
            self.line.clear();
            journey_line(
                j,
                (first, last),
                detail,
                self.wall_offset_ns,
                &mut self.line,
            );
            if self.width.is_none_or(|w| self.line.chars().count() <= w) {
                break;
            }
        }
        if let Some(w) = self.width {
            cut_to(&mut self.line, w);
        }
        self.line.push('\n');
        self.text.out().write_all(self.line.as_bytes())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.text.flush()
    }

    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()> {
        self.text.loss(lost_new, lost_total)
    }

    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.text.evicted(new, total)
    }

    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.text.evicted_flows(new, total)
    }

    fn no_answer(&mut self, n: &NoAnswer) -> io::Result<()> {
        self.text.no_answer(n)
    }

    fn evicted_connections(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.text.evicted_connections(new, total)
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.text.summary(s)
    }
}

#[cfg(test)]
mod tests;
