//! Kubernetes services (`--svc`): a service → the addresses to trace, from two sources tried
//! in order: the node's own rules (kube-proxy writes every service into them, iptables and
//! nftables modes: [`kube_proxy`]), then the Kubernetes API ([`api`]: the Service and its
//! `EndpointSlice`s); and the followed service moved to its new addresses when the rules
//! change ([`follow`]).
//!
//! The rules are the node's truth (what DNAT will do here) and need no credentials; the API
//! is asked when the rules do not hold the service (no kube-proxy, or a service without
//! endpoints, which kube-proxy's iptables mode writes into the filter table only).

pub mod api;
pub mod follow;
pub mod kube_proxy;

use std::collections::BTreeMap;

pub use kube_proxy::{Endpoint, Front, FrontKind, Service, services};

use crate::{resolve::api::KubeApi, rules::Ruleset, util::safe};

/// A service found, and how.
#[derive(Clone, Debug)]
pub struct Found {
    pub service: Service,
    /// `the node's nat rules (…)`, `the Kubernetes API URL`.
    pub via: String,
    /// One line per source tried before, with why it did not find the service.
    pub fallbacks: Vec<String>,
}

/// Why no source could resolve the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A source could be read and does not hold the service (exit 2).
    #[error(
        "service {} not found: {}; services in namespace {}: {}",
        safe(label),
        lines.join("; "),
        safe(namespace),
        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
    )]
    NotFound {
        label: String,
        namespace: String,
        /// The names of the services of that namespace the sources know.
        known: Vec<String>,
        lines: Vec<String>,
    },
    /// No source could be read.
    #[error(
        "cannot resolve service {}: {}; run as root on the node (pktrace reads kube-proxy's \
         rules with iptables-save and nft) or give pktrace the API: --kubeconfig PATH; or \
         trace the addresses with --pod-ip IP,IP",
        safe(label),
        lines.join("; ")
    )]
    Unresolved { label: String, lines: Vec<String> },
}

impl ServiceError {
    /// True when the user asked for a service that is not there (exit 2).
    #[must_use]
    pub const fn is_usage(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }
}

/// The rules as read, or why they could not be.
pub type Rules<'a> = Result<&'a Ruleset, String>;

/// Finds service `namespace/name` in `rules`, else through `api`.
///
/// # Errors
/// [`ServiceError`]: not found (with the services of the namespace), or no source readable.
pub fn resolve(
    rules: Rules<'_>,
    api: Option<&KubeApi>,
    namespace: &str,
    name: &str,
) -> Result<Found, ServiceError> {
    let label = format!("{namespace}/{name}");
    let mut lines = Vec::new();
    let mut known: Vec<String> = Vec::new();
    let mut any_read = false;
    match rules {
        Ok(rules) => {
            any_read = true;
            let all = services(rules);
            if let Some(service) = all.get(&label) {
                return Ok(Found {
                    service: service.clone(),
                    via: format!("the node's nat rules ({})", rules.describe()),
                    fallbacks: Vec::new(),
                });
            }
            known.extend(names_in(&all, namespace));
            lines.push(format!(
                "the node's nat rules: no kube-proxy rule names it ({} services)",
                all.len()
            ));
        }
        Err(e) => lines.push(format!("the node's nat rules: {e}")),
    }
    if let Some(api) = api {
        match api::resolve(api, namespace, name) {
            Ok((service, server)) => {
                return Ok(Found {
                    service,
                    via: format!("the Kubernetes API {server}"),
                    fallbacks: lines,
                });
            }
            Err(api::ApiMiss::Absent { line, names }) => {
                any_read = true;
                known.extend(names);
                lines.push(line);
            }
            Err(api::ApiMiss::Unavailable(line)) => lines.push(line),
        }
    }
    if !any_read {
        return Err(ServiceError::Unresolved { label, lines });
    }
    known.sort();
    known.dedup();
    Err(ServiceError::NotFound {
        label,
        namespace: namespace.to_owned(),
        known,
        lines,
    })
}

/// The names of the services of `namespace` in `all`.
fn names_in(all: &BTreeMap<String, Service>, namespace: &str) -> Vec<String> {
    all.keys()
        .filter_map(|l| l.split_once('/'))
        .filter(|(ns, _)| *ns == namespace)
        .map(|(_, n)| n.to_owned())
        .collect()
}

/// The start-up line's description: `cluster IP 10.0.159.58:80/tcp, …; endpoints
/// 10.13.76.7:80 (KUBE-SEP-…), …`.
#[must_use]
pub fn describe(s: &Service) -> String {
    let fronts: Vec<String> = s.fronts.iter().map(front_text).collect();
    let endpoints: Vec<String> = s
        .endpoints
        .iter()
        .map(|e| {
            let port = e.port.map(|p| format!(":{p}")).unwrap_or_default();
            match &e.rule {
                Some(rule) => format!("{}{port} ({})", e.addr, safe(rule)),
                None => format!("{}{port}", e.addr),
            }
        })
        .collect();
    format!(
        "{}; endpoints {}",
        if fronts.is_empty() {
            "no front address".to_owned()
        } else {
            fronts.join(", ")
        },
        if endpoints.is_empty() {
            "none".to_owned()
        } else {
            endpoints.join(", ")
        }
    )
}

fn front_text(f: &Front) -> String {
    let proto = match f.proto {
        6 => "tcp".to_owned(),
        17 => "udp".to_owned(),
        132 => "sctp".to_owned(),
        0 => String::new(),
        p => p.to_string(),
    };
    let port = f.port.map(|p| format!(":{p}")).unwrap_or_default();
    let slash = if proto.is_empty() { "" } else { "/" };
    match f.addr {
        Some(a) => format!("{} {a}{port}{slash}{proto}", f.kind.as_str()),
        None => format!(
            "{} {}{slash}{proto}",
            f.kind.as_str(),
            port.trim_start_matches(':')
        ),
    }
}

#[cfg(test)]
mod tests;
