//! What a session holds while it runs: the join table, the explainer, the summary (the one
//! owner of the run's totals: journeys written, events lost, journeys and flows evicted) and
//! conntrack's events; and what it does with them: drain the ring, join, explain, write, report
//! new losses.

use std::{io, sync::Arc};

use crate::{
    collect::{self, Collector, Counters, Drained},
    diag,
    explain::{DropExplainer, Explainer},
    expr::Filter,
    journey::{
        Ending, Journey,
        correlate::Correlator,
        unanswered::{self, Unanswered},
    },
    kernel,
    nat::conntrack::{self, Conntrack},
    output::{Sink, pcapng},
    rules::Ruleset,
    summary::Summary,
};

/// Most events joined before their journeys are written (bounds the journeys held at once).
const DRAIN_BATCH: usize = 1024;
/// How far behind the latest joined event the no-answer wait is judged: a reply's journey
/// whose events straddle two batches is whole by then, and so are the records another CPU
/// still held staged (written out within two drain ticks, 40 ms).
const EVENT_SLACK_NS: u64 = 100_000_000;
/// How far behind the clock the quiet node's sweep judges the wait. The sweep follows a flush
/// and a drain, so a reply stamped before the clock was read is joined by then unless its
/// record was still on its way (its program between the clock read and the write, or a
/// record left staged on a CPU whose staging was busy at the flush); a vCPU preempted in
/// between can hold it back for a while.
const SWEEP_SLACK_NS: u64 = 250_000_000;

pub(super) struct Session {
    pub(super) correlator: Correlator,
    /// The totals; what was reported so far is read from here (the loss and eviction lines
    /// report what is new since).
    pub(super) summary: Summary,
    /// Names the rule of each NAT step (rules re-read when they change).
    pub(super) explainer: Explainer,
    /// `-c`: stop after this many journeys.
    limit: Option<u64>,
    /// `--failures`: only journeys that ended in a drop are written and counted (connections
    /// without an answer are followed and written either way).
    pub(super) failures_only: bool,
    /// Names the rule that dropped a packet (drop steps).
    pub(super) drops: DropExplainer,
    counters: Counters,
    /// With `--nat-hook conntrack`: its events, and the losses reported so far.
    pub(super) conntrack: Option<Conntrack>,
    ct_reported: conntrack::Losses,
    /// Events read from the ring and not joined yet (conntrack's reports are read in between).
    pending: Vec<tracer_common::Observation>,
    /// The filter expression: a journey none of whose steps matches is neither written nor
    /// counted in the summary (nor towards `-c`).
    filter: Option<Filter>,
    /// Rules re-read since the followed service last looked (`--svc`).
    pub(super) rules_changed: Option<Arc<Ruleset>>,
    /// Connections whose first packet left the node, waiting for their answer.
    unanswered: Unanswered,
}

impl Session {
    pub(super) fn new(
        correlator: Correlator,
        explainer: Explainer,
        limit: Option<u64>,
        conntrack: Option<Conntrack>,
    ) -> Self {
        Self {
            correlator,
            summary: Summary::new(),
            explainer,
            limit,
            failures_only: false,
            drops: DropExplainer::default(),
            counters: Counters::default(),
            conntrack,
            ct_reported: conntrack::Losses::default(),
            pending: Vec::new(),
            filter: None,
            rules_changed: None,
            unanswered: Unanswered::new(
                unanswered::DEFAULT_BYTES,
                pcapng::wall_offset_ns(kernel::host::monotonic_ns()),
            ),
        }
    }

    /// The same session showing only the journeys `filter` matches.
    pub(super) fn with_filter(self, filter: Option<Filter>) -> Self {
        Self { filter, ..self }
    }

    /// The `-c` limit is reached.
    pub(super) fn limit_reached(&self) -> bool {
        self.limit.is_some_and(|n| self.summary.journeys() >= n)
    }

