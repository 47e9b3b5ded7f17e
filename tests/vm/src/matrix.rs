//! `cargo xtask vm-test --matrix`: the VM tier on each kernel of the matrix, one cell after
//! the other (Debian's cloud kernels 5.10, 6.1 and 6.12 on `x86_64`, and 6.1 on arm64, each
//! with the NAT hooks it has), one
//! table of test × cell, each cell's time, and the compatibility table (`docs/compat.md`)
//! written from what the guests reported when the whole matrix ran.

use std::{collections::BTreeMap, fmt::Write as _, fs, path::Path, time::Duration};

use anyhow::{Context as _, Result, bail};

use super::{Outcome, VmOptions, arch::Arch, kernel, report::Outcome as TestOutcome};

/// One cell of the matrix: a kernel on an architecture, and the NAT hooks run on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// What `--kernel` names it by with `--matrix` (`5.10`).
    pub name: &'static str,
    pub arch: Arch,
    /// The `--kernel` value that fetches it.
    pub kernel: &'static str,
    /// The NAT hooks the kernel has (each one round of the tests).
    pub hooks: &'static [&'static str],
    /// Where its kernel comes from, for the compatibility table.
    pub source: &'static str,
}

/// The bookworm-backports kernel of the matrix, pinned: every test passed on it (twice, with
/// `--hook netfilter` and `auto`), while the guest of 6.12.95 (the newest in November 2026)
/// crashed in the mmap path under TCG twice with netfilter programs and once with fentry ones
/// (a double fault in `kmem_cache_alloc`, a NULL dereference in the maple tree).
pub const BACKPORTS_KERNEL: &str = "6.12.74+deb12-cloud-amd64";

/// The matrix, oldest kernel first. 5.10 has no fentry on module functions (`nf_nat` is a
/// module; module BTF came in 5.11), no BPF netfilter links (6.4) and no tcx (6.6): kprobe and
/// clsact. 6.1 has fentry on modules but neither links nor tcx; 6.12 has both. The arm64
/// 6.1 kernel runs the kprobe programs, which read `pt_regs` the arm64 way (the aarch64
/// build's eBPF object); it has no fentry: attaching a BPF trampoline to a kernel function
/// needs ftrace direct calls (`CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS`, arm64 6.4+), and
/// pktrace says so (`ENOTSUPP`) and skips it.
pub const CELLS: [Cell; 4] = [
    Cell {
        name: "5.10",
        arch: Arch::X86_64,
        kernel: kernel::BULLSEYE,
        hooks: &["kprobe"],
        source: "Debian bullseye linux-image-5.10.0-N-cloud-amd64",
    },
    Cell {
        name: "6.1",
        arch: Arch::X86_64,
        kernel: "",
        hooks: &["kprobe", "fentry"],
        source: "Debian bookworm linux-image-6.1.0-N-cloud-amd64",
    },
    Cell {
        name: "6.12",
        arch: Arch::X86_64,
        kernel: BACKPORTS_KERNEL,
        hooks: &["netfilter"],
        source: "Debian bookworm-backports linux-image-6.12.74+deb12-cloud-amd64",
    },
    Cell {
        name: "6.1",
        arch: Arch::Arm64,
        kernel: "",
        hooks: &["kprobe"],
        source: "Debian bookworm linux-image-6.1.0-N-cloud-arm64",
    },
];

/// The compatibility table's file, relative to the workspace.
pub const COMPAT_FILE: &str = "docs/compat.md";

/// The cells `--kernel` and `--arch` pick (`None`: all); no cell picked is an error listing
/// the cells.
///
/// # Errors
/// When no cell has that kernel name and architecture.
pub fn pick(kernel: Option<&str>, arch: Option<Arch>) -> Result<Vec<Cell>> {
    let picked: Vec<Cell> = CELLS
        .iter()
        .filter(|c| kernel.is_none_or(|k| c.name == k) && arch.is_none_or(|a| c.arch == a))
        .copied()
        .collect();
    if picked.is_empty() {
        let names: Vec<String> = CELLS
            .iter()
            .map(|c| format!("{} {}", c.name, c.arch.name()))
            .collect();
        bail!(
            "--matrix --kernel {} --arch {}: not a cell of the matrix ({})",
            kernel.unwrap_or("*"),
            arch.map_or("*", Arch::name),
            names.join(", ")
        );
    }
    Ok(picked)
}

