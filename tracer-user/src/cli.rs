//! Command-line arguments (clap derive): the CLI contract of DESIGN.md ([`Args`]), parsed but
//! not yet checked (`config::Config` turns them into settings), plus what is not
//! tracing: `pktrace merge` ([`Command`]) and the hidden `--generate` used for packaging
//! ([`GenerateCli`], kept out of [`Cli`] so that completions and the man page never offer it).
//!
//! [`parse`] is the front door: clap's errors said in pktrace's words ([`usage`]); the help
//! texts are in [`help`].

use std::{path::PathBuf, time::Duration};

use clap::{ArgAction, CommandFactory as _, Parser, Subcommand, ValueEnum};

pub mod help;
pub mod plugin;
pub mod usage;

pub use usage::{Parsed, Refusal, parse};

#[cfg(test)]
mod front_door_tests;

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

/// Most bytes of a frame `-w` keeps (`-s 0` means this many, as tcpdump's `-s 0` means all).
pub const SNAPLEN_MAX: u32 = 256;

const TRACE: &str = "What to trace";
const SHOW: &str = "What to show";
const HOW_LONG: &str = "How long";
const CAPTURE: &str = "Capture to a pcapng file";
const ADVANCED: &str = "Advanced";

/// Trace a Kubernetes pod's packets step by step through the node.
///
/// Every packet of the pod is followed through the node: tc on the pod's veth, the bridge
/// and the uplink, and every NAT change (kube-proxy DNAT, MASQUERADE) with the rule that made
/// it. A drop ends with the kernel's reason.
#[derive(Debug, Parser)]
#[command(name = "pktrace", version = VERSION, override_usage = USAGE)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(disable_help_subcommand = true)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Cli {
    #[command(flatten)]
    pub trace: Args,

    #[command(subcommand)]
    pub command: Option<Command>,

    /// Print help (-h: a summary; --help: all of it).
    #[arg(short = 'h', long = "help", action = ArgAction::Help, help_heading = "Help")]
    help: Option<bool>,

    /// Print the version, the commit and the eBPF object's hash.
    #[arg(short = 'V', long = "version", action = ArgAction::Version, help_heading = "Help")]
    version: Option<bool>,
}

/// The synopsis: the ways to name what to trace first, as the CLI contract writes them.
pub const USAGE: &str = "\
pktrace [--pod NAME | --pod-ip IP... | --svc NAME] [-n NAMESPACE]
               [OPTIONS] [EXPRESSION]
       pktrace merge [NODE=]FILE...";

/// The clap definition of `pktrace` with its help texts: what `--help`, the man page and the
/// completions are made from.
#[must_use]
pub fn command() -> clap::Command {
    Cli::command()
        .after_help(help::SHORT_AFTER)
        .after_long_help(help::long_after())
}

/// `pktrace --generate WHAT` (packaging): a command line of its own, so that the completions
/// and the man page made from [`Cli`] do not offer it.
#[derive(Debug, Parser)]
#[command(name = "pktrace")]
pub struct GenerateCli {
    /// Print a man page or shell completions on stdout (packaging: `cargo xtask dist`).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub generate: Generate,
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
#[command(after_help = help::MERGE)]
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

/// The tracing command line (the CLI contract). Declared in the order `--help` shows it,
/// under the headings a user looks for: what to trace, what to show (the on-call flags
/// first), how long, capture, advanced.
#[derive(Clone, Debug, Parser)]
#[command(name = "pktrace", version = VERSION)]
pub struct Args {
    /// Pod to trace (in namespace -n).
    ///
    /// Resolved through the Azure CNI state file, then crictl, then the Kubernetes API.
    #[arg(long, value_name = "NAME", conflicts_with = "pod_ip", help_heading = TRACE)]
    pub pod: Option<String>,

    /// Namespace of --pod or --svc, as in kubectl.
    ///
    /// Not tcpdump's -n: pktrace never looks names up, so it needs no -n or -nn.
    #[arg(short = 'n', long, value_name = "NAMESPACE", default_value = "default")]
    #[arg(help_heading = TRACE)]
    pub namespace: String,