    /// The end of a session, whatever stopped the loop: the events left are joined, every open
    /// journey is written, losses and evictions are reported, then the summary.
    pub(super) fn finish(
        &mut self,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
    ) -> io::Result<()> {
        self.catch_up(collector, sink)?;
        self.correlator.flush();
        self.output(sink)?;
        self.housekeeping(collector, sink)?;
        // Every event is joined: the wait is judged on the clock as it is.
        self.unanswered.tick(kernel::host::monotonic_ns());
        self.no_answers(sink)?;
        self.summary
            .set_no_answer_waiting(self.unanswered.waiting());
        self.flow_evictions(collector, sink, true)?;
        sink.summary(&self.summary)
    }

    /// Joins every event stamped so far: each CPU that holds staged records writes them out
    /// (quiet or not), then the ring is drained.
    pub(super) fn catch_up(
        &mut self,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
    ) -> io::Result<()> {
        collector.flush_staged(true);
        self.drain(collector, sink)
    }

    /// Joins every waiting event and writes the journeys they complete, [`DRAIN_BATCH`]
    /// events at a time (a full ring is 55,000 events or more: buffered as journeys at once,
    /// they would cost tens of MiB).
    pub(super) fn drain(
        &mut self,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
    ) -> io::Result<()> {
        loop {
            let drained = if self.conntrack.is_some() {
                self.drain_with_conntrack(collector)?
            } else {
                let correlator = &mut self.correlator;
                collector.drain(DRAIN_BATCH, |obs| correlator.push(obs))
            };
            self.summary.add_events(drained.events);
            self.summary.add_bad_records(drained.bad);
            self.output(sink)?;
            let emptied = drained.records() < DRAIN_BATCH as u64;
            if emptied || self.limit_reached() {
                return Ok(());
            }
        }
    }

    /// [`Self::drain`]'s batch with `--nat-hook conntrack`: the events are taken from the ring
    /// before conntrack's socket is read, so that the report of every connection these packets
    /// belong to (queued before the packets' later hops) is in the join before they are.
    fn drain_with_conntrack(&mut self, collector: &mut Collector) -> io::Result<Drained> {
        let mut events = std::mem::take(&mut self.pending);
        let counts = collector.drain(DRAIN_BATCH, |ev| events.push(*ev));
        self.poll_conntrack(collector)?;
        for ev in &events {
            self.correlator.push(ev);
        }
        events.clear();
        self.pending = events;
        Ok(counts)
    }

    /// Reads conntrack's reports (NAT mappings into the join, traced flows into the kernel's
    /// filter) and reports new losses.
    pub(super) fn poll_conntrack(&mut self, collector: &mut Collector) -> io::Result<()> {
        let Some(ct) = self.conntrack.as_mut() else {
            return Ok(());
        };
        let losses = ct.poll(self.correlator.nat_table_mut(), collector)?;
        report_conntrack_losses(&self.ct_reported, &losses);
        self.ct_reported = losses;
        Ok(())
    }

    /// Explains, counts and prints the completed journeys (up to the `-c` limit), then
    /// flushes them in one write. Their step lists go back to the join table.
    pub(super) fn output(&mut self, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        if !self.correlator.has_done() {
            return Ok(());
        }
        let mut wrote = false;
        self.explainer.take_updates();
        let (explainer, summary, limit) = (&mut self.explainer, &mut self.summary, self.limit);
        let filter = self.filter.as_ref();
        let failures_only = self.failures_only;
        let drops = &mut self.drops;
        let unanswered = &mut self.unanswered;
        let mut latest = 0;
        self.correlator.drain_done(|j| {
            if j.steps.is_empty() || limit.is_some_and(|n| summary.journeys() >= n) {
                return Ok(());
            }
            latest = j.steps.iter().fold(latest, |t, s| t.max(s.ktime_ns));
            let opening = opens(unanswered, filter, j);
            if filter.is_some_and(|f| !f.matches_any(j.packets())) {
                return Ok(());
            }
            if failures_only && j.ending != Ending::Dropped {
                if opening {
                    explainer.explain_with_current_rules(j);
                    unanswered.open(j);
                }
                return Ok(());
            }
            explainer.explain_with_current_rules(j);
            drops.explain(j);
            if opening {
                unanswered.open(j);
            }
            summary.record(j);
            wrote = true;
            sink.journey(j)
        })?;
        if wrote {
            sink.flush()?;
        }
        self.unanswered.tick(latest.saturating_sub(EVENT_SLACK_NS));
        self.no_answers(sink)
    }

