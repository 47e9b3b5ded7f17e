//! Integration tests for pktrace (root, lab namespaces): see `tests/`. Run them with
//! `cargo xtask integration-test`, which builds the binaries and sets `PKTRACE_BIN` and
//! `PKTRACE_XTASK_BIN`.
//!
//! # The root tier
//! Every test that needs root or this machine's kernel is in the root tier, run by
//! `cargo xtask integration-test [-- FILTER]`; plain `cargo test` (no root) has none, and none
//! of its tests passes by skipping. The root tier has two parts, always run together:
//! - the tests here (`tests/*.rs`), which drive the `pktrace` binary against the lab;
//! - tests that need private items of tracer-user (loading its kernel object, its netfilter
//!   and fentry/kprobe attach code, its nfnetlink readers in a throwaway namespace, the
//!   running kernel's BTF). They stay beside the code as `#[ignore = "root tier: …"]` unit
//!   tests, so `cargo test` lists them as ignored, and the root tier runs them first with
//!   `cargo test -p tracer-user -- --ignored` (tracer-user's `test_support` module).
//!
//! A root-tier test fails when not run as root, and fails when the feature it tests is
//! missing on a kernel new enough to have it; only a kernel too old for the feature ends a
//! test early (saying so).

pub mod capture;
pub mod leftovers;
pub mod merge;
pub mod property;
pub mod rawbpf;
pub mod trace;

use std::{env, path::PathBuf};

/// Holds the lab up for a test: `new` brings it up (panicking with the reason if it cannot),
/// dropping it takes the lab down again.
#[must_use = "the lab goes down when the guard is dropped"]
pub struct LabGuard(xtask::lab::Variant);

impl LabGuard {
    /// Brings the default lab (Azure CNI bridge mode) up (`xtask::lab::up`).
    ///
    /// # Panics
    /// If the lab cannot be brought up (not root, tools missing, a step failed).
    pub fn new() -> Self {
        Self::with_variant(xtask::lab::Variant::default())
    }

    /// Brings the lab up as `variant` (rebuilt if it runs as another one).
    ///
    /// # Panics
    /// If the lab cannot be brought up (not root, tools missing, a step failed).
    pub fn with_variant(variant: xtask::lab::Variant) -> Self {
        require_runner();
        if let Err(err) = xtask::lab::up_variant(variant) {
            panic!("bringing the lab up as {variant} failed: {err:#}");
        }
        Self(variant)
    }

    /// Brings the default lab up with its second node (`xtask::lab::up_nodes(…, 2)`).
    ///
    /// # Panics
    /// If the lab cannot be brought up (not root, tools missing, a step failed).
    pub fn two_nodes() -> Self {
        require_runner();
        let variant = xtask::lab::Variant::default();
        if let Err(err) = xtask::lab::up_nodes(variant, 2) {
            panic!("bringing the lab up with two nodes failed: {err:#}");
        }
        Self(variant)
    }

    /// Brings the default lab up with both nodes dual-stack
    /// (`xtask::lab::up_two_nodes_dual_stack`).
    ///
    /// # Panics
    /// If the lab cannot be brought up (not root, tools missing, a step failed).
    pub fn two_nodes_dual_stack() -> Self {
        require_runner();
        let variant = xtask::lab::Variant::default();
        if let Err(err) = xtask::lab::up_two_nodes_dual_stack(variant) {
            panic!("bringing the lab up with two dual-stack nodes failed: {err:#}");
        }
        Self(variant)
    }

    /// Brings the default lab up and makes it dual-stack (`xtask::lab::up_dual_stack`).
    ///
    /// # Panics
    /// If the lab cannot be brought up (not root, tools missing, a step failed).
    pub fn dual_stack() -> Self {
        require_runner();
        let variant = xtask::lab::Variant::default();
        if let Err(err) =
            xtask::lab::up_variant(variant).and_then(|()| xtask::lab::up_dual_stack(variant))
        {
            panic!("bringing the lab up dual-stack failed: {err:#}");
        }
        Self(variant)
    }

    /// The variant the lab runs as.
    #[must_use]
    pub fn variant(&self) -> xtask::lab::Variant {
        self.0
    }
}

/// The lab's namespaces are global to the machine: only `cargo xtask integration-test`, which
/// holds the machine-wide lab lock for its whole run (and sets `PKTRACE_XTASK_BIN`), may bring
/// it up. A plain `cargo test -p tests` as root would race another run's lab.
///
/// # Panics
/// When the tests were not started by `cargo xtask integration-test`.
fn require_runner() {
    assert!(
        !env::var_os(xtask::XTASK_BIN_ENV).is_none_or(|v| v.is_empty()),
        "the lab tests run via `cargo xtask integration-test` (it holds the lab lock); \
         {} is not set",
        xtask::XTASK_BIN_ENV
    );
}

impl Default for LabGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for LabGuard {
    fn drop(&mut self) {
        if let Err(err) = xtask::lab::down() {
            // Never panic in drop (it may run while unwinding from a failed test).
            eprintln!("taking the lab down failed: {err:#}");
        }
    }
}

/// The static musl pktrace of `cargo xtask dist`, from `PKTRACE_DIST_BIN`.
///
/// # Panics
/// If `PKTRACE_DIST_BIN` is not set: run the tests via `cargo xtask integration-test`.
#[must_use]
pub fn dist_bin() -> PathBuf {
    match env::var_os(xtask::PKTRACE_DIST_BIN_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!("PKTRACE_DIST_BIN is not set: run via `cargo xtask integration-test`"),
    }
}

/// The pktrace binary under test, from `PKTRACE_BIN`.
///
/// # Panics
/// If `PKTRACE_BIN` is not set: run the tests via `cargo xtask integration-test`.
#[must_use]
pub fn pktrace_bin() -> PathBuf {
    match env::var_os("PKTRACE_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!("PKTRACE_BIN is not set: run via `cargo xtask integration-test`"),
    }
}
