use super::*;
use crate::{
    floor,
    hooks::HookSample,
    micro::Binary,
    proc::Memory,
    tracer::JsonTotals,
    unpinned::{Placement, Sample},
};

/// The rows of [`targets`], in order.
const PEAK: usize = 0;
const TRACED: usize = 1;
const OUTSIDE: usize = 2;
const PINNED: usize = 3;
const UNPINNED: usize = 4;
const COLLECTOR: usize = 6;
const LOST: usize = 7;

fn hook(
    condition: Condition,
    stream: Stream,
    round: usize,
    program: &str,
    (ns_per_run, runs_per_s): (f64, f64),
) -> HookSample {
    HookSample {
        round,
        condition,
        stream,
        program: program.to_owned(),
        ns_per_run,
        runs_per_s,
    }
}

/// One stream of one round: `tc_ingress` at 250 ns + `extra` (1,000 runs/s) and `tc_egress`
/// at 150 ns + `extra` (3,000 runs/s), runs-weighted 175 ns + `extra`; the empty tc program
/// at `floor_ns`.
fn stream_run(
    r: &mut Results,
    condition: Condition,
    stream: Stream,
    round: usize,
    (extra, floor_ns): (f64, f64),
) {
    let h = &mut r.hooks;
    for (program, ns, runs) in [("tc_ingress", 250.0, 1e3), ("tc_egress", 150.0, 3e3)] {
        h.samples
            .push(hook(condition, stream, round, program, (ns + extra, runs)));
    }
    // A netfilter program: never part of the tc figure.
    h.samples
        .push(hook(condition, stream, round, "nf_enter", (900.0, 1e3)));
    h.floor.push(hook(
        condition,
        stream,
        round,
        floor::TC_NAME,
        (floor_ns, 4e3),
    ));
}

fn cell(r: &Results, row: usize) -> (String, String) {
    let table = targets(r);
    (table.rows[row][1].clone(), table.rows[row][2].clone())
}

#[test]
fn nothing_measured_is_said_as_such() {
    let table = targets(&Results::default());
    assert_eq!(table.rows.len(), 9);
    for row in &table.rows {
        assert_eq!(row[2], "not measured", "{row:?}");
        assert!(!row[0].contains("issue"), "{row:?}");
    }
}

#[test]
fn traced_tc_cost_is_runs_weighted_and_net_of_the_empty_program() {
    let mut r = Results::default();
    stream_run(
        &mut r,
        Condition::ClientPod,
        Stream::TcpClusterIp,
        0,
        (0.0, 24.0),
    );
    let (measured, met) = cell(&r, TRACED);
    assert_eq!(met, "**no**", "151 ns net: {measured}");
    assert!(
        measured.starts_with(
            "worst stream TCP DNAT: 151 ns net (tc programs 175 ns per run, runs-weighted, \
             less the empty tc program's 24 ns; median of 1 run)"
        ),
        "{measured}"
    );
    assert!(
        measured.contains("slowest single program: tc_ingress 226 ns net (TCP DNAT)"),
        "{measured}"
    );

    let mut r = Results::default();
    stream_run(
        &mut r,
        Condition::ClientPod,
        Stream::TcpClusterIp,
        0,
        (0.0, 26.0),
    );
    assert_eq!(cell(&r, TRACED).1, "yes", "149 ns net");
    assert_eq!(
        cell(&r, OUTSIDE).1,
        "not measured",
        "only --pod-ip of this pod"
    );
}

#[test]
fn the_worst_stream_is_judged_on_its_median_over_the_rounds() {
    let mut r = Results::default();
    // TCP DNAT: 125, 149 and 300 ns net: median 149.
    for (round, extra) in [(0, -25.0), (1, -1.0), (2, 150.0)] {
        stream_run(
            &mut r,
            Condition::ClientPod,
            Stream::TcpClusterIp,
            round,
            (extra, 25.0),
        );
    }
    assert_eq!(cell(&r, TRACED).1, "yes");
    // UDP MASQ: 151 ns net in its one round.
    stream_run(
        &mut r,
        Condition::ClientPod,
        Stream::UdpMasq,
        0,
        (1.0, 25.0),
    );
    let (measured, met) = cell(&r, TRACED);
    assert_eq!(met, "**no**");
    assert!(
        measured.starts_with("worst stream UDP MASQ: 151 ns net"),
        "{measured}"
    );
    assert!(
        measured.contains("per stream, ns net: TCP DNAT 149, UDP MASQ 151"),
        "{measured}"
    );
}

#[test]
fn packets_outside_the_filter_are_judged_against_50_ns() {
    let mut r = Results::default();
    stream_run(
        &mut r,
        Condition::OtherPod,
        Stream::TcpMasq,
        0,
        (-124.0, 0.0),
    );
    assert_eq!(cell(&r, OUTSIDE), ("worst stream TCP MASQ: 51 ns net (tc programs 51 ns per run, runs-weighted, less the empty tc program's 0 ns; median of 1 run); per stream, ns net: TCP MASQ 51; slowest single program: tc_ingress 126 ns net (TCP MASQ)".to_owned(), "**no**".to_owned()));
    let mut r = Results::default();
    stream_run(
        &mut r,
        Condition::OtherPod,
        Stream::TcpMasq,
        0,
        (-126.0, 0.0),
    );
    assert_eq!(cell(&r, OUTSIDE).1, "yes", "49 ns net");
    assert_eq!(cell(&r, TRACED).1, "not measured");
}