    /// Writes the connections found unanswered, and reports new evictions from their table.
    fn no_answers(&mut self, sink: &mut (dyn Sink + Send)) -> io::Result<()> {
        for n in self.unanswered.take_due() {
            self.summary.add_no_answer();
            sink.no_answer(&n)?;
        }
        self.summary.set_refusals(self.unanswered.refusals());
        let (evicted, reported) = (
            self.unanswered.evicted(),
            self.summary.evicted_connections(),
        );
        if evicted > reported {
            sink.evicted_connections(evicted - reported, evicted)?;
            self.summary.set_evicted_connections(evicted);
        }
        Ok(())
    }

    /// Reports new losses and evictions and closes idle journeys: those with no event stamped
    /// in the last idle timeout before the clock was read, judged after [`Self::catch_up`] (a
    /// collector that got no CPU for a while finds the events of that time waiting, not
    /// missing).
    pub(super) fn housekeeping(
        &mut self,
        collector: &mut Collector,
        sink: &mut (dyn Sink + Send),
    ) -> io::Result<()> {
        let now = kernel::host::monotonic_ns();
        self.catch_up(collector, sink)?;
        if let Ok(c) = collector.counters() {
            self.counters = c;
        }
        if let Some(update) = self.explainer.refresh() {
            diag::line(format_args!(
                "nat rules changed: re-read in {} ms, in use {} ms after the poller saw it ({})",
                update.read_cost.as_millis(),
                update.in_use_after.as_millis(),
                update.rules.describe()
            ));
            self.rules_changed = Some(update.rules);
        }
        let (lost, reported) = (self.counters.ringbuf_full, self.summary.lost_events());
        if lost > reported {
            sink.loss(lost - reported, lost)?;
        }
        self.summary.set_lost(lost);
        if let (failed @ 1.., Some(e)) = collector.flush_failures() {
            diag::once(
                "staged-flush",
                format_args!(
                    "warning: {failed} flushes of staged records failed ({e}): a quiet CPU's \
                     last records come with its next batch"
                ),
            );
        }
        self.correlator.expire(now);
        self.output(sink)?;
        self.unanswered.tick(now.saturating_sub(SWEEP_SLACK_NS));
        self.no_answers(sink)?;
        let (evicted, reported) = (self.correlator.evicted(), self.summary.evicted_journeys());
        if evicted > reported {
            sink.evicted(evicted - reported, evicted)?;
        }
        self.summary.set_evicted(evicted);
        self.flow_evictions(collector, sink, false)
    }

    /// Reports new evictions from the kernel's followed-flows table: while running, what the
    /// counters prove (entries added past the capacity); with `count`, also a walk of the
    /// table (once, at the end). Call after `housekeeping` read the counters.
    fn flow_evictions(
        &mut self,
        collector: &Collector,
        sink: &mut (dyn Sink + Send),
        count: bool,
    ) -> io::Result<()> {
        let added = self.counters.flow_entries;
        let live = (count && added > 0).then(|| collector.live_flow_entries());
        let evicted = collect::flows_evicted(added, collector.flow_capacity(), live);
        let reported = self.summary.evicted_flows();
        if evicted > reported {
            sink.evicted_flows(evicted - reported, evicted)?;
            self.summary.set_evicted_flows(evicted);
        }
        Ok(())
    }
}

