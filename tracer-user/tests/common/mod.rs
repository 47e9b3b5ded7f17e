//! Running the built `pktrace` binary in the tests of this directory.

use std::process::Command;

/// Runs pktrace with `args`; returns its exit code, stdout and stderr.
#[allow(dead_code, reason = "each test file uses what it needs")]
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_with(args, &[])
}

/// [`run`] with `env` set and `NO_COLOR` unset.
pub fn run_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pktrace"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NO_COLOR")
        .output()
        .expect("running pktrace");
    (
        out.status.code().expect("exited"),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}
