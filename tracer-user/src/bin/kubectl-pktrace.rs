//! `kubectl pktrace POD [-n NS] [-- PKTRACE FLAGS]`: runs pktrace on the node of a pod.
//!
//! The command line, signals and exit codes; the plugin itself is
//! [`tracer_user::kubernetes::kubectl`] (its node lookup, pod and session).

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::Parser;
use tracer_user::kubernetes::{
    api::{self, Api},
    kubeconfig::{self, ClusterAccess, Kubeconfig},
    kubectl::{
        DEFAULT_IMAGE,
        session::{self, Plan, Stop},
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
  kubectl pktrace ubuntu                          10 s of pod ubuntu's packets on its node
  kubectl pktrace web-0 -n shop -- -f -o json     stream JSON lines until Ctrl-C
  kubectl pktrace web-0 --dry-run                 print the pod it would create

The pktrace pod is privileged, on the host's network and PID namespaces, pinned to the target's
node, and mounts /sys/fs/bpf, /sys/kernel/btf, /var/run/azure-vnet.json and the containerd
socket. It is deleted when pktrace ends and on Ctrl-C (pktrace then prints its summary).
Credentials: $KUBECONFIG or ~/.kube/config (token, client certificate or exec plugin).

Exit codes: pktrace's own (0 done, 1 runtime error, 2 usage error); 2 when the pod does not
exist, 1 for other failures.";

/// Run pktrace on the node of a pod and stream what it prints.
#[derive(Debug, Parser)]
#[command(name = "kubectl-pktrace", bin_name = "kubectl pktrace", version = VERSION)]
#[command(after_help = AFTER_HELP)]
struct Cli {
    /// The pod to trace.
    pod: String,

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

    /// Seconds to wait for the pktrace pod to start (image pull included).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    start_timeout: u64,

    /// Print the pod manifest instead of creating it.
    #[arg(long)]
    dry_run: bool,

    /// pktrace's flags, after `--` (e.g. `-- -f -o json`).
    #[arg(last = true, value_name = "PKTRACE FLAGS")]
    pktrace_args: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        pod: cli.pod,
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
        start_timeout: Duration::from_secs(cli.start_timeout),
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
    eprintln!("kubectl-pktrace: {err:#}");
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
