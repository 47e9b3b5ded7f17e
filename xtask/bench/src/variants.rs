//! Where an emitted tc run's time goes: the measured pktrace beside builds of it that each
//! leave one part of the traced path out (`--only variants --variant NAME=PKTRACE …`), in the
//! same rounds and streams, with the bench's empty tc program ([`super::floor`]) on the same
//! hooks. Each build's tc programs, net of the floor measured during the same stream, less the
//! measured build's, is what that part costs under the stream, cache misses included.
//!
//! Only the condition whose every packet is emitted (`--pod-ip` of the streaming pod) and the
//! streams through each path that costs differently (TCP and UDP to the ClusterIP, TCP through
//! MASQUERADE, whose replies are a followed flow's) run; the order of the builds rotates round
//! by round. Prints a table; writes nothing.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context as _, Result, ensure};

use super::{
    Ctx,
    bpf::{RunStats, prog_runs},
    floor::{Floor, TC_NAME},
    iperf::Stream,
    stats::{Dist, Table},
    throughput::measure,
    tracer::{Condition, Launch, Tracer},
};

/// The streams of this phase.
const STREAMS: [Stream; 3] = [Stream::TcpClusterIp, Stream::UdpClusterIp, Stream::TcpMasq];
/// The programs compared.
const PROGRAMS: [&str; 2] = ["tc_ingress", "tc_egress"];
/// The name the measured build goes by in the table.
pub const MEASURED: &str = "measured";

/// A build to measure: its name in the table and its pktrace.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub pktrace: PathBuf,
}

impl Variant {
    /// Parses `NAME=PATH`.
    ///
    /// # Errors
    /// Without `=`, with an empty name, or when `PATH` is no file.
    pub fn parse(spec: &str) -> Result<Self> {
        let (name, path) = spec
            .split_once('=')
            .context("--variant takes NAME=PKTRACE (a name for the table, a pktrace binary)")?;
        ensure!(
            !name.is_empty() && name != MEASURED,
            "--variant {spec}: give the build a name other than {MEASURED:?}"
        );
        let pktrace = PathBuf::from(path);
        ensure!(pktrace.is_file(), "--variant {spec}: no such file {path}");
        Ok(Self {
            name: name.to_owned(),
            pktrace,
        })
    }
}

/// One program's ns per run in one stream run, and the floor's in the same run.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ns_per_run: f64,
    floor_ns: Option<f64>,
}

/// Samples by (build, program, stream).
type Samples = BTreeMap<(String, &'static str, Stream), Vec<Sample>>;

/// Runs `ctx.runs` rounds of every build over [`STREAMS`] and prints the table.
///
/// # Errors
/// When statistics cannot be enabled or a tracer or stream fails.
pub fn run(ctx: &Ctx, variants: &[Variant]) -> Result<()> {
    ensure!(
        !variants.is_empty(),
        "the variants phase needs at least one --variant NAME=PKTRACE"
    );
    let _stats = RunStats::enable()?;
    let (_floor, floor_ids) = Floor::attach_or_none();
    let mut builds = vec![Variant {
        name: MEASURED.to_owned(),
        pktrace: ctx.pktrace.clone(),
    }];
    builds.extend_from_slice(variants);
    let mut samples = Samples::new();
    for round in 0..ctx.runs {
        let mut order = builds.clone();
        order.rotate_left(round % builds.len());
        for build in &order {
            eprintln!(
                "bench: variants round {}/{}: {}",
                round + 1,
                ctx.runs,
                build.name
            );
            let condition = Condition::ClientPod;
            let tracer = Tracer::start(condition, &ctx.dir, &build.pktrace, &Launch::default())?;
            let Some(mut tracer) = tracer else { continue };
            for stream in STREAMS {
                super::check_interrupted()?;
                let before = prog_runs(&tracer.prog_ids)?;
                let floor_before = prog_runs(&floor_ids)?;
                measure(ctx, round, condition, stream, Some(&mut tracer))?;
                let after = prog_runs(&tracer.prog_ids)?;
                let floor_after = prog_runs(&floor_ids)?;
                let floor_ns = per_run(&floor_before, &floor_after, TC_NAME);
                for program in PROGRAMS {
                    if let Some(ns_per_run) = per_run(&before, &after, program) {
                        eprintln!("bench:   {stream}: {program}: {ns_per_run:.0} ns/run");
                        samples
                            .entry((build.name.clone(), program, stream))
                            .or_default()
                            .push(Sample {
                                ns_per_run,
                                floor_ns,
                            });
                    }
                }
            }
            tracer.stop()?;
        }
    }
    println!("{}", table(&builds, &samples).markdown());
    Ok(())
}

/// ns per run of `program` between two readings, `None` when it did not run.
#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn per_run(
    before: &BTreeMap<String, super::bpf::ProgRun>,
    after: &BTreeMap<String, super::bpf::ProgRun>,
    program: &str,
) -> Option<f64> {
    let end = after.get(program)?;
    let start = before.get(program).copied().unwrap_or_default();
    let runs = end.run_cnt.saturating_sub(start.run_cnt);
    let ns = end.run_time_ns.saturating_sub(start.run_time_ns);
    (runs > 0).then(|| ns as f64 / runs as f64)
}

