//! `-o json`: the JSON lines contract of DESIGN.md, one object per line. Journey lines are
//! flushed once per batch ([`Sink::flush`]), the other lines at once.
//!
//! Lines: `{"type":"journey",…}` per journey, `{"type":"loss",…}` when events were lost, and
//! `{"type":"summary",…}` last. Beyond the contract, journeys carry `ending`, `transit_ns` and
//! `start_ktime_ns` (the kernel's monotonic clock at the first step), steps carry `ip_id`
//! (IPv4) or `wire_hash` (IPv6: the journey step's `wire_id`, a digest of what the wire
//! keeps), `t_at_or_before: true` when the hook saw the packet at or before `t_ns` (the uplink
//! ingress of a connection's first packet, emitted at its DNAT), and NAT steps `why` when
//! attribution explains itself. `start_ktime_ns` and `ip_id`
//! or `wire_hash` are what `pktrace merge` joins nodes by.
//!
//! The lines are typed in [`contract`], which readers (`merge`, the integration tests) parse
//! with. Journey lines, one per traced packet, are written by hand into one reused buffer (no
//! allocation per journey or step; serde structs cost 45 % of the collector's CPU); the rare
//! lines go through serde. Tests check the hand-written lines parse as [`contract::Line`] and
//! serialize back to the very same bytes.

pub mod contract;
mod lines;
#[cfg(test)]
mod tests;
mod write;

use std::io::{self, Write};

use self::{
    contract::{
        EvictedConnectionsLine, EvictedFlowsLine, EvictedLine, Line, LossLine, NatStats,
        SummaryLine,
    },
    lines::write_line,
    write::{json_str, write_journey},
};
use super::{Sink, no_answer};
use crate::{
    journey::{
        Journey,
        unanswered::{NoAnswer, Refusals},
    },
    summary::Summary,
};

/// Journey lines are gathered up to this many bytes before they are written: as large as the
/// output's buffer (`run`'s `BufWriter`), so that a full batch goes past it without a copy.
const PENDING: usize = 64 << 10;

/// Writes JSON lines.
pub struct JsonSink {
    out: Box<dyn Write + Send>,
    /// The `pod` field, already a JSON string.
    pod: Vec<u8>,
    /// The `pod` and `svc` fields, for the lines written through serde.
    pod_name: String,
    svc_name: Option<String>,
    /// With `--svc`: the `svc` field, already a JSON string.
    svc: Option<Vec<u8>>,
    /// Journey lines not written yet (written when [`PENDING`] bytes are there, at
    /// [`Sink::flush`], before any other line, and on drop).
    buf: Vec<u8>,
}

impl JsonSink {
    /// A sink writing to `out`; `pod` is the `pod` field of every journey.
    #[must_use]
    pub fn new(out: Box<dyn Write + Send>, pod: String) -> Self {
        let mut quoted = Vec::new();
        json_str(&mut quoted, &pod);
        Self {
            out,
            pod: quoted,
            pod_name: pod,
            svc_name: None,
            svc: None,
            buf: Vec::new(),
        }
    }

    /// Journey lines also say the traced service (`"svc":"namespace/name"`).
    #[must_use]
    pub fn with_svc(mut self, svc: &str) -> Self {
        let mut quoted = Vec::new();
        json_str(&mut quoted, svc);
        self.svc = Some(quoted);
        self.svc_name = Some(svc.to_owned());
        self
    }

    /// Writes the journey lines gathered so far.
    fn write_pending(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let result = self.out.write_all(&self.buf);
        self.buf.clear();
        result
    }
}

impl Drop for JsonSink {
    /// Journeys gathered and never flushed are written still (as `BufWriter` does on drop);
    /// errors cannot be reported here.
    fn drop(&mut self) {
        let _ = self.write_pending().and_then(|()| self.out.flush());
    }
}

/// The summary's `refused`: the kinds that answered some connection.
fn refused(r: Refusals) -> std::collections::BTreeMap<String, u64> {
    [("reset", r.reset), ("icmp_error", r.icmp_error)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(k, n)| (k.to_owned(), n))
        .collect()
}

impl Sink for JsonSink {
    fn journey(&mut self, j: &Journey) -> io::Result<()> {
        let Some(first) = j.steps.first() else {
            return Ok(());
        };
        if self.buf.capacity() == 0 {
            self.buf.reserve(PENDING + 4096);
        }
        write_journey(&mut self.buf, (&self.pod, self.svc.as_deref()), j, first);
        if self.buf.len() >= PENDING {
            self.write_pending()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        self.out.flush()
    }

    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &Line::Loss(LossLine {
                lost: lost_new,
                lost_total,
            }),
        )
    }

    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &Line::Evicted(EvictedLine {
                journeys: new,
                journeys_total: total,
            }),
        )
    }

    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &Line::EvictedFlows(EvictedFlowsLine {
                flows: new,
                flows_total: total,
            }),
        )
    }

    fn no_answer(&mut self, n: &NoAnswer) -> io::Result<()> {
        self.write_pending()?;
        let line = no_answer::json_line(n, &self.pod_name, self.svc_name.as_deref());
        write_line(&mut self.out, &Line::NoAnswer(line))
    }

    fn evicted_connections(&mut self, new: u64, total: u64) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &Line::EvictedConnections(EvictedConnectionsLine {
                connections: new,
                connections_total: total,
            }),
        )
    }

    fn summary(&mut self, s: &Summary) -> io::Result<()> {
        self.write_pending()?;
        write_line(
            &mut self.out,
            &Line::Summary(SummaryLine {
                journeys: s.journeys(),
                events: s.events(),
                lost_events: s.lost_events(),
                bad_records: s.bad_records(),
                evicted_journeys: s.evicted_journeys(),
                evicted_flows: s.evicted_flows(),
                nat: NatStats {
                    dnat: s.dnat().into(),
                    snat: s.snat().into(),
                },
                transit: s.transit().into(),
                drops: s.drops().clone(),
                classes: s
                    .classes()
                    .into_iter()
                    .map(|(c, n)| (c.to_owned(), n))
                    .collect(),
                no_answer: s.no_answer(),
                no_answer_waiting: s.no_answer_waiting(),
                refused: refused(s.refusals()),
                evicted_connections: s.evicted_connections(),
            }),
        )
    }
}
