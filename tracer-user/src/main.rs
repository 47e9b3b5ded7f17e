//! `pktrace`: trace a Kubernetes pod's packets step by step through the node's NAT.
//!
//! The binary parses the command line and maps results to exit codes; the work is in the
//! `tracer_user` library ([`run::run`], [`merge::run`], [`generate::generate`]). Every error
//! is one message on stderr, `pktrace: ` first ([`diag::error`]).

use std::{io::IsTerminal as _, process::ExitCode};

use tracer_user::{
    cli::{self, Parsed, Refusal},
    config, diag, generate, merge, run,
};

fn main() -> ExitCode {
    let argv: Vec<_> = std::env::args_os().collect();
    let cli = match cli::parse(&argv) {
        Ok(Parsed::Run(cli)) => *cli,
        Ok(Parsed::Generate(what)) => {
            return finish_output(generate::generate(what, &mut std::io::stdout().lock()));
        }
        Err(Refusal::Show(help)) => return finish_output(help.print()),
        Err(Refusal::Usage(message)) => {
            diag::error(message);
            return ExitCode::from(2);
        }
    };
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
                diag::error(format_args!("merge: {:#}", anyhow::Error::new(e)));
                ExitCode::from(code)
            }
        };
    }
    let cfg = match config::Config::from_args(cli.trace, std::io::stdout().is_terminal()) {
        Ok(cfg) => cfg,
        Err(e) => {
            diag::error(e);
            return ExitCode::from(2);
        }
    };
    match run::run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if e.is_usage() { 2 } else { 1 };
            diag::error(format_args!("{:#}", anyhow::Error::new(e)));
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
            diag::error(format_args!("writing the output: {e}"));
            ExitCode::from(1)
        }
    }
}
