//! The test tiers: `cargo xtask test` runs setup, the plain `cargo test` tier and the
//! integration tier in order, stopping at the first failure; `cargo xtask integration-test`
//! runs the root-only tests: tracer-user's ignored unit tests (the ones that need private
//! items; see the `tests` crate's doc), then the `tests` crate against the lab.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use xtask_common::{
    INTEGRATION_LOCK, PKTRACE_BIN_ENV, XTASK_BIN_ENV, cargo_command,
    cmd::{require_root, run},
    target_dir, workspace_root,
};

use crate::setup;

/// Runs tracer-user's root-tier unit tests (`cargo test -- --ignored`: they load programs and
/// make throwaway network namespaces of their own, none of the lab's), then builds pktrace and
/// xtask and runs the `tests` crate (one test at a time) with `PKTRACE_BIN` and
/// `PKTRACE_XTASK_BIN` set; `extra` goes to both test harnesses, and so does `--skip NAME` for
/// each test this kernel cannot run ([`crate::needs`]).
///
/// # Errors
/// If not root, a build fails, a binary is missing after it, or a test fails.
pub fn integration_test(extra: &[String]) -> Result<()> {
    require_root("`cargo xtask integration-test` (it builds network namespaces and loads eBPF)")?;
    // The tests this kernel cannot run, skipped by name (said once, here).
    let skips = crate::needs::skip_args("integration-test", &crate::needs::running_release());
    let mut unit = cargo_command(&["test", "-p", "tracer-user", "--", "--ignored"]);
    unit.args(extra).args(&skips);
    run(&mut unit).context("tracer-user's root-tier unit tests failed")?;
    cargo(&["build", "--release", "-p", "tracer-user"]).context("building pktrace")?;
    cargo(&["build", "-p", "xtask"]).context("building xtask")?;
    // The static binary that ships (tests/tests/dist.rs runs it in the lab); a
    // `PKTRACE_DIST_BIN` already set names one built before and skips the build.
    let dist = match std::env::var_os(xtask_common::PKTRACE_DIST_BIN_ENV).filter(|p| !p.is_empty())
    {
        Some(path) => std::path::PathBuf::from(path),
        None => xtask_common::musl::build(&xtask_common::musl::X86_64)
            .context("building the musl binary")?,
    };
    let pktrace = target_dir().join("release/pktrace");
    let xtask = target_dir().join("debug/xtask");
    for bin in [&pktrace, &xtask] {
        if !bin.exists() {
            bail!("{} is missing after the build", bin.display());
        }
    }
    // One lab per machine: concurrent runs (two checkouts, a developer and CI) take turns.
    eprintln!("integration-test: waiting for other lab runs to finish ({INTEGRATION_LOCK})");
    let _turn = xtask_common::cmd::exclusive_lock(INTEGRATION_LOCK)?;
    let mut test = cargo_command(&["test", "--release", "-p", "tests", "--", "--test-threads=1"]);
    test.args(extra)
        .args(&skips)
        .env(PKTRACE_BIN_ENV, &pktrace)
        .env(XTASK_BIN_ENV, &xtask)
        .env(xtask_common::PKTRACE_DIST_BIN_ENV, &dist);
    run(&mut test).context("integration tests failed")?;
    if !extra.is_empty() {
        // A chosen subset: the caller sets PKTRACE_TEST_NAT_HOOK for a conntrack run.
        return Ok(());
    }
    // The journeys again with conntrack's events as the NAT observation (the fallback where
    // no kernel NAT hook can be used): their NAT steps must still be what conntrack recorded.
    let mut args = vec!["test", "--release", "-p", "tests"];
    for t in CONNTRACK_TESTS {
        args.extend(["--test", t]);
    }
    args.extend(["--", "--test-threads=1"]);
    let mut test = cargo_command(&args);
    test.env(PKTRACE_BIN_ENV, &pktrace)
        .env(XTASK_BIN_ENV, &xtask)
        .env(xtask_common::PKTRACE_DIST_BIN_ENV, &dist)
        .env(NAT_HOOK_ENV, "conntrack");
    run(&mut test).context("integration tests with --nat-hook conntrack failed")
}

