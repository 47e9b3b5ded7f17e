//! Command-line arguments (clap derive): the CLI contract of DESIGN.md ([`Args`]), parsed but
//! not yet checked (`config::Config` turns them into settings), plus what is not
//! tracing: `pktrace merge` ([`Command`]) and the hidden `--generate` used for packaging.

use std::{path::PathBuf, time::Duration};

use clap::{ArgAction, Parser, Subcommand, ValueEnum};

/// `--version`: the crate version, the commit it was built from and the SHA-256 of the
/// embedded eBPF object (all stamped by build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PKTRACE_GIT_COMMIT"),
    ", eBPF object sha256:",
    env!("PKTRACE_EBPF_SHA256"),
    ")"
);

/// How long pktrace traces when neither `--follow`, `-c` nor `-d` is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);

const AFTER_HELP: &str = "\
How long it runs:
  without --follow, -c or -d     traces for 10 s, prints the summary and exits
  --follow                       streams until Ctrl-C or SIGTERM (or until -c/-d is reached)
  -c N / -d DURATION             stops after N journeys / after DURATION, whichever comes first
The summary is printed last in every case.

Examples:
  pktrace --pod ubuntu                         10 s of the pod's packets in namespace default
  pktrace --pod web-0 -n shop -f -o json       stream JSON lines until Ctrl-C
  pktrace --pod ubuntu udp port 53             only the pod's DNS packets (tcpdump syntax)
  pktrace --pod ubuntu -o line                 one line per journey
  pktrace --pod-ip 10.13.76.46 -c 20           the first 20 journeys of that address
  pktrace --svc whereami -f                    every packet to service default/whereami
  pktrace --trace-all -d 2s                    every IP packet on the hooks, for 2 seconds
  pktrace merge a=a.jsonl b=b.jsonl            journeys across nodes from each node's -o json

Exit codes: 0 done, 1 runtime error, 2 usage error.";

/// Trace a Kubernetes pod's packets hop by hop through the node: tc on the pod's veth, the
/// bridge and the uplink, and every NAT step (kube-proxy DNAT, MASQUERADE) with the rule that
/// did it.
#[derive(Debug, Parser)]
#[command(name = "pktrace", version = VERSION, after_help = AFTER_HELP)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(disable_help_subcommand = true)]
pub struct Cli {
    #[command(flatten)]
    pub trace: Args,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print a man page or shell completions on stdout (packaging: `cargo xtask dist`).
    #[arg(long, value_enum, value_name = "WHAT", hide = true, exclusive = true)]
    pub generate: Option<Generate>,
}

/// Output format (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A block of lines per journey, for people.
    Text,
    /// One JSON object per line (the JSON lines contract).
    Json,
    /// One line per journey (time, protocol, the packet in and out, interfaces, total time,
    /// each NAT step's rule), then the text summary.
    Line,
}

/// How NAT steps are observed (`--nat-hook`); see DESIGN.md "NAT observation".
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NatHook {
    /// The best the running kernel offers.
    Auto,
    /// BPF netfilter links around the nat hooks (kernel ≥ 6.4).
    Netfilter,
    /// Conntrack events over netlink, joined in user space (no in-kernel timing).
    Conntrack,
    /// kprobe/kretprobe on `nf_nat_manip_pkt`.
    Kprobe,
    /// fentry/fexit on `nf_nat_manip_pkt` (kernel ≥ 5.5 with BTF).
    Fentry,
}

/// What `pktrace` does besides tracing.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Merge `-o json` output of several nodes into journeys that cross nodes.
    Merge(MergeArgs),
}

/// `pktrace merge` arguments.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = MERGE_HELP)]
pub struct MergeArgs {
    /// JSON lines of `pktrace -o json` from each node: `NODE=FILE`, or `FILE` for a node named
    /// after the file (`aks-node-1.jsonl` is node `aks-node-1`).
    #[arg(value_name = "[NODE=]FILE", required = true, num_args = 1..)]
    pub inputs: Vec<String>,

    /// Interfaces that connect the nodes (comma-separated names and globs).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "eth0"
    )]
    pub uplink: Vec<String>,

    /// Longest one-way delay between nodes to accept once the clocks are aligned.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    #[arg(value_parser = parse_duration)]
    pub max_delay: Duration,
}

const MERGE_HELP: &str = "\
Record on each node with pktrace ... -o json > NODE.jsonl (trace the same addresses on every
node, e.g. --pod-ip with both pods' IPs), then merge. A journey leaving a node on an uplink
(last step egress on eth0) is joined to the journey entering another node on its uplink with
the same packet (protocol, src, dst, IP id). Clocks are aligned from the packets crossing both
ways (NTP-style); wall clocks are not used.