#[test]
fn without_the_empty_program_the_tc_cost_is_not_judged() {
    let mut r = Results::default();
    stream_run(
        &mut r,
        Condition::ClientPod,
        Stream::TcpClusterIp,
        0,
        (0.0, 0.0),
    );
    r.hooks.floor.clear();
    let (measured, met) = cell(&r, TRACED);
    assert_eq!(met, "not measured");
    assert!(measured.starts_with("175 ns per run raw"), "{measured}");
}

#[test]
fn peak_memory_is_judged_on_the_largest_phase() {
    let mut r = Results {
        peaks: vec![("hooks".into(), 20 * 1024), ("unpinned".into(), 32 * 1024)],
        ..Results::default()
    };
    assert_eq!(
        cell(&r, PEAK),
        (
            "32.0 MiB in phase unpinned (the largest of any run); other phases, MiB: hooks 20.0"
                .to_owned(),
            "yes".to_owned()
        )
    );
    r.peaks[0].1 = 32 * 1024 + 1;
    let (measured, met) = cell(&r, PEAK);
    assert_eq!(met, "**no**");
    assert!(measured.contains("in phase hooks"), "{measured}");
}

fn unpinned(placement: Placement, stream: Stream, round: usize, traced_gbps: f64) -> [Sample; 2] {
    let one = |traced: bool, gbps: f64| Sample {
        round,
        placement,
        stream,
        traced,
        binary: Binary::Measured,
        bps: gbps * 1e9,
        hwm_kib: 0,
        lost: 0,
        evicted: 0,
    };
    [one(false, 10.0), one(true, traced_gbps)]
}

#[test]
fn retention_is_judged_per_placement_on_every_stream() {
    let mut r = Results::default();
    for (placement, dnat, masq) in [
        (Placement::Pinned, 9.71, 9.69),
        (Placement::Free, 9.01, 9.5),
    ] {
        r.unpinned
            .extend(unpinned(placement, Stream::TcpClusterIp, 0, dnat));
        r.unpinned
            .extend(unpinned(placement, Stream::TcpMasq, 0, masq));
    }
    assert_eq!(
        cell(&r, PINNED),
        (
            "TCP DNAT 0.971×, TCP MASQ 0.969× (traced / untraced in the same round; median of 1 run)"
                .to_owned(),
            "**no**".to_owned()
        )
    );
    assert_eq!(cell(&r, UNPINNED).1, "yes");
    r.unpinned
        .extend(unpinned(Placement::Free, Stream::TcpMasq, 1, 8.9));
    r.unpinned
        .extend(unpinned(Placement::Free, Stream::TcpMasq, 2, 8.9));
    assert_eq!(cell(&r, UNPINNED).1, "**no**", "MASQUERADE's median 0.89×");
}

fn collector(scenario: Scenario, events_per_cpu_s: f64, kernel_lost: u64) -> CollectorSample {
    CollectorSample {
        round: 0,
        scenario,
        binary: Binary::Measured,
        sent_pps: 0.0,
        emitted_per_s: 0.0,
        kernel_lost,
        cpu_pct: 50.0,
        events_per_cpu_s,
        steady_events_per_cpu_s: 0.0,
        totals: JsonTotals::default(),
        output_bytes_per_s: 0.0,
        memory_mid: Memory::default(),
        memory_end: Memory::default(),
    }
}

#[test]
fn the_collector_is_judged_on_real_journeys_only() {
    let mut r = Results {
        collector: vec![
            collector(Scenario::Paced, 3.1e6, 0),
            collector(Scenario::Flood, 3.2e6, 0),
            collector(Scenario::Synthetic, 1e6, 0),
        ],
        ..Results::default()
    };
    let (measured, met) = cell(&r, COLLECTOR);
    assert_eq!(met, "yes", "the synthetic producer is not judged");
    assert!(
        measured.ends_with("(one-step journeys, not judged): 1000 k at 50 % CPU"),
        "{measured}"
    );
    assert_eq!(
        cell(&r, LOST),
        ("0 lost over 1 run".to_owned(), "yes".to_owned())
    );
    r.collector[0] = collector(Scenario::Paced, 2.9e6, 2);
    assert_eq!(cell(&r, COLLECTOR).1, "**no**");
    assert_eq!(cell(&r, LOST).1, "**no**");
    // The measured binary only.
    r.collector[0].binary = Binary::Baseline;
    assert_eq!(cell(&r, COLLECTOR).1, "yes");
    assert_eq!(cell(&r, LOST).1, "not measured");
}

#[test]
fn the_report_heads_the_table_plainly() {
    let tables = crate::report::tables(&Results::default());
    assert!(tables.starts_with("#### Targets\n\n| target "), "{tables}");
    assert!(!tables.to_lowercase().contains("issue"));
}