/// Runs the cells `options.kernel` and `arch` pick, one after the other, with `options`' jobs,
/// time-out and test arguments; prints the table; writes [`COMPAT_FILE`] under `root` when
/// every cell ran without a test filter.
///
/// # Errors
/// On an unknown cell, or when any cell failed (after all have run).
pub fn run(options: &VmOptions, arch: Option<Arch>, root: &Path) -> Result<()> {
    let cells = pick(options.kernel.as_deref(), arch)?;
    let mut results: Vec<(Cell, Result<Outcome>)> = Vec::new();
    for cell in &cells {
        eprintln!(
            "vm-test --matrix: cell {} {} (hooks {})",
            cell.name,
            cell.arch.name(),
            cell.hooks.join(",")
        );
        let one = VmOptions {
            kernel: Some(cell.kernel)
                .filter(|k| !k.is_empty())
                .map(str::to_owned),
            hooks: cell.hooks.iter().map(|h| (*h).to_owned()).collect(),
            arch: cell.arch,
            ..options.clone()
        };
        let outcome = super::run(&one);
        if let Ok(o) = &outcome {
            keep_logs(&o.out_dir, &format!("{}-{}", cell.name, cell.arch.name()));
        }
        results.push((*cell, outcome));
    }
    eprintln!();
    eprint!("{}", table(&results));
    if options.harness_args().is_empty() {
        // The rows of the cells not run stay as their own last run wrote them.
        let old = fs::read_to_string(root.join(COMPAT_FILE)).unwrap_or_default();
        write_compat(root, &merge_rows(&compat(&results), &old))?;
    } else {
        eprintln!(
            "vm-test --matrix: {COMPAT_FILE} not written (only a --full run without a test \
             filter writes it)"
        );
    }
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(cell, r)| match r {
            Ok(o) if o.failures.is_empty() => None,
            Ok(o) => Some(format!(
                "{} {}: {}",
                cell.name,
                cell.arch.name(),
                o.failures.join("; ")
            )),
            Err(e) => Some(format!("{} {}: {e:#}", cell.name, cell.arch.name())),
        })
        .collect();
    if failed.is_empty() {
        eprintln!("vm-test --matrix: every cell passed");
        return Ok(());
    }
    for f in &failed {
        eprintln!("vm-test --matrix: FAILED {f}");
    }
    bail!("vm-test --matrix: {} cell(s) failed", failed.len())
}

/// Writes the compatibility table to [`COMPAT_FILE`] and into README.md between
/// [`BEGIN`] and [`END`].
fn write_compat(root: &Path, text: &str) -> Result<()> {
    let path = root.join(COMPAT_FILE);
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("vm-test --matrix: wrote {}", path.display());
    let readme = root.join("README.md");
    let old =
        fs::read_to_string(&readme).with_context(|| format!("reading {}", readme.display()))?;
    let table = text
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    let new = between_markers(&old, &table)
        .with_context(|| format!("README.md has no {BEGIN} … {END} block"))?;
    fs::write(&readme, new)?;
    eprintln!(
        "vm-test --matrix: updated the table in {}",
        readme.display()
    );
    Ok(())
}

/// The README's first marker line.
pub const BEGIN: &str = "<!-- compat:begin (cargo xtask vm-test --matrix writes this) -->";
/// The README's last marker line.
pub const END: &str = "<!-- compat:end -->";

/// `text` with what lies between the [`BEGIN`] and [`END`] lines replaced by `block`;
/// `None` without both.
#[must_use]
pub fn between_markers(text: &str, block: &str) -> Option<String> {
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    Some(format!("{}\n{block}\n{}", &text[..start], &text[end..]))
}

