//! The Kubernetes API client shared by `pktrace` (pod resolution through the API) and
//! `kubectl-pktrace` ([`crate::kubectl`]): [`kubeconfig`] finds the server and credentials,
//! [`api`] makes the calls.

pub mod api;
#[cfg(test)]
pub mod fake_api;
pub mod kubeconfig;
