//! Totals printed on exit: journeys, events, lost events, and latency percentiles of the NAT
//! steps and of whole journeys, kept in fixed-size histograms so memory does not grow with
//! the run.

use std::collections::BTreeMap;

use crate::{
    drops::FailureClass,
    journey::{Journey, Point, unanswered::Refusals},
};

/// Sub-buckets per power of two: bucket width is at most 1/64 of its values (≤ 0.8 % error
/// when reporting the middle of a bucket).
const SUB_BITS: u32 = 6;
const SUB: usize = 1 << SUB_BITS;
/// Exact buckets for 0..SUB, then SUB buckets for each shift 0..=57 (values up to `u64::MAX`).
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// A log-linear histogram of nanosecond values (HDR-like): fixed memory, exact count and max.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    min: u64,
    max: u64,
}

/// Count and percentiles of one histogram, as printed; all zero when empty. The percentiles
/// are of the `measured` values: a NAT step whose hook cannot time it (conntrack's events)
/// is counted, not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub count: u64,
    pub measured: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Histogram {
    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(bucket(v)) {
            *c += 1;
        }
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// The value at quantile `q` (0.0..=1.0, nearest rank), within 1 % of the exact one and
    /// never outside the recorded min..=max; 0 when empty.
    #[must_use]
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = rank(q, self.count);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return middle(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// Count, p50, p99 and exact max.
    #[must_use]
    pub fn stats(&self) -> Stats {
        Stats {
            count: self.count,
            measured: self.count,
            p50_ns: self.quantile(0.5),
            p99_ns: self.quantile(0.99),
            max_ns: self.max,
        }
    }
}

/// Nearest rank (1-based) of quantile `q` among `count` values.
fn rank(q: f64, count: u64) -> u64 {
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "q in 0..=1, so the product is within 0..=count"
    )]
    let r = (q * count as f64).ceil() as u64;
    r.clamp(1, count)
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return usize::try_from(v).unwrap_or(0);
    }
    let shift = v.ilog2() - SUB_BITS;
    let sub = usize::try_from(v >> shift).unwrap_or(SUB) - SUB;
    SUB + shift as usize * SUB + sub
}

/// The middle value of bucket `i`.
fn middle(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let (shift, sub) = ((i - SUB) / SUB, (i - SUB) % SUB);
    let low = ((SUB + sub) as u64) << shift;
    low.saturating_add((1u64 << shift) / 2)
}

/// What a run saw, accumulated from journeys and the collector's counters: the one owner of
/// the run's totals. The session reports losses and evictions as they grow by comparing the
/// kernel's counters with the totals kept here, and stops at `-c` on [`Summary::journeys`].
#[derive(Clone, Debug, Default)]
pub struct Summary {
    journeys: u64,
    events: u64,
    bad_records: u64,
    lost_events: u64,
    evicted_journeys: u64,
    evicted_flows: u64,
    dnat: Histogram,
    snat: Histogram,
    /// NAT steps seen, timed or not.
    dnat_steps: u64,
    snat_steps: u64,
    transit: Histogram,
    /// Journeys that ended in a drop, by reason.
    drops: BTreeMap<String, u64>,
    /// Journeys that ended in a drop, by failure class.
    drop_classes: BTreeMap<FailureClass, u64>,
    /// Connections reported as unanswered.
    no_answer: u64,
    /// Connections still waiting for their answer at exit (for less than the wait).
    no_answer_waiting: u64,
    /// Connections answered by a reset or an ICMP error.
    refusals: Refusals,
    /// Waiting connections forgotten because their table was full.
    evicted_connections: u64,
}

impl Summary {
    /// An empty summary.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts a journey, its NAT step latencies (when measured) and its transit time.
    pub fn record(&mut self, j: &Journey) {
        self.journeys += 1;
        for step in &j.steps {
            let hist = match step.point() {
                Point::Dnat => {
                    self.dnat_steps += 1;
                    &mut self.dnat
                }
                Point::Snat => {
                    self.snat_steps += 1;
                    &mut self.snat
                }
                Point::Drop => {
                    if let Some(d) = step.dropped() {
                        *self.drops.entry(d.reason.to_string()).or_default() += 1;
                        *self.drop_classes.entry(d.class).or_default() += 1;
                    }
                    continue;
                }
                Point::Ingress | Point::Egress => continue,
            };
            if let Some(ns) = step.latency_ns() {
                hist.record(ns);
            }
        }
        if !j.steps.is_empty() {
            self.transit.record(j.transit_ns());
        }
    }

