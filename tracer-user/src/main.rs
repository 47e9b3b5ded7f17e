//! `pktrace`: trace a Kubernetes pod's packets hop by hop through the node's NAT.
//!
//! The binary parses the command line and maps results to exit codes; the work is in the
//! `tracer_user` library ([`run::run`], [`merge::run`], [`generate::generate`]).

use std::{io::IsTerminal as _, process::ExitCode};

use clap::Parser as _;
use tracer_user::{cli, config, generate, merge, run};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Some(what) = cli.generate {
        return finish_output(generate::generate(what, &mut std::io::stdout().lock()));
    }
    if let Some(cli::Command::Merge(args)) = cli.command {
        let options = merge::Options {
            inputs: args.inputs,
            uplinks: args.uplink,
            max_delay: args.max_delay,
        };
        return match merge::run(&options, &mut std::io::stdout().lock()) {
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
            tracer_user::diag::line(e);
            return ExitCode::from(2);
        }
    };
    match run::run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if e.is_usage() { 2 } else { 1 };
            tracer_user::diag::line(format_args!("{:#}", anyhow::Error::new(e)));
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
            tracer_user::diag::line(format_args!("writing the output: {e}"));
            ExitCode::from(1)
        }
    }
}
