//! pktrace: trace a Kubernetes pod's packets hop by hop through the node's NAT.
//!
//! Where a packet enters, is joined and is printed: `attach` (kernel programs on tc and the
//! NAT hooks), `collect` (ring buffer → events), `journey` (events → one packet's
//! journey), [`explain`] (which iptables rule did each NAT step), `output` (text or JSON
//! lines), `summary` (latency percentiles on exit). [`run`] ties them together.
//!
//! Besides tracing: `pktrace merge` ([`merge`]: journeys across nodes from several nodes'
//! JSON lines) and the hidden `--generate` ([`generate`]: man pages, shell completions).
//!
//! The binaries are thin: `pktrace` (`src/main.rs`) parses [`cli`], checks it into a
//! [`config`] and calls [`run`], [`merge`] or [`generate`]; `kubectl-pktrace`
//! (`src/bin/kubectl-pktrace.rs`) calls [`kubectl`]. The fuzz targets (`fuzz/`) call
//! [`explain`], [`resolve`] and [`util`]. Everything else is private to the library.

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
mod journey;
mod kernel;
pub mod kube;
pub mod kubectl;
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
