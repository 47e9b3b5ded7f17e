//! Pod → addresses through the container runtime (CRI), with `crictl` as AKS nodes have it:
//! `crictl pods --namespace ^NS$ -o json` lists the namespace's sandboxes, the newest ready one
//! named NAME is picked, and `crictl inspectp -o json ID` gives its addresses
//! (`status.network.ip` and `additionalIps`).
//!
//! crictl rather than a native CRI gRPC client: it needs no protobuf/gRPC stack in pktrace,
//! and on AKS it is installed and configured (`/etc/crictl.yaml`) next to containerd. The
//! runtime endpoint is crictl's own (its config file or `$CONTAINER_RUNTIME_ENDPOINT`), else
//! the first containerd / CRI-O / cri-dockerd socket that exists. Every call is bounded in
//! time and output size.
//!
//! The JSON is crictl's `protojson` rendering of the CRI messages (lowerCamelCase names, every
//! field present, int64 as strings); unknown fields are ignored, missing ones tolerated.

use std::{
    ffi::OsString,
    io::{self, Read as _},
    net::IpAddr,
    path::PathBuf,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::Deserialize;

use super::{PodTarget, state_file};
use crate::util::safe;

/// Environment variable naming the crictl to run (default: `crictl` from `PATH`).
pub const CRICTL_ENV: &str = "PKTRACE_CRICTL";
/// crictl's own configuration file, where AKS sets the runtime endpoint.
pub const CRICTL_CONFIG: &str = "/etc/crictl.yaml";
/// The sockets tried when crictl has no endpoint configured, in crictl's own order.
pub const RUNTIME_SOCKETS: [&str; 5] = [
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/crio/crio.sock",
    "/var/run/cri-dockerd.sock",
];
/// How long one crictl call may take (it is killed after that).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(4);
/// crictl's own connection time-out (`--timeout`), shorter than [`CALL_TIMEOUT`].
const CONNECT_TIMEOUT: &str = "2s";
/// Most bytes read from crictl's standard output (a namespace of a few hundred pods is a
/// few hundred kilobytes).
const MAX_OUTPUT: u64 = 16 << 20;
/// Most bytes of crictl's standard error kept for the message.
const MAX_STDERR: u64 = 4 << 10;

/// Why the container runtime could not resolve a pod; shown after `crictl: `.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("not installed (not in PATH; set {CRICTL_ENV} to its path)")]
    NotInstalled,
    #[error("cannot run {}: {err}", program.display())]
    Spawn { program: PathBuf, err: io::Error },
    #[error(
        "no runtime endpoint: neither {CRICTL_CONFIG}, $CONTAINER_RUNTIME_ENDPOINT nor a \
         socket ({}) exists",
        RUNTIME_SOCKETS.join(", ")
    )]
    NoEndpoint,
    #[error("`crictl {args}` did not answer within {} s", timeout.as_secs())]
    Timeout { args: String, timeout: Duration },
    #[error("`crictl {args}` failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("`crictl {args}` printed something that is not its JSON: {reason}")]
    Output { args: String, reason: String },
    #[error("no pod {} in the runtime", safe(label))]
    PodNotFound {
        label: String,
        /// What the "not found" message needs (the namespace's pods, close names).
        detail: Box<state_file::NotFound>,
    },
    #[error("pod {} has no ready sandbox (it is {state})", safe(label))]
    NotReady { label: String, state: String },
    #[error(
        "pod {} uses the host network: trace the node's address with --pod-ip",
        safe(label)
    )]
    HostNetwork { label: String },
    #[error("pod {} has no IP address yet", safe(label))]
    NoAddress { label: String },
}

/// How to reach the runtime through crictl.
#[derive(Clone, Debug)]
pub struct Crictl {
    /// The program (a bare name is looked up in `PATH`).
    pub program: PathBuf,
    /// crictl's config file: when it exists, crictl finds the endpoint itself.
    pub config: PathBuf,
    /// `$CONTAINER_RUNTIME_ENDPOINT` is set (crictl reads it).
    pub endpoint_env: bool,
    /// Sockets to try otherwise, in order.
    pub sockets: Vec<PathBuf>,
    /// Limit of each call.
    pub timeout: Duration,
}

