//! pktrace: trace a Kubernetes pod's packets hop by hop through the node's NAT.
//!
//! Where a packet enters, is joined and is printed: [`attach`] (kernel programs on tc and the
//! NAT hooks), [`collect`] (ring buffer → events), [`journey`] (events → one packet's
//! journey), [`explain`] (which iptables rule did each NAT step), [`output`] (text or JSON
//! lines), [`summary`] (latency percentiles on exit). [`run`] ties them together.

mod attach;
mod btf;
mod cli;
mod collect;
mod config;
mod explain;
mod journey;
mod nat;
mod output;
mod resolve;
mod run;
mod summary;
mod sys;

use std::{io::IsTerminal as _, process::ExitCode};

use clap::Parser as _;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let cfg = match config::Config::from_args(args, std::io::stdout().is_terminal()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("pktrace: {e}");
            return ExitCode::from(2);
        }
    };
    match run::run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if e.is_usage() { 2 } else { 1 };
            eprintln!("pktrace: {:#}", anyhow::Error::new(e));
            ExitCode::from(code)
        }
    }
}
