//! `kubectl pktrace POD`: runs pktrace on the node of a pod (the `kubectl-pktrace` binary is
//! its command line).
//!
//! Finds the pod's node through the Kubernetes API ([`crate::kubernetes`]), starts pktrace there in
//! a short-lived privileged pod ([`pod_spec`], like `kubectl debug node/…`), streams its
//! output and deletes the pod when pktrace ends or on Ctrl-C ([`session`]).

pub mod pod_spec;
pub mod session;

#[cfg(test)]
mod tests;

/// The image when neither `--image` nor `$PKTRACE_IMAGE` names one: `deploy/Dockerfile` built
/// from `cargo xtask dist` and pushed under this name.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/pktrace/pktrace:", env!("CARGO_PKG_VERSION"));
