//! Running the node's tools (`iptables-save`, `ipset`, `nft`): pktrace's own first, then the
//! node's through `/proc/1/root` when pktrace runs in a container without them.

use std::{
    io,
    process::{Command, Stdio},
};

use super::{ExplainError, host};

/// What a tool printed.
pub struct Output {
    pub stdout: String,
}

/// Runs `program args…`, the local one first, then the node's.
///
/// # Errors
/// Not installed (neither here nor on the node), could not start, or failed.
pub fn run(program: &str, args: &[&str]) -> Result<Output, ExplainError> {
    let local = std::iter::once((program.to_owned(), Command::new(program)));
    let on_host = host::command(program);
    let mut failure = None;
    for (name, mut cmd) in local.chain(on_host) {
        let command = format!("{name} {}", args.join(" "));
        let out = match cmd.args(args).stdin(Stdio::null()).output() {
            Ok(out) => out,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                failure.get_or_insert(ExplainError::Spawn { command, err });
                continue;
            }
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stderr = crate::util::safe(stderr.lines().next().unwrap_or("").trim());
            failure.get_or_insert(ExplainError::Failed {
                command,
                status: out.status.to_string(),
                stderr,
            });
            continue;
        }
        return Ok(Output {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        });
    }
    Err(failure.unwrap_or_else(|| ExplainError::NotInstalled {
        tried: program.to_owned(),
    }))
}
