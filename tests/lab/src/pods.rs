//! Pods added to and deleted from the running lab (`cargo xtask lab pod add|del NAME`), as a
//! CNI would: a `pkt-pod-NAME` namespace with a free pod IP, its host veth (`azv` + 11 hex
//! digits, from the pod's name like Azure CNI's), the node's wiring for it, and the Azure CNI
//! state file rewritten atomically (temporary file + rename).
//!
//! Added pods are recorded in `LAB_DIR/pods/` (one file per pod); `lab down` removes them with
//! the rest (their namespaces are `pkt-pod-*`, their veths live in `pkt-node`). Every add
//! takes the next address after the last one handed out, so a pod deleted and added again
//! (a recreation) gets a new IP.

use std::{
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use anyhow::{Context as _, Result, bail, ensure};

use super::{
    lock, netns, servers, state_file,
    topology::{
        BRIDGE, GATEWAY_IP, LAB_DIR, NODE_IP, NODE_NS, POD_SUBNET, PODS, Pod, STATE_FILE, Server,
    },
    wiring,
};

/// Kubernetes namespace of added pods.
pub const NAMESPACE: &str = "default";
/// Where added pods are recorded.
const PODS_DIR: &str = "pods";
/// The last address handed out (a recreated pod never gets its old one back).
const LAST_FILE: &str = "last-ip";
/// Longest pod name: the namespace `pkt-pod-NAME` stays readable and in `ip netns` limits.
const NAME_MAX: usize = 40;

/// A pod added to the lab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedPod {
    pub name: String,
    pub ip: Ipv4Addr,
    pub host_if: String,
}

impl AddedPod {
    /// Its network namespace.
    #[must_use]
    pub fn netns(&self) -> String {
        format!("{}{}", super::topology::POD_NS_PREFIX, self.name)
    }

    /// `default/NAME`.
    #[must_use]
    pub fn full_name(&self) -> String {
        format!("{NAMESPACE}/{}", self.name)
    }

    /// As a lab [`Pod`] for the wiring and the state file. The strings are leaked: xtask is a
    /// short-lived process and a pod is a few dozen bytes.
    fn as_pod(&self) -> Pod {
        Pod {
            namespace: NAMESPACE,
            name: Box::leak(self.name.clone().into_boxed_str()),
            ip: self.ip,
            host_if: Box::leak(self.host_if.clone().into_boxed_str()),
            server: Server::None,
        }
    }
}

