//! `cargo xtask deploy-check` (also part of the unit tier of `cargo xtask test`): the
//! Kubernetes manifests validated against the API schemas with kubernetes-validate (strict:
//! unknown fields are errors): every YAML file in `deploy/` and the pod `kubectl pktrace`
//! creates (`--dry-run --node`, no cluster needed).

use std::{fs, path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};
use xtask_common::{
    cargo_command,
    cmd::{output, run},
    target_dir, workspace_root,
};

use crate::setup::validator;

/// Kubernetes versions the manifests must be valid for: the oldest AKS still supports
/// (long-term support) and the newest the validator knows.
pub const KUBERNETES_VERSIONS: [&str; 2] = ["1.29.0", "1.37.0"];

/// Validates the manifests.
///
/// # Errors
/// The validator is missing (run `cargo xtask setup`), the plugin does not build, or a
/// manifest is invalid.
pub fn check() -> Result<()> {
    let validator = validator::program();
    if !validator.exists() {
        bail!(
            "{} is missing: run `cargo xtask setup`",
            validator.display()
        );
    }
    let mut files = manifests()?;
    files.push(plugin_pod()?);
    for version in KUBERNETES_VERSIONS {
        let mut cmd = Command::new(&validator);
        cmd.args(["--strict", "--quiet", "-k", version])
            .args(&files);
        run(&mut cmd).with_context(|| format!("manifests invalid for Kubernetes {version}"))?;
    }
    eprintln!(
        "deploy-check: {} valid for Kubernetes {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        KUBERNETES_VERSIONS.join(" and ")
    );
    Ok(())
}

/// The YAML files of `deploy/`.
fn manifests() -> Result<Vec<PathBuf>> {
    let dir = workspace_root().join("deploy");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The pod kubectl-pktrace would create, written to a file (with a name: the server would
/// make one from `generateName`).
fn plugin_pod() -> Result<PathBuf> {
    run(&mut cargo_command(&[
        "build",
        "-p",
        "tracer-user",
        "--bin",
        "kubectl-pktrace",
    ]))
    .context("building kubectl-pktrace")?;
    let plugin = target_dir().join("debug/kubectl-pktrace");
    let text = output(
        Command::new(&plugin)
            .args([
                "ubuntu",
                "-n",
                "default",
                "--node",
                "aks-nodepool1-0",
                "--dry-run",
            ])
            .args(["--", "--follow", "-o", "json"])
            .env("KUBECONFIG", "/nonexistent"),
    )?;
    let mut pod: serde_json::Value =
        serde_json::from_str(&text).context("the plugin's manifest")?;
    pod["metadata"]["name"] = "pktrace-ubuntu-x7k2q".into();
    let path = target_dir().join("deploy-check/kubectl-pktrace-pod.json");
    fs::create_dir_all(path.parent().unwrap_or(&target_dir()))?;
    fs::write(&path, serde_json::to_string_pretty(&pod)?)?;
    Ok(path)
}
