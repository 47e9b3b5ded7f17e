//! Checked settings made from the command line ([`crate::cli::Args`]): what to trace, when to
//! stop, how to print, where to attach.

use std::{net::IpAddr, path::PathBuf, time::Duration};

mod knobs;

pub use knobs::{
    BATCH_BYTES_ENV, BTF_PATH_ENV, FLOW_TABLE_ENV, FORCE_CLSACT_ENV, FORCE_TCX_ENV, JOIN_BYTES_ENV,
    JOIN_MAX_ENV, KALLSYMS, KALLSYMS_PATH_ENV, Knobs, RING_BYTES_ENV,
};

pub use crate::cli::{Format, NatHook};
use crate::{
    cli::{Args, ColorWhen, DEFAULT_DURATION},
    expr::{Filter, FilterError},
};

/// Longest interface name Linux accepts (`IFNAMSIZ` - 1).
const IFNAME_MAX: usize = 15;

/// Whose packets to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A pod, resolved later ([`crate::resolve`]).
    Pod { namespace: String, name: String },
    /// A Kubernetes service (`--svc`), resolved later ([`crate::services`]).
    Service { namespace: String, name: String },
    /// These addresses (`--pod-ip`), without duplicates.
    Ips(Vec<IpAddr>),
    /// Every IP packet on the hooks (`--trace-all` without a pod).
    All,
}

/// When to stop; `None` everywhere means until Ctrl-C/SIGTERM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Stop after this many journeys.
    pub count: Option<u64>,
    /// Stop after this long (10 s when neither `--follow`, `-c` nor `-d` was given).
    pub duration: Option<Duration>,
}

/// Settings checked and ready to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub target: Target,
    pub limits: Limits,
    /// `--follow` was given (streaming run).
    pub follow: bool,
    pub format: Format,
    /// Whether to write ANSI colours (resolved from `--color`, the terminal and `NO_COLOR`).
    pub color: bool,
    /// Interface names and globs to attach to (`--interfaces`); `None`: chosen from the
    /// node's interfaces at start.
    pub interfaces: Option<Vec<String>>,
    pub state_file: PathBuf,
    /// `--kubeconfig`, for resolving `--pod` through the Kubernetes API.
    pub kubeconfig: Option<PathBuf>,
    pub ready_file: Option<PathBuf>,
    pub nat_hook: NatHook,
    pub verbose: u8,
    /// Emit every IP packet, not only the target's.
    pub trace_all: bool,
    /// The filter expression: only journeys it matches are shown.
    pub filter: Option<Filter>,
    /// `-w`: where the pcapng goes and how much of each frame.
    pub capture: Option<Capture>,
    /// Which journeys are shown (`--failures`).
    pub show: Show,
    /// The hidden knobs of the environment, read once here.
    pub knobs: Knobs,
}

/// `-w FILE [--snaplen N]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capture {
    /// `None` for `-w -` (stdout).
    pub path: Option<PathBuf>,
    /// Bytes of each frame kept, 1 to `tracer_common::FRAME_MAX`.
    pub snaplen: u32,
}

/// Which journeys are shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Show {
    /// Every journey.
    #[default]
    All,
    /// `--failures`: only journeys that ended in a drop (connections without an answer are
    /// shown either way).
    Failures,
}