/// Copies the cell's console logs (`console-*.log`, which the next cell's run removes) to
/// `matrix-<cell>-console-*.log` beside them.
fn keep_logs(dir: &Path, cell: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("console-") && Path::new(&name).extension().is_some_and(|e| e == "log")
        {
            let _ = fs::copy(entry.path(), dir.join(format!("matrix-{cell}-{name}")));
        }
    }
}

/// A column's name: `5.10/x86_64/kprobe`.
fn column(cell: &Cell, hook: &str) -> String {
    format!("{}/{}/{hook}", cell.name, cell.arch.name())
}

/// The test × (kernel, arch, hook) table, then each cell's kernel, verdict and time.
#[must_use]
pub fn table(results: &[(Cell, Result<Outcome>)]) -> String {
    let mut columns: Vec<String> = Vec::new();
    let mut rows: BTreeMap<String, BTreeMap<String, &'static str>> = BTreeMap::new();
    for (cell, result) in results {
        for hook in cell.hooks {
            columns.push(column(cell, hook));
        }
        let Ok(outcome) = result else { continue };
        for run in &outcome.report.runs {
            for test in &run.tests {
                let word = match test.outcome {
                    TestOutcome::Ok => "ok",
                    TestOutcome::Failed => "FAILED",
                    TestOutcome::Ignored => "ignored",
                };
                rows.entry(format!("{}::{}", run.binary, test.name))
                    .or_default()
                    .insert(column(cell, &run.hook), word);
            }
        }
    }
    let width = rows.keys().map(String::len).max().unwrap_or(4).max(4);
    let mut out = format!("{:<width$}", "test");
    for c in &columns {
        let _ = write!(out, "  {c:<w$}", w = c.len().max(7));
    }
    out = out.trim_end().to_owned();
    out.push('\n');
    for (test, cells) in &rows {
        let mut row = format!("{test:<width$}");
        for c in &columns {
            let word = cells.get(c).copied().unwrap_or("-");
            let _ = write!(row, "  {word:<w$}", w = c.len().max(7));
        }
        let _ = writeln!(out, "{}", row.trim_end());
    }
    let _ = writeln!(out);
    for (cell, result) in results {
        let _ = match result {
            Ok(o) => writeln!(
                out,
                "{} {}: kernel {}, {}, guests {:.0} s ({:.0} s with the builds)",
                cell.name,
                cell.arch.name(),
                o.kernel,
                verdict(o),
                o.guest.as_secs_f64(),
                o.elapsed.as_secs_f64()
            ),
            Err(e) => writeln!(
                out,
                "{} {}: did not run: {e:#}",
                cell.name,
                cell.arch.name()
            ),
        };
    }
    out
}

fn verdict(outcome: &Outcome) -> String {
    let count = |wanted: TestOutcome| {
        outcome
            .report
            .runs
            .iter()
            .flat_map(|r| &r.tests)
            .filter(|t| t.outcome == wanted)
            .count()
    };
    format!(
        "{} passed, {} failed{}",
        count(TestOutcome::Ok),
        count(TestOutcome::Failed),
        if outcome.failures.is_empty() {
            String::new()
        } else {
            format!(" ({} problem(s))", outcome.failures.len())
        }
    )
}

/// What pktrace said about the guest kernel at start-up, as the compatibility table's
/// columns: tc mechanism, the NAT hook `auto` chose, how drops attach.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Probed {
    pub tc: String,
    pub auto_hook: String,
    pub drops: String,
}

