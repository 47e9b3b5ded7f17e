//! Pod → addresses, from three sources tried in order: the Azure CNI state file
//! ([`state_file`]), the container runtime through crictl ([`cri`]), then the Kubernetes API
//! ([`api`]). The first that finds the pod wins; each that failed is one line (`state file
//! PATH: not found`, `crictl: not installed`, `kubernetes API URL: 401 Unauthorized`), printed
//! when a later one succeeds and listed in the error when none does.
//!
//! [`resolve`] is a plain function of its [`Sources`]: call it again to re-resolve a pod that
//! was recreated.

pub mod api;
pub mod cri;
pub mod state_file;

use std::path::{Path, PathBuf};

pub use self::state_file::{PodTarget, StateFileError};
use crate::util::safe;

/// Where pods are looked up.
#[derive(Clone, Debug)]
pub struct Sources {
    /// The Azure CNI state file (`--state-file`).
    pub state_file: PathBuf,
    /// The container runtime; `None` skips it.
    pub cri: Option<cri::Crictl>,
    /// The Kubernetes API; `None` skips it.
    pub api: Option<api::KubeApi>,
}

impl Sources {
    /// Every source, as this node and the environment configure them.
    #[must_use]
    pub fn for_node(state_file: &Path, kubeconfig: Option<&Path>) -> Self {
        Self {
            state_file: state_file.to_owned(),
            cri: Some(cri::Crictl::from_env()),
            api: Some(api::KubeApi::from_env(kubeconfig)),
        }
    }
}

/// A pod found, and how.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub pod: PodTarget,
    /// The source that found it: `the state file PATH`, `crictl`, `the Kubernetes API URL`.
    pub via: String,
    /// One line per source tried before, with why it failed.
    pub fallbacks: Vec<String>,
}

/// How bad a source's failure is for the question "where is the pod?"; the worst one decides
/// the final error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// The source could not be asked (missing, unreachable, not allowed).
    Unavailable,
    /// The source says there is no such pod (here).
    Absent,
    /// The pod exists but has no address yet.
    NotReady,
}

/// One source's failure.
#[derive(Debug)]
struct Failure {
    line: String,
    kind: Kind,
    /// The "not found" details (pods of the namespace, close names), when the source lists
    /// pods.
    detail: Option<Box<state_file::NotFound>>,
}

/// Why no source could resolve the pod.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Some source says the pod does not exist here (exit 2).
    #[error("{}", absent_message(detail.as_deref(), label, lines))]
    NotFound {
        label: String,
        detail: Option<Box<state_file::NotFound>>,
        /// Every source's line.
        lines: Vec<String>,
    },
    /// The pod exists but has no address yet.
    #[error(
        "pod {} has no IP address yet: {}; is it still starting? try again once it runs, or \
         use --pod-ip IP",
        safe(label), lines.join("; ")
    )]
    NotReady { label: String, lines: Vec<String> },
    /// The pod runs on another node.
    #[error(transparent)]
    OtherNode(api::KubeError),
    /// No source could be asked.
    #[error(
        "cannot resolve pod {}: {}; use --pod-ip IP to skip pod resolution (kubectl get pod \
         -o wide shows it), or give pktrace a source: --state-file PATH, crictl (in PATH or \
         ${}, with /etc/crictl.yaml or a runtime socket), --kubeconfig PATH",
        safe(label), lines.join("; "), cri::CRICTL_ENV
    )]
    Unresolved { label: String, lines: Vec<String> },
}

impl ResolveError {
    /// True when the user asked for a pod that is not there (exit 2); false for a problem of
    /// the node or a pod elsewhere (exit 1).
    #[must_use]
    pub const fn is_usage(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }
}

fn absent_message(detail: Option<&state_file::NotFound>, label: &str, lines: &[String]) -> String {
    match detail {
        // The state file's or crictl's message (the pods of the namespace, "did you mean"),
        // then what the other sources said.
        Some(nf) => format!(
            "{}; sources: {}",
            state_file::not_found_message(nf),
            lines.join("; ")
        ),
        None => format!(
            "pod {} not found: {}; check the name and namespace (kubectl get pods -A | grep \
             NAME)",
            safe(label),
            lines.join("; ")
        ),
    }
}