impl Crictl {
    /// The node's crictl: `$PKTRACE_CRICTL` or `crictl`, its config, the runtime sockets.
    #[must_use]
    pub fn from_env() -> Self {
        let program = std::env::var_os(CRICTL_ENV)
            .filter(|p| !p.is_empty())
            .map_or_else(|| PathBuf::from("crictl"), PathBuf::from);
        Self {
            program,
            config: PathBuf::from(CRICTL_CONFIG),
            endpoint_env: std::env::var_os("CONTAINER_RUNTIME_ENDPOINT")
                .is_some_and(|v| !v.is_empty()),
            sockets: RUNTIME_SOCKETS.iter().map(PathBuf::from).collect(),
            timeout: CALL_TIMEOUT,
        }
    }

    /// Whether the program exists (a bare name: somewhere in `PATH`).
    fn installed(&self) -> bool {
        if self.program.components().count() > 1 {
            return self.program.exists();
        }
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|dir| dir.join(&self.program).is_file()))
    }

    /// The global flags: the endpoint when crictl has none configured, and its time-out.
    fn global_args(&self) -> Result<Vec<OsString>, CriError> {
        let mut args: Vec<OsString> = Vec::new();
        if !self.endpoint_env && !self.config.exists() {
            let socket = self
                .sockets
                .iter()
                .find(|s| s.exists())
                .ok_or(CriError::NoEndpoint)?;
            args.push("--runtime-endpoint".into());
            args.push(format!("unix://{}", socket.display()).into());
        }
        args.extend(["--timeout".into(), CONNECT_TIMEOUT.into()]);
        Ok(args)
    }

    /// Runs `crictl GLOBAL ARGS` and returns its standard output, killing it after the
    /// time-out.
    fn run(&self, args: &[&str]) -> Result<Vec<u8>, CriError> {
        if !self.installed() {
            return Err(CriError::NotInstalled);
        }
        let shown = args.join(" ");
        let mut cmd = Command::new(&self.program);
        cmd.args(self.global_args()?)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                CriError::NotInstalled
            } else {
                CriError::Spawn {
                    program: self.program.clone(),
                    err,
                }
            }
        })?;
        let stdout = child.stdout.take().map(|s| read_capped(s, MAX_OUTPUT));
        let stderr = child.stderr.take().map(|s| read_capped(s, MAX_STDERR));
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CriError::Timeout {
                args: shown,
                timeout: self.timeout,
            });
        };
        // The readers end with the pipes: crictl has exited (a child it left holding them
        // would keep them open: bounded by MAX_OUTPUT only, an accepted risk).
        let out = stdout.map(join).unwrap_or_default();
        let err = stderr.map(join).unwrap_or_default();
        if !status.success() {
            let text = String::from_utf8_lossy(&err);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(CriError::Failed {
                args: shown,
                status: status.to_string(),
                stderr: safe(last.trim()),
            });
        }
        Ok(out)
    }

    /// Finds pod `namespace/name` among the runtime's sandboxes.
    ///
    /// # Errors
    /// [`CriError`]: crictl missing, failing or slow, or the pod not there / not ready /
    /// without an address.
    pub fn resolve(&self, namespace: &str, name: &str) -> Result<PodTarget, CriError> {
        let label = format!("{namespace}/{name}");
        let ready_id = self.ready_sandbox(namespace, name, &label)?;
        let inspect_args = ["inspectp", "-o", "json", ready_id.as_str()];
        let out = self.run(&inspect_args)?;
        let inspected: Inspect = parse(&inspect_args, &out)?;
        let status = inspected.status;
        let network = status.network.unwrap_or_default();
        let mut ips: Vec<IpAddr> = Vec::new();
        let all = std::iter::once(network.ip.as_str())
            .chain(network.additional_ips.iter().map(|a| a.ip.as_str()));
        for ip in all.filter_map(|s| s.trim().parse::<IpAddr>().ok()) {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        if ips.is_empty() {
            let host = status
                .linux
                .and_then(|l| l.namespaces)
                .and_then(|n| n.options)
                .is_some_and(|o| o.network == "NODE");
            return Err(if host {
                CriError::HostNetwork { label }
            } else {
                CriError::NoAddress { label }
            });
        }
        Ok(PodTarget {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            ips,
            host_ifname: None,
        })
    }

    /// The id of the newest ready sandbox of pod `namespace/name` (`label`).
    fn ready_sandbox(&self, namespace: &str, name: &str, label: &str) -> Result<String, CriError> {
        let label = label.to_owned();
        let filter = format!("^{}$", regex_escape(namespace));
        let list_args = ["pods", "--namespace", &filter, "-o", "json"];
        let out = self.run(&list_args)?;
        let list: SandboxList = parse(&list_args, &out)?;
        let in_namespace: Vec<&Sandbox> = list
            .items
            .iter()
            .filter(|s| s.metadata.namespace == namespace)
            .collect();
        let mut named: Vec<&Sandbox> = in_namespace
            .iter()
            .copied()
            .filter(|s| s.metadata.name == name)
            .collect();
        if named.is_empty() {
            let pods: Vec<PodTarget> = in_namespace
                .iter()
                .map(|s| PodTarget {
                    namespace: s.metadata.namespace.clone(),
                    name: s.metadata.name.clone(),
                    ips: Vec::new(),
                    host_ifname: None,
                })
                .collect();
            let mut pods = pods;
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            pods.dedup_by(|a, b| a.name == b.name);
            return Err(CriError::PodNotFound {
                detail: Box::new(state_file::not_found("crictl", &pods, namespace, name)),
                label,
            });
        }
        // Newest first; a ready sandbox wins over older or stopped ones.
        named.sort_by_key(|s| std::cmp::Reverse(s.created_at.parse::<u64>().unwrap_or(0)));
        let Some(ready) = named.iter().find(|s| s.state == "SANDBOX_READY") else {
            return Err(CriError::NotReady {
                label,
                state: named[0].state.clone(),
            });
        };
        Ok(ready.id.clone())
    }
}