/// `tests::trace::NAT_HOOK_ENV`: the `--nat-hook` every pktrace of the tests gets.
const NAT_HOOK_ENV: &str = "PKTRACE_TEST_NAT_HOOK";

/// The integration test files run a second time with `--nat-hook conntrack` (about a minute:
/// the lab's paths through NAT, on every CNI variant).
const CONNTRACK_TESTS: [&str; 3] = ["journeys", "variants", "ipv6"];

/// One tier of `cargo xtask test`.
struct Tier {
    name: &'static str,
    run: fn() -> Result<()>,
}

/// Every tier, in order.
const TIERS: [Tier; 6] = [
    Tier {
        name: "setup",
        run: setup,
    },
    Tier {
        name: "unit (cargo test, cargo doc, deploy-check)",
        run: unit,
    },
    Tier {
        name: "fuzz (cargo fuzz, 10 s per target)",
        run: crate::fuzz::ci,
    },
    Tier {
        name: "integration (root, lab)",
        run: || integration_test(&[]),
    },
    Tier {
        name: "vm (qemu, the smoke set on the kernel matrix: 5.10 kprobe; 6.1 kprobe, fentry; 6.12 netfilter; arm64 6.1 kprobe)",
        run: vm,
    },
    Tier {
        name: "bench (short)",
        run: pktrace_bench::short,
    },
];

/// The VM tier: the smoke set ([`pktrace_vm::payload::VM_SMOKE`]: attach, one journey
/// through DNAT and MASQUERADE per NAT hook, one drop) on every cell of the kernel matrix
/// ([`pktrace_vm::matrix::CELLS`]); `cargo xtask vm-test --matrix --full` runs the rest and
/// writes docs/compat.md. One guest at a time in CI: two TCG guests side by side on two
/// cores once failed to boot ("IO-APIC + timer doesn't work").
fn vm() -> Result<()> {
    let one = pktrace_vm::VmOptions {
        jobs: 1,
        ..pktrace_vm::VmOptions::default()
    };
    pktrace_vm::matrix::run(&one, None, &workspace_root())
}

/// Runs every tier, stopping at the first failure; prints one final line per tier.
///
/// # Errors
/// On the first tier that fails.
pub fn test_all() -> Result<()> {
    let mut results: Vec<(&str, String)> = Vec::new();
    let mut failure = None;
    for tier in &TIERS {
        if failure.is_some() {
            results.push((tier.name, "skipped (an earlier tier failed)".into()));
            continue;
        }
        eprintln!("==> tier {}", tier.name);
        let start = Instant::now();
        match (tier.run)() {
            Ok(()) => results.push((tier.name, format!("ok ({})", secs(start.elapsed())))),
            Err(err) => {
                results.push((
                    tier.name,
                    format!("FAILED ({}): {err:#}", secs(start.elapsed())),
                ));
                failure = Some(tier.name);
            }
        }
    }
    for (name, result) in &results {
        eprintln!("tier {name}: {result}");
    }
    match failure {
        Some(name) => bail!("tier {name} failed"),
        None => Ok(()),
    }
}

fn unit() -> Result<()> {
    // tracer-ebpf is a no_std BPF crate: tracer-user's build script builds it for the BPF
    // target; it must never be built for the host.
    cargo(&[
        "test",
        "--workspace",
        "--exclude",
        "tests",
        "--exclude",
        "tracer-ebpf",
    ])?;
    docs().context("the doc comments (cargo doc)")?;
    // The Kubernetes manifests against the API schemas (no cluster needed).
    crate::deploy::check()
}

/// Builds every crate's documentation, private items included, with rustdoc's warnings as
/// errors: a doc link that no longer resolves (an item renamed or moved) fails the unit tier.
fn docs() -> Result<()> {
    let mut cmd = cargo_command(&[
        "doc",
        "--workspace",
        "--exclude",
        "tracer-ebpf",
        "--no-deps",
        "--document-private-items",
    ]);
    cmd.env("RUSTDOCFLAGS", "-D warnings");
    run(&mut cmd)
}

fn cargo(args: &[&str]) -> Result<()> {
    run(&mut cargo_command(args))
}

fn secs(elapsed: Duration) -> String {
    format!("{:.1} s", elapsed.as_secs_f64())
}
