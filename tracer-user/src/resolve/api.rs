//! Pod → addresses through the Kubernetes API: `GET /api/v1/namespaces/NS/pods/NAME`, then
//! `status.podIPs` and `spec.nodeName` / `status.hostIP` (is it on this node?).
//!
//! Credentials, first found wins: `--kubeconfig`, `$KUBECONFIG`, the kubelet's kubeconfig on
//! AKS nodes (`/var/lib/kubelet/kubeconfig`, `/etc/kubernetes/kubelet.conf`), `~/.kube/config`,
//! then the pod's service account when pktrace runs in a pod. The client is the one
//! `kubectl-pktrace` uses ([`crate::kubernetes`]); every call ends within [`CALL_TIMEOUT`], name
//! resolution and connecting included, so a server that is down, unknown or black-holed
//! costs seconds, never a hang.

use std::{
    ffi::OsString,
    fmt::Write as _,
    net::IpAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;

use super::{PodTarget, state_file};
use crate::{
    kubernetes::{
        api::{Api, ApiError},
        kubeconfig::{ClusterAccess, Kubeconfig, KubeconfigError},
    },
    util::safe,
};

/// The kubelet's kubeconfigs on AKS (and kubeadm) nodes.
pub const KUBELET_KUBECONFIGS: [&str; 2] = [
    "/var/lib/kubelet/kubeconfig",
    "/etc/kubernetes/kubelet.conf",
];
/// A pod's service account (in-cluster credentials).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Limit of each API call, connecting and name resolution included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the Kubernetes API could not resolve a pod; shown after `kubernetes API `.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("no credentials: none of {tried} exists and pktrace is not in a pod")]
    NoConfig { tried: String },
    #[error("kubeconfig {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("{server}: {reason}")]
    Call { server: String, reason: String },
    #[error("{server}: pod {} does not exist (404)", safe(label))]
    NotFound {
        server: String,
        label: String,
        /// The pods of the namespace on this node and close names, when the API lists them.
        detail: Option<Box<state_file::NotFound>>,
    },
    #[error(
        "{server}: pod {} is not scheduled on a node yet ({phase})",
        safe(label)
    )]
    Unscheduled {
        server: String,
        label: String,
        phase: String,
    },
    #[error("{server}: pod {} has no IP address yet ({phase})", safe(label))]
    NoAddress {
        server: String,
        label: String,
        phase: String,
    },
    #[error(
        "pod {} runs on node {}, this is {}: run pktrace there or use `kubectl pktrace {} -n {}`",
        safe(label),
        safe(node),
        safe(here),
        safe(name),
        safe(namespace)
    )]
    OtherNode {
        label: String,
        node: String,
        here: String,
        namespace: String,
        name: String,
    },
}

/// This node, to tell whether a pod runs here.
#[derive(Clone, Debug, Default)]
pub struct ThisNode {
    /// `$NODE_NAME` (set from the downward API when pktrace runs in a pod).
    pub name: Option<String>,
    /// The host name (AKS node names are host names).
    pub hostname: String,
    /// Addresses of this network namespace (a pod's `status.hostIP` is one of them).
    pub addrs: Vec<IpAddr>,
}

impl ThisNode {
    /// This node as the environment describes it.
    #[must_use]
    pub fn detect() -> Self {
        Self {
            name: std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
            addrs: crate::kernel::host::local_addrs(),
        }
    }

    /// Whether a pod on node `node_name` with host addresses `host_ips` runs here.
    fn is_here(&self, node_name: &str, host_ips: &[IpAddr]) -> bool {
        if let Some(name) = &self.name {
            return name == node_name;
        }
        if !host_ips.is_empty() {
            return host_ips.iter().any(|ip| self.addrs.contains(ip));
        }
        let short = |s: &str| s.split('.').next().unwrap_or("").to_ascii_lowercase();
        !self.hostname.is_empty() && short(&self.hostname) == short(node_name)
    }

    fn describe(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None if !self.hostname.is_empty() => self.hostname.clone(),
            None => "this node".into(),
        }
    }
}

/// Where to find the API and how to log in.
#[derive(Clone, Debug, Default)]
pub struct KubeApi {
    /// `--kubeconfig`.
    pub explicit: Option<PathBuf>,
    /// `$KUBECONFIG` (a `:`-separated list).
    pub env: Option<OsString>,
    /// The kubelet's kubeconfigs, first existing one used.
    pub kubelet: Vec<PathBuf>,
    /// `~/.kube/config`.
    pub home: Option<PathBuf>,
    /// `$KUBERNETES_SERVICE_HOST` and `_PORT` (in a pod).
    pub in_cluster: Option<(String, String)>,
    /// The service account's `token` and `ca.crt`.
    pub service_account: PathBuf,
    /// Limit of each call.
    pub timeout: Duration,
    pub node: ThisNode,
}