/// A setting that clap accepted but pktrace cannot use (a usage error: exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `--pod ""`, `--svc ""` or `-n ""`.
    #[error("the {what} is empty: give --pod NAME or --svc NAME [-n NAMESPACE]")]
    EmptyName { what: &'static str },
    /// `--interfaces ""`.
    #[error("-i/--interfaces lists no interface: give names or globs, e.g. -i eth0,azure0,azv*")]
    NoInterfaces,
    /// An interface pattern Linux could never match.
    #[error("-i/--interfaces: '{pattern}' {reason}")]
    BadInterface {
        pattern: String,
        reason: &'static str,
    },
    /// `--pod-ip` followed by a word that is not an address (or a comma-separated list with
    /// one).
    #[error(
        "--pod-ip: '{}' is not an IP address: give IPv4 or IPv6 addresses (kubectl get pod -o \
         wide shows a pod's)",
        crate::util::safe(.0)
    )]
    BadPodIp(String),
    /// Nothing to trace: no `--pod`, `--pod-ip`, `--svc` or `--trace-all`; `word` is a lone
    /// word that was taken as the expression (maybe a pod's name).
    #[error("{}", no_target_message(.word.as_deref()))]
    NoTarget { word: Option<String> },
    /// The filter expression does not parse or matches nothing.
    #[error(transparent)]
    Expression(#[from] FilterError),
}

impl Config {
    /// Checks the arguments; `is_tty` says whether stdout is a terminal (for `--color auto`),
    /// and the `NO_COLOR` environment variable is honoured. The hidden knobs ([`Knobs`]) are
    /// read from the environment here, the only place they are read.
    ///
    /// # Errors
    /// [`ConfigError`] for settings that cannot work; all are usage errors.
    pub fn from_args(args: Args, is_tty: bool) -> Result<Self, ConfigError> {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self::build(args, is_tty, no_color, Knobs::from_env())
    }

    fn build(args: Args, is_tty: bool, no_color: bool, knobs: Knobs) -> Result<Self, ConfigError> {
        if args.pod.is_none() && args.pod_ip.is_empty() && args.svc.is_none() && !args.trace_all {
            return Err(no_target(&args.expression));
        }
        let interfaces = args.interfaces.map(check_interfaces).transpose()?;
        let (ips, expression) = split_pod_ip(args.pod_ip, args.expression)?;
        let filter = Filter::parse(&expression)?;
        Ok(Self {
            target: match args.svc {
                Some(name) => service_target(&name, &args.namespace)?,
                None => target(args.pod, &args.namespace, ips)?,
            },
            limits: limits(args.follow, args.count, args.duration),
            follow: args.follow,
            format: args.output,
            color: match args.color {
                ColorWhen::Always => true,
                ColorWhen::Never => false,
                ColorWhen::Auto => is_tty && !no_color,
            },
            interfaces,
            state_file: args.state_file,
            kubeconfig: args.kubeconfig,
            ready_file: args.ready_file,
            nat_hook: args.nat_hook,
            show: if args.failures {
                Show::Failures
            } else {
                Show::All
            },
            verbose: args.verbose,
            trace_all: args.trace_all,
            filter,
            capture: args.write.map(|w| Capture {
                path: (w.as_os_str() != "-").then_some(w),
                snaplen: args.snaplen,
            }),
            knobs,
        })
    }
}

fn target(pod: Option<String>, namespace: &str, ips: Vec<IpAddr>) -> Result<Target, ConfigError> {
    if let Some(name) = pod {
        let name = name.trim().to_owned();
        let namespace = namespace.trim().to_owned();
        if name.is_empty() {
            return Err(ConfigError::EmptyName { what: "pod name" });
        }
        if namespace.is_empty() {
            return Err(ConfigError::EmptyName { what: "namespace" });
        }
        return Ok(Target::Pod { namespace, name });
    }
    let mut unique: Vec<IpAddr> = Vec::with_capacity(ips.len());
    for ip in ips {
        if !unique.contains(&ip) {
            unique.push(ip);
        }
    }
    Ok(if unique.is_empty() {
        Target::All
    } else {
        Target::Ips(unique)
    })
}

