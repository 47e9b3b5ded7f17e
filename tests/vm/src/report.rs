//! Reading the guest console back: the `/init` markers (start, modules, one begin/end pair per
//! hook and test binary, done) and libtest's `test NAME ... ok|FAILED|ignored` lines, into a
//! per-hook, per-test table and a verdict.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use super::init::{MARKER, PROBE};

/// One test's result as libtest printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    Ignored,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "FAILED",
            Self::Ignored => "ignored",
        }
    }
}

/// One test's line, and how long it took: from the line before (`running N tests` or the
/// previous test's; libtest prints a test's line when it ends, one test at a time here).
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub name: String,
    pub outcome: Outcome,
    pub seconds: Option<f64>,
}

/// One test binary run under one hook.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub hook: String,
    pub binary: String,
    /// Guest uptime (s) at the begin and end markers.
    pub begin: Option<f64>,
    pub end: Option<f64>,
    pub exit: Option<i32>,
    pub tests: Vec<TestResult>,
    /// Lines where a test says it skipped something, with the reason (cilium/ebpf style:
    /// skips are reported, never silent).
    pub skips: Vec<String>,
}

impl Run {
    /// Seconds between the begin and end markers.
    #[must_use]
    pub fn seconds(&self) -> Option<f64> {
        Some(self.end? - self.begin?)
    }

    fn count(&self, outcome: Outcome) -> usize {
        self.tests.iter().filter(|t| t.outcome == outcome).count()
    }
}

/// What the console says happened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Host time when `/init` started, and the guest's uptime then.
    pub init: Option<(Duration, f64)>,
    /// Guest uptime once the modules were loaded.
    pub modules: Option<f64>,
    /// Guest uptime at the end marker.
    pub done: Option<f64>,
    pub runs: Vec<Run>,
    pub modprobe_failed: Vec<String>,
    /// Kernel panics, oopses, lockups and `/init` warnings, as printed.
    pub alarms: Vec<String>,
    /// pktrace's start-up lines in the guest (`@@vm-test probe LINE`).
    pub probe: Vec<String>,
}

/// Parses console `lines` (host arrival time, text).
#[must_use]
pub fn parse(lines: &[(Duration, String)]) -> Report {
    let mut report = Report::default();
    let mut open: Option<usize> = None;
    let mut since: Option<Duration> = None;
    for (at, line) in lines {
        if let Some(pos) = line.find(MARKER) {
            marker(&mut report, &mut open, *at, &line[pos + MARKER.len()..]);
            since = None;
        } else if line.starts_with("running ")
            && (line.ends_with(" test") || line.ends_with(" tests"))
        {
            since = Some(*at);
        } else if let Some((name, outcome)) = libtest_line(line) {
            let seconds = since.map(|s| at.saturating_sub(s).as_secs_f64());
            since = Some(*at);
            if let Some(run) = open.and_then(|i| report.runs.get_mut(i)) {
                run.tests.push(TestResult {
                    name,
                    outcome,
                    seconds,
                });
            }
        } else if is_alarm(line) {
            report.alarms.push(line.trim().to_owned());
        } else if says_skip(line)
            && let Some(run) = open.and_then(|i| report.runs.get_mut(i))
        {
            run.skips.push(line.trim().to_owned());
        }
    }
    report
}

fn marker(report: &mut Report, open: &mut Option<usize>, at: Duration, rest: &str) {
    let mut words = rest.split_whitespace();
    let first = words.next().unwrap_or_default();
    let fields: BTreeMap<&str, &str> = rest
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let uptime = fields.get("uptime").and_then(|u| u.parse::<f64>().ok());
    match first {
        "init" => report.init = uptime.map(|u| (at, u)),
        "modules" => report.modules = uptime,
        "done" => report.done = uptime,
        "modprobe-failed" => report
            .modprobe_failed
            .extend(fields.get("module").map(|m| (*m).to_owned())),
        "warning:" => report.alarms.push(format!("{MARKER}{rest}")),
        PROBE => report
            .probe
            .push(rest.trim_start()[PROBE.len()..].trim().to_owned()),
        "begin" => {
            report.runs.push(Run {
                hook: fields.get("hook").copied().unwrap_or_default().to_owned(),
                binary: fields.get("binary").copied().unwrap_or_default().to_owned(),
                begin: uptime,
                ..Run::default()
            });
            *open = Some(report.runs.len() - 1);
        }
        _ if fields.contains_key("exit") => {
            if let Some(run) = open.take().and_then(|i| report.runs.get_mut(i)) {
                run.exit = fields.get("exit").and_then(|e| e.parse().ok());
                run.end = uptime;
            }
        }
        _ => {}
    }
}

