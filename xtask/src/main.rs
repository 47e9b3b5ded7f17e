//! `cargo xtask`: the command line of every task (the `xtask` library and the crates it calls
//! run them).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Result;
use clap::{ArgGroup, Parser, Subcommand};
use pktrace_vm::arch::Arch;
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
    /// Run the integration tests in a qemu guest on a Debian kernel, once per NAT hook
    /// (TCG; the kernel comes from apt and is cached). Extra arguments go to the harness.
    VmTest {
        /// Kernel: a version (6.1.0-41-cloud-amd64, or from bookworm-backports
        /// 6.12.74+deb12-cloud-amd64), a .deb, a vmlinuz, or `backports` (the newest
        /// bookworm-backports cloud kernel) [default: the newest bookworm
        /// linux-image-6.1.0-*-cloud-amd64; with --arch arm64, of
        /// linux-image-6.1.0-*-cloud-arm64]. With --matrix: the cells to run (5.10, 6.1, 6.12;
        /// with --arch, of that architecture).
        #[arg(long, value_name = "FILE|VERSION")]
        kernel: Option<String>,
        /// Run the kernel matrix, one cell after the other: Debian's 5.10 (kprobe), 6.1
        /// (kprobe, fentry), 6.12 (netfilter) on `x86_64` and 6.1 (kprobe) on arm64; print one
        /// table of test × kernel × arch × hook and, with --full and no test filter, write the
        /// rows of the cells run into docs/compat.md.
        #[arg(long, conflicts_with = "hook")]
        matrix: bool,
        /// NAT hooks to run the tests with (pktrace --nat-hook; auto: pktrace chooses).
        #[arg(
            long,
            value_name = "HOOKS",
            value_delimiter = ',',
            default_value = "kprobe,fentry"
        )]
        hook: Vec<String>,
        /// VMs to run side by side, sharing the (hook, test binary) runs [default: one per
        /// CPU, as many as the memory holds].
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        jobs: usize,
        /// Kill a VM when one (hook, test binary) run in it takes more than this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = pktrace_vm::DEFAULT_TIMEOUT.as_secs())]
        timeout: u64,
        /// Guest architecture: `x86_64`, or arm64 (Debian's arm64 cloud kernel and tools, the
        /// aarch64 musl binaries, qemu-system-aarch64). With --matrix: the cells of that
        /// architecture only [default: `x86_64`; with --matrix, every cell].
        #[arg(long, value_name = "ARCH")]
        arch: Option<String>,
        /// Run the full set (every NAT-dependent test binary and the lockdown boot; with
        /// --matrix and no test filter, it writes docs/compat.md) instead of the smoke set
        /// (attach, one journey through DNAT and MASQUERADE per hook, one drop).
        #[arg(long)]
        full: bool,
        /// Arguments for the test harness (e.g. a test name filter), after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run every test tier: setup, `cargo test`, integration tests, VM tests.
    Test,
    /// Build pktrace and kubectl-pktrace as static musl binaries into target/dist, with man
    /// pages, shell completions and checksums.
    Dist {
        /// Architectures to build (`x86_64`, aarch64).
        #[arg(
            long,
            value_name = "ARCH",
            value_delimiter = ',',
            default_value = "x86_64,aarch64"
        )]
        arch: Vec<String>,
    },
    /// Validate the Kubernetes manifests (deploy/, kubectl-pktrace's pod) against the API
    /// schemas (kubernetes-validate; part of `cargo xtask test`).
    DeployCheck,
    /// Run the cargo-fuzz targets (nightly, libFuzzer) for a while each; fails on a finding.
    Fuzz {
        /// Targets to run [default: all: `parse_packet`, `packet_roundtrip`, `ring_record`,
        /// `state_file`, `iptables_save`, `expr_parse`, `drop_why`].
        targets: Vec<String>,
        /// Seconds per target.
        #[arg(long, value_name = "S", default_value_t = xtask::fuzz::CI_SECONDS)]
        seconds: u64,
    },
    /// Measure what tracing costs: throughput retention, per-hook cost, collector capacity,
    /// memory and start-up (root; namespaces `pkt-b*`); updates BENCHMARKS.md.
    Bench {
        /// One run per condition with 1 s streams (checks that the bench works; writes nothing).
        #[arg(long)]
        short: bool,
        /// Runs per condition [default: 5; --short: 1].
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100))]
        runs: Option<u64>,
        /// Seconds per stream [default: 3; --short: 1].
        #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=60))]
        seconds: Option<u64>,
        /// Print the tables without updating BENCHMARKS.md.
        #[arg(long)]
        no_write: bool,
        /// Measure only these phases, comma-separated: throughput, paired, hooks, micro,
        /// collector, startup, unpinned; variants and soak run only when named (implies
        /// --no-write).
        #[arg(long, value_name = "PHASES")]
        only: Option<String>,
        /// Another pktrace binary to measure side by side with this one, in the same rounds:
        /// per-hook cost under the streams (hooks), the tc program alone (micro), TCP beside the
        /// twin (paired), the collector's capacity (collector) and TCP retention pinned and
        /// unpinned (unpinned).
        #[arg(long, value_name = "PKTRACE")]
        baseline: Option<PathBuf>,
        /// A build of pktrace leaving one part of the traced path out, as NAME=PKTRACE
        /// (repeatable): `--only variants` measures each beside this one, under the streams.
        #[arg(long = "variant", value_name = "NAME=PKTRACE", value_parser = parse_bench_variant)]
        variants: Vec<pktrace_bench::Variant>,
        #[command(flatten)]
        soak: pktrace_bench::soak::SoakArgs,
    },
}

