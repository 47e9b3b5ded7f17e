//! `kubectl pktrace POD [-n NS] [-- PKTRACE FLAGS]`: runs pktrace on the node of a pod. The
//! pod may also be given as pktrace takes it (`--pod POD`), and durations are written as
//! pktrace's (`--start-timeout 2m`).
//!
//! The command line, signals and exit codes; the plugin itself is
//! [`tracer_user::kubernetes::kubectl`] (its node lookup, pod and session).

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::{CommandFactory as _, Parser, error::ErrorKind};
use tracer_user::{
    cli::{parse_duration, usage},
    diag,
    kubernetes::{
        api::{self, Api},
        kubeconfig::{self, ClusterAccess, Kubeconfig},
        kubectl::{
            DEFAULT_IMAGE,
            session::{self, Plan, Stop},
        },
    },
};

const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PKTRACE_GIT_COMMIT"),
    ")"
);

const AFTER_HELP: &str = "\
Examples:
  kubectl pktrace ubuntu                       10 s of pod ubuntu's packets
  kubectl pktrace --pod web-0 -n shop -- -f -o json
                                               stream JSON lines until Ctrl-C
  kubectl pktrace ubuntu -- --failures -f      its drops and unanswered
                                               connections, until Ctrl-C
  kubectl pktrace web-0 --dry-run              print the pod it would create

pktrace's own options and expression go to pktrace, after -- or mixed with the
plugin's (-n, --pod and --kubeconfig are the plugin's). The pktrace pod is privileged, on the
host's network and PID namespaces, pinned to the target's node, and mounts
/sys/fs/bpf, /sys/kernel/btf, /var/run/azure-vnet.json and the containerd
socket. It is deleted when pktrace ends and on Ctrl-C (pktrace then prints its
summary). Credentials: $KUBECONFIG or ~/.kube/config (token, client
certificate or exec plugin).

Exit status: pktrace's own (0 done, 1 runtime error, 2 usage error); 2 when the
pod does not exist or the command line is wrong, 1 for other failures.";

/// Run pktrace on the node of a pod and stream what it prints.
#[derive(Debug, Parser)]
#[command(name = "kubectl-pktrace", bin_name = "kubectl pktrace", version = VERSION)]
#[command(after_help = AFTER_HELP)]
struct Cli {
    /// The pod to trace (or --pod POD).
    #[arg(value_name = "POD", required_unless_present = "pod_flag")]
    #[arg(conflicts_with = "pod_flag")]
    pod: Option<String>,

    /// The pod to trace, as pktrace takes it.
    #[arg(long = "pod", value_name = "POD", id = "pod_flag")]
    pod_flag: Option<String>,

    /// Namespace of the pod (default: the context's, else `default`).
    #[arg(short = 'n', long)]
    namespace: Option<String>,

    /// Image holding pktrace (default: $`PKTRACE_IMAGE`, else the release image).
    #[arg(long)]
    image: Option<String>,

    /// Namespace to run the pktrace pod in (default: the pod's).
    #[arg(long, value_name = "NAMESPACE")]
    debug_namespace: Option<String>,

    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Kubeconfig context (default: the current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,

    /// Node to run on instead of the pod's (then the pod is not looked up).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,

    /// How long to wait for the pktrace pod to start, image pull included: 90s, 5m or a
    /// bare number of seconds.
    #[arg(long, value_name = "DURATION", default_value = "120s")]
    #[arg(value_parser = parse_duration)]
    start_timeout: Duration,

    /// Print the pod manifest instead of creating it.
    #[arg(long)]
    dry_run: bool,

    /// pktrace's options and expression, after `--` (e.g. `-- -f -o json`) or among the
    /// plugin's.
    #[arg(last = true, value_name = "PKTRACE FLAGS")]
    pktrace_args: Vec<String>,
}

/// The command line, or the exit code after help, the version or a usage error (said in
/// pktrace's words, with the fix).
fn parse() -> Result<Cli, ExitCode> {
    let argv = tracer_user::cli::plugin::pktrace_words_last(
        std::env::args_os().collect(),
        &Cli::command(),
        &tracer_user::cli::command(),
    );
    Cli::try_parse_from(argv).map_err(|err| match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => match err.print() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        },
        _ => {
            let text = usage::message(&err, &Cli::command(), usage::Program::Plugin);
            diag::error_of(env!("CARGO_BIN_NAME"), text);
            ExitCode::from(2)
        }
    })
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let paths = kubeconfig::paths(cli.kubeconfig.as_deref());
    let access = match Kubeconfig::load(&paths).and_then(|k| k.access(cli.context.as_deref())) {
        Ok(access) => access,
        // Printing a manifest for a given node needs no cluster.
        Err(_) if cli.dry_run && cli.node.is_some() => ClusterAccess::default(),
        Err(e) => return fail(&anyhow::Error::new(e), 1),
    };
    let api = match Api::new(&access, api::CALL_TIMEOUT, env!("CARGO_BIN_NAME")) {
        Ok(api) => Arc::new(api),
        Err(e) => return fail(&anyhow::Error::new(e), 1),
    };
    let namespace = cli
        .namespace
        .or(access.namespace)
        .unwrap_or_else(|| "default".into());
    let plan = Plan {
        pod: cli.pod.or(cli.pod_flag).unwrap_or_default(),
        node: cli.node,
        debug_namespace: cli.debug_namespace.unwrap_or_else(|| namespace.clone()),
        namespace,
        image: cli
            .image
            .or_else(|| {
                std::env::var("PKTRACE_IMAGE")
                    .ok()
                    .filter(|i| !i.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_IMAGE.into()),
        pktrace_args: cli.pktrace_args,
        start_timeout: cli.start_timeout,
        dry_run: cli.dry_run,
    };
    // After the kubeconfig (an exec plugin must not inherit blocked signals).
    let stop = Stop::default();
    if let Err(e) = stop_on_signals(stop.clone()) {
        return fail(&anyhow::Error::new(e).context("handling Ctrl-C"), 1);
    }
    match session::run(&plan, &api, &stop, &mut std::io::stdout().lock()) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = e.exit_code();
            fail(&anyhow::Error::new(e), code)
        }
    }
}

