//! TCP retention pinned and unpinned: the traced pod's TCP streams (DNAT and MASQUERADE),
//! untraced and with `pktrace --pod-ip <client> -o json --follow` writing to a file, both ways
//! in the same rounds. Pinned as in the other phases (traffic on CPU 0, the tracer's user space
//! on CPU 1); unpinned, every process the bench starts (iperf3 client and servers, pktrace) is
//! free on every CPU, the way `sudo pktrace` runs on a node: the tracer's user space then
//! competes with the packets it traces for the CPUs. Also pktrace's peak memory (`VmHWM`), the
//! events it lost and the journeys it closed early in each run. With `--baseline`, that binary
//! traces the same streams in the same rounds, right after the measured one.

use std::{fmt::Write as _, path::Path};

use anyhow::Result;

use super::{
    Ctx, Results,
    iperf::{Servers, Stream},
    micro::Binary,
    proc,
    stats::{Dist, Table, show},
    throughput,
    tracer::{Condition, Launch, Output, Tracer, json_totals},
};

/// Where the bench's processes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Traffic on CPU 0, the tracer on CPU 1 (as in the other phases).
    Pinned,
    /// Everything on every CPU.
    Free,
}

impl Placement {
    pub const ALL: [Self; 2] = [Self::Pinned, Self::Free];

    /// A short key for raw data.
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::Free => "unpinned",
        }
    }
}

/// The streams of this phase.
pub const STREAMS: [Stream; 2] = [Stream::TcpClusterIp, Stream::TcpMasq];

/// One stream, untraced or traced, pinned or not, in one round.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub round: usize,
    pub placement: Placement,
    pub stream: Stream,
    pub traced: bool,
    /// The pktrace that traced (the measured one when untraced).
    pub binary: Binary,
    /// Goodput at the receiver, bits per second.
    pub bps: f64,
    /// pktrace's `VmHWM` just before it was stopped, KiB (0 untraced).
    pub hwm_kib: u64,
    /// Events the kernel could not put in the full ring during the stream.
    pub lost: u64,
    /// Journeys closed early (the summary's `evicted_journeys`).
    pub evicted: u64,
}

/// Runs `ctx.runs` rounds: each TCP stream pinned then unpinned, untraced then traced (then
/// traced by `baseline`, when given). The servers are moved with the placement and put back on
/// the traffic CPU at the end.
pub fn run(ctx: &Ctx, servers: &Servers, baseline: Option<&Path>) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    let result = rounds(ctx, servers, baseline, &mut out);
    proc::set_free(false);
    servers.place()?;
    result.map(|()| out)
}

fn rounds(
    ctx: &Ctx,
    servers: &Servers,
    baseline: Option<&Path>,
    out: &mut Vec<Sample>,
) -> Result<()> {
    for round in 0..ctx.runs {
        for stream in STREAMS {
            for placement in Placement::ALL {
                proc::set_free(placement == Placement::Free);
                servers.place()?;
                eprintln!(
                    "bench: unpinned round {}/{}: {stream}, {}",
                    round + 1,
                    ctx.runs,
                    placement.key()
                );
                for tracer in order(round, &ctx.pktrace, baseline) {
                    super::check_interrupted()?;
                    out.push(one(ctx, round, stream, placement, tracer)?);
                }
            }
        }
    }
    Ok(())
}

/// Who traces the runs of a round, in order: nobody (untraced) first, then the measured
/// binary and the baseline, the measured one first in even rounds, so that neither always runs
/// in the other's wake.
fn order<'a>(
    round: usize,
    measured: &'a Path,
    baseline: Option<&'a Path>,
) -> Vec<Option<(Binary, &'a Path)>> {
    let mut traced = vec![Some((Binary::Measured, measured))];
    if let Some(b) = baseline {
        traced.push(Some((Binary::Baseline, b)));
        if round % 2 == 1 {
            traced.reverse();
        }
    }
    let mut all = vec![None];
    all.extend(traced);
    all
}

