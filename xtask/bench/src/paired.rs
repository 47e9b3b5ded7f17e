//! Throughput retention against an untraced twin: each TCP stream of the throughput phase runs
//! with a second TCP stream beside it on the same CPU, between two namespaces outside the node
//! that no tracer sees ([`super::net::TWIN_CLIENT_NS`]). The two share the CPU and whatever the
//! machine does to it during those seconds (other guests, frequency, the host's scheduling), so
//! the measured stream's goodput over the twin's moves only with what the measured path costs.
//! A condition's retention is that ratio over the untraced run's ratio in the same round and
//! stream. With `--baseline <pktrace>`, each pktrace condition also runs under that binary, right
//! after (or, every other round, right before) the measured one.
//!
//! Why it holds: both iperf3 clients are CPU-bound on one CPU, and a packet's whole way to its
//! receiver (the programs on its hooks included) runs in its sender's context, so the
//! scheduler gives each stream about the same CPU time and a stream's goodput goes as the
//! inverse of its cost per byte. A cost `δ` added to a path of cost `c` per byte changes the
//! ratio by `c / (c + δ)`, the retention the same stream would show alone, with a small part
//! of a lone stream's run-to-run spread (BENCHMARKS.md "TCP measure noise").

use std::path::Path;

use anyhow::Result;

use super::{
    Ctx,
    iperf::{self, Stream},
    micro::Binary,
    throughput,
    tracer::Condition,
};

/// The streams this phase pairs with the twin.
pub const STREAMS: [Stream; 2] = [Stream::TcpClusterIp, Stream::TcpMasq];

/// One stream beside the twin, under one condition, in one round.
#[derive(Clone, Copy, Debug)]
pub struct PairSample {
    pub round: usize,
    pub condition: Condition,
    /// Which pktrace ran (conditions without pktrace: [`Binary::Measured`]).
    pub binary: Binary,
    pub stream: Stream,
    /// Goodput of the measured stream and of the twin, bits per second.
    pub bps: f64,
    pub twin_bps: f64,
}

impl PairSample {
    /// The measured stream's goodput over the twin's.
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.bps / self.twin_bps
    }
}

/// Runs `ctx.runs` rounds of every condition over [`STREAMS`], interleaved as in the throughput
/// phase (a fresh tracer for every run); with a baseline, its pktrace conditions too.
pub fn run(ctx: &Ctx, baseline: Option<&Path>) -> Result<Vec<PairSample>> {
    let mut out = Vec::new();
    for round in 0..ctx.runs {
        for stream in STREAMS {
            eprintln!(
                "bench: beside the twin, round {}/{}: {stream}",
                round + 1,
                ctx.runs
            );
            for condition in Condition::ALL {
                let mut binaries = vec![(Binary::Measured, ctx.pktrace.as_path())];
                if let Some(b) = baseline.filter(|_| condition.is_pktrace()) {
                    binaries.push((Binary::Baseline, b));
                    if round % 2 == 1 {
                        binaries.reverse();
                    }
                }
                for (binary, pktrace) in binaries {
                    out.push(one(ctx, round, stream, condition, (binary, pktrace))?);
                }
            }
        }
    }
    Ok(out)
}

/// One run of a stream beside the twin.
fn one(
    ctx: &Ctx,
    round: usize,
    stream: Stream,
    condition: Condition,
    (binary, pktrace): (Binary, &Path),
) -> Result<PairSample> {
    super::check_interrupted()?;
    let (_empty, mut tracer) = throughput::start_condition(ctx, condition, pktrace)?;
    let (bps, twin_bps) = iperf::run_with_twin(stream, ctx.seconds, &ctx.dir)?;
    if let Some(mut t) = tracer.take() {
        t.check_alive()?;
        t.stop()?;
    }
    anyhow::ensure!(
        bps > 0.0 && twin_bps > 0.0,
        "{stream} beside the twin: no goodput ({bps} and {twin_bps} bit/s)"
    );
    let sample = PairSample {
        round,
        condition,
        binary,
        stream,
        bps,
        twin_bps,
    };
    eprintln!(
        "bench:   {}{}: {:.2} Gbit/s, twin {:.2} Gbit/s, ratio {:.3}",
        condition.label(),
        if binary == Binary::Baseline {
            " (baseline)"
        } else {
            ""
        },
        bps / 1e9,
        twin_bps / 1e9,
        sample.ratio()
    );
    Ok(sample)
}

