//! The test payload: pktrace and xtask (release) and the integration test binaries of the
//! `tests` crate, whose paths cargo reports (`--no-run --message-format=json`).

use std::{path::PathBuf, process::Stdio};

use anyhow::{Context as _, Result, bail};
use xtask_common::{cargo_command, cmd::describe, target_dir};

use super::{arch::Arch, initramfs::Payload};

/// What the guests run: the smoke set (CI's VM tier: attach, one journey through DNAT and
/// MASQUERADE per NAT hook, one drop), the full set (`--full`: [`VM_TESTS`] and the lockdown
/// boot), or every test binary ([`VM_ALL_TESTS_ENV`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Suite {
    #[default]
    Smoke,
    Full,
}

/// The smoke set, as (test binary, test name): run with `--exact` in every cell, per hook.
pub const VM_SMOKE: [(&str, &str); 3] = [
    // The hooks this kernel has, the one `auto` picks, and the NAT it then sees.
    (
        "nat_hooks",
        "auto_takes_the_best_hook_and_says_why_it_skipped_the_better_ones",
    ),
    // One journey through DNAT and MASQUERADE, checked against `conntrack -L`.
    (
        "journeys",
        "tcp_to_load_balancer_vip_is_dnated_and_masqueraded",
    ),
    // One drop, its reason and place, against the kernel's own counter.
    (
        "drops",
        "closed_ports_are_no_socket_drops_counted_by_the_kernel",
    ),
];

impl Suite {
    /// Whether the guests run the test binary `name` (outside the lockdown boot).
    #[must_use]
    pub fn runs(self, name: &str, all: bool) -> bool {
        match self {
            Self::Smoke => VM_SMOKE.iter().any(|(binary, _)| *binary == name),
            Self::Full => all || VM_TESTS.contains(&name) || name == LOCKDOWN_TEST,
        }
    }

    /// The harness arguments the suite adds to the caller's: the smoke set's names, exact.
    #[must_use]
    pub fn harness_args(self) -> Vec<String> {
        match self {
            Self::Smoke => VM_SMOKE
                .iter()
                .map(|(_, test)| (*test).to_owned())
                .chain(std::iter::once("--exact".to_owned()))
                .collect(),
            Self::Full => Vec::new(),
        }
    }
}

/// The test binaries the full set runs: those whose outcome depends on the NAT hook (kprobe,
/// fentry), on a kernel without tcx or on how the kernel reports drops. The rest (pod resolution, lab variants, following
/// interfaces, the safety suite) exercise user space and the tc path, which the host's
/// integration tier covers; under TCG they would add tens of minutes per hook.
pub const VM_TESTS: [&str; 10] = [
    "tests",
    "journeys",
    "drops",
    "first_packet",
    "nat_hooks",
    "lifecycle",
    "attribution",
    "dist",
    // IPv6 NAT: the kprobe and fentry programs read IPv6 packets as the netfilter ones do.
    "ipv6",
    // Staged records written out on a quiet CPU: `BPF_PROG_TEST_RUN` on a CPU, per kernel.
    "batches",
];
/// The test binary that runs in a guest of its own, booted with `lockdown=confidentiality`
/// (tests/tests/lockdown.rs); never in the others.
pub const LOCKDOWN_TEST: &str = "lockdown";
/// Set to `1` to run every test binary in the guest.
pub const VM_ALL_TESTS_ENV: &str = "PKTRACE_VM_ALL_TESTS";