#[derive(Subcommand)]
enum LabAction {
    /// Bring the lab up (does nothing if it is up and healthy as that variant; rebuilds a
    /// partial one, or one of another variant).
    Up {
        /// How the node wires its pods: azure-bridge (Azure CNI bridge mode), azure-transparent
        /// (Azure CNI transparent mode, the AKS default), kubenet, calico (Azure CNI + Calico).
        #[arg(long, value_name = "VARIANT", default_value = "azure-bridge", value_parser = parse_variant)]
        variant: lab::Variant,
        /// Nodes: 2 adds `pkt-node2` (another subnet of the VNet, Azure CNI bridge mode) with
        /// a backend pod behind the ClusterIP of default/whereami-remote.
        #[arg(long, value_name = "N", default_value_t = 1)]
        nodes: u8,
        /// Make the node dual-stack (azure-bridge only): IPv6 pod addresses, service IPs and
        /// MASQUERADE by ip6tables, servers answering over IPv6 too; with --nodes 2, node 2
        /// and its backend pod get IPv6 addresses too.
        #[arg(long)]
        dual_stack: bool,
    },
    /// Remove the lab, whatever its variant: its processes, namespaces and state directory.
    Down,
    /// Show the lab's variant, namespaces, pods, state file and servers.
    Status,
    /// Add a pod to the running lab or delete one added before (as a CNI would).
    Pod {
        #[command(subcommand)]
        action: PodAction,
    },
    /// Run a lab server (started by `lab up` inside a namespace).
    #[command(hide = true)]
    Serve {
        /// TCP port to serve.
        #[arg(long)]
        tcp: Option<u16>,
        /// UDP port to serve.
        #[arg(long)]
        udp: Option<u16>,
        /// Address to bind (`0.0.0.0`, or `::` for IPv6 only).
        #[arg(long, default_value = "0.0.0.0")]
        bind: std::net::IpAddr,
        /// File to append one line per client to.
        #[arg(long)]
        log: PathBuf,
        /// File to create once the sockets are bound.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Run the lab's fake Kubernetes API server (started by `lab up` in the node namespace).
    #[command(hide = true)]
    ServeApi {
        /// Port on 127.0.0.1.
        #[arg(long)]
        port: u16,
        /// The pod table (JSON) to answer from.
        #[arg(long)]
        pods: PathBuf,
        /// File to create once listening.
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
        /// TCP: keep the connection open this many milliseconds after the reply, then close.
        #[arg(long, default_value_t = 0)]
        hold_ms: u64,
    },
}

#[derive(Subcommand)]
enum PodAction {
    /// Create pod default/NAME: namespace pkt-pod-NAME, a free pod IP, its azv veth, the
    /// state file entry.
    Add { name: String },
    /// Delete pod default/NAME (one made with `lab pod add`).
    Del { name: String },
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
        Task::VmTest {
            kernel,
            matrix,
            hook,
            jobs,
            timeout,
            arch,
            full,
            args,
        } => {
            let arch = arch.as_deref().map(Arch::parse).transpose()?;
            let options = pktrace_vm::VmOptions {
                kernel,
                hooks: hook,
                jobs,
                timeout: Duration::from_secs(timeout),
                test_args: args,
                suite: if full {
                    pktrace_vm::payload::Suite::Full
                } else {
                    pktrace_vm::payload::Suite::Smoke
                },
                arch: arch.unwrap_or_default(),
            };
            if matrix {
                pktrace_vm::matrix::run(&options, arch, &xtask::workspace_root())
            } else {
                pktrace_vm::vm_test(&options)
            }
        }
        Task::Test => runner::test_all(),
        Task::Dist { arch } => {
            let targets = arch
                .iter()
                .map(|a| match a.as_str() {
                    "x86_64" => Ok(xtask::dist::X86_64),
                    "aarch64" => Ok(xtask::dist::AARCH64),
                    other => Err(anyhow::anyhow!(
                        "unknown --arch {other}: use x86_64 or aarch64"
                    )),
                })
                .collect::<Result<Vec<_>>>()?;
            xtask::dist::dist(&targets)
        }
        Task::DeployCheck => xtask::deploy::check(),
        Task::Fuzz { targets, seconds } => xtask::fuzz::fuzz(&targets, seconds),
        Task::Bench {
            short,
            runs,
            seconds,
            no_write,
            only,
            baseline,
            variants,
            soak,
        } => pktrace_bench::bench(&pktrace_bench::BenchOptions {
            short,
            runs: runs.and_then(|n| usize::try_from(n).ok()),
            seconds,
            no_write,
            only: only
                .as_deref()
                .map(pktrace_bench::Phases::parse)
                .transpose()?,
            baseline,
            variants,
            soak: soak.options()?,
        }),
    }
}

