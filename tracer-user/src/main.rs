//! pktrace: trace a Kubernetes pod's packets hop by hop through the node's NAT.
//!
//! Where a packet enters, is joined and is printed: [`attach`] (kernel programs on tc and the
//! NAT hooks), [`collect`] (ring buffer → events), [`journey`] (events → one packet's
//! journey), [`explain`] (which iptables rule did each NAT step), [`output`] (text or JSON
//! lines), [`summary`] (latency percentiles on exit). [`run`] ties them together.
//!
//! Besides tracing: `pktrace merge` ([`merge`]: journeys across nodes from several nodes'
//! JSON lines) and the hidden `--generate` ([`generate`]: man pages, shell completions).

mod attach;
mod btf;
mod caps;
mod cli;
mod collect;
mod config;
mod conntrack;
mod explain;
mod follow;
mod generate;
mod journey;
#[expect(
    dead_code,
    reason = "shared with kubectl-pktrace; pktrace only reads pods (resolve::kube)"
)]
mod kube;
mod merge;
mod nat;
mod output;
mod resolve;
mod run;
mod summary;
mod sys;
#[cfg(test)]
mod test_support;

use std::{io::IsTerminal as _, process::ExitCode};

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Some(what) = cli.generate {
        return finish_output(generate::generate(what, &mut std::io::stdout().lock()));
    }
    if let Some(cli::Command::Merge(args)) = cli.command {
        return match merge::run(&args, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(merge::MergeError::Output(e)) => finish_output(Err(e)),
            Err(e) => {
                let code = if e.is_usage() { 2 } else { 1 };
                eprintln!("pktrace merge: {:#}", anyhow::Error::new(e));
                ExitCode::from(code)
            }
        };
    }
    let cfg = match config::Config::from_args(cli.trace, std::io::stdout().is_terminal()) {
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

/// Exit status after writing to stdout: a closed pipe (`| head`) is a clean exit.
fn finish_output(result: std::io::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pktrace: writing the output: {e}");
            ExitCode::from(1)
        }
    }
}