/// The addresses `--pod-ip` took, and the expression: `--pod-ip` takes every word up to the
/// next option, so the first of its words that is not an address (`udp` in `--pod-ip 10.0.0.1
/// udp port 53`) and those after it are the start of the expression.
fn split_pod_ip(
    words: Vec<String>,
    expression: Vec<String>,
) -> Result<(Vec<IpAddr>, Vec<String>), ConfigError> {
    let mut ips = Vec::new();
    let mut rest = words.into_iter();
    let mut leading = Vec::new();
    for word in rest.by_ref() {
        // A comma-separated list is meant as addresses, every one of them.
        if word.contains(',') {
            for part in word.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                ips.push(
                    part.parse::<IpAddr>()
                        .map_err(|_| ConfigError::BadPodIp(part.to_owned()))?,
                );
            }
            continue;
        }
        if let Ok(ip) = word.trim().parse::<IpAddr>() {
            ips.push(ip);
            continue;
        }
        if ips.is_empty() {
            return Err(ConfigError::BadPodIp(word));
        }
        leading.push(word);
        break;
    }
    leading.extend(rest);
    leading.extend(expression);
    Ok((ips, leading))
}

/// What to say when nothing names what to trace: every way to name it, and for a lone word
/// taken as the expression (`pktrace ubuntu`) the option it was probably meant for.
fn no_target(expression: &[String]) -> ConfigError {
    let word = match expression {
        [word] => Some(word.trim().to_owned()),
        _ => None,
    };
    ConfigError::NoTarget { word }
}

fn no_target_message(word: Option<&str>) -> String {
    let ways = "say what to trace: --pod NAME [-n NAMESPACE], --pod-ip IP, --svc NAME [-n \
                NAMESPACE], or --trace-all for every packet";
    let Some(word) = word else {
        return format!("nothing to trace: {ways}");
    };
    let shown = crate::util::safe(word);
    if word == "help" {
        return format!("nothing to trace: for help, write pktrace --help (or -h); {ways}");
    }
    if word.parse::<IpAddr>().is_ok() {
        return format!("nothing to trace: for address {shown}, write --pod-ip {shown}; {ways}");
    }
    let pod_name = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if pod_name {
        format!(
            "nothing to trace: '{shown}' was read as a filter expression; if it is a pod, \
             write --pod {shown}; {ways}"
        )
    } else {
        format!("nothing to trace: {ways}")
    }
}

fn service_target(name: &str, namespace: &str) -> Result<Target, ConfigError> {
    let (name, namespace) = (name.trim().to_owned(), namespace.trim().to_owned());
    if name.is_empty() {
        return Err(ConfigError::EmptyName {
            what: "service name",
        });
    }
    if namespace.is_empty() {
        return Err(ConfigError::EmptyName { what: "namespace" });
    }
    Ok(Target::Service { namespace, name })
}

fn limits(follow: bool, count: Option<u64>, duration: Option<Duration>) -> Limits {
    let duration = match (follow, count, duration) {
        (false, None, None) => Some(DEFAULT_DURATION),
        _ => duration,
    };
    Limits { count, duration }
}