    /// Journeys that ended in a drop, by reason.
    #[must_use]
    pub const fn drops(&self) -> &BTreeMap<String, u64> {
        &self.drops
    }

    /// Failures by class: the dropped journeys' classes and the connections reported as
    /// unanswered (`no_answer`), the classes seen only.
    #[must_use]
    pub fn classes(&self) -> BTreeMap<&'static str, u64> {
        let mut classes: BTreeMap<&'static str, u64> = self
            .drop_classes
            .iter()
            .map(|(c, n)| (c.as_str(), *n))
            .collect();
        if self.no_answer > 0 {
            *classes.entry(FailureClass::NoAnswer.as_str()).or_default() += self.no_answer;
        }
        classes
    }

    /// Counts a connection reported as unanswered.
    pub fn add_no_answer(&mut self) {
        self.no_answer += 1;
    }

    /// Connections reported as unanswered.
    #[must_use]
    pub const fn no_answer(&self) -> u64 {
        self.no_answer
    }

    /// Sets the connections still waiting for their answer at exit.
    pub fn set_no_answer_waiting(&mut self, n: u64) {
        self.no_answer_waiting = n;
    }

    /// Connections still waiting for their answer at exit.
    #[must_use]
    pub const fn no_answer_waiting(&self) -> u64 {
        self.no_answer_waiting
    }

    /// Sets the connections answered by a reset or an ICMP error.
    pub fn set_refusals(&mut self, r: Refusals) {
        self.refusals = r;
    }

    /// Connections answered by a reset or an ICMP error.
    #[must_use]
    pub const fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// Sets the total of waiting connections forgotten because their table was full.
    pub fn set_evicted_connections(&mut self, n: u64) {
        self.evicted_connections = n;
    }

    /// Waiting connections forgotten because their table was full.
    #[must_use]
    pub const fn evicted_connections(&self) -> u64 {
        self.evicted_connections
    }

    /// Adds events read from the ring buffer.
    pub fn add_events(&mut self, n: u64) {
        self.events = self.events.saturating_add(n);
    }

    /// Adds ring-buffer records that were no event (never written by pktrace's programs: a
    /// length or kind this build does not know).
    pub fn add_bad_records(&mut self, n: u64) {
        self.bad_records = self.bad_records.saturating_add(n);
    }

    /// Ring-buffer records that were no event.
    #[must_use]
    pub const fn bad_records(&self) -> u64 {
        self.bad_records
    }

    /// Sets the total of events the kernel could not write (ring buffer full).
    pub fn set_lost(&mut self, n: u64) {
        self.lost_events = n;
    }

    /// Sets the total of journeys closed early because the join table was full.
    pub fn set_evicted(&mut self, n: u64) {
        self.evicted_journeys = n;
    }

    /// Journeys closed early because the join table was full.
    #[must_use]
    pub const fn evicted_journeys(&self) -> u64 {
        self.evicted_journeys
    }

    /// Sets the total of entries evicted from the kernel's followed-flows table (at least).
    pub fn set_evicted_flows(&mut self, n: u64) {
        self.evicted_flows = n;
    }

    /// Entries evicted from the kernel's followed-flows table (one per flow direction).
    #[must_use]
    pub const fn evicted_flows(&self) -> u64 {
        self.evicted_flows
    }

    /// Journeys recorded.
    #[must_use]
    pub const fn journeys(&self) -> u64 {
        self.journeys
    }

    /// Events read.
    #[must_use]
    pub const fn events(&self) -> u64 {
        self.events
    }

    /// Events lost.
    #[must_use]
    pub const fn lost_events(&self) -> u64 {
        self.lost_events
    }

    /// Time spent in DNAT steps.
    #[must_use]
    pub fn dnat(&self) -> Stats {
        Stats {
            count: self.dnat_steps,
            ..self.dnat.stats()
        }
    }

    /// Time spent in SNAT steps.
    #[must_use]
    pub fn snat(&self) -> Stats {
        Stats {
            count: self.snat_steps,
            ..self.snat.stats()
        }
    }

    /// Time from a journey's first step to its last.
    #[must_use]
    pub fn transit(&self) -> Stats {
        self.transit.stats()
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::PROTO_TCP;

    use super::*;
    use crate::journey::{Ending, Step, tuple};

    fn exact(sorted: &[u64], q: f64) -> u64 {
        sorted[usize::try_from(rank(q, sorted.len() as u64)).unwrap() - 1]
    }

    fn close(got: u64, want: u64) -> bool {
        got.abs_diff(want) <= want / 100 + 1
    }

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..200_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            last = b;
            assert!(close(middle(b), v), "{v}: middle {}", middle(b));
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles() {
        let uniform: Vec<u64> = (1..=1000).collect();
        let skewed: Vec<u64> = (0..1000u64)
            .map(|i| if i < 990 { 2_000 } else { 1_000_000 })
            .collect();
        let spread: Vec<u64> = (0..5000u64).map(|i| i * i * 37 % 9_999_991).collect();
        let cases: &[(&str, &[u64])] = &[
            ("one", &[2710]),
            ("two", &[100, 31_000]),
            ("uniform", &uniform),
            ("skewed", &skewed),
            ("spread", &spread),
            ("zeros", &[0, 0, 0]),
            ("huge", &[u64::MAX, 1]),
        ];
        for (name, values) in cases {
            let mut h = Histogram::default();
            values.iter().for_each(|&v| h.record(v));
            let mut sorted = values.to_vec();
            sorted.sort_unstable();
            let s = h.stats();
            assert_eq!(s.count, values.len() as u64, "{name}");
            assert_eq!(s.max_ns, *sorted.last().unwrap(), "{name}");
            for (q, got) in [(0.5, s.p50_ns), (0.99, s.p99_ns), (0.0, h.quantile(0.0))] {
                let want = exact(&sorted, q);
                assert!(
                    close(got, want) || want > u64::MAX / 2,
                    "{name} q{q}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn empty_and_odd_quantiles() {
        let h = Histogram::default();
        assert_eq!(h.stats(), Stats::default());
        let mut h = Histogram::default();
        h.record(5);
        assert_eq!(
            (h.quantile(f64::NAN), h.quantile(-1.0), h.quantile(2.0)),
            (5, 5, 5)
        );
    }

    #[test]
    fn summary_records_journeys() {
        let t = tuple(
            PROTO_TCP,
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:2".parse().unwrap(),
        );
        let step = |point, ktime_ns, latency_ns| {
            if matches!(point, Point::Dnat | Point::Snat) {
                let mut s = Step::nat_at(point, t, t, ktime_ns);
                s.nat_mut().latency_ns = latency_ns;
                s
            } else {
                Step::tc_at(point, None, t, ktime_ns)
            }
        };
        let j = Journey {
            steps: vec![
                step(Point::Ingress, 1_000, None),
                step(Point::Dnat, 2_000, Some(300)),
                step(Point::Snat, 3_000, None),
                step(Point::Egress, 9_000, None),
            ],
            ending: Ending::Left,
        };
        let mut s = Summary::new();
        s.record(&j);
        s.record(&Journey {
            steps: vec![],
            ending: Ending::Flushed,
        });
        s.add_events(4);
        s.add_events(u64::MAX);
        s.set_lost(7);
        assert_eq!(
            (s.journeys(), s.events(), s.lost_events()),
            (2, u64::MAX, 7)
        );
        assert_eq!(
            s.dnat(),
            Stats {
                count: 1,
                measured: 1,
                p50_ns: 300,
                p99_ns: 300,
                max_ns: 300
            }
        );
        // Seen, not timed (conntrack's events): counted, not measured.
        assert_eq!(
            s.snat(),
            Stats {
                count: 1,
                ..Stats::default()
            }
        );
        assert_eq!(
            s.transit(),
            Stats {
                count: 1,
                measured: 1,
                p50_ns: 8_000,
                p99_ns: 8_000,
                max_ns: 8_000
            }
        );
    }
}