/// `test NAME ... ok|FAILED|ignored[, reason]`.
fn libtest_line(line: &str) -> Option<(String, Outcome)> {
    let (name, result) = line.strip_prefix("test ")?.split_once(" ... ")?;
    let outcome = match result.trim() {
        "ok" => Outcome::Ok,
        "FAILED" => Outcome::Failed,
        r if r.starts_with("ignored") => Outcome::Ignored,
        _ => return None,
    };
    Some((name.trim().to_owned(), outcome))
}

/// A line where a test says it skipped something: it mentions "skip" and is not libtest's
/// own bookkeeping (`---- NAME stdout ----`, the indented name lists of `successes:` and
/// `failures:`), where a test whose name holds "skip" would show up.
fn says_skip(line: &str) -> bool {
    let is_name_list = line.starts_with("    ") && !line.trim().contains(' ');
    line.to_ascii_lowercase().contains("skip") && !line.starts_with("---- ") && !is_name_list
}

fn is_alarm(line: &str) -> bool {
    [
        "Kernel panic",
        "Oops:",
        "BUG:",
        "soft lockup",
        "rcu_sched detected stalls",
        "rcu: INFO",
        "WARNING: CPU",
        "Out of memory",
    ]
    .iter()
    .any(|needle| line.contains(needle))
}

/// The verdict: every expected (hook, binary) run ended with exit 0 and no test ignored, and
/// `/init` finished.
#[must_use]
pub fn failures(report: &Report, expected: &[(String, String)]) -> Vec<String> {
    let mut failures = Vec::new();
    if report.init.is_none() {
        failures.push("/init never started (kernel did not boot?)".to_owned());
    }
    for (hook, binary) in expected {
        let run = report
            .runs
            .iter()
            .find(|r| &r.hook == hook && &r.binary == binary);
        match run.map(|r| r.exit) {
            None => failures.push(format!("hook={hook} binary={binary}: never started")),
            Some(None) => failures.push(format!(
                "hook={hook} binary={binary}: no exit marker (hung or crashed)"
            )),
            Some(Some(0)) => {}
            Some(Some(code)) => failures.push(format!("hook={hook} binary={binary}: exit {code}")),
        }
        // A guest runs every test it is given (the lockdown boot's with `--include-ignored`):
        // an ignored one would pass there without running.
        let ignored = run.map_or(0, |r| r.count(Outcome::Ignored));
        if ignored > 0 {
            failures.push(format!(
                "hook={hook} binary={binary}: {ignored} ignored (not run)"
            ));
        }
    }
    if report.init.is_some() && report.done.is_none() {
        failures.push("/init did not reach its end marker".to_owned());
    }
    failures.extend(
        report
            .modprobe_failed
            .iter()
            .map(|m| format!("modprobe {m} failed")),
    );
    failures
}

/// The per-run lines and the per-test table (rows: `binary::test`; columns: hooks; cells: the
/// outcome and the test's seconds).
#[must_use]
pub fn table(report: &Report, hooks: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<12} {:>5} {:>9} {:>6} {:>6} {:>7}",
        "hook", "binary", "exit", "time", "passed", "failed", "ignored"
    );
    for run in &report.runs {
        let exit = run.exit.map_or_else(|| "-".to_owned(), |e| e.to_string());
        let time = run
            .seconds()
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
        let _ = writeln!(
            out,
            "{:<10} {:<12} {exit:>5} {time:>9} {:>6} {:>6} {:>7}",
            run.hook,
            run.binary,
            run.count(Outcome::Ok),
            run.count(Outcome::Failed),
            run.count(Outcome::Ignored)
        );
    }
    for run in &report.runs {
        for skip in &run.skips {
            let _ = writeln!(out, "{:<10} {:<12} skip: {skip}", run.hook, run.binary);
        }
    }
    let mut rows: BTreeMap<String, BTreeMap<&str, String>> = BTreeMap::new();
    for run in &report.runs {
        for test in &run.tests {
            let cell = match test.seconds {
                Some(seconds) => format!("{} {seconds:.0}s", test.outcome.word()),
                None => test.outcome.word().to_owned(),
            };
            rows.entry(format!("{}::{}", run.binary, test.name))
                .or_default()
                .insert(run.hook.as_str(), cell);
        }
    }
    if rows.is_empty() {
        return out;
    }
    let width = rows.keys().map(String::len).max().unwrap_or(4).max(4);
    let _ = writeln!(out);
    let mut header = format!("{:<width$}", "test");
    for hook in hooks {
        let _ = write!(header, "  {hook:<10}");
    }
    let _ = writeln!(out, "{}", header.trim_end());
    for (test, results) in &rows {
        let mut row = format!("{test:<width$}");
        for hook in hooks {
            let cell = results.get(hook.as_str()).map_or("-", String::as_str);
            let _ = write!(row, "  {cell:<10}");
        }
        let _ = writeln!(out, "{}", row.trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(Duration, String)> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (Duration::from_secs(i as u64), l.to_owned()))
            .collect()
    }

    const CONSOLE: &str = "\
@@vm-test init kernel=6.1.0-41-cloud-amd64 uptime=2.50
@@vm-test modules count=24 uptime=4.10
@@vm-test probe pktrace: tracing 192.0.2.1 (192.0.2.1) on 1 interfaces (clsact): lo
@@vm-test begin hook=kprobe binary=lifecycle uptime=4.20
running 2 tests
test count_limit_stops ... ok
test sigkill_leaves_nothing ... FAILED
test slow_one ... ignored, needs a real node
skipping the tcx check: kernel 6.1 has no tcx
---- auto_skipped_what stdout ----
    auto_skipped_what