fn fail(err: &anyhow::Error, code: u8) -> ExitCode {
    diag::error_of(env!("CARGO_BIN_NAME"), format_args!("{err:#}"));
    ExitCode::from(code)
}

/// Blocks SIGINT and SIGTERM in every thread and waits for them in one: the first stops the
/// run (the pod is deleted; pktrace prints its summary), the second exits at once.
fn stop_on_signals(stop: Stop) -> std::io::Result<()> {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the calls have
    // no other preconditions.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        set
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                let mut signal = 0;
                // SAFETY: `set` is initialised and `signal` is a valid out pointer.
                if unsafe { libc::sigwait(&raw const set, &raw mut signal) } != 0 {
                    continue;
                }
                if stop.request() > 1 {
                    eprintln!(
                        "kubectl-pktrace: interrupted again: exiting; the pod is being deleted"
                    );
                    std::process::exit(130);
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubectl-pktrace").chain(args.iter().copied()))
    }

    #[test]
    fn the_plugin_takes_the_pod_and_durations_as_pktrace_does() {
        Cli::command().debug_assert();
        let c = parse(&["ubuntu", "--", "-f"]).unwrap();
        assert_eq!(
            (c.pod.as_deref(), c.pktrace_args.as_slice()),
            (Some("ubuntu"), &["-f".to_owned()][..])
        );
        assert_eq!(c.start_timeout, Duration::from_mins(2));
        let c = parse(&["--pod", "web-0", "-n", "shop", "--start-timeout", "2m"]).unwrap();
        assert_eq!(
            (c.pod_flag.as_deref(), c.namespace.as_deref()),
            (Some("web-0"), Some("shop"))
        );
        assert_eq!(c.start_timeout, Duration::from_mins(2));
        let c = parse(&["ubuntu", "--start-timeout", "30"]).unwrap();
        assert_eq!(
            c.start_timeout,
            Duration::from_secs(30),
            "bare seconds still work"
        );
        for bad in [
            &[][..],
            &["a", "--pod", "b"],
            &["a", "--start-timeout", "soon"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn usage_errors_say_where_options_go() {
        let err = parse(&["ubuntu", "--bogus"]).unwrap_err();
        let text = usage::message(&err, &Cli::command(), usage::Program::Plugin);
        assert!(
            text.contains("neither kubectl pktrace nor pktrace"),
            "{text}"
        );
        let err = parse(&["ubuntu", "--start-timeout", "0"]).unwrap_err();
        let text = usage::message(&err, &Cli::command(), usage::Program::Plugin);
        assert!(text.starts_with("--start-timeout: '0' is zero"), "{text}");
    }
}

#[cfg(test)]
mod order_tests {
    use std::ffi::OsString;

    use super::*;

    fn reordered(words: &[&str]) -> Vec<String> {
        let line = std::iter::once("kubectl-pktrace")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect();
        tracer_user::cli::plugin::pktrace_words_last(
            line,
            &Cli::command(),
            &tracer_user::cli::command(),
        )
        .into_iter()
        .skip(1)
        .map(|w| w.into_string().unwrap())
        .collect()
    }

    #[test]
    fn pktrace_options_and_the_expression_go_after_the_dashes() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["ubuntu"], &["ubuntu"]),
            (&["ubuntu", "--", "-f"], &["ubuntu", "--", "-f"]),
            (
                &[
                    "ubuntu",
                    "-f",
                    "--failures",
                    "-n",
                    "shop",
                    "-c",
                    "5",
                    "-o",
                    "json",
                ],
                &[
                    "ubuntu",
                    "-n",
                    "shop",
                    "--",
                    "-f",
                    "--failures",
                    "-c",
                    "5",
                    "-o",
                    "json",
                ],
            ),
            (
                &[
                    "--pod", "web-0", "udp", "port", "53", "-fv", "--", "-d", "2s",
                ],
                &[
                    "--pod", "web-0", "--", "udp", "port", "53", "-fv", "-d", "2s",
                ],
            ),
            (
                &[
                    "ubuntu",
                    "--image",
                    "-f",
                    "-i",
                    "eth0",
                    "--start-timeout",
                    "2m",
                ],
                &[
                    "ubuntu",
                    "--image",
                    "-f",
                    "--start-timeout",
                    "2m",
                    "--",
                    "-i",
                    "eth0",
                ],
            ),
            (
                &["ubuntu", "--kubeconfig", "k", "--bogus", "--output=line"],
                &[
                    "ubuntu",
                    "--kubeconfig",
                    "k",
                    "--bogus",
                    "--",
                    "--output=line",
                ],
            ),
        ];
        for (args, want) in cases {
            assert_eq!(reordered(args), *want, "{args:?}");
        }
    }
}