fn one(
    ctx: &Ctx,
    round: usize,
    stream: Stream,
    placement: Placement,
    tracer: Option<(Binary, &Path)>,
) -> Result<Sample> {
    let with_pktrace = tracer.is_some();
    let path = ctx.dir.join("unpinned.json");
    let launch = Launch {
        out: Output::File(&path),
        ..Launch::default()
    };
    let condition = if with_pktrace {
        Condition::ClientPod
    } else {
        Condition::Untraced
    };
    let (binary, pktrace) = tracer.unwrap_or((Binary::Measured, &ctx.pktrace));
    let mut tracer = Tracer::start(condition, &ctx.dir, pktrace, &launch)?;
    let measured = throughput::measure(ctx, round, condition, stream, tracer.as_mut())?;
    let mut sample = Sample {
        round,
        placement,
        stream,
        traced: with_pktrace,
        binary,
        bps: measured.result.recv_bps,
        hwm_kib: 0,
        lost: measured.counters.ringbuf_full,
        evicted: 0,
    };
    if let Some(tracer) = tracer {
        sample.hwm_kib = tracer.memory()?.hwm;
        tracer.stop()?;
        sample.evicted = json_totals(&path)?.evicted_journeys;
    }
    let _ = std::fs::remove_file(&path);
    eprintln!(
        "bench:   {}: {:.2} Gbit/s{}",
        match (with_pktrace, binary) {
            (false, _) => "untraced",
            (true, Binary::Measured) => "traced",
            (true, Binary::Baseline) => "traced (baseline)",
        },
        sample.bps / 1e9,
        if with_pktrace {
            format!(
                ", VmHWM {:.1} MiB, {} events lost, {} journeys closed early",
                mib(sample.hwm_kib),
                sample.lost,
                sample.evicted
            )
        } else {
            String::new()
        }
    );
    Ok(sample)
}

/// KiB as MiB.
#[expect(clippy::cast_precision_loss, reason = "KiB counts far below 2^52")]
#[must_use]
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Sample {
    /// Who traced the run: `None` untraced.
    fn tracer(&self) -> Option<Binary> {
        self.traced.then_some(self.binary)
    }
}

/// The measured binary's traced stream's goodput over the untraced one's in the same round, for
/// one stream and placement; `None` when no round has both.
#[must_use]
pub fn retention(samples: &[Sample], stream: Stream, placement: Placement) -> Option<Dist> {
    ratio(samples, stream, placement, Some(Binary::Measured), None)
}

/// For one stream and placement, the goodput of the runs `over` traced (`None`: untraced) over
/// that of the run `under` traced in the same round; `None` when no round has both.
fn ratio(
    samples: &[Sample],
    stream: Stream,
    placement: Placement,
    over: Option<Binary>,
    under: Option<Binary>,
) -> Option<Dist> {
    let of = |tracer: Option<Binary>| {
        samples
            .iter()
            .filter(move |s| s.stream == stream && s.placement == placement && s.tracer() == tracer)
    };
    Dist::of(of(over).filter_map(|o| {
        of(under)
            .find(|u| u.round == o.round && u.bps > 0.0)
            .map(|u| o.bps / u.bps)
    }))
}

/// The phase's table: per stream and placement, the untraced goodput, the traced one's ratio
/// to it in the same round, and pktrace's peak memory, losses and early closes; with a
/// baseline, its retention and the measured binary's goodput over its own in the same round.
#[must_use]
pub fn table(samples: &[Sample]) -> Table {
    let with_baseline = samples.iter().any(|s| s.binary == Binary::Baseline);
    let mut head = vec![
        "stream",
        "CPUs",
        "untraced, Gbit/s",
        "traced, Gbit/s",
        "retention (traced / untraced, same round)",
        "pktrace VmHWM, MiB",
        "events lost (sum)",
        "journeys closed early (sum)",
    ];
    if with_baseline {
        head.extend([
            "baseline: retention (same round)",
            "traced / baseline traced (same round)",
        ]);
    }
    let mut table = Table::new(head);
    for stream in STREAMS {
        for placement in Placement::ALL {
            let of = |traced: bool| {
                samples.iter().filter(move |s| {
                    s.stream == stream
                        && s.placement == placement
                        && s.traced == traced
                        && s.binary == Binary::Measured
                })
            };
            let show_ratio = |d: Option<Dist>| d.map_or_else(|| "–".into(), |d| d.show_ratio());
            let mut row = vec![
                stream.to_string(),
                match placement {
                    Placement::Pinned => "pinned (traffic CPU 0, tracer CPU 1)".into(),
                    Placement::Free => "unpinned (all on every CPU)".to_owned(),
                },
                show(Dist::of(of(false).map(|s| s.bps / 1e9)), 1),
                show(Dist::of(of(true).map(|s| s.bps / 1e9)), 1),
                show_ratio(retention(samples, stream, placement)),
                show(Dist::of(of(true).map(|s| mib(s.hwm_kib))), 1),
                of(true).map(|s| s.lost).sum::<u64>().to_string(),
                of(true).map(|s| s.evicted).sum::<u64>().to_string(),
            ];
            if with_baseline {
                let (measured, baseline) = (Some(Binary::Measured), Some(Binary::Baseline));
                row.push(show_ratio(ratio(
                    samples, stream, placement, baseline, None,
                )));
                row.push(show_ratio(ratio(
                    samples, stream, placement, measured, baseline,
                )));
            }
            table.row(row);
        }
    }
    table
}

