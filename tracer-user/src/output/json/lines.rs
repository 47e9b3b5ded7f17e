//! The lines that go through serde (loss, evictions, summary), written with the
//! terminal-safe escaping of [`TerminalSafe`]; and, for the tests, the serde form of a journey
//! line that the hand-written one is checked against.

use std::io::{self, Write};

use serde::Serialize;

#[cfg(test)]
use crate::journey::{Ending, Step};
use crate::summary::Stats;

/// Writes `value` as one line in one `write_all`, then flushes.
pub(super) fn write_line<T: Serialize>(out: &mut dyn Write, value: &T) -> io::Result<()> {
    let mut buf = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut buf,
        TerminalSafe,
    ))?;
    buf.push(b'\n');
    out.write_all(&buf)?;
    out.flush()
}

/// serde_json's compact output, plus `\uXXXX` for what JSON may leave raw but a terminal
/// would obey (C1 controls such as U+009B CSI, DEL, bidi and zero-width characters: the set
/// [`crate::util::safe`] escapes). Lossless: a reader decodes the very same strings.
pub(super) struct TerminalSafe;

impl serde_json::ser::Formatter for TerminalSafe {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_control() || crate::util::text::is_invisible_format(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                write!(w, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// The journey line as serde would write it: the reference [`write_journey`] is tested against.
#[cfg(test)]
#[derive(Serialize)]
pub(super) struct JourneyLine<'a> {
    pub(super) r#type: &'static str,
    pub(super) proto: String,
    pub(super) pod: &'a str,
    pub(super) steps: Vec<StepOut<'a>>,
    pub(super) ending: &'static str,
    pub(super) transit_ns: u64,
    pub(super) start_ktime_ns: u64,
}

/// One step. `Option<Option<_>>`: outer `None` leaves the key out (it does not belong to this
/// kind of step), inner `None` writes `null` (it belongs but is unknown).
#[cfg(test)]
#[derive(Serialize)]
pub(super) struct StepOut<'a> {
    pub(super) point: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) iface: Option<Option<&'a str>>,
    pub(super) src: String,
    pub(super) dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) orig_src: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) orig_dst: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reply: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) latency_ns: Option<Option<u64>>,
    pub(super) t_ns: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) t_at_or_before: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ip_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) service: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) why: Option<&'a str>,
}

#[derive(Serialize)]
pub(super) struct LossLine {
    pub(super) r#type: &'static str,
    pub(super) lost: u64,
    pub(super) lost_total: u64,
}

#[derive(Serialize)]
pub(super) struct EvictedFlowsLine {
    pub(super) r#type: &'static str,
    pub(super) flows: u64,
    pub(super) flows_total: u64,
}

#[derive(Serialize)]
pub(super) struct EvictedLine {
    pub(super) r#type: &'static str,
    pub(super) journeys: u64,
    pub(super) journeys_total: u64,
}

#[derive(Serialize)]
pub(super) struct SummaryLine {
    pub(super) r#type: &'static str,
    pub(super) journeys: u64,
    pub(super) events: u64,
    pub(super) lost_events: u64,
    /// Ring-buffer records that were no event (a pktrace build mismatch): 0.
    pub(super) bad_records: u64,
    pub(super) evicted_journeys: u64,
    pub(super) evicted_flows: u64,
    pub(super) nat: NatStats,
    pub(super) transit: StatsOut,
}

#[derive(Serialize)]
pub(super) struct NatStats {
    pub(super) dnat: StatsOut,
    pub(super) snat: StatsOut,
}

#[derive(Serialize)]
pub(super) struct StatsOut {
    pub(super) count: u64,
    pub(super) p50_ns: u64,
    pub(super) p99_ns: u64,
    pub(super) max_ns: u64,
}

impl From<Stats> for StatsOut {
    fn from(s: Stats) -> Self {
        Self {
            count: s.count,
            p50_ns: s.p50_ns,
            p99_ns: s.p99_ns,
            max_ns: s.max_ns,
        }
    }
}

#[cfg(test)]
pub(super) fn step_out(step: &Step, start_ns: u64) -> StepOut<'_> {
    use crate::journey::endpoint;
    let nat = step.point().is_nat();
    let attribution = step.attribution.as_ref();
    StepOut {
        point: step.point().as_str(),
        iface: (!nat).then_some(step.iface()),
        src: endpoint(&step.tuple, true),
        dst: endpoint(&step.tuple, false),
        orig_src: nat.then(|| endpoint(step.orig().unwrap_or(&step.tuple), true)),
        orig_dst: nat.then(|| endpoint(step.orig().unwrap_or(&step.tuple), false)),
        reply: nat.then_some(step.reply()),
        latency_ns: nat.then_some(step.latency_ns()),
        t_ns: step.ktime_ns.saturating_sub(start_ns),
        t_at_or_before: step.time_bound(),
        ip_id: step.ip_id,
        rule: attribution
            .map(|a| a.rule.as_str())
            .filter(|r| !r.is_empty()),
        service: attribution.and_then(|a| a.service.as_deref()),
        why: attribution.and_then(|a| a.why.as_deref()),
    }
}

#[cfg(test)]
pub(super) const fn ending(e: Ending) -> &'static str {
    match e {
        Ending::Left => "left",
        Ending::TimedOut => "timed_out",
        Ending::Flushed => "flushed",
        Ending::InterfaceGone => "interface_gone",
    }
}