Output: one JSON line per journey, steps with a `node` field, `t_ns` on the aligned clock,
`wire_ns` on the first step of each later node; a {\"type\":\"merge\",...} line last.";

/// What `--generate` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    /// pktrace.1
    Man,
    /// pktrace-merge.1
    ManMerge,
    /// Completions for bash.
    Bash,
    /// Completions for zsh.
    Zsh,
    /// Completions for fish.
    Fish,
}

/// The tracing command line (the CLI contract).
#[derive(Clone, Debug, Parser)]
#[command(name = "pktrace", version = VERSION, after_help = AFTER_HELP)]
pub struct Args {
    /// Pod to trace, resolved through the Azure CNI state file.
    #[arg(long, value_name = "NAME", conflicts_with = "pod_ip")]
    #[arg(required_unless_present_any = ["pod_ip", "trace_all", "svc"])]
    pub pod: Option<String>,

    /// Kubernetes service to trace: its ClusterIP, external and LoadBalancer IPs and its
    /// endpoints (read from kube-proxy's rules on the node, else the Kubernetes API), followed
    /// while its endpoints change.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["pod", "pod_ip"])]
    pub svc: Option<String>,

    /// Namespace of --pod or --svc.
    #[arg(short = 'n', long, value_name = "NAMESPACE", default_value = "default")]
    pub namespace: String,

    /// Trace these addresses instead of a pod (several after the flag, the flag repeated, or
    /// separated with commas); the first word after them that is not an address starts the
    /// EXPRESSION.
    #[arg(long = "pod-ip", value_name = "IP", num_args = 1.., value_delimiter = ',')]
    #[arg(action = ArgAction::Append)]
    pub pod_ip: Vec<String>,

    /// Stream journeys until Ctrl-C or SIGTERM (or -c/-d); without it, and without -c/-d,
    /// pktrace traces for 10 s and exits.
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Stop after N journeys.
    #[arg(short = 'c', long = "count", value_name = "N")]
    #[arg(value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Stop after DURATION: 500ms, 10s, 2m, 1h or a bare number of seconds.
    #[arg(short = 'd', long = "duration", value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Output format: text for people, json for one JSON object per line, line for one line
    /// per journey.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,

    /// Write the frames of the shown journeys to a pcapng FILE (`-` for stdout, then text or
    /// JSON go nowhere and the summary to stderr): a packet per tc step, on an interface named
    /// after the hook (`azv47c3ee9d512 ingress`), its comment the journey (id, the step's
    /// place, the pod, each NAT change and its rule).
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub write: Option<PathBuf>,

    /// Bytes of each frame -w keeps, 1 to 256.
    #[arg(long, value_name = "N", requires = "write", default_value_t = 128)]
    #[arg(value_parser = clap::value_parser!(u32).range(1..=256))]
    pub snaplen: u32,

    /// Interfaces to attach tc programs to: comma-separated names and globs (`*`, `?`)
    /// [default: eth0,azure0,azv*, plus cbr0,veth* when cbr0 exists (kubenet) and cali* when
    /// cali interfaces exist (Calico)].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub interfaces: Option<Vec<String>>,

    /// Azure CNI state file used to resolve --pod (first; then crictl, then the Kubernetes
    /// API).
    #[arg(long, value_name = "PATH", default_value = "/var/run/azure-vnet.json")]
    pub state_file: PathBuf,

    /// Kubeconfig used to resolve --pod through the Kubernetes API when neither the state
    /// file nor crictl knows it (default: $KUBECONFIG, the kubelet's kubeconfig,
    /// ~/.kube/config, then the service account in a pod).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// File to create once every hook is attached (for scripts and tests).
    #[arg(long, value_name = "PATH")]
    pub ready_file: Option<PathBuf>,

    /// Colour the text output: auto (when stdout is a terminal and `NO_COLOR` is unset).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    pub color: ColorWhen,

    /// More diagnostics on stderr (repeat for more).
    #[arg(short = 'v', long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Emit every IP packet on the hooks, not only the pod's (benchmarks, debugging); then
    /// --pod and --pod-ip are optional.
    #[arg(long)]
    pub trace_all: bool,

    /// Show only journeys that ended in a drop (the kernel freed the packet: a closed port, a
    /// DROP or REJECT rule, no route), with the kernel's reason and where it happened, and
    /// connections whose first packet left the node and got no answer in 3 s.
    #[arg(long)]
    pub failures: bool,

    /// How to observe NAT: auto picks the best the kernel offers.
    #[arg(long, value_enum, value_name = "HOOK", default_value_t = NatHook::Auto)]
    pub nat_hook: NatHook,

