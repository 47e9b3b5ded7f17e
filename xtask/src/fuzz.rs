//! `cargo xtask fuzz`: the cargo-fuzz targets of `fuzz/` (libFuzzer, nightly), each for a
//! bounded time, failing on the first crash, hang or invariant violation. The test tier runs
//! every target briefly; longer runs find more (`cargo xtask fuzz parse_packet --seconds 600`).
//!
//! Each target keeps its growing corpus in `fuzz/corpus/<target>` (not committed) and reads
//! the committed seeds in `fuzz/seeds/<target>`, a libFuzzer dictionary from
//! `fuzz/dicts/<target>.dict` when there is one, and the real-shaped fixtures of
//! `tracer-user/tests-data` as extra seeds.

use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};
use xtask_common::{
    cmd::{capture, describe, run},
    workspace_root,
};

/// A fuzz target and the fixtures it starts from.
pub struct Target {
    pub name: &'static str,
    /// Files (relative to `fuzz/`) given to libFuzzer as extra seeds.
    pub fixtures: &'static [&'static str],
}

/// Every target in `fuzz/Cargo.toml`.
pub const TARGETS: [Target; 7] = [
    Target {
        name: "parse_packet",
        fixtures: &[],
    },
    Target {
        name: "packet_roundtrip",
        fixtures: &[],
    },
    Target {
        name: "ring_record",
        fixtures: &[],
    },
    Target {
        name: "state_file",
        fixtures: &["../tracer-user/tests-data/azure-vnet.json"],
    },
    Target {
        name: "iptables_save",
        fixtures: &[
            "../tracer-user/tests-data/iptables-save-azure-cni.txt",
            "../tracer-user/tests-data/iptables-seed001-azure-cni.txt",
        ],
    },
    Target {
        name: "expr_parse",
        fixtures: &[],
    },
    Target {
        name: "drop_why",
        fixtures: &[
            "../tracer-user/src/drops/why/testdata/kube-proxy-filter.txt",
            "../tracer-user/src/drops/why/testdata/calico-filter.txt",
            "../tracer-user/src/drops/why/testdata/azure-npm-filter.txt",
            "../tracer-user/src/drops/why/testdata/admin-drop.txt",
        ],
    },
];

/// Seconds per target in `cargo xtask test`.
pub const CI_SECONDS: u64 = 10;
/// A single input taking longer than this is reported as a hang.
const TIMEOUT_SECONDS: u64 = 10;

/// The test tier: every target for [`CI_SECONDS`].
///
/// # Errors
/// As [`fuzz`].
pub fn ci() -> Result<()> {
    fuzz(&[], CI_SECONDS)
}

/// Runs `names` (all targets when empty) for `seconds` each; fails on the first finding.
///
/// # Errors
/// On an unknown target name, if the targets do not build, or on the first finding.
pub fn fuzz(names: &[String], seconds: u64) -> Result<()> {
    let chosen: Vec<&Target> = if names.is_empty() {
        TARGETS.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                TARGETS.iter().find(|t| t.name == n).with_context(|| {
                    let all: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                    format!("no fuzz target {n}: the targets are {}", all.join(", "))
                })
            })
            .collect::<Result<_>>()?
    };
    let dir = workspace_root().join("fuzz");
    run(nightly_cargo_fuzz(&dir).args(["build", "--sanitizer", "none"]))
        .context("building the fuzz targets (cargo-fuzz comes with `cargo xtask setup`)")?;
    for target in chosen {
        run_target(&dir, target, seconds)?;
    }
    Ok(())
}

fn run_target(dir: &Path, target: &Target, seconds: u64) -> Result<()> {
    let corpus = format!("corpus/{}", target.name);
    fs::create_dir_all(dir.join(&corpus)).with_context(|| format!("creating fuzz/{corpus}"))?;
    // Sanitizers off: the code under test is safe Rust (bounds and overflow checks are on),
    // and without ASan a run executes about five times more inputs.
    let mut cmd = nightly_cargo_fuzz(dir);
    cmd.args(["run", "--sanitizer", "none", target.name, &corpus]);
    let seeds = format!("seeds/{}", target.name);
    if dir.join(&seeds).is_dir() {
        cmd.arg(&seeds);
    }
    cmd.arg("--").args([
        format!("-max_total_time={seconds}"),
        format!("-timeout={TIMEOUT_SECONDS}"),
        "-print_final_stats=1".into(),
    ]);
    let dict = format!("dicts/{}.dict", target.name);
    if dir.join(&dict).is_file() {
        cmd.arg(format!("-dict={dict}"));
    }
    if !target.fixtures.is_empty() {
        cmd.arg(format!("-seed_inputs={}", target.fixtures.join(",")));
    }
    eprintln!("fuzz: {} for {seconds} s: {}", target.name, describe(&cmd));
    let out = capture(&mut cmd)?;
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        for line in tail.into_iter().rev() {
            eprintln!("  {line}");
        }
        bail!(
            "fuzz target {} failed ({}); the input is in fuzz/artifacts/{}/ (rerun it with \
             `cargo +nightly fuzz run {} <file>` in fuzz/)",
            target.name,
            out.status,
            target.name,
            target.name
        );
    }
    let stats = FinalStats::parse(&log);
    eprintln!(
        "fuzz: {}: {} inputs in {seconds} s ({} per second), corpus +{}, no crash",
        target.name, stats.runs, stats.per_sec, stats.new_units
    );
    Ok(())
}

/// `cargo fuzz` on the nightly toolchain, in `dir`.
fn nightly_cargo_fuzz(dir: &Path) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.current_dir(dir)
        .args(["run", "nightly", "cargo", "fuzz"]);
    cmd
}

/// The `stat::` lines libFuzzer prints with `-print_final_stats=1`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FinalStats {
    pub runs: u64,
    pub per_sec: u64,
    pub new_units: u64,
}

impl FinalStats {
    /// Reads the final statistics from libFuzzer's output (zero when missing).
    #[must_use]
    pub fn parse(log: &str) -> Self {
        let value = |key: &str| {
            log.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        Self {
            runs: value("stat::number_of_executed_units:"),
            per_sec: value("stat::average_exec_per_sec:"),
            new_units: value("stat::new_units_added:"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libfuzzer_final_stats() {
        let log = "#1605143\tDONE   cov: 327 ft: 498 corp: 224/12826b exec/s: 76435 rss: 32Mb\n\
                   stat::number_of_executed_units: 1605143\n\
                   stat::average_exec_per_sec:     76435\n\
                   stat::new_units_added:          427\n\
                   stat::slowest_unit_time_sec:    0\n";
        assert_eq!(
            FinalStats::parse(log),
            FinalStats {
                runs: 1_605_143,
                per_sec: 76_435,
                new_units: 427
            }
        );
        assert_eq!(FinalStats::parse("crashed"), FinalStats::default());
    }

    #[test]
    fn every_target_is_declared_in_the_fuzz_crate() {
        let dir = workspace_root().join("fuzz");
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for t in &TARGETS {
            assert!(
                manifest.contains(&format!("name = \"{}\"", t.name)),
                "{} missing from fuzz/Cargo.toml",
                t.name
            );
            assert!(dir.join(format!("fuzz_targets/{}.rs", t.name)).is_file());
            for f in t.fixtures {
                assert!(dir.join(f).is_file(), "{f}");
            }
        }
    }
}
