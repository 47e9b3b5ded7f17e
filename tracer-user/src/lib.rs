//! pktrace: trace a Kubernetes pod's packets hop by hop through the node's NAT.
//!
//! The pipeline, one folder per stage: `attach` (the kernel object loaded) and `interfaces`
//! (where a packet enters: the interfaces and the tc programs on them), `collect` (ring buffer
//! → observations), `journey` (observations → one packet's journey: the join), [`explain`]
//! (the NAT steps' rules, a drop's why, per journey), `summary` (totals and latency
//! percentiles on exit), [`output`] (text, one line or JSON lines, and the pcapng of `-w`).
//! [`run`] ties them together.
//!
//! One folder per feature, each with its reading, joining and explaining: `nat` (the NAT
//! hooks: fentry, kprobe, netfilter, conntrack), [`drops`] (the drop programs attached, drops
//! named and decoded, and why one happened), [`rules`] (the node's iptables, nftables, ipset
//! rules read, modelled and replayed), [`services`] (Kubernetes services from kube-proxy's
//! rules or the API, for `--svc`), [`resolve`] (pod → addresses), [`kubernetes`] (the API
//! client, kubeconfig, and the `kubectl pktrace` plugin's library part), [`expr`] (the filter
//! expression), `follow` (interfaces and pods that change while tracing), `kernel` (BTF,
//! capabilities, raw bpf calls), [`util`] (helpers that import nothing of the crate).
//!
//! Besides tracing: `pktrace merge` ([`merge`]: journeys across nodes from several nodes'
//! JSON lines) and the hidden `--generate` ([`generate`]: man pages, shell completions).
//!
//! The binaries are thin: `pktrace` (`src/main.rs`) parses [`cli`], checks it into a
//! [`config`] and calls [`run`], [`merge`] or [`generate`]; `kubectl-pktrace`
//! (`src/bin/kubectl-pktrace.rs`) calls [`kubernetes::kubectl`]. The fuzz targets (`fuzz/`)
//! call [`rules`], [`explain`], [`drops`], [`expr`], [`resolve`] and [`util`]. Everything
//! else is private to the library.

mod attach;
pub mod cli;
mod collect;
pub mod config;
pub mod diag;
pub mod drops;
pub mod explain;
pub mod expr;
mod follow;
pub mod generate;
mod interfaces;
mod journey;
mod kernel;
pub mod kubernetes;
pub mod merge;
mod nat;
pub mod output;
pub mod resolve;
pub mod rules;
pub mod run;
pub mod services;
mod summary;
#[cfg(test)]
mod test_support;
pub mod traced;
pub mod util;
