//! kubernetes-validate (PyPI), the schema check of the Kubernetes manifests (`deploy/` and the
//! pod kubectl-pktrace creates), installed in a virtualenv of its own: Debian's Python refuses
//! `pip install` outside one (PEP 668).

use std::{env, path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};
use xtask_common::cmd::{find_program, output, run};

/// The pinned release (its schemas go up to Kubernetes 1.37).
pub const VERSION: &str = "1.37.0";

/// The virtualenv: `~/.local/share/pktrace/venv`.
#[must_use]
pub fn venv() -> PathBuf {
    let home = env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".local/share/pktrace/venv")
}

/// The `kubernetes-validate` executable in the virtualenv.
#[must_use]
pub fn program() -> PathBuf {
    venv().join("bin/kubernetes-validate")
}

/// Installs kubernetes-validate `VERSION` unless it is there.
///
/// # Errors
/// python3 (with `venv`, Debian's python3-venv) is missing, or pip failed.
pub fn ensure() -> Result<()> {
    let installed = output(Command::new(program()).arg("--version")).ok();
    if installed.as_deref().map(str::trim) == Some(VERSION) {
        eprintln!(
            "setup: kubernetes-validate {VERSION} already installed ({})",
            program().display()
        );
        return Ok(());
    }
    let Some(python) = find_program("python3") else {
        bail!("python3 not found: install Debian's python3 and python3-venv, then rerun setup");
    };
    eprintln!(
        "setup: installing kubernetes-validate {VERSION} in {}",
        venv().display()
    );
    run(Command::new(&python).args(["-m", "venv"]).arg(venv()))
        .context("creating the virtualenv (Debian: apt-get install python3-venv)")?;
    run(Command::new(venv().join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("kubernetes-validate=={VERSION}")))
    .context("installing kubernetes-validate from PyPI")
}
