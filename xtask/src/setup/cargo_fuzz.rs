//! cargo-fuzz, for the fuzz targets in `fuzz/` (`cargo xtask fuzz`, and a tier of
//! `cargo xtask test`); it drives libFuzzer on the nightly toolchain `ensure_nightly` set up.

use std::process::Command;

use anyhow::{Context as _, Result};
use xtask_common::cmd::{output, run};

/// Installs cargo-fuzz unless `cargo fuzz --version` already answers.
pub fn ensure_cargo_fuzz() -> Result<()> {
    if let Ok(version) = output(Command::new("cargo").args(["fuzz", "--version"])) {
        eprintln!("setup: {} already installed", version.trim());
        return Ok(());
    }
    eprintln!("setup: installing cargo-fuzz (takes a minute or two)");
    run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
        .context("installing cargo-fuzz: check network access to crates.io")
}
