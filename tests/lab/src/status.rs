//! What the lab looks like now: variant, namespaces, pods, state file and server liveness.

use std::{fmt, path::Path};

use anyhow::Result;

use super::{
    api, netns, servers,
    topology::{NAT_RULES_FILE, PODS, Pod, Server, Variant, namespaces},
};

/// A server of the lab and whether it runs.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// Its namespace.
    pub netns: String,
    /// What it serves.
    pub server: Server,
    /// Its recorded pid.
    pub pid: Option<i32>,
    /// Whether that pid is alive in the namespace.
    pub alive: bool,
}

/// A snapshot of the lab.
#[derive(Debug, Clone)]
pub struct LabStatus {
    /// The variant the lab was built as (`None`: down, or not recorded).
    pub variant: Option<Variant>,
    /// Every namespace of the lab and whether it exists.
    pub namespaces: Vec<(String, bool)>,
    /// The lab's pods.
    pub pods: Vec<Pod>,
    /// The state file, if written.
    pub state_file: Option<&'static str>,
    /// The nat rules loaded into the node (`iptables-save -t nat` format), if written.
    pub nat_rules: Option<&'static str>,
    /// The servers.
    pub servers: Vec<ServerState>,
    /// The fake Kubernetes API server (in the node namespace, on its 127.0.0.1).
    pub kube_api: ServerState,
    /// Its kubeconfig, if written.
    pub kubeconfig: Option<&'static str>,
    /// The variant is known, all namespaces exist, its state file (if it has one) is there,
    /// every server runs and so does the fake API server (with its kubeconfig).
    pub up: bool,
}

/// Looks at the lab (needs root to see the servers' namespaces).
///
/// # Errors
/// None at present: what cannot be looked at counts as absent.
pub fn status() -> Result<LabStatus> {
    let namespaces: Vec<(String, bool)> = namespaces()
        .into_iter()
        .map(|ns| {
            let e = netns::exists(&ns);
            (ns, e)
        })
        .collect();
    let variant = super::current_variant();
    let state_file = variant
        .and_then(Variant::state_file)
        .filter(|path| Path::new(path).exists());
    let nat_rules = Path::new(NAT_RULES_FILE).exists().then_some(NAT_RULES_FILE);
    let servers: Vec<ServerState> = super::topology::servers()
        .into_iter()
        .map(|(ns, server)| ServerState {
            pid: servers::recorded_pid(&ns),
            alive: netns::exists(&ns) && servers::is_running(&ns),
            netns: ns,
            server,
        })
        .collect();
    let kube_api = ServerState {
        netns: api::NETNS.to_owned(),
        server: Server::Tcp(api::PORT),
        pid: api::pid(),
        alive: netns::exists(api::NETNS) && api::is_running(),
    };
    let kubeconfig = Path::new(api::KUBECONFIG)
        .exists()
        .then_some(api::KUBECONFIG);
    let up = variant.is_some()
        && namespaces.iter().all(|(_, e)| *e)
        && state_file.is_some() == variant.is_some_and(|v| v.state_file().is_some())
        && servers.iter().all(|s| s.alive)
        && kube_api.alive
        && kubeconfig.is_some();
    Ok(LabStatus {
        variant,
        namespaces,
        pods: variant.map_or(PODS.to_vec(), |v| v.pods().to_vec()),
        state_file,
        nat_rules,
        servers,
        kube_api,
        kubeconfig,
        up,
    })
}

impl fmt::Display for LabStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let any = self.namespaces.iter().any(|(_, e)| *e);
        let state = if self.up {
            "up"
        } else if any {
            "partial (run `cargo xtask lab up`)"
        } else {
            "down"
        };
        writeln!(f, "lab: {state}")?;
        writeln!(
            f,
            "variant: {}",
            self.variant.map_or("(none recorded)", Variant::name)
        )?;
        writeln!(f, "namespaces:")?;
        for (ns, exists) in &self.namespaces {
            writeln!(
                f,
                "  {ns:<36} {}",
                if *exists { "present" } else { "missing" }
            )?;
        }
        writeln!(f, "pods:")?;
        for pod in &self.pods {
            let name = pod.full_name();
            writeln!(
                f,
                "  {name:<44} {:<13} {:<15} netns {}",
                pod.ip,
                pod.host_if,
                pod.netns()
            )?;
        }
        writeln!(
            f,
            "state file: {}",
            self.state_file.unwrap_or(match self.variant {
                Some(Variant::Kubenet) => "(none: kubenet has no Azure CNI state file)",
                _ => "(not written)",
            })
        )?;
        writeln!(
            f,
            "nat rules: {}",
            self.nat_rules.unwrap_or("(not written)")
        )?;
        writeln!(
            f,
            "kubeconfig: {} (fake API server http://127.0.0.1:{} in {})",
            self.kubeconfig.unwrap_or("(not written)"),
            api::PORT,
            api::NETNS
        )?;
        writeln!(f, "servers:")?;
        for s in self.servers.iter().chain([&self.kube_api]) {
            let what = match s.server {
                Server::Tcp(port) => format!("tcp/{port}"),
                Server::Udp(port) => format!("udp/{port}"),
                Server::None => "-".to_owned(),
            };
            let pid = s.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
            let alive = if s.alive { "alive" } else { "not running" };
            writeln!(f, "  {:<36} {what:<7} pid {pid:<8} {alive}", s.netns)?;
        }
        Ok(())
    }
}