/// One row per build and program: per stream, the median ns per run, net of the floor of the
/// same stream run, and the median of the net differences to the measured build's in the same
/// round.
fn table(builds: &[Variant], samples: &Samples) -> Table {
    let mut header = vec!["build".to_owned(), "program".to_owned()];
    header.extend(
        STREAMS
            .iter()
            .map(|s| format!("{}: raw / net / Δ net", s.short())),
    );
    let mut t = Table::new(header);
    for build in builds {
        for program in PROGRAMS {
            let mut row = vec![build.name.clone(), program.to_owned()];
            for stream in STREAMS {
                row.push(cell(samples, &build.name, program, stream));
            }
            t.row(row);
        }
    }
    let floor: Vec<f64> = samples
        .values()
        .flatten()
        .filter_map(|s| s.floor_ns)
        .collect();
    if let Some(d) = Dist::of(floor) {
        t.row([
            "floor".to_owned(),
            TC_NAME.to_owned(),
            d.show(0),
            String::new(),
            String::new(),
        ]);
    }
    t
}

/// `raw / net / Δ net` of one build's program in one stream (dashes where unknown).
fn cell(samples: &Samples, build: &str, program: &'static str, stream: Stream) -> String {
    let key = |b: &str| (b.to_owned(), program, stream);
    let Some(own) = samples.get(&key(build)) else {
        return "–".into();
    };
    let net = |s: &Sample| s.floor_ns.map(|f| s.ns_per_run - f);
    let raw = Dist::of(own.iter().map(|s| s.ns_per_run));
    let own_net = Dist::of(own.iter().filter_map(net));
    // Round by round: the n-th sample of each build is the n-th round's.
    let delta = samples.get(&key(MEASURED)).and_then(|m| {
        Dist::of(
            own.iter()
                .zip(m)
                .filter_map(|(o, m)| Some(net(o)? - net(m)?)),
        )
    });
    let show = |d: Option<Dist>| d.map_or_else(|| "–".to_owned(), |d| format!("{:.0}", d.median));
    format!("{} / {} / {}", show(raw), show(own_net), show(delta))
}

#[cfg(test)]
mod tests {
    use super::{MEASURED, Sample, Samples, Stream, Variant, cell};

    #[test]
    fn a_variant_is_a_name_and_an_existing_file() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let path = file.path().display().to_string();
        let v = Variant::parse(&format!("noclock={path}")).unwrap();
        assert_eq!(
            (v.name.as_str(), v.pktrace.as_path()),
            ("noclock", file.path())
        );
        assert!(Variant::parse(&path).is_err());
        assert!(Variant::parse(&format!("={path}")).is_err());
        assert!(Variant::parse(&format!("{MEASURED}={path}")).is_err());
        assert!(Variant::parse("x=/nonexistent/pktrace").is_err());
    }

    #[test]
    fn a_cell_is_raw_net_of_the_floor_and_the_net_difference_round_by_round() {
        let s = |ns_per_run, floor| Sample {
            ns_per_run,
            floor_ns: Some(floor),
        };
        let mut samples = Samples::new();
        let key = |b: &str| (b.to_owned(), "tc_egress", Stream::TcpClusterIp);
        samples.insert(
            key(MEASURED),
            vec![s(300.0, 80.0), s(320.0, 90.0), s(310.0, 85.0)],
        );
        samples.insert(
            key("noring"),
            vec![s(250.0, 90.0), s(260.0, 80.0), s(255.0, 85.0)],
        );
        assert_eq!(
            cell(&samples, MEASURED, "tc_egress", Stream::TcpClusterIp),
            "310 / 225 / 0"
        );
        // Net 160, 180, 170 against 220, 230, 225: differences −60, −50, −55.
        assert_eq!(
            cell(&samples, "noring", "tc_egress", Stream::TcpClusterIp),
            "255 / 170 / -55"
        );
        assert_eq!(
            cell(&samples, "other", "tc_egress", Stream::TcpClusterIp),
            "–"
        );
    }
}
