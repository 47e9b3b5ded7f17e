//! `cargo xtask`: setup, the lab, the demo and the test tiers (see the `xtask` library).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Result;
use clap::{ArgGroup, Parser, Subcommand};
use xtask::{demo::DemoOptions, lab, runner};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "pktrace's task runner", version)]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the packages, nightly toolchain and bpf-linker that pktrace needs (idempotent).
    Setup,
    /// The lab: a simulated AKS node in `pkt-*` network namespaces.
    Lab {
        #[command(subcommand)]
        action: LabAction,
    },
    /// Build pktrace, bring the lab up and trace `default/ubuntu` while traffic flows.
    Demo {
        /// Leave the lab up afterwards.
        #[arg(long)]
        keep_lab: bool,
        /// Keep making traffic for at least this many seconds (default: 3 rounds).
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
        /// Skip `cargo xtask setup`.
        #[arg(long)]
        no_setup: bool,
    },
    /// Run the integration tests (root; lab namespaces). Extra arguments go to the harness.
    IntegrationTest {
        /// Arguments for the test harness (e.g. a test name filter), after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run every test tier: setup, `cargo test`, integration tests.
    Test,
}

#[derive(Subcommand)]
enum LabAction {
    /// Bring the lab up (does nothing if it is up and healthy; rebuilds a partial one).
    Up,
    /// Remove the lab: its processes, namespaces and state directory.
    Down,
    /// Show the lab's namespaces, pods, state file and servers.
    Status,
    /// Run a lab server (started by `lab up` inside a namespace).
    #[command(hide = true)]
    Serve {
        /// TCP port to serve.
        #[arg(long)]
        tcp: Option<u16>,
        /// UDP port to serve.
        #[arg(long)]
        udp: Option<u16>,
        /// File to append one line per client to.
        #[arg(long)]
        log: PathBuf,
        /// File to create once the sockets are bound.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Send one request to a lab server from the current namespace and print its reply.
    #[command(group(ArgGroup::new("target").required(true).args(["tcp", "udp"])))]
    Client {
        /// Connect over TCP to ADDR:PORT.
        #[arg(long, value_name = "ADDR:PORT")]
        tcp: Option<SocketAddr>,
        /// Send a UDP datagram to ADDR:PORT.
        #[arg(long, value_name = "ADDR:PORT")]
        udp: Option<SocketAddr>,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Task::Setup => xtask::setup(),
        Task::Lab { action } => run_lab(action),
        Task::Demo {
            keep_lab,
            seconds,
            no_setup,
        } => xtask::demo::demo(&DemoOptions {
            keep_lab,
            seconds,
            no_setup,
        }),
        Task::IntegrationTest { args } => runner::integration_test(&args),
        Task::Test => runner::test_all(),
    }
}

fn run_lab(action: LabAction) -> Result<()> {
    match action {
        LabAction::Up => lab::up(),
        LabAction::Down => lab::down(),
        LabAction::Status => {
            print!("{}", lab::status()?);
            Ok(())
        }
        LabAction::Serve {
            tcp,
            udp,
            log,
            ready_file,
        } => lab::serve::serve(tcp, udp, &log, ready_file.as_deref()),
        LabAction::Client {
            tcp,
            udp,
            timeout_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            let reply = match (tcp, udp) {
                (Some(addr), _) => lab::client::tcp(addr, timeout)?,
                (None, Some(addr)) => lab::client::udp(addr, timeout)?,
                (None, None) => unreachable!("clap requires --tcp or --udp"),
            };
            println!("{reply}");
            Ok(())
        }
    }
}