/// Reads up to `limit` bytes of `r` on a thread (so that a full pipe never blocks crictl),
/// then drains the rest.
fn read_capped(r: impl io::Read + Send + 'static, limit: u64) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut r = r;
        let mut buf = Vec::new();
        let _ = (&mut r).take(limit).read_to_end(&mut buf);
        let _ = io::copy(&mut r, &mut io::sink());
        buf
    })
}

fn join(h: thread::JoinHandle<Vec<u8>>) -> Vec<u8> {
    h.join().unwrap_or_default()
}

fn parse<'a, T: Deserialize<'a>>(args: &[&str], out: &'a [u8]) -> Result<T, CriError> {
    serde_json::from_slice(out).map_err(|e| CriError::Output {
        args: args.join(" "),
        reason: e.to_string(),
    })
}

/// `s` as a regular expression matching itself (crictl's filters are Go regexps).
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `crictl pods -o json`: a `ListPodSandboxResponse`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SandboxList {
    items: Vec<Sandbox>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Sandbox {
    id: String,
    metadata: Metadata,
    state: String,
    /// Nanoseconds since the epoch, as a string (protojson's int64).
    #[serde(deserialize_with = "string_or_number")]
    created_at: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Metadata {
    name: String,
    namespace: String,
}

/// `crictl inspectp -o json ID`: `{"status": PodSandboxStatus, "info": {…}}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Inspect {
    status: SandboxStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SandboxStatus {
    network: Option<Network>,
    linux: Option<Linux>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Network {
    ip: String,
    additional_ips: Vec<PodIp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PodIp {
    ip: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Linux {
    namespaces: Option<Namespaces>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Namespaces {
    options: Option<NamespaceOptions>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NamespaceOptions {
    /// `POD`, `NODE`, `CONTAINER` or `TARGET`.
    network: String,
}

/// protojson writes int64 as a string; accept a number too.
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Number(n) => n.to_string(),
        _ => String::new(),
    })
}

#[cfg(test)]
pub(super) mod tests;
