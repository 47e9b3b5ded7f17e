//! pktrace: trace a Kubernetes pod's packets hop by hop through the node's NAT.
#![expect(dead_code, reason = "modules are being filled in")]

mod attach;
mod btf;
mod cli;
mod collect;
mod config;
mod explain;
mod journey;
mod output;
mod resolve;
mod summary;

fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
