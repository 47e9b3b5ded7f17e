//! The end of a `vm-test` run: one line per VM (qemu's time, how it ended, the guest's
//! timings), the table of runs and tests, and the [`Outcome`].

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use crate::{Outcome, Vm, VmOptions, plan, qemu::Ending, report};

/// Prints the timings, the per-run and per-test tables (runs in `order`); fails when
/// anything failed.
pub(crate) fn summarize(
    vms: &[Vm],
    order: &[plan::Run],
    kernel: &str,
    options: &VmOptions,
    [start, prepared, built, packed]: [Instant; 4],
    out_dir: &Path,
) -> Outcome {
    let mut failures = Vec::new();
    let mut all = report::Report::default();
    eprintln!();
    eprintln!("vm-test summary: kernel {kernel}");
    eprintln!(
        "  kernel ready {:.1} s, builds {:.1} s, initramfs {:.1} s",
        secs(prepared - start),
        secs(built - prepared),
        secs(packed - built),
    );
    for vm in vms {
        failures.extend(print_vm(vm, options.timeout));
        all.runs.extend(vm.report.runs.iter().cloned());
    }
    all.runs.sort_by_key(|r| {
        order
            .iter()
            .position(|o| o.hook == r.hook && o.binary == r.binary)
    });
    // Columns: the hooks asked for, then any other a run had (the lockdown boot's `auto`).
    let mut hooks = options.hooks.clone();
    for run in order {
        if !hooks.contains(&run.hook) {
            hooks.push(run.hook.clone());
        }
    }
    eprint!("{}", indent(&report::table(&all, &hooks)));
    eprintln!("  total {:.1} s", secs(start.elapsed()));
    if all.runs.iter().all(|r| r.tests.is_empty()) {
        eprintln!("vm-test: warning: no test ran (does the filter match any?)");
    }
    Outcome {
        kernel: kernel.to_owned(),
        probe: vms
            .iter()
            .map(|vm| &vm.report.probe)
            .find(|p| !p.is_empty())
            .cloned()
            .unwrap_or_default(),
        report: all,
        failures,
        elapsed: start.elapsed(),
        guest: vms
            .iter()
            .filter_map(|vm| vm.console.as_ref().ok())
            .map(|c| c.elapsed)
            .sum(),
        out_dir: out_dir.to_path_buf(),
    }
}

/// Prints one VM's line (qemu's time, how it ended, the guest's timings, its console log) and
/// its alarms; returns its failures.
fn print_vm(vm: &Vm, timeout: Duration) -> Vec<String> {
    let tag = &vm.tag;
    let mut failures = Vec::new();
    match &vm.console {
        Ok(console) => {
            eprintln!(
                "  {tag}: qemu {:.1} s (CPU {:.1} s){}; {}; console {}",
                secs(console.elapsed),
                secs(console.cpu),
                ending(console.ending, timeout),
                timings(&vm.report),
                vm.log.display()
            );
            let expected: Vec<(String, String)> = vm
                .runs
                .iter()
                .map(|r| (r.hook.clone(), r.binary.clone()))
                .collect();
            failures.extend(
                report::failures(&vm.report, &expected)
                    .into_iter()
                    .map(|f| format!("{tag}: {f}")),
            );
        }
        Err(err) => failures.push(format!("{tag}: {err:#}")),
    }
    for alarm in &vm.report.alarms {
        eprintln!("  {tag}: kernel/init: {alarm}");
    }
    failures
}

fn ending(ending: Ending, timeout: Duration) -> String {
    match ending {
        Ending::TimedOut => format!(
            " (killed: a run took more than the {} s time-out)",
            timeout.as_secs()
        ),
        Ending::BootTimedOut => " (killed: no /init before the boot time-out)".to_owned(),
        Ending::Exited(status) if !status.success() => format!(" (qemu {status})"),
        Ending::Exited(_) => String::new(),
    }
}

/// Guest-side timings from the markers.
fn timings(report: &report::Report) -> String {
    let Some((host_at, uptime)) = report.init else {
        return "/init never started".to_owned();
    };
    let mut text = format!(
        "/init at {:.1} s after qemu started (guest uptime {uptime:.1} s)",
        secs(host_at)
    );
    if let Some(modules) = report.modules {
        let _ = write!(text, ", modules loaded in {:.1} s", modules - uptime);
    }
    if let Some(done) = report.done {
        let _ = write!(
            text,
            ", tests {:.1} s",
            done - report.modules.unwrap_or(uptime)
        );
    }
    text
}

fn secs(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

fn indent(text: &str) -> String {
    text.lines().fold(String::new(), |mut out, l| {
        let _ = writeln!(out, "  {l}");
        out
    })
}