fn parse_bench_variant(spec: &str) -> Result<pktrace_bench::Variant, String> {
    pktrace_bench::Variant::parse(spec).map_err(|e| format!("{e:#}"))
}

fn parse_variant(name: &str) -> Result<lab::Variant, String> {
    lab::Variant::from_name(name).ok_or_else(|| {
        let all: Vec<&str> = lab::VARIANTS.iter().map(|v| v.name()).collect();
        format!("unknown variant '{name}': use one of {}", all.join(", "))
    })
}

fn run_lab(action: LabAction) -> Result<()> {
    match action {
        LabAction::Up {
            variant,
            nodes,
            dual_stack,
        } => match (nodes, dual_stack) {
            (2, true) => lab::up_two_nodes_dual_stack(variant),
            (_, true) => lab::up_nodes(variant, nodes).and_then(|()| lab::up_dual_stack(variant)),
            _ => lab::up_nodes(variant, nodes),
        },
        LabAction::Down => lab::down(),
        LabAction::Status => {
            let text = lab::status()?.to_string();
            // `lab status | head` closes the pipe early: that is not an error.
            match std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        LabAction::Pod {
            action: PodAction::Add { name },
        } => lab::pods::add(&name).map(drop),
        LabAction::Pod {
            action: PodAction::Del { name },
        } => lab::pods::del(&name).map(drop),
        LabAction::Serve {
            tcp,
            udp,
            bind,
            log,
            ready_file,
        } => lab::serve::serve(tcp, udp, bind, &log, ready_file.as_deref()),
        LabAction::ServeApi {
            port,
            pods,
            ready_file,
        } => lab::api::serve(port, &pods, ready_file.as_deref()),
        LabAction::Client {
            tcp,
            udp,
            timeout_ms,
            hold_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            let reply = match (tcp, udp) {
                (Some(addr), _) => {
                    lab::client::tcp_holding(addr, timeout, Duration::from_millis(hold_ms))?
                }
                (None, Some(addr)) => lab::client::udp(addr, timeout)?,
                (None, None) => unreachable!("clap requires --tcp or --udp"),
            };
            println!("{reply}");
            Ok(())
        }
    }
}