/// Reads pktrace's start-up lines (`pktrace: tracing … on 1 interfaces (clsact): lo`,
/// `pktrace: NAT hook kprobe: …`, `pktrace: drops: …`); a column pktrace said nothing
/// about is `?`.
#[must_use]
pub fn probed(lines: &[String]) -> Probed {
    let mut found = Probed::default();
    for line in lines {
        let text = line.strip_prefix("pktrace: ").unwrap_or(line);
        if text.starts_with("tracing ")
            && let Some(rest) = text.split_once(" interfaces (").map(|(_, r)| r)
        {
            rest.split(')')
                .next()
                .unwrap_or_default()
                .clone_into(&mut found.tc);
        } else if let Some(rest) = text.strip_prefix("NAT hook ")
            && !rest.contains(": skipped")
        {
            rest.split(':')
                .next()
                .unwrap_or_default()
                .clone_into(&mut found.auto_hook);
        } else if let Some(rest) = text.strip_prefix("drops: ") {
            found.drops = if rest.contains("location only") {
                "no (NOT_SPECIFIED)".to_owned()
            } else if rest.contains("reason") {
                format!("yes ({})", rest.split(" on ").next().unwrap_or(rest))
            } else {
                rest.to_owned()
            };
        }
    }
    for field in [&mut found.tc, &mut found.auto_hook, &mut found.drops] {
        if field.is_empty() {
            "?".clone_into(field);
        }
    }
    found
}

/// `new` (a compatibility table of the cells just run) with a row for every cell of
/// [`CELLS`], in their order: a cell's row from `new`, else from `old` (the table before),
/// else none. A row is its cell's by its last column, the kernel package.
#[must_use]
pub fn merge_rows(new: &str, old: &str) -> String {
    let is_row =
        |l: &&str| l.starts_with("| ") && !l.starts_with("| kernel |") && !l.starts_with("| ---");
    let row_of = |text: &str, cell: &Cell| -> Option<String> {
        let tail = format!("| {} |", cell.source);
        text.lines()
            .filter(is_row)
            .find(|l| l.trim_end().ends_with(&tail))
            .map(str::to_owned)
    };
    let mut out: Vec<String> = new
        .lines()
        .take_while(|l| !is_row(l))
        .map(str::to_owned)
        .collect();
    out.extend(
        CELLS
            .iter()
            .filter_map(|cell| row_of(new, cell).or_else(|| row_of(old, cell))),
    );
    out.join("\n") + "\n"
}

/// The compatibility table (markdown) from the matrix's results.
#[must_use]
pub fn compat(results: &[(Cell, Result<Outcome>)]) -> String {
    let mut out = String::from(
        "# Kernel compatibility\n\n<!-- Written by `cargo xtask vm-test --matrix --full` from \
         what the guests reported; do not edit by hand. -->\n\nWhat pktrace found on each \
         kernel of the VM tier's matrix (qemu, TCG) in the last full run of its cell without a \
         test filter: the tc mechanism and the NAT hook `--nat-hook auto` chose and how drops \
         attach, as pktrace's start-up lines in the guest said them, the integration tests run \
         there per NAT hook, and the guests' time (qemu, one boot after the other, lockdown \
         boot included). CI runs the smoke set in every cell, one guest at a time. The \
         development host (6.18) runs every test on tcx, netfilter links and `tp_btf` drops.\n\n\
         | kernel | arch | NAT hooks tested | auto NAT hook | tc | drop reasons | tests | guest time | \
         kernel package |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (cell, result) in results {
        let Ok(o) = result else {
            let _ = writeln!(
                out,
                "| {} | {} | did not run | | | | | | {} |",
                cell.name,
                cell.arch.name(),
                cell.source
            );
            continue;
        };
        let p = probed(&o.probe);
        let hooks: Vec<String> = cell
            .hooks
            .iter()
            .map(|h| {
                let passed = o
                    .report
                    .runs
                    .iter()
                    .filter(|r| r.hook == *h)
                    .all(|r| r.exit == Some(0));
                format!("{h} ({})", if passed { "pass" } else { "FAIL" })
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            o.kernel,
            cell.arch.name(),
            hooks.join(", "),
            p.auto_hook,
            p.tc,
            p.drops,
            verdict(o),
            minutes(o.guest),
            cell.source
        );
    }
    out
}

fn minutes(elapsed: Duration) -> String {
    format!("{:.1} min", elapsed.as_secs_f64() / 60.0)
}

#[cfg(test)]
mod tests;