    /// Addresses to trace instead of a pod.
    ///
    /// Several after the flag, the flag repeated, or separated with commas; the first word
    /// after them that is not an address starts the EXPRESSION.
    #[arg(long = "pod-ip", value_name = "IP", num_args = 1.., action = ArgAction::Append)]
    #[arg(help_heading = TRACE)]
    pub pod_ip: Vec<String>,

    /// Service to trace: its ClusterIP, external IPs and endpoints.
    ///
    /// Its ClusterIP, external and LoadBalancer IPs and its endpoints, read from kube-proxy's
    /// rules on the node, else the Kubernetes API, and followed while its endpoints change.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["pod", "pod_ip"])]
    #[arg(help_heading = TRACE)]
    pub svc: Option<String>,

    /// Every IP packet on the hooks, not only one pod's (debugging, benchmarks).
    ///
    /// Then --pod, --pod-ip and --svc are optional.
    #[arg(long, help_heading = TRACE)]
    pub trace_all: bool,

    /// Only the journeys that match this tcpdump filter, e.g. udp port 53.
    ///
    /// A journey is shown when one of its steps matches, before or after NAT. tcpdump syntax:
    /// host, net, port, portrange, src, dst, tcp, udp, icmp, icmp6, ip, ip6, proto, and, or,
    /// not, parentheses; the words are joined with spaces.
    #[arg(value_name = "EXPRESSION", help_heading = TRACE)]
    pub expression: Vec<String>,

    /// Only failures: drops, with the kernel's reason, and connections with no answer.
    ///
    /// A drop: the kernel freed the packet (a closed port, a DROP or REJECT rule, no route),
    /// shown with its reason and where it happened. No answer: a connection whose first
    /// packet left the node and got no reply in 3 s.
    #[arg(long, help_heading = SHOW)]
    pub failures: bool,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    #[arg(help_heading = SHOW)]
    pub output: Format,

    /// Colour the text output (and --help).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorWhen::Auto)]
    #[arg(help_heading = SHOW)]
    pub color: ColorWhen,

    /// More diagnostics on stderr (repeat for more).
    #[arg(short = 'v', long, action = ArgAction::Count, help_heading = SHOW)]
    pub verbose: u8,

    /// Stream until Ctrl-C (without -f, -c or -d: 10 s).
    ///
    /// Streams journeys until Ctrl-C or SIGTERM, or until -c or -d is reached. Without it,
    /// and without -c and -d, pktrace traces for 10 s, prints the summary and exits.
    #[arg(short = 'f', long, help_heading = HOW_LONG)]
    pub follow: bool,

    /// Stop after N journeys.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = parse_count)]
    #[arg(help_heading = HOW_LONG)]
    pub count: Option<u64>,

    /// Stop after DURATION: 500ms, 10s, 2m, 1h or a bare number of seconds.
    #[arg(short = 'd', long = "duration", value_name = "DURATION", value_parser = parse_duration)]
    #[arg(help_heading = HOW_LONG)]
    pub duration: Option<Duration>,

    /// Write the shown journeys' frames to a pcapng FILE (- for stdout).
    ///
    /// A packet per tc step, on an interface named after the hook (`azv47c3ee9d512
    /// ingress`), its comment the journey (its id, the step, the pod, each NAT change and its
    /// rule). With `-w -` the text or JSON goes nowhere and the summary to stderr.
    #[arg(short = 'w', long = "write", value_name = "FILE", help_heading = CAPTURE)]
    pub write: Option<PathBuf>,

