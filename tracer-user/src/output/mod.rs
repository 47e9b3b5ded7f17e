//! Where journeys go: one [`Sink`] trait with a text ([`text`]), a JSON lines ([`json`]) and
//! a one-line-per-journey ([`mod@line`]) implementation, the pcapng of `-w` in front of any of
//! them ([`pcapng`]), plus helpers for printing names that come from files or the kernel.

pub mod json;
pub mod line;
pub mod no_answer;
pub mod pcapng;
pub mod text;
pub mod wall;

use std::io::{self, Write};

use crate::{
    config::Format,
    journey::{Journey, unanswered::NoAnswer},
    summary::Summary,
};

/// Receives what a run produces, in order: journeys and loss reports while tracing, the
/// summary last. Errors are I/O errors of the output (a broken pipe is one: the caller treats
/// it as a clean exit).
pub trait Sink {
    /// Writes one journey (nothing for a journey without steps), without flushing: a
    /// buffered output gets one write per batch of journeys, at [`Sink::flush`].
    ///
    /// # Errors
    /// Writing to the output failed.
    fn journey(&mut self, j: &Journey) -> io::Result<()>;

    /// Flushes the journeys written so far (the other lines flush themselves).
    ///
    /// # Errors
    /// Writing to the output failed.
    fn flush(&mut self) -> io::Result<()>;

    /// Reports events the kernel could not deliver: `lost_new` since the last report,
    /// `lost_total` since the start.
    ///
    /// # Errors
    /// Writing to the output failed.
    fn loss(&mut self, lost_new: u64, lost_total: u64) -> io::Result<()>;

    /// Reports journeys closed early because the join table was full (its oldest open journeys
    /// are evicted): `new` since the last report, `total` since the start.
    ///
    /// # Errors
    /// Writing to the output failed.
    fn evicted(&mut self, new: u64, total: u64) -> io::Result<()>;

    /// Reports entries evicted from the kernel's table of flows followed after NAT (an LRU
    /// map; one entry per flow direction): at least `new` since the last report, at least
    /// `total` since the start. Packets of those flows after NAT may be missing.
    ///
    /// # Errors
    /// Writing to the output failed.
    fn evicted_flows(&mut self, new: u64, total: u64) -> io::Result<()>;

    /// Reports a connection whose first packet left the node and got no answer in time
    /// (written at once).
    ///
    /// # Errors
    /// Writing to the output failed.
    fn no_answer(&mut self, n: &NoAnswer) -> io::Result<()>;

    /// Reports waiting connections forgotten because the no-answer table was full: `new` since
    /// the last report, `total` since the start.
    ///
    /// # Errors
    /// Writing to the output failed.
    fn evicted_connections(&mut self, new: u64, total: u64) -> io::Result<()>;

    /// Writes the summary (the last output of a run).
    ///
    /// # Errors
    /// Writing to the output failed.
    fn summary(&mut self, s: &Summary) -> io::Result<()>;
}

/// The sink for `format`; `color` applies to text only; `pod_label` is the traced pod as
/// `namespace/name` (or the address with `--pod-ip`).
#[must_use]
pub fn sink(
    format: Format,
    color: bool,
    pod_label: String,
    out: Box<dyn Write + Send>,
) -> Box<dyn Sink + Send> {
    match format {
        Format::Text => Box::new(text::TextSink::new(out, color, pod_label)),
        Format::Json => Box::new(json::JsonSink::new(out, pod_label)),
        Format::Line => Box::new(line::LineSink::new(out, color, pod_label)),
    }
}

/// The sink for tracing service `svc_label` (`namespace/name`): as [`sink`], and JSON
/// journey lines also carry `"svc"`.
#[must_use]
pub fn service_sink(
    format: Format,
    color: bool,
    svc_label: &str,
    out: Box<dyn Write + Send>,
) -> Box<dyn Sink + Send> {
    match format {
        Format::Json => {
            Box::new(json::JsonSink::new(out, svc_label.to_owned()).with_svc(svc_label))
        }
        Format::Text | Format::Line => sink(format, color, svc_label.to_owned(), out),
    }
}

/// The word for a NAT step in every output for people (text, `-o line`, pcapng comments):
/// `DNAT`, `SNAT`, and `un-DNAT`, `un-SNAT` for a reply translated back.
#[must_use]
pub const fn nat_word(dnat: bool, reply: bool) -> &'static str {
    match (dnat, reply) {
        (true, false) => "DNAT",
        (false, false) => "SNAT",
        (true, true) => "un-DNAT",
        (false, true) => "un-SNAT",
    }
}

