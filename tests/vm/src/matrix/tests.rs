use super::*;
use crate::report::{Report, Run, TestResult};

fn outcome(kernel: &str, hook: &str, results: &[(&str, TestOutcome)], probe: &[&str]) -> Outcome {
    Outcome {
        kernel: kernel.to_owned(),
        report: Report {
            runs: vec![Run {
                hook: hook.to_owned(),
                binary: "journeys".to_owned(),
                exit: Some(i32::from(
                    results.iter().any(|r| r.1 == TestOutcome::Failed),
                )),
                tests: results
                    .iter()
                    .map(|(name, outcome)| TestResult {
                        name: (*name).to_owned(),
                        outcome: *outcome,
                        seconds: None,
                    })
                    .collect(),
                ..Run::default()
            }],
            ..Report::default()
        },
        probe: probe.iter().map(|l| (*l).to_owned()).collect(),
        elapsed: Duration::from_secs(400),
        guest: Duration::from_secs(90),
        ..Outcome::default()
    }
}

const PROBE_510: [&str; 4] = [
    "pktrace: tracing 192.0.2.1 (192.0.2.1) on 1 interfaces (clsact): lo",
    "pktrace: NAT hook fentry: skipped (nf_nat_manip_pkt has no BTF)",
    "pktrace: NAT hook kprobe: kprobe/kretprobe on nf_nat_manip_pkt",
    "pktrace: drops: raw tracepoint skb:kfree_skb (location only: this kernel gives no drop \
     reason, said NOT_SPECIFIED)",
];

#[test]
fn reads_what_pktrace_said_at_start_up() {
    let p = probed(&PROBE_510.map(str::to_owned));
    assert_eq!(
        p,
        Probed {
            tc: "clsact".into(),
            auto_hook: "kprobe".into(),
            drops: "no (NOT_SPECIFIED)".into(),
        }
    );
    let p = probed(&[
        "pktrace: drops: tp_btf on skb:kfree_skb (reason and location)".to_owned(),
        "pktrace: tracing * (every packet) on 1 interfaces (tcx): lo".to_owned(),
    ]);
    assert_eq!(p.tc, "tcx");
    assert_eq!(p.drops, "yes (tp_btf)");
    assert_eq!(p.auto_hook, "?");
}

#[test]
fn picks_cells_by_kernel_name_and_arch() {
    assert_eq!(pick(None, None).unwrap().len(), CELLS.len());
    assert_eq!(pick(Some("5.10"), None).unwrap()[0].hooks, ["kprobe"]);
    // 6.1 is a cell on both architectures; --arch narrows it to one.
    assert_eq!(pick(Some("6.1"), None).unwrap().len(), 2);
    let arm = pick(Some("6.1"), Some(Arch::Arm64)).unwrap();
    assert_eq!(arm.len(), 1);
    assert_eq!(arm[0].arch, Arch::Arm64);
    assert!(
        pick(None, Some(Arch::Arm64))
            .unwrap()
            .iter()
            .all(|c| c.arch == Arch::Arm64)
    );
    let err = pick(Some("4.19"), None).unwrap_err().to_string();
    assert!(
        err.contains("5.10 x86_64, 6.1 x86_64, 6.12 x86_64, 6.1 arm64"),
        "{err}"
    );
    assert!(pick(Some("5.10"), Some(Arch::Arm64)).is_err());
}

#[test]
fn one_table_of_test_by_kernel_arch_and_hook() {
    let results = vec![
        (
            CELLS[0],
            Ok(outcome(
                "5.10.0-32-cloud-amd64",
                "kprobe",
                &[("tcp", TestOutcome::Ok), ("udp", TestOutcome::Failed)],
                &PROBE_510,
            )),
        ),
        (CELLS[2], Err(anyhow::anyhow!("no kernel"))),
    ];
    let text = table(&results);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["test", "5.10/x86_64/kprobe", "6.12/x86_64/netfilter"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["journeys::tcp", "ok", "-"]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["journeys::udp", "FAILED", "-"]
    );
    assert!(text.contains("5.10 x86_64: kernel 5.10.0-32-cloud-amd64, 1 passed, 1 failed, guests 90 s (400 s with the builds)"));
    assert!(text.contains("6.12 x86_64: did not run: no kernel"));
    let md = compat(&results);
    assert!(md.contains(
        "| 5.10.0-32-cloud-amd64 | x86_64 | kprobe (FAIL) | kprobe | clsact | no (NOT_SPECIFIED) \
         | 1 passed, 1 failed | 1.5 min |"
    ));
    assert!(md.contains("| 6.12 | x86_64 | did not run |"));
}

#[test]
fn replaces_only_the_block_between_the_markers() {
    let readme = format!("# x\n\n{BEGIN}\n| old |\n{END}\n\nafter\n");
    assert_eq!(
        between_markers(&readme, "| new |").unwrap(),
        format!("# x\n\n{BEGIN}\n| new |\n{END}\n\nafter\n")
    );
    assert_eq!(between_markers("no markers", "| new |"), None);
}

#[test]
fn a_partial_run_replaces_only_its_cells_rows() {
    let header = "# Kernel compatibility\n\n| kernel | arch | x |\n| --- | --- | --- |\n";
    let row = |kernel: &str, cell: &Cell| {
        format!("| {kernel} | {} | {} |", cell.arch.name(), cell.source)
    };
    let old = format!(
        "{header}{}\n{}\n{}\n",
        row("old-5.10", &CELLS[0]),
        row("old-61", &CELLS[1]),
        row("old-6.12", &CELLS[2])
    );
    let new = format!("{header}{}\n", row("new-arm64", &CELLS[3]));
    let merged = merge_rows(&new, &old);
    assert!(merged.starts_with(header), "{merged}");
    let rows: Vec<&str> = merged.lines().skip(header.lines().count()).collect();
    assert_eq!(
        rows,
        [
            row("old-5.10", &CELLS[0]),
            row("old-61", &CELLS[1]),
            row("old-6.12", &CELLS[2]),
            row("new-arm64", &CELLS[3])
        ]
    );
    // A rerun of a cell replaces its row, the others stay.
    let again = merge_rows(
        &format!("{header}{}\n", row("newer-61", &CELLS[1])),
        &merged,
    );
    assert!(again.contains("newer-61") && !again.contains("old-61") && again.contains("new-arm64"));
}