/// Takes `j` to the no-answer table: a journey back on a waiting connection answers it; else
/// true when `j` is a connection's first packet that left the node and whose answer the
/// filter expression, if any, lets through (the kernel may drop the replies it rules out).
fn opens(unanswered: &mut Unanswered, filter: Option<&Filter>, j: &Journey) -> bool {
    if unanswered.answer(j) || !unanswered::is_opening(j) {
        return false;
    }
    filter.is_none_or(|f| {
        let back: Vec<tracer_common::Tuple> =
            j.packets().map(tracer_common::Tuple::reversed).collect();
        f.matches_any(&back)
    })
}

/// Says on stderr which of conntrack's losses grew since `before`.
fn report_conntrack_losses(before: &conntrack::Losses, now: &conntrack::Losses) {
    if now.overflows > before.overflows {
        diag::line(format_args!(
            "conntrack events lost: the kernel dropped events {} times (socket full); NAT steps \
             of those connections are missing",
            now.overflows
        ));
    }
    if now.unreadable > before.unreadable {
        diag::line(format_args!(
            "{} conntrack event messages could not be read; NAT steps of those connections are \
             missing",
            now.unreadable
        ));
    }
    if now.unfollowed > before.unfollowed {
        diag::line(format_args!(
            "{} NATed connections could not be followed in the kernel's filter ({}): their \
             packets beyond the NAT are missing",
            now.unfollowed,
            now.follow_error.map_or_else(String::new, |k| k.to_string())
        ));
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{PROTO_UDP, Tuple};

    use super::*;
    use crate::{
        journey::{PacketKind, Point, Step},
        test_support::t,
    };

    /// A DNS query from the pod to the DNS ClusterIP, DNATed to the DNS pod, out by its veth.
    fn query() -> (Journey, Tuple) {
        let pre = t(PROTO_UDP, "10.13.76.46:40000", "10.0.0.10:53");
        let post = t(PROTO_UDP, "10.13.76.46:40000", "10.13.76.30:53");
        let mut steps = vec![
            Step::tc_at(Point::Ingress, Some("azv1"), pre, 1_000),
            Step::nat_at(Point::Dnat, pre, post, 2_000),
            Step::tc_at(Point::Egress, Some("azv3"), post, 3_000),
        ];
        for s in &mut steps {
            s.set_packet_kind(PacketKind::Udp);
        }
        let j = Journey {
            steps,
            ending: Ending::Left,
        };
        (j, post)
    }

    fn filter(words: &str) -> Filter {
        let words: Vec<String> = words.split(' ').map(str::to_owned).collect();
        Filter::parse(&words).unwrap().unwrap()
    }

    #[test]
    fn a_first_packet_waits_only_when_the_filter_lets_its_answer_through() {
        let mut u = Unanswered::new(unanswered::DEFAULT_BYTES, 0);
        let (q, _) = query();
        assert!(opens(&mut u, None, &q));
        assert!(opens(&mut u, Some(&filter("udp port 53")), &q));
        // Matched only as the query went (to the ClusterIP): its answer, from it, may be
        // left in the kernel by the expression's prefilter.
        assert!(!opens(&mut u, Some(&filter("dst host 10.0.0.10")), &q));
    }

    #[test]
    fn an_answer_opens_nothing() {
        let mut u = Unanswered::new(unanswered::DEFAULT_BYTES, 0);
        let (q, post) = query();
        u.open(&q);
        let mut back = Step::tc_at(Point::Ingress, Some("azv3"), post.reversed(), 5_000);
        back.set_packet_kind(PacketKind::Udp);
        let mut out = back.clone();
        out.kind = Step::tc_at(Point::Egress, Some("azv1"), post.reversed(), 6_000).kind;
        out.set_packet_kind(PacketKind::Udp);
        let answer = Journey {
            steps: vec![back, out],
            ending: Ending::Left,
        };
        assert!(!opens(&mut u, None, &answer));
        u.tick(10 * unanswered::WAIT_NS);
        assert!(u.take_due().is_empty(), "answered");
    }
}
