//! Kubernetes: the API client shared by `pktrace` (pods and services through the API:
//! `resolve::api`, `services::api`) and `kubectl-pktrace`: [`kubeconfig`] finds the server
//! and credentials, [`api`] makes the calls; [`kubectl`] is the plugin's library part (its
//! pod on the node and the session).

pub mod api;
#[cfg(test)]
pub mod fake_api;
pub mod kubeconfig;
pub mod kubectl;