@@vm-test hook=kprobe binary=lifecycle exit=101 uptime=30.70
@@vm-test begin hook=fentry binary=lifecycle uptime=30.80
test count_limit_stops ... ok
[   40.1] Kernel panic - not syncing: Attempted to kill init!
";

    #[test]
    fn reads_markers_and_libtest_lines_per_run() {
        let report = parse(&lines(CONSOLE));
        assert_eq!(report.init, Some((Duration::from_secs(0), 2.5)));
        assert_eq!(report.modules, Some(4.1));
        assert_eq!(
            report.probe,
            ["pktrace: tracing 192.0.2.1 (192.0.2.1) on 1 interfaces (clsact): lo"]
        );
        assert_eq!(report.runs.len(), 2);
        let first = &report.runs[0];
        assert_eq!(
            (first.hook.as_str(), first.binary.as_str(), first.exit),
            ("kprobe", "lifecycle", Some(101))
        );
        assert!((first.seconds().unwrap() - 26.5).abs() < 1e-9);
        let tests: Vec<(&str, Outcome, Option<f64>)> = first
            .tests
            .iter()
            .map(|t| (t.name.as_str(), t.outcome, t.seconds))
            .collect();
        assert_eq!(
            tests,
            [
                ("count_limit_stops", Outcome::Ok, Some(1.0)),
                ("sigkill_leaves_nothing", Outcome::Failed, Some(1.0)),
                ("slow_one", Outcome::Ignored, Some(1.0)),
            ]
        );
        // The first test of a run without a `running` line has no time.
        assert_eq!(report.runs[1].tests[0].seconds, None);
        assert_eq!(
            first.skips,
            ["skipping the tcx check: kernel 6.1 has no tcx"]
        );
        assert_eq!(report.runs[1].exit, None);
        assert_eq!(report.alarms.len(), 1);
    }

    #[test]
    fn every_expected_run_must_end_with_exit_0_and_nothing_ignored() {
        let report = parse(&lines(CONSOLE));
        let expected: Vec<(String, String)> = ["kprobe", "fentry"]
            .iter()
            .flat_map(|h| ["lifecycle", "journeys"].map(|b| ((*h).to_owned(), b.to_owned())))
            .collect();
        let found = failures(&report, &expected);
        assert_eq!(
            found,
            [
                "hook=kprobe binary=lifecycle: exit 101",
                "hook=kprobe binary=lifecycle: 1 ignored (not run)",
                "hook=kprobe binary=journeys: never started",
                "hook=fentry binary=lifecycle: no exit marker (hung or crashed)",
                "hook=fentry binary=journeys: never started",
                "/init did not reach its end marker",
            ]
        );
        let ok = parse(&lines(
            "@@vm-test init uptime=1\n@@vm-test begin hook=auto binary=x uptime=2\n@@vm-test hook=auto binary=x exit=0 uptime=3\n@@vm-test done uptime=4\n",
        ));
        assert!(failures(&ok, &[("auto".to_owned(), "x".to_owned())]).is_empty());
    }

    #[test]
    fn table_has_a_column_per_hook() {
        let report = parse(&lines(CONSOLE));
        let text = table(&report, &["kprobe".to_owned(), "fentry".to_owned()]);
        assert!(
            text.contains("lifecycle::sigkill_leaves_nothing  FAILED 1s   -"),
            "{text}"
        );
        assert!(
            text.contains("lifecycle::count_limit_stops       ok 1s       ok"),
            "{text}"
        );
        assert!(
            text.contains("kprobe     lifecycle      101    26.5 s      1      1       1"),
            "{text}"
        );
    }
}