    /// Show only journeys of which a step matches this filter, before or after NAT (tcpdump
    /// syntax: host, net, port, portrange, src, dst, tcp, udp, icmp, icmp6, ip, ip6, proto,
    /// and, or, not, parentheses); the words are joined with spaces: `udp port 53`.
    #[arg(value_name = "EXPRESSION")]
    pub expression: Vec<String>,
}

/// When to colour the text output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    /// When stdout is a terminal and `NO_COLOR` is not set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Parses `500ms`, `10s`, `2m`, `1h` or a bare number of seconds into a positive duration.
///
/// # Errors
/// A message for clap (usage error, exit 2) when the text is not such a duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let hint = "use e.g. 500ms, 10s, 2m, 1h or a number of seconds";
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration: {hint}"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit '{unit}' in '{text}': {hint}")),
    };
    let ms = n
        .checked_mul(ms_per_unit)
        .ok_or_else(|| format!("'{text}' is too long"))?;
    if ms == 0 {
        return Err(format!("'{text}' is zero: the duration must be positive"));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, error::ErrorKind};

    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("pktrace").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    #[expect(
        clippy::cast_possible_truncation,
        reason = "test durations, milliseconds far below 2^64"
    )]
    fn durations() {
        let cases: &[(&str, Option<u64>)] = &[
            ("500ms", Some(500)),
            ("10s", Some(10_000)),
            ("2m", Some(120_000)),
            ("1h", Some(3_600_000)),
            ("7", Some(7_000)),
            (" 3s ", Some(3_000)),
            ("0", None),
            ("0ms", None),
            ("", None),
            ("s", None),
            ("1.5s", None),
            ("10d", None),
            ("-1s", None),
            ("99999999999999999999h", None),
            ("18446744073709551615h", None),
        ];
        for (text, want) in cases {
            let got = parse_duration(text).ok().map(|d| d.as_millis() as u64);
            assert_eq!(got, *want, "{text:?}");
        }
    }

    #[test]
    fn write_and_snaplen() {
        let a = parse(&["--pod", "u", "-w", "out.pcapng"]).unwrap();
        assert_eq!(
            (a.write, a.snaplen),
            (Some(PathBuf::from("out.pcapng")), 128)
        );
        let a = parse(&["--pod", "u", "-w", "-", "--snaplen", "256"]).unwrap();
        assert_eq!((a.write, a.snaplen), (Some(PathBuf::from("-")), 256));
        for bad in [
            &["--pod", "u", "--snaplen", "64"][..],
            &["--pod", "u", "-w", "f", "--snaplen", "257"],
            &["--pod", "u", "-w", "f", "--snaplen", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn accepted_command_lines() {
        let a = parse(&["--pod", "ubuntu"]).unwrap();
        assert_eq!(a.pod.as_deref(), Some("ubuntu"));
        assert_eq!(a.namespace, "default");
        assert_eq!(
            a.interfaces, None,
            "chosen at run time from the node's interfaces"
        );
        assert_eq!(a.state_file, PathBuf::from("/var/run/azure-vnet.json"));
        assert_eq!(
            (a.output, a.color, a.nat_hook),
            (Format::Text, ColorWhen::Auto, NatHook::Auto)
        );
        assert!(!a.follow && a.count.is_none() && a.duration.is_none() && a.ready_file.is_none());

        let a = parse(&["--pod-ip", "10.0.0.1", "--pod-ip", "fd00::1,10.0.0.2", "-f"]).unwrap();
        assert_eq!(a.pod_ip.len(), 3);
        assert!(a.follow);

        let a = parse(&[
            "--pod", "web", "-n", "shop", "-c", "5", "-d", "2m", "-o", "json",
        ])
        .unwrap();
        assert_eq!(
            (a.namespace.as_str(), a.count, a.output),
            ("shop", Some(5), Format::Json)
        );
        assert_eq!(a.duration, Some(Duration::from_mins(2)));

        let a = parse(&[
            "--trace-all",
            "-vv",
            "--nat-hook",
            "kprobe",
            "--color",
            "never",
        ])
        .unwrap();
        assert!(a.trace_all);
        assert_eq!(
            (a.verbose, a.nat_hook, a.color),
            (2, NatHook::Kprobe, ColorWhen::Never)
        );

        let a = parse(&[
            "--pod",
            "x",
            "--interfaces",
            "eth0,cali*",
            "--ready-file",
            "/tmp/r",
        ])
        .unwrap();
        assert_eq!(
            a.interfaces.as_deref(),
            Some(&["eth0".to_owned(), "cali*".to_owned()][..])
        );
        assert_eq!(a.ready_file, Some(PathBuf::from("/tmp/r")));
    }

    #[test]
    fn usage_errors() {
        let cases: &[(&[&str], ErrorKind)] = &[
            (&[], ErrorKind::MissingRequiredArgument),
            (&["-n", "kube-system"], ErrorKind::MissingRequiredArgument),
            (
                &["--pod", "a", "--pod-ip", "10.0.0.1"],
                ErrorKind::ArgumentConflict,
            ),
            (&["--svc", "a", "--pod", "b"], ErrorKind::ArgumentConflict),
            (
                &["--svc", "a", "--pod-ip", "10.0.0.1"],
                ErrorKind::ArgumentConflict,
            ),
            (&["--pod", "a", "-c", "0"], ErrorKind::ValueValidation),
            (&["--pod", "a", "-d", "soon"], ErrorKind::ValueValidation),
            (&["--pod", "a", "-o", "yaml"], ErrorKind::InvalidValue),
            (
                &["--pod", "a", "--nat-hook", "ebpf"],
                ErrorKind::InvalidValue,
            ),
            (
                &["--pod", "a", "--color", "sometimes"],
                ErrorKind::InvalidValue,
            ),
            (&["--pod", "a", "--bogus"], ErrorKind::UnknownArgument),
        ];
        for (args, kind) in cases {
            let err = parse(args).expect_err(&format!("{args:?} should fail"));
            assert_eq!(err.kind(), *kind, "{args:?}: {err}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    fn parse_cli(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pktrace").chain(args.iter().copied()))
    }

    #[test]
    fn the_whole_command_line_keeps_the_contract() {
        Cli::command().debug_assert();
        let c = parse_cli(&["--pod", "ubuntu", "-n", "shop", "-f", "-o", "json"]).unwrap();
        assert!(c.command.is_none() && c.generate.is_none());
        assert_eq!(
            (c.trace.pod.as_deref(), c.trace.namespace.as_str()),
            (Some("ubuntu"), "shop")
        );
        // A pod may be called like the subcommand.
        let c = parse_cli(&["--pod", "merge"]).unwrap();
        assert_eq!(c.trace.pod.as_deref(), Some("merge"));
        assert!(c.command.is_none());

        let c = parse_cli(&["merge", "a=x.jsonl", "y.jsonl", "--uplink", "eth0,eth1"]).unwrap();
        let Some(Command::Merge(m)) = c.command else {
            panic!("merge expected")
        };
        assert_eq!(m.inputs, ["a=x.jsonl", "y.jsonl"]);
        assert_eq!(
            (m.uplink.as_slice(), m.max_delay),
            (
                &["eth0".to_owned(), "eth1".to_owned()][..],
                Duration::from_secs(1)
            )
        );

        assert_eq!(
            parse_cli(&["--generate", "man"]).unwrap().generate,
            Some(Generate::Man)
        );
        // After the options, words are the filter expression (checked by `config`), even a
        // subcommand's name.
        let c = parse_cli(&["--pod", "a", "merge", "x"]).unwrap();
        assert!(c.command.is_none());
        assert_eq!(c.trace.expression, ["merge", "x"]);
        let c = parse_cli(&["--pod-ip", "10.0.0.1", "udp", "port", "53"]).unwrap();
        // `--pod-ip` takes the words up to the next option; `config` tells the addresses from
        // the expression.
        assert_eq!((c.trace.pod_ip.len(), c.trace.expression.len()), (4, 0));
        let c = parse_cli(&["--pod", "a", "udp", "port", "53", "-c", "5"]).unwrap();
        assert_eq!(
            (c.trace.expression.join(" ").as_str(), c.trace.count),
            ("udp port 53", Some(5))
        );
        let cases: &[(&[&str], ErrorKind)] = &[
            (&[], ErrorKind::MissingRequiredArgument),
            (&["merge"], ErrorKind::MissingRequiredArgument),
            (
                &["--generate", "man", "--pod", "a"],
                ErrorKind::ArgumentConflict,
            ),
            (&["--generate", "pdf"], ErrorKind::InvalidValue),
            (&["help"], ErrorKind::MissingRequiredArgument),
        ];
        for (args, kind) in cases {
            let err = parse_cli(args).expect_err(&format!("{args:?} should fail"));
            assert_eq!(err.kind(), *kind, "{args:?}: {err}");
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
        let version = Cli::command().render_version();
        assert!(
            version.starts_with(&format!("pktrace {} (commit ", env!("CARGO_PKG_VERSION"))),
            "{version}"
        );
        assert!(
            version.contains("eBPF object sha256:") && version.len() > 80,
            "{version}"
        );
    }

    #[test]
    fn help_documents_the_default_run_time() {
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("traces for 10 s"), "{help}");
    }
}