/// Finds pod `namespace/name`: the state file, then crictl, then the Kubernetes API.
///
/// # Errors
/// [`ResolveError`]: every source failed; the error lists them all.
pub fn resolve(sources: &Sources, namespace: &str, name: &str) -> Result<Resolved, ResolveError> {
    let label = format!("{namespace}/{name}");
    let mut failures: Vec<Failure> = Vec::new();

    let path = &sources.state_file;
    match state_file::resolve_pod(path, namespace, name) {
        Ok(pod) => {
            return Ok(found(
                pod,
                format!("the state file {}", path.display()),
                failures,
            ));
        }
        Err(e) => failures.push(state_file_failure(path, e)),
    }
    if let Some(crictl) = &sources.cri {
        match crictl.resolve(namespace, name) {
            Ok(pod) => return Ok(found(pod, "crictl".into(), failures)),
            Err(e) => failures.push(cri_failure(e)),
        }
    }
    if let Some(api) = &sources.api {
        match api.resolve(namespace, name) {
            Ok((pod, server)) => {
                return Ok(found(pod, format!("the Kubernetes API {server}"), failures));
            }
            Err(e @ api::KubeError::OtherNode { .. }) => return Err(ResolveError::OtherNode(e)),
            Err(e) => failures.push(kube_failure(e)),
        }
    }
    Err(final_error(label, failures))
}

fn found(pod: PodTarget, via: String, failures: Vec<Failure>) -> Resolved {
    Resolved {
        pod,
        via,
        fallbacks: failures.into_iter().map(|f| f.line).collect(),
    }
}

fn final_error(label: String, failures: Vec<Failure>) -> ResolveError {
    let worst = failures.iter().map(|f| f.kind).max();
    let lines: Vec<String> = failures.iter().map(|f| f.line.clone()).collect();
    match worst {
        Some(Kind::NotReady) => ResolveError::NotReady { label, lines },
        Some(Kind::Absent) => ResolveError::NotFound {
            label,
            detail: best_detail(failures),
            lines,
        },
        _ => ResolveError::Unresolved { label, lines },
    }
}

/// The "not found" details that help most, whichever source listed them: close names,
/// else a pod of that name in another namespace, else the pods of the namespace, else the
/// first source's (in the order asked).
fn best_detail(failures: Vec<Failure>) -> Option<Box<state_file::NotFound>> {
    let details: Vec<Box<state_file::NotFound>> =
        failures.into_iter().filter_map(|f| f.detail).collect();
    let rank = |d: &state_file::NotFound| {
        if !d.suggestions.is_empty() {
            0
        } else if !d.other_namespaces.is_empty() {
            1
        } else if !d.in_namespace.is_empty() {
            2
        } else {
            3
        }
    };
    // `min_by_key` keeps the first of equals: the earlier source wins ties.
    details.into_iter().min_by_key(|d| rank(d))
}

fn state_file_failure(path: &Path, e: StateFileError) -> Failure {
    let kind = match &e {
        StateFileError::PodNotFound(_) => Kind::Absent,
        StateFileError::NoAddress { .. } => Kind::NotReady,
        _ => Kind::Unavailable,
    };
    let line = format!("state file {}: {}", path.display(), e.brief());
    let detail = match e {
        StateFileError::PodNotFound(nf) => Some(nf),
        _ => None,
    };
    Failure { line, kind, detail }
}

fn cri_failure(e: cri::CriError) -> Failure {
    let kind = match &e {
        cri::CriError::PodNotFound { .. } => Kind::Absent,
        cri::CriError::NotReady { .. }
        | cri::CriError::NoAddress { .. }
        | cri::CriError::HostNetwork { .. } => Kind::NotReady,
        _ => Kind::Unavailable,
    };
    let line = format!("crictl: {e}");
    let detail = match e {
        cri::CriError::PodNotFound { detail, .. } => Some(detail),
        _ => None,
    };
    Failure { line, kind, detail }
}

fn kube_failure(e: api::KubeError) -> Failure {
    let kind = match &e {
        api::KubeError::NotFound { .. } => Kind::Absent,
        api::KubeError::Unscheduled { .. } | api::KubeError::NoAddress { .. } => Kind::NotReady,
        _ => Kind::Unavailable,
    };
    let line = match &e {
        api::KubeError::NoConfig { .. } | api::KubeError::Config { .. } => {
            format!("kubernetes API: {e}")
        }
        _ => format!("kubernetes API {e}"),
    };
    let detail = match e {
        api::KubeError::NotFound { detail, .. } => detail,
        _ => None,
    };
    Failure { line, kind, detail }
}

#[cfg(test)]
mod tests;