/// Adds pod `default/NAME` to the running lab; returns it.
///
/// # Errors
/// On a bad or taken name, a lab that is not up, no free address, or if building any part
/// fails.
pub fn add(name: &str) -> Result<AddedPod> {
    check_name(name)?;
    let _lock = lock()?;
    ensure!(
        netns::exists(NODE_NS) && Path::new(STATE_FILE).exists(),
        "the lab is not up: run `cargo xtask lab up` first"
    );
    let added = recorded()?;
    ensure!(
        !added.iter().any(|p| p.name == name) && !PODS.iter().any(|p| p.name == name),
        "pod {NAMESPACE}/{name} exists already: `lab pod del {name}` first"
    );
    let last = fs::read_to_string(dir().join(LAST_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let taken: Vec<Ipv4Addr> = PODS
        .iter()
        .map(|p| p.ip)
        .chain(added.iter().map(|p| p.ip))
        .collect();
    let ip = free_ip(last, &taken).context("no free address left in the pod subnet")?;
    let pod = AddedPod {
        name: name.to_owned(),
        ip,
        host_if: host_if_name(NAMESPACE, name),
    };
    fs::create_dir_all(dir()).with_context(|| format!("creating {}", dir().display()))?;
    fs::write(dir().join(LAST_FILE), ip.to_string()).context("recording the last pod address")?;
    build(&pod).inspect_err(|_| {
        let _ = unwire(&pod);
    })?;
    fs::write(record_path(name), format!("{} {}\n", pod.ip, pod.host_if))
        .context("recording the pod")?;
    write_state_file().inspect_err(|_| {
        let _ = unwire(&pod);
        let _ = fs::remove_file(record_path(name));
    })?;
    eprintln!(
        "lab: pod {} added: {} on {}",
        pod.full_name(),
        pod.ip,
        pod.host_if
    );
    Ok(pod)
}

/// Deletes an added pod: its processes, veth, namespace, record and state-file entry.
///
/// # Errors
/// On a bad name, no such added pod, if the lab lock cannot be taken, or if removing any
/// part fails.
pub fn del(name: &str) -> Result<AddedPod> {
    check_name(name)?;
    let _lock = lock()?;
    let Some(pod) = recorded()?.into_iter().find(|p| p.name == name) else {
        bail!("no added pod {NAMESPACE}/{name} (only pods made with `lab pod add` can be deleted)");
    };
    // The state file first, as a CNI's DEL does before the interface disappears for good.
    fs::remove_file(record_path(name)).context("removing the pod's record")?;
    write_state_file()?;
    unwire(&pod)?;
    eprintln!(
        "lab: pod {} deleted ({} on {})",
        pod.full_name(),
        pod.ip,
        pod.host_if
    );
    Ok(pod)
}

/// Pods added so far.
///
/// # Errors
/// If the records cannot be read, or one is not `IP HOST_IF`.
pub fn recorded() -> Result<Vec<AddedPod>> {
    let Ok(entries) = fs::read_dir(dir()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix(".pod"))
            .map(str::to_owned)
        else {
            continue;
        };
        let text = fs::read_to_string(entry.path())?;
        let mut words = text.split_whitespace();
        let (Some(ip), Some(host_if)) = (words.next().and_then(|w| w.parse().ok()), words.next())
        else {
            bail!("{} is not `IP HOST_IF`", entry.path().display());
        };
        out.push(AddedPod {
            name,
            ip,
            host_if: host_if.to_owned(),
        });
    }
    out.sort_by_key(|p| p.ip);
    Ok(out)
}

fn build(pod: &AddedPod) -> Result<()> {
    netns::create(&pod.netns()).with_context(|| format!("creating namespace {}", pod.netns()))?;
    let variant = super::current_variant().unwrap_or_default();
    wiring::pod_link(variant, &pod.as_pod())
        .with_context(|| format!("wiring pod {}", pod.full_name()))
}

/// Removes what [`build`] made; what is already gone is skipped.
fn unwire(pod: &AddedPod) -> Result<()> {
    let ns = pod.netns();
    if netns::exists(&ns) {
        servers::kill_all_in(&ns)?;
    }
    // Deleting the host side removes the pod's eth0 too.
    let _ = netns::ip(NODE_NS, &format!("link del {}", pod.host_if));
    let _ = netns::ip(NODE_NS, &format!("neigh del {} dev {BRIDGE}", pod.ip));
    if netns::exists(&ns) {
        netns::delete(&ns).with_context(|| format!("deleting namespace {ns}"))?;
    }
    Ok(())
}

/// Renders the state file and the API pod table for the lab's pods and the added ones;
/// replaces both atomically.
fn write_state_file() -> Result<()> {
    let mut pods: Vec<Pod> = PODS.to_vec();
    pods.extend(recorded()?.iter().map(AddedPod::as_pod));
    let text = state_file::render(&pods, SystemTime::now());
    let tmp = format!("{STATE_FILE}.tmp");
    fs::write(&tmp, text).with_context(|| format!("writing {tmp}"))?;
    fs::rename(&tmp, STATE_FILE).with_context(|| format!("replacing {STATE_FILE}"))?;
    // The fake Kubernetes API server knows the same pods.
    super::api::write_pods(&pods)
}

fn dir() -> PathBuf {
    Path::new(LAB_DIR).join(PODS_DIR)
}

fn record_path(name: &str) -> PathBuf {
    dir().join(format!("{name}.pod"))
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-');
    ensure!(
        ok,
        "pod name {name:?}: use up to {NAME_MAX} of a-z, 0-9 and '-' (a DNS label)"
    );
    Ok(())
}

/// The next free host address of the pod subnet after `last` (wrapping once), skipping the
/// network and broadcast addresses, the node, the gateway and `taken`.
#[must_use]
pub fn free_ip(last: Option<Ipv4Addr>, taken: &[Ipv4Addr]) -> Option<Ipv4Addr> {
    let (subnet, prefix) = POD_SUBNET;
    let base = u32::from(subnet);
    let size = 1u32 << (32 - u32::from(prefix));
    // Added pods start in the upper half, away from the lab's own pods.
    let start = last.map_or(size / 2, |ip| u32::from(ip).wrapping_sub(base) + 1);
    (0..size)
        .map(|i| base + (start + i) % size)
        .map(Ipv4Addr::from)
        .find(|ip| {
            let host = u32::from(*ip) - base;
            host != 0
                && host != size - 1
                && *ip != NODE_IP
                && *ip != GATEWAY_IP
                && !taken.contains(ip)
        })
}

/// The host veth's name: `azv` and 11 hex digits of a hash of the pod's namespace and name
/// (stable across recreations, as Azure CNI's are).
#[must_use]
pub fn host_if_name(namespace: &str, name: &str) -> String {
    let key = format!("{namespace}{name}");
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("azv{:011x}", hash & 0x0fff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_move_on_and_skip_what_is_taken() {
        let first = free_ip(None, &[]).unwrap();
        assert_eq!(first, Ipv4Addr::new(10, 13, 76, 128));
        assert_eq!(
            free_ip(Some(first), &[]),
            Some(Ipv4Addr::new(10, 13, 76, 129))
        );
        // A recreation (the old address free again) still gets the next one.
        assert_eq!(
            free_ip(Some(Ipv4Addr::new(10, 13, 76, 129)), &[first]),
            Some(Ipv4Addr::new(10, 13, 76, 130))
        );
        // Wraps past the broadcast address, the network address and the gateway.
        let wrapped = free_ip(Some(Ipv4Addr::new(10, 13, 76, 254)), &[]).unwrap();
        assert_eq!(wrapped, Ipv4Addr::new(10, 13, 76, 2));
        let lab: Vec<Ipv4Addr> = PODS.iter().map(|p| p.ip).collect();
        let all: Vec<Ipv4Addr> = (1..=254).map(|o| Ipv4Addr::new(10, 13, 76, o)).collect();
        assert_eq!(free_ip(None, &all), None);
        assert!(!lab.contains(&free_ip(Some(Ipv4Addr::new(10, 13, 76, 45)), &lab).unwrap()));
    }

    #[test]
    fn host_interfaces_look_like_azure_cni_ones() {
        let name = host_if_name("default", "x");
        assert_eq!(name.len(), 14);
        assert!(
            name.starts_with("azv") && name[3..].bytes().all(|b| b.is_ascii_hexdigit()),
            "{name}"
        );
        assert_eq!(name, host_if_name("default", "x"));
        assert_ne!(name, host_if_name("default", "y"));
    }

    #[test]
    fn names_must_be_dns_labels() {
        assert!(check_name("x-1").is_ok());
        for bad in ["", "X", "a b", "-a", "a/b", &"a".repeat(41)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