fn check_interfaces(list: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for pattern in list
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
    {
        let reason = if pattern == "any" {
            Some(
                "is tcpdump's every interface; pktrace attaches to the pod interfaces, the \
                 bridge and the uplink by itself: leave -i out, or give names and globs",
            )
        } else if pattern.chars().count() > IFNAME_MAX && !pattern.contains('*') {
            Some("is longer than 15 characters, the longest interface name Linux allows")
        } else if pattern.contains(['/', ' ', ':']) {
            Some("cannot be an interface name ('/', ':' and spaces are not allowed)")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ConfigError::BadInterface { pattern, reason });
        }
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::NoInterfaces);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn config(args: &[&str], is_tty: bool, no_color: bool) -> Result<Config, ConfigError> {
        let args = Args::try_parse_from(std::iter::once("pktrace").chain(args.iter().copied()))
            .expect("clap accepts the test arguments");
        Config::build(args, is_tty, no_color, Knobs::default())
    }

    #[test]
    fn targets() {
        let cases: &[(&[&str], Target)] = &[
            (
                &["--pod", "ubuntu"],
                Target::Pod {
                    namespace: "default".into(),
                    name: "ubuntu".into(),
                },
            ),
            (
                &["--pod", "dns", "-n", "kube-system", "--trace-all"],
                Target::Pod {
                    namespace: "kube-system".into(),
                    name: "dns".into(),
                },
            ),
            (
                &["--pod-ip", "10.0.0.1,10.0.0.1", "--pod-ip", "fd00::1"],
                Target::Ips(vec![
                    "10.0.0.1".parse().unwrap(),
                    "fd00::1".parse().unwrap(),
                ]),
            ),
            (&["--trace-all"], Target::All),
            (
                &["--svc", "whereami"],
                Target::Service {
                    namespace: "default".into(),
                    name: "whereami".into(),
                },
            ),
            (
                &["--svc", "kube-dns", "-n", "kube-system"],
                Target::Service {
                    namespace: "kube-system".into(),
                    name: "kube-dns".into(),
                },
            ),
        ];
        for (args, want) in cases {
            assert_eq!(
                &config(args, false, false).unwrap().target,
                want,
                "{args:?}"
            );
        }
    }

    #[test]
    fn pod_ip_takes_the_addresses_and_the_first_other_word_starts_the_expression() {
        let ips = |c: &Config| match &c.target {
            Target::Ips(ips) => ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let c = config(&["--pod-ip", "10.0.0.1", "fd00::1", "-f"], false, false).unwrap();
        assert_eq!(ips(&c), ["10.0.0.1", "fd00::1"]);
        assert!(c.filter.is_none());
        let c = config(
            &["--pod-ip", "10.0.0.1", "10.0.0.2", "udp", "port", "53"],
            false,
            false,
        )
        .unwrap();
        assert_eq!(ips(&c), ["10.0.0.1", "10.0.0.2"]);
        assert!(c.filter.is_some());
        // An option after the addresses ends them; the expression may follow it.
        let c = config(&["--pod-ip", "10.0.0.1", "-c", "2", "udp"], false, false).unwrap();
        assert_eq!((ips(&c).len(), c.filter.is_some()), (1, true));
        assert_eq!(
            config(&["--pod-ip", "udp", "port", "53"], false, false).unwrap_err(),
            ConfigError::BadPodIp("udp".into())
        );
        assert_eq!(
            config(&["--pod-ip", "10.0.0.300"], false, false).unwrap_err(),
            ConfigError::BadPodIp("10.0.0.300".into())
        );
        // A word that is neither an address nor an expression is the expression's error.
        assert!(matches!(
            config(&["--pod-ip", "10.0.0.1", "10.0.0.300"], false, false).unwrap_err(),
            ConfigError::Expression(_)
        ));
    }

    #[test]
    fn no_target_names_every_way_to_give_one_and_a_bare_word_gets_its_option() {
        let ways = ["--pod NAME", "--pod-ip IP", "--svc NAME", "--trace-all"];
        for (args, hint) in [
            (&[][..], None),
            (&["-n", "kube-system"], None),
            (&["--failures", "-f"], None),
            (&["ubuntu"], Some("if it is a pod, write --pod ubuntu")),
            (&["10.0.0.1"], Some("write --pod-ip 10.0.0.1")),
            (&["help"], Some("for help, write pktrace --help")),
            (&["udp", "port", "53"], None),
        ] {
            let err = config(args, false, false).expect_err(&format!("{args:?}"));
            assert!(
                matches!(err, ConfigError::NoTarget { .. }),
                "{args:?}: {err}"
            );
            let text = err.to_string();
            assert!(text.starts_with("nothing to trace: "), "{text}");
            for way in ways {
                assert!(text.contains(way), "{args:?}: {way} missing: {text}");
            }
            match hint {
                Some(hint) => assert!(text.contains(hint), "{args:?}: {text}"),
                None => assert!(!text.contains("write --"), "{args:?}: {text}"),
            }
        }
    }

    #[test]
    fn pod_ip_lists_and_tcpdump_words_are_refused_with_the_fix() {
        assert_eq!(
            config(&["--pod-ip", "10.0.0.1,foo"], false, false).unwrap_err(),
            ConfigError::BadPodIp("foo".into())
        );
        let c = config(&["--pod-ip", "10.0.0.1,fd00::1", "udp"], false, false).unwrap();
        assert!(matches!(&c.target, Target::Ips(ips) if ips.len() == 2));
        assert!(c.filter.is_some());
        let err = config(&["--pod", "p", "-i", "any"], false, false).unwrap_err();
        assert!(err.to_string().contains("leave -i out"), "{err}");
        let err = ConfigError::BadPodIp("foo".into()).to_string();
        assert!(err.contains("give IPv4 or IPv6 addresses"), "{err}");
    }

    #[test]
    fn limits_default_to_ten_seconds_only_without_follow_count_or_duration() {
        let ten = Some(Duration::from_secs(10));
        let cases: &[(&[&str], Option<u64>, Option<Duration>)] = &[
            (&[], None, ten),
            (&["-f"], None, None),
            (&["-c", "3"], Some(3), None),
            (&["-d", "500ms"], None, Some(Duration::from_millis(500))),
            (&["-f", "-d", "1m"], None, Some(Duration::from_mins(1))),
            (&["-f", "-c", "9"], Some(9), None),
        ];
        for (args, count, duration) in cases {
            let mut all = vec!["--pod", "p"];
            all.extend_from_slice(args);
            let c = config(&all, false, false).unwrap();
            assert_eq!(
                c.limits,
                Limits {
                    count: *count,
                    duration: *duration
                },
                "{args:?}"
            );
        }
    }

    #[test]
    fn colour() {
        let cases = [
            ("auto", true, false, true),
            ("auto", false, false, false),
            ("auto", true, true, false),
            ("always", false, true, true),
            ("never", true, false, false),
        ];
        for (when, tty, no_color, want) in cases {
            let c = config(&["--pod", "p", "--color", when], tty, no_color).unwrap();
            assert_eq!(c.color, want, "{when} tty={tty} NO_COLOR={no_color}");
        }
    }

    #[test]
    fn interfaces_are_checked() {
        let ok = config(
            &["--pod", "p", "--interfaces", " eth0 ,,cali*,eth0"],
            false,
            false,
        );
        assert_eq!(
            ok.unwrap().interfaces,
            Some(vec!["eth0".to_owned(), "cali*".to_owned()])
        );
        assert_eq!(
            config(&["--pod", "p"], false, false).unwrap().interfaces,
            None
        );
        let cases: &[(&[&str], ConfigError)] = &[
            (&["--interfaces", ""], ConfigError::NoInterfaces),
            (&["--interfaces", " , "], ConfigError::NoInterfaces),
            (
                &["--interfaces", "a/b"],
                ConfigError::BadInterface {
                    pattern: "a/b".into(),
                    reason: "",
                },
            ),
            (
                &["--interfaces", "averyveryverylongname"],
                ConfigError::BadInterface {
                    pattern: "averyveryverylongname".into(),
                    reason: "",
                },
            ),
            (&["--pod", " "], ConfigError::EmptyName { what: "pod name" }),
            (&["-n", ""], ConfigError::EmptyName { what: "namespace" }),
        ];
        for (args, want) in cases {
            let mut all = if args.contains(&"--pod") {
                vec![]
            } else {
                vec!["--pod", "p"]
            };
            all.extend_from_slice(args);
            let err = config(&all, false, false).expect_err(&format!("{args:?}"));
            match (&err, want) {
                (
                    ConfigError::BadInterface { pattern: a, .. },
                    ConfigError::BadInterface { pattern: b, .. },
                ) => assert_eq!(a, b),
                _ => assert_eq!(&err, want, "{args:?}"),
            }
            assert!(!err.to_string().is_empty());
        }
    }
}