    /// Bytes of each frame -w keeps: 1 to 256, 0 for 256.
    #[arg(
        short = 's',
        long,
        value_name = "N",
        requires = "write",
        default_value_t = 128
    )]
    #[arg(value_parser = parse_snaplen, help_heading = CAPTURE)]
    pub snaplen: u32,

    /// Interfaces to attach to: comma-separated names and globs.
    ///
    /// Names and globs (`*`, `?`). Default: eth0,azure0,azv*, plus cbr0,veth* when cbr0
    /// exists (kubenet) and cali* when cali interfaces exist (Calico).
    #[arg(short = 'i', long, value_name = "LIST", value_delimiter = ',')]
    #[arg(help_heading = ADVANCED)]
    pub interfaces: Option<Vec<String>>,

    /// How to observe NAT: auto picks the best the kernel offers.
    #[arg(long, value_enum, value_name = "HOOK", default_value_t = NatHook::Auto)]
    #[arg(help_heading = ADVANCED)]
    pub nat_hook: NatHook,

    /// Azure CNI state file, the first place --pod is looked up.
    ///
    /// Then crictl, then the Kubernetes API.
    #[arg(long, value_name = "PATH", default_value = "/var/run/azure-vnet.json")]
    #[arg(help_heading = ADVANCED)]
    pub state_file: PathBuf,

    /// Kubeconfig for looking up --pod and --svc in the Kubernetes API.
    ///
    /// Used when neither the state file nor crictl knows the pod. Default: $KUBECONFIG, the
    /// kubelet's kubeconfig, ~/.kube/config, then the service account in a pod.
    #[arg(long, value_name = "PATH", help_heading = ADVANCED)]
    pub kubeconfig: Option<PathBuf>,

    /// File to create once every hook is attached (for scripts and tests).
    #[arg(long, value_name = "PATH", help_heading = ADVANCED)]
    pub ready_file: Option<PathBuf>,
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

/// Parses `-c N`: a count of journeys, at least 1.
///
/// # Errors
/// A message for clap (usage error, exit 2) that says what to give instead.
pub fn parse_count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err(
            "-c 0 would stop before the first journey: give 1 or more (or -f to \
                      stream until Ctrl-C)"
                .to_owned(),
        ),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "'{}' is not a number of journeys: give e.g. -c 20",
            crate::util::safe(text)
        )),
    }
}

/// Parses `-s N`: 1 to [`SNAPLEN_MAX`] bytes, 0 meaning [`SNAPLEN_MAX`] (tcpdump's `-s 0`).
///
/// # Errors
/// A message for clap (usage error, exit 2) that says what to give instead.
pub fn parse_snaplen(text: &str) -> Result<u32, String> {
    let hint = "give 1 to 256 bytes (0 for 256, all pktrace keeps of a frame)";
    match text.trim().parse::<u64>() {
        Ok(0) => Ok(SNAPLEN_MAX),
        Ok(n) => u32::try_from(n)
            .ok()
            .filter(|&n| n <= SNAPLEN_MAX)
            .ok_or_else(|| format!("{n} bytes is more than pktrace keeps: {hint}")),
        Err(_) => Err(format!(
            "'{}' is not a number of bytes: {hint}",
            crate::util::safe(text)
        )),
    }
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
    let shown = crate::util::safe(text);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{shown}' is not a duration: {hint}"))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            let unit = crate::util::safe(unit);
            return Err(format!("unknown unit '{unit}' in '{shown}': {hint}"));
        }
    };
    let ms = n
        .checked_mul(ms_per_unit)
        .ok_or_else(|| format!("'{shown}' is too long: {hint}"))?;
    if ms == 0 {
        return Err(format!("'{shown}' is zero: the duration must be positive"));
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
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // tcpdump's -s, and its -s 0 for all there is.
        let a = parse(&["--pod", "u", "-w", "f", "-s", "0"]).unwrap();
        assert_eq!(a.snaplen, SNAPLEN_MAX);
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
        // Comma lists are split by `config`, which checks every address in them.
        assert_eq!(a.pod_ip, ["10.0.0.1", "fd00::1,10.0.0.2"]);
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
        // No target at all is `config`'s error (it names every way to give one).
        let cases: &[(&[&str], ErrorKind)] = &[
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
        assert!(c.command.is_none());
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
        let cases: &[(&[&str], ErrorKind)] = &[(&["merge"], ErrorKind::MissingRequiredArgument)];
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
        let help = command().render_long_help().to_string();
        assert!(help.contains("traces for 10 s"), "{help}");
    }
}