/// Builds pktrace and xtask (release), the static musl pktrace that ships (as the integration
/// tier does: `PKTRACE_DIST_BIN` names one built before and skips that build) and the
/// integration test binaries, for `arch` (arm64: all for aarch64-unknown-linux-musl, with
/// the arm64 userland of [`super::sysroot`]); returns their paths.
///
/// # Errors
/// If a build fails or a binary is missing after it.
pub fn build(arch: Arch, suite: Suite) -> Result<Payload> {
    // arm64: the aarch64 musl builds (static: the guest's libraries are Debian's arm64 ones).
    let cross = (arch == Arch::Arm64).then_some(&xtask_common::musl::AARCH64);
    let with_target = |args: &[&str]| {
        let mut cmd = cargo_command(args);
        if let Some(target) = cross {
            cmd.args(["--target", target.triple]);
            xtask_common::musl::cross_env(&mut cmd, target);
        }
        cmd
    };
    xtask_common::cmd::run(&mut with_target(&[
        "build",
        "--release",
        "-p",
        "tracer-user",
        "-p",
        "xtask",
    ]))
    .context("building pktrace and xtask")?;
    let built = match cross {
        Some(target) => target_dir().join(target.triple).join("release"),
        None => target_dir().join("release"),
    };
    let pktrace = built.join("pktrace");
    let xtask = built.join("xtask");
    for bin in [&pktrace, &xtask] {
        if !bin.is_file() {
            bail!("{} is missing after the build", bin.display());
        }
    }
    let mut cmd = with_target(&[
        "test",
        "--release",
        "-p",
        "tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    if suite == Suite::Smoke {
        // Only the smoke set's binaries: an arm64 build of all of them takes minutes more.
        for (binary, _) in VM_SMOKE {
            cmd.args(["--test", binary]);
        }
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("starting `{}`", describe(&cmd)))?;
    if !out.status.success() {
        bail!("`{}` failed ({})", describe(&cmd), out.status);
    }
    let all = std::env::var_os(VM_ALL_TESTS_ENV).is_some_and(|v| v == "1");
    let tests: Vec<_> = test_executables(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .filter(|(name, _)| suite.runs(name, all))
        .collect();
    if tests.is_empty() {
        bail!("`{}` listed no test executables", describe(&cmd));
    }
    // The shipped binary, for tests/tests/dist.rs alone (not in the smoke set).
    let dist = if tests.iter().any(|(name, _)| name == "dist") {
        Some(
            match (cross, std::env::var_os(xtask_common::PKTRACE_DIST_BIN_ENV)) {
                (Some(target), _) => {
                    xtask_common::musl::build(target).context("building the musl binary")?
                }
                (None, Some(path)) if !path.is_empty() => PathBuf::from(path),
                (None, _) => xtask_common::musl::build(&xtask_common::musl::X86_64)
                    .context("building the musl binary")?,
            },
        )
    } else {
        None
    };
    let sysroot = match arch {
        Arch::Arm64 => Some(super::sysroot::arm64()?),
        Arch::X86_64 => None,
    };
    Ok(Payload {
        pktrace,
        xtask,
        dist,
        tests,
        sysroot,
    })
}

/// The test executables in cargo's JSON messages, as (target name, path): integration tests
/// by name, then the library's unit tests; without duplicates.
#[must_use]
pub fn test_executables(messages: &str) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(bool, String, PathBuf)> = Vec::new();
    for line in messages.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(name)) = (msg["executable"].as_str(), msg["target"]["name"].as_str())
        else {
            continue;
        };
        let is_lib = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k != "test"));
        if !found.iter().any(|(_, n, _)| n == name) {
            found.push((is_lib, name.to_owned(), PathBuf::from(exe)));
        }
    }
    found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    found.into_iter().map(|(_, n, p)| (n, p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_test_executables_in_cargo_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"name":"tests","kind":["lib"]},"profile":{"test":true},"executable":"/t/release/deps/tests-1"}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"lifecycle","kind":["test"]},"profile":{"test":true},"executable":"/t/release/deps/lifecycle-3"}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"journeys","kind":["test"]},"profile":{"test":true},"executable":"/t/release/deps/journeys-2"}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"xtask","kind":["lib"]},"profile":{"test":false},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
        ]
        .join("\n");
        assert_eq!(
            test_executables(&messages),
            [
                (
                    "journeys".to_owned(),
                    PathBuf::from("/t/release/deps/journeys-2")
                ),
                (
                    "lifecycle".to_owned(),
                    PathBuf::from("/t/release/deps/lifecycle-3")
                ),
                ("tests".to_owned(), PathBuf::from("/t/release/deps/tests-1")),
            ]
        );
    }
}
