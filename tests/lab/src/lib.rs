//! The lab: a simulated AKS node (kube-proxy iptables mode, plus the CNI of one
//! [`Variant`]: Azure CNI bridge or transparent mode with ip-masq-agent, kubenet, or Azure
//! CNI + Calico) built from network namespaces named `pkt-*`; see `DESIGN.md`, "The lab".
//!
//! `up` is idempotent (a healthy lab of the same variant is left alone, a partial one or
//! one of another variant rebuilt; the variant is recorded in [`VARIANT_FILE`]) and `down`
//! removes everything, whatever the variant; both are safe to run twice. Nothing touches the
//! root namespace.
//!
//! This crate is the lab's library; the xtask binary is its front end (`cargo xtask lab …`)
//! and hosts its servers and clients (`xtask lab serve|serve-api|client`, found by
//! [`xtask_common::xtask_exe`]). The integration tests, the demo and the bench use it too.

pub mod api;
pub mod client;
pub mod drops;
pub mod dualstack;
pub mod netns;
pub mod node2;
pub mod node2_dualstack;
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
use xtask_common::cmd::{exclusive_lock, require_programs, require_root};

pub use self::{
    client::{client_tcp, client_tcp_holding, client_udp},
    netns::in_ns,
    status::{LabStatus, status},
    topology::{LAB_DIR, NODE_NS, PODS, STATE_FILE, UBUNTU, VARIANT_FILE, VARIANTS, Variant},
    wiring::{NAT_RULES, nat_rules},
};

/// Serializes `up`/`down` between processes (outside `LAB_DIR`, which `down` removes).
const LOCK_FILE: &str = "/run/pktrace-lab.lock";
/// Programs the lab needs, with the Debian package that has them.
pub const NEEDED: [(&str, &str); 5] = [
    ("ip", "iproute2"),
    ("bridge", "iproute2"),
    ("iptables-restore", "iptables"),
    ("iptables-save", "iptables"),
    ("sysctl", "procps"),
];
/// What `--dual-stack` needs on top (the IPv6 nat table).
pub const NEEDED_DUAL_STACK: [(&str, &str); 2] = [
    ("ip6tables-restore", "iptables"),
    ("ip6tables-save", "iptables"),
];
/// What the calico variant needs on top (its IP pool ipsets).
pub const NEEDED_CALICO: [(&str, &str); 1] = [("ipset", "ipset")];

/// Brings the default lab ([`Variant::AzureBridge`]) up; see [`up_variant`].
///
/// # Errors
/// As [`up_variant`].
pub fn up() -> Result<()> {
    up_variant(Variant::default())
}

/// Brings the lab up as `variant`: does nothing if it is up, healthy and that variant;
/// rebuilds it if partial or another variant.
///
/// # Errors
/// If the preflight fails, a program the variant needs is missing, or building the lab
/// fails.
pub fn up_variant(variant: Variant) -> Result<()> {
    preflight()?;
    if variant == Variant::Calico {
        require_programs(&NEEDED_CALICO, "the lab's calico variant")?;
    }
    let _lock = lock()?;
    let now = status()?;
    if now.up && now.variant == Some(variant) {
        eprintln!(
            "lab: already up and healthy as {variant} ({})",
            state_file_note(variant)
        );
        return Ok(());
    }
    let other = now.variant.filter(|v| *v != variant);
    if teardown()? {
        match other {
            Some(old) => eprintln!("lab: was {old}; removed it, rebuilding as {variant}"),
            None => eprintln!("lab: found a partial lab; removed it, rebuilding"),
        }
    }
    build(variant).or_else(|err| {
        eprintln!("lab: setup failed; removing what was built");
        teardown()?;
        Err(err)
    })?;
    eprintln!(
        "lab: up as {variant} ({} namespaces, {})",
        topology::namespaces().len(),
        state_file_note(variant)
    );
    Ok(())
}

fn state_file_note(variant: Variant) -> String {
    variant.state_file().map_or_else(
        || "no Azure CNI state file: kubenet".to_owned(),
        |path| format!("state file {path}"),
    )
}

/// The variant the lab was last built as (`None` when it is down or was built by a version
/// that did not record it).
#[must_use]
pub fn current_variant() -> Option<Variant> {
    fs::read_to_string(VARIANT_FILE)
        .ok()
        .and_then(|text| Variant::from_name(&text))
}

/// Brings the lab up as `variant` ([`up_variant`]) with `nodes` nodes: 2 adds the second
/// node ([`node2`]) if it is not there.
///
/// # Errors
/// If `nodes` is not 1 or 2, or bringing either node up fails.
pub fn up_nodes(variant: Variant, nodes: u8) -> Result<()> {
    anyhow::ensure!(
        (1..=2).contains(&nodes),
        "the lab has 1 or 2 nodes, not {nodes}: use --nodes 1 or --nodes 2"
    );
    up_variant(variant)?;
    if nodes == 2 {
        let _lock = lock()?;
        node2::up()?;
    }
    Ok(())
}

/// Makes the running lab of `variant` dual-stack ([`dualstack`]), if it is not.
///
/// # Errors
/// As [`dualstack::up`], or if `ip6tables-restore` is missing.
pub fn up_dual_stack(variant: Variant) -> Result<()> {
    require_programs(&NEEDED_DUAL_STACK, "the lab's --dual-stack")?;
    let _lock = lock()?;
    dualstack::up(variant)
}

/// Brings the lab of `variant` up with both nodes dual-stack: node 1's IPv6 half
/// ([`dualstack`]) and node 2's ([`node2_dualstack`]).
///
/// # Errors
/// As [`up_nodes`], [`up_dual_stack`] and [`node2_dualstack::up`].
pub fn up_two_nodes_dual_stack(variant: Variant) -> Result<()> {
    up_nodes(variant, 2)?;
    up_dual_stack(variant)?;
    let _lock = lock()?;
    node2_dualstack::up()
}

/// Takes the lab down: kills every process in its namespaces, deletes them and `LAB_DIR`.
///
/// # Errors
/// If the preflight fails, the lab lock cannot be taken, or the teardown fails.
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

fn build(variant: Variant) -> Result<()> {
    for dir in ["logs", "pids"] {
        let dir = Path::new(LAB_DIR).join(dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(VARIANT_FILE, format!("{variant}\n"))
        .with_context(|| format!("writing {VARIANT_FILE}"))?;
    wiring::build(variant)?;
    if let Some(path) = variant.state_file() {
        let state = state_file::render_variant(variant, SystemTime::now());
        fs::write(path, state).with_context(|| format!("writing {path}"))?;
    }
    for (ns, server) in topology::servers() {
        servers::start(&ns, server)?;
    }
    api::start(variant.pods())?;
    Ok(())
}

/// Removes every trace of the lab; returns whether there was anything to remove.
fn teardown() -> Result<bool> {
    let lab: Vec<String> = topology::namespaces();
    let present: Vec<String> = netns::list()?
        .into_iter()
        .filter(|ns| {
            lab.contains(ns) || ns.starts_with(topology::POD_NS_PREFIX) || ns == node2::NODE2_NS
        })
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