/// `n` and the noun, singular for one: `1 journey`, `3 journeys`.
#[must_use]
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Nanoseconds for people, three significant digits: `850ns`, `3.12µs`, `31.2ms`, `2.50s`.
#[must_use]
pub fn human_ns(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "three significant digits are shown"
    )]
    let mut v = ns as f64 / 1_000.0;
    for unit in ["µs", "ms"] {
        if v < 999.5 {
            return format!("{}{unit}", sig3(v));
        }
        v /= 1_000.0;
    }
    format!("{}s", sig3(v))
}

fn sig3(v: f64) -> String {
    if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_per_nat_step_and_plurals_right() {
        assert_eq!(
            [(true, false), (false, false), (true, true), (false, true)]
                .map(|(d, r)| nat_word(d, r)),
            ["DNAT", "SNAT", "un-DNAT", "un-SNAT"]
        );
        assert_eq!(count(1, "journey"), "1 journey");
        assert_eq!(count(0, "journey"), "0 journeys");
        assert_eq!(count(2, "lost event"), "2 lost events");
    }

    #[test]
    fn human_units() {
        let cases = [
            (0, "0ns"),
            (999, "999ns"),
            (1_000, "1.00µs"),
            (2_710, "2.71µs"),
            (31_000, "31.0µs"),
            (312_400, "312µs"),
            (999_499, "999µs"),
            (999_500, "1.00ms"),
            (1_250_000, "1.25ms"),
            (120_000_000, "120ms"),
            (2_500_000_000, "2.50s"),
            (3_600_000_000_000, "3600s"),
            (u64::MAX, "18446744074s"),
        ];
        for (ns, want) in cases {
            assert_eq!(human_ns(ns), want, "{ns}");
        }
    }
}

/// Builders shared by the output tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::{
        io::{self, Write},
        sync::{Arc, Mutex},
    };

    use tracer_common::Tuple;

    use crate::journey::{Point, Step};

    /// A `Write` whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    pub struct Shared(pub Arc<Mutex<Vec<u8>>>);

    impl Shared {
        /// Everything written so far, as text.
        pub fn text(&self) -> String {
            String::from_utf8(self.0.lock().map(|b| b.clone()).unwrap_or_default()).unwrap()
        }
    }

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    pub use crate::test_support::t;

    /// A tc step.
    pub fn tc(point: Point, iface: &str, tuple: Tuple, ktime_ns: u64) -> Step {
        Step::tc_at(point, Some(iface), tuple, ktime_ns)
    }

    /// A NAT step from `orig` to `tuple`.
    pub fn nat(
        point: Point,
        orig: Tuple,
        tuple: Tuple,
        ktime_ns: u64,
        latency: Option<u64>,
    ) -> Step {
        let mut s = Step::nat_at(point, orig, tuple, ktime_ns);
        s.nat_mut().latency_ns = latency;
        s
    }

    /// The output tests' DNAT journey: pod to a ClusterIP, DNATed to a backend pod, its rule
    /// named with the explainer's why line.
    pub fn whereami() -> crate::journey::Journey {
        use crate::journey::{Attribution, Ending, Journey};
        let pre = t(
            tracer_common::PROTO_TCP,
            "10.13.76.46:41234",
            "10.0.159.58:80",
        );
        let post = t(
            tracer_common::PROTO_TCP,
            "10.13.76.46:41234",
            "10.13.76.26:80",
        );
        let mut dnat = nat(Point::Dnat, pre, post, 1_003_120, Some(2710));
        dnat.attribution = Some(Arc::new(Attribution {
            rule: "KUBE-SEP-6HBOEI5FVFTJNRJ3".into(),
            service: Some("default/whereami".into()),
            why: Some(
                "DNAT by KUBE-SEP-6HBOEI5FVFTJNRJ3 (service default/whereami via \
                 KUBE-SVC-7G2JV7LNOR6DDNIY, 1 of 2 endpoints)"
                    .into(),
            ),
        }));
        Journey {
            steps: vec![
                tc(Point::Ingress, "azv47c3ee9d512", pre, 1_000_000),
                dnat,
                tc(Point::Egress, "azva4124965a9b", post, 1_009_410),
            ],
            ending: Ending::Left,
        }
    }
}