/// Per run of `condition` on `stream` by `binary`: its ratio to the twin over the untraced
/// run's ratio in the same round.
pub fn retention(
    samples: &[PairSample],
    condition: Condition,
    stream: Stream,
    binary: Binary,
) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.condition == condition && s.stream == stream && s.binary == binary)
        .filter_map(|s| {
            samples
                .iter()
                .find(|u| {
                    u.condition == Condition::Untraced && u.stream == stream && u.round == s.round
                })
                .map(|u| s.ratio() / u.ratio())
        })
        .collect()
}

/// Per round of `condition` on `stream`: the measured binary's ratio to the twin over the
/// baseline's, in the same round.
pub fn versus_baseline(samples: &[PairSample], condition: Condition, stream: Stream) -> Vec<f64> {
    let of = |binary: Binary| {
        samples
            .iter()
            .filter(move |s| s.condition == condition && s.stream == stream && s.binary == binary)
    };
    of(Binary::Measured)
        .filter_map(|m| {
            of(Binary::Baseline)
                .find(|b| b.round == m.round)
                .map(|b| m.ratio() / b.ratio())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(round: usize, condition: Condition, bps: f64, twin_bps: f64) -> PairSample {
        PairSample {
            round,
            condition,
            binary: Binary::Measured,
            stream: Stream::TcpMasq,
            bps,
            twin_bps,
        }
    }

    #[test]
    fn retention_is_the_ratio_over_the_same_rounds_untraced_ratio() {
        let s = [
            sample(0, Condition::Untraced, 6.0, 5.0),
            sample(0, Condition::ClientPod, 5.7, 5.0),
            // A slower machine in round 1 moves both streams: the retention stays.
            sample(1, Condition::Untraced, 3.0, 2.5),
            sample(1, Condition::ClientPod, 2.85, 2.5),
            // No untraced run in round 2: no figure.
            sample(2, Condition::ClientPod, 1.0, 1.0),
        ];
        let r = retention(&s, Condition::ClientPod, Stream::TcpMasq, Binary::Measured);
        assert_eq!(r.len(), 2);
        for x in r {
            assert!((x - 0.95).abs() < 1e-9, "{x}");
        }
        assert!(
            retention(
                &s,
                Condition::ClientPod,
                Stream::TcpClusterIp,
                Binary::Measured
            )
            .is_empty()
        );
        assert!(retention(&s, Condition::ClientPod, Stream::TcpMasq, Binary::Baseline).is_empty());
        let u = retention(&s, Condition::Untraced, Stream::TcpMasq, Binary::Measured);
        assert!(u.iter().all(|x| (x - 1.0).abs() < 1e-12));
    }
}

#[cfg(test)]
mod baseline_tests {
    use super::*;

    #[test]
    fn versus_baseline_pairs_rounds() {
        let s = |round, binary, bps| PairSample {
            round,
            condition: Condition::ClientPod,
            binary,
            stream: Stream::TcpClusterIp,
            bps,
            twin_bps: 2.0,
        };
        let samples = [
            s(0, Binary::Measured, 1.9),
            s(0, Binary::Baseline, 1.0),
            s(1, Binary::Baseline, 1.0),
            s(1, Binary::Measured, 1.1),
            s(2, Binary::Measured, 5.0),
        ];
        let v = versus_baseline(&samples, Condition::ClientPod, Stream::TcpClusterIp);
        assert_eq!(v.len(), 2);
        assert!(
            (v[0] - 1.9).abs() < 1e-9 && (v[1] - 1.1).abs() < 1e-9,
            "{v:?}"
        );
    }
}
