//! Running `pktrace merge` on two nodes' traces, as the cross-node tests do.

use std::{fs, path::Path, process::Command};

use tracer_user::output::json::contract::{JourneyLine, Line, MergeLine};

use crate::{pktrace_bin, trace::Trace};

fn write_jsonl(path: &Path, trace: &Trace) {
    let text: Vec<String> = trace.lines.iter().map(ToString::to_string).collect();
    fs::write(path, text.join("\n") + "\n").expect("writing a node's JSON lines");
}

/// `pktrace merge node1=… node2=…` of the two traces: its journeys, its merge line (which
/// must come last) and its stdout.
///
/// # Panics
/// If merge fails or writes anything else.
#[must_use]
pub fn merge(t1: &Trace, t2: &Trace) -> (Vec<JourneyLine>, MergeLine, String) {
    let dir = std::env::temp_dir().join(format!("pktrace-twonode-merge-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("a scratch directory");
    let (a, b) = (dir.join("node1.jsonl"), dir.join("node2.jsonl"));
    write_jsonl(&a, t1);
    write_jsonl(&b, t2);
    let out = Command::new(pktrace_bin())
        .arg("merge")
        .arg(format!("node1={}", a.display()))
        .arg(format!("node2={}", b.display()))
        .output()
        .expect("pktrace merge");
    fs::remove_dir_all(&dir).ok();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "merge failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut merged: Vec<JourneyLine> = Vec::new();
    let mut merge: Option<MergeLine> = None;
    for l in text.lines() {
        assert!(merge.is_none(), "the merge line must come last: {text}");
        match Line::parse(l).unwrap_or_else(|e| panic!("{e}: {l}")) {
            Line::Journey(j) => merged.push(j),
            Line::Merge(m) => merge = Some(m),
            other => panic!("merge wrote {other:?}"),
        }
    }
    let merge = merge.unwrap_or_else(|| panic!("no merge line: {text}"));
    (merged, merge, text)
}
