//! The lab: a simulated AKS node (Azure CNI bridge mode, kube-proxy iptables mode,
//! ip-masq-agent) built from network namespaces named `pkt-*`; see `DESIGN.md`, "The lab".
//!
//! `up` is idempotent (a healthy lab is left alone, a partial one rebuilt) and `down`
//! removes everything; both are safe to run twice. Nothing touches the root namespace.

pub mod api;
pub mod client;
pub mod netns;
pub mod pods;
pub mod serve;
pub mod servers;
pub mod state_file;
pub mod status;
pub mod topology;
pub mod wiring;

use std::{
    fs::{self, File},
    path::Path,
    time::SystemTime,
};

use anyhow::{Context as _, Result};

pub use self::{
    client::{client_tcp, client_udp},
    netns::in_ns,
    status::{LabStatus, status},
    topology::{LAB_DIR, NODE_NS, PODS, STATE_FILE, UBUNTU},
    wiring::NAT_RULES,
};
use crate::cmd::{exclusive_lock, require_programs, require_root};

/// Serializes `up`/`down` between processes (outside `LAB_DIR`, which `down` removes).
const LOCK_FILE: &str = "/run/pktrace-lab.lock";
/// Programs the lab needs, with the Debian package that has them.
const NEEDED: [(&str, &str); 5] = [
    ("ip", "iproute2"),
    ("bridge", "iproute2"),
    ("iptables-restore", "iptables"),
    ("iptables-save", "iptables"),
    ("sysctl", "procps"),
];

/// Brings the lab up: does nothing if it is up and healthy, rebuilds it if partial.
pub fn up() -> Result<()> {
    preflight()?;
    let _lock = lock()?;
    if status()?.up {
        eprintln!("lab: already up and healthy (state file {STATE_FILE})");
        return Ok(());
    }
    if teardown()? {
        eprintln!("lab: found a partial lab; removed it, rebuilding");
    }
    build().or_else(|err| {
        eprintln!("lab: setup failed; removing what was built");
        teardown()?;
        Err(err)
    })?;
    eprintln!(
        "lab: up ({} namespaces, state file {STATE_FILE})",
        topology::namespaces().len()
    );
    Ok(())
}

/// Takes the lab down: kills every process in its namespaces, deletes them and `LAB_DIR`.
pub fn down() -> Result<()> {
    preflight()?;
    let _lock = lock()?;
    if teardown()? {
        eprintln!("lab: down");
    } else {
        eprintln!("lab: not up; nothing to remove");
    }
    Ok(())
}

/// What a lab server has logged (one `tcp client=…`/`udp client=…` line per client), or
/// an empty string if it logged nothing.
#[must_use]
pub fn server_log(ns: &str) -> String {
    fs::read_to_string(servers::log_path(ns)).unwrap_or_default()
}

fn build() -> Result<()> {
    for dir in ["logs", "pids"] {
        let dir = Path::new(LAB_DIR).join(dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    wiring::build()?;
    let state = state_file::render(&PODS, SystemTime::now());
    fs::write(STATE_FILE, state).with_context(|| format!("writing {STATE_FILE}"))?;
    for (ns, server) in topology::servers() {
        servers::start(&ns, server)?;
    }
    api::start(&PODS)?;
    Ok(())
}

/// Removes every trace of the lab; returns whether there was anything to remove.
fn teardown() -> Result<bool> {
    let lab: Vec<String> = topology::namespaces();
    let present: Vec<String> = netns::list()?
        .into_iter()
        .filter(|ns| lab.contains(ns) || ns.starts_with(topology::POD_NS_PREFIX))
        .collect();
    for ns in &present {
        let killed = servers::kill_all_in(ns)?;
        if killed > 0 {
            eprintln!("lab: stopped {killed} process(es) in {ns}");
        }
    }
    for ns in &present {
        netns::delete(ns).with_context(|| format!("deleting namespace {ns}"))?;
    }
    let had_dir = Path::new(LAB_DIR).exists();
    if had_dir {
        fs::remove_dir_all(LAB_DIR).with_context(|| format!("removing {LAB_DIR}"))?;
    }
    Ok(had_dir || !present.is_empty())
}

fn preflight() -> Result<()> {
    require_root("the lab (network namespaces)")?;
    require_programs(&NEEDED, "the lab")
}

/// An exclusive lock on `LOCK_FILE`, held until the file is dropped.
fn lock() -> Result<File> {
    exclusive_lock(LOCK_FILE)
}