impl KubeApi {
    /// The usual places, `--kubeconfig` first.
    #[must_use]
    pub fn from_env(explicit: Option<&Path>) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Self {
            explicit: explicit.map(Path::to_owned),
            env: std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()),
            kubelet: KUBELET_KUBECONFIGS.iter().map(PathBuf::from).collect(),
            home: std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config")),
            in_cluster: var("KUBERNETES_SERVICE_HOST").zip(var("KUBERNETES_SERVICE_PORT")),
            service_account: PathBuf::from(SERVICE_ACCOUNT_DIR),
            timeout: CALL_TIMEOUT,
            node: ThisNode::detect(),
        }
    }

    /// The server's URL (for messages) and how to reach it, from the first source there is.
    ///
    /// # Errors
    /// No source, or the one found is unusable.
    pub fn access(&self) -> Result<ClusterAccess, KubeError> {
        let from_files = |paths: &[PathBuf], shown: String| {
            Kubeconfig::load(paths)
                .and_then(|k| k.access(None))
                .map_err(|e| KubeError::Config {
                    path: shown,
                    reason: config_reason(&e),
                })
        };
        if let Some(path) = &self.explicit {
            return from_files(std::slice::from_ref(path), path.display().to_string());
        }
        if let Some(list) = &self.env {
            let paths: Vec<PathBuf> = std::env::split_paths(list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            let shown = format!("$KUBECONFIG ({})", list.to_string_lossy());
            return from_files(&paths, shown);
        }
        let files = self.kubelet.iter().chain(&self.home);
        if let Some(path) = files.clone().find(|p| p.exists()) {
            return from_files(std::slice::from_ref(path), path.display().to_string());
        }
        let token = self.service_account.join("token");
        if let Some((host, port)) = &self.in_cluster
            && token.exists()
        {
            return self.in_cluster_access(host, port, &token);
        }
        let mut tried: Vec<String> = vec!["--kubeconfig".into(), "$KUBECONFIG".into()];
        tried.extend(files.map(|p| p.display().to_string()));
        Err(KubeError::NoConfig {
            tried: tried.join(", "),
        })
    }

    fn in_cluster_access(
        &self,
        host: &str,
        port: &str,
        token: &Path,
    ) -> Result<ClusterAccess, KubeError> {
        let failed = |e: std::io::Error, path: &Path| KubeError::Config {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let ca = self.service_account.join("ca.crt");
        Ok(ClusterAccess {
            server: format!("https://{host}:{port}"),
            ca_pem: Some(std::fs::read(&ca).map_err(|e| failed(e, &ca))?),
            token: Some(
                std::fs::read_to_string(token)
                    .map_err(|e| failed(e, token))?
                    .trim()
                    .to_owned(),
            ),
            ..ClusterAccess::default()
        })
    }

    /// Finds pod `namespace/name` and checks that it runs on this node; returns it and the
    /// server that answered.
    ///
    /// # Errors
    /// [`KubeError`]: no credentials, the call failed, or the pod is absent, not scheduled,
    /// without an address or on another node.
    pub fn resolve(&self, namespace: &str, name: &str) -> Result<(PodTarget, String), KubeError> {
        let access = self.access()?;
        let server = access.server.clone();
        let api = Api::new(&access, self.timeout, "pktrace").map_err(|e| KubeError::Call {
            server: server.clone(),
            reason: e.to_string(),
        })?;
        let label = format!("{namespace}/{name}");
        let pod = match api.get_pod(namespace, name) {
            Ok(pod) => pod,
            Err(e) if e.code() == Some(404) => {
                let detail = self.absent(&api, &server, namespace, name).map(Box::new);
                return Err(KubeError::NotFound {
                    server,
                    label,
                    detail,
                });
            }
            Err(e) => {
                return Err(KubeError::Call {
                    reason: call_reason(&e, self.timeout),
                    server,
                });
            }
        };
        let target = self.target(&pod, &server, namespace, name)?;
        Ok((target, server))
    }

    /// What to say about pod `namespace/name` the API does not know: the pods of that
    /// namespace on this node (close names among them) and the namespaces whose pod of that
    /// name runs here, as the state file and crictl say it. `None` when the API does not
    /// list pods to us (RBAC without `list`): the 404 alone is said then.
    fn absent(
        &self,
        api: &Api,
        server: &str,
        namespace: &str,
        name: &str,
    ) -> Option<state_file::NotFound> {
        let here = |pod: &Value| {
            let status = &pod["status"];
            let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
            !node.is_empty()
                && self
                    .node
                    .is_here(node, &addresses(&status["hostIPs"], &status["hostIP"]))
        };
        let as_target = |pod: &Value| {
            let meta = &pod["metadata"];
            Some(PodTarget {
                namespace: meta["namespace"].as_str()?.to_owned(),
                name: meta["name"].as_str()?.to_owned(),
                ips: Vec::new(),
                host_ifname: None,
            })
        };
        let mut all: Vec<PodTarget> = api
            .list_pods(Some(namespace), None)
            .ok()?
            .iter()
            .filter(|p| here(p))
            .filter_map(as_target)
            .filter(|p| p.namespace == namespace)
            .collect();
        // Best effort: listing every namespace may not be allowed where one namespace is.
        // Only names the API can hold are asked for (the selector goes into the URL as is).
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        let selector = format!("metadata.name={name}");
        let everywhere = (!name.is_empty() && name.chars().all(valid))
            .then(|| api.list_pods(None, Some(&selector)).ok())
            .flatten();
        if let Some(everywhere) = everywhere {
            all.extend(
                everywhere
                    .iter()
                    .filter(|p| p["metadata"]["name"] == name && here(p))
                    .filter_map(as_target)
                    .filter(|p| p.namespace != namespace),
            );
        }
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Some(state_file::not_found(
            &format!("the Kubernetes API {server}"),
            &all,
            namespace,
            name,
        ))
    }

    /// The pod's addresses from its API object, if it runs here.
    fn target(
        &self,
        pod: &Value,
        server: &str,
        namespace: &str,
        name: &str,
    ) -> Result<PodTarget, KubeError> {
        let label = format!("{namespace}/{name}");
        let status = &pod["status"];
        let phase = status["phase"]
            .as_str()
            .unwrap_or("phase unknown")
            .to_owned();
        let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
        if node.is_empty() {
            return Err(KubeError::Unscheduled {
                server: server.to_owned(),
                label,
                phase,
            });
        }
        let host_ips = addresses(&status["hostIPs"], &status["hostIP"]);
        if !self.node.is_here(node, &host_ips) {
            let mut here = self.node.describe();
            if self.node.name.is_none()
                && let Some(ip) = host_ips.first()
            {
                let _ = write!(here, " (no local address is {ip})");
            }
            return Err(KubeError::OtherNode {
                label,
                node: node.to_owned(),
                here,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        let ips = addresses(&status["podIPs"], &status["podIP"]);
        if ips.is_empty() {
            return Err(KubeError::NoAddress {
                server: server.to_owned(),
                label,
                phase,
            });
        }
        Ok(PodTarget {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ips,
            host_ifname: None,
        })
    }
}

/// Addresses of a `[{"ip": …}]` list (`podIPs`, `hostIPs`), else of the single field.
fn addresses(list: &Value, single: &Value) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    let listed = list.as_array().into_iter().flatten().map(|e| &e["ip"]);
    for ip in listed
        .chain(std::iter::once(single))
        .filter_map(|v| v.as_str()?.trim().parse().ok())
    {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// A kubeconfig error on one line, with its cause.
fn config_reason(e: &KubeconfigError) -> String {
    let mut s = match e {
        KubeconfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            return "not found".into();
        }
        other => other.to_string(),
    };
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let _ = write!(s, ": {inner}");
        src = inner.source();
    }
    safe(&s.replace('\n', " "))
}

/// An API failure in a few words: `401 Unauthorized: message`, `connection refused`, …
fn call_reason(e: &ApiError, timeout: Duration) -> String {
    let text = match e {
        ApiError::Status { code, message, .. } => {
            let phrase = ureq::http::StatusCode::from_u16(*code)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("");
            let mut s = format!("{code} {phrase}");
            if !message.is_empty() {
                let _ = write!(s, ": {message}");
            }
            s
        }
        ApiError::Transport { source, .. } => match source.as_ref() {
            ureq::Error::Timeout(t) => {
                let secs = timeout.as_secs();
                match t {
                    ureq::Timeout::Resolve => format!("host name not resolved within {secs} s"),
                    ureq::Timeout::Connect => format!("cannot connect within {secs} s"),
                    _ => format!("no answer within {secs} s"),
                }
            }
            ureq::Error::HostNotFound => "host not found".into(),
            ureq::Error::Io(io) => format!("cannot connect: {io}"),
            other => other.to_string(),
        },
        other => other.to_string(),
    };
    safe(&text.replace('\n', " "))
}

#[cfg(test)]
pub(crate) mod tests;