/// The report's sections of this phase and of the peaks every phase noted: Markdown, empty
/// when neither was measured.
#[must_use]
pub fn sections(r: &Results) -> String {
    let mut out = String::new();
    if !r.unpinned.is_empty() {
        let _ = write!(
            out,
            "#### TCP retention, pinned and unpinned\n\nThe traced pod's TCP streams, untraced \
             then with `pktrace --pod-ip <client> --follow -o json` writing to a tmpfs file, in \
             the same rounds pinned (traffic on CPU 0, pktrace on CPU 1) and unpinned (every \
             process free on every CPU, as `sudo pktrace` runs on a node); {} of {} s each; \
             median (min–max).\n\n{}\n",
            super::doc::runs(r.runs),
            r.seconds,
            table(&r.unpinned).markdown()
        );
    }
    if !r.peaks.is_empty() {
        let mut peaks = Table::new(["phase", "largest pktrace VmHWM, MiB"]);
        for (phase, kib) in &r.peaks {
            peaks.row([phase.clone(), format!("{:.1}", mib(*kib))]);
        }
        let _ = write!(
            out,
            "#### Peak memory by phase\n\nEach pktrace's VmHWM (the peak RSS of its whole run, \
             start-up included), read just before it was stopped; the largest of each phase's \
             runs.\n\n{}\n",
            peaks.markdown()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(round: usize, placement: Placement, traced: bool, gbps: f64) -> Sample {
        Sample {
            round,
            placement,
            stream: Stream::TcpClusterIp,
            traced,
            binary: Binary::Measured,
            bps: gbps * 1e9,
            hwm_kib: if traced { 20 * 1024 } else { 0 },
            lost: u64::from(traced),
            evicted: 0,
        }
    }

    #[test]
    fn retention_is_taken_within_each_round_and_placement() {
        let samples = [
            sample(0, Placement::Pinned, false, 10.0),
            sample(0, Placement::Pinned, true, 9.0),
            sample(1, Placement::Pinned, false, 5.0),
            sample(1, Placement::Pinned, true, 5.0),
            sample(2, Placement::Pinned, false, 8.0),
            sample(2, Placement::Pinned, true, 7.6),
            sample(0, Placement::Free, false, 12.0),
            sample(0, Placement::Free, true, 6.0),
        ];
        let t = table(&samples);
        let pinned = &t.rows[0];
        assert_eq!(pinned[4], "0.950× (0.900–1.000)");
        assert_eq!(pinned[5], "20.0 (20.0–20.0)");
        assert_eq!(pinned[6], "3");
        let free = &t.rows[1];
        assert_eq!((free[2].as_str(), free[4].as_str()), ("12.0", "0.500×"));
        assert_eq!(t.rows[2][4], "–", "MASQUERADE not measured");
    }

    #[test]
    fn a_baseline_is_compared_within_each_round_and_kept_out_of_the_measured_figures() {
        let baseline = |round, gbps: f64| Sample {
            binary: Binary::Baseline,
            ..sample(round, Placement::Free, true, gbps)
        };
        let samples = [
            sample(0, Placement::Free, false, 10.0),
            sample(0, Placement::Free, true, 9.0),
            baseline(0, 8.0),
            sample(1, Placement::Free, false, 20.0),
            sample(1, Placement::Free, true, 18.0),
            baseline(1, 20.0),
        ];
        assert_eq!(
            retention(&samples, Stream::TcpClusterIp, Placement::Free)
                .unwrap()
                .show_ratio(),
            "0.900× (0.900–0.900)"
        );
        let t = table(&samples);
        let free = &t.rows[1];
        assert_eq!(
            free[3], "13.5 (9.0–18.0)",
            "the baseline's goodput is not the measured one's"
        );
        assert_eq!(free[8], "0.900× (0.800–1.000)");
        assert_eq!(free[9], "1.012× (0.900–1.125)");
        assert_eq!(t.rows[0].len(), 10, "every row has the baseline's columns");
    }

    #[test]
    fn the_untraced_run_comes_first_and_the_two_binaries_take_turns() {
        let (m, b) = (Path::new("m"), Path::new("b"));
        let keys = |round| {
            order(round, m, Some(b))
                .into_iter()
                .map(|t| t.map(|(binary, _)| binary.key()))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(0), [None, Some("measured"), Some("baseline")]);
        assert_eq!(keys(1), [None, Some("baseline"), Some("measured")]);
        assert_eq!(order(1, m, None).len(), 2, "untraced and the measured one");
    }
}
